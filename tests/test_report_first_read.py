"""What a new user trips over in the default report (issue 25): the plan chart's labels and page
break, one unit of time in the plan, the notes column of the sources tables, digit groups in
formulas, and the plan on the first page.

One module fixture builds the default report (HTML and PDF) once; the other checks build only
what they look at.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import sympy

from symbolic.report import Outputs, adapter, build, context, plan_section, plots, render, spec
from symbolic.report.build import default_spec
from symbolic.report.typeset import Typesetter
from symbolic.text import printing

needs_poppler = pytest.mark.skipif(shutil.which("pdftotext") is None, reason="pdftotext is not installed (poppler-utils)")


@pytest.fixture(scope="module")
def default_report(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("default")
    outputs = build(None, Outputs(pdf=tmp / "r.pdf", html=tmp / "r.html", tex=tmp / "r.tex"))
    assert len(outputs.written) == 3
    return {"pdf": tmp / "r.pdf", "html": tmp / "r.html", "tex": tmp / "r.tex"}


@pytest.fixture(scope="module")
def plain() -> dict:
    """The default report's context without typesetting (no SVG): fast."""
    report_spec = spec.load(default_spec())
    return context.build(report_spec, adapter.scenario_for(report_spec), Typesetter(), charts=False)


def _plan_figures(monkeypatch: pytest.MonkeyPatch) -> tuple[dict, list]:
    """The default report's plan section, with every matplotlib figure its chart drew."""
    figures = []
    real = plots._svg

    def keep(fig):
        figures.append(fig)
        return real(fig)

    monkeypatch.setattr(plots, "_svg", keep)
    (section,) = plan_section.build(spec.load(default_spec()), Typesetter(), charts=True)
    assert len(figures) == 1
    return section, figures


# --- 5: the plan chart ---------------------------------------------------------------------------------------
def test_the_plan_charts_axis_labels_lie_inside_the_picture(monkeypatch):
    _, (fig,) = _plan_figures(monkeypatch)
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    ax = fig.axes[0]
    for box in (ax.xaxis.label.get_window_extent(renderer), ax.yaxis.label.get_window_extent(renderer),
                ax.get_tightbbox(renderer)):  # the tight box: the axes with every visible tick label
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)
    assert ax.xaxis.label.get_text() == "GPUs"


class _Keep(HTMLParser):
    """The tags inside each ``<div class="keep">`` of ``<section id="plan">``."""

    def __init__(self) -> None:
        super().__init__()
        self.in_plan, self.depth, self.kept = False, 0, []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        if tag == "section":
            self.in_plan = attrs.get("id") == "plan"
        if self.depth:
            self.depth += tag == "div"
            self.kept[-1].append((tag, attrs.get("class", "")))
        elif self.in_plan and tag == "div" and attrs.get("class") == "keep":
            self.depth = 1
            self.kept.append([])

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag == "div":
            self.depth -= 1


def test_the_plan_heading_and_its_chart_are_kept_on_one_page(default_report):
    parser = _Keep()
    parser.feed(default_report["html"].read_text(encoding="utf-8"))
    assert parser.kept, "the plan section has no block kept together"
    first = parser.kept[0]
    assert ("h2", "") in first and ("figure", "chart") in first, first
    assert ".keep { break-inside: avoid; }" in (render.TEMPLATES / "report.css").read_text(encoding="utf-8")


# --- 6: one unit of time -------------------------------------------------------------------------------------
def test_the_plan_uses_one_unit_of_time_in_its_tables_and_chart(monkeypatch):
    section, (fig,) = _plan_figures(monkeypatch)
    chosen = {row["cells"][0]["text"]: row["cells"][1]["text"] for row in section["chosen"][0]["rows"]}
    unit = chosen["time to train"].split()[-1]
    times = [row["cells"][8]["text"] for row in section["alternatives"][0]["rows"]]
    assert all(t.split()[-1] == unit for t in times), (unit, times)
    assert fig.axes[0].yaxis.label.get_text() == f"time to train ({unit})"


def test_the_unit_is_the_largest_in_which_the_chosen_time_is_at_least_one():
    assert plan_section.time_unit(4.6 * 3600) == ("hours", 3600)
    assert plan_section.time_unit(3 * 86400) == ("days", 86400)
    assert plan_section.time_unit(90) == ("minutes", 60)


# --- 7: the notes column --------------------------------------------------------------------------------------
def _layout(html: str):  # noqa: ANN202 - WeasyPrint's Document
    import weasyprint

    return weasyprint.HTML(string=html, base_url=render.TEMPLATES.as_uri() + "/", url_fetcher=render.url_fetcher()).render()


def _boxes(box):  # noqa: ANN001, ANN202
    yield box
    for child in getattr(box, "children", None) or []:
        yield from _boxes(child)


def test_sources_tables_give_the_notes_room_and_keep_formulas_in_their_cells(default_report):
    document = _layout(default_report["html"].read_text(encoding="utf-8"))
    page_width = document.pages[0]._page_box.children[0].width  # the page's content box
    terms = 0
    for page in document.pages:
        for table in (b for b in _boxes(page._page_box) if type(b).__name__ == "TableBox"):
            kind = table.element.get("class") or ""
            assert table.width <= page_width + 0.5, (kind, table.width, page_width)
            if kind not in ("terms", "breakdown"):
                continue
            if kind == "terms":
                terms += 1
                assert table.column_widths[4] >= 0.2 * table.width, table.column_widths  # the notes column
            for cell in (b for b in _boxes(table) if type(b).__name__ == "TableCellBox"):
                right = cell.content_box_x() + cell.width
                for inner in _boxes(cell):
                    if type(inner).__name__ == "InlineReplacedBox":  # a formula
                        assert inner.position_x + inner.margin_width() <= right + 1, (kind, cell.element.text)
    assert terms >= 5


def test_a_fraction_of_a_max_is_printed_coefficient_first_so_that_it_can_break():
    from symbolic.report import calc

    n, b = sympy.symbols("N B", positive=True)
    expr = sympy.Rational(3, 50) * sympy.Max(2 * n, 14 * b) + 7
    shown = printing.latex(calc.coefficient_first(expr))
    assert re.search(r"\\frac\{3\}\{50\} \\max\\left\((2 N, 14 B|14 B, 2 N)\\right\)", shown), shown
    assert printing.latex(expr) != shown and calc.coefficient_first(n + 1) == n + 1


# --- 8: digit groups in formulas ----------------------------------------------------------------------------
def test_large_integer_constants_are_grouped_like_substituted_values():
    n = sympy.Symbol("N")
    for value in (419430400, 67108864, 23068672, 10_000, -12_345):
        shown = printing.latex(value * n + 1)
        assert printing.number_latex(abs(value)) in shown, shown
        assert re.sub(r"\{,\}", "", printing.number_latex(value)) == str(value)  # the same number, grouped
    assert printing.latex(4096 * n) == "4096 N"  # four digits stay whole, as a substituted 4096 does
    assert printing.latex(n / 1048576) == r"\frac{N}{1{,}048{,}576}"


def test_the_reports_formulas_group_their_constants(plain, default_report):
    tex = render.render_tex(plain)
    assert "419{,}430{,}400" in tex and "419430400" not in tex
    html = default_report["html"].read_text(encoding="utf-8")
    labels = re.findall(r'aria-label="([^"]*)"', html)  # each SVG formula keeps its LaTeX
    assert any("419{,}430{,}400" in label for label in labels) and not any("419430400" in label for label in labels)


# --- 9: the plan on the first page ---------------------------------------------------------------------------
def test_the_summary_names_the_plan_with_its_key_numbers(plain):
    (section,) = plain["plan"]
    chosen = {row["cells"][0]["text"]: row["cells"][1]["text"] for row in section["chosen"][0]["rows"]}
    (point,) = [p for p in plain["summary"]["points"] if p.startswith("Capacity plan:")]
    gpus = chosen["GPUs"].split(" ")[0]
    assert chosen["time to train"] in point and f"{gpus} × " in point and f"{chosen['GPU-hours']} GPU-hours" in point
    assert plan_section.TITLE in point


@needs_poppler
def test_the_first_page_of_the_pdf_mentions_the_plan(plain, default_report):
    (point,) = [p for p in plain["summary"]["points"] if p.startswith("Capacity plan:")]
    first = subprocess.run(["pdftotext", "-f", "1", "-l", "1", str(default_report["pdf"]), "-"], capture_output=True,
                           text=True, check=True).stdout
    assert re.sub(r"[\s-]", "", point) in re.sub(r"[\s-]", "", first)  # lines joined, hyphens at breaks dropped


def test_a_max_inside_a_max_argument_breaks_after_its_commas_with_balanced_delimiters():
    """A phase that is itself the larger of two moments (full recompute: the loss's or the rebuilt layer's) puts a
    max inside the peak's max: a line still too wide breaks after the inner commas, then between its terms."""
    from symbolic.report import calc

    row = r"\max\left(2 N, 2 B H L S + \max\left(8 B S V, 10 B H S + 4 B S a + 12 B S d_{ff}\right)\right)"
    lines = calc.split_max(row, lambda text: 4.0 * len(text), 200)
    assert len(lines) > 2 and all(4.0 * len(line) <= 200 or r"\max" not in line[8:] for line in lines)
    for line in lines:
        assert line.count(r"\left") == line.count(r"\right"), line
    assert calc.split_max(row, lambda text: 4.0 * len(text), 10_000) == [row]
