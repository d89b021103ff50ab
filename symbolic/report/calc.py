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

from .. import printing
from ..formula import Evaluation, Formula
from ..units import format_bytes

UNIT_WORDS = {"bytes": r"\mathrm{B}", "params": r"\text{parameters}", "elements": r"\text{elements}"}


def result_latex(value: sympy.Rational, unit: str) -> str:
    """'7{,}530{,}364{,}928\\ \\mathrm{B} \\approx 7.01\\ \\mathrm{GiB}' style result."""
    text = printing.number_latex(value) + r"\ " + UNIT_WORDS[unit]
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


def lines(formula: Formula, evaluation: Evaluation, measure: Callable[[str], float], limit: float) -> list[Line]:
    """The three-way calculation of ``formula`` at ``evaluation``'s point, wrapped to ``limit``."""
    values = {**evaluation.values, **evaluation.derived}
    symbolic = [printing.latex(t.expr) for t in formula.terms]
    numbers = [printing.latex_with_numbers(t.expr, values) for t in formula.terms]
    out: list[Line] = []
    lhs = formula.name_latex
    for label, pieces in (("symbolic", symbolic), ("substituted", numbers)):
        for index, body in enumerate(wrap(pieces, measure, limit)):
            out.append(Line(label if index == 0 else "", lhs if not out else "", "=" if index == 0 else "", body))
    out.append(Line("result", "", "=", result_latex(evaluation.total, formula.unit)))
    return out


def wrap(pieces: list[str], measure: Callable[[str], float], limit: float) -> list[str]:
    """Join terms with + (or −) into lines no wider than ``limit`` where a term allows it."""
    rows: list[str] = []
    current = ""
    for piece in pieces:
        joined = _join(current, piece) if current else piece
        if current and measure(joined) > limit:
            rows.append(current)
            current = piece
        else:
            current = joined
    rows.append(current)
    return [row if i == 0 else _continued(row) for i, row in enumerate(rows)]


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
