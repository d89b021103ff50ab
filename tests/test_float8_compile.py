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
from symbolic.library import compiled_recompute, fsdp
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
    """Tensorwise (the benchmark's recipe), the layer's backward peak is above the compiled bf16 layer's at every
    point with the same bytes saved, though the compiled float8 layer without checkpointing saves 2·B·S·(2H + d_ff)
    bytes less: so the plan's ops recompute buffer stays the bf16 layer's (the excess is the backward's casts, next
    test). Rowwise saves more and frees it during backward: over its start its backward is lower, counted from
    before the forward higher."""
    layer = ops["ops"]["layer"]
    for recipe in fsdp.RECIPES:
        for bf16_row, row in zip(layer["bf16"], layer[recipe], strict=True):
            assert row["saved"] + row["backward_peak"] > bf16_row["saved"] + bf16_row["backward_peak"], recipe
            if recipe == "tensorwise":
                assert row["backward_peak"] > bf16_row["backward_peak"]
    fp8 = planning.plan("llama-3-8b", "train", recompute="ops", compile=True, compile_loss=False, precision="fp8")
    bf16 = planning.plan("llama-3-8b", "train", recompute="ops", compile=True, compile_loss=False)
    assert fp8.terms()["recompute_buffer"] == bf16.terms()["recompute_buffer"]


def test_the_compiled_float8_ops_layers_backward_excess_is_its_casts(ops):
    """Tensorwise, the layer's backward peak less the compiled bf16 layer's, against
    ``compiled_recompute.ops_float8_backward_parts`` (read from inductor's generated code: the attention output's,
    the product's and up's gradient's casts, the output projection's e4m3 weight, the block output gradient's
    cast): exact but for the amax and scale scalars (12 bytes) at B·S = 2.25·H and 4·H; at B·S = H a moment that
    holds the gate and up weights' bf16 gradients leads, 11,264 bytes over the term (not modelled, as under full
    checkpointing)."""
    layer = ops["ops"]["layer"]
    fp8 = replace(COMPILED, float8="tensorwise")
    term = sympy.Add(*(p.expr for p in compiled_recompute.ops_float8_backward_parts(fp8)))
    checked = 0
    for bf16_row, row in zip(layer["bf16"], layer["tensorwise"], strict=True):
        values = {**_widths(ops), B: row["batch"], S: row["seq"]}
        excess, planned = row["backward_peak"] - bf16_row["backward_peak"], int(term.subs(values))
        if row["batch"] * row["seq"] >= 1.5 * ops["llama"]["hidden_size"]:
            assert 0 <= excess - planned < 64, (row, excess, planned)
            checked += 1
        else:
            assert 0 < excess - planned < 0.25 * excess, (row, excess, planned)
    assert checked >= 2


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
# --- full checkpointing under compile: torchtitan's apply_ac, then apply_compile ---------------------------------
@pytest.fixture(scope="module")
def checkpointed() -> dict:
    return torch_child("float8_compile_child.py", {"what": "checkpointed"})


def _of(config: dict, batch: int, seq: int) -> dict:
    return {H: config["hidden_size"], a: config["num_attention_heads"], a_kv: config["num_key_value_heads"],
            d_head: config["hidden_size"] // config["num_attention_heads"], d_ff: config["intermediate_size"],
            B: batch, S: seq}


def _variant(recipe: str) -> acts.LayerVariant:
    return replace(COMPILED, float8="" if recipe == "bf16" else recipe)


@pytest.mark.parametrize("recipe", ["bf16", *fsdp.RECIPES])
def test_the_compiled_checkpointed_block_keeps_its_input_only(checkpointed, recipe):
    """What the wrapped, compiled block's forward leaves: its output, its input (the plan's full-recompute layer,
    2·B·S·H), the generator's state for the recomputed attention (``run_with_rng_state``; a seed and offset on a
    GPU, not a size) and one 8-byte scalar (not identified): exact, at every width and point."""
    c = checkpointed["checkpointed"]
    for widths, rows in c["block"][recipe].items():
        config = c["widths"][widths]
        for row in rows:
            output = 2 * row["batch"] * row["seq"] * config["hidden_size"]
            layer = acts.per_layer(_variant(recipe), "full").subs(_of(config, row["batch"], row["seq"]))
            assert row["forward_kept"] - output - c["rng_state"] - 8 == layer


def _buffer_errors(checkpointed: dict, recipe: str) -> dict[tuple[str, int], float]:
    """Planned ``compiled_recompute.buffer`` over the block's measured backward peak (over its start, the generator
    state it frees first taken back) less 1, at each width and each point with B·S ≥ 1.5·H."""
    c, out = checkpointed["checkpointed"], {}
    for widths, rows in c["block"][recipe].items():
        config = c["widths"][widths]
        for row in rows:
            tokens = row["batch"] * row["seq"]
            if tokens >= 1.5 * config["hidden_size"]:
                planned = compiled_recompute.buffer(_variant(recipe)).subs(_of(config, row["batch"], row["seq"]))
                out[widths, tokens] = float(planned / (row["backward_peak"] + c["rng_state"]) - 1)
    return out


@pytest.mark.parametrize("recipe", ["bf16", "tensorwise"])
def test_the_recompute_buffer_is_the_compiled_checkpointed_blocks_backward_peak(checkpointed, recipe):
    """``compiled_recompute.buffer`` against the block's measured backward peak: within 1 % at the tiny Llama's widths
    (where the terms were read from inductor's generated code), at H 96 / d_ff 256 (where float8's second ordering
    was found) and at H 128 / d_ff 352 (checked only). Below B·S ≈ 1.25·H moments holding weight gradients lead
    (not modelled: at B·S = 64 up to 16 % over the term, bf16 at H 128); the GPU rows run at B·S ≥ 2·H."""
    errors = _buffer_errors(checkpointed, recipe)
    assert {widths for widths, _ in errors} == {"llama", "wider", "widest"}
    assert all(abs(error) < 0.01 for error in errors.values()), errors


def test_the_rowwise_buffer_is_the_compiled_checkpointed_blocks_backward_peak(checkpointed):
    """Rowwise (``compiled_recompute.rowwise_parts``: read from inductor's generated code at H 64, checked at H 96
    and H 128) against the block's measured backward peak (the generator state taken back): to the byte at every width
    and point, B·S = 64 included (one moment leads: the fused SiLU backward's, before any weight gradient). The
    tensorwise buffer, planned for rowwise before, was 6.6 to 16.5 % over."""
    c = checkpointed["checkpointed"]
    rowwise = _variant("rowwise")
    for widths, rows in c["block"]["rowwise"].items():
        config = c["widths"][widths]
        for row in rows:
            planned = compiled_recompute.buffer(rowwise).subs(_of(config, row["batch"], row["seq"]))
            assert planned == row["backward_peak"] + c["rng_state"], (widths, row)


def _step_plans(checkpointed: dict, vocab: str, tmp_path) -> dict:
    """``memory <tiny Llama, vocab> --compile --no-compile-loss --recompute full --no-runtime``: fp8 and bf16 phases."""
    config = tmp_path / f"config-{vocab}.json"
    config.write_text(json.dumps(crosscheck._with_layers(  # noqa: SLF001 (the measured model's config)
        crosscheck.load_target("llama-3-8b", {**checkpointed["llama"], "vocab_size": int(vocab)}).config,
        checkpointed["layers"])))
    step = checkpointed["checkpointed"]["step"]["bf16"][vocab]
    options = {"batch": step["batch"], "seq": step["seq"], "compile": True, "compile_loss": False, "runtime": False,
               "recompute": "full"}
    return {name: planning.plan(str(config), "train", precision=precision, **options).as_dict()["phases"]
            for name, precision in (("tensorwise", "fp8"), ("bf16", "bf16-mixed"))}


def test_full_checkpointing_under_compile_adds_what_float8_adds_to_the_measured_step_by_phase(checkpointed, tmp_path):
    """With a vocabulary of 256 the blocks' backward leads the checkpointed step's backward at B 3, S 48 (the loss's
    leads its forward): the plan's float8 step less its bf16 step, phase by phase, added to the measured bf16 step,
    within 3 % of the measured float8 step (forward: 0 and 0; backward: 39,552 planned, 61,750 measured): the float8
    block's backward holds more, not less (−87,510 planned before). The plan's bf16 backward here is the loss's moment
    and its float8 one the rebuild (the larger of inductor's two orderings counted); the measured step's are both the
    blocks', beside the weight gradients written by then, which the plan does not count (B·S = 2.25·H: they weigh
    here). With the buffer beside the loss's transients it was 63,744."""
    steps = checkpointed["checkpointed"]["step"]
    planned = _step_plans(checkpointed, "256", tmp_path)
    for phase in ("forward", "backward"):
        fp8, bf16 = (steps[recipe]["256"]["phases"][phase] for recipe in ("tensorwise", "bf16"))
        difference = planned["tensorwise"][phase] - planned["bf16"][phase]
        assert abs(bf16 + difference - fp8) <= 0.03 * fp8, (phase, difference, fp8 - bf16)
        assert (difference > 0) == (fp8 > bf16)


def test_the_loss_and_the_checkpointed_blocks_backward_never_coincide(checkpointed, tmp_path):
    """With the tiny Llama's own vocabulary (512) the loss's moment leads both phases: the float8 step's peaks are
    the bf16 step's, and the plan's (``build._rebuilt_after_loss``: the larger of the loss's moment and the last
    block's rebuild less the logits and head input the loss and head freed). Each plan's backward over its forward is
    the measured step's, within 1 % of its backward (147,456 bytes both; the buffer beside the loss's transients put
    the plan 436,608 over at bf16, 33 %). At 256, where the measured step's blocks lead, it is under by at most 7 %:
    the weight gradients written by then (above), −4.1 % bf16, −6.3 % float8 (+47 and +44 % beside)."""
    steps = checkpointed["checkpointed"]["step"]
    vocab = str(checkpointed["llama"]["vocab_size"])
    assert steps["tensorwise"][vocab]["phases"] == steps["bf16"][vocab]["phases"]
    planned = _step_plans(checkpointed, vocab, tmp_path)
    assert planned["tensorwise"]["forward"] == planned["bf16"]["forward"]
    assert planned["tensorwise"]["backward"] == planned["bf16"]["backward"]
    for size, plans, tolerance in ((vocab, planned, 0.01), ("256", _step_plans(checkpointed, "256", tmp_path), 0.07)):
        for recipe in ("tensorwise", "bf16"):
            real = steps[recipe][size]["phases"]
            rise = plans[recipe]["backward"] - plans[recipe]["forward"]
            error = (rise - (real["backward"] - real["forward"])) / real["backward"]
            assert -tolerance < error <= 0.01, (size, recipe, error)


def test_where_the_rebuild_leads_the_plan_it_is_the_steps_backward(checkpointed, tmp_path):
    """The bf16 step at B 8, S 128 (B·S = 16·H, the weight gradients small beside the block): with vocabulary 512
    the loss's moment leads plan and step, the plan's backward over its forward the step's within 1 % of the phase
    (to the byte); with 128 the last block's rebuild less the logits and head input leads the plan, over the step's
    rise by 6.8 % of the phase: the step's forward holds tensors the plan does not count (423,864 bytes at both
    vocabularies, the final norm's saved fp32 input among them), freed before the rebuild. With the buffer beside the
    loss's transients the plan was 42 and 52 % over."""
    c = checkpointed["checkpointed"]["rebuild"]
    errors = {}
    for vocab, step in c.items():
        config = tmp_path / f"rebuild-{vocab}.json"
        config.write_text(json.dumps(crosscheck._with_layers(  # noqa: SLF001 (the measured model's config)
            crosscheck.load_target("llama-3-8b", {**checkpointed["llama"], "vocab_size": int(vocab)}).config,
            checkpointed["layers"])))
        plan = planning.plan(str(config), "train", precision="bf16-mixed", batch=step["batch"], seq=step["seq"],
                             compile=True, compile_loss=False, runtime=False, recompute="full")
        planned, real, terms = plan.phase_bytes(), step["phases"], plan.terms()
        rebuilt = compiled_recompute.buffer(_variant("bf16")).subs(_of(checkpointed["llama"], step["batch"],
                                                                       step["seq"]))
        errors[vocab] = float((planned["backward"] - planned["forward"] - real["backward"] + real["forward"])
                              / real["backward"])
        leads = "rebuild" if terms["loss_gradients"] == rebuilt - terms["logits"] else "loss"
        assert leads == ("rebuild" if vocab == "128" else "loss"), (vocab, terms)
    assert abs(errors["512"]) < 0.01 and 0 < errors["128"] < 0.08, errors
