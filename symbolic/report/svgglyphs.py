"""A chart's glyphs drawn as paths in place, instead of ``<use>`` references to one outline each.

matplotlib (``svg.fonttype = 'path'``) writes each character of a label as a ``<use>`` of the
glyph's outline in ``<defs>``, and WeasyPrint 70 draws a ``<use>`` by looking up and cascading a
copy of what it names: two nodes, and most of the time of a chart's drawing. Here each such
``<use>`` becomes the ``<path>`` it names, with the ``<use>``'s placement and the outline's own
scale as its transform: the same outline text (which ``pdfpaths`` replays after its first
drawing), at the same place, in one node. Only plain glyph references (no ``x``, ``y`` or style,
at most a translation and a scale) to outlines with a plain scale are rewritten; anything else
stays as matplotlib wrote it (``tests/test_report_svgglyphs.py``).
"""

from __future__ import annotations

import re

# a glyph outline in <defs>, and a plain reference to one
_GLYPH = re.compile(r'<path id="(?P<id>[^"]+)"(?: d="(?P<d>[^"]*)")? transform="(?P<scale>scale\([0-9.]+\))"/>')
_USE = re.compile(r'<use xlink:href="#(?P<id>[^"]+)"(?: transform="(?P<place>translate\([-0-9. ]+\)'
                  r'(?: scale\([0-9.]+\))?)")?/>')


def inline(svg: str) -> str:
    """``svg`` with every plain ``<use>`` of a glyph outline replaced by that outline, placed."""
    glyphs = {m["id"]: (m["d"], m["scale"]) for m in _GLYPH.finditer(svg)}

    def path(use: re.Match[str]) -> str:
        glyph = glyphs.get(use["id"])
        if glyph is None:
            return use.group(0)
        d, scale = glyph
        if d is None:
            return ""  # a space: its outline is empty
        transform = f"{use['place']} {scale}" if use["place"] else scale
        return f'<path d="{d}" transform="{transform}"/>'

    return _USE.sub(path, svg)
