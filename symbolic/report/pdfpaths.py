"""WeasyPrint 70 draws an SVG ``<path>`` by parsing its ``d`` text every time; this keeps what each text drew.

A report's SVG is mostly glyph outlines: every formula glyph is a ``<path>`` and every chart
label is a ``<use>`` of one of matplotlib's glyph paths, so the same ``d`` text is parsed
hundreds of times (a third of the time WeasyPrint spends drawing a report's pictures). Drawing a
path appends PDF operators to the page's content stream (pydyf's ``move_to``, ``line_to``,
``curve_to``, ``close`` each append one bytes chunk) and records its vertices for markers, and
both depend only on the ``d`` text: path data has no units, so neither the font size nor the
viewport enters. So the first drawing of a text is recorded (the chunks it appended and the
vertices it added) and later drawings of the same text append the same chunks: the PDF's bytes
do not change (``tests/test_report_pdfpaths.py`` compares them with and without). A path whose
``d`` holds anything but path commands and numbers is drawn by WeasyPrint as before.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

VERSION = "70.0"  # the WeasyPrint release whose svg.path.path this was checked against
MAX_PATHS = 4_000  # recorded d texts kept: the default report has 331 (1.8 MB, ziaglyphs); at most about 26 MB
_PLAIN = re.compile(r"[MmLlHhVvCcSsQqTtAaZz0-9.eE+\-,\s]*")
_recorded: dict[str, tuple[list[bytes], list[Any]]] = {}


def recorded() -> int:
    """How many path texts are recorded; ``recorded.cache_clear()`` forgets them (as benchmarks clear memos)."""
    return len(_recorded)


recorded.cache_clear = _recorded.clear  # type: ignore[attr-defined]


def install() -> bool:
    """Let WeasyPrint's SVG renderer reuse what a path's ``d`` text drew before; whether it was applied."""
    import weasyprint
    import weasyprint.svg as wsvg

    if weasyprint.__version__ != VERSION or "path" not in wsvg.TAGS:
        return False
    draw = wsvg.TAGS["path"]
    if getattr(draw, "_symbolic_recorded", False):
        return True

    def path(svg: Any, node: Any, font_size: float) -> None:
        d = node.get("d", "")
        chunks = getattr(svg.stream, "stream", None)
        if not isinstance(chunks, list) or not _PLAIN.fullmatch(d):
            return draw(svg, node, font_size)
        known = _recorded.get(d)
        if known is not None:
            chunks.extend(known[0])
            node.vertices.extend(known[1])
            return None
        start, vertices = len(chunks), len(node.vertices)
        draw(svg, node, font_size)  # a PointError leaves nothing recorded
        if len(_recorded) >= MAX_PATHS:
            _recorded.clear()
        _recorded[d] = (chunks[start:], list(node.vertices)[vertices:])
        return None

    path._symbolic_recorded = True  # type: ignore[attr-defined]
    path._symbolic_draw = draw  # type: ignore[attr-defined]  # WeasyPrint's own, for the test that compares
    wsvg.TAGS["path"] = path
    return True


@contextlib.contextmanager
def installed() -> Iterator[bool]:
    """``install`` for the length of a block: WeasyPrint's own path renderer is back afterwards, even on an error."""
    import weasyprint.svg as wsvg

    before = wsvg.TAGS.get("path")
    applied = install()
    try:
        yield applied
    finally:
        if applied and before is not None and not getattr(before, "_symbolic_recorded", False):
            wsvg.TAGS["path"] = before
