"""How the context builder turns LaTeX into printable pieces for the HTML and LaTeX templates.

A math piece is a plain dict: ``latex`` (the source), ``svg`` (inline SVG markup for HTML and
PDF, empty when not typesetting) and ``tex`` (``$...$`` for the LaTeX template). Table cells are
dicts with ``text``, ``words`` (the text as runs, long words apart: ``html_words``), ``svg`` and
``tex``, so templates print them without deciding anything.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from . import calc
from .texescape import LONG_WORD, TexCode, breakable, tokens

BODY_POINTS = 9.5
CALC_POINTS = 10.0
FIT = r"\dimexpr\linewidth-1em\relax"  # room for a term in a table cell, leaving space for its sign
FIT_SHARE = 0.6  # a cell formula's term wider than this share of the cell (estimated) may be shrunk in TeX
MIN_POINTS = 6.0  # the smallest size a table cell's formula is shrunk to, so that it fits its column
CALC_WIDTH_PX = 470.0  # the math column of a calculation on A4 with the report's margins
WRAP_TOLERANCE_PX = 4.0  # a line this close to its limit by the sum of its terms' widths is typeset whole


class Typesetter:
    """LaTeX only (for the .tex output): widths are estimated from the source."""

    svg = False
    tolerance: float | None = None  # estimates are cheap: calc.wrap measures every candidate line

    def math(self, latex: str, points: float = BODY_POINTS) -> dict[str, Any]:
        return {"latex": TexCode(latex), "svg": Markup(""), "tex": TexCode(f"${latex}$") if latex else TexCode("")}

    def measure(self, latex: str) -> float:
        return calc.estimate(latex) * 7.2

    def cell(self, text: object = "", math: str = "", points: float = BODY_POINTS,
             width: float | None = None, code: bool = False) -> dict[str, Any]:
        """A table cell: ``text`` and ``svg`` for HTML, ``tex`` (escaped text, then math) for LaTeX.

        Math wider than ``width`` px wraps between terms in HTML, and a max still too wide after its
        commas; ``code=True`` lets LaTeX break identifiers such as ``plan.params_per_gpu`` after dots
        and underscores.
        """
        words = "" if text is None else str(text)
        piece = self.math(math, points) if math else {"svg": Markup(""), "tex": TexCode("")}
        # long words and URLs may break at the column's edge; identifiers after every dot and underscore
        tex = breakable(words, long_word=0 if code else LONG_WORD)
        if math:  # in table cells TeX may break a long formula inside plain parentheses, not \left( \right)
            tex += self._tex_cell_math(math, points, width)
        if math and width and self.svg and self.width(math, points) > width:
            measure = lambda part: self.width(part, points)  # noqa: E731
            lines = [row for line in calc.wrap(calc.split_sum(math), measure, width, self.tolerance)
                     for row in calc.split_max(line, measure, width)]
            piece["svg"] = Markup("<br>").join(self.math(line, self._fitting(line, points, width))["svg"]
                                               for line in lines)
        return {"text": words, "words": html_words(words), "svg": piece["svg"], "tex": TexCode(tex)}

    def _tex_cell_math(self, latex: str, points: float, width: float | None) -> TexCode:
        """``$latex$`` for a table cell: TeX breaks it between terms; a term too long to break is shrunk to fit.

        A term that may be wider than the column (a max of long sums, a fraction) goes in a box
        that ``\\resizebox`` shrinks only when it is wider than the column (graphicx).
        """
        pieces = calc.split_sum(latex) if width else [latex]
        out = []
        for index, piece in enumerate(pieces):
            sign = "" if index == 0 else ("- " if piece.startswith("-") else "+ ")
            body = piece[1:].lstrip() if index and piece.startswith("-") else piece
            body = body.replace("\\left(", "(").replace("\\right)", ")")
            if width and calc.estimate(piece) * 7.2 * points / CALC_POINTS > FIT_SHARE * width:
                body = (f"\\resizebox{{\\ifdim\\width>{FIT}{FIT}\\else\\width\\fi}}{{!}}{{${body}$}}")
            out.append(f"{sign}{body}")
        return TexCode(f"${' '.join(out)}$")

    def _fitting(self, latex: str, points: float, width: float) -> float:
        """The size at which one unbreakable line of math (e.g. a max of long sums) fits ``width`` px."""
        measured = self.width(latex, points)
        return points if measured <= width else max(MIN_POINTS, points * width / measured)

    def width(self, latex: str, points: float = BODY_POINTS) -> float:
        """Width of ``latex`` in CSS px (estimated from the source)."""
        return calc.estimate(latex) * 7.2 * points / CALC_POINTS


class SvgTypesetter(Typesetter):
    """LaTeX plus ziamath SVG (for HTML and PDF); widths measured from the typeset formula."""

    svg = True
    tolerance = WRAP_TOLERANCE_PX

    def math(self, latex: str, points: float = BODY_POINTS) -> dict[str, Any]:
        from . import mathsvg

        piece = super().math(latex, points)
        if latex:
            piece["svg"] = Markup(mathsvg.typeset(latex, points).svg)
        return piece

    def measure(self, latex: str) -> float:
        from . import mathsvg

        return mathsvg.width(latex, CALC_POINTS)

    def width(self, latex: str, points: float = BODY_POINTS) -> float:
        from . import mathsvg

        return mathsvg.width(latex, points)


def html_words(text: str) -> list[dict[str, Any]]:
    """``text`` as runs for HTML: ``long`` runs are single words over ``LONG_WORD`` characters.

    The stylesheet lets only those break anywhere in a prose column; the rest breaks between
    words. A column's narrowest width is then its longest ordinary word, and WeasyPrint measures
    it a word at a time instead of a character at a time (most of a report's table layout).
    """
    runs: list[dict[str, Any]] = []
    plain = ""
    for token, long in tokens(text):
        if long:
            if plain:
                runs.append({"text": plain, "long": False})
                plain = ""
            runs.append({"text": token, "long": True})
        else:
            plain += token
    if plain or not runs:
        runs.append({"text": plain, "long": False})
    return runs
