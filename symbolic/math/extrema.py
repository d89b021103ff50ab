"""Maxima of polynomials in nonnegative symbols, built without SymPy's pairwise search.

``sympy.Max`` drops an argument that another one provably exceeds, asking its assumption system
about every pair, each time a Max is built, and again each time one is rebuilt (``xreplace``,
putting N's formula in for N). The step peaks are such maxima, so the planner, ``Formula``'s
expansions and every substitution into a peak spent most of their time there. ``maximum`` makes
the same proofs from the coefficients of each difference and remembers its answers; ``substitute``
is ``xreplace`` with every rebuilt Max made by ``maximum``. Both give SymPy's value at every
point; on the step peaks and the planner's formulas they give SymPy's very expression (the tests
compare), but not always elsewhere: ``maximum`` may drop an argument SymPy cannot prove smaller
(its cofactor proof is the stronger one), or keep one SymPy absorbs by a rule it lacks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache

import sympy

BIG = 1000  # a large size, for the sample points in _at_least


def maximum(*args: sympy.Expr) -> sympy.Expr:
    """``sympy.Max(*args)`` for polynomials in nonnegative symbols, without SymPy's slow search.

    SymPy's Max drops an argument another one provably exceeds and keeps the rest, asking its
    assumption system about every pair (about 110 ms for the step peaks of ``peak_pytorch``).
    The same two proofs are made here directly on ``big − small``: expanded, it has no negative
    coefficient; or, its terms' common monomial taken out, what is left is known to be
    nonnegative (``d_ff·(H − 1)`` with H a positive integer). An inner Max or Min of
    nonnegative arguments counts as one more nonnegative symbol. The arguments no other one
    dominates are kept unevaluated (``evaluate=False``; SymPy orders them the same way); so is
    a Min that has another argument among its own (``Max(S, Min(S, W))`` is S), as in SymPy.
    Only true inequalities are used, so the value is ``sympy.Max``'s at every point, and on the
    step peaks the expression is identical (``tests/test_activations_pytorch.py``,
    ``tests/test_extrema.py``). With a symbol not known to be nonnegative, or anything but
    polynomials, it is ``sympy.Max``. Answers are remembered (expressions are immutable): a
    planner asks the same ones again for every layout and plan of a model. The arguments are
    sympified first, so that 2 and 2.0 (equal, with one hash) are remembered apart.
    """
    return _maximum(*map(sympy.sympify, args))


def shifted(expr: sympy.Expr, delta: sympy.Expr) -> sympy.Expr:
    """``expr + delta`` with ``delta`` moved inside a Max at the top of ``expr`` (max(a, b) + c = max(a + c, b + c), an
    identity), so that the sum joins an enclosing ``maximum`` as more arguments and a printed max breaks at its
    commas instead of holding a max inside a sum."""
    if isinstance(expr, sympy.Add):
        tops = [arg for arg in expr.args if isinstance(arg, sympy.Max)]
        if len(tops) == 1:
            return maximum(*(expr - tops[0] + arg + delta for arg in tops[0].args))
    if isinstance(expr, sympy.Max):
        return maximum(*(arg + delta for arg in expr.args))
    return expr + delta


@lru_cache(maxsize=4096)
def _maximum(*args: sympy.Expr) -> sympy.Expr:
    flat = (y for x in args for y in (x.args if isinstance(x, sympy.Max) else (x,)))
    exprs = list(dict.fromkeys(flat))  # Max(Max(a, b), c) is Max(a, b, c), as SymPy flattens it
    exprs = [x for x in exprs if not (isinstance(x, sympy.Min) and any(y in x.args for y in exprs))]
    inner = set().union(*(x.atoms(sympy.Max, sympy.Min) for x in exprs))
    stand_in = {m: sympy.Dummy(nonnegative=True) for m in inner}
    plain = [x.xreplace(stand_in) for x in exprs]
    gens = sorted(set().union(*(x.free_symbols for x in plain)), key=sympy.default_sort_key)
    if len(exprs) < 2 or not gens or not all(s.is_nonnegative for s in gens) or not all(m.is_nonnegative for m in inner):
        return sympy.Max(*exprs)
    if not all(x.is_polynomial(*gens) for x in plain):
        plain = _cleared(plain, gens)  # N/n_d, H/t: one positive monomial denominator for all
        if plain is None:
            return sympy.Max(*exprs)
    polys: dict[sympy.Poly, sympy.Expr] = {}
    for x, px in zip(exprs, plain):
        polys.setdefault(sympy.Poly(px, *gens), x)  # equal polynomials: the first one stands for both
    kept = [x for p, x in polys.items() if not any(q is not p and _at_least(q - p) for q in polys)]
    return kept[0] if len(kept) == 1 else sympy.Max(*kept, evaluate=False)


def _cleared(exprs: list[sympy.Expr], gens: list[sympy.Symbol]) -> list[sympy.Expr] | None:
    """``exprs`` times one common denominator when every denominator is a product of powers of
    positive symbols (so the order of the arguments is unchanged), else None."""
    expanded = [sympy.expand(x) for x in exprs]
    powers: dict[sympy.Expr, int] = {}
    for x in expanded:
        for term in sympy.Add.make_args(x):
            for base, exp in term.as_powers_dict().items():
                if exp.is_negative and not base.is_Number:
                    if not (base.is_Symbol and base.is_positive and exp.is_integer):
                        return None
                    powers[base] = max(powers.get(base, 0), int(-exp))
    common = sympy.Mul(*(b**e for b, e in powers.items()))
    out = [sympy.expand(x * common) for x in expanded]
    return out if all(x.is_polynomial(*gens) for x in out) else None


def _at_least(gap: sympy.Poly) -> bool:
    """Whether ``gap`` (= big − small, see ``maximum``) is proved ≥ 0 at nonnegative symbols."""
    if all(c >= 0 for c in gap.coeffs()):
        return True
    _, rest = gap.terms_gcd()
    # SymPy's proofs are sound: a cofactor negative somewhere is never proved nonnegative, and
    # evaluating it at a few points is far cheaper than asking (most cofactors fail here)
    low = [1 if g.is_integer and g.is_positive else 0 for g in rest.gens]
    points = [low] + [[BIG if i == j else x for j, x in enumerate(low)] for i in range(len(low))]
    points += [[x if i == j else BIG for j, x in enumerate(low)] for i in range(len(low))]
    terms = rest.terms()
    if any(sum(c * math.prod(x**e for x, e in zip(point, m)) for m, c in terms) < 0 for point in points):
        return False
    return rest.as_expr().is_nonnegative is True


def substitute(expr: sympy.Basic, mapping: Mapping[sympy.Basic, sympy.Basic]) -> sympy.Basic:
    """``expr.xreplace(mapping)`` with every Max it rebuilds made by ``maximum`` (see the module docstring).

    A node is rebuilt only when one of its arguments changed (``xreplace`` also rebuilds on a hit
    that maps a node to itself: the same expression either way).
    """
    if not mapping or not expr.has(sympy.Max):
        return expr.xreplace(mapping)
    return _replaced(expr, mapping)


def _replaced(expr: sympy.Basic, mapping: Mapping[sympy.Basic, sympy.Basic]) -> sympy.Basic:
    if expr in mapping:
        return mapping[expr]
    if not isinstance(expr, sympy.Basic) or not expr.args:
        return expr
    args = [_replaced(arg, mapping) for arg in expr.args]
    if all(new is old for new, old in zip(args, expr.args)):
        return expr
    return maximum(*args) if isinstance(expr, sympy.Max) else expr.func(*args)
