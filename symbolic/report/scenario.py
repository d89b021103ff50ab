"""What a report is about, as engine objects: one per-GPU Formula, its inputs, the GPUs.

A ``Scenario`` holds the total the report explains (a ``Formula``), the values of its inputs,
"ties" (an input that follows another, e.g. article B's D = S for token ids), the batch and
sequence symbols, the GPUs to compare and the side-by-side variants. Its methods compute
everything numeric the report prints: evaluation, sweeps, integer solving under a GPU's
capacity and sensitivities, all exactly, from the formula alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sympy

from ..core import symbols as symtab
from ..math import algebra
from ..math.formula import Evaluation, Formula

if TYPE_CHECKING:
    from .peak import Phases


@dataclass(frozen=True)
class Gpu:
    """A GPU to compare: its capacity in bytes and where that figure comes from."""

    name: str
    capacity: int  # the bytes a plan may use: the GPU's, or its Budget's (a fraction, less reservations)
    source: str = ""
    notes: tuple[str, ...] = ()  # how a Budget's bytes follow from the GPU (catalogs.budget), shown in the summary


@dataclass(frozen=True)
class VariantRow:
    """One alternative in a side-by-side comparison; ``value`` is exact (bytes or parameters)."""

    label: str
    latex: str
    value: sympy.Rational
    source: str
    note: str = ""
    chosen: bool = False


@dataclass(frozen=True)
class VariantGroup:
    """Alternatives the sources disagree on, evaluated at the report's point."""

    title: str
    intro: str
    unit: str  # "bytes" or "params"
    rows: tuple[VariantRow, ...]


@dataclass(frozen=True)
class Trained:
    """A length the model was trained for (e.g. max_position_embeddings): past it runs, but untested."""

    value: int
    model: str  # the model's name, for "the 8,192 positions llama-3-8b was trained for"
    source: str = "max_position_embeddings"


@dataclass(frozen=True)
class Step:
    """A formula shown as a hand calculation before the total (N, E, subtotals)."""

    formula: Formula
    values: dict[sympy.Symbol, sympy.Rational]


@dataclass
class Scenario:
    """The report's subject: a per-GPU total, its inputs and the GPUs to compare."""

    model_name: str
    formula: Formula
    given: dict[sympy.Symbol, sympy.Rational]
    gpus: list[Gpu]
    batch: sympy.Symbol | None = None
    seq: sympy.Symbol | None = None
    ties: dict[sympy.Symbol, sympy.Symbol] = field(default_factory=dict)
    value_notes: dict[sympy.Symbol, str] = field(default_factory=dict)
    model_rows: list[tuple[str, str]] = field(default_factory=list)
    regime_rows: list[tuple[str, str]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    variants: list[VariantGroup] = field(default_factory=list)
    errata_sources: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    sweep_batch: tuple[int, ...] = ()
    sweep_seq: tuple[int, ...] = ()
    limits: dict[sympy.Symbol, int] = field(default_factory=dict)  # e.g. S ≤ learned positions
    trained: dict[sympy.Symbol, Trained] = field(default_factory=dict)  # e.g. S past the trained context
    fewest: Callable[[Gpu], str] | None = None  # "fewest GPUs of this kind", when the model can be split
    gpu_rows: list[tuple[str, str, str, str]] = field(default_factory=list)  # name, title, capacity, source
    phases: Phases | None = None  # a planner's step phases (which one sets the peak); None for the articles
    _solved: dict[tuple, algebra.Solution] = field(default_factory=dict, repr=False, compare=False)

    # --- points ----------------------------------------------------------------------------
    def point(self, changes: Mapping[sympy.Symbol, int] | None = None) -> dict[sympy.Symbol, sympy.Rational]:
        """The given values with some changed; tied symbols follow the symbol they are tied to."""
        out = dict(self.given)
        for symbol, value in (changes or {}).items():
            out[symbol] = sympy.Integer(value)
        for follower, leader in self.ties.items():
            if leader in out:
                out[follower] = out[leader]
        return out

    def evaluate(self, changes: Mapping[sympy.Symbol, int] | None = None) -> Evaluation:
        """Exact total and term values at the report's point (or with some inputs changed)."""
        return self.formula.evaluate(self.point(changes))

    def full_expr(self) -> sympy.Expr:
        """The total in base inputs only: definitions composed, ties substituted."""
        return self.formula.subs({}).xreplace(self.ties)

    # --- solving and sensitivity -----------------------------------------------------------
    def solve(self, symbol: sympy.Symbol, budget: int) -> algebra.Solution:
        """Largest whole value of ``symbol`` (and of what is tied to it) within ``budget`` bytes (remembered)."""
        key = (id(self.formula), symbol, int(budget), tuple(sorted((s.name, v) for s, v in self.given.items())))
        if key not in self._solved:
            self._solved[key] = self._solve(symbol, budget)
        return self._solved[key]

    def _solve(self, symbol: sympy.Symbol, budget: int) -> algebra.Solution:
        followers = {f for f, leader in self.ties.items() if leader == symbol}
        values = {s: v for s, v in self.given.items() if s != symbol and s not in followers}
        expr = self.formula.subs(values).xreplace(self.ties)
        terms = {key: term.xreplace(self.ties) for key, term in self.formula.subs_terms(values).items()}
        return algebra.solve_max(expr, symbol, sympy.Integer(budget), terms=terms)

    def largest_value(self, symbol: sympy.Symbol, capacity: int) -> int | None:
        """The largest whole value of ``symbol`` that fits ``capacity`` (model limits applied); None if none or any."""
        solution = self.solve(symbol, capacity)
        limit = self.limits.get(symbol)
        if solution.status == "none":
            return None
        if limit is not None and (solution.value is None or solution.value > limit):
            return limit
        return solution.value if solution.status == "ok" else None

    def largest(self, symbol: sympy.Symbol, capacity: int) -> str:
        """The largest value of ``symbol`` that fits ``capacity``, as table text."""
        solution = self.solve(symbol, capacity)
        limit = self.limits.get(symbol)
        if solution.status == "none":
            return "none fits"
        if limit is not None and (solution.value is None or solution.value > limit):
            return f"{limit:,} (model limit)"
        if solution.status == "ok" and solution.value is not None:
            return f"{solution.value:,}"
        return "any"

    def sensitivities(self) -> list[algebra.Sensitivity]:
        """The sensitivity of the total to each input at the point, largest elasticity first.

        Inputs without a derivative (a ceil or floor of a custom term, an infinite one) are left out; one on a
        corner of a max (two phases equal at the point) is kept with its one-sided values.
        """
        expr = self.full_expr()
        found = algebra.sensitivities(expr, self.point(), symtab.ordered(expr.free_symbols))
        rows = [r for r in found if r.derivative is not None or r.corner]
        rows.sort(key=lambda r: (-max(abs(e or 0) for _, e in r.sides()), r.symbol.name))
        return rows

    # --- sweeps ----------------------------------------------------------------------------
    def sweep(self, symbol: sympy.Symbol, points: tuple[int, ...]) -> list[Evaluation]:
        """The evaluation at each value of ``symbol`` (others at the report's point)."""
        return [self.evaluate({symbol: value}) for value in points]

    def default_points(self, symbol: sympy.Symbol, low: int = 1) -> tuple[int, ...]:
        """Powers of two from ``low`` to a little past the largest value that fits the biggest GPU."""
        current = int(self.given.get(symbol, low))
        top = max(8 * current, 2 * low)
        for gpu in self.gpus:
            solution = self.solve(symbol, gpu.capacity)
            if solution.value is not None:
                top = max(top, solution.value + solution.value // 4 + 1)
        cap = min(2**20 if symbol == self.batch else 2**22, self.limits.get(symbol, 2**22))
        points = [low]
        while points[-1] < min(top, cap):
            points.append(min(points[-1] * 2, cap))
        return tuple(points)
