"""How the context builder turns LaTeX into printable pieces for the HTML and LaTeX templates.

A math piece is a plain dict: ``latex`` (the source), ``svg`` (inline SVG markup for HTML and
PDF, empty when not typesetting) and ``tex`` (``$...$`` for the LaTeX template). Table cells are
dicts with ``text``, ``svg`` and ``tex``, so templates print them without deciding anything.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from . import calc
from .texescape import TexCode, escape

BODY_POINTS = 9.5
CALC_POINTS = 10.0
CALC_WIDTH_PX = 470.0  # the math column of a calculation on A4 with the report's margins


class Typesetter:
    """LaTeX only (for the .tex output): widths are estimated from the source."""

    svg = False

    def math(self, latex: str, points: float = BODY_POINTS) -> dict[str, Any]:
        return {"latex": TexCode(latex), "svg": Markup(""), "tex": TexCode(f"${latex}$") if latex else TexCode("")}

    def measure(self, latex: str) -> float:
        return calc.estimate(latex) * 7.2

    def cell(self, text: object = "", math: str = "", points: float = BODY_POINTS,
             width: float | None = None, code: bool = False) -> dict[str, Any]:
        """A table cell: ``text`` and ``svg`` for HTML, ``tex`` (escaped text, then math) for LaTeX.

        Math wider than ``width`` px wraps between terms in HTML; ``code=True`` lets LaTeX break
        identifiers such as ``plan.params_per_gpu`` after dots and underscores.
        """
        words = "" if text is None else str(text)
        piece = self.math(math, points) if math else {"svg": Markup(""), "tex": TexCode("")}
        tex = escape(words)
        if code:
            tex = tex.replace("\\_", "\\_\\allowbreak{}").replace(".", ".\\allowbreak{}")
        if math:  # in table cells TeX may break a long formula inside plain parentheses, not \left( \right)
            tex += piece["tex"].replace("\\left(", "(").replace("\\right)", ")")
        if math and width and self.svg and self.width(math, points) > width:
            lines = calc.wrap(calc.split_sum(math), lambda part: self.width(part, points), width)
            piece["svg"] = Markup("<br>").join(self.math(line, points)["svg"] for line in lines)
        return {"text": words, "svg": piece["svg"], "tex": TexCode(tex)}

    def width(self, latex: str, points: float = BODY_POINTS) -> float:
        """Width of ``latex`` in CSS px (estimated from the source)."""
        return calc.estimate(latex) * 7.2 * points / CALC_POINTS


class SvgTypesetter(Typesetter):
    """LaTeX plus ziamath SVG (for HTML and PDF); widths measured from the typeset formula."""

    svg = True

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
