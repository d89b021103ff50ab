"""Operations on plain SymPy expressions: term values, sensitivity and integer solving under a budget.

These sit below ``Formula`` so that its methods can use them without importing upwards.

A term's value at a point must be a real, finite, nonnegative number (``term_value``): a term
adds memory (or parameters) to a total, so a negative one, or one that is complex, infinite or
undefined there (a square root or log2 of a negative number, a division by zero), is bad input,
named in a one-line error, never a number in a table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sympy

from ..core.errors import UserError, shorten
from ..text import display
from . import extrema

SEARCH_LIMIT = 2**62


class AlgebraError(UserError):
    """A question a total cannot answer as asked: values missing, a term that is negative or not a real
    number at the point, no monotonic trend."""


def elasticity(expr: sympy.Expr, x: sympy.Symbol) -> sympy.Expr:
    """x/M · ∂M/∂x: the percentage change of M for a 1 % change of x."""
    return sympy.simplify(x * sympy.diff(expr, x) / expr)


@dataclass(frozen=True)
class Sensitivity:
    """∂M/∂x and x/M·∂M/∂x of a total at one point.

    ``derivative`` and ``elasticity`` are None where M has no derivative in x; ``reason`` says
    why: "ceil/floor" (M is piecewise constant in x: the derivative is 0 or undefined),
    "infinite" (e.g. a square root at 0) or "corner" (two arguments of a max or min are equal
    at the point and change at different rates in x, so the derivative is one-sided: ``left_*``
    is the derivative and elasticity from below, ``right_*`` from above).
    """

    symbol: sympy.Symbol
    derivative: sympy.Expr | None
    elasticity: sympy.Expr | None
    left_derivative: sympy.Expr | None = None
    right_derivative: sympy.Expr | None = None
    left_elasticity: sympy.Expr | None = None
    right_elasticity: sympy.Expr | None = None
    reason: str = ""

    @property
    def corner(self) -> bool:
        """Whether the point is a corner of a max or min in x (the derivative is one-sided)."""
        return self.reason == "corner"

    def sides(self) -> tuple[tuple[sympy.Expr | None, sympy.Expr | None], tuple[sympy.Expr | None, sympy.Expr | None]]:
        """(derivative, elasticity) from below and from above: the one-sided values at a corner,
        else the derivative and elasticity twice (None where there is none)."""
        if self.corner:
            return (self.left_derivative, self.left_elasticity), (self.right_derivative, self.right_elasticity)
        return (self.derivative, self.elasticity), (self.derivative, self.elasticity)

    def __repr__(self) -> str:
        if self.corner:
            return display.short("Sensitivity", self.symbol.name, "corner of a max/min",
                                 f"derivative={self.left_derivative} from below, {self.right_derivative} from above",
                                 f"elasticity={self.left_elasticity} from below, {self.right_elasticity} from above")
        return display.short("Sensitivity", self.symbol.name, f"derivative={self.derivative}",
                             f"elasticity={self.elasticity}")


class Sensitivities(list):
    """The sensitivities of one total at one point: a list of ``Sensitivity`` (iterates and
    indexes as the plain list it used to be) that also shows itself as a table."""

    def __init__(self, items: list[Sensitivity], *, key: str = "", unit: str = "", name: str = "M",
                 total: sympy.Expr | None = None, point: Mapping[sympy.Symbol, sympy.Expr] | None = None) -> None:
        super().__init__(items)
        self.key, self.unit, self.name, self.total = key, unit, name, total
        self.point = dict(point or {})

    def table(self) -> display.Table:
        """Symbol, meaning, value, ∂M/∂x and elasticity per input, as plain table data."""
        from ..core import symbols as symtab

        def meaning(s: sympy.Symbol) -> str:
            try:
                return symtab.info(s).description
            except KeyError:
                return ""

        full = self.point
        rows = tuple((s.symbol.name, meaning(s.symbol), full.get(s.symbol), s.derivative, s.elasticity) for s in self)
        columns = (("symbol", ""), ("meaning", ""), ("value", ""), ("∂/∂symbol", f"{self.unit} per unit"),
                   ("elasticity", ""))
        formats = ("", "", "count", "count", "ratio")
        if any(s.corner for s in self):  # one-sided elasticities, only where some input sits on a corner
            rows = tuple(row + (s.sides()[0][1], s.sides()[1][1]) for row, s in zip(rows, self))
            columns += (("elasticity from below", ""), ("elasticity from above", ""))
            formats += ("ratio", "ratio")
        total = "" if self.total is None else f" = {display.cell_text(self.total, display.unit_format(self.unit))}"
        return display.Table(f"{self.key}{total}: elasticity e means 1 % more of the symbol gives e % more {self.name}",
                             columns, rows, formats)

    def _repr_html_(self) -> str:
        return display.html(self.table())

    def to_frame(self):  # noqa: ANN201 (pandas is optional)
        """One row per symbol as a pandas DataFrame (needs pandas)."""
        return display.frame(self.table())

    def __repr__(self) -> str:
        top = sorted((s for s in self if s.elasticity is not None), key=lambda s: -float(s.elasticity))[:3]
        return display.short("Sensitivities", self.key, f"{len(self)} symbols",
                             "largest elasticity " + ", ".join(f"{s.symbol.name} {float(s.elasticity):.4f}" for s in top)
                             if top else "")


def sensitivities(expr: sympy.Expr, point: Mapping[sympy.Symbol, sympy.Expr],
                  symbols: list[sympy.Symbol] | None = None) -> list[Sensitivity]:
    """Exact derivative and elasticity of ``expr`` at ``point`` for each symbol (default: all free)."""
    total = at_point(expr, point)
    chosen = symbols if symbols is not None else sorted(expr.free_symbols, key=lambda s: s.name)
    # ∂/∂x at the point needs only x free: with a max/min inside, the other symbols' values go in
    # first, so that SymPy builds the Heaviside steps of the max/min over a one-symbol expression
    # (the same numbers, several times faster; a polynomial is differentiated as it is)
    stepped = expr.has(sympy.Max, sympy.Min)
    out = []
    for x in chosen:
        one = extrema.substitute(expr, {s: v for s, v in point.items() if s != x}) if stepped else expr
        out.append(_sensitivity(one, x, point, total))
    return out


def _sensitivity(expr: sympy.Expr, x: sympy.Symbol, point: Mapping[sympy.Symbol, sympy.Expr],
                 total: sympy.Expr) -> Sensitivity:
    """The sensitivity of ``expr`` to ``x`` at ``point``: two-sided, one-sided at a corner, or none."""
    derivative = sympy.diff(expr, x)
    if derivative.has(sympy.Derivative, sympy.Subs):  # SymPy has no derivative of ceil/floor: before the
        return Sensitivity(x, None, None, reason="ceil/floor")  # values go in (ceil(8) is no variable)

    def elasticity(slope: sympy.Expr) -> sympy.Expr | None:
        return slope * point[x] / total if total != 0 else None

    if _tied(expr, x, point[x]):  # on a corner of a max/min: SymPy's Heaviside(0) would give 0 or 1/2
        below, above = (_one_sided(expr, x, point[x], side) for side in (-1, 1))
        if not all(_finite(d) for d in (below, above)):
            return Sensitivity(x, None, None, reason="infinite")
        if below != above:
            return Sensitivity(x, None, None, below, above, elasticity(below), elasticity(above), reason="corner")
        return Sensitivity(x, below, elasticity(below))
    value = at_point(derivative, point)
    if not _finite(value):
        return Sensitivity(x, None, None, reason="infinite")
    return Sensitivity(x, value, elasticity(value))


def _finite(value: sympy.Expr) -> bool:
    """Whether ``value`` is a finite real number (a derivative that exists)."""
    return bool(value.is_number) and not value.has(sympy.Derivative, sympy.Subs, sympy.nan) \
        and value.is_finite is not False and value.is_extended_real is not False


def _tied(expr: sympy.Expr, x: sympy.Symbol, at: sympy.Expr) -> bool:
    """Whether some max/min in ``expr`` (x its only symbol) has two arguments that attain it at x = ``at``."""
    for node in expr.atoms(sympy.Max, sympy.Min):
        values = [arg.xreplace({x: at}) for arg in node.args]
        best = max(values) if isinstance(node, sympy.Max) else min(values)
        if sum(v == best for v in values) > 1:
            return True
    return False


def _one_sided(expr: sympy.Expr, x: sympy.Symbol, at: sympy.Expr, side: int) -> sympy.Expr:
    """∂expr/∂x at x = ``at`` from below (``side`` −1) or above (+1): each max/min, innermost first,
    replaced by the argument it equals just beside ``at`` (x is ``expr``'s only symbol)."""
    while True:
        nodes = [n for n in expr.atoms(sympy.Max, sympy.Min) if not any(a.has(sympy.Max, sympy.Min) for a in n.args)]
        if not nodes:
            return sympy.diff(expr, x).xreplace({x: at})
        expr = extrema.substitute(expr, {n: _beside(n, x, at, side) for n in nodes})


def _beside(node: sympy.Expr, x: sympy.Symbol, at: sympy.Expr, side: int) -> sympy.Expr:
    """The argument a max (min) of smooth arguments equals just beside x = ``at``: among those that
    attain it at ``at``, the one that grows fastest (slowest) in the direction ``side``."""
    values = [arg.xreplace({x: at}) for arg in node.args]
    best = max(values) if isinstance(node, sympy.Max) else min(values)
    tied = [arg for arg, v in zip(node.args, values) if v == best]
    sign = side if isinstance(node, sympy.Max) else -side
    return max(tied, key=lambda arg: sign * sympy.diff(arg, x).xreplace({x: at}))


def at_point(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """Exact value of ``expr`` at a point (all free symbols must be given)."""
    result = expr.xreplace(dict(values))
    missing = result.free_symbols
    if missing:
        names = ", ".join(sorted(s.name for s in missing))
        raise AlgebraError(f"missing values for {names}")
    return sympy.nsimplify(result) if result.has(sympy.Float) else result


# --- a term's value: real, finite, nonnegative ----------------------------------------------------
def term_value(name: str, expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr], at: str | None = None
               ) -> sympy.Expr:
    """The exact value of term ``name`` at a point, or a one-line error if it is not a usable amount.

    ``at`` says where in the error ("at B=1001"); by default, the values of the term's own symbols.
    """
    at = _where(expr, values) if at is None else at
    try:
        value = at_point(expr, values)
    except UserError:
        raise
    except (ValueError, TypeError):  # SymPy cannot order a number that is not real inside a max or min
        raise AlgebraError(_incomparable(name, expr, values, at)) from None
    return check_term(name, value, at)


def substitute_term(name: str, expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """Term ``name`` with some symbols replaced (``extrema.substitute``), or an error naming it when
    a max or min in it cannot be taken of the values (an argument that is not a real number)."""
    try:
        return extrema.substitute(expr, values)
    except UserError:
        raise
    except (ValueError, TypeError):
        raise AlgebraError(_incomparable(name, expr, values, _where(expr, values))) from None


def _where(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr]) -> str:
    """'at x=1, y=100': the values of the symbols of ``expr`` that ``values`` gives (for messages)."""
    from ..core import symbols as symtab

    given = [f"{s.name}={values[s]}" for s in symtab.ordered(expr.free_symbols) if s in values]
    return f"at {', '.join(given)}" if given else "at the given values"


def check_term(name: str, value: sympy.Expr, at: str = "at the given values") -> sympy.Expr:
    """``value`` if it is a real, finite, nonnegative number; else an error naming term ``name``."""
    problem = value_problem(value)
    if problem:
        raise AlgebraError(f"term {name!r} {problem.format(at=at, value=_shown(value))}")
    return value


def value_problem(value: sympy.Expr) -> str:
    """Why ``value`` cannot be a term's amount, as a message template ({at}, {value}); "" if it can."""
    if value.is_Rational:  # the usual case, decided without SymPy's assumptions
        return "" if value >= 0 else NEGATIVE
    if value.has(sympy.nan):
        return "is undefined {at} (0/0, or 0 times infinity)"
    if value.has(sympy.zoo, sympy.oo, sympy.S.NegativeInfinity) or value.is_finite is False:
        return "is infinite {at} (a division by zero, or log2 of 0)"
    real = value.is_extended_real
    if real is None:  # an exact constant SymPy cannot classify at once: its imaginary part decides
        real = value.evalf(30).as_real_imag()[1] == 0
    if not real:
        return "is not a real number {at} ({value}): a square root or log2 of a negative number"
    negative = value.is_negative
    if negative is None:
        negative = bool(value.evalf(30) < 0)
    return NEGATIVE if negative else ""


NEGATIVE = "is negative {at} ({value}); a term adds to the total, so it may not be negative"


def _shown(value: sympy.Expr) -> str:
    """A value for a message: grouped digits for whole numbers, 6 figures for fractions, else SymPy's text."""
    if value.is_Integer:
        return f"{int(value):,}"
    if value.is_Rational or value.is_extended_real:
        return f"{float(value):.6g}"
    return shorten(str(value))


def _incomparable(name: str, expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr], at: str) -> str:
    """The message for a term whose max or min SymPy could not evaluate: which argument is not a real number."""
    for node in sorted(expr.atoms(sympy.Max, sympy.Min), key=sympy.count_ops):
        for arg in node.args:
            try:
                value = arg.xreplace(dict(values))
            except (ValueError, TypeError):
                continue  # an inner max or min: its own arguments are looked at first
            problem = value_problem(value)
            if value.is_number and problem and problem != NEGATIVE:
                return f"term {name!r}: an argument of its max or min {problem.format(at=at, value=_shown(value))}"
    return f"term {name!r}: an argument of its max or min is not a real number {at}"


@dataclass(frozen=True)
class Solution:
    """The largest whole value of one symbol for which a total stays within a budget.

    ``status`` is "ok" (``value`` holds the answer), "none" (even the smallest value exceeds
    the budget), "unbounded" (the total does not grow with the symbol, or stays within the
    budget past ``SEARCH_LIMIT``) or "independent" (the total does not contain the symbol).
    """

    symbol: sympy.Symbol
    status: str
    value: int | None
    budget: sympy.Rational
    total_at_value: sympy.Expr | None
    total_at_next: sympy.Expr | None
    minimum: int
    message: str
    unit: str = ""  # the total's unit ("bytes", "parameters"); set by Formula.solve
    key: str = ""  # the formula solved; set by Formula.solve

    def table(self) -> display.Table:
        """Answer, budget and the totals either side of it, as plain table data."""
        fmt = display.unit_format(self.unit)
        x = self.symbol.name
        rows: list[tuple[object, ...]] = [(f"largest {x}", self.value, self.value), ("budget", self.budget, self.budget)]
        if self.total_at_value is not None:
            at = self.value if self.value is not None else self.minimum
            rows.append((f"total at {x} = {at}", self.total_at_value, self.total_at_value))
        if self.total_at_next is not None:
            nxt = self.value + 1 if self.value is not None else self.minimum
            rows.append((f"total at {x} = {nxt}", self.total_at_next, self.total_at_next))
        rows = [(name, value, display.cell_text(shown, fmt if name != f"largest {x}" else "count"))
                for name, value, shown in rows]
        return display.Table(f"{self.key or 'total'} ≤ budget: {self.message} ({self.status})",
                             (("", ""), ("value", ""), ("shown", self.unit)), tuple(rows))

    def _repr_html_(self) -> str:
        return display.html(self.table())

    def to_frame(self):  # noqa: ANN201 (pandas is optional)
        """The answer and the totals around it as a pandas DataFrame (needs pandas)."""
        return display.frame(self.table())

    def __repr__(self) -> str:
        return display.short("Solution", f"{self.symbol.name} for {self.key}" if self.key else self.symbol.name,
                             f"status={self.status}", f"value={self.value}", self.message)


def solve_max(expr: sympy.Expr, x: sympy.Symbol, budget: sympy.Rational, minimum: int = 1,
              terms: Mapping[str, sympy.Expr] | None = None) -> Solution:
    """Largest integer x ≥ ``minimum`` with expr(x) ≤ budget; expr has no other free symbol.

    ``terms`` (expr's terms by name, summing to it) makes every total a sum of checked terms
    (``term_value``): a term negative or not a real number at a value tried is an error naming
    it, and so is one that is somewhere in the range an answer speaks for (up to the answer, or
    every x for "every x fits"; see ``check_range``), rather than a total that falls below the budget.
    """
    others = expr.free_symbols - {x}
    if others:
        names = ", ".join(sorted(s.name for s in others))
        raise AlgebraError(f"cannot solve for {x.name}: values missing for {names}")
    budget = sympy.Rational(budget)
    f = sympy.Lambda(x, expr)
    varying = {name: t for name, t in (terms or {}).items() if x in t.free_symbols}
    fixed = sympy.Add(*(term_value(name, t, {}) for name, t in (terms or {}).items() if name not in varying))

    def total(n: int) -> sympy.Expr:
        # exact: a Rational for polynomial totals; an exact irrational (sqrt, log) otherwise,
        # which SymPy compares with the budget at whatever precision it takes
        if terms:
            at = {x: sympy.Integer(n)}
            return fixed + sympy.Add(*(term_value(name, t, at, f"at {x.name}={n}") for name, t in varying.items()))
        value = f(n)
        if not value.is_number or value.is_real is False:
            raise AlgebraError(f"the total is not a real number at {x.name}={n}")
        return value

    def covered(last: int) -> None:
        """Every term is a usable amount at each whole x from ``minimum`` to ``last`` (an answer speaks for them)."""
        check_range(varying, x, minimum, last)

    def result(status: str, value: int | None, message: str) -> Solution:
        at = total(value) if value is not None else None
        nxt = total(value + 1) if value is not None else total(minimum)
        if value is not None:
            covered(value + 1)
        return Solution(x, status, value, budget, at, nxt, minimum, message)

    if x not in expr.free_symbols:
        if total(minimum) <= budget:
            covered(SEARCH_LIMIT)
            return Solution(x, "independent", None, budget, total(minimum), None, minimum,
                            f"the total does not depend on {x.name}; it fits for every {x.name}")
        return Solution(x, "none", None, budget, None, total(minimum), minimum,
                        f"the total does not depend on {x.name} and exceeds the budget")
    if total(minimum) > budget:
        return result("none", None, f"nothing fits: even {x.name}={minimum} exceeds the budget")
    try:
        trend = _trend(expr, x, minimum)
    except (ValueError, TypeError, NotImplementedError):  # SymPy cannot take a max/min apart (sqrt(1 − x), irrational roots)
        trend = "unknown"
    if trend == "falls":
        covered(SEARCH_LIMIT)
        return Solution(x, "unbounded", None, budget, total(minimum), None, minimum,
                        f"the total does not grow with {x.name}; every {x.name} ≥ {minimum} fits")
    if trend == "unknown":
        covered(SEARCH_LIMIT)  # a term that fails somewhere is the better answer
        raise AlgebraError(f"cannot show that the total grows monotonically with {x.name}; no solution given")
    lo, hi = minimum, minimum
    while total(hi) <= budget:
        lo, hi = hi, hi * 2
        if hi > SEARCH_LIMIT:
            covered(SEARCH_LIMIT)
            return Solution(x, "unbounded", None, budget, total(lo), None, minimum,
                            f"the total stays within the budget beyond {x.name}={SEARCH_LIMIT}")
    while hi - lo > 1:  # invariant: total(lo) <= budget < total(hi)
        mid = (lo + hi) // 2
        if total(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return result("ok", lo, f"largest {x.name} that fits is {lo}")


def check_range(terms: Mapping[str, sympy.Expr], x: sympy.Symbol, low: int, high: int) -> None:
    """An error naming a term that is negative or not a real number at some whole x in low..high.

    A term proved nonnegative there (``_nonnegative``) is skipped. Any other is tried at ``low``,
    ``high`` and beside every real root of the polynomials in it (where a piece of it can change
    sign, vanish or cross another argument of a max or min), and bisected from the last value
    that passes to the first that fails; the error names the smallest such x found.
    """
    found = []
    for name, expr in terms.items():
        if x in expr.free_symbols and not _nonnegative(expr, x, low):
            bad = _first_failure(expr, x, low, high)
            if bad is not None:
                found.append((bad, name))
    if found:
        n, name = min(found)
        term_value(name, terms[name], {x: sympy.Integer(n)}, f"at {x.name}={n}")  # raises: it fails there


def _fails(expr: sympy.Expr, x: sympy.Symbol, n: int) -> bool:
    """Whether ``expr`` is not a usable term value (``value_problem``) at x = n."""
    try:
        value = at_point(expr, {x: sympy.Integer(n)})
    except UserError:
        raise
    except (ValueError, TypeError):
        return True
    return value_problem(value) != ""


def _first_failure(expr: sympy.Expr, x: sympy.Symbol, low: int, high: int) -> int | None:
    """The first whole x in low..high found where ``expr`` fails (see ``check_range``), or None."""
    points = {low, high}
    for root in _roots(expr, x):
        below = int(sympy.floor(root))
        points |= {p for p in (below, below + 1) if low <= p <= high}
    passed = None
    for n in sorted(points):
        if not _fails(expr, x, n):
            passed = n
            continue
        if passed is None:
            return n
        fails = n
        while fails - passed > 1:  # passed passes, fails fails
            mid = (passed + fails) // 2
            passed, fails = (passed, mid) if _fails(expr, x, mid) else (mid, fails)
        return fails
    return None


def _roots(expr: sympy.Expr, x: sympy.Symbol) -> list[sympy.Expr]:
    """Real roots of the largest polynomials in x inside ``expr`` and of the differences of each
    max's or min's arguments (where a piece of ``expr`` can change sign, vanish or switch)."""
    if x not in expr.free_symbols:
        return []
    if expr.is_polynomial(x):
        return _real_roots(expr, x)
    found = [root for arg in expr.args for root in _roots(arg, x)]
    if isinstance(expr, (sympy.Max, sympy.Min)):
        found += [root for i, a in enumerate(expr.args) for b in expr.args[i + 1:] for root in _real_roots(a - b, x)]
    return found


def _real_roots(poly: sympy.Expr, x: sympy.Symbol) -> list[sympy.Expr]:
    """The real roots of ``poly`` in x; none when it is not a polynomial in x SymPy can isolate them of."""
    if not poly.has(x) or not poly.is_polynomial(x):
        return []
    try:
        return sympy.Poly(poly, x).real_roots()
    except (sympy.PolynomialError, NotImplementedError):  # e.g. irrational coefficients
        return []


def _nonnegative(expr: sympy.Expr, x: sympy.Symbol, low: int) -> bool:
    """Whether ``expr`` is proved a real number ≥ 0 for every real x ≥ ``low``: a number ≥ 0, a
    polynomial whose coefficients in x − low are all ≥ 0, or a sum, product, max, min, ceil or
    floor of such, or a positive power of one."""
    if x not in expr.free_symbols:
        return bool(expr.is_number) and value_problem(expr) == ""
    if expr.is_polynomial(x):
        try:
            return all(c >= 0 for c in sympy.Poly(expr, x).shift(low).all_coeffs())
        except (sympy.PolynomialError, TypeError):
            return False
    if isinstance(expr, (sympy.Add, sympy.Mul, sympy.Max, sympy.Min, sympy.ceiling, sympy.floor)):
        return all(_nonnegative(a, x, low) for a in expr.args)
    if isinstance(expr, sympy.Pow):
        return bool(expr.exp.is_positive) and _nonnegative(expr.base, x, low)
    return False


def _trend(expr: sympy.Expr, x: sympy.Symbol, minimum: int) -> str:
    """'grows' (nondecreasing for x ≥ minimum), 'falls' (nonincreasing) or 'unknown'."""
    if expr.has(sympy.Max, sympy.Min):  # exact piece by piece, and far cheaper than SymPy's steps through a Max
        try:
            trend = _segments_trend(expr, x, minimum)
        except (ValueError, TypeError, NotImplementedError, sympy.PolynomialError):  # e.g. irrational coefficients
            trend = "unknown"
        if trend != "unknown":
            return "unknown" if trend == "neither" else trend
    derivative = sympy.diff(expr, x)
    shifted = sympy.expand(derivative.subs(x, x + minimum))  # x > 0 here means x > minimum
    if expr.is_polynomial(x):
        coeffs = sympy.Poly(shifted, x).all_coeffs() if shifted.has(x) else [shifted]
        if all(c >= 0 for c in coeffs):
            return "grows"
        if all(c <= 0 for c in coeffs):
            return "falls"
        roots = [r for r in sympy.Poly(derivative, x).real_roots() if r >= minimum]
        if not roots:
            return "grows" if derivative.subs(x, minimum) > 0 else "falls"
        return "unknown"
    if shifted.is_nonnegative:
        return "grows"
    if shifted.is_nonpositive:
        return "falls"
    return _piecewise_trend(expr, x, minimum)


HEAD_LIMIT = 64  # integers compared one by one below the last crossing of a Max/Min's arguments


def _piecewise_trend(expr: sympy.Expr, x: sympy.Symbol, minimum: int) -> str:
    """The trend of a polynomial with Max/Min of polynomials in it (e.g. a term only at x = 1).

    Beyond the last real crossing of any Max/Min's arguments each one always picks the same
    argument, so the expression is a polynomial there; the few integers from ``minimum`` up to
    that point are compared one by one. Anything else is 'unknown'.
    """
    tail, start = expr, minimum
    while True:
        nodes = [n for n in tail.atoms(sympy.Max, sympy.Min) if not any(arg.has(sympy.Max, sympy.Min) for arg in n.args)]
        if not nodes:
            break
        for node in nodes:
            if not all(arg.is_polynomial(x) for arg in node.args):
                return "unknown"
            start = max([start, *_crossings(node.args, x)])
        if start - minimum > HEAD_LIMIT:
            return _composed_trend(expr, x, minimum)
        tail = tail.xreplace({n: _picked(n, x, start) for n in nodes})
    if not tail.is_polynomial(x) or tail.has(sympy.Max, sympy.Min):
        return "unknown"
    trend = _trend(tail, x, start) if tail.has(x) else "grows"
    if trend == "unknown":
        return "unknown"
    values = [sympy.Rational(expr.xreplace({x: n})) for n in range(minimum, start + 1)]
    steps = list(zip(values, values[1:]))
    if trend == "grows" and all(lo <= hi for lo, hi in steps):
        return "grows"
    if trend == "falls" and all(lo >= hi for lo, hi in steps):
        return "falls"
    return "unknown"


def _composed_trend(expr: sympy.Expr, x: sympy.Symbol, minimum: int) -> str:
    """'grows' when expr is a polynomial with nonnegative coefficients in x and in Max/Min nodes whose
    arguments all grow (a Max or Min of nondecreasing functions is nondecreasing), e.g. a sliding-window
    cache min(S, W − 1) far from S = 1; else 'unknown'."""
    nodes = list(expr.atoms(sympy.Max, sympy.Min))
    stand = {n: sympy.Dummy(positive=True) for n in nodes}
    poly = expr.xreplace(stand)
    if poly.has(sympy.Max, sympy.Min) or not poly.is_polynomial(x, *stand.values()):
        return "unknown"
    if any(_trend(arg, x, minimum) != "grows" for n in nodes for arg in n.args):
        return "unknown"
    shifted = sympy.expand(poly.subs(x, x + minimum))
    terms = sympy.Poly(shifted, x, *stand.values()).terms()
    return "grows" if all(c >= 0 for powers, c in terms if any(powers)) else "unknown"


SEGMENT_LIMIT = 512  # polynomial pieces tried before the trend is given up as unknown


def _segments_trend(expr: sympy.Expr, x: sympy.Symbol, minimum: int) -> str:
    """The trend of a sum with nested Max/Min of polynomials whose arguments also fall (FSDP2's buffers less
    the activations they free, ``max(0, a − b·S)``), piece by piece over the whole numbers: 'grows', 'falls',
    'neither' (shown to rise somewhere and fall somewhere) or 'unknown'.

    Between two crossings of a Max/Min's arguments each one picks the same argument, so the expression
    is one polynomial there; the innermost maxima split [minimum, ∞) into such stretches, the next level
    splits each stretch again, and so on. It grows where every piece grows on its stretch and no step
    from one stretch to the next falls (falls likewise); anything else is 'unknown'.
    """
    leaves: list[tuple[int, int | None, sympy.Expr]] = []

    def split(e: sympy.Expr, lo: int, hi: int | None) -> bool:
        nodes = [n for n in e.atoms(sympy.Max, sympy.Min) if not any(a.has(sympy.Max, sympy.Min) for a in n.args)]
        if not nodes:
            e = sympy.expand(e)
            leaves.append((lo, hi, e))
            return e.is_polynomial(x) and len(leaves) <= SEGMENT_LIMIT
        cuts, options = set(), {}
        for node in nodes:
            args = options[node] = [sympy.expand(arg) for arg in node.args]  # evaluated: the levels above are not
            if not all(arg.is_polynomial(x) for arg in args):
                return False
            cuts |= {c for c in _crossings(args, x) if c > lo and (hi is None or c <= hi)}
        starts = [lo, *sorted(cuts)]
        ends: list[int | None] = [c - 1 for c in starts[1:]] + [hi]
        return all(split(_unevaluated(e, {n: _picked(n, x, a, options[n]) for n in nodes}), a, b)
                   for a, b in zip(starts, ends))

    if not split(expr, minimum, None):
        return "unknown"
    trends = {_stretch_trend(p, x, a, b) for a, b, p in leaves}
    steps = [sympy.Rational(right.xreplace({x: b + 1}) - left.xreplace({x: b}))
             for (_, b, left), (_, _, right) in zip(leaves, leaves[1:]) if b is not None]
    rises, falls = "grows" in trends or any(s > 0 for s in steps), "falls" in trends or any(s < 0 for s in steps)
    if rises and falls:
        return "neither"  # shown: it rises somewhere and falls somewhere (no other check can show a trend)
    if "unknown" in trends:
        return "unknown"
    return "falls" if falls else "grows"


def _crossings(args: list[sympy.Expr] | tuple[sympy.Expr, ...], x: sympy.Symbol) -> list[int]:
    """The first whole number past each real point where two of a Max/Min's polynomial arguments cross (SymPy's
    errors pass through: a crossing it cannot place leaves the trend unknown, never assumed absent)."""
    found = []
    for i, first in enumerate(args):
        for second in args[i + 1:]:
            gap = sympy.expand(first - second)
            if gap.has(x):
                found += [int(sympy.floor(r)) + 1 for r in sympy.Poly(gap, x).real_roots()]
    return found


def _unevaluated(expr: sympy.Expr, picks: Mapping[sympy.Expr, sympy.Expr]) -> sympy.Expr:
    """``expr`` with each Max/Min node replaced by its pick, the nodes above it left as they are (SymPy's Max would
    otherwise compare its arguments again at every replacement: seconds on a plan's peak)."""
    with sympy.evaluate(False):
        return expr.xreplace(picks)


def _stretch_trend(poly: sympy.Expr, x: sympy.Symbol, lo: int, hi: int | None) -> str:
    """'grows', 'falls', 'flat' or 'unknown': a polynomial over the whole numbers lo..hi (hi None: no end)."""
    if not poly.has(x) or hi == lo:
        return "flat"
    derivative = sympy.diff(poly, x)
    turns = [r for r in sympy.Poly(derivative, x).real_roots() if r > lo and (hi is None or r < hi)]
    last = max([lo, *(int(sympy.floor(r)) + 1 for r in turns)])
    if last - lo > HEAD_LIMIT:
        return "unknown"
    head = [sympy.Rational(poly.xreplace({x: n})) for n in range(lo, (last if hi is None else min(last, hi)) + 1)]
    steps = [b - a for a, b in zip(head, head[1:])]
    if hi is None:  # past every turn the derivative keeps one sign, never zero
        steps.append(sympy.Rational(derivative.xreplace({x: last + 1})))
    elif last < hi:  # no turn inside (last, hi): monotone there, so its one step says which way
        steps.append(sympy.Rational(poly.xreplace({x: hi})) - head[-1])
    if all(step >= 0 for step in steps):
        return "grows" if any(step > 0 for step in steps) else "flat"
    if all(step <= 0 for step in steps):
        return "falls"
    return "unknown"


def _picked(node: sympy.Expr, x: sympy.Symbol, at: int, args: list[sympy.Expr] | None = None) -> sympy.Expr:
    """The argument a Max (Min) of polynomials takes at ``at``, and beyond it when no crossing is left (``args``: its
    arguments evaluated, where the node itself was built unevaluated)."""
    args = list(node.args) if args is None else args
    values = [sympy.Rational(arg.xreplace({x: at})) for arg in args]
    return args[values.index(max(values) if isinstance(node, sympy.Max) else min(values))]
