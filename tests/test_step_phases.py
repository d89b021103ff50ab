"""Contract S: ``peak_pytorch.step`` — what one PyTorch training step keeps alive, phase by phase.

No torch here. The byte counts below were measured with torch 2.13.0 (CPU) and transformers
5.24.0 through ``symbolic.measured.measure.saved_tensors`` (tiny models: hidden 64, one layer);
``test_measure.py`` re-measures the same kinds of case, whole steps included, where torch is
installed.
"""

from __future__ import annotations

import pytest
import sympy

import symbolic
from symbolic.library import activations_pytorch as act
from symbolic.library import peak_pytorch as pk

ALL_DROPOUT = frozenset({"embd", "attn", "resid"})
MLP = {"d_in": 64, "d_h": 128, "n_out": 10, "B": 6}
GPT2 = {"H": 64, "L": 1, "a": 4, "V": 512, "d_ff": 256, "B": 2, "S": 48}
LLAMA = {"H": 64, "L": 1, "a": 4, "a_kv": 2, "d_head": 16, "V": 512, "d_ff": 176, "B": 2, "S": 48}


def saved_at(family: str, values: dict, **options: object) -> int:
    f = act.saved(family, **options).formula
    return int(f.evaluate(f.restrict(values)).total)


def at(expr: sympy.Expr, values: dict) -> sympy.Expr:
    return expr.xreplace({symbolic.symbol(k): v for k, v in values.items()})


@pytest.mark.parametrize(("family", "values", "options", "measured"), [
    # torch.autocast(bf16) on the CPU: fp32 weights; 16-bit input and weight copies kept by the matmuls
    ("mlp", MLP, {"precision": "bf16-mixed", "device": "cpu"}, 57756),
    ("gpt2", GPT2, {"precision": "bf16-mixed", "device": "cpu", "attn": "eager"}, 880772),
    ("gpt2", GPT2, {"precision": "bf16-mixed", "device": "cpu", "attn": "eager", "dropout": ALL_DROPOUT}, 966788),
    ("llama", LLAMA, {"precision": "bf16-mixed", "device": "cpu", "attn": "sdpa"}, 757892),
    ("llama", LLAMA, {"precision": "bf16-mixed", "device": "cpu", "attn": "eager"}, 879236),
])
def test_mixed_precision_saved_bytes_equal_the_measured_ones(family, values, options, measured):
    assert saved_at(family, values, **options) == measured


def test_mixed_precision_setup():
    s = act.Setup(precision="bf16-mixed", device="cpu")
    assert (s.b, s.param_bytes, s.residual_bytes, s.mixed, s.masks) == (2, 4, 4, True, "dtype")
    assert act.Setup(precision="bf16", device="cuda").masks == "bool"
    assert act.Setup(precision="bf16", device="cpu", dropout_masks="bool").mask_bytes == 1
    assert act.Setup(precision="fp32", device="cuda", dropout_masks="dtype").mask_bytes == 4
    with pytest.raises(ValueError, match="mask"):
        act.Setup(dropout_masks="int8")
    assert {"bf16-mixed", "fp16-mixed"} <= set(act.PRECISIONS)


def test_kv_cache_adds_two_copies_per_layer_where_measured():
    # GPT-2 with fused SDPA keeps the cache's K and V copies beside the c_attn output: 2·b·B·S·H per layer;
    # eager attention only at B = 1 (matmul's reshapes are views there); Llama saves the same bytes
    values = {**GPT2, "L": 3}
    for b, precision in ((4, "fp32"), (2, "bf16")):
        for batch in (1, 2, 5):
            point = {**values, "B": batch}
            off = saved_at("gpt2", point, precision=precision, device="cuda", attn="sdpa")
            on = saved_at("gpt2", point, precision=precision, device="cuda", attn="sdpa", use_cache=True)
            assert on - off == 2 * b * batch * 48 * 64 * 3
            off = saved_at("gpt2", point, precision=precision, device="cpu", attn="eager")
            on = saved_at("gpt2", point, precision=precision, device="cpu", attn="eager", use_cache=True)
            assert on - off == (2 * b * 48 * 64 * 3 if batch == 1 else 0)
    assert saved_at("llama", LLAMA, precision="bf16", attn="sdpa", use_cache=True) == saved_at(
        "llama", LLAMA, precision="bf16", attn="sdpa")


def test_config_use_cache_is_followed():
    assert act.setup_for({"model_type": "gpt2"})[1].use_cache is True  # transformers' default
    assert act.setup_for({"model_type": "gpt2", "use_cache": False})[1].use_cache is False
    assert act.setup_for({"model_type": "gpt2"}, use_cache=False)[1].use_cache is False


def test_step_is_phases_and_the_peak_is_their_maximum():
    model = pk.step("gpt2", act.Setup(precision="bf16", device="cuda", attn="sdpa"))
    assert set(model.phases) == set(pk.PHASES)
    assert {t.key for t in model.resident} == {"weights", "optimizer_state"}
    exprs = model.phase_exprs()
    values = {"H": 768, "L": 12, "a": 12, "V": 50257, "d_ff": 3072, "B": 8, "S": 1024, "N": 124_439_808}
    numbers = {k: at(v, values) for k, v in exprs.items()}
    assert at(model.peak(), values) == max(numbers.values())
    # GPT-2 small at B·S = 8192 in bf16: the start of backward sets the peak (saved + 8·B·S·V)
    assert max(numbers, key=numbers.get) == "backward"
    saved = act.saved("gpt2", model.setup).formula
    # resident: bf16 weights (2·N) and AdamW moments (4·N)
    assert numbers["backward"] == 6 * values["N"] + saved.evaluate(saved.restrict(values)).total + 8 * 8 * 1024 * 50257
    formula = model.formula()
    assert formula.key == "pytorch.peak.gpt2" and formula.evaluate(formula.restrict(values | {"N": values["N"]}))


def test_optimizers_and_their_temporaries():
    s = act.Setup(precision="fp32", device="cpu")
    N = symbolic.symbol("N")
    sgd = pk.step("mlp", s, optimizer="sgd-momentum")
    assert sum(t.expr for t in sgd.resident) == 8 * N  # weights + momentum buffers, fp32
    assert dict((t.key, t.expr) for t in sgd.phases["optimizer"])["optimizer_temporaries"] == 0
    assert sum(t.expr for t in pk.step("mlp", s, optimizer="sgd").resident) == 4 * N
    foreach = pk.step("llama", act.Setup(precision="bf16", device="cpu"), foreach=True)
    assert dict((t.key, t.expr) for t in foreach.phases["optimizer"])["optimizer_temporaries"] == 2 * N
    assert pk.step("llama", act.Setup(device="cuda")).foreach and not pk.step("llama", act.Setup(device="cpu")).foreach
    with pytest.raises(ValueError, match="optimizer"):
        pk.step("mlp", s, optimizer="lion")


def test_mlp_without_biases_uses_its_own_tensors():
    # no biases: gat.weight's denominator is alive while up.weight's two temporaries are made
    model = pk.step("mlp", act.Setup(precision="fp32", device="cpu"), bias=False)
    values = {"d_in": 2048, "d_h": 4096, "n_out": 10, "B": 128, "N": 33_574_912}
    optimizer = at(model.phase_exprs()["optimizer"], values)
    # 16 bytes a parameter, the temporaries, the inputs, AdamW's four step counters (4 bytes each, on the CPU)
    assert optimizer == 16 * 33_574_912 + 4 * (2048 * 4096 + 2 * 4096**2) + 128 * (4 * 2048 + 8) + 4 * 4
    assert at(model.peak(), values) == optimizer
    # with biases the largest pair is gat.bias' denominator (d_h) beside up.weight's two temporaries (2·d_h²)
    with_bias = pk.step("mlp", act.Setup(precision="fp32", device="cpu"), bias=True)
    biased = at(with_bias.phase_exprs()["optimizer"], {**values, "N": 33_585_162})
    assert biased == 16 * 33_585_162 + 4 * (4096 + 2 * 4096**2) + 128 * (4 * 2048 + 8) + 4 * 8  # 8 counters


def test_mse_loss_keeps_the_one_hot_targets():
    s = act.Setup(precision="fp32", device="cpu")
    mse = act.saved("mlp", s, loss="mse").formula
    assert {t.key for t in mse.terms} >= {"loss.target"} and "loss.log_softmax" not in {t.key for t in mse.terms}
    assert saved_at("mlp", MLP, precision="fp32", device="cpu", loss="mse") == saved_at(
        "mlp", MLP, precision="fp32", device="cpu") - 4 * 6 * 10 - 8 * 6 - 4 + 4 * 6 * 10
    with pytest.raises(ValueError, match="loss"):
        act.saved("gpt2", loss="mse")


def test_trainable_subset_and_frozen_weights():
    s = act.Setup(precision="bf16", device="cuda")
    r = sympy.Symbol("r", positive=True, integer=True)
    H = symbolic.symbol("H")
    adapters = [r * H, H * r]
    model = pk.step("llama", s, trainable=adapters, trainable_bytes=4, frozen_bytes=2 * symbolic.symbol("N"))
    resident = {t.key: t.expr for t in model.resident}
    assert resident["weights"] == 4 * 2 * r * H and resident["frozen_weights"] == 2 * symbolic.symbol("N")
    assert resident["optimizer_state"] == 2 * 4 * 2 * r * H
    grads = dict((t.key, t.expr) for t in model.phases["optimizer"])["gradients"]
    assert grads == 4 * 2 * r * H


def test_registered_formulas_are_kept():
    for family in act.IMPLEMENTATIONS:
        f = symbolic.formula(f"pytorch.peak.{family}")
        counters = {"optimizer_steps"} if act.CANONICAL[family].device == "cpu" else set()  # AdamW's, CPU only
        assert {t.key for t in f.terms} == {"weights", "optimizer_state", "phase"} | counters
        assert f.evaluate(f.restrict(f.example)).total > 0
