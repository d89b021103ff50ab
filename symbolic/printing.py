"""LaTeX and plain-text printing of expressions with the symbol table's display names.

Like SymPy's own printers: expressions carry no formatting; this module renders them. Sums of
terms are joined here in the author's order because SymPy's ``Add`` reorders its arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sympy
from sympy.printing.latex import LatexPrinter
from sympy.printing.str import StrPrinter

from . import symbols as symtab


def number_latex(value: sympy.Rational | int) -> str:
    """A number as LaTeX: 123{,}417{,}600 (thousands grouped), \\frac{1}{2} for fractions."""
    value = sympy.Rational(value)
    if value.is_Integer:
        text = f"{int(value):,}"
        return text.replace(",", "{,}") if abs(int(value)) >= 10_000 else text.replace(",", "")
    if value.q in (2, 4, 5, 8, 10, 20, 25, 40, 50, 100, 1000):
        return f"{float(value):g}"
    return rf"\frac{{{int(value.p)}}}{{{int(value.q)}}}"


class _Latex(LatexPrinter):
    """SymPy's LaTeX printer with our symbol names; symbols in ``values`` print as numbers."""

    def __init__(self, settings: dict[str, object] | None = None,
                 values: Mapping[sympy.Symbol, sympy.Rational] | None = None) -> None:
        super().__init__(settings)
        self.values = values or {}

    def _print_Symbol(self, expr: sympy.Symbol, style: str = "plain") -> str:
        if expr in self.values:
            return number_latex(self.values[expr])
        try:
            return symtab.info(expr).latex
        except KeyError:
            return super()._print_Symbol(expr)


class _Text(StrPrinter):
    """Plain text with ``·`` for products of symbols (4·H^2) — for terminals.

    Symbols named in ``values`` print as their numbers (a hand calculation: 4096^2·8/32).
    """

    def __init__(self, values: Mapping[str, object] | None = None) -> None:
        super().__init__()
        self.values = values or {}

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        return str(self.values[expr.name]) if expr.name in self.values else expr.name

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


def latex_with_numbers(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Rational]) -> str:
    """LaTeX of ``expr`` with every symbol in ``values`` written as its number, products as \\cdot
    (so that 4·8·1024 does not read as 481024); printed, not evaluated."""
    return _Latex({"mul_symbol": "dot"}, values).doprint(expr)


def text_with_numbers(expr: sympy.Expr, values: Mapping[str, object]) -> str:
    """Plain text of ``expr`` with each symbol named in ``values`` printed as its number."""
    return _Text(values).doprint(expr).replace("*", "·")


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
