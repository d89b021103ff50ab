"""Building a plan: per-GPU memory as phases, their peak as one composed ``Formula``, and the values.

A plan is a ``Layout``: resident terms (alive the whole step) and, per phase, what is
alive at that phase's peak moment besides them (``planning.phases``). ``Plan.formula`` is the
peak: the resident terms plus one ``peak`` term, the maximum of the phases' extras; each phase
is a named Formula too (``Plan.phases``). Training phases: forward, backward, optimizer;
serving: prefill, decode. Runtime terms (``library.runtime``: CUDA context, workspaces,
allocator, NCCL) join every CUDA plan as resident terms unless ``runtime`` is off.

Training, per GPU (the most loaded one: first pipeline stage):

- model states (``library.precision``), sharded by ZeRO (``library.parallel``) over N_d, with
  the parameters per GPU N_gpu = (N − embeddings − head)/(p·t) + embeddings/t (+ head/t when
  p = 1), and N the model's own parameter formula;
- ``zero3_gathered``: with ZeRO-3, the largest weight matrix gathered whole (DeepSpeed);
- ``activations``: L/p layers × min(m, p) micro-batches in flight (1F1B: L layers' worth when
  m ≥ p), × (1 + (p − 1)/(p·v)) for the interleaved schedule (Narayanan et al. 2021), each
  layer as in ``library.activations`` for the micro-batch B;
- ``recompute_buffer``: with full (or per-op) recompute, one layer rebuilt during its backward, at its backward's
  peak where measured (``compiled_recompute``, ``eager_recompute``; then after the loss's moment, not beside it);
- ``inputs``: int64 token ids 8sb and the embedding dropout mask sbh, per micro-batch in flight
  (Megatron's ``compute_activation_memory``);
- ``logits`` (p = 1 only: with pipelines the last stage holds them, with far fewer activations);
- ``loss_gradients`` (backward phase): the fp32 gradients of ``nll_loss`` and ``log_softmax``
  (8·B·S·V, measured with PyTorch, ``pytorch.peak.*``), alive with everything saved at the
  start of backward; ``logits_forward`` (forward phase) are the model's 16-bit logits and their fp32
  upcast while the loss runs (Hugging Face); neither is saved for backward;
- ``gradients`` and ``optimizer_temporaries`` (optimizer phase): PyTorch's default AdamW on
  CUDA (foreach) makes one temporary per parameter it updates, in the optimizer's dtype;
- with ``activations="pytorch"``: the step of ``library.peak_pytorch`` (``planning.pytorch``;
  one device, no recompute), with the saved tensors grouped as ``activations``, ``inputs`` and
  ``logits``.

Inference, per GPU: resident weights (quantised layers plus 16-bit embeddings and head) and
``kv_cache``; prefill: ``activations`` (the working set of one layer for the prompt chunk) and
``logits`` of the last position; decode: ``decode_activations`` (one token per sequence) and
the same logits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

import sympy

from .. import formats
from ..catalogs import GPU, Budget, as_budget
from ..core.symbols import B, H, L, N, N_gpu, S, UnknownSymbolError, V, a, e_p, n_d, n_mb, n_s, p, t, v_pp
from ..core.term import Term
from ..core.units import format_bytes
from ..library import activations as acts
from ..library import adam_8bit_step as adam8
from ..library import chunked_backward, compiled_recompute, fsdp, offload, registry, runtime, upcast_logits
from ..library import context_parallel as cpar
from ..library import eager_recompute as eager_rebuild
from ..library import inference as infer
from ..library import parallel as par
from ..library import peak_pytorch as pypeak
from ..library import pipeline as pipe
from ..library import precision as prec
from ..math.algebra import Solution
from ..math.extrema import maximum, shifted
from ..math.formula import Evaluation, Formula, to_plain
from ..math.userterms import CustomTerm, with_terms
from ..networks import stored
from ..networks.shape import ModelShape
from ..options.table import PlanOptionError
from ..text import display, printing
from . import finetune, pytorch
from .phases import PEAK_KEY, Layout, lead
from .regime import Regime


@dataclass(frozen=True)
class Fit:
    """Whether a plan fits one GPU, and by how much."""

    gpu: GPU
    total: int
    fits: bool
    headroom: int  # budget − total; negative when it does not fit
    budget: Budget | None = None  # what the total was checked against (None: all of ``gpu``)

    @property
    def limit(self) -> Budget:
        """The budget checked against: the whole GPU unless a fraction or reservations were given."""
        return self.budget if self.budget is not None else as_budget(self.gpu)

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"gpu": self.gpu.as_dict(), "fits": self.fits, "headroom": self.headroom,
                                   "headroom_bytes": self.headroom, "headroom_human": format_bytes(self.headroom)}
        if self.limit.notes or not self.limit.whole:
            data["budget"] = self.limit.as_dict()
        return data

    def __repr__(self) -> str:  # display methods: symbolic.text.display renders
        return display.short("Fit", self.limit.label, f"fits={self.fits}", f"headroom {format_bytes(self.headroom)}")

    def _repr_html_(self) -> str:
        return display.html(display.fit_table(self))

    def to_frame(self):  # noqa: ANN201 (pandas is optional)
        return display.frame(display.fit_table(self))


@dataclass
class Plan:
    """Per-GPU memory of one model under one regime: phases, their peak as a ``Formula``, and values.

    ``formula`` is the peak (resident terms + ``peak``, the maximum of the phases' extras): an
    ordinary Formula (differentiate, solve, render it); ``phases`` maps each phase name to its
    own Formula (resident + that phase's terms); ``values`` maps every input symbol's name to its
    number; ``host`` is host memory per GPU process (offload only); ``saved`` is the
    saved-for-backward model behind ``activations="pytorch"`` (else None).
    """

    model: ModelShape
    regime: Regime
    formula: Formula
    values: dict[str, object]
    host: Formula | None = None
    notes: list[str] = field(default_factory=list)
    host_values: dict[str, object] = field(default_factory=dict)
    saved: pytorch.SavedActivations | None = None
    layout: Layout | None = None
    _evaluation: Evaluation | None = field(default=None, repr=False)
    _parts: dict[str, int] | None = field(default=None, repr=False)

    def __repr__(self) -> str:  # display methods: symbolic.text.display renders
        return display.short("Plan", f"{self.model.name} {self.regime.mode}", f"{format_bytes(self.total)} per GPU",
                             f"peak in {self.peak_phase}", f"{len(self.terms())} terms")

    def _repr_html_(self) -> str:
        return display.html(display.plan_table(self))

    def to_frame(self):  # noqa: ANN201 (pandas is optional)
        """Each term in whole bytes as a pandas DataFrame (needs pandas)."""
        return display.frame(display.plan_table(self))

    def evaluate(self) -> Evaluation:
        """Exact values of the peak formula's terms (resident + ``peak``) and its total (cached)."""
        if self._evaluation is None:
            self._evaluation = self.formula.evaluate(self.values)
        return self._evaluation

    @property
    def total(self) -> int:
        """Per-GPU bytes at the peak: the formula's terms, each rounded up to a whole byte.

        A sharded term (N/n_d) can be fractional; rounding each up errs by at most one byte a
        term on the safe side. Equals the largest of ``phase_bytes()``.
        """
        return sum(_ceil(value) for _, value in self.evaluate().terms)

    def terms(self) -> dict[str, int]:
        """Every component term in whole bytes (rounded up): the resident ones, then each phase's."""
        if self._parts is None:
            self._parts = {term.key: _ceil(value) for term, value in self.evaluate_terms().terms}
        return dict(self._parts)

    def evaluate_terms(self) -> Evaluation:
        """Exact values of every component term (resident and each phase's); its total is their sum, not the peak."""
        parts = self._components()
        return parts.evaluate(parts.restrict(self.values))

    def _components(self) -> Formula:
        terms = self.layout.components() if self.layout is not None else list(self.formula.terms)
        return Formula(self.formula.key + ".terms", self.formula.title, terms, source=self.formula.source,
                       definitions=self.formula.definitions)

    @property
    def phases(self) -> dict[str, Formula]:
        """Each phase as a named Formula: the resident terms plus what that phase adds."""
        if self.layout is None:
            return {}
        f = self.formula
        return {name: Formula(f"{f.key}.{name}", f"{f.title}: {name}", (*self.layout.resident, *extra),
                              source=f.source, name=f"M_{name}", definitions=f.definitions)
                for name, extra in self.layout.phases.items()}

    def phase_bytes(self) -> dict[str, int]:
        """Per-GPU bytes of each phase (resident terms rounded up, plus the phase's extras rounded up)."""
        if self.layout is None:
            return {}
        values = self.evaluate()
        resident = sum(_ceil(v) for t, v in values.terms if t.key != PEAK_KEY)
        point = {**values.values, **values.derived}
        from ..math.algebra import at_point

        return {name: resident + _ceil(at_point(self.layout.extra(name), point)) for name in self.layout.phases}

    def phase_terms(self) -> dict[str, list[str]]:
        """The keys of the terms each phase adds to the resident ones."""
        return {} if self.layout is None else {n: [t.key for t in ts] for n, ts in self.layout.phases.items()}

    @property
    def resident_keys(self) -> list[str]:
        """The keys of the terms alive through every phase."""
        return [t.key for t in self.formula.terms if t.key != PEAK_KEY]

    @property
    def peak_phase(self) -> str | None:
        """The phase that sets the peak (the first of equal ones)."""
        found = self.phase_bytes()
        return lead(found)[0] if found else None

    @property
    def peak_lead(self) -> int:
        """Bytes by which the peak phase exceeds the runner-up."""
        found = self.phase_bytes()
        return lead(found)[1] if found else 0

    def host_terms(self) -> dict[str, int]:
        """Host-memory terms (offload) in whole bytes; empty without offload."""
        if self.host is None:
            return {}
        return {term.key: _ceil(value) for term, value in self.host.evaluate(self.host_values).terms}

    @property
    def host_total(self) -> int:
        return sum(self.host_terms().values())

    def fit(self, gpu: GPU | Budget) -> Fit:
        """Does the plan's peak fit ``gpu`` (a GPU, or a Budget of one)? Headroom = usable bytes − peak."""
        total, budget = self.total, as_budget(gpu)
        return Fit(budget.gpu, total, total <= budget.bytes, budget.bytes - total, budget)

    def solve(self, symbol: str, budget: object) -> Solution:
        """Largest whole value of ``symbol`` (e.g. "B", "S") with the peak within ``budget`` bytes."""
        given = {k: v for k, v in self.values.items() if k != symbol}
        return self.formula.solve(symbol, budget, given)

    def with_terms(self, terms: Iterable[CustomTerm], values: Mapping[str, object] | None = None) -> Plan:
        """This plan with user-defined terms added to every phase (resident terms).

        ``values`` gives numbers for the symbols the terms introduce; a value for a symbol the
        plan already sets, or one no term uses, is an error (change the plan's options instead).
        """
        terms = list(terms)
        resident = [t for t in self.formula.terms if t.key != PEAK_KEY]
        peak = [t for t in self.formula.terms if t.key == PEAK_KEY]
        taken = set(self.terms())
        clash = [c.name for c in terms if c.name in taken]
        if clash:
            from ..math.userterms import CustomTermError

            raise CustomTermError(f"term {clash[0]!r} already exists in {self.formula.key}")
        added = with_terms(Formula(self.formula.key, self.formula.title, resident, source=self.formula.source),
                           terms).terms[len(resident):]
        formula = Formula(self.formula.key, self.formula.title, (*resident, *added, *peak),
                          source=self.formula.source, where=self.formula.where, note=self.formula.note,
                          name=self.formula.name, definitions=self.formula.definitions, example=self.formula.example)
        extra = dict(values or {})
        missing = {s.name for s in formula.inputs} - set(self.values) - set(extra) - {
            s.name for s in formula.definitions}
        if missing:
            raise PlanOptionError(f"values missing for {', '.join(sorted(missing))} (give them with --set NAME=VALUE)")
        inputs = {s.name for s in formula.inputs}
        for name in extra:
            if name in self.values:
                raise PlanOptionError(f"{name} is set by the plan's options ({name}={self.values[name]}); "
                                 "--set is for symbols that custom terms introduce")
            if name not in inputs:
                raise UnknownSymbolError(name, sorted(inputs - set(self.values)), "the custom terms")
        layout = self.layout.with_resident(added) if self.layout is not None else None
        return Plan(self.model, self.regime, formula, {**self.values, **extra}, self.host, list(self.notes),
                    dict(self.host_values), self.saved, layout)

    @property
    def cache_bytes(self) -> int:
        """Everything the KV cache holds on this GPU: the sum of the cache terms of every attention kind."""
        return sum(v for k, v in self.terms().items() if k in infer.CACHE_KEYS)

    @property
    def activation_bytes(self) -> int | None:
        """With ``activations="pytorch"``: the bytes saved for backward (activations + inputs + logits)."""
        return None if self.saved is None else self.saved.total(self.values)

    @property
    def runtime_bytes(self) -> int:
        """The CUDA runtime's own share of the total (``library.runtime`` terms; 0 without them)."""
        keys = set(runtime_keys())
        return sum(v for k, v in self.terms().items() if k in keys)

    def options(self) -> dict[str, object]:
        """The regime's listed options, with the loss a network brings itself in place of the planner's default."""
        listed = dict(self.regime.options())
        own = self.model.own_loss
        if own is not None and "loss" in listed:
            listed["loss"] = own
        return listed

    def defaulted(self) -> list[str]:
        """The options left at their defaults (a network's own loss is not one)."""
        own = self.model.own_loss
        return [n for n in self.regime.defaulted if not (n == "loss" and own is not None)]

    def as_dict(self, gpu: GPU | Budget | None = None, formulas: bool = False) -> dict[str, object]:
        """Plain data for JSON and reports: the peak, its phases, terms, choices, values; fit with ``gpu``."""
        evaluation = self.evaluate()
        found = self.phase_bytes()
        data: dict[str, object] = {
            "model": self.model.name, "mode": self.regime.mode, "options": self.options(),
            "defaults": self.defaulted(), "gpus_in_job": self.regime.gpus,
            "total_bytes": self.total, "total_human": format_bytes(self.total),
            "phases": found, "peak_phase": self.peak_phase, "peak_lead_bytes": self.peak_lead,
            "phase_terms": self.phase_terms(), "resident_terms": self.resident_keys,
            "terms": self.terms(),
            "titles": {t.key: t.title for t in self._components().terms},
            "runtime_bytes": self.runtime_bytes,
            "values": {k: to_plain(sympy.Rational(v)) if not isinstance(v, str) else v for k, v in self.values.items()},
            "derived": {s.name: to_plain(v) for s, v in evaluation.derived.items()},
            "notes": list(self.notes),
        }
        if not self.regime.train and self.regime.sequence:
            data["prefill_assumed"] = infer.prefill_text(self.regime.prefill_chunk or None)
            data["cache_bytes"] = self.cache_bytes
            data["cache_terms"] = {k: v for k, v in self.terms().items() if k in infer.CACHE_KEYS}
        if self.saved is not None:
            data["activation_bytes"] = self.activation_bytes
            data["activations_pytorch"] = self.saved.as_dict(self.values)
        if self.host is not None:
            data["host_bytes"] = self.host_total
            data["host_terms"] = self.host_terms()
        if formulas:
            data["formula"] = {
                "text": str(self.formula), "latex": self.formula.latex(equation=True),
                "terms": {t.key: printing.text(t.expr) for t in self._components().terms},
                "phases": {name: str(f) for name, f in self.phases.items()},
                "peak": printing.text(self.formula.term(PEAK_KEY).expr) if self.layout is not None else None,
                "definitions": {s.name: str(d) for s, d in _all_definitions(self.formula).items()},
            }
        if gpu is not None:
            data.update(self.fit(gpu).as_dict())
        return data


def _ceil(value: sympy.Expr) -> int:
    number = Fraction(int(value.p), int(value.q)) if value.is_Rational else Fraction(str(sympy.N(value, 30)))
    return math.ceil(number)


def _all_definitions(formula: Formula) -> dict[sympy.Symbol, Formula]:
    out: dict[sympy.Symbol, Formula] = {}
    for symbol, definition in formula.definitions.items():
        out[symbol] = definition
        out.update(_all_definitions(definition))
    return out


# --- building ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stage:
    """One pipeline rank as torchtitan splits the layers and PyTorch's schedule runs them (``library.pipeline``)."""

    schedule: str
    rank: int
    layers: tuple[int, ...]  # transformer layers per stage, all stages
    held: tuple[int, ...]  # the stages this rank holds
    peak: int  # the most layer-micro-batches of activations held at once
    in_flight: int  # the most micro-batches in flight on this rank's first stage (its inputs)
    buffers: pipe.Buffers  # the stage-boundary tensors beside the activations at that peak

    @property
    def own_layers(self) -> int:
        return sum(self.layers[i] for i in self.held)

    @property
    def embeddings(self) -> bool:
        return 0 in self.held

    @property
    def head(self) -> bool:
        return len(self.layers) - 1 in self.held


def pipeline_stage(model: ModelShape, r: Regime, rank: int) -> Stage:
    """Pipeline rank ``rank``: its layers and its schedule's peak in flight (torchtitan's split, PyTorch's order)."""
    schedule, pp, m, layers, v = _schedule_args(model, r)
    held = pipe.rank_stages(rank, pp, v, pipe.style(schedule))
    peak = pipe.peak_layers(schedule, rank, pp, m, layers, v)
    in_flight = pipe.peak_microbatches(schedule, rank, pp, m, min(held), v)
    return Stage(schedule, rank, layers, held, peak, in_flight, pipe.stage_buffers(schedule, rank, pp, m, layers, v))


def framework_pipeline(model: ModelShape, r: Regime) -> bool:
    """Whether the plan splits stages as torchtitan does: ``--pp-schedule`` given, or pp·v not dividing the layers."""
    return (r.train and r.pp > 1 and r.sequence and r.activations == "korthikanti"
            and bool(r.pp_schedule or model.layers % (r.pp * r.interleave)))


def build(model: ModelShape, regime: Regime) -> Plan:
    """The plan of ``model`` under an already resolved ``regime`` (the busiest pipeline rank when split unevenly)."""
    if not framework_pipeline(model, regime):
        return _build(model, regime)
    ranks = pipe.candidate_ranks(*_schedule_args(model, regime))
    plans = rank_plans(model, regime)
    index = max(range(len(plans)), key=lambda k: plans[k].total)  # the first of equals: the first rank, the last
    busiest, rank = plans[index], ranks[index]
    stage = pipeline_stage(model, regime, rank)
    which = ("the first rank (the embeddings)" if rank == 0 else "the last rank (the norm, head and loss)"
             if rank == regime.pp - 1 else f"rank {rank} (no embeddings, no head)")
    others = ", ".join(f"rank {r} {format_bytes(plan.total)}" for r, plan in zip(ranks, plans, strict=True)
                       if plan is not busiest)
    busiest.notes.append(f"pipeline: {stage.schedule} (PyTorch's schedule), stages of {_layers_text(stage.layers)} "
                         f"layers (torchtitan's split); this plan is {which}, {stage.own_layers} layers, "
                         f"{stage.peak} layer-micro-batches of activations at once; the other ranks that can hold "
                         f"the most: {others}")
    return busiest


def _schedule_args(model: ModelShape, r: Regime) -> tuple[str, int, int, tuple[int, ...], int]:
    """(schedule, p, m, layers per stage, stages per rank): what ``library.pipeline``'s counts take."""
    schedule = r.pp_schedule or ("interleaved" if r.interleave > 1 else "1f1b")
    return schedule, r.pp, r.microbatches, pipe.stage_layers(model.layers, r.pp * r.interleave), r.interleave


def rank_plans(model: ModelShape, regime: Regime) -> list[Plan]:
    """The plans of the ranks that can hold the most (``pipeline.candidate_ranks``): the first, the last, then
    the middle ranks no other middle rank covers; the busiest of them is the job's peak."""
    ranks = pipe.candidate_ranks(*_schedule_args(model, regime))
    return [_build(model, regime, pipeline_stage(model, regime, rank)) for rank in ranks]


def end_ranks(model: ModelShape, regime: Regime) -> tuple[Plan, Plan]:
    """The first and the last pipeline rank's plans (torchtitan's split)."""
    first, last = rank_plans(model, regime)[:2]
    return first, last


def train_layout(model: ModelShape, regime: Regime, stage: Stage | None = None
                 ) -> tuple[Layout, dict[sympy.Symbol, Formula], dict[str, object]]:
    """A training plan's resident terms and phases before the runtime's terms, their definitions and values, as
    ``_build`` makes them for ``regime`` (not activations pytorch: its measured step is built from what it saved).

    Every term is a byte count and the plan's total is these resident terms, the largest phase and the runtime's
    (byte counts too), so the resident terms and any phase's sum to a floor under the total: the layout search
    skips a structure whose floor is over the budget at every layout without building its plan.
    """
    values: dict[str, object] = {**model.numbers, "B": regime.batch, "S": regime.seq}
    if regime.ep > 1:
        values["e_p"] = regime.ep
    tp_s: sympy.Expr | int = t if regime.tp > 1 else 1
    pp_s: sympy.Expr | int = p if regime.pp > 1 else 1
    layout, definitions, _ = _train_terms(model, regime, tp_s, pp_s, values, [], None, stage)
    return layout, definitions, values


def _layers_text(layers: tuple[int, ...]) -> str:
    return "/".join(str(n) for n in layers)


def _build(model: ModelShape, regime: Regime, stage: Stage | None = None) -> Plan:
    """The plan of one GPU: the first pipeline rank, or ``stage``'s rank."""
    values: dict[str, object] = {**model.numbers, "B": regime.batch, "S": regime.seq}
    tp_s: sympy.Expr | int = t if regime.tp > 1 else 1
    pp_s: sympy.Expr | int = p if regime.pp > 1 else 1
    if regime.tp > 1:
        values["t"] = regime.tp
    if regime.pp > 1:
        values["p"] = regime.pp
    if regime.ep > 1:
        values["e_p"] = regime.ep
    topic = "activations" if regime.train else "serving"
    notes = list(regime.notes) + ([model.cannot_say[topic]] if topic in model.cannot_say else [])  # its one line
    saved = pytorch.saved(model, regime) if regime.train and regime.activations == "pytorch" else None
    if saved is not None:
        notes += pytorch.notes(regime, saved)
    if regime.train:
        layout, definitions, host = _train_terms(model, regime, tp_s, pp_s, values, notes, saved, stage)
        title = f"Peak training memory per GPU of {model.name}"
    else:
        layout, definitions, host = _infer_terms(model, regime, tp_s, pp_s, values, notes)
        title = f"Peak inference memory per GPU of {model.name}"
    layout = _with_runtime(layout, regime, notes)
    formula = Formula(f"plan.{model.name}.{regime.mode}", title, (*layout.resident, layout.peak_term()),
                      source="project", name="M_gpu", definitions=definitions, note="; ".join(notes))
    host_formula = None
    if host:
        host_formula = Formula(f"plan.{model.name}.host", f"Host memory per GPU process of {model.name} (offload)",
                               host, source="ren2021", name="M_host", definitions=definitions)
    host_values = host_formula.restrict(values) if host_formula is not None else {}
    plan = Plan(model, regime, formula, formula.restrict(values), host_formula, notes, host_values, saved, layout)
    formula.example = {k: v for k, v in plan.values.items() if isinstance(v, (int, str))}
    return plan


def runtime_keys() -> tuple[str, ...]:
    """The keys of the runtime's terms (``library.runtime``, contract R)."""
    return RUNTIME_KEYS


def _with_runtime(layout: Layout, r: Regime, notes: list[str]) -> Layout:
    """The CUDA runtime's own memory as resident terms (every CUDA plan unless ``runtime`` is off)."""
    on_cpu = r.train and r.activations == "pytorch" and r.device == "cpu"
    if on_cpu:
        notes.append("runtime: none counted (device cpu: no CUDA context, workspaces or caching allocator)")
        return layout
    if not r.runtime:
        notes.append("runtime: left out (--no-runtime); a CUDA process also holds its context, cuBLAS workspaces "
                     "and allocator slack")
        return layout
    tensors = sympy.Add(*(t.expr for t in layout.resident), layout.peak_term().expr)
    terms = runtime.terms(gpus_in_job=r.gpus, dp=r.dp, tp=r.tp, pp=r.pp, ep=r.ep, tensors=tensors,
                          mode="train" if r.train else "serve", loading=r.cuda_module_loading)
    if layout.pools:  # FSDP2's side streams (allocated there, reserved beside the compute stream's peak)
        terms.append(fsdp.stream_pools_term({p: layout.extra(p) for p in layout.phases}, dict(layout.pools)))
    notes.append(runtime.RUNTIME_NOTE)
    return layout.with_resident(terms)


RUNTIME_KEYS = ("cuda_context", "cublas_workspace", "allocator", "nccl", "fsdp_stream_pools")


def _params(model: ModelShape, regime: Regime, tp_s: sympy.Expr | int, pp_s: sympy.Expr | int,
            stage: Stage | None = None) -> tuple[sympy.Expr, dict[sympy.Symbol, Formula]]:
    """The parameter count on this GPU and the definitions behind it (N, and N_gpu when split)."""
    if stage is not None:
        shard = pipe.stage_params(model.first_stage, model.head, stage.own_layers, stage.embeddings, stage.head,
                                  N, tp_s, {N: model.params})
        return N_gpu, {N_gpu: shard}
    if regime.tp == 1 and regime.pp == 1 and regime.ep == 1:
        return N, {N: model.params}
    if regime.ep == 1:
        shard = par.params_per_gpu(model.first_stage, model.head, regime.pp, N, tp_s, pp_s, {N: model.params})
        return N_gpu, {N_gpu: shard}
    base = par.params_per_gpu(model.first_stage, model.head, regime.pp, N - model.experts, tp_s, pp_s,
                              {N: model.params})
    shard = Formula(base.key, base.title, (*base.terms, par.experts_term(model.experts, pp_s)), source=base.source,
                    name="N_gpu", definitions={N: model.params},
                    note=base.note + " Routed experts: ÷ e_p·p (expert parallelism), replicated over the other ranks.")
    return N_gpu, {N_gpu: shard}


GRADIENT_KEYS = ("gradients", "fp32_gradients")  # model-state terms that exist from backward to the step


def _train_terms(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, pp_s: sympy.Expr | int,
                 values: dict[str, object], notes: list[str],
                 saved: pytorch.SavedActivations | None = None,
                 stage: Stage | None = None) -> tuple[Layout, dict, list[Term]]:
    params, definitions = _params(model, r, tp_s, pp_s, stage)
    gathered: list[Term] = []
    if r.zero == 3 and r.dp > 1:  # with one data-parallel rank nothing is partitioned or gathered
        name, size = model.largest_matrix()
        regime_prec = prec.get(r.precision)
        gathered.append(par.gathered_layer_term(size / tp_s, regime_prec.weight_bytes, regime_prec.grad_bytes(r.grads),
                                                name))
    if saved is not None:  # activations="pytorch": one device, no recompute (regime.resolve checks)
        step = pytorch.layout(model, r, saved, params, values, notes)
        if gathered:  # ZeRO-3 gathers one module at a time during the forward and backward passes
            step = Layout(step.resident, {k: ((*gathered, *v) if k != "optimizer" else v) for k, v in step.phases.items()})
        host: list[Term] = []
        if r.offload:  # ZeRO-Offload: optimizer states on the host, and the optimizer step runs there
            resident, host = par.split_offload(list(step.resident))
            host.append(par.host_buffer_term(host))
            step = Layout(tuple(resident), {k: tuple(t for t in v if t.key != "optimizer_temporaries")
                                            for k, v in step.phases.items()})
        return step, definitions, host
    states, host = _states(model, r, tp_s, pp_s, params, values, notes)
    resident = [s for s in states if not _is_gradient(s.key)]
    grads = [s for s in states if _is_gradient(s.key)]
    optimizer = [*grads, *_optimizer_temporaries(model, r, tp_s, params, grads)]
    if r.activations == "article-b":
        article = registry.get("llm.activations")
        definitions = {**definitions, **article.definitions}
        kept = [article.term("layers").replace(key="activations"), article.term("logits")]
        transient = registry.get("llm.peak").term("backward_extra").replace(key="logits_grad")
        return Layout(tuple(resident), {"forward": (*gathered, *kept), "backward": (*gathered, *kept, transient),
                                        "optimizer": tuple(optimizer)}), definitions, host
    act_bytes = prec.get(r.precision).activation_bytes
    kept, rebuilt = _korthikanti_terms(model, r, tp_s, pp_s, values, notes, act_bytes, stage)
    if r.offload_activations:
        kept, host = _offloaded(model, kept, host, notes)
    forward, backward = list(kept), list(kept)
    during_loss: list[Term] = []
    loss_grads: list[Term] = []
    fp8_over: list[Term] = []  # the float8 casts are counted beyond the loss's own moment (``_fp8_terms``)
    if r.pp == 1 or (stage is not None and stage.head):
        during_loss, loss_grads = _loss_transients(r.logits, act_bytes, tp_s, r.logit_chunks,
                                                   r.compile and r.compile_loss, _head_trained(model, r))
        if r.logits_upcast == "model":  # torchtune: the model returns fp32 logits (regime: logits hf, tp 1)
            compiled = r.compile and r.compile_loss
            during_loss = [upcast_logits.forward_term(act_bytes, compiled)]
            loss_grads = [upcast_logits.backward_term(act_bytes, compiled, _head_trained(model, r))]
        if r.compile and r.compile_loss and r.logits == "chunked":  # its moments in autograd's order
            loss_grads, rebuilt = [_chunked_backward(model, r, kept, rebuilt, act_bytes, tp_s)], []
        fp8_over = loss_grads
        if rebuilt and loss_grads and _rebuilt_after_loss_measured(model, r):  # the last layer's, after them
            loss_grads, rebuilt = [_rebuilt_after_loss(kept, loss_grads, rebuilt)], []
        forward += during_loss
        backward += loss_grads
    if r.pp == 1 and r.microbatches > 1:  # gradient accumulation: the earlier micro-batches' gradients stay
        forward += grads
        backward += grads
    if r.pp > 1 and stage is None and not r.fsdp and not r.optimizer_in_backward:  # from the first backward on
        during = _stage_gradients(model, r, tp_s, act_bytes, None, kept[0], grads)
        forward.append(during[0])
        backward.append(during[1])
    if r.optimizer_in_backward:
        optimizer = _step_in_backward(model, r, tp_s)
    if (r.fsdp or stage is not None) and N not in definitions:  # FSDP2's block, a stage's share: from N
        definitions = {**definitions, N: model.params}
    fsdp_args = (model, r, tp_s, pp_s, params, stage, kept, during_loss, (loss_grads, rebuilt))
    for extra in (_fsdp_phase_terms(*fsdp_args), _fp8_terms(model, r, tp_s, during_loss, fp8_over)):
        forward += extra[0]
        backward += extra[1]
    if stage is not None:  # torch.distributed.pipelining's receive buffers, stage outputs and kept logits
        buffers = _stage_buffers(model, r, tp_s, act_bytes, stage)
        forward.append(buffers[0])
        backward.append(buffers[1])
        if not r.fsdp and not r.optimizer_in_backward:  # FSDP2: fsdp_accumulated_grads, every moment
            during = _stage_gradients(model, r, tp_s, act_bytes, stage, kept[0], grads)
            forward.append(during[0])
            backward.append(during[1])
        optimizer = [*optimizer, *(_per_rank([buffers[2]]) if r.cp > 1 else [buffers[2]])]
    if r.cp > 1:  # every token-sized term at the rank's shard, then the ring's own buffers
        forward, backward, rebuilt = _per_rank(forward), _per_rank(backward), _per_rank(rebuilt)
        ring = _ring_terms(model, r, tp_s, values)
        forward += ring[0]
        backward += ring[1]
    phases = {"forward": (*gathered, *forward), "backward": (*gathered, *backward, *rebuilt),
              "optimizer": tuple(optimizer)}
    compute = _fsdp_phase_terms(*fsdp_args, side_streams=False)[1] if r.fsdp else []
    pools = _fsdp_pools(model, r, tp_s, phases, _per_rank(compute) if r.cp > 1 else compute, stage) if r.fsdp else {}
    return Layout(tuple(resident), phases, pools), definitions, host


def _stage_buffers(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, act_bytes: int,
                   stage: Stage) -> tuple[Term, Term, Term]:
    """A pipeline rank's stage-boundary tensors (``pipeline.buffer_terms``): each a micro-batch's hidden states
    between two stages (sequence-parallel: B·S·H/t, the blocks' local output), and the last stage's logits (the
    vocabulary shard under tensor parallelism, loss_parallel's input)."""
    return pipe.buffer_terms(stage.buffers, *_boundary_bytes(r, tp_s, act_bytes), r.microbatches)


def _boundary_bytes(r: Regime, tp_s: sympy.Expr | int, act_bytes: int) -> tuple[sympy.Expr, sympy.Expr]:
    """(one micro-batch's hidden states between two stages, the last stage's logits of one micro-batch)."""
    sp = r.sequence_parallel and r.tp > 1
    return act_bytes * B * S * H / (tp_s if sp else 1), act_bytes * B * S * V / tp_s


def _stage_gradients(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, act_bytes: int, stage: Stage | None,
                     activations: Term, grads: list[Term]) -> tuple[Term, Term]:
    """A pipeline rank's gradients from each stage's first backward (``pipeline.gradient_terms``): the optimizer's
    gradient terms, at the share of the stages that have run one (``pipeline.stage_params``: their layers, the
    embeddings on stage 0, the head on the last). Without a ``stage`` (Megatron's count: the first of p equal stages,
    no stage buffers counted) the moments are 1F1B's first rank's."""
    whole = sympy.Add(*(g.expr for g in grads))
    if stage is None:
        peak = pipe.stage_buffers("1f1b", 0, r.pp, r.microbatches, (1,) * r.pp)
        candidates = pipe.gradient_moments("1f1b", 0, r.pp, r.microbatches, (1,) * r.pp)
        return pipe.gradient_terms(peak, candidates, activations.expr / peak.held, sympy.Integer(0),
                                   sympy.Integer(0), lambda stages: whole if stages else sympy.Integer(0))
    schedule, pp, m, layers, v = _schedule_args(model, r)

    def of(stages: tuple[int, ...]) -> sympy.Expr:
        if not stages:
            return sympy.Integer(0)
        if set(stages) == set(stage.held):
            return whole
        share = pipe.stage_params(model.first_stage, model.head, sum(layers[s] for s in stages), 0 in stages,
                                  len(layers) - 1 in stages, N, tp_s)
        return whole.xreplace({N_gpu: sympy.Add(*(t.expr for t in share.terms))})

    per = activations.expr / stage.peak
    candidates = pipe.gradient_moments(schedule, stage.rank, pp, m, layers, v)
    return pipe.gradient_terms(stage.buffers, candidates, per, *_boundary_bytes(r, tp_s, act_bytes), of)


def _chunked_backward(model: ModelShape, r: Regime, kept: list[Term], rebuilt: list[Term], act_bytes: int,
                      tp_s: sympy.Expr | int) -> Term:
    """The compiled chunked loss's backward over what is saved: its loss, head and recompute moments' largest."""
    saved_logits = sympy.Add(*(t.expr for t in kept if t.key == "logits"))
    return chunked_backward.backward_term(act_bytes, r.logit_chunks, saved_logits,
                                          sympy.Add(*(t.expr for t in rebuilt)), _head_trained(model, r), tp_s)


def _compiled_block_rebuilt(model: ModelShape, r: Regime) -> bool:
    """Full recompute of a compiled Korthikanti gated block in torchtitan's order (checkpoint, then compile): its
    recompute buffer is the compiled block's measured backward (``compiled_recompute``). torchtune compiles each
    layer first, whose checkpoint rebuilds the compiled layer's saved set."""
    return r.recompute == "full" and r.compile and model.gated and r.layer_impl == "korthikanti"


def _rebuilt_after_loss_measured(model: ModelShape, r: Regime) -> bool:
    """The checkpointed layer's rebuild measured apart from the loss's moment: the two never coincide. The compiled
    block, its float8 casts inside it (``tests/test_float8_compile.py``); the eager gated layer under full or per-op
    checkpointing (``eager_recompute``, ``tests/test_eager_rebuild.py``; float8: the bf16 layer's buffer, the eager
    casts counted beyond the loss's moment as without it, ``_fp8_terms``); torchtune's layers, rebuilt after the
    head's backward when the model returns fp32 logits (``tests/test_torchtune_layer.py``; never float8,
    ``regime``). GeLU and MoE layers keep their saved set as the buffer, beside the loss's moment (a bound where
    the loss leads)."""
    casts_apart = r.precision == "fp8" and r.recompute_every != 1  # ``_fp8_terms``: a term of their own
    eager = (r.recompute in ("full", "ops") and not r.compile and r.layer_impl == "korthikanti" and model.gated
             and not model.moe)
    torchtune = r.layer_impl != "korthikanti" and r.logits_upcast == "model"
    return (_compiled_block_rebuilt(model, r) and not casts_apart) or eager or torchtune


def _rebuilt_after_loss(kept: list[Term], loss: list[Term], rebuilt: list[Term]) -> Term:
    """The backward over what is saved, full recompute: the larger of the loss's moment (its backward transients)
    and the last layer's rebuild, once the loss and the head have freed what they saved (the ``logits`` term: the
    head's input and the logits, torchtune's final norm's). Measured on the CPU: torchtune's layer,
    ``tests/test_torchtune_layer.py``; the compiled checkpointed block's steps where the loss leads and where the
    rebuild does, ``tests/test_float8_compile.py``."""
    saved = sympy.Add(*(t.expr for t in kept if t.key == "logits"))
    again = sympy.Add(*(t.expr for t in rebuilt))
    moment = sympy.Add(*(t.expr for t in loss))
    first = loss[0]
    title = " + ".join(t.title for t in loss)
    return first.replace(title=f"{title}, or the last layer rebuilt once the loss and head freed theirs",
                         expr=maximum(moment, shifted(again, -saved)))


def _head_trained(model: ModelShape, r: Regime) -> bool:
    """Whether the LM head gets a weight gradient (not under LoRA, nor when it is the frozen tied embedding)."""
    return not (r.lora_rank or (r.freeze_embeddings and model.head == 0))


def _offloaded(model: ModelShape, kept: list[Term], host: list[Term],
               notes: list[str]) -> tuple[list[Term], list[Term]]:
    """Activation offloading (torchtune): the checkpointed inputs to the host, the forward stash on the GPU."""
    activations = kept[0]
    per_layer = activations.expr / L
    notes.append(f"offload_activations: the {model.layers} checkpointed layer inputs are copied to pinned host memory "
                 f"(M_host); {offload.stashed_layers(model.layers)} stay on the GPU in torchtune's forward stash "
                 "(it ends holding the final norm's saved tensors); the output head's and the loss's tensors are not "
                 "offloaded")
    return [offload.stash_term(per_layer, model.layers), *kept[1:]], [*host, offload.offloaded_term(activations.expr)]


def _step_in_backward(model: ModelShape, r: Regime, tp_s: sympy.Expr | int) -> list[Term]:
    """The optimizer in backward: the largest parameter's gradient and its step's temporaries (no phase holds all)."""
    name, size = model.largest_matrix()
    regime_prec = prec.get(r.precision)
    temporaries = regime_prec.state_bytes if r.optimizer == "adamw" else 0
    terms = pypeak.step_in_backward_terms(regime_prec.grad_bytes(r.grads), temporaries, size / tp_s)
    if r.optimizer != "adam-8bit" or r.optimizer_impl != "torchao":
        return terms
    return [*terms[:1], adam8.temporaries_term(r.optimizer_impl, size / tp_s)]


def _is_gradient(key: str) -> bool:
    return key in GRADIENT_KEYS or "grad" in key.split(".")[-1]


def _states(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, pp_s: sympy.Expr | int, params: sympy.Expr,
            values: dict[str, object], notes: list[str]) -> tuple[list[Term], list[Term]]:
    """(device model-state terms, host terms): precision × optimizer (or fine-tuning), ZeRO, offload."""
    if finetune.active(r):
        states = list(finetune.state_terms(model, r, params))
    else:
        factored = model.factored_entries() / (tp_s * pp_s) if r.optimizer == "adafactor" else None
        if factored is not None and (r.tp > 1 or r.pp > 1):
            notes.append("Adafactor's row and column accumulators are divided by t·p like the parameters (an "
                         "approximation: a column-split matrix keeps all its rows)")
        states = prec.state_terms(r.precision, r.optimizer, r.grads, params=params, factored_entries=factored)
    if r.fsdp:
        values["n_s"] = r.dp // r.hsdp * r.cp  # torchtitan's dp_shard_cp mesh: FSDP shards over dp × cp
        return _fsdp_states(r, states, params), []
    if r.zero:
        values["n_d"] = r.dp
    states = [s for s in _shard(states, r.zero)]
    host: list[Term] = []
    if r.offload:
        states, host = par.split_offload(states)
        host.append(par.host_buffer_term(host))
    return states, host


def _fsdp_states(r: Regime, states: list[Term], params: sympy.Expr) -> list[Term]:
    """FSDP2's model states: sharded parameters (the optimizer's copy), sharded gradients, sharded states."""
    regime_prec = prec.get(r.precision)
    kept = regime_prec.master or regime_prec.dtype  # the model's own dtype: fp32 under mixed precision
    nbytes = int(formats.nbytes(kept))
    optimizer = [fsdp.sharded_states_term(s) for s in states if s.key == "optimizer_states"]
    return [fsdp.sharded_params_term(params, nbytes, kept), fsdp.sharded_grads_term(params, nbytes, kept), *optimizer]


def _fsdp_phase_terms(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, pp_s: sympy.Expr | int,
                      params: sympy.Expr, stage: Stage | None, kept: list[Term], during_loss: list[Term],
                      after: tuple[list[Term], list[Term]] = ([], []),
                      side_streams: bool = True) -> tuple[list[Term], list[Term]]:
    """(forward, backward) terms of FSDP2: the unsharded blocks and root, the backward's buffers (``after``: the
    loss's backward terms and the recompute buffer, which the backward's FSDP2 moments are weighed against;
    ``side_streams`` False: the backward's moments without the side streams' tensors, for ``_fsdp_pools``)."""
    if not r.fsdp:
        return [], []
    if r.pp > 1:
        return _fsdp_stage_terms(model, r, tp_s, pp_s, params, stage)
    param_bytes = int(formats.nbytes(r.fsdp_param_dtype))
    layer = (N - model.first_stage - model.head) / (L * tp_s)
    layer_bytes, what = _fsdp_block_bytes(model, r, tp_s, layer)
    blocks = fsdp.unsharded_layers_term(1 + fsdp.PREFETCH if r.reshard_after_forward else L, layer_bytes,
                                        r.reshard_after_forward, what)
    root = fsdp.root_term((model.first_stage + model.head) / tp_s, param_bytes, r.fsdp_param_dtype)
    head_grads = (model.head if model.head != 0 else model.first_stage) / tp_s
    reduce_bytes = int(formats.nbytes(r.fsdp_reduce_dtype))
    freed = kept[0].expr / L if kept else sympy.Integer(0)  # a block's saved activations (offloaded: its GPU share)
    outputs = fsdp.all_gather_outputs_term(r.reshard_after_forward, layer_bytes, what, freed,
                                           sympy.Add(*(t.expr for t in during_loss)))
    if r.optimizer_in_backward:  # stepped in backward: the buffers whole
        buffers = fsdp.backward_buffers_term(layer, head_grads, param_bytes, reduce_bytes, r.fsdp_reduce_dtype)
        return [blocks, root, outputs], [blocks, root, buffers]
    grad_bytes = int(formats.nbytes(prec.get(r.precision).master or prec.get(r.precision).dtype))
    sharded = grad_bytes * layer / n_s
    # a later micro-batch (fsdp.ACCUMULATION_NOTE): every sharded gradient is the phase's ``gradients`` term, and each
    # group's new reduce-scatter output is held beside its input, then added into them
    later = fsdp.output_bytes(reduce_bytes, grad_bytes) if r.microbatches > 1 else None
    growth = sharded if side_streams and later is None else 0
    output = later * layer / n_s if later is not None and side_streams else None
    moments = fsdp.block_moments(L, (param_bytes * layer, growth), freed, layer_bytes, reduce_bytes * layer,
                                 r.reshard_after_forward, prefetch_held=side_streams, output=output)
    loss_grads, rebuilt = after
    loss = sympy.Add(*(t.expr for t in (*kept, *loss_grads) if t.key != "activations" and t.key != "inputs"))
    held_blocks = fsdp.last_block_term(layer_bytes, what) if r.reshard_after_forward else blocks
    held = sympy.Add(*(t.expr for t in (*kept, *loss_grads, *rebuilt, root, held_blocks)))
    root_end = fsdp.root_end_moment(L if later is None else 0, sharded, root.expr / param_bytes, model.head / tp_s,
                                    param_bytes, reduce_bytes, side_streams, later)
    gathered = blocks.expr - held_blocks.expr if side_streams else 0  # the prefetched block: the copy-in stream's
    term = fsdp.backward_term(moments, param_bytes * head_grads, gathered, loss, root_end, held, r.fsdp_reduce_dtype,
                              later is not None)
    return [blocks, root, outputs], [held_blocks, root, term]


def _fsdp_pools(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, phases: Mapping[str, tuple[Term, ...]],
                compute: Sequence[Term], stage: Stage | None = None) -> dict[str, sympy.Expr]:
    """Per phase, what FSDP2's side streams keep reserved beyond the side-stream tensors the phase counts
    (``fsdp.stream_pools_term``): the reduce-scatter stream's sharded gradients (with gradient accumulation a later
    micro-batch's output too: ``fsdp.accumulation_pool``), the copy-in stream's flat all-gather outputs (the root's, a
    block's; under pipeline parallelism each held stage's own: ``fsdp.PIPELINE_NOTE``). ``compute``: the backward's
    FSDP2 terms without the side streams' tensors (the sharded gradients and the prefetched block in its moments)."""
    def of(terms: Sequence[Term], key: str) -> sympy.Expr:
        return sympy.Add(*(t.expr for t in terms if t.key == key))

    grads = 0 if r.optimizer_in_backward else of(phases["optimizer"], "gradients")
    layer = (N - model.first_stage - model.head) / (L * tp_s)
    block = _fsdp_block_bytes(model, r, tp_s, layer)[0]
    if stage is None:
        copy_in = fsdp.copy_in_pool(of(phases["forward"], "fsdp_root_unsharded"), block, n_s)
    else:  # each stage its own fully_shard root with its own streams
        param_bytes, last = int(formats.nbytes(r.fsdp_param_dtype)), len(stage.layers) - 1
        roots = [param_bytes * ((model.first_stage if i == 0 else 0) + (model.head if i == last else 0)) / tp_s
                 for i in stage.held]
        copy_in = fsdp.stage_copy_in_pools([(root, stage.layers[i]) for root, i in zip(roots, stage.held)], block, n_s)
    if r.pp == 1 and r.microbatches > 1:  # a later micro-batch's reduce-scatter outputs, beside the sharded gradients
        grad_bytes = int(formats.nbytes(prec.get(r.precision).master or prec.get(r.precision).dtype))
        grads += fsdp.accumulation_pool((layer, (model.first_stage + model.head) / tp_s),
                                        int(formats.nbytes(r.fsdp_reduce_dtype)), grad_bytes)
    prefetched = fsdp.PREFETCH * block if r.pp == 1 and r.reshard_after_forward else 0  # a flat output, copy-in's

    def counted(phase: str) -> sympy.Expr:
        """The side streams' tensors the phase counts."""
        terms = phases[phase]
        held = prefetched if any(t.key == "fsdp_unsharded_layers" for t in terms) else 0  # the running and next
        rs = of(terms, "gradients")  # the optimizer's, or accumulated over micro-batches
        if phase == "backward":  # the moments' sharded gradients (or new outputs) and prefetched block: by the moments
            rs += of(terms, "fsdp_backward_grads") - of(compute, "fsdp_backward_grads")  # without them
        return held + of(terms, "fsdp_all_gather_outputs") + rs

    return {p: copy_in + grads - counted(p) for p in phases}


def _fsdp_block_bytes(model: ModelShape, r: Regime, tp_s: sympy.Expr | int,
                      layer: sympy.Expr) -> tuple[sympy.Expr, str]:
    """(bytes, dtype text) of one block all-gathered: param_dtype, or its linear weights in float8 (1 byte)."""
    param_bytes = int(formats.nbytes(r.fsdp_param_dtype))
    if not r.fp8_all_gather:
        return param_bytes * layer, r.fsdp_param_dtype
    linear = sympy.Add(*(rows * cols * n for _, rows, cols, n in model.matrices if L in n.free_symbols)) / (L * tp_s)
    return linear + param_bytes * (layer - linear), f"linear weights fp8, the rest {r.fsdp_param_dtype}"


def _fsdp_stage_terms(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, pp_s: sympy.Expr | int,
                      params: sympy.Expr, stage: Stage | None) -> tuple[list[Term], list[Term]]:
    """FSDP2 within a pipeline stage (torchtitan's 3D layout): every block and the stage's root stay unsharded and
    the stage's gradients accumulate unsharded until the last micro-batch (``fsdp.accumulated_grads_term``)."""
    param_bytes, reduce_bytes = int(formats.nbytes(r.fsdp_param_dtype)), int(formats.nbytes(r.fsdp_reduce_dtype))
    layer = (N - model.first_stage - model.head) / (L * tp_s)
    layers = stage.own_layers if stage is not None else L / pp_s
    layer_bytes, what = _fsdp_block_bytes(model, r, tp_s, layer)
    blocks = fsdp.unsharded_layers_term(layers, layer_bytes, False, what)
    embeddings, head = (stage.embeddings, stage.head) if stage is not None else (True, False)
    root_params = (model.first_stage if embeddings else 0) + (model.head if head else 0)
    root = [fsdp.root_term(root_params / tp_s, param_bytes, r.fsdp_param_dtype)] if root_params != 0 else []
    accumulated = fsdp.accumulated_grads_term(params, reduce_bytes, r.fsdp_reduce_dtype)
    buffers = fsdp.backward_buffers_term(layer, root_params / tp_s, param_bytes, reduce_bytes, r.fsdp_reduce_dtype)
    return [blocks, *root, accumulated], [blocks, *root, accumulated, buffers]


def _per_rank(terms: list[Term]) -> list[Term]:
    """Context parallelism: each activation-side term at the rank's S/c_p tokens (``context_parallel.per_rank``)."""
    return [term.replace(expr=cpar.per_rank(term.expr), title=f"{term.title} (S/c_p tokens per rank)")
            if S in term.expr.free_symbols else term for term in terms]


def _ring_terms(model: ModelShape, r: Regime, tp_s: sympy.Expr | int,
                values: dict[str, object]) -> tuple[list[Term], list[Term]]:
    """(forward, backward) buffers of ring attention under context parallelism."""
    values["c_p"] = r.cp
    act_bytes = prec.get(r.precision).activation_bytes
    width, heads = a * model.head_dim / tp_s, a / tp_s
    return [cpar.ring_forward_term(width, heads, act_bytes)], [cpar.ring_backward_term(width, act_bytes)]


def _fp8_terms(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, during_loss: list[Term],
               loss_grads: list[Term]) -> tuple[list[Term], list[Term]]:
    """(forward, backward) float8 casts of one linear's operands (torchao: transient, not saved; fused under
    ``--compile``), over the loss's transients of the phase, which they never coincide with."""
    if r.precision != "fp8":
        return [], []
    forward = fsdp.fp8_forward_term(r.fp8_recipe, tp_s, model.ffn, H, r.fp8_all_gather, compiled=r.compile)
    if _compiled_block_rebuilt(model, r) and r.recompute_every == 1:
        return [fsdp.beyond(forward, sympy.Add(*(t.expr for t in during_loss)))], []  # in the recompute buffer
    backward = fsdp.fp8_backward_term(r.fp8_recipe, tp_s, model.ffn, H, r.fp8_all_gather, compiled=r.compile)
    if _ops_float8_measured(model, r):
        variant = acts.LayerVariant(flash=r.flash, gated=True, dropout=r.dropout, compiled=True, float8="tensorwise",
                                    float8_gathered=r.fp8_all_gather)  # the layer's measured backward, its casts
        term = compiled_recompute.ops_float8_backward_term(variant, tp_s, r.sequence_parallel and r.tp > 1)
        backward = term.replace(expr=term.expr.xreplace(model.widths()))
    return ([fsdp.beyond(forward, sympy.Add(*(t.expr for t in during_loss)))],
            [fsdp.beyond(backward, sympy.Add(*(t.expr for t in loss_grads)))])


def _ops_float8_measured(model: ModelShape, r: Regime) -> bool:
    """Per-op checkpointing of a compiled Korthikanti gated layer with tensorwise float8 linears: its backward's
    casts are the measured layer's (``compiled_recompute.ops_float8_backward_parts``)."""
    return (r.recompute == "ops" and r.compile and r.fp8_recipe == "tensorwise" and model.gated and not model.moe
            and r.layer_impl == "korthikanti")


def _shard(states: list[Term], zero: int) -> list[Term]:
    """ZeRO sharding of the model-state terms it knows; other terms (adapters, frozen base) stay whole."""
    known = [s for s in states if s.key in par.SHARDED_FROM]
    sharded = {s.key: s for s in par.shard_terms(known, zero, n_d)}
    return [sharded.get(s.key, s) for s in states]


def _optimizer_temporaries(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, params: sympy.Expr,
                           grads: list[Term]) -> list[Term]:
    """AdamW's temporaries in the optimizer step: PyTorch's default on CUDA (foreach), one per parameter; 8-bit
    AdamW's, the largest parameter's step (``adam_8bit_step``)."""
    if r.optimizer == "adam-8bit" and r.optimizer_impl == "torchao" and not r.offload:  # one parameter at a time
        shards = n_s if r.fsdp else n_d if r.zero >= 1 else 1
        return [adam8.temporaries_term(r.optimizer_impl, model.largest_matrix()[1] / (tp_s * shards))]
    if r.optimizer != "adamw" or r.offload:
        return []
    if finetune.active(r):  # the trainable tensors only (adapters, or all but the embedding), in their dtype
        expr = sympy.Add(*(g.expr for g in grads if g.key == "gradients"))
    else:
        expr = prec.get(r.precision).state_bytes * params / (n_s if r.fsdp else n_d if r.zero >= 1 else 1)
    return [pypeak.adamw_temporaries_term(expr)]


def _loss_transients(kind: str, act_bytes: int, tp_s: sympy.Expr | int,
                     chunks: int = 1, compiled: bool = False,
                     head_trained: bool = True) -> tuple[list[Term], list[Term]]:
    """(forward, backward) transients of the loss: neither is saved for backward (``acts.logits_terms``)."""
    if compiled and kind in ("hf", "chunked"):  # the compiled loss saves the logits; backward: its or the head's moment
        return [], [pypeak.compiled_loss_gradient_term(act_bytes, tp_s, head_trained)]
    if kind == "chunked":  # torchtune's CEWithChunkedOutputLoss: one fp32 chunk at a time
        return ([pypeak.chunked_logits_forward_term(act_bytes, chunks, tp_s)],
                [pypeak.chunked_loss_gradients_term(chunks, tp_s)])
    if kind != "hf":
        return [], []  # Megatron's vocab-parallel cross-entropy works in place; a fused kernel keeps no logits
    if tp_s != 1:  # logits sharded over the vocabulary: PyTorch's loss_parallel (torchtitan's, whenever tp > 1)
        return [pypeak.loss_parallel_forward_term(act_bytes, tp_s)], [pypeak.loss_parallel_gradients_term(tp_s)]
    return [pypeak.logits_forward_term(act_bytes, tp_s)], [pypeak.loss_gradients_term(tp_s)]


def _korthikanti_terms(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, pp_s: sympy.Expr | int,
                       values: dict[str, object], notes: list[str], act_bytes: int,
                       stage: Stage | None = None) -> tuple[list[Term], list[Term]]:
    """(saved for backward: activations, inputs, saved logits; the recompute buffer of full recompute)."""
    fp8 = r.precision == "fp8"
    variant = acts.LayerVariant(flash=r.flash, gated=model.gated, dropout=r.dropout, moe=model.moe,
                                act_bytes=act_bytes, compiled=r.compile, impl=r.layer_impl,
                                float8=r.fp8_recipe if fp8 and (r.compile or r.recompute == "ops") else "",
                                float8_gathered=fp8 and r.fp8_all_gather,
                                tp_impl=r.tp_impl if r.tp > 1 else "megatron")
    sp = r.sequence_parallel and r.tp > 1
    per = model.layer_activations(variant, r.recompute, tp_s, sp)
    in_flight = min(r.microbatches, r.pp)
    layers: sympy.Expr = L
    if in_flight < r.pp:  # fewer micro-batches than stages: m of them in flight
        layers = L * n_mb / pp_s
        values["n_mb"] = r.microbatches
    how = "L layers"
    if r.pp > 1:
        how = f"L/p layers × {in_flight} micro-batches in flight (1F1B)"
        how += " = L layers' worth" if in_flight == r.pp else ""
        if r.interleave > 1 and r.microbatches >= r.pp:
            layers = layers * (1 + (p - 1) / (p * v_pp))
            values["v_pp"] = r.interleave
            how += " × (1 + (p − 1)/(p·v)) interleaved"
    kept = [Term("activations", f"activations: {how} × one layer ({model.activations_label(variant)}, recompute "
                 f"{r.recompute})",
                 layers * per, "bytes", "korthikanti2022", "§4.1, §4.2.3 (pipeline)",
                 f"One layer keeps {printing.text(per)} bytes per micro-batch; see act.layer.* for its tensors.")]
    if r.recompute_every > 1:  # regime: recompute full, pp 1
        kept = [_every_nth(model, variant, r, tp_s, sp, per)]
    if stage is not None:
        in_flight = stage.in_flight
        kept = [pipe.stage_activations_term(stage.schedule, stage.rank, stage.peak, stage.own_layers, per,
                                            model.activations_label(variant), r.recompute)]
    rebuilt: list[Term] = []
    if _compiled_block_rebuilt(model, r):
        term = compiled_recompute.buffer_term(variant, tp_s, sp)
        rebuilt.append(term.replace(expr=term.expr.xreplace(model.widths())))
    elif r.recompute in ("full", "ops") and eager_rebuild.measured(replace(variant, float8="")):
        # float8 (ops): the bf16 layer's, as below
        term = eager_rebuild.buffer_term(replace(variant, float8=""), r.recompute, tp_s, sp)
        rebuilt.append(term.replace(expr=term.expr.xreplace(model.widths())))
    elif r.recompute == "full":
        again = model.layer_activations(variant, "none", tp_s, sp)
        rebuilt.append(Term("recompute_buffer", "one layer's activations, rebuilt during its backward", again, "bytes",
                            "project", "", "Full recompute stores only layer inputs, but the layer being "
                            "back-propagated holds all its activations for a moment."))
    elif r.recompute == "ops":
        # float8: the bf16 layer's (the casts' abs and amax the policy keeps are not rebuilt; the compiled float8
        # layer's smaller saved set does not shrink it: measured, its backward holds more, test_float8_compile.py)
        plain = replace(variant, float8="")
        again = model.layer_activations(plain, "none", tp_s, sp) - model.layer_activations(plain, "ops", tp_s, sp)
        rebuilt.append(Term("recompute_buffer", "one layer's recomputed tensors, rebuilt during its backward", again,
                            "bytes", "torchtitan-ac", "_save_list", "The tensors the policy did not save (the "
                            "layer's activations without recompute, less what ops keeps), for one layer at a time."))
    kept.append(acts.inputs_term(r.dropout, tp_s if sp else 1, in_flight, pipelined=r.pp > 1))
    if r.pp == 1 or (stage is not None and stage.head):
        parts = [part for part in acts.logits_terms(r.logits, act_bytes, tp_s, sp, r.compile and r.compile_loss)
                 if part.key in SAVED_LOGITS]
        if r.logits_upcast == "model":  # torchtune's fp32 logits: the eager log-softmax or the compiled loss's
            parts = upcast_logits.saved_terms(act_bytes, r.compile and r.compile_loss)
        if r.layer_impl != "korthikanti":  # torchtune's final norm keeps its fp32 upcast and normalized copy
            parts = [*acts.final_norm_terms(act_bytes), *parts]
        expr = sympy.Add(*(part.expr for part in parts))
        detail = "; ".join(f"{part.title} {printing.text(part.expr)}" for part in parts)
        source = {"megatron": "korthikanti2022", "chunked": "torchtune-chunked-ce"}.get(r.logits, "huggingface")
        kept.append(Term("logits", f"output layer and loss: what is saved for backward ({r.logits} accounting)",
                         expr, "bytes", source, "", detail))
    elif stage is None:
        notes.append("the last pipeline stage holds the logits instead; this plan is the first stage, which holds "
                     "L layers' worth of activations")
    return kept, rebuilt


def _every_nth(model: ModelShape, variant: acts.LayerVariant, r: Regime, tp_s: sympy.Expr | int, sp: bool,
               checkpointed: sympy.Expr) -> Term:
    """torchtitan's selective_ac_option N: layers N, 2N, ... keep their input, the others all they save."""
    plain = model.layer_activations(variant, "none", tp_s, sp)
    wrapped = sympy.floor(L / r.recompute_every)
    return Term("activations", f"activations: ⌊L/{r.recompute_every}⌋ checkpointed layers (their inputs) and the other "
                f"layers whole ({model.activations_label(variant)})", wrapped * checkpointed + (L - wrapped) * plain,
                "bytes", "torchtitan-ac", "selective_ac_option",
                "torchtitan wraps a block when its running count (from 1) is a multiple of N: layers N, 2N, ...; a "
                f"checkpointed layer keeps {printing.text(checkpointed)} bytes, another {printing.text(plain)}.")


# the parts of ``acts.logits_terms`` that are saved for backward (the others are transient: _loss_transients)
SAVED_LOGITS = ("output_inputs", "logits_fp32", "lm_head_input", "log_softmax_fp32", "logits_compiled", "loss_stats")


def _by_tensor(model: ModelShape, fmt: str) -> bool:
    """Whether ``fmt``'s bytes follow each tensor (a shaped format, a llama.cpp file type, a file's own tensors)."""
    f = formats.get(fmt)
    own = bool(getattr(model, "stored_tensors", ())) and fmt == getattr(model, "quantization", None)
    return f.shaped or bool(f.mixture) or own


def _stored_weights(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, pp_s: sympy.Expr | int,
                    kept: sympy.Expr) -> list[Term]:
    """The weight terms of a shaped format (fp8-block, mxfp4, gptq-int4...): ``networks.stored``'s parts per GPU."""
    parts = stored.stored_parts(model, r.weights)

    def rate(part: str) -> sympy.Rational:
        p = parts[part]
        return sympy.Rational(p.nbytes, p.params) if p.params else sympy.Integer(0)

    dense = (N - model.experts - model.first_stage - model.head) / (pp_s * tp_s)
    experts = model.experts / (e_p * pp_s if r.ep > 1 else pp_s * tp_s)
    by_type = ", ".join(f"{k} {format_bytes(v)}" for k, v in stored.stored_weights(model, r.weights).items())
    return infer.stored_weight_terms(r.weights, rate("layers") * dense + rate("experts") * experts,
                                     rate("kept") * kept, by_type)


def _infer_terms(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, pp_s: sympy.Expr | int,
                 values: dict[str, object], notes: list[str]) -> tuple[Layout, dict, list[Term]]:
    own = model.inference_terms(r)
    if own is not None:  # a network that plans its own forward (a probed torch module)
        resident, phases, own_notes = own
        notes.extend(own_notes)
        return Layout(tuple(resident), dict(phases)), {N: model.params}, []
    head_here = model.head if r.pp == 1 else 0
    if r.ep > 1:
        quantised = (N - model.experts - model.first_stage - model.head) / (pp_s * tp_s) + model.experts / (e_p * pp_s)
        notes.append(f"ep {r.ep}: each GPU holds {model.numbers.get('n_exp', 0) // r.ep} of the "
                     f"{model.numbers.get('n_exp', 0)} routed experts of every MoE layer; the rest is as without ep")
    else:
        quantised = (N - model.first_stage - model.head) / (pp_s * tp_s)
    kept = (model.first_stage + head_here) / tp_s
    if _by_tensor(model, r.weights):  # bytes by matrix shape or by tensor: each part at its exact bytes per parameter
        resident = _stored_weights(model, r, tp_s, pp_s, kept)
    else:
        resident = infer.weight_terms(r.weights, quantised, kept)
    resident += model.cache_terms(tp_s, infer.kv_bytes(r.kv_dtype), r.kv_dtype, pp_s)
    act = formats.nbytes(formats.get(r.weights).compute)  # the working set is in the weights' compute dtype
    chunked = bool(r.prefill_chunk)  # 0: whole prompts
    prefill, decode = infer.working_sets(model.serving_width(tp_s), act, r.flash, tp_s, chunked)
    logits = infer.last_logits_term(tp_s)
    prefill_logits = infer.chunk_logits_term(tp_s) if chunked else logits
    if chunked:
        values["C_p"] = r.prefill_chunk
        notes.append(f"prefill: {infer.prefill_text(r.prefill_chunk)} (chunked prefill; the cache holds B·S tokens)")
    if r.pp > 1:
        notes.append("pipeline stages hold L/p layers each; this plan is the first stage (embeddings, no head)")
    return Layout(tuple(resident), {"prefill": (prefill, prefill_logits), "decode": (decode, logits)}), {N: model.params}, []
