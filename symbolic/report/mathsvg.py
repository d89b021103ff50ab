r"""LaTeX to SVG with ziamath (pure Python, STIX Two Math), sized and aligned for WeasyPrint.

WeasyPrint lays out neither MathML nor TeX, so formulas become SVG outlines. Facts this module
relies on (see TOOLCHAIN.md): ``config.svg2 = False`` (SVG 2 output gives anchor warnings and
specks), ``size`` is in CSS pixels (points × 96/72), and inline math sits on the text baseline
only with ``vertical-align`` taken from the formula's bottom below the baseline (``getyofst``).
The LaTeX source is kept as the SVG's ``<title>`` (and ``aria-label``).

ziamath spaces two things unlike TeX, so ``for_ziamath`` rewrites them first: a minus that opens
a group or follows a relation (``= -4HV``, ``(-2HV + N)``) is unary in TeX but gets a binary
operator's spacing from ziamath, so it becomes ``{-}``; and an operator name after a symbol
(``S\max``) gets TeX's thin space (``S\,\max``), which ziamath leaves out.
"""

from __future__ import annotations

import functools
import re
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass

MARGIN = 1.0  # ziamath's default margin around the formula, in px
# a "-" is unary after these (TeX makes a binary operator after them ordinary)
_OPENERS = ("(", "[", "{", "=", ",", "&", r"\left(", r"\left[", r"\left\{", r"\approx", r"\leq", r"\geq",
            r"\le", r"\ge", r"\neq", r"\times", r"\cdot", "+", "-")
_OPERATOR = re.compile(r"\\(max|min|log|ln|exp|sin|cos|lim|sup|inf)(?![A-Za-z])")


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
    import ziafont

    from . import ziaglyphs, zialayout

    zialayout.install(ziamath)
    ziaglyphs.install(ziafont)
    return ziamath


def for_ziamath(latex: str) -> str:
    """``latex`` with TeX's spacing of unary minus and operator names made explicit for ziamath."""
    out: list[str] = []
    i = 0
    while i < len(latex):
        if latex[i] == "-" and _unary(latex, i):
            out.append("{-}")
            i += 1
            while i < len(latex) and latex[i] == " ":
                i += 1
            continue
        match = _OPERATOR.match(latex, i)
        if match and _after_operand(latex, i):
            out.append(r"\," + match.group(0))
            i = match.end()
            continue
        out.append(latex[i])
        i += 1
    return "".join(out)


def _unary(latex: str, index: int) -> bool:
    """Whether the ``-`` at ``index`` has nothing to subtract from (start, group, relation)."""
    before = latex[:index].rstrip()
    if before.endswith("{}"):  # '{} - x': an empty group kept on purpose for binary spacing
        return False
    return not before or before.endswith(_OPENERS)


def _after_operand(latex: str, index: int) -> bool:
    """Whether the operator name at ``index`` follows a symbol, a number or a closed group."""
    before = latex[:index].rstrip()
    if not before:
        return False
    last = before[-1]
    if last in ")]}" or last.isdigit():
        return True
    if last.isalpha():
        word = re.search(r"\\?[A-Za-z]+$", before)
        return word is None or not word.group(0).startswith("\\")
    return False


@functools.lru_cache(maxsize=4096)
def typeset(latex: str, points: float = 10.0) -> Typeset:
    """The SVG of ``latex`` at ``points`` size, ready to sit on the baseline of running text."""
    zm = _ziamath()
    try:
        math = zm.Math.fromlatex(for_ziamath(latex), size=px(points), margin=MARGIN)
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
