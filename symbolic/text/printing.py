"""LaTeX and plain-text printing of expressions with the symbol table's display names.

Like SymPy's own printers: expressions carry no formatting; this module renders them. Sums of
terms are joined here in the author's order because SymPy's ``Add`` reorders its arguments.

``to_text`` prints an expression back in the formula grammar of ``symbolic.text.parsing`` (which
re-exports it), so that parsing the printed text gives an equal expression.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import sympy
from sympy.printing.latex import LatexPrinter
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.str import StrPrinter

from ..core import symbols as symtab


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

    def _print_Integer(self, expr: sympy.Integer) -> str:
        """A whole-number constant grouped as a substituted value is: 419{,}430{,}400, but 4096."""
        return number_latex(expr)

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


def summands(parts: Iterable[sympy.Expr]) -> list[sympy.Expr]:
    """The parts a printed sum shows: all but those that are exactly 0 (a term its author counts as
    zero, such as an output head tied to the embedding, would only add '+ 0'); one 0 if all are."""
    parts = list(parts)
    return [p for p in parts if not (p.is_Number and p == 0)] or parts[:1]


def join_latex(parts: Iterable[sympy.Expr], *, dot: bool = False) -> str:
    """Sum of expressions in the given order, with '-' for negative parts (zero parts left out)."""
    return _join([latex(p, dot=dot) for p in summands(parts)])


def join_text(parts: Iterable[sympy.Expr]) -> str:
    """Plain-text sum of expressions in the given order (zero parts left out)."""
    return _join([text(p) for p in summands(parts)])


def _join(pieces: list[str]) -> str:
    if not pieces:
        return "0"
    out = pieces[0]
    for piece in pieces[1:]:
        out += f" - {piece[1:].lstrip()}" if piece.startswith("-") else f" + {piece}"
    return out


# --- the formula grammar's printer (symbolic.text.parsing reads what it writes) ---------------------

_NAME_RUN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a name as symbolic.text.parsing lexes it
_LOG2 = sympy.Function("log2")
_PRINTABLE = (
    sympy.Symbol,
    sympy.Rational,
    sympy.Add,
    sympy.Mul,
    sympy.Pow,
    sympy.ceiling,
    sympy.floor,
    sympy.Max,
    sympy.Min,
    sympy.Abs,
)


class _TextPrinter(StrPrinter):
    """SymPy's str printer, with this grammar's function names.

    Products whose leading coefficient would distribute over a sum when the
    text is read back left to right (``2*(a + b)*c`` -> ``(2*a + 2*b)*c``) are
    written with the coefficient last, ``(a + b)*c*2``, so the re-parsed
    expression is structurally equal.
    """

    def _print_Mul(self, expr: sympy.Mul) -> str:  # noqa: N802 (SymPy's naming)
        coeff, rest = expr.as_coeff_Mul()
        if coeff == 1 or not any(
            factor.is_Add or (factor.is_Pow and factor.base.is_Add) for factor in sympy.Mul.make_args(rest)
        ):
            return super()._print_Mul(expr)
        # Read back left to right, a leading number would distribute over a sum
        # (2*(a + b)*c -> (2*a + 2*b)*c), so the coefficient goes last.
        text = super()._print_Mul(rest) if rest.is_Mul else self._print(rest)
        if coeff < 0:
            text = f"-({text})"
        numerator, denominator = abs(coeff.p), coeff.q
        return text + (f"*{numerator}" if numerator != 1 else "") + (f"/{denominator}" if denominator != 1 else "")

    def _print_ceiling(self, expr: sympy.ceiling) -> str:
        return f"ceil({self._print(expr.args[0])})"

    def _print_Abs(self, expr: sympy.Abs) -> str:  # noqa: N802 (SymPy's naming)
        # sqrt(u**2) re-parses to Abs(u) for real u, the only kind SymPy makes here.
        return f"sqrt({self.parenthesize(expr.args[0], PRECEDENCE['Pow'])}**2)"

    def _print_Max(self, expr: sympy.Max) -> str:  # noqa: N802 (SymPy's naming)
        return f"max({self.stringify(expr.args, ', ')})"

    def _print_Min(self, expr: sympy.Min) -> str:  # noqa: N802
        return f"min({self.stringify(expr.args, ', ')})"


def _check_printable(expr: sympy.Basic) -> None:
    """Refuse anything the grammar cannot express."""
    for sub in sympy.preorder_traversal(expr):
        if isinstance(sub, sympy.Dummy) or (isinstance(sub, sympy.Symbol) and _NAME_RUN.fullmatch(sub.name) is None):
            raise ValueError(f"to_text: symbol {sub.name!r} cannot be written as a name")
        if isinstance(sub, sympy.Pow) and not isinstance(sub.exp, sympy.Rational):
            raise ValueError(f"to_text: exponent {sub.exp} is not a rational number")
        if isinstance(sub, sympy.Abs) and not sub.args[0].is_extended_real:
            raise ValueError("to_text: Abs of a possibly complex value is outside the grammar")
        if not (isinstance(sub, _PRINTABLE) or (isinstance(sub, sympy.log) and len(sub.args) == 1)):
            raise ValueError(f"to_text: {type(sub).__name__} is outside the formula grammar")


_SCALE_FREE = (sympy.ceiling, sympy.floor)  # arguments must not carry a log(2) factor
_SCALE_THROUGH = (sympy.Add, sympy.Max, sympy.Min, sympy.Abs)  # f(u*c) = f(u)*c for c > 0


def _log2_form(expr: sympy.Basic) -> tuple[sympy.Basic, sympy.Rational]:
    """Split ``expr`` into ``(form, k)`` with ``expr == form * log(2)**k``.

    SymPy stores ``log2(a)`` as ``log(a)/log(2)``.  ``form`` writes each
    ``log(a)`` as ``log2(a)`` (one factor of ``log(2)`` each) and drops the
    ``log(2)`` factors; it is built unevaluated, so printing it cannot change
    the expression.  ``to_text`` needs ``k == 0``, which holds for anything
    ``parse_expression`` returned.
    """
    one = sympy.Integer(1)
    if isinstance(expr, sympy.log):
        if expr.args[0] == 2:
            return one, one
        inner, degree = _log2_form(expr.args[0])
        if degree != 0:
            raise ValueError("to_text: log(2) does not cancel inside a logarithm")
        return _LOG2(inner), one
    if not expr.args:
        return expr, sympy.Integer(0)
    forms, degrees = zip(*(_log2_form(arg) for arg in expr.args), strict=True)
    if isinstance(expr, sympy.Mul):
        factors = [form for form in forms if form != 1]
        return sympy.Mul(*factors, evaluate=False), sum(degrees, sympy.Integer(0))
    if isinstance(expr, sympy.Pow):
        base, exponent = forms
        if degrees[1] != 0 or (degrees[0] != 0 and not isinstance(exponent, sympy.Rational)):
            raise ValueError("to_text: log(2) does not cancel inside a power")
        if base == 1:
            return one, degrees[0] * exponent
        return sympy.Pow(base, exponent, evaluate=False), degrees[0] * exponent
    if isinstance(expr, _SCALE_THROUGH) and len(set(degrees)) == 1:
        return expr.func(*forms, evaluate=False), degrees[0]
    if isinstance(expr, _SCALE_FREE) and not any(degrees):
        return expr.func(*forms, evaluate=False), sympy.Integer(0)
    raise ValueError(f"to_text: log(2) does not cancel in {type(expr).__name__}")


def to_text(expr: sympy.Expr) -> str:
    """Print an expression in the grammar ``parse_expression`` accepts.

    Raises ``ValueError`` for anything outside the grammar (other functions,
    floats, non-rational exponents, natural logarithms not coming from
    ``log2``).  ``Abs(u)``, which SymPy makes from ``sqrt(u**2)``, is written
    as ``sqrt(u**2)``.
    """
    _check_printable(expr)
    form, degree = _log2_form(expr)
    if degree != 0:
        raise ValueError("to_text: natural logarithms can only be written through log2(...)")
    return _TextPrinter().doprint(form)
