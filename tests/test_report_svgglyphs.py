"""symbolic.report.svgglyphs: a chart's glyph ``<use>``s drawn as the outlines they name, in place.

Against matplotlib's own SVG: every glyph reference becomes, in the same order, a path with the
referenced outline and the transform SVG gives the reference (the ``<use>``'s, then the
outline's own); everything that is not a glyph reference is byte for byte what matplotlib wrote.
"""

from __future__ import annotations

import re

import pytest

from symbolic.report import plots, svgglyphs

GLYPH = re.compile(r'<path id="(?P<id>[^"]+)"(?: d="(?P<d>[^"]*)")? transform="(?P<own>[^"]+)"/>')
USE = re.compile(r'<use xlink:href="#(?P<id>[^"]+)"(?: transform="(?P<place>[^"]+)")?/>')
PLACED = re.compile(r'<path d="(?P<d>[^"]*)" transform="(?P<transform>[^"]+)"/>')

CHARTS = {
    "breakdown": lambda: plots.breakdown(["weights", "gradients", "optimizer states (AdamW)"], [3e9, 2.5e9, 7e9],
                                         [plots.colour(i) for i in range(3)]),
    "sweep": lambda: plots.sweep("batch size B (log scale)", [1, 2, 4, 8, 16],
                                 [plots.Series("weights", (4e9,) * 5),
                                  plots.Series("activations", (1e9, 2e9, 4e9, 8e9, 16e9))],
                                 [plots.colour(0), plots.colour(1)], [("h100-80gb", 80 * 2**30)], current=4),
    # mathtext: sub- and superscripts are glyphs placed by a translation and a scale
    "mathtext": lambda: plots.elasticities(["$H$", "$2^{10}$", "$d_{ff}$"], [0.4, 0.9, 1.7]),
}


def matplotlibs(make, monkeypatch: pytest.MonkeyPatch) -> str:
    """A chart's SVG as matplotlib wrote it (the rewrite switched off)."""
    with monkeypatch.context() as patch:
        patch.setattr(svgglyphs, "inline", lambda svg: svg)
        return make()


def references(svg: str) -> list[tuple[str, str]]:
    """Each glyph reference as (outline, transform it is drawn with), in document order; spaces draw nothing."""
    glyphs = {m["id"]: (m["d"], m["own"]) for m in GLYPH.finditer(svg)}
    out = []
    for m in USE.finditer(svg):
        d, own = glyphs[m["id"]]
        if d is not None:
            out.append((d, f"{m['place']} {own}" if m["place"] else own))
    return out


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_each_glyph_is_the_outline_it_named_with_the_same_transform(name, monkeypatch) -> None:
    before = matplotlibs(CHARTS[name], monkeypatch)
    after = CHARTS[name]()  # what the reports draw
    assert after == svgglyphs.inline(before)
    assert 'xlink:href="#DejaVuSans' in before and 'xlink:href="#DejaVuSans' not in after
    assert name != "mathtext" or ') scale(0.7) scale(0.015625)"/>' in after
    placed = [(m["d"], m["transform"]) for m in PLACED.finditer(after)]
    assert placed == references(before) and len(placed) > 20
    # the rest is matplotlib's: glyph references out of one, placed outlines out of the other
    assert PLACED.sub("", after) == USE.sub("", before)  # markers are <use>s with x and y: not matched


GLYPH_DEF = '<defs><path id="G-1" d="M 0 0 L 10 0 L 10 10 z" transform="scale(0.015625)"/></defs>'


@pytest.mark.parametrize("use", [
    '<use xlink:href="#G-1" transform="rotate(90)"/>',  # turned
    '<use xlink:href="#G-1" transform="translate(64 0) scale(0.7 0.5)"/>',  # stretched
    '<use xlink:href="#G-1" x="3" y="4" style="stroke: #000000"/>',  # a marker, not a glyph
    '<use xlink:href="#missing"/>',  # nothing to inline
])
def test_a_reference_placed_otherwise_is_left_as_written(use) -> None:
    svg = f"<svg>{GLYPH_DEF}<g>{use}</g></svg>"
    assert svgglyphs.inline(svg) == svg


def test_placement_then_the_outlines_scale_and_spaces_draw_nothing() -> None:
    space = '<defs><path id="G-0" transform="scale(0.015625)"/></defs>'
    svg = (f'<svg>{GLYPH_DEF}{space}<g><use xlink:href="#G-1"/><use xlink:href="#G-0" transform="translate(3 0)"/>'
           '<use xlink:href="#G-1" transform="translate(6.5 0.25) scale(0.7)"/></g></svg>')
    assert svgglyphs.inline(svg) == (
        f'<svg>{GLYPH_DEF}{space}<g><path d="M 0 0 L 10 0 L 10 10 z" transform="scale(0.015625)"/>'
        '<path d="M 0 0 L 10 0 L 10 10 z" transform="translate(6.5 0.25) scale(0.7) scale(0.015625)"/></g></svg>')
