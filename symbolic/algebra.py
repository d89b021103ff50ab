"""Operations on plain SymPy expressions: sensitivity and integer solving under a budget.

These sit below ``Formula`` so that its methods can use them without importing upwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sympy

SEARCH_LIMIT = 2**62


def elasticity(expr: sympy.Expr, x: sympy.Symbol) -> sympy.Expr:
    """x/M · ∂M/∂x: the percentage change of M for a 1 % change of x."""
    return sympy.simplify(x * sympy.diff(expr, x) / expr)


@dataclass(frozen=True)
class Sensitivity:
    """∂M/∂x and x/M·∂M/∂x of a total at one point (None where M has no derivative in x,
    e.g. a ceil or floor of x: piecewise constant, so the derivative is 0 or undefined)."""

    symbol: sympy.Symbol
    derivative: sympy.Expr | None
    elasticity: sympy.Expr | None


def sensitivities(expr: sympy.Expr, point: Mapping[sympy.Symbol, sympy.Expr],
                  symbols: list[sympy.Symbol] | None = None) -> list[Sensitivity]:
    """Exact derivative and elasticity of ``expr`` at ``point`` for each symbol (default: all free)."""
    total = at_point(expr, point)
    chosen = symbols if symbols is not None else sorted(expr.free_symbols, key=lambda s: s.name)
    out = []
    for x in chosen:
        derivative = at_point(sympy.diff(expr, x), point)
        if not derivative.is_number or derivative.has(sympy.Derivative, sympy.Subs) or derivative.is_finite is False:
            out.append(Sensitivity(x, None, None))
            continue
        elasticity = derivative * point[x] / total if total != 0 else None
        out.append(Sensitivity(x, derivative, elasticity))
    return out


def at_point(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """Exact value of ``expr`` at a point (all free symbols must be given)."""
    result = expr.xreplace(dict(values))
    missing = result.free_symbols
    if missing:
        names = ", ".join(sorted(s.name for s in missing))
        raise ValueError(f"missing values for {names}")
    return sympy.nsimplify(result) if result.has(sympy.Float) else result


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


def solve_max(expr: sympy.Expr, x: sympy.Symbol, budget: sympy.Rational, minimum: int = 1) -> Solution:
    """Largest integer x ≥ ``minimum`` with expr(x) ≤ budget; expr has no other free symbol."""
    others = expr.free_symbols - {x}
    if others:
        names = ", ".join(sorted(s.name for s in others))
        raise ValueError(f"cannot solve for {x.name}: values missing for {names}")
    budget = sympy.Rational(budget)
    f = sympy.Lambda(x, expr)

    def total(n: int) -> sympy.Expr:
        # exact: a Rational for polynomial totals; an exact irrational (sqrt, log) otherwise,
        # which SymPy compares with the budget at whatever precision it takes
        value = f(n)
        if not value.is_number or value.is_real is False:
            raise ValueError(f"the total is not a real number at {x.name}={n}")
        return value

    def result(status: str, value: int | None, message: str) -> Solution:
        at = total(value) if value is not None else None
        nxt = total(value + 1) if value is not None else total(minimum)
        return Solution(x, status, value, budget, at, nxt, minimum, message)

    if x not in expr.free_symbols:
        if total(minimum) <= budget:
            return Solution(x, "independent", None, budget, total(minimum), None, minimum,
                            f"the total does not depend on {x.name}; it fits for every {x.name}")
        return Solution(x, "none", None, budget, None, total(minimum), minimum,
                        f"the total does not depend on {x.name} and exceeds the budget")
    if total(minimum) > budget:
        return result("none", None, f"nothing fits: even {x.name}={minimum} exceeds the budget")
    trend = _trend(expr, x, minimum)
    if trend == "falls":
        return Solution(x, "unbounded", None, budget, total(minimum), None, minimum,
                        f"the total does not grow with {x.name}; every {x.name} ≥ {minimum} fits")
    if trend == "unknown":
        raise ValueError(f"cannot show that the total grows monotonically with {x.name}; no solution given")
    lo, hi = minimum, minimum
    while total(hi) <= budget:
        lo, hi = hi, hi * 2
        if hi > SEARCH_LIMIT:
            return Solution(x, "unbounded", None, budget, total(lo), None, minimum,
                            f"the total stays within the budget beyond {x.name}={SEARCH_LIMIT}")
    while hi - lo > 1:  # invariant: total(lo) <= budget < total(hi)
        mid = (lo + hi) // 2
        if total(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return result("ok", lo, f"largest {x.name} that fits is {lo}")


def _trend(expr: sympy.Expr, x: sympy.Symbol, minimum: int) -> str:
    """'grows' (nondecreasing for x ≥ minimum), 'falls' (nonincreasing) or 'unknown'."""
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
            for i, first in enumerate(node.args):
                for second in node.args[i + 1:]:
                    gap = sympy.expand(first - second)
                    if gap.has(x):
                        roots = sympy.Poly(gap, x).real_roots()
                        start = max([start] + [int(sympy.floor(r)) + 1 for r in roots])
        if start - minimum > HEAD_LIMIT:
            return "unknown"
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


def _picked(node: sympy.Expr, x: sympy.Symbol, at: int) -> sympy.Expr:
    """The argument a Max (Min) of polynomials takes at ``at``, and beyond it when no crossing is left."""
    values = [sympy.Rational(arg.xreplace({x: at})) for arg in node.args]
    best = max(values) if isinstance(node, sympy.Max) else min(values)
    return node.args[values.index(best)]
