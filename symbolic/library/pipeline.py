"""Pipeline stages as the frameworks build them: the layer split and each schedule's micro-batches in flight.

- ``stage_layers``: torchtitan's split (``_generate_llm_fqn_per_model_part``,
  torchtitan/distributed/pipeline_parallel.py at b5bcd76): the embeddings and the norm + head
  count as one layer each (``pipeline_parallel_first_stage_less_layers`` and
  ``..._last_stage_less_layers``, default 1), the L + 2 layer-equivalents are split evenly and the
  first ``(L + 2) mod stages`` stages take one more. torchtitan's December 2024 rule
  (``generate_split_points``, 9dec370, the benchmark's commit) gives the same split for Llama 3.1
  405B (126 layers) over 8 and 16 stages.
- ``rank_stages``: which stages a rank holds: ``loop`` (rank, rank + p, ...) or ``v``
  (rank and 2p − 1 − rank), torch.distributed.pipelining's ``generate_stage_to_rank_mapping``.
- ``rank_ops``: each schedule's order of forwards and backwards on one rank, ported from
  torch/distributed/pipelining/schedules.py (PyTorch 2.13): ``ScheduleGPipe`` (all forwards,
  then all backwards), ``Schedule1F1B`` (min(m, p − rank) warm-up forwards, then one backward
  and one forward), ``ScheduleInterleaved1F1B`` (``_get_warmup_ops``, ``_get_1f1b_rank_ops``)
  and ``ScheduleZBVZeroBubble`` (backward split into input (I) and weight (W) gradients).
- ``peak_layers``: the most layer-micro-batches whose activations a rank holds at once: a
  forward adds its stage's layers, a backward (ZBV: the weight-gradient step W, until which the
  linear layers' inputs are kept) frees them.
- ``stage_buffers``: what torch.distributed.pipelining's stage keeps beside the layers' activations
  at that peak (stage.py, PyTorch 2.13): a receive buffer per micro-batch for the activations
  (non-first stages) and for their gradients (non-last stages), both made once for all m
  micro-batches (``_setup_forward_recv_info``, ``_create_grad_recv_info``); each stage output
  in ``fwd_cache`` from its forward to its backward; the last stage's outputs (the logits) in
  ``output_chunks``, detached after their backward, until ``clear_runtime_states`` at the next
  step (``forward_buffers``: after each forward; measured with two gloo ranks in the tests).
- ``moments``, ``gradient_moments``, ``gradient_terms``: each stage's parameter gradients are alive
  from its first backward (ZBV: its first W) to the optimizer step (``param.grad`` accumulates
  over the micro-batches), so a moment holds its activations, its boundary tensors and the
  gradients of the stages that have run a backward by then; the rank's peak is the largest.
- ``candidate_ranks``: the ranks whose plan can be the job's peak: the two end ranks and the
  middle ranks that no other middle rank holds at least as much as, count by count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sympy

from ..core.symbols import L, N
from ..core.term import Term
from ..math.extrema import maximum
from ..math.formula import Formula

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zbv")
SINGLE_STAGE = ("gpipe", "1f1b")  # PipelineScheduleSingle: one stage per rank
DEFAULT_STAGES_PER_RANK = 2  # torchtitan's default for multi-stage schedules (_get_pipeline_metadata)
INPUT_WEIGHT = 1  # torchtitan: pipeline_parallel_first_stage_less_layers (config/configs.py)
OUTPUT_WEIGHT = 1  # torchtitan: pipeline_parallel_last_stage_less_layers

Op = tuple[str, int, int]  # ("F" | "B" | "I" | "W", stage index, micro-batch)


def stage_layers(layers: int, stages: int, input_weight: int = INPUT_WEIGHT,
                 output_weight: int = OUTPUT_WEIGHT) -> tuple[int, ...]:
    """Transformer layers per pipeline stage, as torchtitan splits them (``_generate_llm_fqn_per_model_part``)."""
    if stages == 1:
        return (layers,)
    effective = layers + input_weight + output_weight
    base, extra = divmod(effective, stages)
    if base == 0 or input_weight > base or output_weight > base:
        raise ValueError(f"{stages} pipeline stages leave a stage without a layer ({layers} layers + the embeddings "
                         "and head as one layer each)")
    out, left = [], layers
    for stage in range(stages):
        share = base + (1 if stage < extra else 0)
        share -= input_weight if stage == 0 else output_weight if stage == stages - 1 else 0
        share = min(share, left)
        out.append(share)
        left -= share
    return tuple(out)


def style(schedule: str) -> str:
    """The stage-to-rank layout of a schedule: ``v`` for ZBV, else ``loop``."""
    return "v" if schedule == "zbv" else "loop"


def rank_stages(rank: int, pp: int, v: int, layout: str = "loop") -> tuple[int, ...]:
    """The stage indices rank ``rank`` holds (torch.distributed.pipelining's ``generate_stage_to_rank_mapping``)."""
    if layout == "v":
        return (rank, 2 * pp - 1 - rank)
    return tuple(rank + s * pp for s in range(v))


def rank_ops(schedule: str, rank: int, pp: int, m: int, v: int = 1) -> list[Op]:
    """The forwards and backwards of rank ``rank`` in the order PyTorch 2.13's schedule runs them."""
    if schedule == "gpipe":
        return [("F", rank, i) for i in range(m)] + [("B", rank, i) for i in range(m)]
    if schedule == "1f1b":
        warm = min(m, pp - rank)
        ops: list[Op] = [("F", rank, i) for i in range(warm)]
        for i in range(m - warm):  # 1B1F
            ops += [("B", rank, i), ("F", rank, warm + i)]
        return ops + [("B", rank, i) for i in range(m - warm, m)]
    if schedule == "interleaved":
        return _interleaved(rank, pp, m, v)
    if schedule == "zbv":
        return _zbv(rank, pp, m)
    raise ValueError(f"unknown pipeline schedule {schedule!r}")


def _interleaved(rank: int, pp: int, m: int, v: int) -> list[Op]:
    """``ScheduleInterleaved1F1B._calculate_single_rank_operations`` and ``_get_1f1b_rank_ops`` (no idle slots)."""
    rounds = max(1, m // pp)
    per_round = m // rounds
    warmup = min((v - 1) * per_round + 2 * (pp - 1 - rank), m * v)  # _get_warmup_ops, multiply_factor 2
    total = m * v

    def forward_stage(step: int) -> int:
        return (step // per_round) % v * pp + rank

    def backward_stage(step: int) -> int:
        return (v - 1 - ((step - warmup) // per_round) % v) * pp + rank

    counts: dict[tuple[str, int], int] = {}

    def op(kind: str, stage: int) -> Op:
        index = counts.get((kind, stage), 0)
        counts[(kind, stage)] = index + 1
        return (kind, stage, index)

    ops = [op("F", forward_stage(step)) for step in range(warmup)]
    for step in range(warmup, total):
        ops += [op("F", forward_stage(step)), op("B", backward_stage(step))]
    for step in range(total, total + warmup):
        ops.append(op("B", backward_stage(step)))
    return ops


def _zbv(rank: int, pp: int, m: int) -> list[Op]:
    """``ScheduleZBVZeroBubble._calculate_single_rank_operations``: two stages per rank in a V."""
    n_micro = max(2 * pp - 1, m)
    first, second = rank, 2 * pp - 1 - rank
    f0 = f1 = b0 = b1 = 0
    ops: list[Op] = []
    for _ in range(2 * (pp - rank) - 1):
        ops.append(("F", first, f0))
        f0 += 1
    for _ in range(rank):
        ops += [("F", second, f1), ("F", first, f0)]
        f1, f0 = f1 + 1, f0 + 1
    for _ in range(pp - rank):
        ops += [("F", second, f1), ("I", second, b1), ("W", second, b1)]
        f1, b1 = f1 + 1, b1 + 1
    while f1 < f0 or f0 < n_micro:
        if f0 < n_micro:
            ops.append(("F", first, f0))
            f0 += 1
        ops += [("I", first, b0), ("W", first, b0), ("F", second, f1), ("I", second, b1), ("W", second, b1)]
        b0, f1, b1 = b0 + 1, f1 + 1, b1 + 1
    w0, w1 = b0, b1
    for _ in range(rank):
        ops += [("I", first, b0), ("I", second, b1)]
        b0, b1 = b0 + 1, b1 + 1
    for _ in range(pp - rank):
        ops += [("I", first, b0), ("W", first, w0)]
        b0, w0 = b0 + 1, w0 + 1
    ops += [("W", second, i) for i in range(w1, b1)] + [("W", first, i) for i in range(w0, b0)]
    return [o for o in ops if o[2] < m]  # the source drops the micro-batches beyond m the same way


def peak_layers(schedule: str, rank: int, pp: int, m: int, layers: Sequence[int], v: int = 1) -> int:
    """The most layer-micro-batches of activations rank ``rank`` holds at once (``layers``: per stage)."""
    frees = "W" if schedule == "zbv" else "B"
    held = peak = 0
    for kind, stage, _ in rank_ops(schedule, rank, pp, m, v):
        if kind == "F":
            held += layers[stage]
            peak = max(peak, held)
        elif kind == frees:
            held -= layers[stage]
    return peak


def peak_microbatches(schedule: str, rank: int, pp: int, m: int, stage: int, v: int = 1) -> int:
    """The most micro-batches in flight at once on one ``stage`` of rank ``rank`` (its inputs, its labels)."""
    ones = [0] * (pp * v)
    ones[stage] = 1
    return peak_layers(schedule, rank, pp, m, ones, v)


@dataclass(frozen=True)
class Buffers:
    """Stage-boundary tensors a rank holds at one moment of its schedule (``moments``), in micro-batches."""

    held: int  # layer-micro-batches of activations then
    outputs: int  # stage outputs in fwd_cache (non-last stages), forward to backward
    idle_recv: int  # activation receive buffers not holding an in-flight micro-batch (non-first stages)
    grad_recv: int  # gradient receive buffers, m per non-last stage
    last_forwards: int  # forwards the last stage has run (its outputs, the logits, stay in output_chunks)
    after_step: int  # boundary tensors after the last backward: both kinds of receive buffers
    grads: tuple[int, ...] = ()  # the rank's stages whose gradients are alive: a backward (ZBV: a W) has run

    @property
    def boundary(self) -> int:
        """Stage-boundary tensors beside the activations."""
        return self.outputs + self.idle_recv + self.grad_recv


def moments(schedule: str, rank: int, pp: int, m: int, layers: Sequence[int], v: int = 1) -> list[tuple[str, Buffers]]:
    """What rank ``rank``'s stages keep beside the activations after each of its forwards ("F") and at the start of
    each backward ("B": a full backward, ZBV's input-gradient step I), in PyTorch's order.

    A stage's parameter gradients are alive from the end of its first backward (ZBV: its first weight-gradient step
    W) until the optimizer step: torch.distributed.pipelining's stage accumulates ``param.grad`` over the
    micro-batches (stage_backward, then the caller's optimizer.step). A received input's gradient is not counted:
    PyTorch 2.13's ``stage_backward`` drops the ``.grad`` once it is handed to the send (2.6.0's kept it until
    ``clear_runtime_states``).
    """
    frees = "W" if schedule == "zbv" else "B"
    last = len(layers) - 1
    held_stages = rank_stages(rank, pp, v, style(schedule))
    receiving = [s for s in held_stages if s != 0]
    sending = [s for s in held_stages if s != last]
    forwards = dict.fromkeys(held_stages, 0)
    backwards = dict.fromkeys(held_stages, 0)  # B or I: the stage output leaves fwd_cache
    freed = dict.fromkeys(held_stages, 0)
    held = 0
    out: list[tuple[str, Buffers]] = []

    def now() -> Buffers:
        return Buffers(held=held, outputs=sum(forwards[s] - backwards[s] for s in sending),
                       idle_recv=sum(m - (forwards[s] - freed[s]) for s in receiving),
                       grad_recv=m * len(sending), last_forwards=forwards.get(last, 0),
                       after_step=m * (len(receiving) + len(sending)),
                       grads=tuple(s for s in held_stages if freed[s]))

    for kind, stage, _ in rank_ops(schedule, rank, pp, m, v):
        if kind in ("B", "I"):
            out.append(("B", now()))
            backwards[stage] += 1
        if kind == "F":
            held += layers[stage]
            forwards[stage] += 1
            out.append(("F", now()))
        if kind == frees:
            held -= layers[stage]
            freed[stage] += 1
    return out


def forward_buffers(schedule: str, rank: int, pp: int, m: int, layers: Sequence[int], v: int = 1) -> list[Buffers]:
    """What rank ``rank``'s stages keep beside the activations after each of its forwards, in PyTorch's order."""
    return [b for kind, b in moments(schedule, rank, pp, m, layers, v) if kind == "F"]


def stage_buffers(schedule: str, rank: int, pp: int, m: int, layers: Sequence[int], v: int = 1) -> Buffers:
    """What rank ``rank``'s stages keep beside the activations at the last moment it holds ``peak_layers``."""
    after = forward_buffers(schedule, rank, pp, m, layers, v)
    peak = max(b.held for b in after)
    return [b for b in after if b.held == peak][-1]


def gradient_moments(schedule: str, rank: int, pp: int, m: int, layers: Sequence[int],
                     v: int = 1) -> dict[str, list[Buffers]]:
    """Per kind ("F", "B"), the moments that can lead once gradients count: for each set of stages whose gradients
    are alive, the moment holding the most layer-micro-batches, then the most boundary tensors (the last of equals).

    ``stage_buffers``'s moment stands for both phases without gradients counted; a moment with the same gradients
    and no more activations or boundary tensors than it cannot lead and is left out."""
    peak = stage_buffers(schedule, rank, pp, m, layers, v)
    out: dict[str, list[Buffers]] = {"F": [], "B": []}
    for kind in out:
        best: dict[tuple[int, ...], Buffers] = {}
        for k, b in moments(schedule, rank, pp, m, layers, v):
            if k == kind and b.grads and (b.grads not in best or (b.held, b.boundary, b.last_forwards)
                                          >= (best[b.grads].held, best[b.grads].boundary,
                                              best[b.grads].last_forwards)):
                best[b.grads] = b
        out[kind] = [b for b in best.values()
                     if not (set(b.grads) <= set(peak.grads) and b.held <= peak.held and b.boundary <= peak.boundary
                             and b.last_forwards <= peak.last_forwards)]
    return out


def buffer_terms(buffers: Buffers, boundary: sympy.Expr, logits: sympy.Expr, m: int) -> tuple[Term, Term, Term]:
    """(forward, backward, after the last backward) stage-boundary tensors of one rank.

    ``boundary``: one micro-batch's stage input or output (bytes); ``logits``: one micro-batch's output of the last
    stage. In the forward the current micro-batch's logits are the loss's own term; in its backward they are held
    by ``output_chunks`` only, and after the step all m are, until ``clear_runtime_states``.
    """
    last = 1 if buffers.last_forwards else 0
    counts = (f"{buffers.outputs} stage outputs, {buffers.idle_recv} idle activation and {buffers.grad_recv} gradient "
              "receive buffers")
    how = ("PyTorch's stage makes a receive buffer per micro-batch for the activations and for their gradients "
           "(_setup_forward_recv_info, _create_grad_recv_info) and keeps each stage output in fwd_cache until its "
           "backward; the last stage keeps its outputs in output_chunks (detached after their backward) until "
           "clear_runtime_states at the next step.")
    forward = Term("pp_buffers", f"pipeline stage buffers: {counts}"
                   + (f", {buffers.last_forwards - 1} earlier micro-batches' logits" if last else ""),
                   buffers.boundary * boundary + max(buffers.last_forwards - 1, 0) * logits, "bytes",
                   "pytorch-pipelining", "stage.py: _PipelineStageBase, PipelineStage", how)
    backward = forward.replace(key="pp_buffers_backward", expr=forward.expr + last * logits,
                               title=forward.title + (" and the current one's" if last else ""))
    after = Term("pp_buffers_after_step", f"pipeline stage buffers after the last backward: {buffers.after_step} "
                 "receive buffers" + (f", the {m} micro-batches' logits" if last else ""),
                 buffers.after_step * boundary + last * m * logits, "bytes", "pytorch-pipelining",
                 "stage.py: clear_runtime_states", how)
    return forward, backward, after


def moment_shift(at: Buffers, peak: Buffers, per: sympy.Expr, boundary: sympy.Expr, logits: sympy.Expr) -> sympy.Expr:
    """Bytes a moment holds beyond ``peak`` in activations (``per``: one layer-micro-batch), boundary tensors and the
    last stage's logits kept in output_chunks (negative where it holds less)."""
    return ((at.held - peak.held) * per + (at.boundary - peak.boundary) * boundary
            + (at.last_forwards - peak.last_forwards) * logits)


def gradient_terms(peak: Buffers, candidates: dict[str, list[Buffers]], per: sympy.Expr, boundary: sympy.Expr,
                   logits: sympy.Expr, grads: Callable[[tuple[int, ...]], sympy.Expr]) -> tuple[Term, Term]:
    """(forward, backward) terms of a pipeline rank's accumulated gradients: ``grads(stages)`` (the optimizer's
    gradient bytes of those stages) at the moment that leads once they count, as a shift from ``peak``'s moment.

    Each phase's terms then sum to the largest, over the moments of ``gradient_moments`` and ``peak``'s own, of the
    activations, boundary tensors and logits held then plus the gradients of the stages that have run a backward.
    """
    how = ("torch.distributed.pipelining accumulates each parameter's .grad over the micro-batches from the stage's "
           "first backward (ZBV: its first weight-gradient step W) to the optimizer step, beside the later "
           "micro-batches' activations. Megatron allocates its gradient buffer (main_grad) once and zeroes it each "
           "step (_ParamAndGradBuffer, zero_grad_buffer), so there the same bytes are alive from the first forward.")
    out = []
    for kind, key, when in (("F", "pp_gradients", "after a forward"),
                            ("B", "pp_gradients_backward", "at a backward's start")):
        expr = maximum(grads(peak.grads), *(moment_shift(b, peak, per, boundary, logits) + grads(b.grads)
                                            for b in candidates[kind]))
        stages = "/".join(str(s) for s in peak.grads) or "none"
        title = (f"gradients of the stages that have run a backward (at the peak's moment: stages {stages}), and "
                 f"the shift to the moment {when} that holds the most with them")
        out.append(Term(key, title, expr, "bytes", "pytorch-pipelining", "stage.py: stage_backward; schedules.py",
                        how))
    return out[0], out[1]


def candidate_ranks(schedule: str, pp: int, m: int, layers: Sequence[int], v: int = 1) -> tuple[int, ...]:
    """The end ranks, then each middle rank no other middle rank covers (``_covers``), the first of equals kept."""
    if pp < 3:
        return tuple(range(pp))
    keys = {}
    for rank in range(1, pp - 1):
        own = sum(layers[s] for s in rank_stages(rank, pp, v, style(schedule)))
        buffers = stage_buffers(schedule, rank, pp, m, layers, v)
        found = moments(schedule, rank, pp, m, layers, v)
        with_grads = [max((b.held for _, b in found if len(b.grads) >= n), default=0) for n in range(1, v + 1)]
        keys[rank] = (own, peak_layers(schedule, rank, pp, m, layers, v), buffers.boundary, *with_grads)
    kept = [rank for rank in keys
            if not any(_covers(keys[other], keys[rank]) and (keys[other] != keys[rank] or other < rank)
                       for other in keys if other != rank)]
    return (0, pp - 1, *kept)


def _covers(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether a middle rank with counts ``a`` (layers, peak layer-micro-batches, boundary tensors, then the most
    layer-micro-batches held once 1, 2, ... of its stages have gradients) holds at least what one with ``b``
    holds: a layer-micro-batch keeps at least its layer's input, one boundary tensor, so a smaller boundary count
    is made up by as many more layer-micro-batches; a middle rank's gradients are its layers' share."""
    return (a[0] >= b[0] and a[1] >= b[1] and a[1] + a[2] >= b[1] + b[2]
            and all(x >= y for x, y in zip(a[3:], b[3:], strict=True)))


def bubble_fraction_text(schedule: str) -> str:
    """How the schedule's idle time is counted in ``time`` (the bubble term's divisor)."""
    return {"gpipe": "(p − 1)/m", "1f1b": "(p − 1)/m", "interleaved": "(p − 1)/(v·m)",
            "zbv": "max(p − 1, 2·(2p − 1 − m))/(6·m) (PyTorch's order, equal F, I and W passes)"}[schedule]


def stage_params(first_stage: sympy.Expr, head: sympy.Expr, layers: int, embeddings: bool, has_head: bool,
                 total: sympy.Expr = N, tp_sym: sympy.Expr | int = 1,
                 definitions: dict | None = None) -> Formula:
    """N_gpu of one pipeline rank: its own layers' share of the layer parameters, the embeddings, the head."""
    terms = [Term("layers", f"transformer layers: the {layers} of this rank's stages, split over t ranks",
                  (total - first_stage - head) * layers / (L * tp_sym), "params", "torchtitan-pp",
                  "_generate_llm_fqn_per_model_part", "Every layer holds (N − embeddings − head)/L parameters.")]
    if embeddings:
        terms.append(Term("embedding", "embeddings on the first stage, split over t (vocab-parallel)",
                          first_stage / tp_sym, "params", "torchtitan-pp", "tok_embeddings on stage 0"))
    if has_head and head != 0:
        terms.append(Term("head", "untied output head on the last stage, split over t", head / tp_sym, "params",
                          "torchtitan-pp", "norm and output on the last stage"))
    return Formula("plan.params_per_gpu", "Parameters held by this pipeline rank", terms, source="torchtitan-pp",
                   name="N_gpu", definitions=definitions,
                   note="torchtitan's split: the embeddings on the first stage, the norm and head on the last.")


def stage_activations_term(schedule: str, rank: int, peak: int, layers: int, per: sympy.Expr, label: str,
                           recompute: str) -> Term:
    """The activations one pipeline rank holds at its schedule's peak: ``peak`` layer-micro-batches × one layer."""
    how = ("from a forward to its weight-gradient step W (the linear layers' inputs stay until W)"
           if schedule == "zbv" else "from a forward to its backward")
    return Term("activations", f"activations: {peak} layer-micro-batches in flight on rank {rank} ({schedule}, "
                f"{layers} layers here) × one layer ({label}, recompute {recompute})", peak * per, "bytes",
                "pytorch-pipelining", f"{_SOURCE_NAMES[schedule]}",
                f"Each micro-batch's activations are held {how}; the peak of the sum over the rank's stages in "
                "PyTorch's order of operations.")


_SOURCE_NAMES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved": "ScheduleInterleaved1F1B",
                 "zbv": "ScheduleZBVZeroBubble"}
