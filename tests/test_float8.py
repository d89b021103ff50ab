"""Issue 28, ``--precision fp8``: torchao's float8 training (0.18.0) measured on the CPU (``float8_child.py``)
against ``library.fsdp``'s cast terms. Skipped where torchao is not installed (``make setup-torch`` installs it).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import sympy
from helpers import torch_child

from symbolic import planning
from symbolic.core.symbols import B, H, S, a, a_kv, d_ff, d_head
from symbolic.library import activations as acts
from symbolic.library import fsdp
from symbolic.measured import crosscheck

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def measured() -> dict:
    return torch_child("float8_child.py")


def _term_at(term: object, tokens: int) -> float:
    return float(term.expr.subs({B: 1, S: tokens}))


@pytest.mark.parametrize("recipe", fsdp.RECIPES)
@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_the_cast_terms_are_one_linears_measured_extra_over_bf16(measured, recipe, phase):
    """The term, at the tiny Llama's MLP (H 64, d_ff 176), against the worse of its two measured linears."""
    hidden, width = measured["llama"]["hidden_size"], measured["llama"]["intermediate_size"]
    make = fsdp.fp8_forward_term if phase == "forward" else fsdp.fp8_backward_term
    for tokens in {row["tokens"] for row in measured["linears"]}:
        rows = [row for row in measured["linears"] if row["recipe"] == recipe and row["tokens"] == tokens]
        extra = max(row["fp8"][phase] - row["bf16"][phase] for row in rows)
        assert _term_at(make(recipe, 1, width, hidden, False), tokens) == pytest.approx(extra, rel=0.01)


def test_float8_saves_the_bf16_operands_and_leaves_the_step_peaks_where_they_were(measured):
    """torchtitan's conversion (every linear but the head) saves input_hp and weight_hp_t, not the casts; at
    the tiny Llama's size the casts never coincide with the loss, each phase's peak."""
    step = measured["step"]
    layers, linears_per_layer = 2, 7
    for recipe in fsdp.RECIPES:
        assert step[recipe]["converted"] == layers * linears_per_layer
        assert step[recipe]["saved"] == step["bf16"]["saved"]
        assert step[recipe]["phases"] == step["bf16"]["phases"]


@pytest.mark.parametrize("recipe", fsdp.RECIPES)
def test_the_plan_adds_what_float8_adds_to_the_measured_step_by_phase(measured, recipe, tmp_path):
    """``memory <tiny Llama> --precision fp8`` less its bf16-mixed plan (the same states), phase by phase, against
    the measured float8 step less the bf16 one: the casts count only beyond the loss's transients."""
    config = tmp_path / "config.json"
    config.write_text(__import__("json").dumps(crosscheck._with_layers(  # noqa: SLF001 (the measured model's config)
        crosscheck.load_target("llama-3-8b", measured["llama"]).config, 2)))
    batch, seq = measured["step_size"]
    options = {"batch": batch, "seq": seq}
    fp8 = planning.plan(str(config), "train", precision="fp8", fp8_recipe=recipe, **options).as_dict()["phases"]
    bf16 = planning.plan(str(config), "train", precision="bf16-mixed", **options).as_dict()["phases"]
    step = measured["step"]
    for phase in ("forward", "backward"):
        assert fp8[phase] - bf16[phase] == step[recipe]["phases"][phase] - step["bf16"]["phases"][phase]


# --- torchtitan's per-op policy (--recompute ops) with float8 linears ---------------------------------------------
OPS = acts.LayerVariant(flash=True, gated=True, dropout=False)


def _values(llama: dict, batch: int, seq: int) -> dict:
    heads = llama["num_attention_heads"]
    return {B: batch, S: seq, H: llama["hidden_size"], a: heads, a_kv: llama["num_key_value_heads"],
            d_head: llama["hidden_size"] // heads, d_ff: llama["intermediate_size"]}


@pytest.mark.parametrize("recipe", fsdp.RECIPES)
def test_ops_keeps_the_casts_abs_and_amax_beside_the_bf16_layers_tensors(measured, recipe):
    """One layer under 9dec370's policy: float8 less bf16 is ``ops_float8_parts`` to the byte (every cast's |x|, and
    tensorwise its amax scalars), and the whole layer within 1 %; 88247277c's list (no abs) keeps the amax alone."""
    fp8 = replace(OPS, float8=recipe)
    layer = measured["ops"]["layer"]
    for bf16_row, fp8_row, no_abs in zip(layer["bf16"], layer[recipe], layer[f"{recipe}-no-abs"], strict=True):
        values = _values(measured["llama"], fp8_row["batch"], fp8_row["seq"])
        parts = acts.ops_float8_parts(fp8)
        assert sympy.Add(*(p.expr for p in parts)).subs(values) == fp8_row["saved"] - bf16_row["saved"]
        amax = sympy.Add(*(p.expr for p in parts if p.key == "fp8_amax"))
        assert no_abs["saved"] - bf16_row["saved"] == amax
        assert abs(int(acts.per_layer(fp8, "ops").subs(values)) / fp8_row["saved"] - 1) < 0.01


@pytest.mark.parametrize("recipe", fsdp.RECIPES)
def test_the_plan_adds_what_float8_adds_to_the_measured_ops_step_by_phase(measured, recipe, tmp_path):
    """``memory <tiny Llama> --recompute ops --precision fp8`` less its bf16-mixed plan, phase by phase, against the
    measured step with every layer wrapped as torchtitan wraps it (float8 less bf16): within 1 %."""
    config = tmp_path / "config.json"
    config.write_text(__import__("json").dumps(crosscheck._with_layers(  # noqa: SLF001 (the measured model's config)
        crosscheck.load_target("llama-3-8b", measured["llama"]).config, 2)))
    batch, seq = measured["step_size"]
    options = {"batch": batch, "seq": seq, "recompute": "ops"}
    fp8 = planning.plan(str(config), "train", precision="fp8", fp8_recipe=recipe, **options).as_dict()["phases"]
    bf16 = planning.plan(str(config), "train", precision="bf16-mixed", **options).as_dict()["phases"]
    step = measured["ops"]["step"]
    for phase in ("forward", "backward"):
        extra = step[recipe]["phases"][phase] - step["bf16"]["phases"][phase]
        assert fp8[phase] - bf16[phase] == pytest.approx(extra, rel=0.01), phase
        assert extra > 100_000  # |x| of every cast: far more than the amax scalars 88247277c's list leaves
        assert step[f"{recipe}-no-abs"]["phases"][phase] - step["bf16"]["phases"][phase] < 100
