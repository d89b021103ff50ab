"""Layout search: every dp × tp × pp × ZeRO × recompute × micro-batch layout, evaluated at once.

``search(model, gpu, gpus=64, seq=4096, global_batch=512, tokens=..., mfu=0.4)`` enumerates the
layouts of ``gpus`` GPUs (or of every count up to ``max_gpus``) that split ``global_batch``
sequences per optimizer step into dp ranks × micro-batch × gradient-accumulation steps, keeps
those whose per-GPU memory fits the GPU, and ranks them by time or cost.

How it stays fast: layouts that share a *structure* (ZeRO stage, recompute, whether tp and pp
are above 1, sequence parallelism, micro-batches in flight min(m, p)) have the same memory and
time formulas with different numbers for t, p, n_d, B and m. One plan is built per structure
(``planning.plan``, the function ``symbolic memory`` uses), each memory term and the step-time
formula are compiled once (``symbolic.math.compiled``), and all layouts of the structure are
evaluated as NumPy arrays, each compiled formula in one call over every structure that shares it. Memory is
exact: every term is evaluated exactly and rounded up to a whole byte as ``Plan.total`` does, so a layout's
``memory_bytes`` equals ``symbolic memory``'s total for the same flags. Step time is float64. Before its plan
is built, each structure gets a floor: its resident terms plus its largest phase (``build.train_layout``, the
plan's own terms without the runtime's and without simplifying the phases' maximum), compiled the same way; a
structure whose floor is over the budget at every one of its layouts cannot fit and is not built (most of a
large search's pipeline structures), so the layouts that fit, their bytes and their ranking are those of
building every structure.

Search space and its limits (stated): tp divides the attention heads and the key/value heads
and stays within one node (gpus_per_node); pp divides the layers or, where the planner splits stages as
torchtitan does (a model over a sequence, Korthikanti's activations), divides a GPU count and leaves every
stage a layer (the pinned pp, or a power of two: each such (pp, m) a structure of its own, the busier end
rank deciding); ZeRO 2 and 3 only without
pipeline parallelism (DeepSpeed), ZeRO > 0 only with dp > 1; FSDP2 (``fsdp``, beside the ZeRO
stages) only with dp > 1 (with tp and pp as torchtitan's 3D layout), unless a ZeRO stage, offload,
LoRA, experts or activations pytorch rule it out (``regime`` refuses those with it; fp8_all_gather, which
needs it, pins it); recompute none
and full (selective too when flash is off: with FlashAttention it saves nothing and costs FLOPs), and torchtitan's per-op
``ops`` where the planner models it (``_ops_apply``: flash, a dense model, Korthikanti's activations), at every pp
(the structures that cannot fit are not built, so this takes a 405B search on 256 GPUs from 4.7 to 5.4 CPU s); sequence
parallelism on whenever tp > 1 (same traffic, less memory); micro-batches up to 64 sequences;
no interleaving; ZeRO-Offload only when given, or when nothing fits without it. Context parallelism
(``cp``, torchtitan's ring attention) only when given, or where it matters: when nothing fits without it
or every layout that fits recomputes activations (recompute not pinned; long sequences, whose activations
cp splits; searched
before offload): then beside cp 1 every cp > 1 that divides a
GPU count and whose 2·cp divides the sequence, with FSDP2 over the dp × cp ranks (the planner requires
it), flash and Korthikanti's activations (the planner refuses the rest), at pp 1; cp > 1 with pp > 1 only where
pp or cp is pinned or no cp > 1 fits at pp 1 (a third pass: at one GPU count the stages leave fewer ranks for
cp, each holding a longer shard, and add the bubble, and building every pipeline × cp structure would make a
405B search on 256 GPUs take three times as long); the GPUs are dp·tp·pp·cp
and the step time counts the ring's K/V traffic (``library.timing``). Options given by
the caller pin that dimension. At most ``time.MAX_GPUS`` GPUs (2**20) and a global batch of at most
``MAX_GLOBAL_BATCH`` sequences (2**24); layouts are walked from the divisors of the batch and of
the layers, never from every number up to a GPU count. A search with no layout to consider returns one
note saying why (``no_layout``); where none fits, notes say which further passes (cp, offload) fit none either.

Measured activations (``activations pytorch``, and every network without a token sequence: a torch
module, article A's network, which the planner plans that way only) were measured on one device:
tp, pp, cp and FSDP2 are not searched (a pinned tp, pp or cp is refused in one line), recompute only
none (and full over a sequence, not compiled). A network without a token sequence takes no ``seq`` (refused in
one line): its global batch is samples, a token of the figures one sample. Its own FLOPs per sample
(``Network.own_flops``) may vary with the micro-batch (a term that does not grow with it): F_tok is
then evaluated at each layout's micro-batch, as ``symbolic time`` takes it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import sympy

from ..catalogs import GPU, Budget, as_budget
from ..core.errors import UserError
from ..core.memo import BoundedMemo
from ..core.symbols import B, N, N_gpu
from ..library.timing import P_gpu
from ..networks.network import load as load_shape
from ..networks.shape import ModelShape, divisors
from . import own_fsdp
from . import time as ptime
from .build import Plan, build, framework_pipeline, rank_plans
from .regime import one_count

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from ..core.symbols import SymbolScope
    from ..math.compiled import CompiledFormula

OBJECTIVES = ("time", "cost")
MAX_MICRO_BATCH = 64
# Sequences per optimizer step: published global batches are thousands of sequences, tens of
# thousands at most (BERT with LAMB: 65,536); 2**24 leaves ample room and bounds the divisor walk.
MAX_GLOBAL_BATCH = 2**24
LAYOUT_KEYS = ("gpus", "dp", "tp", "pp", "cp", "zero", "fsdp", "recompute", "sequence_parallel", "micro_batch",
               "grad_accum", "offload")
_COMPILED: BoundedMemo[sympy.Expr, CompiledFormula] = BoundedMemo(4096)


@dataclass
class SearchResult:
    """The ranked layouts that fit, and how many were considered."""

    model: str
    gpu: GPU
    objective: str
    considered: int
    fitting: int
    layouts: list[dict[str, object]]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    budget: Budget | None = None  # what each layout's memory was checked against (None: all of ``gpu``)

    @property
    def limit(self) -> Budget:
        """The budget each layout was checked against: the whole GPU unless a fraction or reservations were given."""
        return self.budget if self.budget is not None else as_budget(self.gpu)

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        data = {"model": self.model, "gpu": self.gpu.name, "objective": self.objective, "considered": self.considered,
                "fitting": self.fitting, "layouts": self.layouts, "notes": list(self.notes)}
        if self.limit.notes or not self.limit.whole:
            data["budget"] = self.limit.as_dict()
        return data


def _gpu_counts(gpus: int | None, max_gpus: int | None, per_node: int) -> list[int]:
    if gpus is not None and max_gpus is not None:
        raise UserError("give gpus or max_gpus, not both")
    if gpus is not None:
        return [ptime.gpu_count(gpus)]
    if max_gpus is None:
        raise UserError("give gpus (exactly this many) or max_gpus (every count up to it)")
    top = ptime.gpu_count(max_gpus, "max_gpus")
    return [n for n in range(1, top + 1) if n & (n - 1) == 0 or n % per_node == 0]


def global_batch_size(value: object) -> int:
    """Sequences per optimizer step: a whole number from 1 to MAX_GLOBAL_BATCH."""
    batch = ptime._whole(value, "global_batch")
    if batch > MAX_GLOBAL_BATCH:
        raise UserError(f"global_batch must be at most {MAX_GLOBAL_BATCH:,} sequences (2**24, far above published "
                        f"global batches), got {batch:,}")
    return batch


def _splits(counts: Iterable[int], global_batch: int, tps: list[int], layers: int,
            pins: Mapping[str, object], cps: tuple[int, ...] = (1,),
            uneven: bool = False, cp_pp: bool = True) -> list[tuple[int, int, int, int, int]]:
    """(gpus, dp, tp, pp, cp) with dp·tp·pp·cp one of ``counts``, dp dividing the batch and pp the layers
    (``cp_pp`` False: cp > 1 at pp 1 only); ``uneven``: also every pp dividing a GPU count whose stages
    torchtitan's split fills (``_pipeline_degrees``).

    Walked from the divisors of the batch, of the layers and of the counts (never every number up to a GPU
    count), in the order of ``counts``, then tp, then pp, then cp.
    """
    counts = list(counts)
    order: dict[int, int] = {}
    for i, n in enumerate(counts):
        order.setdefault(n, i)
    pps = _pipeline_degrees(layers, counts, uneven, pins.get("pp"))
    found = []
    for dp in divisors(global_batch):
        if pins.get("dp", dp) != dp:
            continue
        for tp in tps:
            for pp in pps:
                for cp in cps:
                    n = dp * tp * pp * cp
                    if n in order and pins.get("pp", pp) == pp and (cp == 1 or pp == 1 or cp_pp):
                        found.append((order[n], tp, pp, cp, n, dp))
    return [(n, dp, tp, pp, cp) for _, tp, pp, cp, n, dp in sorted(found)]


def _pipeline_degrees(layers: int, counts: list[int], uneven: bool, pinned: object = None) -> list[int]:
    """The pp degrees tried: the divisors of the layers, and with ``uneven`` the pinned pp and every power of two
    dividing a GPU count, where torchtitan's split (``pipeline.stage_layers``: L + 2 layer-equivalents) leaves
    every stage a transformer layer."""
    from ..library import pipeline

    found = set(divisors(layers))
    if not uneven:
        return sorted(found)
    powers = (2**k for k in range(layers.bit_length()))  # a stage a layer at least: pp ≤ L
    tried = {d for d in powers if any(n % d == 0 for n in counts)} | ({pinned} if isinstance(pinned, int) else set())
    for pp in tried - found:
        try:
            if min(pipeline.stage_layers(layers, pp)) > 0:
                found.add(pp)
        except ValueError:
            continue
    return sorted(found)


def _recomputes(flash: bool, ops: bool, measured: bool = False, sequence: bool = True,
                compiled: bool = False) -> tuple[str, ...]:
    """The recompute values searched: selective only without flash, torchtitan's per-op policy where it applies;
    with measured activations (``_measured``) whole layers only, and none for a network with nothing to checkpoint
    (``sequence`` False: no token sequence and no repeated blocks of its own, ``Network.checkpoint_blocks``) or a
    compiled step (compile measured without recompute)."""
    if measured:
        return ("none", "full") if sequence and not compiled else ("none",)
    if not flash:
        return ("none", "selective", "full")
    return ("none", "ops", "full") if ops else ("none", "full")


def _shardings(dp: int, tp: int, pp: int, fsdp: bool | None, cp: int = 1) -> tuple[tuple[int, bool], ...]:
    """(ZeRO stage, FSDP2) pairs searched for one split; ``fsdp`` None: FSDP2 beside the stages where it applies
    (dp > 1: FSDP2 shards each rank's tensor-parallel shard and, under pp, each stage's blocks, as torchtitan);
    with cp > 1 FSDP2 alone, over the dp × cp ranks (torchtitan applies it whenever cp > 1)."""
    if cp > 1:
        return () if fsdp is False else ((0, True),)
    sharded = dp > 1
    if fsdp:
        return ((0, True),) if sharded else ()
    zeros = (0,) if dp == 1 else (0, 1) if pp > 1 else (0, 1, 2, 3)
    out = tuple((zero, False) for zero in zeros)
    return out + ((0, True),) if fsdp is None and sharded else out


def enumerate_layouts(model: object, gpu: GPU, *, counts: Iterable[int], global_batch: int, flash: bool = True,
                      pins: dict[str, object] | None = None, ops: bool = False,
                      fsdp: bool | None = False, cps: tuple[int, ...] = (1,),
                      uneven: bool = False, measured: bool = False, cp_pp: bool = True,
                      compiled: bool = False) -> list[dict[str, object]]:
    """Every layout in the search space (see the module docstring), as plain dicts.

    ``ops``: also try ``recompute ops`` (with flash); ``fsdp``: True only FSDP2, None FSDP2 beside the ZeRO
    stages, False the ZeRO stages alone; ``cps``: the context-parallel degrees tried (``cp_pp`` False: cp > 1 at
    pp 1 only); ``uneven``: also pp degrees
    that do not divide the layers (torchtitan's split); ``measured``: activations pytorch (``_measured``), so tp 1
    and pp 1 unless pinned (the planner's one-line refusal then says why), and with ``compiled`` (--compile) no
    recompute.
    """
    shape = load_shape(model)
    pins = dict(pins or {})
    global_batch = global_batch_size(global_batch)
    out: list[dict[str, object]] = []
    recomputes = _recomputes(flash, ops, measured, bool(shape.sequence) or bool(shape.checkpoint_blocks), compiled)
    offload = bool(pins.pop("offload", False))  # ZeRO-Offload needs a ZeRO stage
    if measured:  # measured on one device: no tensor or pipeline parallelism; a pinned recompute the planner judges
        pins.setdefault("pp", 1)
        recomputes = (str(pins["recompute"]),) if "recompute" in pins else recomputes
    splits = [pins.get("tp", 1)] if measured else _tp_splits(shape)
    tps = [tp for tp in splits if tp <= gpu.gpus_per_node and pins.get("tp", tp) == tp]
    for n, dp, tp, pp, cp in _splits(counts, global_batch, tps, _layers(shape), pins, cps, uneven, cp_pp):
        per_rank = global_batch // dp
        for zero, sharded in _shardings(dp, tp, pp, fsdp, cp):
            if pins.get("zero", zero) != zero or (offload and zero == 0):
                continue
            for recompute in recomputes:
                if pins.get("recompute", recompute) != recompute:
                    continue
                for mb in range(1, min(per_rank, MAX_MICRO_BATCH) + 1):
                    if per_rank % mb or pins.get("batch", mb) != mb:
                        continue
                    m = per_rank // mb
                    if pins.get("microbatches", m) != m:
                        continue
                    out.append({"gpus": n, "dp": dp, "tp": tp, "pp": pp, "cp": cp, "zero": zero, "fsdp": sharded,
                                "recompute": recompute,
                                "sequence_parallel": bool(pins.get("sequence_parallel", tp > 1)) and tp > 1,
                                "micro_batch": mb, "grad_accum": m, "offload": offload})
    return out


def _tp_splits(shape: ModelShape) -> list[int]:
    """The tp degrees a model takes: the divisors of its heads and key/value heads' common divisor, or 1."""
    return divisors(math.gcd(shape.heads, shape.kv_head_count)) if shape.tensor_parallel else [1]


# why a pinned value alone can leave no layout (``no_layout``: the search finds some without that pin)
_PIN_NEEDS = {"zero": "a ZeRO stage needs dp > 1, and stages 2 and 3 pp 1 (DeepSpeed)",
              "fsdp": "FSDP2 needs dp > 1 (or cp > 1)", "offload": "ZeRO-Offload needs a ZeRO stage, so dp > 1",
              "sequence_parallel": "sequence parallelism needs tp > 1",
              "batch": "the micro-batch must divide a dp rank's share of the global batch (at most 64)",
              "microbatches": "the micro-batches must split a dp rank's share of the global batch",
              "recompute": "the recompute values searched with these options are {recomputes}",
              "cp": "cp > 1 needs FSDP2 over dp × cp, flash and Korthikanti's activations",
              **dict.fromkeys(("dp", "tp", "pp"), "dp × tp × pp × cp must make {gpus}")}


def no_layout(shape: ModelShape, gpu: GPU, space: Mapping[str, object]) -> str:
    """Why ``enumerate_layouts(shape, gpu, **space)`` is empty, in one note: a pinned tp beyond the heads or one
    node's NVLink domain, a pinned dp or pp that cannot divide, the one pin without which layouts exist, or else
    no dp·tp·pp·cp making the GPU count."""
    pins = dict(space["pins"])  # type: ignore[call-overload]
    counts = list(space["counts"])  # type: ignore[call-overload]
    batch, cps = int(space["global_batch"]), tuple(space["cps"])  # type: ignore[call-overload, arg-type]
    gpus = f"up to {counts[-1]:,} GPUs" if len(counts) > 1 else f"{counts[0]:,} GPU{'s' if counts[0] > 1 else ''}"
    unit = "sequences" if shape.sequence else "samples"  # a network without a token sequence: its batch is samples
    splits = [pins.get("tp", 1)] if space["measured"] else _tp_splits(shape)
    tp, dp, pp = pins.get("tp"), pins.get("dp"), pins.get("pp")
    if isinstance(tp, int) and tp not in splits:  # measured activations: the planner refused the pin before this
        return (f"no layout: tp {tp} does not divide {shape.name}'s {shape.heads} attention heads and "
                f"{shape.kv_head_count} key/value heads (tp {', '.join(map(str, splits))})")
    if isinstance(tp, int) and tp > gpu.gpus_per_node:
        return (f"no layout: tp {tp} spans more GPUs than one NVLink domain of the {gpu.title} ({gpu.name}: "
                f"{gpu.gpus_per_node} GPUs, its gpus_per_node), and the search keeps tensor parallelism within one; "
                "a custom GPU file (--gpu FILE.toml) sets another gpus_per_node and the bandwidth beyond it")
    if isinstance(dp, int) and batch % dp:
        return f"no layout: dp {dp} does not divide the global batch of {batch:,} {unit}"
    layers = _layers(shape)
    degrees = _pipeline_degrees(layers, counts, bool(space["uneven"]), pp)
    if isinstance(pp, int) and pp not in degrees:
        return (f"no layout: pp {pp} does not divide {shape.name}'s {layers} layers"
                + (", nor leaves each stage a layer as torchtitan splits them" if space["uneven"] else ""))
    single = [*pins, *(["fsdp"] if space["fsdp"] else []), *(["cp"] if cps != (1,) and len(cps) == 1 else [])]
    culprits = []  # the pins without each of which (alone) some layout exists
    for key in single:
        trial = {**space, "pins": {k: v for k, v in pins.items() if k != key}}
        trial.update({"fsdp": None} if key == "fsdp" else {"cps": (1,)} if key == "cp" else {})
        if enumerate_layouts(shape, gpu, **trial):  # type: ignore[arg-type]
            culprits.append(key)
    if culprits:
        recomputes = _recomputes(bool(space["flash"]), bool(space["ops"]), bool(space["measured"]),
                                 bool(shape.sequence) or bool(shape.checkpoint_blocks), bool(space["compiled"]))
        named = list(dict.fromkeys(_PIN_NEEDS[k].format(recomputes=", ".join(recomputes), gpus=gpus)
                                   for k in sorted(culprits, key=lambda k: k in ("dp", "tp", "pp"))
                                   if k in _PIN_NEEDS))  # the mesh's own need last
        values = " and ".join("--fsdp" if k == "fsdp" else f"{k} {cps[0] if k == 'cp' else pins[k]}" for k in culprits)
        head = (f"{values} rules out every layout of {gpus} that the other options allow" if len(culprits) == 1
                else f"{values} do not combine on {gpus} (without any one of them layouts exist)")
        return f"no layout: {head}" + (f": {'; '.join(named)}" if named else "")
    tps = [t for t in splits if t <= gpu.gpus_per_node and pins.get("tp", t) == t]
    return (f"no layout: no dp × tp × pp × cp makes {gpus} with dp dividing the global batch of {batch:,} {unit}"
            f"{f' (dp {dp})' if dp else ''}, tp {', '.join(map(str, tps))} ("
            f"{'measured on one device' if space['measured'] else 'dividing the heads'}, within a node of "
            f"{gpu.gpus_per_node}), pp {', '.join(map(str, [pp] if pp else degrees))} and cp "
            f"{', '.join(map(str, cps))}")


def _layers(shape: ModelShape) -> int:
    """The layers a pipeline splits; a network without a token sequence is one block (planned at pp 1 only)."""
    return shape.layers if shape.sequence else 1


def _structure(layout: dict[str, object], layers: int = 0, staged: bool = False) -> tuple[object, ...]:
    tp, pp, dp, m = layout["tp"], layout["pp"], layout["dp"], layout["grad_accum"]
    # a pipeline split as torchtitan splits it (pp not dividing the layers, or a schedule given) writes each
    # stage's layers and its schedule's peak as numbers of (p, m): a structure per (p, m)
    split = (pp, m) if pp > 1 and (staged or layers % pp) else None  # type: ignore[operator]
    # the memory plan writes min(m, p) micro-batches in flight as a number (token ids kept per stage), and
    # without a pipeline m > 1 keeps the gradients through the forward and backward passes (accumulation), with one
    # from the first stage's first backward on (before its peak when m > p, at its second backward else); FSDP2's
    # shard group n_s is a number of the plan (dp / hsdp · cp), so each dp is a structure of its own, and so is each
    # cp (c_p is a number of the plan and of the step time, not a layout symbol)
    cp = layout.get("cp", 1)
    return (layout["zero"], layout["recompute"], tp > 1, pp > 1, layout["sequence_parallel"],  # type: ignore[operator]
            pp > 1 and m < pp, pp > 1 and m > pp, min(m, pp),  # type: ignore[operator, type-var]
            layout["zero"] == 3 and dp > 1,  # type: ignore[operator]
            pp == 1 and m > 1, dp if layout["fsdp"] else 0, cp, split,  # type: ignore[operator]
            _nccl(dp, tp, pp, cp))  # type: ignore[arg-type]


def _nccl(dp: int, tp: int, pp: int, cp: int = 1) -> tuple[tuple[str, int], ...]:
    """The NCCL buffers a layout's plan counts (a number per communicator, not a formula in t, p, n_d)."""
    from ..library import runtime

    groups = runtime.communicators(dp * tp * pp * cp, dp, tp, pp)
    return tuple((group, runtime.nccl_bytes(n)) for group, n in groups)


def _options(layout: dict[str, object], seq: int | None, fixed: dict[str, object]) -> dict[str, object]:
    opts = {**fixed, "batch": layout["micro_batch"], "dp": layout["dp"], "tp": layout["tp"],
            "pp": layout["pp"], "zero": layout["zero"], "recompute": layout["recompute"],
            "microbatches": layout["grad_accum"]}
    if seq is not None:  # None: a network without a token sequence
        opts["seq"] = seq
    if layout["sequence_parallel"]:
        opts["sequence_parallel"] = True
    if layout["fsdp"]:
        opts["fsdp"] = True
    if layout.get("cp", 1) != 1:
        opts["cp"] = layout["cp"]
    return opts


def _compiled(expr: sympy.Expr, key: str, unit: str) -> CompiledFormula:
    from ..math.compiled import CompiledFormula

    found = _COMPILED.get(expr)
    if found is None:
        found = _COMPILED[expr] = CompiledFormula(key, "composed", expr, unit)
    return found


def _ceil(values: np.ndarray) -> np.ndarray:
    import numpy as np

    if values.dtype == object:
        return np.array([math.ceil(v) for v in values.ravel()], dtype=object).reshape(values.shape)
    return values


def evaluate(model: object, gpu: GPU, layouts: list[dict[str, object]], *, seq: int | None, fixed: dict[str, object],
             how: str, rate: float, compute: str | None, limit: int | None = None
             ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(per-GPU memory bytes, step seconds, skipped) of every layout, by compiled formulas per structure.

    Layouts the planner rejects (a pinned option that does not combine with them) get memory None
    and are listed in ``skipped``; if every structure is rejected, the first reason is the error.
    Each compiled formula is called once over every layout that uses it, whatever its structure
    (``_batched``): a search has hundreds of structures but far fewer distinct formulas. With ``limit`` (bytes),
    a structure whose floor (resident terms plus its largest phase) exceeds it at every one of its layouts
    (``_over``) is not built: its layouts get memory None and step time inf, like rejected ones, and fit nowhere
    either way.
    """
    import numpy as np

    step = np.zeros(len(layouts), dtype=np.float64)
    groups: dict[tuple[object, ...], list[int]] = {}
    layers = _layers(load_shape(model[0] if isinstance(model, tuple) else model))
    for i, layout in enumerate(layouts):
        groups.setdefault(_structure(layout, layers, bool(fixed.get("pp_schedule"))), []).append(i)
    every = {k: np.array([lay[k] for lay in layouts], dtype=np.int64)
             for k in ("micro_batch", "tp", "pp", "dp", "grad_accum", "gpus")}
    every["cp"] = np.array([lay.get("cp", 1) for lay in layouts], dtype=np.int64)
    refused: dict[str, list[int]] = {}  # one reason, every structure it refused
    invalid: list[int] = []
    built: list[tuple[np.ndarray, _Compiled]] = []
    timing = (how, rate, compute)
    over = _over(model, gpu, seq, fixed, timing, layouts, groups, every, limit) if limit is not None else set()
    for structure, rows in groups.items():
        if structure in over:
            invalid.extend(rows)
            step[rows] = np.inf
            continue
        try:
            compiled = _parts(model, gpu, how, rate, compute, seq, fixed, structure, layouts[rows[0]])
        except ValueError as err:  # a combination the planner does not model (e.g. with a pinned option)
            refused.setdefault(str(err), []).extend(rows)
            invalid.extend(rows)
            step[rows] = np.inf
            continue
        built.append((np.asarray(rows, dtype=np.int64), compiled))
    if refused and over:  # a reason may be every structure's: build the floor's too, as without it
        return evaluate(model, gpu, layouts, seq=seq, fixed=fixed, how=how, rate=rate, compute=compute)
    if refused and not built:  # every reason, the one refusing most layouts first
        reasons = sorted(refused.items(), key=lambda item: -len(item[1]))
        raise UserError("no layout can be planned: " + "; ".join(
            reason + (f" ({len(rows)} layouts)" if len(reasons) > 1 else "") for reason, rows in reasons))
    skipped = [_skipped(reason, [layouts[i] for i in rows]) for reason, rows in refused.items()]
    columns: dict[str, np.ndarray] = {"B": every["micro_batch"], "t": every["tp"], "p": every["pp"],
                                      "n_d": every["dp"], "n_mb": every["grad_accum"], "n_gpu": every["gpus"]}
    memory, busiest = _memory(built, columns, len(layouts))
    if how == "mfu" and built:
        valid = np.concatenate([rows for rows, _ in built])
        for name, values in _links(gpu, {k: v[valid] for k, v in every.items()}).items():
            columns[name] = np.full(len(layouts), np.nan)
            columns[name][valid] = values
    _rates(built, columns, busiest, len(layouts))
    jobs = [(compiled.step, rows, compiled.step_scalars if compiled.flops is None
             else {k: v for k, v in compiled.step_scalars.items() if k != "F_tok"}) for rows, compiled in built]
    for (_, rows, _), values in zip(jobs, _batched(jobs, columns, exact=False)):
        step[rows] = np.asarray(values, dtype=np.float64)
    memory[invalid] = None
    return memory, step, skipped


def _over(model: object, gpu: GPU, seq: int | None, fixed: dict[str, object], timing: tuple[str, float, str | None],
          layouts: list[dict[str, object]], groups: dict[tuple[object, ...], list[int]], every: dict[str, np.ndarray],
          limit: int) -> set[tuple[object, ...]]:
    """The structures whose floor (``_floor``: resident terms and largest phase, a floor under every layout's total)
    exceeds ``limit`` bytes at each of their layouts: no layout of theirs can fit, so their plans need not be built."""
    import numpy as np

    columns = {"B": every["micro_batch"], "t": every["tp"], "p": every["pp"], "n_d": every["dp"],
               "n_mb": every["grad_accum"]}
    found = [(structure, _floor(model, gpu, seq, fixed, timing, structure, layouts[rows[0]]),
              np.asarray(rows, dtype=np.int64)) for structure, rows in groups.items()]
    found = [(structure, parts, rows) for structure, parts, rows in found if parts is not None]
    jobs = [(part, rows, {}) for _, parts, rows in found for part in parts]
    values = iter(_batched(jobs, columns))
    over = set()
    for structure, (_, *phases), _ in found:
        low = next(values)
        peak = next(values)
        for _ in phases[1:]:
            peak = np.maximum(peak, next(values))
        if all(r + x > limit for r, x in zip(low, peak)):
            over.add(structure)
    return over


_FLOORS: BoundedMemo[tuple[object, ...], tuple[CompiledFormula, ...] | None] = BoundedMemo(4096)
_FLOOR_CODE: BoundedMemo[sympy.Expr, CompiledFormula] = BoundedMemo(4096)


def _floor(model: object, gpu: GPU, seq: int | None, fixed: dict[str, object], timing: tuple[str, float, str | None],
           structure: tuple[object, ...], first: dict[str, object]) -> tuple[CompiledFormula, ...] | None:
    """A structure's resident terms' sum and each phase's, compiled over the layout symbols (``build.train_layout``;
    a staged pipeline's first rank, which the busier rank's total is at least), once per session; None where not
    known cheaply (activations pytorch) or where ``_parts`` would refuse the structure (an option the planner
    rejects, a rate or link the step time lacks: ``_parts`` then says why)."""
    shape, spec, name = model if isinstance(model, tuple) else (model, None, model)
    try:
        key: tuple[object, ...] | None = (name, gpu, timing, seq, tuple(sorted(fixed.items())), structure[:-1])
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _FLOORS:
        return _FLOORS[key]
    found = _floor_code(shape, spec, gpu, timing, _options(first, seq, fixed), structure[-2] is not None)
    if key is not None:
        _FLOORS[key] = found
    return found


def _floor_code(shape: ModelShape, spec: object, gpu: GPU, timing: tuple[str, float, str | None],
                options: dict[str, object], split: bool) -> tuple[CompiledFormula, ...] | None:
    """``_floor``'s formulas, built: None where the planner or the step time refuses the layout, or has no floor."""
    from types import SimpleNamespace

    from ..library import flops
    from ..math.compiled import CompiledFormula
    from . import on_gpu, resolve
    from .build import pipeline_stage, train_layout

    try:
        regime = on_gpu(resolve(shape, "train", **options), gpu)
        if regime.activations == "pytorch" or regime.recompute not in flops.RECOMPUTE:  # measured; or time refuses
            return None
        probe = SimpleNamespace(model=shape, regime=regime)  # what train_parts's FLOPs and rates read of a plan
        fl_ = ptime.plan_flops(probe, spec if spec is not None else shape)  # type: ignore[arg-type]
        ptime._train_values(probe, fl_, gpu, *timing)  # type: ignore[arg-type]  # its rates and links, or the error
        staged = split or framework_pipeline(shape, regime)  # the plan is then an end rank's, each at least rank 0's
        layout, definitions, values = train_layout(shape, regime, pipeline_stage(shape, regime, 0) if staged else None)
        put = _putter({s: f.composed() for s, f in definitions.items()}, _numbers(values, shape.scope))
        exprs = [sympy.Add(*(put(term.expr) for term in terms))
                 for terms in (layout.resident, *layout.phases.values())]
    except (ValueError, KeyError):  # rejected (the full build says why) or a symbol this floor cannot name
        return None
    if any(not {s.name for s in expr.free_symbols} <= {"B", "t", "p", "n_d", "n_mb"} for expr in exprs):
        return None
    out = []
    for expr in exprs:
        if expr not in _FLOOR_CODE:
            _FLOOR_CODE[expr] = CompiledFormula("floor", "composed", expr, "bytes")
        out.append(_FLOOR_CODE[expr])
    return tuple(out)


def _memory(built: list[tuple[np.ndarray, _Compiled]], columns: dict[str, np.ndarray],
            size: int) -> tuple[np.ndarray, np.ndarray]:
    """(memory bytes, which candidate pipeline rank is the busiest: 0 the first) per layout: each term rounded up to
    a byte as ``Plan.total`` does; a split pipeline's layouts take the busiest of their candidate ranks, the first
    of equals (build's rule)."""
    import numpy as np

    ranks = 1 + max((len(compiled.other_rank) for _, compiled in built), default=0)
    totals = [np.zeros(size, dtype=object) for _ in range(ranks)]
    for total in totals:
        total[:] = 0
    jobs, targets = [], []
    for rows, compiled in built:
        for target, terms in enumerate((compiled.memory_terms, *compiled.other_rank)):
            jobs += [(term, rows, {}) for term in terms]
            targets += [target] * len(terms)
    for (_, rows, _), target, values in zip(jobs, targets, _batched(jobs, columns)):
        totals[target][rows] = totals[target][rows] + _ceil(values).astype(object)
    busiest = np.zeros(size, dtype=np.int64)
    memory = totals[0].copy()
    for rows, compiled in built:
        for k in range(1, 1 + len(compiled.other_rank)):
            more = (totals[k][rows] > memory[rows]).astype(bool)
            busiest[rows[more]] = k
            memory[rows[more]] = totals[k][rows[more]]
    return memory, busiest


def _rates(built: list[tuple[np.ndarray, _Compiled]], columns: dict[str, np.ndarray], busiest: np.ndarray,
           size: int) -> None:
    """Add the F_tok column (where it varies with the micro-batch) and the P_gpu column (the parameters one GPU
    computes with; a split pipeline's busiest rank's, as ``time`` takes them) to ``columns``."""
    import numpy as np

    for name, pick in (("F_tok", lambda c: ((c.flops, ()),)), ("P_gpu", lambda c: ((c.held, c.other_held),))):
        found = [(rows, pair) for rows, c in built for pair in pick(c) if pair[0] is not None]
        if not found:
            continue
        column = columns[name] = np.full(size, np.nan)
        jobs = [(pair[0], rows, {}) for rows, pair in found]
        for (rows, _), values in zip(found, _batched(jobs, columns, exact=False)):
            column[rows] = np.asarray(values, dtype=np.float64)
        others = [(rows, k, formula) for rows, pair in found for k, formula in enumerate(pair[1], start=1)
                  if formula is not None and (busiest[rows] == k).any()]
        jobs = [(formula, rows, {}) for rows, _, formula in others]
        for (rows, k, _), values in zip(others, _batched(jobs, columns, exact=False)):
            column[rows] = np.where(busiest[rows] == k, np.asarray(values, dtype=np.float64), column[rows])


def _batched(jobs: list[tuple[CompiledFormula, np.ndarray, Mapping[str, object]]], columns: Mapping[str, np.ndarray],
             exact: bool = True) -> list[np.ndarray]:
    """Each job (compiled formula, rows, scalars) evaluated at its rows of ``columns`` (a scalar given wins over a
    column of the same name); the jobs with one formula and the same scalars share one call. Values per row are
    the same as one call per job: the formulas are elementwise."""
    import numpy as np

    shared: dict[tuple[object, ...], list[int]] = {}
    for i, (formula, _, scalars) in enumerate(jobs):
        named = tuple((k, scalars[k]) for k in formula.inputs if k in scalars)
        shared.setdefault((id(formula), named), []).append(i)
    out: list[np.ndarray] = [np.empty(0)] * len(jobs)
    for members in shared.values():
        formula, _, scalars = jobs[members[0]]
        rows = np.concatenate([jobs[i][1] for i in members])
        args = {k: scalars[k] if k in scalars else columns[k][rows] for k in formula.inputs}
        values = np.broadcast_to(np.asarray(formula(args, exact=exact)), rows.shape)
        start = 0
        for i in members:
            out[i] = values[start:start + len(jobs[i][1])]
            start += len(jobs[i][1])
    return out


def _skipped(reason: str, layouts: list[dict[str, object]]) -> str:
    """One note per reason: how many layouts it refused, the recompute values among them, one example."""
    recompute = sorted({str(lay["recompute"]) for lay in layouts if "recompute" in lay})
    which = f" (recompute {', '.join(recompute)})" if len(recompute) > 1 else ""
    return f"{len(layouts)} layouts{which} like {_describe(layouts[0])}: {reason}"


def _describe(layout: dict[str, object]) -> str:
    text = ", ".join(f"{k} {layout[k]}" for k in ("dp", "tp", "pp", "cp", "zero", "recompute") if k in layout)
    return text + ", fsdp" if layout.get("fsdp") else text


@dataclass(frozen=True)
class _Compiled:
    """One structure's compiled formulas, every number but the layout's substituted."""

    memory_terms: tuple[CompiledFormula, ...]
    held: CompiledFormula | None  # P_gpu, the parameters one GPU computes with
    step: CompiledFormula
    step_scalars: dict[str, float]
    other_rank: tuple[tuple[CompiledFormula, ...], ...] = ()  # a split pipeline's other candidate ranks (first: memory_terms)
    other_held: tuple[CompiledFormula | None, ...] = ()  # their P_gpu (held: the first rank's)
    flops: CompiledFormula | None = None  # F_tok in B where it varies with the micro-batch (``_flops_in_batch``)


LAYOUT_SYMBOLS = ("B", "t", "p", "n_d", "n_mb", "n_gpu", "W_tp", "W_dp", "W_pp", "W_cp", "P_gpu")
_PARTS: BoundedMemo[tuple[object, ...], _Compiled] = BoundedMemo(4096)


def _numbers(values: dict[str, object], scope: SymbolScope | None = None) -> dict[sympy.Symbol, sympy.Expr]:
    """The model's numbers (every value but the layout's) as exact SymPy numbers (``scope``: the network's own)."""
    from ..core.symbols import lookup

    return {lookup(name, scope): sympy.Rational(value) for name, value in values.items()  # type: ignore[arg-type]
            if name not in LAYOUT_SYMBOLS and not isinstance(value, str)}


def _parts(model: object, gpu: GPU, how: str, rate: float, compute: str | None, seq: int | None, fixed: dict[str, object],
           structure: tuple[object, ...], first: dict[str, object]) -> _Compiled:
    """One structure's compiled formulas, built once per session (the layouts' numbers differ)."""
    shape, spec, name = model if isinstance(model, tuple) else (model, None, model)
    try:
        key: tuple[object, ...] | None = (name, gpu, how, rate, compute, seq, tuple(sorted(fixed.items())), structure)
        hash(key)
    except TypeError:  # an unhashable model or option: build every time
        key = None
    if key is not None and key in _PARTS:
        return _PARTS[key]
    # structures that differ only in their NCCL buffers (a number per communicator) share one build
    base_key = None if key is None else key[:-1] + (structure[:-1],)
    if base_key is not None and base_key in _PARTS:
        found = _with_nccl(_PARTS[base_key], structure[-1])  # type: ignore[arg-type]
        _PARTS[key] = found  # type: ignore[index]
        return found
    options = _options(first, seq, fixed)
    built, ranks = _memory_plan(shape, gpu, options, structure[-2] is not None)
    plan, fl_, formula, values = ptime.train_parts(shape, gpu, how, rate, compute, options, spec, built)
    values["F_tok"] = fl_.per_token()
    other: tuple[tuple[CompiledFormula, ...], ...] = ()
    held: CompiledFormula | None = None
    other_held: tuple[CompiledFormula | None, ...] = ()
    if ranks is None:
        terms = _memory_terms(plan)
        if P_gpu in formula.definitions:
            exact = _numbers(plan.values, plan.model.scope)
            held = _compiled(formula.definitions[P_gpu].composed().xreplace(exact), "P_gpu", "params")
    else:  # a split pipeline (see _structure): every rank that can hold the most, each exact
        first_rank, *others = ranks
        terms, other = _memory_terms(first_rank), tuple(_memory_terms(rank) for rank in others)
        if P_gpu in formula.definitions:
            held, other_held = _held(first_rank), tuple(_held(rank) for rank in others)
    # F_tok (one number per structure) and P_gpu stay inputs: the roofline's max() is then compiled
    # over a few symbols instead of the whole composed parameter count
    # (numbers are passed, not substituted: rebuilding max() with numbers inside costs SymPy seconds)
    step_scalars = {k: float(v) for k, v in values.items() if k not in LAYOUT_SYMBOLS and not isinstance(v, str)}
    kept = tuple(s.name for s in formula.definitions if s.name in ("F_tok", "P_gpu"))  # achieved: no P_gpu
    found = _Compiled(terms, held, formula.compile(keep=kept), step_scalars, other, other_held,
                      _flops_in_batch(fl_, plan.model.scope))
    if key is not None:
        _PARTS[key] = found
        _PARTS[base_key] = found  # type: ignore[index]
    return found


def _memory_plan(shape: ModelShape, gpu: GPU, options: dict[str, object],
                 split: bool) -> tuple[Plan, list[Plan] | None]:
    """The layout's memory plan as ``planning.plan`` builds it or, for a split pipeline (``split``), its first
    rank's plan and the plans of every rank that can hold the most (``build.rank_plans``), built once (``build``
    would build them again to take the busiest).

    Which rank stands for a split pipeline changes nothing the search takes from it: its memory comes from every
    candidate rank, its P_gpu from the busiest, and the step formula keeps P_gpu as an input (the model and regime
    are the same).
    """
    from . import on_gpu, resolve

    regime = on_gpu(resolve(shape, "train", **options), gpu)
    if not split:
        return build(shape, regime), None
    ranks = rank_plans(shape, regime)
    return (ranks[0] if framework_pipeline(shape, regime) else build(shape, regime)), ranks


def _flops_in_batch(fl_: ptime.Flops, scope: SymbolScope | None) -> CompiledFormula | None:
    """F_tok as a formula in B where it varies with the micro-batch, else None (one number per structure).

    A network's own count (``Flops.parts``: a torch module's) is per sample, the step's FLOPs over B: a term
    that does not grow with the batch (a weight computed in the forward) makes it differ between micro-batches.
    """
    if not fl_.parts:
        return None
    expr = fl_.train.composed().xreplace(_numbers(fl_.values, scope))
    if expr.free_symbols != {B}:
        return None
    return _compiled(expr, "F_tok", "flops")


def _held(plan: Plan) -> CompiledFormula:
    """P_gpu of one plan: the parameters its GPU computes with (N_gpu, or N), as ``time.step_formula`` takes them."""
    held = N_gpu if N_gpu in plan.formula.definitions else N
    expr = plan.formula.definitions[held].composed()
    return _compiled(expr.xreplace(_numbers(plan.values, plan.model.scope)), "P_gpu", "params")


def _memory_terms(plan: Plan) -> tuple[CompiledFormula, ...]:
    """A plan's memory terms compiled, the model's numbers substituted (the layout's symbols left)."""
    exact = _numbers(plan.values, plan.model.scope)
    expansions = {s: f.composed() for s, f in plan.formula.definitions.items()}  # once per plan, not per term
    put = _putter(expansions, exact)
    return tuple(_compiled(put(term.expr), term.key, "bytes") for term in plan.formula.terms)


_PUT: BoundedMemo[tuple[object, ...], sympy.Expr] = BoundedMemo(8192)


def _putter(expansions: dict[sympy.Symbol, sympy.Expr], exact: dict[sympy.Symbol, sympy.Expr]):  # noqa: ANN202
    """``expr`` ↦ it with the definitions expanded and the model's numbers put in (``_substitute`` twice),
    remembered: structures and phases share most terms, and most structures share the numbers."""
    context = (frozenset(expansions.items()), frozenset(exact.items()))

    def put(expr: sympy.Expr) -> sympy.Expr:
        key = (expr, context)
        if key not in _PUT:
            _PUT[key] = _substitute(_substitute(expr, expansions), exact)
        return _PUT[key]
    return put


def _with_nccl(base: _Compiled, nccl: tuple[tuple[str, int], ...]) -> _Compiled:
    """``base`` with its NCCL term (a constant) set to the buffers of ``nccl``'s communicators."""
    total = sum(size for _, size in nccl)
    def swapped(memory_terms: tuple[CompiledFormula, ...]) -> tuple[CompiledFormula, ...]:
        terms = [t for t in memory_terms if t.key != "nccl"]
        if total:
            terms.append(_compiled(sympy.Integer(total), "nccl", "bytes"))
        return tuple(terms)

    return replace(base, memory_terms=swapped(base.memory_terms),
                   other_rank=tuple(swapped(terms) for terms in base.other_rank))


def _substitute(expr: sympy.Expr, mapping: Mapping[sympy.Basic, sympy.Basic]) -> sympy.Expr:
    """``expr.xreplace(mapping)``, leaving every max/min unevaluated.

    Rebuilding a ``Max`` with numbers inside makes SymPy compare its arguments pairwise through its
    assumptions (seconds for a step's phases); the compiled evaluator takes the maximum per layout.
    """
    if not expr.has(sympy.Max, sympy.Min):
        return expr.xreplace(mapping)
    args = [_substitute(arg, mapping) for arg in expr.args]
    if isinstance(expr, (sympy.Max, sympy.Min)):
        return expr.func(*args, evaluate=False)
    return expr.func(*args)


def _links(gpu: GPU, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-layout link bandwidths of the tp, dp and pp groups (Megatron's order: tp, then dp, then pp)."""
    import numpy as np

    def pick(span: np.ndarray, what: str) -> np.ndarray:
        return np.array([ptime.link(gpu, int(s), what) for s in span], dtype=np.float64)

    spans_pp = np.where(cols["pp"] > 1, cols["gpus"], 1)
    links = {"W_tp": pick(cols["tp"], "tensor-parallel"), "W_dp": pick(cols["tp"] * cols["cp"] * cols["dp"],
                                                                       "data-parallel"),
             "W_pp": pick(spans_pp, "pipeline")}
    if (cols["cp"] > 1).any():  # torchtitan's mesh: tp innermost, then cp (the ring spans t·c_p GPUs)
        links["W_cp"] = pick(cols["tp"] * cols["cp"], "context-parallel")
    return links


def search(model: object, gpu: GPU | Budget | str, *, seq: int | None = None, global_batch: int, gpus: int | None = None,
           max_gpus: int | None = None, tokens: int | None = None, mfu: float | None = None,
           achieved_tflops: float | None = None, price: float | None = None, objective: str = "time",
           top: int | None = 10, compute: str | None = None, _cps: tuple[int, ...] | None = None,
           _cp_pp: bool = False, **options: object) -> SearchResult:
    """The layouts that fit ``gpu`` (or a Budget of one), ranked by ``objective`` (time to train, or cost).

    ``_cps`` (internal): the context-parallel degrees of the second pass, when nothing fits without them;
    ``_cp_pp`` (internal): its third, cp > 1 with pp > 1 too, when no cp > 1 fits at pp 1.
    """
    import time as clock

    import numpy as np

    started = clock.perf_counter()
    budget = ptime.to_budget(gpu)
    gpu = budget.gpu
    if objective not in OBJECTIVES:
        raise UserError(f"unknown objective {objective!r}; choose from {', '.join(OBJECTIVES)}")
    if objective == "cost" and price is None:
        raise UserError("objective cost needs a price per GPU-hour")
    if top is not None:
        ptime._whole(top, "top")
    global_batch = global_batch_size(global_batch)
    how, rate = ptime._efficiency(mfu, achieved_tflops)
    options = {k: v for k, v in options.items() if v is not None}
    layout_pins = ("dp", "tp", "pp", "cp", "zero", "recompute", "batch", "microbatches", "sequence_parallel")
    pins = {k: options.pop(k) for k in layout_pins if k in options}
    if "grad_accum" in options:  # microbatches' other name (regime._accumulation): a layout choice, pinned
        accum = options.pop("grad_accum")
        if pins.setdefault("microbatches", accum) != accum:
            raise UserError(one_count(accum, pins["microbatches"]))
    if int(options.get("recompute_every", 1)) > 1:  # every N-th layer checkpointed: full recompute, one stage
        pins.setdefault("recompute", "full")
        pins.setdefault("pp", 1)
    if options.get("offload"):
        pins["offload"] = True
    if "seq" in options:
        raise UserError("seq is given once (the search's seq)")
    shape = load_shape(model)
    seq = _sequence(shape, seq)
    if _measured(shape, options):
        _one_device(shape, pins)
    fsdp = _fsdp_choice(shape, options, pins)
    counts = _gpu_counts(gpus, max_gpus, gpu.gpus_per_node)
    cps = _cps or ((ptime._whole(pins.pop("cp"), "cp"),) if "cp" in pins else (1,))
    space = {"counts": counts, "global_batch": global_batch, "flash": bool(options.get("flash", True)), "pins": pins,
             "ops": _ops_apply(shape, options), "fsdp": fsdp, "cps": cps, "uneven": _uneven_apply(shape, options),
             "measured": _measured(shape, options), "cp_pp": _cp_pp or not _cps or "pp" in pins,
             "compiled": bool(options.get("compile"))}
    layouts = enumerate_layouts(shape, gpu, **space)  # type: ignore[arg-type]
    notes: list[str] = []
    if not layouts:
        return SearchResult(shape.name, gpu, objective, 0, 0, [], clock.perf_counter() - started,
                            [no_layout(shape, gpu, space)], budget)
    loaded = _loaded(model, shape)
    memory, step, skipped = evaluate(loaded, gpu, layouts, seq=seq, fixed=options, how=how, rate=rate,
                                     compute=compute, limit=budget.bytes)
    notes += [f"skipped {reason}" for reason in skipped[:3]]
    fits = np.array([m is not None and int(m) <= budget.bytes for m in memory])
    memory = np.array([m if m is not None else 2**62 for m in memory], dtype=object)
    n = np.array([lay["gpus"] for lay in layouts], dtype=np.float64)
    tokens_step = float(global_batch * (seq or 1))  # a network without a token sequence: a token is a sample
    order_key = step.copy()
    train = step * (tokens / tokens_step) if tokens is not None else None
    if train is not None:
        order_key = train
    cost = train * n / 3600 * float(price) if (train is not None and price is not None) else None
    if objective == "cost":
        if cost is None:
            raise UserError("objective cost needs tokens and a price")
        order_key = cost
    # ties (the same time or cost) go to the layout with less memory per GPU
    idx = [i for i in np.lexsort((memory.astype(np.float64), order_key)) if fits[i]]
    chosen = idx if top is None else idx[:top]
    rows = []
    for i in chosen:
        row = dict(layouts[i])
        row.update(memory_bytes=int(memory[i]), step_seconds=float(step[i]),
                   tokens_per_second=tokens_step / float(step[i]))
        if train is not None:
            row.update(train_seconds=float(train[i]), gpu_hours=float(train[i] * n[i] / 3600))
        if cost is not None:
            row["cost"] = float(cost[i])
        rows.append(row)
    notes.append(f"{len(layouts)} layouts considered, {len(idx)} fit {budget.label} ({budget.bytes:,} bytes)")
    notes += [n for n in (own_fsdp.search_note(shape.fsdp_units, options, any(r["fsdp"] for r in rows)),) if n]
    notes += ptime.budget_notes(budget)
    # context parallelism where it matters: when nothing fits without it, or only with activations recomputed
    wider = () if _cps or cps != (1,) or fsdp is False else _cp_degrees(shape, options, counts, seq)
    recomputes = "recompute" not in pins and all(layouts[i]["recompute"] != "none" for i in idx)  # not pinned
    if wider and (not idx or recomputes):
        again = search(model, budget, seq=seq, global_batch=global_batch, gpus=gpus, max_gpus=max_gpus, tokens=tokens,
                       mfu=mfu, achieved_tflops=achieved_tflops, price=price, objective=objective, top=top,
                       compute=compute, _cps=(1, *wider), **pins, **options, **({"fsdp": True} if fsdp else {}))
        if again.fitting:
            why = "nothing fits" if not idx else "every layout that fits recomputes activations"
            again.notes.insert(0, f"{why} without context parallelism, so cp {', '.join(map(str, wider))} were "
                                  f"searched too: each splits every sequence of {seq:,} tokens over cp ranks "
                                  "(torchtitan's ring attention, FSDP2 over dp × cp); the step time counts the ring's "
                                  "K/V all-gathers and fp32 dK/dV, not overlapped with attention")
            return again
        if not idx:
            notes.append(f"cp {', '.join(map(str, wider))} were searched too: none of those layouts fits either")
    if _cps and not (_cp_pp or "pp" in pins) and not any(layouts[i]["cp"] > 1 for i in idx):
        again = search(model, budget, seq=seq, global_batch=global_batch, gpus=gpus, max_gpus=max_gpus, tokens=tokens,
                       mfu=mfu, achieved_tflops=achieved_tflops, price=price, objective=objective, top=top,
                       compute=compute, _cps=_cps, _cp_pp=True, **pins, **options, **({"fsdp": True} if fsdp else {}))
        if again.fitting > len(idx):  # the cp 1 and pp 1 layouts are this pass's: some cp > 1 with pp > 1 fits
            again.notes.insert(0, "no context-parallel layout fits at pp 1, so cp > 1 was searched with pp > 1 too "
                                  "(each stage's tokens split over cp ranks, FSDP2 over dp × cp within the stage)")
            return again
    if not idx and "offload" not in options and not fsdp:  # offload where it matters: only when nothing fits without it
        again = search(model, budget, seq=seq, global_batch=global_batch, gpus=gpus, max_gpus=max_gpus, tokens=tokens,
                       mfu=mfu, achieved_tflops=achieved_tflops, price=price, objective=objective, top=top,
                       compute=compute, **pins, **options, offload=True)
        if again.fitting:
            again.notes.insert(0, f"nothing fits without offload ({len(layouts)} layouts); these keep the optimizer "
                                  "states in host memory (ZeRO-Offload), whose host traffic the step time leaves out")
            again.considered += len(layouts)
            return again
        if again.considered:  # none: no layout takes offload here (it needs a ZeRO stage)
            notes.append(f"offload was searched too ({again.considered:,} layouts): none fits either")
    return SearchResult(shape.name, gpu, objective, len(layouts), len(idx), rows, clock.perf_counter() - started, notes,
                        budget)


def _sequence(shape: ModelShape, seq: object) -> int | None:
    """The search's tokens per sequence: needed by a network over a token sequence, refused by one without (None)."""
    if shape.sequence:
        if seq is None:
            raise UserError("plan needs seq (tokens per sequence)")
        return ptime._whole(seq, "seq")
    if seq is not None:
        raise UserError(f"seq applies to a network that takes a token sequence; {shape.name} takes none (a token of "
                        "its figures is one sample)")
    return None


def _loaded(model: object, shape: ModelShape) -> object:
    """What ``evaluate`` takes: loaded once, not per structure, keyed in the session cache by the name the caller
    gave; a network object that cannot key it (a probed torch module) by a key of this search alone, so that its
    structures still share one build where they differ only in their NCCL buffers."""
    if isinstance(model, str):
        return (shape, ptime._spec(model), model)
    try:
        hash(model)
    except TypeError:
        return (model, None, object())
    return model


def _measured(shape: object, options: Mapping[str, object]) -> bool:
    """Whether the plan's activations are PyTorch's measured saved tensors (``activations pytorch``: given, or a
    network without a token sequence, which the planner plans that way only): one device, so no tp, pp, FSDP2."""
    return options.get("activations") == "pytorch" or not getattr(shape, "sequence", True)


def _one_device(shape: ModelShape, pins: Mapping[str, object]) -> None:
    """A pinned tp, pp or cp above 1 refused in one line where the activations were measured on one device."""
    split = [f"{k} {pins[k]}" for k in ("tp", "pp", "cp") if pins.get(k, 1) != 1]
    if split:
        raise UserError(f"{', '.join(split)}: {shape.name} is planned with activations pytorch (what PyTorch saves, "
                        "measured on one device): no tensor, pipeline or context parallelism is searched")


def _cp_degrees(shape: object, options: Mapping[str, object], counts: Iterable[int], seq: int) -> tuple[int, ...]:
    """The cp > 1 tried when nothing fits without context parallelism: each divides a GPU count and 2·cp the
    sequence; none where the planner refuses the ring (no flash, activations other than Korthikanti's, a model
    without attention over a sequence, LoRA, offload)."""
    refused = (not options.get("flash", True) or options.get("activations", "korthikanti") != "korthikanti"
               or not (getattr(shape, "sequence", False) and getattr(shape, "has_attention", False))
               or bool(options.get("lora_rank")) or bool(options.get("offload")))
    if refused or seq % 2:
        return ()
    counts = tuple(counts)  # 2·cp divides seq: cp is a divisor of seq/2 (few), then one count it divides
    return tuple(c for c in divisors(seq // 2) if c > 1 and any(n % c == 0 for n in counts))


def _uneven_apply(shape: object, options: Mapping[str, object]) -> bool:
    """Whether pp degrees that do not divide the layers are tried: where the planner splits stages as torchtitan
    does (``build.framework_pipeline``: a model over a sequence, Korthikanti's activations, no interleaving)."""
    return (bool(getattr(shape, "sequence", False)) and options.get("activations", "korthikanti") == "korthikanti"
            and int(options.get("interleave", 1) or 1) == 1)  # type: ignore[call-overload]


def _ops_apply(shape: object, options: Mapping[str, object]) -> bool:
    """Whether ``recompute ops`` is a candidate: torchtitan's dense layer, flash, Korthikanti's activations, and
    a step time for it (``library.flops.RECOMPUTE``: its recomputed matmuls, ``flops.ops_recompute``)."""
    from ..library import flops

    return ("ops" in flops.RECOMPUTE and bool(options.get("flash", True)) and not getattr(shape, "moe", False)
            and options.get("activations", "korthikanti") == "korthikanti")


def _fsdp_choice(shape: object, options: dict[str, object], pins: Mapping[str, object]) -> bool | None:
    """FSDP2 in the search (popped from ``options``): True pinned by --fsdp or --fp8-all-gather, None searched beside
    the ZeRO stages, False where the planner refuses it (a pinned ZeRO stage, offload, LoRA, experts, activations pytorch
    but for a network with its own repeated blocks as FSDP2 units, ``Network.fsdp_units``)."""
    if options.pop("fsdp", False):
        return True
    own = bool(getattr(shape, "fsdp_units", None))  # a network's own step with repeated blocks: FSDP2 over them
    refused = ("zero" in pins or "offload" in pins or getattr(shape, "moe", False)
               or (_measured(shape, options) and not own) or bool(options.get("lora_rank"))
               or int(options.get("ep", 1) or 1) > 1)  # type: ignore[call-overload]
    if refused:
        return False
    return True if options.get("fp8_all_gather") else None  # FSDP2's float8 all-gather: the planner needs --fsdp


def sharding(layout: Mapping[str, object]) -> str:
    """How a layout shards its states, for a table cell: 'fsdp' (FSDP2) or the ZeRO stage."""
    return "fsdp" if layout.get("fsdp") else str(layout["zero"])


def frontier(layouts: list[dict[str, object]], x: str = "train_seconds", y: str = "cost") -> list[int]:
    """Indices of the layouts no other layout beats in both ``x`` and ``y`` (the Pareto frontier)."""
    points = sorted(range(len(layouts)), key=lambda i: (layouts[i][x], layouts[i][y]))  # type: ignore[index]
    out, best = [], math.inf
    for i in points:
        value = float(layouts[i][y])  # type: ignore[arg-type]
        if value < best:
            out.append(i)
            best = value
    return sorted(out)
