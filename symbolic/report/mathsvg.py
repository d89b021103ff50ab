"""LaTeX to SVG with ziamath (pure Python, STIX Two Math), sized and aligned for WeasyPrint.

WeasyPrint lays out neither MathML nor TeX, so formulas become SVG outlines. Facts this module
relies on (see TOOLCHAIN.md): ``config.svg2 = False`` (SVG 2 output gives anchor warnings and
specks), ``size`` is in CSS pixels (points × 96/72), and inline math sits on the text baseline
only with ``vertical-align`` taken from the formula's bottom below the baseline (``getyofst``).
The LaTeX source is kept as the SVG's ``<title>`` (and ``aria-label``).
"""

from __future__ import annotations

import functools
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass

MARGIN = 1.0  # ziamath's default margin around the formula, in px


def px(points: float) -> float:
    """CSS pixels for a size in points."""
    return points * 96 / 72


@dataclass(frozen=True)
class Typeset:
    """One formula as inline SVG markup, with its size in CSS px."""

    svg: str
    width: float
    height: float
    descent: float  # px from the baseline down to the SVG's bottom edge


@functools.lru_cache(maxsize=1)
def _ziamath():  # noqa: ANN202 - the module object
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # ziamath 0.13 loads its font with pkg_resources.path
        import ziamath

    ziamath.config.svg2 = False
    return ziamath


@functools.lru_cache(maxsize=4096)
def typeset(latex: str, points: float = 10.0) -> Typeset:
    """The SVG of ``latex`` at ``points`` size, ready to sit on the baseline of running text."""
    zm = _ziamath()
    try:
        math = zm.Math.fromlatex(latex, size=px(points), margin=MARGIN)
    except Exception as err:  # ziamath raises a variety of errors on LaTeX it does not know
        raise ValueError(f"cannot typeset LaTeX {latex!r}: {err}") from None
    math.title = latex
    root = math.svgxml()
    width = float(root.attrib["width"])
    height = float(root.attrib["height"])
    descent = MARGIN - math.getyofst()
    root.attrib["class"] = "math"
    root.attrib["role"] = "img"
    root.attrib["aria-label"] = latex
    root.attrib["style"] = f"vertical-align: {-descent:.3f}px"
    svg = ET.tostring(root, encoding="unicode")
    return Typeset(svg, width, height, descent)


def width(latex: str, points: float = 10.0) -> float:
    """Typeset width of ``latex`` in CSS px."""
    return typeset(latex, points).width
