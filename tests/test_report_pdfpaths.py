"""symbolic.report.pdfpaths: WeasyPrint's PDF of a page with a chart and formulas is the same with recorded paths."""

from __future__ import annotations

import base64
import hashlib

import pytest

from symbolic.report import mathsvg, pdfpaths, plots, render


def _page() -> str:
    """A small page like a report's: a matplotlib chart (glyphs as <use>), inline formulas, a path with units."""
    chart = plots.breakdown(["weights", "gradients", "optimizer states"], [16.0, 16.0, 32.0],
                            [plots.colour(i) for i in range(3)])
    uri = "data:image/svg+xml;base64," + base64.b64encode(chart.encode("utf-8")).decode("ascii")
    math = "".join(mathsvg.typeset(latex).svg for latex in (r"2 \cdot 8{,}030{,}261{,}248", r"\frac{B S}{t} + 2 B S"))
    odd = ('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20">'
           '<path d="M 1 1 L 10% 50% Z" stroke="black"/><path d="M 1 1 L 9 9 Z" stroke="black"/></svg>')
    return f"<html><body><p>Memory {math} and {odd}</p><img src='{uri}'></body></html>"


def _pdf(html: str) -> bytes:
    import weasyprint

    identifier = hashlib.sha256(html.encode("utf-8")).hexdigest()[:32].encode("ascii")
    document = weasyprint.HTML(string=html, base_url=render.TEMPLATES.as_uri() + "/", url_fetcher=render.url_fetcher())
    return document.write_pdf(pdf_identifier=identifier)


@pytest.fixture
def recorded(monkeypatch):
    import weasyprint.svg as wsvg

    if not pdfpaths.install():
        pytest.skip(f"pdfpaths applies to WeasyPrint {pdfpaths.VERSION} only")
    pdfpaths.recorded.cache_clear()
    return wsvg.TAGS["path"]


def test_the_same_pdf_bytes_as_weasyprints_own_drawing(recorded, monkeypatch):
    import weasyprint.svg as wsvg

    html = _page()
    drawn = []
    own = recorded._symbolic_draw

    def counting(svg, node, font_size):
        drawn.append(node.get("d", ""))
        return own(svg, node, font_size)

    monkeypatch.setattr(wsvg, "TAGS", {**wsvg.TAGS, "path": counting})
    theirs = _pdf(html)
    parsed_by_weasyprint = len(drawn)
    drawn.clear()
    monkeypatch.setattr(wsvg, "TAGS", {**wsvg.TAGS, "path": recorded})
    ours = _pdf(html)
    assert ours == theirs
    assert parsed_by_weasyprint > pdfpaths.recorded() > 0  # glyphs repeat: fewer texts recorded than drawn
    assert not any("%" in d for d in pdfpaths._recorded)  # path data with units is left to WeasyPrint
    again = _pdf(html)  # every path now comes from the record
    assert again == theirs


def test_installing_twice_keeps_one_wrapper(recorded):
    import weasyprint.svg as wsvg

    assert pdfpaths.install() and wsvg.TAGS["path"] is recorded


def test_a_pdf_build_leaves_weasyprint_and_fonttools_as_it_found_them(monkeypatch):
    """html_to_pdf patches WeasyPrint's path renderer and fontTools' log level for its own build only (issue 26)."""
    import logging

    import weasyprint.svg as wsvg

    own = getattr(wsvg.TAGS["path"], "_symbolic_draw", wsvg.TAGS["path"])  # WeasyPrint's, whatever ran before
    monkeypatch.setitem(wsvg.TAGS, "path", own)
    monkeypatch.setattr(logging.getLogger("fontTools"), "level", logging.INFO)
    seen = []
    real = render.guarded_weasyprint
    monkeypatch.setattr(render, "guarded_weasyprint",
                        lambda write, warn=None: seen.append(wsvg.TAGS["path"] is not own) or real(write, warn))
    assert render.html_to_pdf(_page()).startswith(b"%PDF")
    assert seen == [pdfpaths.VERSION == __import__("weasyprint").__version__]  # patched while it built ...
    assert wsvg.TAGS["path"] is own and logging.getLogger("fontTools").level == logging.INFO  # ... and put back
