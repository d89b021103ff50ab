"""The PyTorch-aware activation and peak terms, without torch.

The expected byte counts were measured with torch 2.13.0 (CPU) and transformers 5.24.0 through
``symbolic.measured.measure.saved_tensors`` (and cross-checked by walking ``grad_fn._saved_*``); the
torch tests (``test_measure.py``) re-measure them on every run where torch is installed.
"""

from __future__ import annotations

import pytest
import sympy

import symbolic
from symbolic.library import activations_pytorch as act
from symbolic.library import peak_pytorch as pk
from symbolic.measured.predict import activation_bytes

TINY_GPT2 = {"H": 48, "L": 1, "a": 4, "V": 128, "d_ff": 192, "B": 3, "S": 8}
TINY_LLAMA = {"H": 48, "L": 1, "a": 4, "a_kv": 2, "d_head": 12, "V": 128, "d_ff": 80, "B": 3, "S": 8}
ALL_DROPOUT = frozenset({"embd", "attn", "resid"})


def saved_at(family: str, values: dict, **options: object) -> int:
    f = act.saved(family, **options).formula
    return int(f.evaluate(f.restrict(values)).total)


@pytest.mark.parametrize(("family", "values", "options", "measured"), [
    # article A's network, d_in 24, d_h 40, 10 classes, batch 6 (with or without biases: the same)
    ("mlp", {"d_in": 24, "d_h": 40, "n_out": 10, "B": 6}, {"precision": "fp32", "device": "cpu"}, 5140),
    ("mlp", {"d_in": 24, "d_h": 40, "n_out": 10, "B": 6}, {"precision": "bf16", "device": "cpu"}, 2594),
    # GPT-2 with dropout 0.1 everywhere; SDPA falls back to the math path on the CPU (in fp32)
    ("gpt2", TINY_GPT2, {"precision": "fp32", "device": "cpu", "attn": "eager", "dropout": ALL_DROPOUT}, 174596),
    ("gpt2", TINY_GPT2, {"precision": "fp32", "device": "cpu", "attn": "sdpa", "dropout": ALL_DROPOUT}, 174596),
    ("gpt2", TINY_GPT2, {"precision": "bf16", "device": "cpu", "attn": "eager", "dropout": ALL_DROPOUT}, 93668),
    # GPT-2 without dropout: the CPU flash kernel keeps Q, K, V (one storage), output and log-sum-exp
    ("gpt2", TINY_GPT2, {"precision": "bf16", "device": "cpu", "attn": "sdpa"}, 82532),
    # Llama: fp32 RMSNorm internals, repeat_kv copies in eager attention, enable_gqa in SDPA
    ("llama", TINY_LLAMA, {"precision": "fp32", "device": "cpu", "attn": "eager"}, 107428),
    ("llama", TINY_LLAMA, {"precision": "bf16", "device": "cpu", "attn": "sdpa"}, 63652),
])
def test_saved_bytes_equal_the_measured_ones(family, values, options, measured):
    assert saved_at(family, values, **options) == measured


def test_every_term_is_sourced_and_attributed():
    for family in act.IMPLEMENTATIONS:
        for device in act.DEVICES:
            model = act.saved(family, precision="bf16", device=device, attn="eager", dropout=ALL_DROPOUT)
            assert model.formula.unit == "bytes"
            assert set(model.saved_by) == {t.key for t in model.formula.terms}
            assert all(t.source == "pytorch" and t.where.startswith("saved by ") for t in model.formula.terms)


def test_registered_canonical_variants():
    keys = set(symbolic.keys())
    for family in act.IMPLEMENTATIONS:
        assert {f"pytorch.saved.{family}", f"pytorch.peak.{family}"} <= keys
        f = symbolic.formula(f"pytorch.saved.{family}")
        assert f.evaluate(f.restrict(f.example)).total > 0


def test_gpt2_bf16_cuda_formula_is_symbolic_and_has_no_s_squared():
    f = act.saved("gpt2", precision="bf16", device="cuda", attn="sdpa", dropout=ALL_DROPOUT).formula
    B, S, H, L, a, d_ff, V = (symbolic.symbol(n) for n in ("B", "S", "H", "L", "a", "d_ff", "V"))
    expanded = f.expanded()
    # fused SDPA on CUDA keeps no a·S² tensor even with attention dropout; masks are 1-byte bools
    assert sympy.degree(expanded, S) == 1
    assert expanded.coeff(B * H * L * S) == 18
    assert expanded.coeff(B * L * S * d_ff) == 10
    assert expanded.coeff(B * L * S * a) == 4  # fp32 log-sum-exp
    assert expanded.coeff(B * S * V) == 4  # fp32 log-softmax


def test_device_changes_masks_and_norm_statistics():
    values = {**TINY_GPT2, "B": 2, "S": 16}
    cpu = act.saved("gpt2", precision="bf16", device="cpu", attn="eager", dropout=ALL_DROPOUT)
    cuda = act.saved("gpt2", precision="bf16", device="cuda", attn="eager", dropout=ALL_DROPOUT)
    c, g = cpu.formula.evaluate(values), cuda.formula.evaluate(values)
    c_terms, g_terms = {t.key: v for t, v in c.terms}, {t.key: v for t, v in g.terms}
    assert c_terms["attn.dropout_mask"] == 2 * g_terms["attn.dropout_mask"]  # bf16 mask vs bool mask
    assert g_terms["ln_1.stats"] == 2 * c_terms["ln_1.stats"]  # fp32 statistics on CUDA
    assert act.Setup(device="cpu", attn="sdpa", dropout=frozenset({"attn"})).kernel == "math"
    assert act.Setup(device="cuda", attn="sdpa", dropout=frozenset({"attn"})).kernel == "fused"
    assert act.Setup(device="cpu", attn="sdpa").kernel == "fused"


def test_setup_rejects_unknown_options():
    with pytest.raises(ValueError, match="precision"):
        act.Setup(precision="fp8")
    with pytest.raises(ValueError, match="device"):
        act.Setup(device="tpu")
    with pytest.raises(ValueError, match="dropout"):
        act.Setup(dropout=frozenset({"everywhere"}))
    with pytest.raises(ValueError, match="family"):
        act.saved("rnn")


def test_config_families_and_dropout_defaults():
    assert act.family_for({"model_type": "gpt2"}) == ("gpt2", "")
    assert act.family_for({"model_type": "mistral"})[0] == "llama"
    family, note = act.family_for({"model_type": "gemma", "hidden_act": "gelu", "intermediate_size": 1,
                                   "rms_norm_eps": 1e-6})
    assert family == "llama" and "not measured" in note
    assert act.dropout_sites({"model_type": "gpt2"}) == ALL_DROPOUT  # GPT2Config's defaults are 0.1
    assert act.dropout_sites({"model_type": "gpt2", "attn_pdrop": 0.0, "embd_pdrop": 0, "resid_pdrop": 0.0}) == set()
    assert act.dropout_sites({"model_type": "llama", "attention_dropout": 0.0}) == set()


def test_peak_formula_phases_and_adamw_temporaries():
    model = pk.peak("mlp", precision="fp32", device="cpu", bias=False)
    d_in, d_h, n_out = (symbolic.symbol(n) for n in ("d_in", "d_h", "n_out"))
    # no biases: gat.weight's denominator is alive while up.weight's two temporaries are made
    assert pk.adamw_cpu_temporaries(pk.parameter_tensors("mlp", bias=False)) == sympy.Max(
        2 * d_in * d_h, d_in * d_h + 2 * d_h**2, d_h**2 + 2 * d_h * d_in, d_h * d_in + 2 * d_in * n_out)
    values = {"d_in": 2048, "d_h": 4096, "n_out": 10, "B": 128, "N": 33_574_912}
    total = model.formula.evaluate(values).total
    phases = {k: v.xreplace({symbolic.symbol(n): x for n, x in values.items()}) for k, v in model.phases().items()}
    assert total == max(phases.values()) == phases["optimizer"]
    # 16 bytes per parameter, the two temporaries and the previous denominator, the inputs, AdamW's 4 step counters
    assert total == 16 * 33_574_912 + 4 * (2048 * 4096 + 2 * 4096**2) + 128 * (4 * 2048 + 8) + 4 * 4


@pytest.mark.parametrize("family", ["mlp", "gpt2", "llama"])
def test_maximum_builds_what_sympy_max_builds(family):
    # pk.maximum avoids SymPy's slow pairwise search at import; the expressions must be the same
    for tied, bias in ((True, True), (True, False), (False, True), (False, False)):
        sizes = pk.parameter_tensors(family, bias=bias, tied=tied)
        pairs = {2 * sizes[0]} | {prev + 2 * cur for prev, cur in zip(sizes, sizes[1:])}
        assert pk.maximum(*pairs) == sympy.Max(*pairs)
    for precision, device in (("fp32", "cpu"), ("bf16", "cuda")):
        model = pk.step(family, act.Setup(precision=precision, device=device, attn="eager",
                                          dropout=frozenset() if family == "mlp" else ALL_DROPOUT))
        extras = list(model.phase_extras().values())
        assert model.formula().term("phase").expr == sympy.Max(*extras) == pk.maximum(*extras)


def test_maximum_drops_only_proven_smaller_arguments():
    H, d_ff, n_pos = (symbolic.symbol(n) for n in ("H", "d_ff", "n_pos"))
    # d_ff·(H − 1) ≥ 0 for a positive integer H, as SymPy proves it
    assert pk.maximum(2 * H * d_ff + d_ff, H * d_ff + 2 * d_ff) == 2 * H * d_ff + d_ff
    assert pk.maximum(H, 2 * H, H) == 2 * H and pk.maximum(3, 5) == 5
    undecided = pk.maximum(H * d_ff, 2 * H * n_pos)
    assert set(undecided.args) == {H * d_ff, 2 * H * n_pos} == set(sympy.Max(H * d_ff, 2 * H * n_pos).args)
    x = sympy.Symbol("x", real=True)  # not known to be nonnegative: plain sympy.Max
    assert pk.maximum(x, 2 * x) == sympy.Max(x, 2 * x)


def test_cuda_adamw_is_foreach():
    model = pk.peak("llama", precision="bf16", device="cuda", attn="sdpa")
    N = symbolic.symbol("N")
    assert model.optimizer.coeff(N) == 4  # gradients N·b + foreach temporaries N·b, b = 2


def test_prediction_needs_no_torch():
    r = activation_bytes("gpt2", batch=1, seq=128, precision="fp32", attn="eager", device="cpu")
    # the config's use_cache (transformers' default, true): with B = 1 and eager attention the KV cache's
    # copies of K and V are kept beside the c_attn output, 2·4·S·H·L bytes more than the 196,809,220 below
    f = act.saved("gpt2", precision="fp32", device="cpu", attn="eager", dropout=ALL_DROPOUT,
                  activation="gelu_new", use_cache=True).formula
    values = {"H": 768, "L": 12, "a": 12, "V": 50257, "d_ff": 3072, "B": 1, "S": 128}
    assert r["activation_bytes"] == f.evaluate(values).total == 196_809_220 + 2 * 4 * 128 * 768 * 12
    assert r["dropout"] == ["attn", "embd", "resid"] and r["family"] == "gpt2"
    assert sum(r["terms"].values()) == r["activation_bytes"] == sum(r["by_module"].values())
    with pytest.raises(ValueError, match="pure"):
        activation_bytes("gpt2", batch=1, seq=128, precision="bf16-mixed")
    llama = activation_bytes("llama-3-8b", batch=1, seq=8192, precision="bf16", attn="sdpa", device="cuda")
    assert llama["family"] == "llama" and llama["dropout"] == [] and llama["values"]["a_kv"] == 8


def test_memory_cli_reports_activation_bytes(capsys):
    import json

    from symbolic.cli import main

    code = main(["memory", "gpt2", "--mode", "train", "--batch", "1", "--seq", "128", "--precision", "fp32",
                 "--attn", "eager", "--device", "cpu", "--activations", "pytorch", "--no-use-cache", "--json"])
    data = json.loads(capsys.readouterr().out)
    # the real 12-layer GPT-2 measured 196,809,228 bytes (torch 2.13.0, CPU); with B = 1 the loss keeps a
    # view of the padded labels, 8 bytes the formula leaves out
    assert code == 0 and data["activation_bytes"] == 196_809_220
    # the saved bytes are the plan's activations, inputs and logits terms; loss_gradients is not saved
    assert data["terms"]["activations"] + data["terms"]["inputs"] + data["terms"]["logits"] == data["activation_bytes"]
    # the total is the step's peak: the largest phase (resident terms + that phase's own)
    assert data["total_bytes"] == max(data["phases"].values())
    assert data["options"]["activations"] == "pytorch" and data["options"]["device"] == "cpu"
    # autocast is modelled now (fp32 weights, 16-bit copies): bf16-mixed is no longer refused
    code = main(["memory", "gpt2", "--precision", "bf16-mixed", "--activations", "pytorch", "--json"])
    mixed = json.loads(capsys.readouterr().out)
    assert code == 0 and mixed["activation_bytes"] > 0
    code = main(["memory", "gpt2", "--mode", "train", "--precision", "bf16", "--activations", "pytorch"])
    out = capsys.readouterr().out
    # the loss's gradients are in the backward phase's term (peak_pytorch.step), beside what is saved
    assert code == 0 and "activation_bytes" in out and "backward_live" in out
