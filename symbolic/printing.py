"""LaTeX and plain-text printing of expressions with the symbol table's display names.

Like SymPy's own printers: expressions carry no formatting; this module renders them. Sums of
terms are joined here in the author's order because SymPy's ``Add`` reorders its arguments.
"""

from __future__ import annotations

from collections.abc import Iterable

import sympy
from sympy.printing.latex import LatexPrinter
from sympy.printing.str import StrPrinter

from . import symbols as symtab


class _Latex(LatexPrinter):
    """SymPy's LaTeX printer with our symbol names, ceilings and floors."""

    def _print_Symbol(self, expr: sympy.Symbol, style: str = "plain") -> str:
        try:
            return symtab.info(expr).latex
        except KeyError:
            return super()._print_Symbol(expr)


class _Text(StrPrinter):
    """Plain text with ``·`` for products of symbols (4·H^2) — for terminals."""

    def _print_Pow(self, expr: sympy.Pow, rational: bool = False) -> str:
        base, exp = expr.as_base_exp()
        if exp == sympy.Rational(1, 2):
            return f"sqrt({self._print(base)})"
        if exp.is_Integer and exp > 0:
            return f"{self.parenthesize(base, 60)}^{self._print(exp)}"
        return super()._print_Pow(expr, rational)


_LATEX = _Latex({"mul_symbol": None, "fold_short_frac": False})
_LATEX_DOT = _Latex({"mul_symbol": "dot"})
_TEXT = _Text()


def latex(expr: sympy.Expr, *, dot: bool = False) -> str:
    """LaTeX for one expression (``dot=True`` writes explicit ``\\cdot`` products)."""
    return (_LATEX_DOT if dot else _LATEX).doprint(expr)


def text(expr: sympy.Expr) -> str:
    """One-line plain text for one expression."""
    return _TEXT.doprint(expr).replace("*", "·")


def join_latex(parts: Iterable[sympy.Expr], *, dot: bool = False) -> str:
    """Sum of expressions in the given order, with '-' for negative parts."""
    return _join([latex(p, dot=dot) for p in parts])


def join_text(parts: Iterable[sympy.Expr]) -> str:
    """Plain-text sum of expressions in the given order."""
    return _join([text(p) for p in parts])


def _join(pieces: list[str]) -> str:
    if not pieces:
        return "0"
    out = pieces[0]
    for piece in pieces[1:]:
        out += f" - {piece[1:].lstrip()}" if piece.startswith("-") else f" + {piece}"
    return out
