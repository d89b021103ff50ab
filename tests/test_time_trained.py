"""The step time of a partly trained step: only the trained parameters are stepped and reduced (LoRA, frozen
embeddings; ``timing.step_terms``'s ``trained``, ``planning.time.trained_states``)."""

from __future__ import annotations

import pytest
import sympy

from symbolic.core.symbols import M_tr, P_gpu, P_tr, W_dp, W_hbm, n_d, n_mb
from symbolic.planning import time as ptime

H, L, KV, N = 4096, 32, 1024, 8_030_261_248  # Llama-3-8B: hidden, layers, K/V width (8 heads of 128), parameters
# rank 16 on q_proj (H → H) and v_proj (H → 1024), peft's default for llama: r · (in + out) each, every layer
ADAPTERS = L * 16 * ((H + H) + (H + KV))


def _plan(**options: object) -> ptime.TimePlan:
    return ptime.train_time("llama-3-8b", "h100-80gb", mfu=0.4, batch=1, seq=4096, dp=8, **options)


def _terms(plan: ptime.TimePlan) -> dict[str, sympy.Expr]:
    return {t.key: t.expr for t in plan.formulas["step_seconds"].terms}


def _same(expr: sympy.Expr, expected: sympy.Expr) -> bool:
    return sympy.simplify(expr - expected) == 0


def _defined(plan: ptime.TimePlan, symbol: sympy.Symbol) -> sympy.Expr:
    f = plan.formulas["step_seconds"].definitions[symbol]
    return f.evaluate(f.restrict(plan.values)).total


def test_lora_steps_and_reduces_the_adapters_only() -> None:
    """Llama-3-8B, LoRA rank 16 on q_proj and v_proj, 8 data-parallel ranks: the optimizer reads and writes the
    adapters' fp32 weights, gradients and AdamW's two moments (4 + 4 + 8 bytes each, Hu et al. 2021's r·(in + out)
    per adapted matrix), and the all-reduce moves their fp32 gradients only; the frozen base is read by every pass."""
    plan = _plan(lora_rank=16)
    assert ADAPTERS == 6_815_744
    assert _defined(plan, P_tr) == ADAPTERS
    assert _defined(plan, M_tr) == (4 + 4 + 8) * ADAPTERS == 109_051_904
    memory = plan.memory.terms()  # the memory plan's own states of the adapters, the same bytes
    assert sum(memory[k] for k in ("adapter_weights", "gradients", "optimizer_states")) == 109_051_904
    terms = _terms(plan)
    assert _same(terms["dp_comm"], 2 * (n_d - 1) / n_d * 4 * P_tr / W_dp)
    traffic = next(arg for arg in terms["compute"].args if arg.has(W_hbm))
    assert _same(traffic, (2 * n_mb * 2 * P_gpu + 2 * M_tr) / W_hbm)  # bf16 base read forward and backward
    seconds = plan.as_dict()["step_terms"]["dp_comm"]
    assert seconds * plan.values["W_dp"] == 2 * 7 / 8 * 4 * ADAPTERS
    qlora = _terms(_plan(lora_rank=16, qlora=True))
    assert qlora["dp_comm"] == terms["dp_comm"]


def test_full_fine_tuning_is_unchanged() -> None:
    """Full training reduces and steps every parameter (P_gpu = N), as before: no P_tr in its step."""
    plan = _plan()
    terms = _terms(plan)
    assert _same(terms["dp_comm"], 2 * (n_d - 1) / n_d * 4 * P_gpu / W_dp)
    assert P_tr not in plan.formulas["step_seconds"].definitions
    assert plan.as_dict()["step_terms"]["dp_comm"] * plan.values["W_dp"] == 2 * 7 / 8 * 4 * N


def test_frozen_embeddings_step_all_but_the_table() -> None:
    """Frozen embeddings alone: every parameter but the token embedding (V·H) is stepped and reduced, at the
    precision's bytes (bf16-mixed AdamW: 18 a parameter, fp32 gradients)."""
    plan = _plan(freeze_embeddings=True)
    trained = N - 128256 * H
    assert _defined(plan, P_tr) == trained
    assert _defined(plan, M_tr) == 18 * trained
    assert plan.as_dict()["step_terms"]["dp_comm"] * plan.values["W_dp"] == 2 * 7 / 8 * 4 * trained


# QLoRA's NF4 weights in Llama-3-8B: every block linear layer (q, k, v, o, gate, up, down), L of each
D_FF = 14336
NF4_MATRICES = (H * H, H * KV, H * KV, H * H, H * D_FF, H * D_FF, H * D_FF)


def test_qlora_passes_move_the_nf4_base_as_bitsandbytes_reads_it() -> None:
    """Each forward and backward pass of a QLoRA step moves, per NF4 weight of n numbers, its stored bytes (the memory
    plan's own NF4 rule: the same ``weights`` term), its absmax dequantized to fp32 (4 bytes per block of 64, written,
    read, written and read: 16) and a bf16 copy written and read again by the matmul (2 × 2 bytes a number); the
    bf16 embeddings, norms and head are read once. Not 2 bytes a parameter: more than the bf16 LoRA base moves."""
    plan = _plan(lora_rank=16, qlora=True)
    traffic = next(arg for arg in _terms(plan)["compute"].args if arg.has(W_hbm))
    values = {s: plan.values[s.name] for s in traffic.free_symbols if s.name in plan.values}
    values.update({P_gpu: _defined(plan, P_gpu), M_tr: _defined(plan, M_tr), W_hbm: 1})  # bytes, exactly
    per_pass = (traffic.subs(values) - 2 * values[M_tr]) / (2 * plan.values["n_mb"])
    stored = plan.memory.terms()["weights"]
    dequantized = L * sum(16 * -(-n // 64) + 4 * n for n in NF4_MATRICES)
    assert per_pass == stored + dequantized
    assert stored + dequantized > 2 * N  # the bf16 base of LoRA: 2 bytes a parameter per pass
    assert "QLoRA base" in plan.formulas["step_seconds"].terms[0].note


@pytest.mark.torch
def test_bitsandbytes_dequantizes_an_fp32_absmax_and_a_bf16_copy() -> None:
    """What ``lora.nf4_pass_bytes`` counts, from bitsandbytes 0.50.2 itself: on the CPU, a double-quantized NF4 weight
    of 96 × 192 dequantizes its absmax to ceil(n/64) fp32 numbers and itself to n bf16 numbers; the CUDA gemm_4bit
    dequantizes then calls F.linear above 1,536 rows of A, and MatMul4Bit's backward always dequantizes."""
    import inspect

    import bitsandbytes
    import torch
    from bitsandbytes import functional
    from bitsandbytes.autograd import _functions

    from symbolic.library import lora

    torch.manual_seed(0)
    layer = bitsandbytes.nn.Linear4bit(192, 96, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4",
                                       compress_statistics=True)
    layer.weight = bitsandbytes.nn.Params4bit(torch.randn(96, 192, dtype=torch.bfloat16), requires_grad=False,
                                              quant_type="nf4", compress_statistics=True)
    weight = layer.to("cpu").weight
    state = weight.quant_state
    absmax = functional.dequantize_blockwise(state.absmax, state.state2)
    copy = functional.dequantize_4bit(weight.data, state)
    n = 96 * 192
    assert (absmax.dtype, absmax.numel()) == (torch.float32, n // 64)
    assert (copy.dtype, copy.numel()) == (torch.bfloat16, n)
    moved = lora.nf4_pass_bytes(sympy.Integer(n))
    assert moved == lora.nf4_bytes(n) + lora.ABSMAX_PASSES * absmax.nbytes + 2 * copy.nbytes
    cuda = (__import__("pathlib").Path(bitsandbytes.__file__).parent / "backends" / "cuda" / "ops.py").read_text()
    assert f"_gemm_4bit_custom_max_m = {lora.DEQUANT_ROWS}" in cuda and "def _dequant_linear_fallback" in cuda
    assert "dequantize_4bit" in inspect.getsource(_functions.MatMul4Bit.backward)
    assert bitsandbytes.__version__ == "0.50.2"
