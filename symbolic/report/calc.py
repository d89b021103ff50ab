"""A formula as a hand calculation: symbolic, with the numbers substituted, then the result.

The substituted line is printed, not evaluated: each symbol is replaced by its value in the
printer (with explicit ``\\cdot`` products so that 4·8·1024 does not read as 481024), keeping
the terms in the author's order. Long sums are broken between terms to fit a width.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import sympy

from ..core.units import format_bytes
from ..math.formula import Evaluation, Formula
from ..text import printing

UNIT_WORDS = {"bytes": r"\mathrm{B}", "params": r"\text{parameters}", "elements": r"\text{elements}"}


def result_latex(value: sympy.Rational, unit: str) -> str:
    """'7{,}530{,}364{,}928\\ \\mathrm{B} \\approx 7.01\\ \\mathrm{GiB}' style result (fractions rounded)."""
    whole = sympy.Rational(value)
    if not whole.is_Integer:  # a fractional byte count (e.g. 5 % of a tensor's bytes): the nearest whole number
        whole = sympy.Integer(round(whole))
    text = printing.number_latex(whole) + r"\ " + UNIT_WORDS[unit]
    if unit == "bytes" and abs(value) >= 1024:
        amount, label = format_bytes(value).split(" ")
        text += rf" \approx {amount}\ \mathrm{{{label}}}"
    return text


@dataclass(frozen=True)
class Line:
    """One printed line of a calculation: left side, relation and the body (all LaTeX)."""

    label: str
    lhs: str
    rel: str
    body: str


def lines(formula: Formula, evaluation: Evaluation, measure: Callable[[str], float], limit: float,
          tolerance: float | None = None) -> list[Line]:
    """The three-way calculation of ``formula`` at ``evaluation``'s point, wrapped to ``limit`` (see ``wrap``)."""
    values = {**evaluation.values, **evaluation.derived}
    shown = printing.summands(t.expr for t in formula.terms)  # a term counted as 0 adds no "+ 0"
    symbolic = [_narrow(expr, printing.latex, measure, limit) for expr in shown]
    numbers = [_narrow(worked(expr, values), lambda e: printing.latex_with_numbers(e, values), measure, limit)
               for expr in shown]
    out: list[Line] = []
    lhs = formula.name_latex
    for label, pieces in (("symbolic", symbolic), ("substituted", numbers)):
        # a term that is itself a sum (e.g. an allowance of 5 % of several tensors) may break between its parts
        parts = [part for piece in pieces for part in split_sum(piece)]
        rows = [row for wrapped in wrap(parts, measure, limit, tolerance) for row in split_max(wrapped, measure, limit)]
        for index, body in enumerate(rows):
            out.append(Line(label if index == 0 else "", lhs if not out else "", "=" if index == 0 else "", body))
    exact = sympy.Rational(evaluation.total).is_Integer
    out.append(Line("result", "", "=" if exact else r"\approx", result_latex(evaluation.total, formula.unit)))
    return out


def _narrow(expr: sympy.Expr, latex: Callable[[sympy.Expr], str], measure: Callable[[str], float],
            limit: float) -> str:
    """``latex(expr)``, or, wider than ``limit``, with each fraction of a max printed coefficient first (a max in a
    fraction cannot break after its commas: ``coefficient_first``)."""
    text = latex(expr)
    return text if measure(text) <= limit else latex(coefficient_first(expr))


class _ShownMax(sympy.Function):
    """``max`` of arguments already worked out to numbers: printed, never evaluated."""

    word = r"\max"

    def _latex(self, printer: object) -> str:
        return rf"{self.word}\left(" + ", ".join(printing.number_latex(a) for a in self.args) + r"\right)"


class _ShownMin(_ShownMax):
    """``min`` of arguments already worked out to numbers."""

    word = r"\min"


class _Scaled(sympy.Function):
    """``c · max(...)`` printed with its fraction in front, ``\\frac{3}{50} \\max(...)``: printed, never evaluated."""

    def _latex(self, printer: object) -> str:
        coefficient, rest = self.args
        return f"{printer._print(coefficient)} {printer._print(rest)}"  # type: ignore[attr-defined]


def coefficient_first(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each fraction of a max or min (``\\frac{3 \\max(...)}{50}``) printed coefficient first.

    A max inside a fraction cannot break after its commas; ``\\frac{3}{50} \\max(...)`` can, so a
    table cell too narrow for the whole max still shows it at a readable size (``split_max``).
    """
    mapping = {}
    for node in sympy.preorder_traversal(expr):
        if node.is_Mul:
            coefficient, rest = node.as_coeff_Mul()
            if coefficient.is_Rational and not coefficient.is_Integer and isinstance(rest, (sympy.Max, sympy.Min)):
                mapping[node] = _Scaled(coefficient, rest)
    return expr.xreplace(mapping) if mapping else expr


def worked(expr: sympy.Expr, values: dict) -> sympy.Expr:
    """``expr`` with each max/min of whole phases replaced by the max/min of their numbers.

    A peak is max(forward, backward, optimizer step), each a long sum; substituting every symbol
    inside would print a line far wider than the page. A hand calculation works the arguments
    out first: max(16,060,522,496, 10,201,104,384).
    """
    mapping = {}
    for node in expr.atoms(sympy.Max, sympy.Min):
        args = [sympy.sympify(a).xreplace(values) for a in node.args]
        if all(a.is_Rational for a in args):
            mapping[node] = (_ShownMax if isinstance(node, sympy.Max) else _ShownMin)(*args)
    return expr.xreplace(mapping) if mapping else expr


def wrap(pieces: list[str], measure: Callable[[str], float], limit: float,
         tolerance: float | None = None) -> list[str]:
    """Join terms with + (or −) into lines no wider than ``limit`` where a term allows it.

    With ``tolerance`` (px), a candidate line's width is the width of the line so far plus that of
    the next term typeset alone after a sign (``{} + term``, less the empty group): a row of math
    is laid out left to right, so the sum equals the joined line's width (to the 0.001 px of the
    SVG's rounding, on every calculation of the example reports). Only a candidate within
    ``tolerance`` of ``limit`` is typeset whole, so the sum decides nothing a full measurement
    would decide otherwise, and a long sum costs one typesetting per term instead of one per prefix.
    Each finished row is measured whole (it is typeset for the page anyway); if one is wider than
    ``limit`` after all, every candidate is measured instead. Without ``tolerance`` every candidate
    is measured (cheap estimates need no shortcut).
    """
    rows: list[str] = []
    firsts: list[str] = []  # each row's first piece
    current = ""
    width: float | None = None  # of current, once an estimate needs it
    for piece in pieces:
        if not current:
            current = piece
            firsts.append(piece)
            continue
        joined = _join(current, piece)
        if tolerance is None:
            wide = measure(joined)
        else:
            wide = (measure(current) if width is None else width) + measure(_continued(piece)) - measure("{}")
            if abs(wide - limit) <= tolerance:
                wide = measure(joined)
        if wide > limit:
            rows.append(current)
            current, width = piece, None
            firsts.append(piece)
        else:
            current, width = joined, wide
    rows.append(current)
    # the summed widths drifted past the limit (a row of many terms): measure every candidate instead
    if tolerance is not None and any(row != first and measure(row) > limit for row, first in zip(rows, firsts)):
        return wrap(pieces, measure, limit)
    return [row if i == 0 else _continued(row) for i, row in enumerate(rows)]


def split_max(row: str, measure: Callable[[str], float], limit: float) -> list[str]:
    """A row wider than ``limit`` because of one max(...) of long arguments, broken after its commas.

    ``\\max\\left(a, b\\right)`` becomes ``\\max\\left(a,\\right.`` and ``\\left.\\quad b\\right)``: each line keeps
    its delimiters balanced, as TeX's align and ziamath need. An argument still wider than ``limit``
    breaks between its terms, its continuation lines indented by ``\\qquad``.
    """
    start = row.find(r"\max\left(")
    if measure(row) <= limit or start < 0 or _depth(row[:start]) != 0:
        return [row]
    inner_start = start + len(r"\max\left(")
    commas, end = _top_level(row, inner_start, r"\right)")
    if end < 0 or not commas:
        return [row]
    bounds = [inner_start, *(c + 1 for c in commas), end + 1]
    args = [row[a:b - 1].strip() for a, b in zip(bounds, bounds[1:])]
    openings = [row[:start] + r"\max\left(", *[r"\left.\quad "] * (len(args) - 1)]
    closings = [*[r",\right."] * (len(args) - 1), r"\right)" + row[end + len(r"\right)"):]]
    return [piece for k, (opening, arg, closing) in enumerate(zip(openings, args, closings))
            for line in _split_argument(opening, arg, closing, measure, limit)
            for piece in (_split_inner(line, measure, limit) if line.count(r"\max\left(") > (k == 0) else [line])]


def _split_inner(line: str, measure: Callable[[str], float], limit: float) -> list[str]:
    """A line still wider than ``limit`` because of a max inside it (a phase that is itself the larger of two
    moments), broken after that max's commas and then between the terms of an argument still too wide, each
    piece's delimiters balanced with null ones (``line`` may be a piece whose delimiters are not)."""
    if measure(_balanced(line)) <= limit:
        return [_balanced(line)]
    opening = r"\max\left("
    start = line.find(opening)
    while start >= 0:
        commas = _commas(line, start + len(opening)) if _braces(line[:start]) == 0 else []
        if commas:
            cuts = [c + 1 for c in commas]
            pieces = [line[a:b] for a, b in zip([0, *cuts], [*cuts, len(line)], strict=True)]
            return [part for k, piece in enumerate(pieces)
                    for part in _split_inner(piece if k == 0 else r"\qquad " + piece.strip(), measure, limit)]
        start = line.find(opening, start + 1)
    terms = split_sum(line)  # no max left to break: between the terms of its sum
    if len(terms) < 2:
        return [_balanced(line)]
    rows = wrap(terms, lambda text: measure(_balanced(text)), limit)
    return [_balanced(row if i == 0 else r"\qquad " + row) for i, row in enumerate(rows)]


def _commas(line: str, inner: int) -> list[int]:
    """The top-level commas of the max whose arguments start at ``inner``, each with an argument after it."""
    commas, end = _top_level(line, inner, r"\right")
    return [c for c in commas if line[c + 1:end].strip()] if end >= 0 else []


def _top_level(line: str, inner: int, close: str) -> tuple[list[int], int]:
    """(the commas at depth 0, where ``close`` ends the group; -1 when it never does) from ``inner`` on."""
    depth, commas = 0, []
    for i in range(inner, len(line)):
        if line.startswith(close, i) and depth == 0:
            return commas, i
        if line.startswith(r"\left", i) or line[i] in "{(":
            depth += 1
        elif line.startswith(r"\right", i) or line[i] in "})":
            depth -= 1
        elif line[i] == "," and depth == 0:
            commas.append(i)
    return commas, -1


def _braces(latex: str) -> int:
    return latex.count("{") - latex.count("}")


def _balanced(piece: str) -> str:
    """``piece`` with a null left delimiter before each right one it does not open, and a null right delimiter
    after each left one it does not close."""
    opened, missing = 0, 0
    for i in range(len(piece)):
        if piece.startswith(r"\left", i):
            opened += 1
        elif piece.startswith(r"\right", i):
            if opened:
                opened -= 1
            else:
                missing += 1
    return r"\left." * missing + piece + r"\right." * opened


def _split_argument(opening: str, arg: str, closing: str, measure: Callable[[str], float], limit: float) -> list[str]:
    """One argument's line of a broken max, itself broken between its terms when it is wider than ``limit``."""
    line = opening + arg + closing
    parts = split_sum(arg)
    if len(parts) < 2 or measure(line) <= limit:
        return [line]
    rows = wrap(parts, lambda text: measure(r"\left.\qquad " + text + r",\right."), limit)
    if len(rows) < 2:
        return [line]
    middle = [r"\left.\qquad " + row + r"\right." for row in rows[1:-1]]
    return [opening + rows[0] + r"\right.", *middle, r"\left.\qquad " + rows[-1] + closing]


def _depth(latex: str) -> int:
    depth = 0
    for i, c in enumerate(latex):
        if latex.startswith(r"\left", i) or c in "{(":
            depth += 1
        elif latex.startswith(r"\right", i) or c in "})":
            depth -= 1
    return depth


def split_sum(latex: str) -> list[str]:
    """The top-level terms of a printed sum: 'a + b - c' -> ['a', 'b', '- c'] (signs kept)."""
    pieces, depth, start, i = [], 0, 0, 0
    while i < len(latex):
        if latex.startswith(r"\left", i) or latex[i] in "{(":
            depth += 1
        elif latex.startswith(r"\right", i) or latex[i] in "})":
            depth -= 1
        elif depth == 0 and latex.startswith((" + ", " - "), i):
            pieces.append(latex[start:i])
            start = i + 3 if latex[i + 1] == "+" else i + 1
            i += 3
            continue
        i += 1
    pieces.append(latex[start:])
    return [p.strip() for p in pieces if p.strip()]


def _join(left: str, right: str) -> str:
    return f"{left} - {right[1:].lstrip()}" if right.startswith("-") else f"{left} + {right}"


def _continued(row: str) -> str:
    """A continuation line: '{}' before the sign keeps the binary spacing of + and −."""
    return f"{{}} - {row[1:].lstrip()}" if row.startswith("-") else f"{{}} + {row}"


def estimate(latex: str) -> float:
    """A rough width of ``latex`` in characters (for output without a typesetter)."""
    text = re.sub(r"\\(mathrm|text|operatorname)\{([^{}]*)\}", r"\2", latex)
    text = re.sub(r"\\(left|right)", "", text)
    text = text.replace(r"\cdot", "·").replace("{,}", ",")
    text = re.sub(r"\\[A-Za-z]+", "x", text)
    return float(len(re.sub(r"[{}\s^_]", "", text))) + 0.5 * text.count(" ")
