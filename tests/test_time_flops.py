"""The exact FLOP count follows each model's own weight matrices, layer group by layer group."""

from __future__ import annotations

import pytest
import sympy

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


def _train_terms(model: str, seq: int = 4096, **options: object) -> dict[str, int]:
    """The training FLOPs per token of a one-GPU plan of one sequence, term by term."""
    plan = ptime.train_time(model, "h100-80gb", mfu=0.4, batch=1, seq=seq, **options)
    f = plan.formulas["flops_per_token"]
    return {t.key: int(v) for t, v in f.evaluate(f.restrict(plan.values)).terms}


def test_lora_llama_3_8b_by_hand() -> None:
    """Llama-3-8B, LoRA rank 16 on q_proj and v_proj (peft's default): every base weight frozen, so backward is each
    matmul's input gradient (1 × forward) but layer 0's Q, K and V (their input, the frozen embedding's output, needs
    none), the attention core's two gradients, and the adapters' own (Hu et al. 2021; Narayanan et al. 2021 §5.1)."""
    H, L, V, S, kv, d_ff, r = 4096, 32, 128256, 4096, 1024, 14336, 16
    layer = 2 * (H * H + 2 * H * kv + H * H + 3 * H * d_ff)  # q, k, v, o, gate/up/down: 2 per weight
    core = 2 * S * (H + H)  # Q·Kᵀ and softmax·V over 32 heads of 128
    adapters = L * 2 * r * ((H + H) + (H + kv))  # lora_A and lora_B of q_proj and v_proj
    terms = _train_terms("llama-3-8b", lora_rank=r)
    assert terms["forward"] == L * (layer + core) + 2 * V * H + adapters
    assert terms["backward.input"] == L * layer - 2 * (H * H + 2 * H * kv) + 2 * V * H
    assert terms["backward.attention"] == L * 2 * core
    assert terms["backward.adapters"] == L * 2 * r * ((H + 2 * H) + (H + 2 * kv)) + (L - 1) * 2 * r * (H + H)
    assert "backward.weight" not in terms
    assert sum(terms.values()) == 36_451_385_344  # 29 % under the full fine-tuning count, 51,470,401,536


def test_lora_recompute_full_reruns_the_adapters_and_layer_0() -> None:
    """Gradient checkpointing (recompute full) makes layer 0's input need a gradient (transformers'
    enable_input_require_grads): its Q, K, V input gradients and its lora_A input gradients come back, and every
    layer's forward, the adapters included, runs again but its down_proj (torch's non-reentrant checkpoint, which
    transformers uses, stops early: measured in tests/test_time_torch.py); the output layer does not."""
    H, kv, r, V, L, d_ff = 4096, 1024, 16, 128256, 32, 14336
    plain, full = _train_terms("llama-3-8b", lora_rank=r), _train_terms("llama-3-8b", lora_rank=r, recompute="full")
    assert full["backward.input"] - plain["backward.input"] == 2 * (H * H + 2 * H * kv)
    assert full["backward.adapters"] - plain["backward.adapters"] == 2 * r * (H + H)
    assert full["recompute"] == full["forward"] - 2 * V * H - L * 2 * H * d_ff


def test_full_recompute_by_stack() -> None:
    """Megatron's layer (the default; a reentrant checkpoint, Narayanan et al.'s count) reruns every layer's forward;
    torchtune's layer and transformers' checkpointing (torch's non-reentrant checkpoint, early stop) all of it but
    each layer's down projection, 2·H·d_ff per layer; a dropout mask after it (GPT-2's resid_pdrop) needs its output,
    and a MoE layer's weighted sum saves the experts' outputs: the whole forward again."""
    H, L, V, d_ff = 4096, 32, 128256, 14336
    none, megatron = _train_terms("llama-3-8b"), _train_terms("llama-3-8b", recompute="full")
    torchtune = _train_terms("llama-3-8b", recompute="full", layer_impl="torchtune")
    assert megatron["recompute"] == none["forward"] - 2 * V * H
    assert megatron["recompute"] - torchtune["recompute"] == L * 2 * H * d_ff == 3_758_096_384
    assert {k: v for k, v in torchtune.items() if k != "recompute"} == none
    gpt2 = _train_terms("gpt2", 1024, recompute="full", lora_rank=8)  # dropout on (the config's probabilities)
    assert gpt2["recompute"] == gpt2["forward"] - 2 * 50257 * 768
    off = _train_terms("gpt2", 1024, recompute="full", lora_rank=8, dropout=False)  # c_proj's base matmul not rerun
    assert gpt2["recompute"] - off["recompute"] == 12 * 2 * 768 * 3072
    mixtral = _train_terms("mixtral-8x7b", recompute="full", freeze_embeddings=True)
    assert mixtral["recompute"] == mixtral["forward"] - 2 * 32000 * 4096


def test_frozen_embeddings_drop_a_tied_heads_weight_gradient_only() -> None:
    """GPT-2's head is its token embedding: frozen, the head keeps its input gradient and loses its weight gradient,
    2·V·H per token; Llama-3-8B's own head trains on (nothing changes: the first norm's weight still needs the
    layer-0 input gradients). QLoRA's matmuls are LoRA's (the NF4 weights are dequantised for each)."""
    full, frozen = _train_terms("gpt2", 1024), _train_terms("gpt2", 1024, freeze_embeddings=True)
    assert sum(full.values()) - sum(frozen.values()) == 2 * 50257 * 768
    assert sum(_train_terms("llama-3-8b", freeze_embeddings=True).values()) == sum(_train_terms("llama-3-8b").values())
    assert _train_terms("llama-3-8b", lora_rank=16) == _train_terms("llama-3-8b", lora_rank=16, qlora=True,
                                                                    precision="bf16")


def test_layer_kinds_keep_where_the_config_puts_them() -> None:
    """The dense layers of a mixture of experts and a hybrid's convolution layers, by position (0-based), from each
    family's rule: DeepSeek-V3's first_k_dense_replace, Qwen3-MoE's decoder_sparse_step and mlp_only_layers,
    Llama-4's interleave_moe_layer_step, LFM2's full_attn_idxs."""
    def spec(config: dict) -> architectures.ModelSpec:
        return architectures.spec_from_config(config, config["model_type"])

    assert spec({"model_type": "deepseek_v3"}).dense_at == (0, 1, 2)
    qwen = spec({"model_type": "qwen3_moe", "num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [3]})
    assert qwen.dense_at == (0, 2, 3, 4) and qwen.dense_layers == 4
    assert spec({"model_type": "llama4_text", "num_hidden_layers": 6, "interleave_moe_layer_step": 3}).dense_at == \
        (0, 1, 3, 4)
    lfm2 = spec({"model_type": "lfm2", "num_hidden_layers": 6, "full_attn_idxs": [2, 5]})
    assert lfm2.conv_at == (0, 1, 3, 4) and lfm2.conv_layers == 4


def _rerun(spec: architectures.ModelSpec, **options: object) -> int:
    """The recompute term of ``flops`` per token, evaluated."""
    fl = ptime.flops(spec, seq=4096, recompute="full", **options)
    return next(int(v) for t, v in fl.train.evaluate(fl.train.restrict(fl.values)).terms if t.key == "recompute")


def test_every_nth_layer_reruns_each_kind_where_it_sits() -> None:
    """DeepSeek-V3 (61 layers, the first 3 dense) checkpointing every 2nd: layers 1, 3, ..., 59, of which layer 1 alone
    is dense, so the rerun is 1 dense layer and 29 MoE layers. The per-layer forwards are taken from whole reruns of
    variants (every layer MoE: first_k_dense_replace 0), not from the substitution the count makes."""
    dense3 = architectures.spec_from_config({"model_type": "deepseek_v3"}, "deepseek_v3")
    moe_all = architectures.spec_from_config({"model_type": "deepseek_v3", "first_k_dense_replace": 0}, "dsv3-all-moe")
    moe = sympy.Rational(_rerun(moe_all), 61)
    dense = (_rerun(dense3) - 58 * moe) / 3
    assert _rerun(dense3, every=2) == dense + 29 * moe
    assert _rerun(dense3, every=2) != sympy.Rational(30, 61) * _rerun(dense3)  # the average layer's share
    assert _rerun(moe_all, every=2) == sympy.Rational(30, 61) * _rerun(moe_all)  # alike: the share is exact
