"""Formula glyphs drawn at the origin and moved into place, so that every occurrence has the same outline text.

ziafont 0.11 writes a glyph as a ``<path>`` whose ``d`` holds its outline in the formula's own
coordinates (an assembled glyph, ziamath 0.13's long brace or radical, as a ``<g>`` of such
paths): the same letter at another place is another text. WeasyPrint then parses each
occurrence anew (``pdfpaths`` replays a text it has drawn before, and a report drew few twice),
and the PDF's compression finds no repeats. Here a glyph's ``d`` is its outline at (0, 0), at its
size, and ``transform="translate(x y)"`` (on the group of an assembled glyph) puts it where
ziafont would have: one text per glyph and size, parsed once per process, repeated byte for byte
in the page streams. The outline is the same up to ziafont's rounding (a thousandth of a CSS
pixel, now applied to the offset and the outline apart instead of to their sum);
``tests/test_report_ziaglyphs.py`` checks every point. Applied only to the ziafont version it was
written against, and only to ziafont's plain ``<path>`` output (``config.svg2`` off, as
``mathsvg`` sets it).
"""

from __future__ import annotations

from typing import Any

VERSION = "0.11"


def install(ziafont: Any) -> bool:
    """Make ``ziafont`` place glyphs by a translation of their outline at the origin; whether it was applied."""
    if getattr(ziafont, "__version__", None) != VERSION:
        return False
    from ziafont.config import config
    from ziafont.glyph import SimpleGlyph
    from ziafont.svgpath import fmt

    if getattr(SimpleGlyph.place, "_symbolic_moved", False):
        return True
    absolute = SimpleGlyph.place

    def place(self: Any, x: float, y: float, point_size: float) -> Any:
        if config.svg2:
            return absolute(self, x, y, point_size)
        element = self.svgpath(0, 0, point_size / self.DFLT_SIZE_PT)
        if element is not None:
            element.attrib["transform"] = f"translate({fmt(x)} {fmt(y)})"
        return element

    place._symbolic_moved = True  # type: ignore[attr-defined]
    place._symbolic_absolute = absolute  # type: ignore[attr-defined]  # ziafont's own, for the test that compares
    SimpleGlyph.place = place
    return True
