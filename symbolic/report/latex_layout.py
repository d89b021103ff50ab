"""Display LaTeX that fits a column: a formula's total broken at its top-level terms, in the author's order.

``symbolic latex`` prints one long line by default, which overflows a two-column article. Given a
width, this module chooses the breaks: it fills each line greedily with whole terms (a term wider
than a line on its own is opened at its parenthesised sum, written with ``\\bigl( ... \\bigr)`` so
the delimiters may sit on different lines), then writes the lines for one environment: ``equation``
(no breaks), ``multline``, ``align`` (one number, on the last line) or ``split`` inside ``equation``.

Widths are estimates without TeX: each piece is typeset with ziamath (STIX Two Math, a dependency
for the reports) and scaled by ``SAFETY``, measured against pdflatex on every library formula
(pdflatex/ziamath was 0.93 to 1.11 there); ``tests/test_latex_paper.py`` compiles the result in a
two-column article and fails on any overfull box. User text never reaches a parser here: the
LaTeX comes from SymPy's printer over the library's expressions.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import sympy

from ..core.errors import UserError
from ..text import printing

ENVIRONMENTS = ("equation", "multline", "align", "split")
SAFETY = 1.15  # pdflatex width / ziamath width was at most 1.11 over the library's formulas
TAG = 30.0  # pt kept free for the equation number "(99)" and its separation
MULTLINE_GAP = 10.0  # amsmath's \multlinegap
QUAD = 10.0  # \quad at 10 pt: the indent of continuation lines in align and split
# A two-column 10-pt article (US letter), as pdflatex reports it: the default for \columnwidth.
COLUMNWIDTH = 229.5
TEXTWIDTH = 469.0
_UNITS = {"pt": 1.0, "bp": 72.27 / 72, "mm": 72.27 / 25.4, "cm": 72.27 / 2.54, "in": 72.27, "pc": 12.0,
          "em": 10.0}
_NAMED = {"columnwidth": COLUMNWIDTH, "linewidth": COLUMNWIDTH, "textwidth": TEXTWIDTH}
_WIDTH = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)?\s*(?:(pt|bp|mm|cm|in|pc|em)|\\(columnwidth|linewidth|textwidth))\s*")


class LayoutError(UserError):
    """A width or environment that cannot be honoured (one-line message, exit 2)."""


def parse_width(text: str) -> float:
    """Points for a TeX length: ``8.4cm``, ``240pt``, ``\\columnwidth``, ``0.9\\linewidth``."""
    match = _WIDTH.fullmatch(text)
    if match is None or (match.group(1) is None and match.group(2)):
        raise LayoutError(f"width {text!r}: give a length such as 8.4cm, 240pt, 3.3in or \\columnwidth "
                          "(optionally scaled, 0.9\\columnwidth)")
    factor = float(match.group(1)) if match.group(1) else 1.0
    points = factor * (_UNITS[match.group(2)] if match.group(2) else _NAMED[match.group(3)])
    if not 50 <= points <= 2000:
        raise LayoutError(f"width {text!r} is {points:.0f}pt; give between 50pt and 2000pt")
    return points


@functools.lru_cache(maxsize=8192)
def width(latex: str) -> float:
    """Estimated display width of ``latex`` in points at 10 pt (ziamath's width times ``SAFETY``)."""
    from .mathsvg import _ziamath, px

    math = _ziamath().Math.fromlatex(latex.replace(r"\bigl(", "(").replace(r"\bigr)", ")"), size=px(10.0), margin=0)
    return math.getsize()[0] * 72 / 96 * SAFETY


@dataclass(frozen=True)
class Piece:
    """One breakable piece of a line: the operator before it and its LaTeX."""

    joiner: str  # "+" or "-" between terms; "" after a comma inside \\max( ... ); dropped at the very start
    latex: str


def terms_of(expr: sympy.Expr) -> list[tuple[str, sympy.Expr]]:
    """The top-level terms of ``expr`` in the order SymPy's LaTeX printer writes them, each with its sign."""
    if not isinstance(expr, sympy.Add):
        return [("+", expr)]
    out = []
    for term in printing._LATEX._as_ordered_terms(expr, order=None):
        negative = term.could_extract_minus_sign()
        out.append(("-" if negative else "+", -term if negative else term))
    return out


def _print_term(expr: sympy.Expr) -> str:
    text = printing.latex(expr)
    return rf"\left({text}\right)" if printing._LATEX._needs_add_brackets(expr) else text


def pieces(parts: list[tuple[str, sympy.Expr]]) -> list[tuple[Piece, sympy.Expr]]:
    """Signed pieces with their LaTeX, as a sum prints them."""
    return [(Piece(sign, _print_term(expr)), expr) for sign, expr in parts]


def _attach(inner: list[Piece], joiner: str, prefix: str, suffix: str) -> list[Piece]:
    """``inner`` wrapped in ``prefix ... suffix`` and joined to what comes before by ``joiner``."""
    first = inner[0]
    sign = "-" if first.joiner == "-" else ""
    out = [Piece(joiner, prefix + sign + first.latex), *inner[1:]]
    out[-1] = Piece(out[-1].joiner, out[-1].latex + suffix)
    return out


def _split(expr: sympy.Expr, budget: float) -> list[Piece] | None:
    """``expr`` as several pieces, opened at its sums (and at the commas of max/min), or None if it has none."""
    if isinstance(expr, sympy.Add):
        return _fit(pieces(terms_of(expr)), budget)
    if isinstance(expr, sympy.Mul):
        openable = [f for f in expr.args if isinstance(f, (sympy.Add, sympy.Max, sympy.Min))]
        if not openable:
            return None
        widest = max(openable, key=lambda f: width(printing.latex(f)))  # the other factors stay whole, in front
        rest = sympy.Mul(*[f for f in expr.args if f is not widest])
        prefix = "" if rest == 1 else printing.latex(rest) + " "
        if not isinstance(widest, sympy.Add):
            opened = _split(widest, budget)
            return None if opened is None else _attach(opened, "+", prefix, "")
        return _attach(_fit(pieces(terms_of(widest)), budget), "+", prefix + r"\bigl(", r"\bigr)")
    if isinstance(expr, (sympy.Max, sympy.Min)):
        out: list[Piece] = []
        args = sorted(expr.args, key=sympy.default_sort_key)  # the order SymPy's printer writes them in
        for i, arg in enumerate(args):
            text = printing.latex(arg)
            opened = _split(arg, budget) if width(text) > budget else None
            part = [Piece("+", text)] if opened is None else opened
            out.extend(_attach(part, "+" if i == 0 else "", "", "" if i == len(args) - 1 else ","))
        name = r"\max" if isinstance(expr, sympy.Max) else r"\min"
        return _attach(out, "+", name + r"\bigl(", r"\bigr)")
    return None


def _piece_width(piece: Piece, first: bool) -> float:
    if first or not piece.joiner:
        return width(piece.latex) + (0.0 if first else 3.0)  # 3 pt: the space after a comma
    return width(f"{{}} {piece.joiner} {piece.latex}")


def _fit(items: list[tuple[Piece, sympy.Expr]], budget: float) -> list[Piece]:
    """Open every piece wider than ``budget`` on its own, as far as its structure allows."""
    out: list[Piece] = []
    for piece, expr in items:
        opened = _split(expr, budget) if _piece_width(piece, False) > budget else None
        out.extend([piece] if opened is None else _attach(opened, piece.joiner, "", ""))
    return out


def _lines(items: list[Piece], first_budget: float, budget: float) -> list[list[Piece]]:
    """Greedy filling: as many whole pieces on each line as its budget allows (at least one)."""
    lines: list[list[Piece]] = [[]]
    used, limit = 0.0, first_budget
    for i, piece in enumerate(items):
        w = _piece_width(piece, i == 0)
        if lines[-1] and used + w > limit:
            lines.append([])
            used, limit = 0.0, budget
        lines[-1].append(piece)
        used += w
    return lines


def _join(line: list[Piece], first: bool) -> str:
    out = []
    for i, piece in enumerate(line):
        if first and i == 0:
            out.append(("-" if piece.joiner == "-" else "") + piece.latex)
        elif not piece.joiner:
            out.append(piece.latex)
        else:
            out.append(("{} " if i == 0 else "") + f"{piece.joiner} {piece.latex}")
    return " ".join(out)


def body_parts(formula: object, form: str) -> list[tuple[str, sympy.Expr]]:
    """A formula's total as signed top-level terms: the author's terms, or the printed order of a form."""
    if form == "terms":
        out = []
        for expr in printing.summands(t.expr for t in formula.terms):  # type: ignore[attr-defined]
            out.extend(terms_of(expr))  # a term that is itself a sum prints as its terms, as join_latex does
        return out
    expr = {"expanded": formula.expanded, "simplified": formula.simplified,  # type: ignore[attr-defined]
            "composed": formula.composed}[form]()  # type: ignore[attr-defined]
    return terms_of(expr)


def display(lhs: str, parts: list[tuple[str, sympy.Expr]], env: str, line_width: float | None,
            label: str | None) -> str:
    """The environment's LaTeX for ``lhs = parts``, broken to ``line_width`` points (None: one line)."""
    if env not in ENVIRONMENTS:
        raise LayoutError(f"unknown environment {env!r}; choose from {', '.join(ENVIRONMENTS)}")
    items = [p for p, _ in pieces(parts)]
    tag = f"\n  \\label{{{label}}}" if label else ""
    head = width(f"{lhs} = ")
    if env == "equation" or line_width is None:
        body = _join(items, True)
        if line_width is not None and head + width(body) > line_width - TAG:
            raise LayoutError(f"{lhs} does not fit in {line_width:.1f}pt on one line (about "
                              f"{head + width(body) + TAG:.0f}pt with its number); use --env split, multline or align")
        if env == "equation":
            return f"\\begin{{equation}}\n  {lhs} = {body}{tag}\n\\end{{equation}}"
        lines = [items]
    else:
        if env == "multline":
            first_budget = budget = line_width - MULTLINE_GAP - TAG
            first_budget -= head
        else:
            first_budget = line_width - TAG - head
            budget = first_budget - QUAD
        fitted = _fit(pieces(parts), budget)
        lines = _lines(fitted, first_budget, budget)
    text = [_join(line, i == 0) for i, line in enumerate(lines)]
    if env == "multline":
        rows = " \\\\\n  ".join(text)
        return f"\\begin{{multline}}\n  {lhs} = {rows}{tag}\n\\end{{multline}}"
    rows = [f"{lhs} &= {text[0]}"] + [f"&\\quad {row}" for row in text[1:]]
    if env == "align":
        joined = " \\nonumber \\\\\n  ".join(rows)
        return f"\\begin{{align}}\n  {joined}{tag}\n\\end{{align}}"
    joined = " \\\\\n    ".join(rows)
    return f"\\begin{{equation}}\n  \\begin{{split}}\n    {joined}\n  \\end{{split}}{tag}\n\\end{{equation}}"


def fits(lhs: str, parts: list[tuple[str, sympy.Expr]], line_width: float) -> bool:
    """Whether ``lhs = parts`` fits on one numbered line of ``line_width`` points (by the estimate)."""
    items = [p for p, _ in pieces(parts)]
    # the pieces' widths, as the line filling adds them up: each is measured once and cached, where the
    # whole line as one string would be a new (and the longest) measurement for every formula
    return width(f"{lhs} = ") + sum(_piece_width(p, i == 0) for i, p in enumerate(items)) <= line_width - TAG


def document(snippets: list[str], line_width: float | None) -> str:
    """A minimal document that compiles with pdflatex: article (two-column unless the width is wider), amsmath."""
    options = "[twocolumn]" if line_width is None or line_width <= COLUMNWIDTH else ""
    body = "\n\n".join(snippets)
    return (f"\\documentclass{options}{{article}}\n\\usepackage{{amsmath}}\n\\begin{{document}}\n\n"
            f"{body}\n\n\\end{{document}}\n")
