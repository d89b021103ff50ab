"""The exact FLOP count follows each model's own weight matrices, layer group by layer group."""

from __future__ import annotations

import pytest

from symbolic.networks import transformer as architectures
from symbolic.planning import time as ptime

MATMULS = ("attention.", "mlp.", "moe.")


@pytest.mark.parametrize("model", ["llama-3-8b", "mixtral-8x7b", "qwen2-0.5b", "deepseek_v3"])
def test_each_matmul_is_two_flops_per_active_weight(model) -> None:
    spec = (architectures.spec_from_config({"model_type": model}, model) if model == "deepseek_v3"
            else architectures.load(model))
    fl = ptime.flops(spec, seq=4096)
    ev = fl.forward.evaluate(fl.forward.restrict(fl.values))
    forward = {t.key: int(v) for t, v in ev.terms}
    weights = {c.key: c.total for c in architectures.breakdown(spec, active=True)}
    for key, total in weights.items():
        if key.startswith(MATMULS) and "norm" not in key and "bias" not in key:
            assert forward[key] == 2 * total, key
    assert forward["output"] == 2 * spec.vocab * spec.hidden


def test_latent_attention_scores_by_hand() -> None:
    """DeepSeek-V3 defaults: 61 layers, 128 heads, q/k heads 128 + 64 wide, v heads 128."""
    spec = architectures.spec_from_config({"model_type": "deepseek_v3"}, "deepseek_v3")
    fl = ptime.flops(spec, seq=4096)
    terms = {t.key: int(v) for t, v in fl.forward.evaluate(fl.forward.restrict(fl.values)).terms}
    assert terms["attention.scores"] == 61 * 2 * 4096 * 128 * (128 + 64) == 12_280_922_112
    assert terms["attention.values"] == 61 * 2 * 4096 * 128 * 128 == 8_187_281_408


def test_moe_counts_the_active_experts_only() -> None:
    """Mixtral-8x7B: top-2 of 8 experts; each expert a SwiGLU MLP of 3·4096·14336 weights, 32 layers."""
    fl = ptime.flops("mixtral-8x7b", seq=4096)
    terms = {t.key: int(v) for t, v in fl.forward.evaluate(fl.forward.restrict(fl.values)).terms}
    assert terms["moe.experts"] == 32 * 2 * 2 * 3 * 4096 * 14336
    assert terms["moe.router"] == 32 * 2 * 4096 * 8


def test_recompute_adds_its_forward_share() -> None:
    spec = architectures.load("llama-3-8b")
    none, sel, full = (ptime.flops(spec, seq=4096, recompute=r).per_token() for r in ("none", "selective", "full"))
    forward = ptime.flops(spec, seq=4096).per_token(train=False)
    assert none == 3 * forward
    assert sel - none == 32 * 4 * 4096 * 4096  # Q·Kᵀ and softmax·V again: 4·S·a·d_head per layer
    assert full - none == forward - 2 * 128256 * 4096  # every layer again, not the output layer
