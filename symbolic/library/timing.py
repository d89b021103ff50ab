"""Time as terms: a roofline step of training, prefill and decode of serving, time to train and cost.

A training step (``step_terms``) is the sum of

- ``compute``: max(FLOPs / (F_peak · η), bytes moved / HBM bandwidth) per GPU (the roofline,
  Williams et al. 2009), η the model FLOP utilisation of the compute alone (``--mfu``);
- ``bubble``: the pipeline's idle share, compute · (p − 1)/(v · m), so that the step is the
  ideal time × (m + p − 1)/m: a bubble of (p − 1)/(m + p − 1) of the step (GPipe, Huang et al.
  2019; 1F1B and interleaving by v, Narayanan et al. 2021 §2.2), or with ``--pp-schedule zbv`` the zero-bubble V
  schedule's (Qi et al. 2023 §6, PyTorch's ScheduleZBVZeroBubble): compute · max(p − 1, 2·(2p − 1 − m))/(6m),
  the pass-times PyTorch's order leaves idle when F, I and W take equal time;
- ``tp_comm``: Megatron's all-reduces of the B·S·H activations, two per layer forward and two
  backward (two more with full recompute, one more with torchtitan's per-op ``ops``: its save list has the
  reduce-scatter but not the all-gathers, so the recomputed wk and w3 gather their inputs again, two
  all-gathers of (t − 1)/t each; without sequence parallelism the all-reduce after the recomputed wo),
  each moving 2·(t − 1)/t of the buffer per GPU (checkpointing every N-th layer, the recomputed forward's
  all-reduces, weight reads and ring gathers are of the ⌊L/N⌋ checkpointed layers: ``checkpointed``)
  (ring all-reduce, Patarasuk & Yuan 2009) over the tensor-parallel group's link;
- ``dp_comm``: the gradient all-reduce over the data-parallel ranks (2·(n_d − 1)/n_d of the
  gradients), with ZeRO 1/2 a reduce-scatter of the gradients and an all-gather of the updated
  weights ((n_d − 1)/n_d each), with ZeRO-3 also the weights gathered in the forward and the
  backward of every micro-batch (Rajbhandari et al. 2020 §7);
- ``pp_comm``: each stage sends one activation and one gradient of B·S·H per micro-batch;
- ``cp_comm`` (context parallelism, ``cp_width`` given): each rank computes S/c_p tokens of every
  sequence, so the FLOPs and the tensor-parallel traffic above are at S/c_p, the gradients are reduced
  over the n_d·c_p ranks FSDP shards over (torchtitan's dp_shard_cp mesh), and every layer's ring
  attention (PyTorch's ``_templated_ring_attention`` with the all-gather rotater) receives the other
  c_p − 1 ranks' K and V blocks in the forward, again in the backward (and in the recomputed forward
  under full recompute), and passes the fp32 dK and dV on c_p − 1 times in the backward.

Under ``ops`` the weights are read twice per micro-batch as without recompute (the recomputed wk, wo
and w3 read again are left out of the roofline's bytes) and the ring attention is not run again (the
attention is on the save list); both stated, not measured.

Assumptions, stated: no communication overlaps computation (an upper bound on the step; Megatron
and DeepSpeed hide much of the data-parallel traffic behind the backward pass), every link runs
at the bandwidth the catalogue gives per GPU and direction, FLOPs split evenly over the GPUs (a pipeline split
as torchtitan splits it runs at its slowest rank's pace: ``slowest``, with that rank's layers' tp and ring traffic),
memory traffic counts the weights read by every pass and the model states read and written once
by the optimizer (activations' traffic is left out).

When only part of the model trains (``trained``: LoRA or QLoRA adapters, frozen embeddings) the optimizer
reads and writes the trained parameters' states only (M_tr bytes) and data parallelism reduces only their
gradients (P_tr parameters; ZeRO 1/2 all-gather only their updated weights): a frozen weight has no gradient
and no optimizer state (peft sets requires_grad False on the base; DDP and FSDP reduce only the gradients
that exist). The weights read by every pass and ZeRO-3's gathers stay every parameter's; under QLoRA each
pass moves the NF4 base as bitsandbytes reads it (``pass_bytes``, ``lora.qlora_pass_bytes``: codes and absmax
read, the absmax dequantized in fp32, a bf16 copy written and read again by the matmul), not bf16 bytes.

With ``--achieved-tflops X`` instead (``time.train.achieved``): time = FLOPs / (n_gpu · X), X an
end-to-end rate with every overhead inside, as papers report it; nothing is modelled on top.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..core import sources
from ..core.symbols import (
    B,
    F_peak,
    H,
    L,
    M_kv,
    M_tr,
    M_w,
    N,
    P_gpu,
    P_tr,
    S,
    W_cp,
    W_dp,
    W_hbm,
    W_pp,
    W_tp,
    X,
    c_gpu,
    c_p,
    mfu,
    n_d,
    n_gpu,
    n_mb,
    p,
    t,
    t_dec,
    t_step,
    t_train,
    v_pp,
)
from ..core.term import Term
from ..math.formula import Formula
from .flops import F_fwd, F_tok, T
from .registry import register

for _id, _citation, _url in (
    ("williams2009", "S. Williams, A. Waterman, D. Patterson, \"Roofline: An Insightful Visual Performance Model\", "
     "CACM 2009", "https://doi.org/10.1145/1498765.1498785"),
    ("patarasuk2009", "P. Patarasuk, X. Yuan, \"Bandwidth optimal all-reduce algorithms for clusters of "
     "workstations\", JPDC 2009", "https://doi.org/10.1016/j.jpdc.2008.09.002"),
    ("huang2019", "Y. Huang et al., \"GPipe: Efficient Training of Giant Neural Networks using Pipeline "
     "Parallelism\", NeurIPS 2019", "https://arxiv.org/abs/1811.06965"),
    ("shoeybi2019", "M. Shoeybi et al., \"Megatron-LM: Training Multi-Billion Parameter Language Models Using "
     "Model Parallelism\", 2019, §3", "https://arxiv.org/abs/1909.08053"),
    ("qi2023", "P. Qi, X. Wan, G. Huang, M. Lin, \"Zero Bubble Pipeline Parallelism\", ICLR 2024 (arXiv 2023)",
     "https://arxiv.org/abs/2401.10241"),
):
    if _id not in sources.SOURCES:
        sources.register(_id, _citation, _url)

TOKENS_PER_STEP = n_d * B * n_mb * S  # sequences per step: data-parallel ranks × micro-batch × micro-batches


def _s(key: str, title: str, expr: sympy.Expr, source: str, where: str = "", note: str = "") -> Term:
    return Term(key, title, expr, "seconds", source, where, note)


@dataclass(frozen=True)
class Trained:
    """What a partly trained step's optimizer steps and data parallelism reduces (``step_terms``'s ``trained``)."""

    grad_bytes: sympy.Expr  # bytes of one trained parameter's gradient (LoRA: the adapter dtype's)
    weight_bytes: sympy.Expr  # bytes of one updated trained weight (ZeRO 1/2's all-gather)
    what: str = "the adapters"  # what trains, for the terms' notes
    params: sympy.Expr = P_tr  # P_tr, which the planner defines
    states: sympy.Expr = M_tr  # M_tr, the trained parameters' model-state bytes


def adapters_counted_term(count: sympy.Expr, title: str) -> Term:
    """P_tr under LoRA: the adapter parameters the optimizer steps and data parallelism reduces."""
    return Term("adapters", f"LoRA adapters ({title})", count, "params", "hu2021", "§4.1",
                "lora_A (r × in) and lora_B (out × r) per adapted matrix; every base weight is frozen.")


def unfrozen_counted_term(params: sympy.Expr, embedding: sympy.Expr) -> Term:
    """P_tr with the token embedding frozen: every other parameter (the head too when tied to the embedding)."""
    return Term("trained", "every parameter but the frozen token embedding (the head too when tied to it)",
                params - embedding, "params", "project")


def trained_weights_term(dtype: str, weight_bytes: sympy.Expr, count: sympy.Expr) -> Term:
    """The trained parameters' weights, part of M_tr (what ZeRO 1/2 all-gathers after the step)."""
    return Term("weights", f"{dtype} weights of the trained parameters", weight_bytes * count, "bytes", "project")


def adapter_state_terms(count: sympy.Expr, element: int, title: str, state: sympy.Expr, source: str,
                        where: str) -> list[Term]:
    """M_tr of a torch module's peft adapters: their weights, gradients and optimizer state (``state``)."""
    return [Term("adapter_weights", "the adapters' weights", element * count, "bytes", "peft"),
            Term("gradients", "the adapters' gradients", element * count, "bytes", "pytorch"),
            Term("optimizer_states", f"{title} states of the adapters", state, "bytes", source, where)]


def step_terms(*, params: sympy.Expr = P_gpu, zero: int = 0, recompute: str = "none", sequence_parallel: bool = False,
               act_bytes: int = 2, weight_bytes: int = 2, grad_bytes: int = 4, state_bytes: sympy.Expr = 16,
               flops_per_token: sympy.Expr = F_tok, cp_width: sympy.Expr | None = None,
               schedule: str | None = None, slowest: sympy.Expr | int = 1,
               stage_layers: sympy.Expr | int | None = None, trained: Trained | None = None,
               checkpointed: sympy.Expr | int = 1, pass_bytes: sympy.Expr | None = None) -> list[Term]:
    """Seconds per training step on one GPU under the roofline model (see the module docstring).

    ``params`` are the parameters one GPU computes with before ZeRO sharding (P_gpu, which the
    planner defines as N or N_gpu); ``state_bytes`` the model-state bytes per parameter the optimizer
    reads and writes; element sizes are numbers chosen by the training regime. ``cp_width``: context
    parallelism's K/V elements per token and rank (a·d_head/t, K and V repeated to every head), None without it.
    ``schedule``: the pipeline schedule (``--pp-schedule``); ``zbv`` takes the zero-bubble V schedule's bubble.
    ``slowest``: p × the slowest pipeline rank's share of F_tok (1 when the stages split the FLOPs evenly); the
    pipeline runs at that rank's pace, and its bubble is on that rank's compute. ``stage_layers``: that rank's
    transformer layers, whose tp and ring traffic it moves (None: L/p, an even split). ``trained``: what the optimizer
    steps and data parallelism reduces when not every parameter trains (None: all ``params``, ``state_bytes`` each).
    ``checkpointed``: the share of layers full recompute runs again (``flops.checkpointed_share``: 1, or ⌊L/N⌋/L
    checkpointing every N-th layer), whose weight reads, all-reduces and ring gathers repeat. ``pass_bytes``: the weight
    bytes one forward or backward pass moves when not ``weight_bytes`` × ``params`` (QLoRA: the NF4 base read and
    dequantized, ``lora.qlora_pass_bytes``).
    """
    layers = L / p if stage_layers is None else stage_layers
    tokens = S if cp_width is None else S / c_p  # the tokens of each sequence one rank computes
    flop_time = slowest * flops_per_token * B * n_mb * tokens / (t * p * F_peak * mfu)
    again = checkpointed if recompute == "full" else 0  # the recomputed forward's share of a whole forward
    passes = 2 + again
    shard = n_d if zero else 1
    states = state_bytes * params if trained is None else trained.states
    moved = weight_bytes * params if pass_bytes is None else pass_bytes
    traffic = (passes * n_mb * moved + 2 * states / shard) / W_hbm
    compute = sympy.Max(flop_time, traffic, evaluate=False)  # unevaluated: SymPy's Max simplification is slow
    stepped = "model states" if trained is None else f"the model states of {trained.what} (M_tr)"
    weights = "weights read" if pass_bytes is None else QLORA_PASS
    terms = [_s("compute", "roofline: max(FLOPs / (F_peak·η), bytes moved / HBM bandwidth)", compute, "williams2009",
                "", f"FLOPs: tokens per GPU × F_tok / (t·p){_uneven(slowest)}; bytes: {weights} {passes}× per "
                    f"micro-batch, {stepped} read and written once.")]
    terms.append(_bubble(compute, schedule))
    per_layer = 4 + 2 * again if recompute != "ops" else 5
    ring = 2 * (t - 1) / t
    layer_bytes = act_bytes * B * tokens * H
    count = per_layer if sympy.sympify(again).is_number else f"4 + 2·{again}"  # every N-th layer: 2 on ⌊L/N⌋ of L
    terms.append(_s("tp_comm", f"tensor parallel: {count} all-reduces of B·S·H per layer per micro-batch",
                    n_mb * layers * per_layer * ring * layer_bytes / W_tp, "shoeybi2019", "§3",
                    "Ring all-reduce moves 2·(t − 1)/t of the buffer per GPU (Patarasuk & Yuan 2009); sequence "
                    "parallelism replaces each by a reduce-scatter and an all-gather of the same volume."))
    ranks = n_d if cp_width is None else n_d * c_p  # FSDP reduces the gradients over dp × cp ranks
    frac = (ranks - 1) / ranks
    grads = grad_bytes * params if trained is None else trained.grad_bytes * trained.params
    updated = weight_bytes * params if trained is None else trained.weight_bytes * trained.params
    if zero == 0:
        dp_bytes, how = 2 * frac * grads, "gradient all-reduce 2·(n_d − 1)/n_d"
    elif zero in (1, 2):
        dp_bytes, how = frac * (grads + updated), "reduce-scatter of gradients + all-gather of weights"
    else:
        dp_bytes = frac * (grads + 2 * n_mb * weight_bytes * params)
        how = "ZeRO-3: reduce-scatter of gradients + weights gathered in every forward and backward"
    reduced = "" if trained is None else (f" Only the gradients of {trained.what} (P_tr parameters) are reduced"
                                          + (" and their weights gathered" if zero in (1, 2) else "")
                                          + ": the frozen weights have none.")
    terms.append(_s("dp_comm", f"data parallel: {how}", dp_bytes / W_dp, "zero2020", "§7",
                    "Not overlapped with the backward pass (an upper bound)." + reduced))
    sent = act_bytes * B * tokens * H / (t if sequence_parallel else 1)
    terms.append(_s("pp_comm", "pipeline: one activation and one gradient of B·S·H per micro-batch and stage",
                    sympy.Min(p - 1, 1, evaluate=False) * 2 * n_mb * v_pp * sent / W_pp, "narayanan2021", "§2.2",
                    "Zero without pipeline parallelism (min(p − 1, 1))."))
    if cp_width is not None:
        terms.append(_ring_term(cp_width, recompute, act_bytes, layers, again))
    return terms


QLORA_PASS = ("the QLoRA base's weights (bitsandbytes 0.50.2: each NF4 weight's codes and absmax read, its absmax "
              "dequantized in fp32 and a bf16 copy written and read again by the matmul, as the backward always and "
              "the forward above 1,536 tokens per micro-batch do; below, the fused kernel reads the NF4 bytes alone, "
              "not modelled; the rest in bf16) moved")


def _uneven(slowest: sympy.Expr | int) -> str:
    """The compute note's words for an uneven pipeline split (empty when even)."""
    if slowest == 1:
        return ""
    return (f" × {float(slowest):.4f}: the slowest pipeline rank's FLOPs over an even share (its layers, and the "
            "head on the last stage)")


def _bubble(compute: sympy.Expr, schedule: str | None) -> Term:
    """The pipeline's idle time: 1F1B's (p − 1)/(v·m) of the compute, or PyTorch's zero-bubble V schedule's."""
    if schedule != "zbv":
        return _s("bubble", "pipeline bubble: (p − 1)/(v·m) × compute", compute * (p - 1) / (v_pp * n_mb),
                  "narayanan2021", "§2.2", "The step becomes (m + p − 1)/m × the ideal: a bubble of (p − 1)/(m + p − 1).")
    idle = sympy.Max(p - 1, 2 * (2 * p - 1 - n_mb), evaluate=False)  # pass-times idle per rank
    return _s("bubble", "pipeline bubble, zero-bubble V: max(p − 1, 2·(2p − 1 − m)) of the 6·m passes × compute",
              compute * idle / (6 * n_mb), "qi2023", "§6 (ZB-V); PyTorch's ScheduleZBVZeroBubble",
              "Two stages per rank; each micro-batch a forward F, an input-gradient I and a weight-gradient W "
              "pass per stage, all taking equal time (the paper's assumption; each is 2 FLOPs per parameter and "
              "token, so the roofline's compute splits so); the sends take no time. PyTorch's order of passes "
              "then leaves max(p − 1, 2·(2p − 1 − m)) pass-times idle on every rank: p − 1 once m ≥ (3p − 1)/2, "
              "where 1F1B leaves 6·(p − 1) (a stage's F + B + W is two passes each).")


def _ring_term(width: sympy.Expr, recompute: str, act_bytes: int, layers: sympy.Expr | int = L / p,
               again: sympy.Expr | int | None = None) -> Term:
    """Ring attention's traffic per GPU: K/V all-gathered per forward and backward, fp32 dK/dV passed on c_p − 1 times."""
    block = B * (S / c_p) * width  # one rank's K (or V) block, elements
    again = (1 if recompute == "full" else 0) if again is None else again
    gathers = 2 + again  # forward, backward (and the recomputed forward's share)
    per_layer = (c_p - 1) * (gathers * 2 * act_bytes + 2 * 4) * block
    return _s("cp_comm", "context parallel: ring attention's K/V all-gathers and fp32 dK/dV per layer and micro-batch",
              n_mb * layers * per_layer / W_cp, "pytorch-context-parallel", "_templated_ring_attention",
              f"Each rank receives the other c_p − 1 ranks' K and V blocks (B·S/c_p·a·d_head/t each, K/V repeated to "
              f"every head) {gathers}× (all-gather rotater) and passes the fp32 dK/dV on c_p − 1 times; not "
              "overlapped with attention (an upper bound).")


def step_formula(key: str, title: str, terms: list[Term], definitions: dict | None = None,
                 example: dict | None = None, note: str = "") -> Formula:
    """A step-time Formula (seconds) over ``step_terms``."""
    return Formula(key, title, terms, source="project", name="t_step", definitions=definitions, example=example,
                   note=note)


def achieved_step_term(cp: bool = False) -> Term:
    """A training step at an achieved rate X: the step's FLOPs per GPU / X, with every overhead inside X."""
    tokens = S / c_p if cp else S  # context parallelism: each rank computes S/c_p tokens of every sequence
    return _s("compute", "FLOPs per GPU / X: tokens per step · F_tok / (n_gpu · X)", F_tok * B * n_mb * tokens / (t * p * X),
              "narayanan2021", "§5.1",
              "X is the end-to-end rate per GPU: communication, bubble and overheads are inside it.")


def step_flops_formula(key: str, title: str, per_token: Formula) -> Formula:
    """Training FLOPs per optimizer step: F_tok × tokens per step (F_tok defined by ``per_token``)."""
    return Formula(key, title, (Term("step", "F_tok × tokens per step", F_tok * TOKENS_PER_STEP, "flops", "project"),),
                   source="project", name="F_step", definitions={F_tok: per_token})


def prefill_formula(key: str, title: str, forward: Formula, peak: sympy.Expr, efficiency: sympy.Expr) -> Formula:
    """Prefill seconds of one replica of t·p GPUs, compute-bound: F_fwd · B · S / (t · p · peak · efficiency).

    ``peak`` and ``efficiency`` are F_peak and η (``--mfu``), or 1 and X (``--achieved-tflops``).
    """
    return Formula(key, title, (Term("prefill", "F_fwd · B · S / (t · p · F_peak · η)",
                                     F_fwd * B * S / (t * p * peak * efficiency), "seconds", "williams2009"),),
                   source="project", name="t_prefill", definitions={F_fwd: forward})


def decode_formula(key: str, title: str, forward: Formula, peak: sympy.Expr, efficiency: sympy.Expr,
                   kv_cache: bool = True) -> Formula:
    """Seconds per decode step of B sequences on one replica: the roofline of its FLOPs and its reads.

    Each of the p stages reads its weights (M_w per GPU) and its KV cache (M_kv; none when
    ``kv_cache`` is False) once per step; ``peak`` and ``efficiency`` as in ``prefill_formula``.
    """
    compute = F_fwd * B / (t * peak * efficiency)
    read = M_w + (M_kv if kv_cache else 0)
    return Formula(key, title, (Term("decode", "max(F_fwd·B / (t·F_peak·η), p·(weights + KV cache) / HBM bandwidth)",
                                     sympy.Max(compute, p * read / W_hbm, evaluate=False), "seconds", "williams2009",
                                     "", "Bandwidth-bound at small B: every step reads the weights and the whole KV "
                                         "cache."),),
                   source="project", name="t_dec", definitions={F_fwd: forward})


def decode_rate_formula(key: str, title: str, decode: Formula) -> Formula:
    """Decode tokens per second of one replica: B sequences each gain a token every t_dec."""
    return Formula(key, title, (Term("tokens", "B / t_dec", B / t_dec, "tokens/s", "project"),), source="project",
                   name="R_dec", definitions={t_dec: decode})


def generate_formula(key: str, title: str, decode: Formula) -> Formula:
    """Seconds to generate T tokens with n_d replicas: T / (n_d · B) decode steps × t_dec (named t_train)."""
    return Formula(key, title, (Term("steps", "T / (n_d · B) decode steps × t_dec", T / (n_d * B) * t_dec, "seconds",
                                     "project"),), source="project", name="t_train", definitions={t_dec: decode})


def throughput_formula(key: str, step: Formula) -> Formula:
    """Tokens per second of the whole job: tokens per step / step time."""
    return Formula(key, "Training throughput of the job (tokens/s)",
                   (Term("tokens", "tokens per step / seconds per step", TOKENS_PER_STEP / t_step, "tokens/s",
                         "project"),), source="project", name="R_tok", definitions={t_step: step})


def train_formula(key: str, step: Formula) -> Formula:
    """Seconds to train on T tokens: T / tokens per step × step time (steps not rounded up)."""
    return Formula(key, "Time to train on T tokens (seconds)",
                   (Term("steps", "T / tokens per step × seconds per step", T / TOKENS_PER_STEP * t_step, "seconds",
                         "project"),), source="project", name="t_train", definitions={t_step: step})


def gpu_hours_formula(key: str, train: Formula) -> Formula:
    """GPU-hours: GPUs × seconds to train / 3600."""
    return Formula(key, "GPU-hours of the run", (Term("gpu_hours", "n_gpu · t_train / 3600", n_gpu * t_train / 3600,
                                                      "gpu-hours", "project"),),
                   source="project", name="h_gpu", definitions={t_train: train})


def cost_formula(key: str, train: Formula) -> Formula:
    """Cost in USD: GPU-hours × price per GPU-hour."""
    return Formula(key, "Cost of the run (USD)", (Term("cost", "n_gpu · t_train / 3600 · c_gpu",
                                                       n_gpu * t_train / 3600 * c_gpu, "usd", "project"),),
                   source="project", name="cost", definitions={t_train: train})


# --- registered, generic forms ---------------------------------------------------------------------
_STEP_EXAMPLE = {"F_tok": 150_000_000_000, "B": 1, "n_mb": 8, "S": 8192, "t": 8, "p": 1, "n_d": 8, "v_pp": 1,
                 "F_peak": 989_000_000_000_000, "mfu": "1/2", "P_gpu": 1_003_782_656, "W_hbm": 3_350_000_000_000,
                 "L": 32, "H": 4096, "W_tp": 450_000_000_000, "W_dp": 50_000_000_000, "W_pp": 50_000_000_000}
STEP = register(step_formula("time.step", "Seconds per training step: roofline compute, bubble, communication",
                             step_terms(), example=_STEP_EXAMPLE,
                             note="ZeRO 0, no recompute, bf16-mixed AdamW with fp32 gradients (18 bytes of states "
                                  "per parameter would be 16 + 2; here 16). The planner builds these terms for "
                                  "each layout."))
register(Formula(
    "time.train.achieved", "Time to train at an achieved rate: FLOPs / (n_gpu · X)",
    (_s("train", "T · F_tok / (n_gpu · X)", T * F_tok / (n_gpu * X), "narayanan2021", "§5.1"),),
    source="narayanan2021", name="t_train",
    example={"T": 300_000_000_000, "F_tok": 1_400_000_000_000, "n_gpu": 1024, "X": 140_000_000_000_000}))
register(Formula(
    "time.train.narayanan", "End-to-end training time 8·T·P/(n·X), Narayanan et al. 2021",
    (_s("train", "8·T·N / (n_gpu · X)", 8 * T * N / (n_gpu * X), "narayanan2021", "§5.1"),),
    source="narayanan2021", where="§5.1", name="t_train",
    example={"T": 300_000_000_000, "N": 175_000_000_000, "n_gpu": 1024, "X": 140_000_000_000_000},
    note="8 = 2 (forward) + 4 (backward) + 2 (recomputed forward) FLOPs per parameter per token. GPT-3 175B, "
         "300B tokens, 1024 A100s at 140 TFLOP/s: about 34 days."))
register(Formula(
    "time.prefill", "Prefill seconds: F_fwd · B · S / (n_gpu · F_peak · η) (compute-bound)",
    (_s("prefill", "forward FLOPs of B·S prompt tokens at η of peak", F_fwd * B * S / (n_gpu * F_peak * mfu),
        "williams2009"),),
    source="project", name="t_prefill",
    example={"F_fwd": 16_000_000_000, "B": 1, "S": 4096, "n_gpu": 1, "F_peak": 989_000_000_000_000, "mfu": "1/2"}))
register(Formula(
    "time.decode", "Decode seconds per token: max(compute, (weights + KV cache) / HBM bandwidth)",
    (_s("decode", "roofline of one decode step of B sequences",
        sympy.Max(F_fwd * B / (n_gpu * F_peak * mfu), (M_w + M_kv) / W_hbm, evaluate=False), "williams2009", "",
        "At batch 1 the bytes dominate: tokens/s ≤ W_hbm / (weights + KV bytes read per token)."),),
    source="project", name="t_decode",
    example={"F_fwd": 16_000_000_000, "B": 1, "n_gpu": 1, "F_peak": 989_000_000_000_000, "mfu": "1/2",
             "M_w": 16_060_522_496, "M_kv": 536_870_912, "W_hbm": 3_350_000_000_000}))
