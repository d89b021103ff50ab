"""Fit questions: does a plan fit a GPU, the largest batch or context, the fewest GPUs.

The batch and context answers use ``Formula.solve`` (``algebra.solve_max``) on the plan's
composed peak (the largest of its phases). The fewest data-parallel GPUs under ZeRO searches the
peak, which falls with N_d (each phase has the form A + C/N_d): A, the part no degree shards, is
its value as N_d → ∞, and the smallest N_d within the capacity is found by bisection, then
checked against the plan at that degree (whose NCCL share grows with the ranks). Tensor- and pipeline-parallel degrees are
discrete choices constrained by the model (heads, layers), so they are tried in increasing order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction

import sympy

from ..catalogs import GPU, Budget, as_budget
from ..core.symbols import n_d
from ..core.units import format_bytes
from ..networks.shape import ModelShape, divisors, trained_phrase
from ..options.table import MAX_SEQ, PlanOptionError
from ..text import display
from .build import Plan

QUESTIONS = ("batch", "seq", "gpus")
OVER = ("auto", "dp", "tp", "pp")


@dataclass(frozen=True)
class Answer:
    """The answer to one fit question on one GPU."""

    question: str  # "batch", "seq" or "gpus"
    gpu: GPU
    status: str  # "ok", "none" (nothing fits) or "unbounded"
    value: int | None  # the batch, sequence length, or the degree varied (dp, tp or pp)
    over: str | None  # for "gpus": which degree was varied
    gpus: int | None  # GPUs in the job at the answer
    plan: Plan | None  # the plan at the answer
    next_total: int | None  # per-GPU bytes one step further (batch/seq + 1, degree one smaller)
    message: str
    budget: Budget | None = None  # what was solved against (None: all of ``gpu``)
    sizes: dict[str, int] | None = None  # fit of input sizes: each size at the answer (``value`` is the first)

    @property
    def limit(self) -> Budget:
        """The budget solved against: the whole GPU unless a fraction or reservations were given."""
        return self.budget if self.budget is not None else as_budget(self.gpu)

    def as_dict(self) -> dict[str, object]:
        limit = self.limit.bytes
        data: dict[str, object] = {
            "question": self.question, "gpu": self.gpu.name, "capacity_bytes": limit, "status": self.status,
            "value": self.value, "over": self.over, "gpus": self.gpus, "message": self.message,
            "next_total_bytes": self.next_total,
        }
        if self.limit.notes or not self.limit.whole:
            data["budget"] = self.limit.as_dict()
        if self.sizes:
            data["sizes"] = dict(self.sizes)
        if self.plan is not None:
            data["total_bytes"] = self.plan.total  # the peak of a step: the largest phase
            data["phases"] = self.plan.phase_bytes()
            data["peak_phase"] = self.plan.peak_phase
            data["headroom_bytes"] = limit - self.plan.total
            data["options"] = self.plan.options()
        return data

    def table(self) -> display.Table:
        """The answer, the GPU and the per-GPU memory at the answer, as plain table data."""
        total = self.plan.total if self.plan is not None else None
        limit = self.limit.bytes
        headroom = limit - total if total is not None else None
        rows = (("question", self.question, ""), ("status", self.status, ""), ("answer", self.value, ""),
                ("varied", self.over, ""), ("GPUs", self.gpus, ""), ("capacity", limit, limit),
                ("per-GPU total", total, total), ("headroom", headroom, headroom),
                ("one step further", self.next_total, self.next_total))
        rows = tuple((n, v, display.cell_text(s, "bytes") if s != "" else "") for n, v, s in rows
                     if v is not None or n in ("answer",))
        return display.Table(self.message, (("", ""), ("value", ""), ("shown", "IEC")), rows, notes=self.limit.notes)

    def _repr_html_(self) -> str:
        return display.html(self.table())

    def to_frame(self):  # noqa: ANN201 (pandas is optional)
        """The answer's rows as a pandas DataFrame (needs pandas)."""
        return display.frame(self.table())

    def __repr__(self) -> str:
        return display.short("Answer", f"{self.question} on {self.limit.label}", f"status={self.status}",
                             f"value={self.value}", self.message)


PlanMaker = Callable[..., Plan]


def largest(make: PlanMaker, model: ModelShape, gpu: GPU | Budget, question: str,
            options: dict[str, object]) -> Answer:
    """The largest batch (``question`` "batch") or context ("seq") that fits ``gpu`` (or a Budget of one)."""
    budget = as_budget(gpu)
    return replace(_largest(make, model, budget, question, options), budget=budget)


def _largest(make: PlanMaker, model: ModelShape, budget: Budget, question: str,
             options: dict[str, object]) -> Answer:
    symbol, option = {"batch": ("B", "batch"), "seq": ("S", "seq")}[question]
    if options.get(option) is not None:
        raise PlanOptionError(f"{option} is what is solved for; do not also give it")
    start = make(model, **{**options, option: 1})
    solution = start.solve(symbol, budget.bytes)
    limit, why = _seq_limit(model) if question == "seq" else (None, "")
    if solution.status != "ok" or solution.value is None:
        if solution.status == "unbounded" and limit:
            return _at(make, model, budget, question, option, limit, options, f"every {option} fits; {why}")
        return Answer(question, budget.gpu, solution.status, None, None, None, None,
                      _int(solution.total_at_next), f"{option}: {solution.message} on {budget.label}")
    value = solution.value
    if limit and value > limit:
        return _at(make, model, budget, question, option, limit, options, f"{option} {value} would fit; {why}")
    at, nxt = _pair(solution.total_at_value, solution.total_at_next)
    message = f"largest {option} that fits {budget.label} is {value} ({at}; {value + 1} needs {nxt})"
    trained = model.trained_context if question == "seq" else None
    if trained is not None and value > trained:
        # rotary models run past it (often with degraded quality or a scaling scheme): a warning, not a cap
        message += f"; beyond {trained_phrase(trained, model.name)}"
    answer = _at(make, model, budget, question, option, value, options, message)
    return Answer(**{**answer.__dict__, "next_total": _int(solution.total_at_next)})


def largest_size(make: PlanMaker, model: ModelShape, gpu: GPU | Budget, names: tuple[str, ...], mode: str,
                 question: str, options: dict[str, object]) -> Answer:
    """The largest input sizes ``names`` that fit, grown together on their steps (``Network.varying``).

    The network's sizes become unit · k (each unit a multiple of its size's stride, their ratio
    the asked sizes'); the plan's peak is solved for the largest whole k (``Plan.solve``), so the
    answer is a multiple of each stride: sizes between them are not exact for a strided network.
    """
    from .regime import resolve

    budget = as_budget(gpu)
    grown, symbol, units = model.varying(names, resolve(model, mode, **options))
    shown = "×".join(names)

    def sizes(k: int) -> str:
        return "×".join(str(units[n] * k) for n in names)

    def at(k: int) -> Plan:
        return make(replace(grown, numbers={**grown.numbers, symbol: k}), **options)

    together = "grow together in steps of" if len(names) > 1 else "in steps of"
    steps = f"{shown} {together} {sizes(1)}" + (" (their ratio kept)" if len(names) > 1 else "") + \
        ("; each size stays a multiple of the network's total stride, where the fit is exact"
         if any(u > 1 for u in units.values()) else "")
    k, why = _largest_piece(make(grown, **options), symbol, budget.bytes)
    if k is None:
        first = at(1).total
        return Answer(question, budget.gpu, "none", None, None, None, None, first,
                      f"{shown}: nothing fits {budget.label}: even {sizes(1)} needs {format_bytes(first)}; {steps}",
                      budget)
    if why:
        return Answer(question, budget.gpu, "unbounded", None, None, None, None, None,
                      f"{shown}: {why} on {budget.label}; {steps}", budget)
    plan, after = at(k), at(k + 1).total
    if plan.total > budget.bytes or after <= budget.bytes:  # the pieces' answer against the composed plan
        raise PlanOptionError(f"fit of {shown}: the peak at {sizes(k)} and {sizes(k + 1)} disagrees with its pieces")
    first, second = _pair(sympy.Integer(plan.total), sympy.Integer(after))
    message = f"largest {shown} that fits {budget.label} is {sizes(k)} ({first}; {sizes(k + 1)} needs {second}); {steps}"
    return Answer(question, budget.gpu, "ok", units[names[0]] * k, None, plan.regime.gpus, plan, after, message,
                  budget, {n: units[n] * k for n in names})


def _largest_piece(plan: Plan, symbol: str, capacity: int) -> tuple[int | None, str]:
    """The largest whole ``symbol`` within ``capacity``: the smallest answer of the peak's Max-free pieces.

    The peak is a sum of terms with maxima of polynomials in it (a phase's candidate moments);
    it is within the capacity exactly where every piece (one argument chosen at each maximum)
    is, so each piece, a polynomial, is solved alone (``algebra.solve_max``: SymPy's steps
    through the maxima themselves take minutes). None: nothing fits; a reason: every value fits.
    """
    from ..math import algebra

    given = {k: v for k, v in plan.values.items() if k != symbol}
    expr = plan.formula.subs(given)
    x = next(s for s in expr.free_symbols if s.name == symbol)
    answers = []
    for piece in dict.fromkeys(sympy.expand(p) for p in _pieces(expr)):
        solution = algebra.solve_max(piece, x, sympy.Integer(capacity))
        if solution.status == "none":
            return None, ""
        if solution.status == "ok" and solution.value is not None:
            answers.append(solution.value)
        elif solution.status not in ("independent", "unbounded"):
            raise PlanOptionError(f"fit of {symbol}: {solution.message}")
    if not answers:
        return 1, "every size fits (the peak does not grow with the sizes)"
    return min(answers), ""


def _pieces(expr: sympy.Expr) -> list[sympy.Expr]:
    """``expr`` without maxima: one expression per choice of an argument at each Max (see ``_largest_piece``)."""
    if isinstance(expr, sympy.Max):
        return [p for arg in expr.args for p in _pieces(arg)]
    if isinstance(expr, sympy.Add) and expr.has(sympy.Max):
        out = [sympy.Integer(0)]
        for arg in expr.args:
            out = [a + b for a in out for b in _pieces(arg)]
        return out
    if isinstance(expr, sympy.Mul) and expr.has(sympy.Max):
        coeff, rest = expr.as_coeff_Mul()
        if coeff > 0:
            return [coeff * p for p in _pieces(rest)]
    return [expr]


def _seq_limit(model: ModelShape) -> tuple[int, str]:
    """The longest context a plan of ``model`` takes, and why: its learned positions, else the planner's bound."""
    if model.positions:
        return model.positions, f"the model's {model.positions} learned positions are the limit"
    return MAX_SEQ, f"the planner's bound of {MAX_SEQ:,} tokens is the limit (options.table.MAX_SEQ)"


def _at(make: PlanMaker, model: ModelShape, budget: Budget, question: str, option: str, value: int,
        options: dict[str, object], message: str) -> Answer:
    plan = make(model, **{**options, option: value})
    return Answer(question, budget.gpu, "ok", value, None, plan.regime.gpus, plan, None, message)


def fewest(make: PlanMaker, model: ModelShape, gpu: GPU | Budget, over: str, mode: str,
           options: dict[str, object]) -> Answer:
    """The fewest GPUs of ``gpu``'s kind (each within its Budget): over data parallel with ZeRO, or tp/pp degrees."""
    budget = as_budget(gpu)
    return replace(_fewest_any(make, model, budget, over, mode, options), budget=budget)


def _fewest_any(make: PlanMaker, model: ModelShape, budget: Budget, over: str, mode: str,
                options: dict[str, object]) -> Answer:
    if over not in OVER:
        raise PlanOptionError(f"unknown over {over!r}; choose from {', '.join(OVER)}")
    if over == "auto":
        over = "dp" if mode == "train" else "tp"
    if options.get(over) is not None:
        raise PlanOptionError(f"{over} is what is solved for; do not also give it")
    if over == "dp":
        return _fewest_dp(make, model, budget, mode, options)
    candidates = _candidates(model, over, mode)
    previous = None
    for degree in candidates:
        plan = make(model, **{**options, over: degree})
        if plan.total <= budget.bytes:
            return Answer("gpus", budget.gpu, "ok", degree, over, plan.regime.gpus, plan, previous,
                          f"{over} {degree} fits {budget.label}: {_plural(plan.regime.gpus)}, {format_bytes(plan.total)} each")
        previous = plan.total
    return Answer("gpus", budget.gpu, "none", None, over, None, None, previous,
                  f"no {over} degree the model allows ({', '.join(map(str, candidates))}) fits {budget.label}")


def _fewest_dp(make: PlanMaker, model: ModelShape, budget: Budget, mode: str, options: dict[str, object]) -> Answer:
    if mode != "train":
        raise PlanOptionError("inference replicas each hold the whole model: use --over tp or pp")
    options = dict(options)
    if options.get("zero") is None:
        options["zero"] = 3
    if options["zero"] == 0:
        raise PlanOptionError("without ZeRO (stage 0) more data-parallel GPUs do not reduce per-GPU memory")
    single = make(model, **{**options, "zero": 0, "dp": 1})
    if single.total <= budget.bytes:
        return Answer("gpus", budget.gpu, "ok", 1, "dp", single.regime.gpus, single, None,
                      f"one {budget.label} is enough without sharding: {format_bytes(single.total)}")
    base = make(model, **{**options, "dp": 2})  # dp > 1, so every sharded and ZeRO-3 term is present
    given = {k: v for k, v in base.values.items() if k != "n_d"}
    capacity = sympy.Integer(budget.bytes)
    expr = base.formula.subs(given)  # the peak: every phase's A + C/N_d, and their maximum
    floor = expr.xreplace({n_d: sympy.oo})  # the part no data-parallel degree shards
    if floor >= capacity:
        return Answer("gpus", budget.gpu, "none", None, "dp", None, None, None,
                      f"even unlimited data parallelism (ZeRO-{options['zero']}) leaves {format_bytes(floor)} per GPU "
                      f"that is not sharded, more than {budget.label}'s {format_bytes(capacity)}")
    degree = _fewest(expr, capacity)
    plan = make(model, **{**options, "dp": degree})
    while plan.total > capacity:  # guards the closed form against rounding (and NCCL's share growing with ranks)
        degree += 1
        plan = make(model, **{**options, "dp": degree})
    smaller = _int(expr.xreplace({n_d: degree - 1})) if degree > 1 else None
    return Answer("gpus", budget.gpu, "ok", degree, "dp", plan.regime.gpus, plan, smaller,
                  f"dp {degree} with ZeRO-{options['zero']} fits {budget.label}: {_plural(plan.regime.gpus)}, "
                  f"{format_bytes(plan.total)} each (the unsharded part is {format_bytes(floor)})")


def _fewest(expr: sympy.Expr, capacity: sympy.Integer) -> int:
    """The smallest N_d ≥ 2 with ``expr`` (non-increasing in N_d: A + C/N_d per phase) within ``capacity``."""
    lo, hi = 1, 2  # invariant once found: expr(lo) > capacity ≥ expr(hi); one GPU was tried by the caller
    while expr.xreplace({n_d: hi}) > capacity:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if expr.xreplace({n_d: mid}) > capacity:
            lo = mid
        else:
            hi = mid
    return max(hi, 2)


def _pair(first: sympy.Expr, second: sympy.Expr) -> tuple[str, str]:
    """Two sizes as text, in bytes when the rounded units would look equal."""
    a, b = format_bytes(first), format_bytes(second)
    return (a, b) if a != b else (f"{_int(first):,} bytes", f"{_int(second):,} bytes")


def _plural(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _candidates(model: ModelShape, over: str, mode: str) -> list[int]:
    if over == "tp":
        kv = model.kv_head_count
        top = kv if mode == "train" else model.heads  # serving may replicate KV heads; training may not
        return [d for d in divisors(model.heads) if d <= top and (kv % d == 0 or d % kv == 0)]
    return divisors(model.layers)


def _int(value: sympy.Expr | None) -> int | None:
    if value is None:
        return None
    return math.ceil(Fraction(int(value.p), int(value.q))) if value.is_Rational else math.ceil(float(value))
