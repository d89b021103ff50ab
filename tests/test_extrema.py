"""``extrema``: a Max rebuilt through ``maximum`` is the expression SymPy's own rebuild gives.

``Formula`` expands defined symbols and substitutes values with ``extrema.substitute`` instead of
``xreplace`` (which rebuilds every Max with SymPy's pairwise search). These tests rebuild the
same expressions the SymPy way and compare: the step peaks of real plans, partial substitutions
and derivatives.
"""

from __future__ import annotations

import pytest
import sympy

from symbolic import planning
from symbolic.core.symbols import B, H, L, N, S, V, d_ff
from symbolic.math import extrema

PLANS = [
    ("llama-3-8b", "train", {"batch": 1, "seq": 4096}),
    ("gpt2", "train", {"batch": 8, "seq": 1024, "precision": "fp32"}),
    ("mixtral-8x7b", "train", {"batch": 2, "seq": 2048, "tp": 2, "dp": 4, "zero": 3}),
    ("llama-3-8b", "train", {"batch": 1, "seq": 2048, "lora_rank": 16}),
]


def sympy_composed(formula) -> sympy.Expr:
    """The total with every defined symbol expanded by plain ``xreplace`` (SymPy's own Max rebuild)."""
    expr = formula.expr
    table = {s: f.expr for s, f in formula.defined.items()}
    while expr.free_symbols & table.keys():
        expr = expr.xreplace({s: table[s] for s in expr.free_symbols & table.keys()})
    return expr


@pytest.fixture(scope="module")
def peaks() -> list:
    return [planning.plan(model, mode, **options).formula for model, mode, options in PLANS]


def test_expanding_a_plans_peak_gives_sympys_expression(peaks) -> None:
    for formula in peaks:
        assert formula.expr.has(sympy.Max) and N in formula.defined  # a peak with N inside its phases
        assert formula.composed() == sympy_composed(formula)


def test_partial_substitution_gives_sympys_expression(peaks) -> None:
    for formula in peaks:
        names = {s.name for s in formula.inputs}
        point = {s: v for s, v in {B: 3, S: 1000, L: 7, V: 32000}.items() if s.name in names}
        expected = sympy_composed(formula).xreplace(point)
        assert formula.subs(point) == expected
        assert formula.subs(point).has(sympy.Max) == expected.has(sympy.Max)


def test_a_max_of_numbers_is_a_number() -> None:
    expr = sympy.Max(H * d_ff, 2 * H * B, evaluate=False) + L
    got = extrema.substitute(expr, {H: 4, d_ff: 10, B: 3, L: 1})
    assert got == 41 and got.is_Integer


def test_a_rebuilt_max_drops_what_the_substitution_makes_smaller() -> None:
    # Max(d_ff, 4·H) with d_ff = 4·H + H: the second argument is then provably smaller, as SymPy finds too
    expr = sympy.Max(d_ff, 4 * H) + B
    assert extrema.substitute(expr, {d_ff: 5 * H}) == 5 * H + B == expr.xreplace({d_ff: 5 * H})
    # undecided after the substitution: both arguments stay, in SymPy's order
    expr = sympy.Max(d_ff, 4 * H * B)
    assert extrema.substitute(expr, {d_ff: 2 * H}) == expr.xreplace({d_ff: 2 * H}) == sympy.Max(2 * H, 4 * H * B)


def test_without_a_max_it_is_xreplace() -> None:
    expr = 4 * H**2 * L + V * H
    assert extrema.substitute(expr, {H: 2 * d_ff}) == expr.xreplace({H: 2 * d_ff})
    assert extrema.substitute(expr, {}) is expr
    peak = sympy.Max(H * d_ff, 2 * H * B, evaluate=False)
    assert extrema.substitute(peak, {S: 3}) is peak  # nothing to replace: the same object, not a rebuild


def test_maximum_remembers_its_answers() -> None:
    args = (2 * H * d_ff + d_ff, H * d_ff + 2 * d_ff, H * B * S)
    first = extrema.maximum(*args)
    assert extrema.maximum(*args) is first and first == sympy.Max(*args)


def test_equal_numbers_of_other_types_are_remembered_apart() -> None:
    # 2 and 2.0 are equal with one hash: the answer for one must not be the other's
    assert extrema.substitute(sympy.Max(H, B), {H: 2}) == sympy.Max(2, B)
    floats = extrema.substitute(sympy.Max(H, B), {H: 2.0})
    assert floats == sympy.Max(2.0, B) == sympy.Max(H, B).xreplace({H: 2.0}) and floats.has(sympy.Float)


def test_a_min_under_its_own_argument_is_absorbed_as_sympy_does() -> None:
    W = sympy.Symbol("W", positive=True, integer=True)
    assert extrema.maximum(S, sympy.Min(S, W - 1)) == S == sympy.Max(S, sympy.Min(S, W - 1))
    window = sympy.Max(S, sympy.Min(B, W - 1), evaluate=False)
    assert extrema.substitute(window, {B: S}) == S == window.xreplace({B: S})

