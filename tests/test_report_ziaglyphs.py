"""symbolic.report.ziaglyphs: a formula's glyphs as outlines at the origin, moved into place.

Against ziafont's own placement, formula by formula: the same elements in the same order, every
outline point at the same place within ziafont's rounding, everything but glyph outlines byte for
byte the same, and one outline text per glyph and size however often it occurs.
"""

from __future__ import annotations

import re
import types
import xml.etree.ElementTree as ET

import pytest
from test_report_zialayout import FORMULAS

from symbolic.report import mathsvg, ziaglyphs

NUMBER = re.compile(r"-?[0-9.]+")
TRANSLATE = re.compile(r"translate\((?P<x>-?[0-9.]+) (?P<y>-?[0-9.]+)\)")
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def absolute(monkeypatch):
    """A function that typesets with ziafont's own glyph placement (the outline in the formula's coordinates)."""
    mathsvg._ziamath()  # noqa: SLF001 - installs ziaglyphs
    from ziafont.glyph import SimpleGlyph

    moved = SimpleGlyph.place
    if not getattr(moved, "_symbolic_moved", False):
        pytest.skip(f"ziaglyphs applies to ziafont {ziaglyphs.VERSION} only")

    def typeset(latex: str) -> str:
        mathsvg.typeset.cache_clear()
        with monkeypatch.context() as patch:
            patch.setattr(SimpleGlyph, "place", moved._symbolic_absolute)
            svg = mathsvg.typeset(latex).svg
        mathsvg.typeset.cache_clear()
        return svg

    return typeset


def drawn(root: ET.Element) -> list[tuple[str, dict, list[float]]]:
    """Every element as (tag, attributes but transform with d's commands, its coordinates in the formula's
    units): a translation (of a glyph's path, or of the group of an assembled glyph such as a long brace) applied."""
    out: list[tuple[str, dict, list[float]]] = []

    def walk(element: ET.Element, dx: float, dy: float) -> None:
        move = TRANSLATE.fullmatch(element.get("transform", "translate(0 0)"))
        assert move, element.get("transform")
        dx, dy = dx + float(move["x"]), dy + float(move["y"])
        d = element.get("d", "")
        numbers = [float(n) for n in NUMBER.findall(d)]
        attributes = {k: v for k, v in element.attrib.items() if k not in ("d", "transform")}
        out.append((element.tag, {**attributes, "commands": NUMBER.sub("#", d)},
                    [n + (dy if i % 2 else dx) for i, n in enumerate(numbers)]))
        for child in element:
            walk(child, dx, dy)

    walk(root, 0.0, 0.0)
    return out


@pytest.mark.parametrize("latex", FORMULAS + [r"x + x + \frac{x}{x}", r"\text{peak} = B S \cdot 2"])
def test_every_outline_point_stays_where_ziafont_put_it(latex, absolute) -> None:
    own, moved = ET.fromstring(absolute(latex)), ET.fromstring(mathsvg.typeset(latex).svg)
    assert not any("transform" in e.attrib for e in own.iter())  # ziafont's own: outlines where they are drawn
    assert sum("transform" in e.attrib for e in moved.iter()) >= 5
    before, after = drawn(own), drawn(moved)
    assert [(tag, attrib) for tag, attrib, _ in before] == [(tag, attrib) for tag, attrib, _ in after]
    from ziafont.config import config

    # ziafont rounds each number to its precision: the sum before, the offset and the outline apart now
    tolerance = 1.5 * 10 ** -config.precision
    for (_, _, a), (_, _, b) in zip(before, after):
        assert len(a) == len(b) and all(abs(x - y) <= tolerance for x, y in zip(a, b))
    assert own.find(f"{SVG}title").text == moved.find(f"{SVG}title").text == latex


def test_one_outline_text_per_glyph_and_size() -> None:
    root = ET.fromstring(mathsvg.typeset(r"x + x + x^{x}").svg)
    outlines = [p.get("d") for p in root.iter(f"{SVG}path") if "transform" in p.attrib]
    # four x's (three at the text size, one superscript) and two plus signs: three outline texts
    assert len(outlines) == 6 and len(set(outlines)) == 3


def test_another_ziafont_is_left_alone() -> None:
    assert not ziaglyphs.install(types.SimpleNamespace(__version__="0.12"))
