"""The planner's serving and training transients are the library's terms (``library/inference.py``,
``library/peak_pytorch.py``), not written in the planner."""

import sympy

from symbolic import planning
from symbolic.core.symbols import B, H, S, V, a, k_exp
from symbolic.library import inference as infer
from symbolic.networks.shape import load


def test_the_working_sets_by_hand():
    ffn = sympy.Symbol("f", positive=True)
    prefill, decode = infer.working_set_terms(ffn, gated=True, moe=False, act_bytes=2, flash=True)
    assert sympy.expand(prefill.expr - 2 * B * S * (2 * H + 3 * ffn)) == 0
    assert sympy.expand(decode.expr - 2 * B * (2 * H + 3 * ffn)) == 0
    prefill, decode = infer.working_set_terms(ffn, gated=False, moe=True, act_bytes=4, flash=False, tp=2)
    assert sympy.expand(prefill.expr - (4 * B * S * (2 * H + ffn * k_exp) + 2 * a * S**2 * B)) == 0
    assert sympy.expand(decode.expr - (4 * B * (2 * H + ffn * k_exp) + 2 * a * S * B)) == 0
    assert infer.last_logits_term(4).expr == B * V and infer.last_logits_term().key == "logits"


def test_the_planner_serves_with_the_library_terms():
    plan = planning.plan("llama-3-8b", mode="infer", runtime=False)
    phases = plan.layout.phases
    model = load("llama-3-8b")
    prefill, logits = phases["prefill"]
    decode, same_logits = phases["decode"]
    assert logits == same_logits == infer.last_logits_term(1)
    assert (prefill, decode) == infer.working_set_terms(model.ffn, model.gated, model.moe, 2, True, 1)


def test_the_planner_trains_with_the_library_transients():
    """A training plan's loss transients and AdamW temporaries are the library's terms (peak_pytorch)."""
    from symbolic.library import peak_pytorch as pypeak

    plan = planning.plan("gpt2", runtime=False)
    terms = {t.key: t for phase in plan.layout.phases.values() for t in phase}
    assert terms["logits_forward"] == pypeak.logits_forward_term(2, 1)
    assert terms["loss_gradients"] == pypeak.loss_gradients_term(1)
    temporaries = terms["optimizer_temporaries"]
    assert temporaries == pypeak.adamw_temporaries_term(temporaries.expr)
    assert pypeak.logits_forward_term(4).expr == 4 * S * B * V  # in fp32 the upcast is the logits themselves


def test_an_fp8_cache_counts_its_per_layer_scales_once_per_layer():
    # fp8 KV (formats.FORMATS["fp8"].layer_bytes): one fp32 k_scale and v_scale per attention layer, whatever B and S
    from symbolic import planning
    from symbolic.formats import FORMATS

    fp8 = planning.plan("llama-3-8b", mode="infer", kv_dtype="fp8", batch=4, seq=2048).terms()
    assert fp8["kv_scales"] == 32 * FORMATS["fp8"].layer_bytes == 32 * 8
    assert planning.plan("llama-3-8b", mode="infer", kv_dtype="fp8", batch=1, seq=128).terms()["kv_scales"] == 256
    assert "kv_scales" not in planning.plan("llama-3-8b", mode="infer", kv_dtype="bf16").terms()
