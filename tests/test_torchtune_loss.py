"""torchtune's loss path, ``--logits-upcast model`` (issue 28): the model returns fp32 logits, the loss takes them.

The planner's terms (``library.upcast_logits``) against a small decoder written as torchtune's, measured on the CPU
(``torchtune_loss_child.py``): each phase's peak, as the plan composes it (the weights, AdamW's two states and
the labels measured; the saved bytes measured; the loss path's terms from the formula), within 1 %, eager and with
the loss compiled by inductor, at two (B, S); Hugging Face's path (the default) beside it.
"""

from __future__ import annotations

import pytest
from helpers import torch_child

from symbolic import planning
from symbolic.core.symbols import B, H, S, V
from symbolic.library import peak_pytorch, upcast_logits


@pytest.fixture(scope="module")
def measured() -> dict:
    return torch_child("torchtune_loss_child.py")


def _terms(path: str, act_bytes: int) -> tuple:
    """(forward, backward) terms of the plan for one measured loss path."""
    if path == "loss":  # Hugging Face's: the planner's default
        return peak_pytorch.logits_forward_term(act_bytes), peak_pytorch.loss_gradients_term()
    compiled = path == "model_compiled"
    return upcast_logits.forward_term(act_bytes, compiled), upcast_logits.backward_term(act_bytes, compiled)


@pytest.mark.torch
@pytest.mark.parametrize("path", ["loss", "model", "model_compiled"])
def test_each_phase_within_one_percent(measured, path):
    """Forward and backward peaks: resident + saved + the path's term; the compiled path's saved bytes are the eager
    path's with the fp32 logits in place of the log-softmax (the same bytes) and 8 per token more."""
    b = measured["element_bytes"]
    for point, eager in zip(measured["paths"][path], measured["paths"]["model"], strict=True):
        values = {B: point["batch"], S: point["seq"], H: measured["hidden"], V: measured["vocab"]}
        resident = 3 * point["weights"] + 4 * point["parameter_tensors"] + point["unsaved_inputs"]  # AdamW: 2 states
        forward, backward = (int(t.expr.subs(values)) for t in _terms(path, b))
        for phase, term in (("forward", forward), ("backward", backward)):
            planned = resident + point["saved"] + term
            error = planned / point["phases"][phase] - 1
            assert abs(error) < 0.01, (path, point, phase, f"{error:+.3%}")
        saved = [t for t in upcast_logits.saved_terms(b, path == "model_compiled") if t.key != "lm_head_input"]
        if path == "model_compiled":
            assert point["saved"] - eager["saved"] == int(sum(t.expr for t in saved).subs(values)) - \
                int((4 * S * B * V).subs(values))


@pytest.mark.torch
def test_the_upcast_lowers_the_eager_forward_only(measured):
    """Measured: the model's upcast frees the 16-bit logits before the loss runs (forward b·B·S·V lower than Hugging
    Face's), and the eager backward is the same (the 8·B·S·V of the loss's gradients)."""
    b = measured["element_bytes"]
    for hf, tt in zip(measured["paths"]["loss"], measured["paths"]["model"], strict=True):
        bsv = hf["batch"] * hf["seq"] * measured["vocab"]
        assert hf["phases"]["forward"] - tt["phases"]["forward"] == b * bsv
        assert hf["phases"]["backward"] == tt["phases"]["backward"]


def _plan(tmp_path, **options: object) -> planning.Plan:
    import json

    from test_step_lifetimes import LLAMA_32_3B

    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_32_3B))
    return planning.plan(str(config), "train", batch=2, seq=4096, precision="bf16", runtime=False, **options)


def test_upcast_changes_the_forward_not_the_eager_backward(tmp_path):
    """Llama 3.2 3B: the eager upcast lowers the forward by the 16-bit logits; the backward (the peak) stays."""
    hf, tt = _plan(tmp_path).phase_bytes(), _plan(tmp_path, logits_upcast="model").phase_bytes()
    assert hf["forward"] - tt["forward"] == 2 * 2 * 4096 * 128256 and hf["backward"] == tt["backward"]


def test_compiled_loss_over_fp32_logits_keeps_them(tmp_path):
    """With the loss compiled the fp32 logits are saved (4 bytes a logit where --compile's 16-bit path saves 2) and
    the gradient is fp32: 2 + 2 bytes a logit more than --compile at the backward peak."""
    plain = _plan(tmp_path, compile=True).total
    upcast = _plan(tmp_path, compile=True, logits_upcast="model").total
    assert upcast - plain == pytest.approx(4 * 2 * 4096 * 128256, rel=1e-4)


@pytest.mark.parametrize(("options", "words"), [
    ({"logits": "chunked"}, "applies to logits hf"),
    ({"activations": "pytorch"}, "activations korthikanti"),
    ({"tp": 2}, "one tensor-parallel rank"),
])
def test_refusals_are_one_line(tmp_path, options, words):
    with pytest.raises(planning.PlanOptionError, match=words):
        _plan(tmp_path, logits_upcast="model", **options)
