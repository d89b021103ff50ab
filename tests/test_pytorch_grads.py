"""Gradients in the measured PyTorch step: each in its parameter's dtype, so fp32 under autocast.

The eager loop's ``bf16-mixed``/``fp16-mixed`` is ``torch.autocast`` over fp32 weights: a parameter's
``.grad`` has the parameter's dtype, so ``--grads 16bit`` cannot describe it (it applies to the formula
activations' Megatron-style states), and the report's bytes-per-parameter row counts what the step holds.
"""

from __future__ import annotations

import pytest
from helpers import run

from symbolic.planning import plan
from symbolic.report.planned import _states_group


@pytest.mark.parametrize("precision", ["bf16-mixed", "fp16-mixed"])
def test_mixed_pytorch_step_keeps_fp32_gradients_and_says_so(capsys, precision):
    p = plan("mlp", precision=precision, batch=4)
    assert p.regime.grads == "fp32"
    parts = p.terms()
    assert parts["gradients"] == parts["weights"]  # one fp32 gradient per fp32 weight (the formula itself)
    code, out, _ = run(capsys, "memory", "mlp", "--precision", precision)
    assert code == 0 and "grads fp32" in out


def test_sixteen_bit_gradients_refused_for_the_pytorch_step(capsys):
    code, out, err = run(capsys, "memory", "mlp", "--precision", "bf16-mixed", "--grads", "16bit")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "fp32 under bf16-mixed" in err and "--grads 16bit" in err
    code, _, _ = run(capsys, "memory", "mlp", "--precision", "bf16-mixed", "--grads", "fp32", "-q")
    assert code == 0


def test_report_states_row_counts_the_eager_step():
    p = plan("mlp", precision="bf16-mixed", batch=4)
    group = _states_group(p.model, p)
    own = next(row for row in group.rows if row.chosen)
    parts = p.terms()
    held = parts["weights"] + parts["gradients"] + parts["optimizer_states"]  # fp32 weights, grads, AdamW m and v
    assert own.value == held and "autocast over fp32 weights" in own.label
    n = p.model.params.evaluate(p.model.params.restrict(p.model.numbers)).total
    assert own.value == 16 * n  # 4 + 4 + 8 bytes per parameter (not 18: no bf16 copy between steps)
