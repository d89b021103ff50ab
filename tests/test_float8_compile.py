"""Issue 28, ``--precision fp8 --compile``: torchao 0.18.0's float8 training compiled by inductor on the CPU
(``float8_compile_child.py``) against ``library.fsdp``'s fused cast terms and ``activations``' compiled float8
layer. Skipped where torchao is not installed (``make setup-torch`` installs it) or inductor has no C++ compiler.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import sympy
from helpers import layout_flags, torch_child

from symbolic import planning
from symbolic.core.symbols import B, H, S, a, a_kv, d_ff, d_head
from symbolic.library import activations as acts
from symbolic.library import fsdp
from symbolic.measured import crosscheck
from symbolic.planning import search

pytestmark = pytest.mark.torch

COMPILED = acts.LayerVariant(flash=True, gated=True, dropout=False, compiled=True)


@pytest.fixture(scope="module")
def linears() -> dict:
    return torch_child("float8_compile_child.py", {"what": "linears"})


@pytest.fixture(scope="module")
def saved() -> dict:
    return torch_child("float8_compile_child.py", {"what": "saved"})


@pytest.mark.parametrize("recipe", fsdp.RECIPES)
@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_the_fused_cast_terms_are_one_compiled_linears_measured_extra_over_bf16(linears, recipe, phase):
    """The term, at the tiny Llama's MLP (H 64, d_ff 176), against the worse of its two measured compiled linears,
    at each token count: within 1 %."""
    hidden, width = linears["llama"]["hidden_size"], linears["llama"]["intermediate_size"]
    make = fsdp.fp8_forward_term if phase == "forward" else fsdp.fp8_backward_term
    rows = linears["linears"]
    for tokens in {row["tokens"] for row in rows}:
        extra = max(row[recipe][phase] - row["bf16"][phase] for row in rows if row["tokens"] == tokens)
        term = make(recipe, 1, width, hidden, False, compiled=True)
        assert float(term.expr.subs({B: 1, S: tokens})) == pytest.approx(extra, rel=0.01)


@pytest.mark.parametrize("recipe", fsdp.RECIPES)
def test_the_fused_casts_are_far_under_the_eager_ones(linears, recipe):
    """What fusion changes: the eager terms (9 bytes an element in flight) against the compiled ones."""
    hidden, width = linears["llama"]["hidden_size"], linears["llama"]["intermediate_size"]
    for make in (fsdp.fp8_forward_term, fsdp.fp8_backward_term):
        eager, fused = (make(recipe, 1, width, hidden, False, compiled=c).expr.subs({B: 1, S: 64}) for c in (0, 1))
        assert fused < eager / 2


def _widths(saved: dict) -> dict:
    c = saved["llama"]
    return {H: c["hidden_size"], a: c["num_attention_heads"], a_kv: c["num_key_value_heads"],
            d_head: c["hidden_size"] // c["num_attention_heads"], d_ff: c["intermediate_size"]}


@pytest.mark.parametrize("recipe", fsdp.RECIPES)
def test_compiled_float8_blocks_save_what_the_layer_parts_say_less_than_bf16(saved, recipe):
    """Measured bf16 saved less float8 saved, at each point, against the layers' compiled bf16 parts less their
    compiled float8 parts (the head and embeddings are the same in both): exact."""
    fp8 = replace(COMPILED, float8=recipe)
    for bf16_row, fp8_row in zip(saved["saved"]["bf16"], saved["saved"][recipe], strict=True):
        values = {**_widths(saved), B: bf16_row["batch"], S: bf16_row["seq"]}
        planned = saved["layers"] * (acts.per_layer(COMPILED, "none") - acts.per_layer(fp8, "none")).subs(values)
        assert planned == bf16_row["saved"] - fp8_row["saved"]
        assert not any(dtype.startswith("float8") for dtype in fp8_row["by_dtype"])  # no float8 cast is saved


def test_float8_changes_only_the_compiled_gated_layer():
    """Eager layers, and a compiled GeLU layer (not measured), keep what they kept."""
    gelu = acts.LayerVariant(flash=True, gated=False, dropout=False, compiled=True)
    assert acts.per_layer(replace(gelu, float8="tensorwise"), "none") == acts.per_layer(gelu, "none")
    keys = {p.key for p in acts.layer_parts(replace(COMPILED, float8="tensorwise"))}
    assert not keys & set(acts.FLOAT8_RECOMPUTED) and "fp8_weight_scales" in keys


def test_plan_searches_fp8_compile_as_memory_plans_it():
    """``plan``'s layouts under ``--precision fp8 --compile`` (every recompute, the fused casts and the compiled
    float8 layer) are ``memory``'s totals to the byte."""
    fixed = {"precision": "fp8", "compile": True, "compile_loss": False}
    res = search.search("llama-3-8b", "h100-80gb", seq=8192, gpus=8, global_batch=16, tp=1, tokens=10**9, mfu=0.4,
                        top=None, **fixed)
    assert {lay["recompute"] for lay in res.layouts} >= {"none", "full"}
    for lay in res.layouts:
        flags = {**layout_flags(lay, 8192), **fixed}
        assert lay["memory_bytes"] == planning.plan("llama-3-8b", "train", **flags).total


@pytest.mark.parametrize("recipe", fsdp.RECIPES)
def test_the_plan_adds_what_compiled_float8_adds_to_the_measured_step_by_phase(saved, recipe, tmp_path):
    """``memory <tiny Llama> --compile --no-compile-loss --precision fp8 --no-runtime`` less its bf16-mixed plan,
    phase by phase, against the measured compiled float8 step less the compiled bf16 one: exact (the fused casts
    stay under the loss's transients; the layer saves less)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(crosscheck._with_layers(  # noqa: SLF001 (the measured model's config)
        crosscheck.load_target("llama-3-8b", saved["llama"]).config, saved["layers"])))
    bf16_row, fp8_row = saved["saved"]["bf16"][0], saved["saved"][recipe][0]
    options = {"batch": bf16_row["batch"], "seq": bf16_row["seq"], "compile": True, "compile_loss": False,
               "runtime": False}
    fp8 = planning.plan(str(config), "train", precision="fp8", fp8_recipe=recipe, **options).as_dict()["phases"]
    bf16 = planning.plan(str(config), "train", precision="bf16-mixed", **options).as_dict()["phases"]
    for phase in ("forward", "backward"):
        assert fp8[phase] - bf16[phase] == fp8_row["phases"][phase] - bf16_row["phases"][phase]


# --- torchtitan's per-op policy (--recompute ops) with float8 linears, compiled ------------------------------------
@pytest.fixture(scope="module")
def ops() -> dict:
    return torch_child("float8_compile_child.py", {"what": "ops"})


@pytest.mark.parametrize("recipe", fsdp.RECIPES)
def test_compiled_ops_layer_saves_what_the_ops_parts_say(ops, recipe):
    """The compiled layer under 9dec370's policy, against ``per_layer(..., "ops")`` within 1 % at both points:
    tensorwise keeps the compiled bf16 layer's tensors (and amax and scale scalars, under 64 bytes, not a term);
    rowwise |x| of every weight and of three inputs and both norms' 1/rms beside them (exact); 88247277c's list
    without abs saves the same tensors; no float8 cast is saved."""
    fp8 = replace(COMPILED, float8=recipe)
    layer = ops["ops"]["layer"]
    for bf16_row, row, no_abs in zip(layer["bf16"], layer[recipe], layer[f"{recipe}-no-abs"], strict=True):
        values = {**_widths(ops), B: row["batch"], S: row["seq"]}
        assert abs(int(acts.per_layer(fp8, "ops").subs(values)) / row["saved"] - 1) < 0.01
        extra = sympy.Add(*(p.expr for p in acts.ops_float8_parts(fp8))).subs(values)
        if recipe == "rowwise":
            assert extra == row["saved"] - bf16_row["saved"]
        else:
            assert extra == 0 and 0 < row["saved"] - bf16_row["saved"] < 64
        assert no_abs["tensors"] == row["tensors"]
        assert not any(dtype.startswith("float8") for _, dtype, _ in row["tensors"])


def test_the_compiled_float8_ops_layer_rebuilds_no_less_than_bf16(ops):
    """Tensorwise (the benchmark's recipe), the layer's backward peak is above the compiled bf16 layer's at both
    points with the same bytes saved, though the compiled float8 layer without checkpointing saves 2·B·S·(2H + d_ff)
    bytes less: so the plan's ops recompute buffer stays the bf16 layer's (the excess is not a term). Rowwise saves
    more and frees it during backward: over its start its backward is lower, counted from before the forward higher."""
    layer = ops["ops"]["layer"]
    for recipe in fsdp.RECIPES:
        for bf16_row, row in zip(layer["bf16"], layer[recipe], strict=True):
            assert row["saved"] + row["backward_peak"] > bf16_row["saved"] + bf16_row["backward_peak"], recipe
            if recipe == "tensorwise":
                assert row["backward_peak"] > bf16_row["backward_peak"]
    fp8 = planning.plan("llama-3-8b", "train", recompute="ops", compile=True, compile_loss=False, precision="fp8")
    bf16 = planning.plan("llama-3-8b", "train", recompute="ops", compile=True, compile_loss=False)
    assert fp8.terms()["recompute_buffer"] == bf16.terms()["recompute_buffer"]


@pytest.mark.parametrize("recipe", fsdp.RECIPES)
def test_the_plan_adds_what_float8_adds_to_the_measured_compiled_ops_step_by_phase(ops, recipe, tmp_path):
    """``memory <tiny Llama> --recompute ops --compile --no-compile-loss --precision fp8`` less its bf16-mixed plan,
    phase by phase, against the measured compiled step with every layer wrapped (float8 less bf16): within 1 % of
    the measured phase (tensorwise: the amax and scale scalars, 44 bytes a layer, are not a term)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(crosscheck._with_layers(  # noqa: SLF001 (the measured model's config)
        crosscheck.load_target("llama-3-8b", ops["llama"]).config, ops["layers"])))
    batch, seq = ops["ops"]["layer"]["bf16"][0]["batch"], ops["ops"]["layer"]["bf16"][0]["seq"]
    options = {"batch": batch, "seq": seq, "recompute": "ops", "compile": True, "compile_loss": False,
               "runtime": False}
    fp8 = planning.plan(str(config), "train", precision="fp8", fp8_recipe=recipe, **options).as_dict()["phases"]
    bf16 = planning.plan(str(config), "train", precision="bf16-mixed", **options).as_dict()["phases"]
    step = ops["ops"]["step"]
    for phase in ("forward", "backward"):
        measured = step[recipe][phase] - step["bf16"][phase]
        assert abs(fp8[phase] - bf16[phase] - measured) < 0.01 * step[recipe][phase], phase
