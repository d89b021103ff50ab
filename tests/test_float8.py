"""Issue 28, ``--precision fp8``: torchao's float8 training (0.18.0) measured on the CPU (``float8_child.py``)
against ``library.fsdp``'s cast terms. Skipped where torchao is not installed (``make setup-torch`` installs it).
"""

from __future__ import annotations

import pytest
from helpers import torch_child

from symbolic.core.symbols import B, S
from symbolic.library import fsdp

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
