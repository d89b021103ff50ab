"""FLOPs and time against published numbers (issue 15): each test names its source.

- Narayanan et al. 2021 (SC'21, "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM"), §5.1 eq. 3 and the 34-day estimate for GPT-3 175B.
- Dubey et al. 2024 ("The Llama 3 Herd of Models") §3.2.1: 405B, 15.6T tokens, 3.8 × 10^25 FLOPs.
- Kaplan et al. 2020 §2.1 / Hoffmann et al. 2022 (Chinchilla): C ≈ 6·N·D; Chowdhery et al. 2022
  (PaLM) Appendix B: 6N + 12·L·H·Q·T with the attention.
- The decode roofline: tokens/s at batch 1 ≤ HBM bandwidth / bytes read per token.
"""

from __future__ import annotations

import json

import pytest
import sympy

from symbolic import library
from symbolic.networks import transformer as architectures
from symbolic.planning import time as ptime

# GPT-3 175B as Narayanan et al. train it (Table 1 and §5.1): 96 layers, h = 12288, 96 heads,
# V = 51200, s = 2048; a GPT-2-style layer (4h MLP, multi-head attention).
GPT3 = {"model_type": "gpt2", "n_embd": 12288, "n_layer": 96, "n_head": 96, "vocab_size": 51200, "n_positions": 2048}
# Llama 3 405B, Dubey et al. 2024 Table 3: 126 layers, model dim 16384, FFN 53248, 128 heads, 8 KV heads, V 128256.
LLAMA3_405B = {"model_type": "llama", "hidden_size": 16384, "num_hidden_layers": 126, "num_attention_heads": 128,
               "num_key_value_heads": 8, "intermediate_size": 53248, "vocab_size": 128256,
               "tie_word_embeddings": False, "max_position_embeddings": 131072}


def _spec(config: dict, name: str) -> architectures.ModelSpec:
    return architectures.spec_from_config(config, name)


@pytest.fixture()
def gpt3_config(tmp_path):
    path = tmp_path / "gpt3-175b.json"
    path.write_text(json.dumps(GPT3))
    return str(path)


def test_exact_count_equals_narayanan_eq3_for_a_gpt_layer() -> None:
    """Eq. 3: F = 96·B·s·l·h²·(1 + s/6h + V/16lh) with full recompute; 72 and V/12lh without."""
    spec = _spec(GPT3, "gpt3-175b")
    values = {"H": 12288, "L": 96, "V": 51200, "S": 2048, "B": 1536}
    for recompute, key in (("full", "flops.iteration.narayanan"), ("none", "flops.iteration.narayanan.no_recompute")):
        fl = ptime.flops(spec, seq=2048, recompute=recompute)
        ours = fl.train.evaluate(fl.train.restrict({**fl.values, "S": 2048})).total * 1536 * 2048
        paper = library.get(key).evaluate(values).total
        assert ours == paper, (recompute, ours, paper)
    # eq. 3 at the paper's GPT-3 iteration, by hand: 96·1536·2048·96·12288² = 4.3774e18, × (1 + 2048/73728
    # + 51200/18874368) = × 1.03049 → 4.5109e18 FLOPs
    assert float(library.get("flops.iteration.narayanan").evaluate(values).total) == pytest.approx(4.5109e18, rel=1e-4)


def test_gpt3_on_1024_a100s_at_140_tflops_takes_about_34_days(gpt3_config) -> None:
    """Narayanan et al. §5.1: 8·T·P/(n·X) with T = 300B, P = 175B, n = 1024, X = 140 TFLOP/s ≈ 34 days."""
    rule = library.get("time.train.narayanan")
    days = float(rule.evaluate(rule.example).total) / 86400
    assert days == pytest.approx(2_929_687.5 / 86400)  # 8·300e9·175e9 / (1024·140e12) s, by hand
    assert round(days) == 34
    # the same run from the model's own exact count (full recompute, as in the paper), 1536 sequences per step
    plan = ptime.train_time(gpt3_config, "a100-80gb", gpus=1024, tokens=300 * 10**9, achieved_tflops=140,
                            batch=1, seq=2048, tp=8, pp=8, microbatches=96, recompute="full")
    ours = plan.figures["train_seconds"] / 86400
    assert plan.figures["tokens_per_step"] == 1536 * 2048
    assert 33 < ours < 35.5  # exact count 1.434e12 FLOPs/token vs the rule's 8P = 1.4e12: 34.7 days
    eq3 = float(library.get("flops.iteration.narayanan").evaluate(
        {"B": 1536, "S": 2048, "L": 96, "H": 12288, "V": 51200}).total)
    assert plan.figures["train_seconds"] == pytest.approx(eq3 * (300e9 / (1536 * 2048)) / (1024 * 140e12), rel=1e-12)


def test_llama3_405b_training_flops() -> None:
    """Dubey et al. 2024: 3.8 × 10^25 FLOPs for 15.6T tokens, the 6·N·D rule at N = 405B."""
    spec = _spec(LLAMA3_405B, "llama-3-405b")
    n = spec.param_count()
    assert 405e9 < n < 406e9  # "405B"
    rule = library.get("flops.total.kaplan")
    total = float(rule.evaluate({"N": n, "T": 15_600_000_000_000}).total)
    assert f"{total:.1e}" == "3.8e+25"
    # the exact count adds the attention (and leaves out the embedding lookup): at their 8K context
    fl = ptime.flops(spec, seq=8192)
    exact = fl.per_token() * 15.6e12
    attention = 12 * 126 * 8192 * 16384  # PaLM's 12·L·(a·d_head)·S, by hand: 2.03e11 per token
    embedding = 128256 * 16384  # never multiplied
    norms = 126 * 2 * 16384 + 16384
    assert fl.per_token() == 6 * (n - embedding - norms) + attention
    assert 1.05 < exact / total < 1.10


def test_attention_share_follows_palm_and_grows_with_context() -> None:
    """PaLM Appendix B: training FLOPs per token 6N + 12·L·H·Q·T; the attention term is linear in S."""
    spec = architectures.load("llama-3-8b")
    n = spec.param_count()
    weights = 6 * (n - 128256 * 4096 - (32 * 2 + 1) * 4096)  # every weight but the embedding table and norms
    for seq in (2048, 8192, 131072):
        fl = ptime.flops(spec, seq=seq)
        assert fl.per_token() - weights == 12 * 32 * 32 * 128 * seq
    palm = library.get("flops.train.palm")
    assert palm.diff("S") == 12 * sympy.Symbol("L", positive=True, integer=True) * sympy.Symbol(
        "a", positive=True, integer=True) * sympy.Symbol("d_head", positive=True, integer=True)
    # attention FLOPs pass the weights' at S = weights / (12·L·a·d_head) ≈ 28.6K tokens for Llama-3-8B
    crossover = weights / (12 * 32 * 4096)
    assert 28_000 < crossover < 29_000
    short, long = ptime.flops(spec, seq=4096).per_token(), ptime.flops(spec, seq=32768).per_token()
    assert (short - weights) / weights < 0.15 < 0.5 < (long - weights) / weights


def test_kaplan_six_n_is_the_exact_count_without_attention() -> None:
    """Kaplan et al. §2.1: C_forward ≈ 2N + 2·n_layer·n_ctx·d_attn; training 3× that."""
    kaplan = library.get("flops.train.kaplan")
    assert kaplan.evaluate({"N": 10**9}).total == 6 * 10**9
    generic = library.get("flops.train")
    ex = generic.example
    per_token = generic.evaluate(ex).total
    forward = library.get("flops.forward").evaluate(ex).total
    assert per_token == 3 * forward


def test_decode_at_batch_one_is_bounded_by_hbm_bandwidth() -> None:
    """tokens/s ≤ W_hbm / (weight bytes + KV bytes read per token); H100 SXM5: 3.35 TB/s (datasheet)."""
    plan = ptime.infer_time("llama-3-8b", "h100-80gb", batch=1, seq=4096, mfu=0.5)
    weights = 2 * (8_030_261_248 - 128256 * 4096)  # bf16, all but the embedding table (only one row read)
    kv = 2 * 32 * 8 * 128 * 4096 * 2  # 2·L·a_kv·d_head·S·bytes
    assert plan.values["M_w"] == weights and plan.values["M_kv"] == kv
    bound = 3.35e12 / (weights + kv)  # 215.5 tokens/s, by hand
    assert plan.figures["decode_tokens_per_second"] == pytest.approx(bound, rel=1e-12)
    assert 215 < bound < 216
    # compute-bound only at a batch far beyond the bandwidth's: at B = 1 the bytes win by ~100×
    f = plan.formulas["decode_seconds"]
    ev = f.evaluate(f.restrict(plan.values))
    assert float(ev.total) == pytest.approx((weights + kv) / 3.35e12)


def test_prefill_is_compute_bound() -> None:
    plan = ptime.infer_time("llama-3-8b", "h100-80gb", batch=2, seq=4096, mfu=0.5)
    forward = ptime.flops("llama-3-8b", seq=4096).per_token(train=False)
    assert plan.figures["prefill_seconds"] == pytest.approx(forward * 2 * 4096 / (989.5e12 * 0.5), rel=1e-12)
