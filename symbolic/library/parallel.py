"""Model states per GPU under data parallelism with ZeRO, tensor and pipeline parallelism, offload.

ZeRO (Rajbhandari et al. 2020, §5) shards model states over the N_d data-parallel ranks:

- stage 1 shards the optimizer states: here the fp32 master weights, the optimizer's states and
  the fp32 gradient copy when there is one (the ZeRO paper's K covers master + Adam states);
- stage 2 also shards the gradients;
- stage 3 also shards the weights, and each GPU gathers one layer's full 16-bit weights at a
  time: DeepSpeed's ZeRO-3 estimator adds 4 bytes per parameter of the largest module
  (its 16-bit weights and gradients).

The paper's own formulas with Ψ parameters and K bytes of optimizer state per parameter are
``zero.stage0`` ... ``zero.stage3``; its example (Ψ = 7.5 B, K = 12, N_d = 64) gives 120 GB,
31.4 GB, 16.6 GB and 1.9 GB. The same stages applied to the named terms of ``precision.py``
give Megatron's distributed optimizer (a stage-1 scheme: 6 + 12/d bytes for bf16, 4 + 16/d
for fp16) and DeepSpeed's ZeRO-2 estimate (2 + 18/N_d).

Tensor parallelism t splits every weight matrix of a layer over t ranks, pipeline parallelism p
gives each stage L/p layers; the first stage also holds the token (and position) embeddings
and, with p = 1, an untied output head (Megatron's "most loaded model shard"). Sequence
parallelism changes activations only (``activations.py``).

Optimizer offload (ZeRO-Offload, Ren et al. 2021) moves the master weights, optimizer states and
the fp32 gradient copy to host memory; they are reported as host bytes per GPU process, and
DeepSpeed's estimator adds half again for pinned buffers (``additional_buffer_factor = 1.5``).
"""

from __future__ import annotations

import sympy

from ..core.errors import UserError
from ..core.symbols import K, N, e_p, n_d, p, t
from ..core.term import Term
from ..math.formula import Formula
from . import precision as prec
from .registry import register

# The ZeRO stage from which each kind of model-state term is sharded over the data-parallel ranks.
SHARDED_FROM = {"weights": 3, "gradients": 2, "fp32_gradients": 1, "master_weights": 1, "optimizer_states": 1,
                "adapter_weights": 3}  # LoRA adapters (planning.finetune): parameters, like the weights
OFFLOADED = ("fp32_gradients", "master_weights", "optimizer_states")
HOST_BUFFER_FACTOR = sympy.Rational(3, 2)  # DeepSpeed's additional_buffer_factor
ZERO_STAGES = (0, 1, 2, 3)


def shard_terms(terms: list[Term], zero: int, dp: sympy.Expr = n_d) -> list[Term]:
    """The model-state terms on one GPU under ZeRO ``zero`` over ``dp`` data-parallel ranks."""
    if zero not in ZERO_STAGES:
        raise UserError(f"ZeRO stage must be one of 0, 1, 2, 3, not {zero!r}")
    out = []
    for term in terms:
        stage = SHARDED_FROM.get(term.key)
        if stage is None:
            raise ValueError(f"{term.key!r} is not a model-state term")
        if zero >= stage:
            note = f"Sharded over the data-parallel ranks from ZeRO stage {stage}." + (f" {term.note}" if term.note else "")
            out.append(term.replace(expr=term.expr / dp, title=f"{term.title} (÷ N_d, ZeRO-{zero})", note=note))
        else:
            out.append(term)
    return out


def split_offload(terms: list[Term]) -> tuple[list[Term], list[Term]]:
    """(device terms, host terms): optimizer offload moves ``OFFLOADED`` kinds to host memory."""
    device = [term for term in terms if term.key not in OFFLOADED]
    host = [term.replace(source="ren2021", note="Offloaded to host memory (ZeRO-Offload). " + term.note)
            for term in terms if term.key in OFFLOADED]
    return device, host


def host_buffer_term(host: list[Term]) -> Term:
    """DeepSpeed's pinned-buffer allowance: half the offloaded states again."""
    total = sympy.Add(*(term.expr for term in host))
    return Term("host_buffers", "pinned transfer buffers (DeepSpeed's 1.5× factor)", total * (HOST_BUFFER_FACTOR - 1),
                "bytes", "deepspeed", "additional_buffer_factor=1.5",
                "DeepSpeed's estimators multiply host memory by 1.5; this term is that half.")


def gathered_layer_term(largest: sympy.Expr, weight_bytes: int, grad_bytes: int, what: str) -> Term:
    """ZeRO-3: the largest module's full weights and gradients, gathered on every GPU."""
    per = weight_bytes + grad_bytes
    return Term("zero3_gathered", f"ZeRO-3: largest module gathered ({what})", per * largest, "bytes", "deepspeed",
                "estimate_zero3_model_states_mem_needs",
                f"DeepSpeed counts 4 bytes per parameter of the largest module (16-bit weights and gradients); "
                f"here {weight_bytes} + {grad_bytes}. Prefetch buckets and live-parameter limits are not modelled.")


def params_per_gpu(first_stage: sympy.Expr, head: sympy.Expr, pp: int, total: sympy.Expr = N,
                   tp_sym: sympy.Expr = t, pp_sym: sympy.Expr = p,
                   definitions: dict[sympy.Symbol, Formula] | None = None) -> Formula:
    """N_gpu: parameters on the most loaded GPU (first pipeline stage) under tensor and pipeline parallelism.

    ``first_stage`` are the parameters only the first stage holds (token and position
    embeddings); ``head`` an untied output head (0 if tied), held by the last stage, which is
    the first when ``pp`` is 1. Everything else is split over p stages and t ranks, so norms and
    biases are treated as if split too (a small overestimate of the saving). ``tp_sym`` and
    ``pp_sym`` are the symbols t and p, or 1 where that kind of parallelism is not used.
    """
    terms = [Term("layers", "transformer layers: L/p per stage, split over t ranks",
                  (total - first_stage - head) / (pp_sym * tp_sym), "params", "megatron",
                  "compute_weight_and_optimizer_memory", "Everything but the embeddings and head, ÷ p·t.")]
    terms.append(Term("embedding", "embeddings on the first stage, split over t (vocab-parallel)",
                      first_stage / tp_sym, "params", "megatron", "most loaded model shard"))
    if pp == 1 and head != 0:
        terms.append(Term("head", "untied output head (with p = 1 it sits on the same GPU)", head / tp_sym, "params",
                          "megatron", "most loaded model shard"))
    return Formula("plan.params_per_gpu", "Parameters held by the most loaded GPU", terms, source="megatron",
                   name="N_gpu", definitions=definitions,
                   note="Megatron's most loaded model shard: (layers/p + embedding) / t, plus the untied head when "
                        "p = 1.")


def experts_term(experts: sympy.Expr, pp_sym: sympy.Expr | int = p) -> Term:
    """The routed experts' parameters one GPU holds under expert parallelism: ``experts`` ÷ e_p (and ÷ p by stage).

    ``experts`` are the parameters of all routed experts of the model; ``pp_sym`` is p, or 1 without
    pipeline parallelism.
    """
    return Term("experts", "routed experts: n_exp/e_p of them per GPU (expert parallelism)", experts / (e_p * pp_sym),
                "params", "project", "", "Expert parallelism (GShard, Lepikhin et al. 2020; DeepSpeed-MoE) places "
                "n_exp/e_p whole experts on each GPU; the router, shared experts, attention and embeddings stay "
                "replicated (or split by t and p as without experts). Every expert stays resident somewhere: the "
                "job's total is all n_exp experts.")


# --- the ZeRO paper's formulas, verbatim --------------------------------------------------------
_ZERO_EXAMPLE = {"N": 7_500_000_000, "K": 12, "n_d": 64}
_P = "parameters (fp16)"
_G = "gradients (fp16)"
_O = "optimizer states (K bytes/param)"
_ZERO_TERMS = {
    0: (2 * N, 2 * N, K * N),
    1: (2 * N, 2 * N, K * N / n_d),
    2: (2 * N, 2 * N / n_d, K * N / n_d),
    3: (2 * N / n_d, 2 * N / n_d, K * N / n_d),
}
_ZERO_TITLES = {0: "baseline data parallel: (2 + 2 + K)Ψ", 1: "ZeRO stage 1 (P_os): 4Ψ + KΨ/N_d",
                2: "ZeRO stage 2 (P_os+g): 2Ψ + (2 + K)Ψ/N_d", 3: "ZeRO stage 3 (P_os+g+p): (2 + 2 + K)Ψ/N_d"}
for _stage, (_pw, _gw, _ow) in _ZERO_TERMS.items():
    register(Formula(
        f"zero.stage{_stage}", f"Model states per GPU, {_ZERO_TITLES[_stage]} (ZeRO paper)",
        (Term("parameters", _P, _pw, "bytes", "zero2020", "§5, Figure 1"),
         Term("gradients", _G, _gw, "bytes", "zero2020", "§5, Figure 1"),
         Term("optimizer_states", _O, _ow, "bytes", "zero2020", "§3.1: K = 12 for mixed-precision Adam")),
        source="zero2020", where="Figure 1", name="M_states",
        example={k: v for k, v in _ZERO_EXAMPLE.items() if k != "n_d" or _stage > 0},
        note="Ψ is N here. With Ψ = 7.5 B, K = 12, N_d = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB (decimal GB)."))

register(Formula(
    "zero.megatron.distributed", "Megatron's distributed optimizer, bf16 with fp32 gradients: 6 + 12/d bytes/param",
    shard_terms(prec.state_terms("bf16-mixed", "adamw", "fp32"), 1), source="megatron-distopt", name="M_states",
    example={"N": 7_000_000_000, "n_d": 8},
    note="A stage-1 scheme: master weights and Adam states sharded, bf16 weights and fp32 gradients replicated."))
register(Formula(
    "zero.megatron.distributed.fp16", "Megatron's distributed optimizer, fp16 weights and gradients: 4 + 16/d bytes/param",
    shard_terms(prec.state_terms("fp16-mixed", "adamw", "16bit+fp32"), 1), source="megatron-distopt", name="M_states",
    example={"N": 7_000_000_000, "n_d": 8},
    note="fp16 weights and gradients replicated; fp32 main gradients, master weights and Adam states sharded."))
register(Formula(
    "zero.deepspeed.stage2", "DeepSpeed's ZeRO-2 estimator: 2 + 18/N_d bytes/param",
    shard_terms(prec.state_terms("fp16-mixed", "adamw", "16bit+fp32"), 2), source="deepspeed", name="M_states",
    example={"N": 7_000_000_000, "n_d": 8},
    note="estimate_zero2_model_states_mem_needs (2024 and later); its docs still print 4 + 16/N, which is the "
         "same 20 bytes sharded as in stage 1."))
