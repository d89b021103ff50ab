"""Issue 28: the eager checkpointed layer's rebuild (``--recompute full`` and ``ops`` without ``--compile``),
measured on the CPU (``eager_rebuild_child.py``) against ``library.eager_recompute`` and the plan's phases."""

from __future__ import annotations

import json

import pytest
import sympy
from helpers import torch_child

from symbolic import planning
from symbolic.core.symbols import B, H, S, a, a_kv, d_ff, d_head
from symbolic.library import activations as acts
from symbolic.library import eager_recompute
from symbolic.measured import crosscheck

GATED = acts.LayerVariant(flash=True, gated=True, dropout=False)


@pytest.fixture(scope="module")
def measured() -> dict:
    return torch_child("eager_rebuild_child.py")


def _values(w: dict, batch: int, seq: int) -> dict:
    return {B: batch, S: seq, H: w["hidden"], a: w["heads"], a_kv: w["heads"], d_head: w["hidden"] // w["heads"],
            d_ff: w["ffn"]}


def test_the_buffer_is_the_larger_moment_inside_or_after_the_down_projections_backward():
    """After: the layer's saved set less its input and the product, three B·S·d_ff gradients and the output's; ops:
    the same over the policy's saved set, with the down projection's output (cached) back. Inside: the product
    still saved, its gradient and the projection's weight gradient instead of the three: b·d_ff·(H − B·S) more."""
    b, tokens = 2, S * B
    none = acts.per_layer(GATED)
    grads = 3 * b * tokens * d_ff + b * tokens * H
    full = none - b * tokens * H - b * tokens * d_ff + grads
    assert (eager_recompute.after_down_projection(GATED, "full") - full).expand() == 0
    ops = none - b * tokens * d_ff + grads + b * tokens * H - acts.per_layer(GATED, "ops")
    assert (eager_recompute.after_down_projection(GATED, "ops") - ops).expand() == 0
    for how in ("full", "ops"):
        inside, after = (f(GATED, how) for f in (eager_recompute.inside_down_projection,
                                                 eager_recompute.after_down_projection))
        assert (inside - after - b * d_ff * (H - tokens)).expand() == 0
        assert eager_recompute.buffer(GATED, how) == sympy.Max(inside, after)
    assert not eager_recompute.measured(acts.LayerVariant(flash=True, gated=False, dropout=False))


@pytest.mark.torch
def test_the_block_keeps_what_the_variant_counts(measured):
    """The block's forward leaves the eager gated layer's saved set (and the norms' fp32 1/rms, 8 bytes a token,
    which ``layer_parts`` leaves out), its input under full checkpointing, the policy's set under ops: exact."""
    c = measured["block"]
    for name, w in c["widths"].items():
        for how, recompute, extra in (("none", "none", 8), ("full", "full", 0), ("ops", "ops", 0)):
            for row in c["rows"][name][how]:
                tokens = row["batch"] * row["seq"]
                planned = acts.per_layer(GATED, recompute).subs(_values(w, row["batch"], row["seq"]))
                assert row["kept"] == planned + extra * tokens, (name, how, row)


@pytest.mark.torch
def test_the_rebuilt_blocks_backward_peak_is_the_buffer_to_the_byte(measured):
    """The block's backward peak over its start (its output's gradient given: held before; each parameter gradient
    freed once accumulated, as the plan's backward holds none), less the norms' 1/rms: ``buffer`` less the output's
    gradient, to the byte, at H 64 (d_ff 176) and H 96 (d_ff 320), B·S from 0.17·H to 4·H: inside the down
    projection's backward below B·S = H (its weight gradient alive), after it above. Without checkpointing the
    same two moments over the saved set: its weight gradient and the product's, or 2·b·B·S·d_ff; the rebuild is
    the layer's own backward, not a second copy."""
    c, sides = measured["block"], set()
    for name, w in c["widths"].items():
        for how in ("full", "ops", "none"):
            for row in c["rows"][name][how]:
                tokens = row["batch"] * row["seq"]
                values = _values(w, row["batch"], row["seq"])
                real = row["backward"]
                if how == "none":
                    assert real == max(2 * 2 * tokens * w["ffn"], 2 * (w["hidden"] + tokens) * w["ffn"]), (name, row)
                    continue
                real -= 8 * tokens  # the rebuilt norms' 1/rms
                output_grad = 2 * tokens * w["hidden"]
                assert eager_recompute.buffer(GATED, how).subs(values) - output_grad == real, (name, how, row)
                inside, after = (moment(GATED, how).subs(values) - output_grad for moment in (
                    eager_recompute.inside_down_projection, eager_recompute.after_down_projection))
                assert real == (inside if tokens < w["hidden"] else after), (name, how, row)
                sides.add((name, tokens < w["hidden"]))
    assert sides == {(name, below) for name in c["widths"] for below in (True, False)}


def _plan(case: dict, how: str, tmp_path) -> planning.Plan:
    w = case["widths"]
    config = tmp_path / f"eager-{w['vocab']}.json"
    config.write_text(json.dumps(crosscheck._with_layers(  # noqa: SLF001 (the measured model's config)
        crosscheck.load_target("llama-3-8b", {
            "hidden_size": w["hidden"], "num_attention_heads": w["heads"], "num_key_value_heads": w["heads"],
            "intermediate_size": w["ffn"], "vocab_size": w["vocab"], "max_position_embeddings": 128,
            "tie_word_embeddings": False}).config, 2)))
    return planning.plan(str(config), "train", precision="bf16-mixed", batch=case["batch"], seq=case["seq"],
                         runtime=False, recompute=how)


@pytest.mark.torch
@pytest.mark.parametrize("how", ["full", "ops"])
def test_the_loss_and_the_rebuild_never_coincide_in_the_step(measured, how, tmp_path):
    """The two-block step (SGD in backward: no parameter gradient held), each phase over what is alive before it
    (parameters, ids, labels) against the plan's phase over its resident terms and token ids. Vocabulary 2,048: the
    loss's moment leads the plan and the step, forward and backward within 1 % (the step holds the final norm's
    saved input, its 1/rms and the rotary tables beside: +0.6 %); the rebuild less the saved logits and head input
    is under it. Vocabulary 64, d_ff 512, B·S at 0.5, 0.75, 1.5 and 4 H: the last layer's rebuild leads the plan
    and the step's backward, within 1 % (the norms' 1/rms, the rotary tables and the loss's two scalars: 0.3 to
    0.9 %), inside the down projection's backward below B·S = H (its weight gradient alive: 5-13 % under without
    it); the loss's moment is not beside it. The step's forward there peaks inside the last block's forward (its
    MLP's transients), which the plan does not count: never the step's peak, its tensors are the block's saved set,
    which the rebuilt backward holds again beside its gradients (measured: 49 to 75 % of the backward)."""
    errors, sides = {}, set()
    for name, case in measured["step"].items():
        plan = _plan(case, how, tmp_path)
        terms, phases = plan.terms(), plan.phase_bytes()
        resident = sum(terms[k] for k in plan.resident_keys) + terms["inputs"]
        real = case[how]
        values = _values(case["widths"], case["batch"], case["seq"])
        rebuilt = eager_recompute.buffer(GATED, how).subs(values)
        leads = "rebuild" if terms["loss_gradients"] == rebuilt - terms["logits"] else "loss"
        assert leads == name.split()[0] and "recompute_buffer" not in terms, (name, terms)
        for phase in ("forward", "backward") if name == "loss" else ("backward",):
            errors[name, phase] = (phases[phase] - resident) / (real[phase] - real["baseline"]) - 1
        if leads == "rebuild":
            assert real["forward"] < real["backward"], (name, real)  # the forward's block: never the step's peak
            assert phases["backward"] - resident > real["forward"] - real["baseline"], name
            below = case["batch"] * case["seq"] < case["widths"]["hidden"]
            moment = eager_recompute.inside_down_projection if below else eager_recompute.after_down_projection
            assert rebuilt == moment(GATED, how).subs(values), name
            sides.add(below)
    assert all(-0.01 < error <= 0 for error in errors.values()), errors
    assert errors["loss", "backward"] < -0.003 and errors["rebuild", "backward"] < -0.002, errors
    assert sides == {True, False}
