"""Issue 14, reports: what a reader meets in a built report (trained context, long words, no empty
sections, hand calculations, charts, labels that say what a figure includes).

Most checks build a small specification in tmp_path without typesetting (plain LaTeX pieces, no
SVG), which takes a few seconds; one module fixture builds a real PDF for the layout checks.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import sympy
from helpers import run

from symbolic import planning
from symbolic.core.symbols import S
from symbolic.report import adapter, context, planned, plots, render, spec, texescape
from symbolic.report.mathsvg import MARGIN, for_ziamath, px, width
from symbolic.report.texescape import CHUNK, breakable
from symbolic.report.typeset import Typesetter, html_words
from symbolic.text import printing

needs_poppler = pytest.mark.skipif(shutil.which("pdftotext") is None or shutil.which("pdfinfo") is None,
                                   reason="pdftotext/pdfinfo are not installed (poppler-utils)")
needs_pdflatex = pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")

LLAMA = '''title = "Llama long context"
model = "llama-3-8b"
mode = "train"
gpus = ["h100-80gb", "rtx-4090"]
[regime]
batch = 1
seq = 4096
precision = "bf16"
optimizer = "adam-8bit"
recompute = "full"
flash = true
zero = 0
'''
LONG_WORD = "W" * 200
LONG_URL = "https://example.org/" + "/".join(f"segment{i}_with_a_long_name" for i in range(8)) + "?q=1&r=2"
NOTES = f"A note with a long word {LONG_WORD} and a long address {LONG_URL} in its middle."


def _write(tmp_path: Path, body: str, name: str = "r.toml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


def _plain(path: Path) -> tuple[spec.ReportSpec, object, dict]:
    """Specification, scenario and context of a report, without typesetting (fast)."""
    report_spec = spec.load(path)
    scenario = adapter.scenario_for(report_spec)
    return report_spec, scenario, context.build(report_spec, scenario, Typesetter(), charts=False)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llama")
    report_spec, scenario, ctx = _plain(_write(tmp, LLAMA))
    return {"spec": report_spec, "scenario": scenario, "ctx": ctx, "tex": render.render_tex(ctx),
            "html": render.render_html(ctx)}


# --- 1. trained context ----------------------------------------------------------------------------
def test_summary_says_when_the_largest_context_passes_the_trained_length(llama):
    options = dict(batch=1, precision="bf16", optimizer="adam-8bit", recompute="full", flash=True)
    fit = planning.fit_seq("llama-3-8b", "h100-80gb", mode="train", **options)
    trained = planning.load("llama-3-8b").config["max_position_embeddings"]
    assert fit.value > trained  # the situation the sentence is for
    sentence = next(p for p in llama["ctx"]["summary"]["points"] if "trained for" in p)
    assert f"{fit.value:,} on h100-80gb" in sentence
    assert f"beyond the {trained:,} positions llama-3-8b was trained for" in sentence
    assert "rtx-4090" not in sentence  # nothing fits there: not listed
    assert f"beyond the {trained:,} positions" in llama["tex"]


def test_no_trained_sentence_where_the_context_stays_inside(tmp_path):
    # batch 2: at batch 1 the optimizer step leads up to 8,192 tokens (the rebuilt layer comes after the loss's
    # moment, not beside it), so no budget fits 4,096 and not 8,192
    two = LLAMA.replace("batch = 1", "batch = 2")
    probe = adapter.scenario_for(spec.load(_write(tmp_path, two, "probe.toml")))
    between = (probe.evaluate({S: 4096}).total + probe.evaluate({S: 8192}).total) / 2  # fits 4,096, not 8,192
    body = two.replace('gpus = ["h100-80gb", "rtx-4090"]', f'gpus = [{{ name = "card", memory = {int(between)} }}]')
    _, scenario, ctx = _plain(_write(tmp_path, body))
    assert scenario.largest_value(S, scenario.gpus[0].capacity) < scenario.trained[S].value
    assert not any("trained for" in p for p in ctx["summary"]["points"])


def test_summary_says_when_the_reports_own_context_passes_the_trained_length(tmp_path):
    _, scenario, ctx = _plain(_write(tmp_path, LLAMA.replace("seq = 4096", "seq = 16384")))
    assert scenario.given[S] > scenario.trained[S].value
    assert "The report's context, S = 16,384, is beyond the 8,192 positions llama-3-8b" in " ".join(
        ctx["summary"]["points"])


@pytest.mark.parametrize("command", [
    ("memory",), ("fit", "--gpu", "h100-80gb", "--for", "batch"),
    ("time", "--gpu", "h100-80gb", "--mfu", "0.4"),
    ("plan", "--gpu", "h100-80gb", "--mfu", "0.4", "--gpus", "8", "--global-batch", "8"),
])
def test_command_line_warns_of_the_trained_length_as_the_report_does(tmp_path, capsys, command):
    """The report's sentence and the command line's warning name the trained length in the same words."""
    _, _, ctx = _plain(_write(tmp_path, LLAMA.replace("seq = 4096", "seq = 16384")))
    sentence = next(p for p in ctx["summary"]["points"] if p.startswith("The report's context"))
    what = sentence.split(" is beyond ", 1)[1].removesuffix(".")  # the positions, the model, the config field
    name, *flags = command
    code, _, err = run(capsys, name, "llama-3-8b", "--seq", "16384", "--precision", "bf16", *flags)
    assert code == 0 and err.count("\n") == 1 and err.startswith("symbolic: warning: "), err
    assert f"seq 16,384 is beyond {what}:" in err and "RoPE scaling" in err
    code, _, err = run(capsys, name, "llama-3-8b", "--seq", "16384", "--precision", "bf16", *flags, "-q")
    assert code == 0 and err == ""  # --quiet: no warning
    code, _, err = run(capsys, name, "llama-3-8b", "--seq", "8192", "--precision", "bf16", *flags)
    assert code == 0 and err == ""  # at the trained length: nothing to say


def test_learned_positions_are_a_limit_not_a_trained_length():
    shape = planning.load("gpt2")
    assert shape.positions == 1024 and planned._trained(shape) == {}
    assert planned._trained(planning.load("llama-3-8b"))[S].value == 8192


def test_context_chart_draws_the_trained_length(llama):
    scenario = llama["scenario"]
    points = scenario.default_points(S, 128)
    marks = context._marks(scenario, S, points)
    trained = scenario.trained[S].value
    assert [m[0] for m in marks] == [trained] and "8,192" in marks[0][2]
    fig = plots.sweep_figure("S", points, [plots.Series("x", tuple(float(p) * 2**20 for p in points))],
                             ["#000"], [("h100-80gb", 80e9)], 4096, marks)
    ax = fig.axes[0]
    vertical = [line for line in ax.lines if list(line.get_xdata()) == [trained, trained]]
    assert len(vertical) == 1
    assert [t.get_text() for t in ax.texts if t.get_gid() == "mark-label"] == [marks[0][2]]
    legend = [t.get_text().replace("\n", " ") for t in fig.legends[0].get_texts()]
    assert marks[0][1] in legend
    assert context._marks(scenario, S, (512, 1024, 2048)) == []  # outside the sweep: no line


# --- 2. long words and URLs ----------------------------------------------------------------------
def test_breakable_cuts_long_words_outside_escapes():
    for word in ("x_" * 100, LONG_WORD, LONG_URL):
        pieces = str(breakable(word)).split("\\allowbreak{}")
        assert len(pieces) > 1 and max(len(p.replace("\\_", "_")) for p in pieces) <= CHUNK
    assert breakable("a short_word here") == "a short\\_word here"  # short words are left alone
    assert breakable("a\\b" * 20).count("\\textbackslash{}") == 20  # no break inside an escape


@pytest.fixture(scope="module")
def long_notes(tmp_path_factory):
    """An article-A report whose notes and custom term note hold a 200-character word and a long URL."""
    from symbolic.report import Outputs, build

    tmp = tmp_path_factory.mktemp("long")
    body = (f'title = "Long words: {LONG_WORD[:40]}"\nmodel = "article-a"\nnotes = "{NOTES}"\n'
            f'[[terms]]\nname = "extra"\nexpr = "4*B"\nnote = "{LONG_WORD} {LONG_URL}"\n')
    outputs = build(_write(tmp, body), Outputs(pdf=tmp / "r.pdf", html=tmp / "r.html", tex=tmp / "r.tex"))
    assert len(outputs.written) == 3
    return tmp


def _words_with_boxes(pdf: Path) -> list[tuple[float, float, str]]:
    out = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, check=True, text=True).stdout
    page = re.search(r'<page width="([\d.]+)"', out)
    assert page
    return [(float(a), float(page.group(1)), w) for a, w in re.findall(r'<word xMin="[\d.]+" yMin="[\d.]+" '
                                                                       r'xMax="([\d.]+)" yMax="[\d.]+">([^<]*)</word>', out)]


@needs_poppler
def test_long_words_stay_inside_the_pdf_page(long_notes):
    words = _words_with_boxes(long_notes / "r.pdf")
    text = "".join(w for _, _, w in words)
    assert LONG_WORD in text and "segment7_with_a_long_name" in text  # every character is there
    right_margin = 17 / 25.4 * 72  # report.css @page margin
    for x_max, page_width, word in words:
        assert x_max <= page_width - right_margin + 1, (word[:40], x_max)


def test_only_long_words_are_runs_that_may_break_anywhere():
    """A cell's HTML runs: words over LONG_WORD characters alone (span.long), the rest as they were."""
    text = f"pool segments and\tfragmentation  {LONG_URL} allowance {LONG_WORD}"
    runs = html_words(text)
    assert "".join(r["text"] for r in runs) == text
    assert [r["text"] for r in runs if r["long"]] == [LONG_URL, LONG_WORD]
    assert all(len(w) <= texescape.LONG_WORD for r in runs if not r["long"] for w in r["text"].split())
    assert html_words("fragmentation allowance") == [{"text": "fragmentation allowance", "long": False}]
    assert html_words("") == [{"text": "", "long": False}]


def test_a_prose_cells_long_words_are_spans_of_their_own(long_notes):
    page = (long_notes / "r.html").read_text(encoding="utf-8")
    row = next(r for r in page.split("<tr") if html.escape(LONG_URL) in r and "<td" in r)
    assert f'<span class="long">{LONG_WORD}</span> <span class="long">{html.escape(LONG_URL)}</span>' in row
    css = (render.TEMPLATES / "report.css").read_text(encoding="utf-8")
    assert re.search(r"table\.terms td:nth-child\(5\) \.long[^{]*\{ overflow-wrap: anywhere; \}", css)
    assert "td { overflow-wrap: break-word; }" in css  # ordinary words in a table break only between words


@pytest.mark.slow
@needs_pdflatex
def test_long_words_in_the_tex_compile_without_overfull_boxes(long_notes, tmp_path):
    shutil.copy(long_notes / "r.tex", tmp_path / "r.tex")
    for _ in range(2):
        result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "r.tex"],
                                cwd=tmp_path, capture_output=True, timeout=180)
        assert result.returncode == 0, result.stdout.decode("utf-8", "replace")[-2000:]
    log = (tmp_path / "r.log").read_text(encoding="utf-8", errors="replace")
    overfull = [float(x) for x in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\)", log)]
    assert all(x <= 1.0 for x in overfull), overfull
    if shutil.which("pdfinfo"):
        info = subprocess.run(["pdfinfo", str(tmp_path / "r.pdf")], capture_output=True, text=True).stdout
        assert re.search(r"^Title:\s+Long words: W{40}$", info, re.M), info


# --- 3. no empty sections ------------------------------------------------------------------------
def test_source_headings_all_have_rows(llama):
    ctx = llama["ctx"]
    assert ctx["sources"] and all(s["table"]["rows"] for s in ctx["sources"])
    cited = {c["id"] for c in ctx["cited"]}
    assert {"zero2020", "deepspeed"} <= cited  # cited by the bytes-per-parameter comparison only
    html = llama["html"]
    for block in html.split('<div class="source">')[1:]:
        assert "<table" in block.split("</div>")[0]
    assert "Cited in the comparisons" in html and "Rajbhandari" in html.split("Cited in the comparisons")[1]
    tex = llama["tex"]
    headings = re.findall(r"\\subsection\*\{([^\n]*)\}\n", tex.split("\\section*{Sources}")[1])
    assert not any("Rajbhandari" in h or "DeepSpeed" in h for h in headings)


def test_activation_comparison_is_titled_by_its_rows(tmp_path):
    _, scenario, _ = _plain(_write(tmp_path, LLAMA.replace("seq = 4096", "seq = 4096\ntp = 2")))
    group = next(g for g in scenario.variants if g.title.startswith("Activations"))
    assert not any(row.source == "article-B" for row in group.rows)
    assert "article B" not in group.title
    _, scenario, _ = _plain(_write(tmp_path, LLAMA, "single.toml"))
    group = next(g for g in scenario.variants if g.title.startswith("Activations"))
    assert any(row.source == "article-B" for row in group.rows) and "article B" in group.title


def test_tex_mentions_no_chart_and_has_pdf_metadata(llama, long_notes):
    tex = llama["tex"]
    for word in ("Horizontal lines", "vertical line", "dotted", "chart"):
        assert word not in tex, word
        assert word not in (long_notes / "r.tex").read_text(encoding="utf-8"), word
    html = (long_notes / "r.html").read_text(encoding="utf-8")
    assert "Horizontal lines are the GPUs" in html  # the HTML has the charts the sentence describes
    assert f"pdftitle={{{llama['spec'].title}}}" in tex and "pdfauthor=" in tex


@needs_poppler
def test_pdf_has_its_title_in_the_metadata(long_notes):
    info = subprocess.run(["pdfinfo", str(long_notes / "r.pdf")], capture_output=True, text=True, check=True).stdout
    assert re.search(r"^Title:\s+Long words: W{40}$", info, re.M), info


# --- 4. hand calculations ------------------------------------------------------------------------
def test_every_equals_sign_shares_one_column(long_notes):
    html = (long_notes / "r.html").read_text(encoding="utf-8")
    widths = re.findall(r'<td class="lhs" style="width: ([\d.]+)px">', html)
    assert len(widths) >= 6 and len(set(widths)) == 1
    lhs = re.findall(r'<td class="lhs" style="width: [\d.]+px">(<svg.*?</svg>)?</td>', html)
    widest = max(float(m) for m in re.findall(r'<svg[^>]* width="([\d.]+)"', "".join(lhs)))
    assert float(widths[0]) >= widest
    # the result line repeats the name, so that it lines up with the lines above
    assert html.count('<tr class="result">') == html.count('<table class="calc">')


def test_unary_minus_is_typeset_as_one():
    assert for_ziamath("M = - 4 H V + 2 N") == "M = {-}4 H V + 2 N"
    assert for_ziamath(r"\left(- 2 H V + N\right)") == r"\left({-}2 H V + N\right)"
    assert for_ziamath("{} - 4 H V") == "{} - 4 H V" and for_ziamath("a - b") == "a - b"  # binary stays binary
    import ziamath

    raw = ziamath.Math.fromlatex(r"x = - 4 H", size=px(10.0), margin=MARGIN).svgxml().attrib["width"]
    assert width(r"x = - 4 H") < float(raw) - 3  # ziamath alone spaces it as a binary minus


def test_space_before_max():
    assert for_ziamath(r"2 B S \max\left(1, x\right)") == r"2 B S \,\max\left(1, x\right)"
    assert for_ziamath(r"2 \cdot \max(1, 2)") == r"2 \cdot \max(1, 2)"  # after an operator: no space
    import ziamath

    raw = ziamath.Math.fromlatex(r"S \max(1)", size=px(10.0), margin=MARGIN).svgxml().attrib["width"]
    assert width(r"S \max(1)") > float(raw) + 1  # ziamath alone sets S and max with no space


def test_no_doubled_signs_in_any_calculation(tmp_path):
    body = LLAMA.replace('mode = "train"', 'mode = "infer"').replace('optimizer = "adam-8bit"\nrecompute = "full"\n'
                                                                      'flash = true\nzero = 0\n', "")
    body = body.replace('precision = "bf16"', 'weights = "bf16"')
    _, _, ctx = _plain(_write(tmp_path, body))
    bodies = [str(line["tex_body"]) for c in ctx["calculations"] for line in c["lines"]]
    assert any("- " in b for b in bodies)  # there are minus signs to get right
    for b in bodies:
        assert not re.search(r"[+-]\s*-|-\s*\+", b.replace("{} - ", "")), b


def test_rule_of_thumb_rows_are_simplified(tmp_path):
    body = LLAMA.replace('mode = "train"', 'mode = "infer"').replace('optimizer = "adam-8bit"\nrecompute = "full"\n'
                                                                      'flash = true\nzero = 0\n', "")
    body = body.replace('precision = "bf16"', 'weights = "bf16"')
    _, scenario, _ = _plain(_write(tmp_path, body))
    plan = planning.plan("llama-3-8b", mode="infer", batch=1, seq=4096, weights="bf16")
    author_order = plan.formula.latex(equation=True)
    assert "- 4 H V" in author_order and "+ 4 H V" in author_order  # the cancelling pair is there to collapse
    rules = next(g for g in scenario.variants if g.title.startswith("Rules of thumb"))
    row = next(r for r in rules.rows if r.chosen)
    assert "4 H V" not in row.latex
    assert row.latex == f"{plan.formula.name_latex} = {printing.latex(plan.formula.expr)}"
    assert row.value == plan.evaluate().total


# --- 5. charts -----------------------------------------------------------------------------------
def test_legend_labels_are_whole():
    long = "one layer's activations, rebuilt during its backward pass, with every tensor the layer keeps alive"
    fig = plots.breakdown_figure([long, "short"], [3.0 * 2**30, 1.0 * 2**30], ["#111", "#222"])
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts[0].replace("\n", " ") == f"{long}: 75.0%" and "\n" in texts[0]
    assert not any("…" in t for t in texts)
    assert all(len(line) <= plots.LEGEND_WIDTH for t in texts for line in t.split("\n"))


def _sweep(capacities: list[tuple[str, float]], top_total: float):
    xs = (1, 2, 4, 8, 16)
    values = tuple(top_total / 16 * x for x in xs)
    return plots.sweep_figure("B", xs, [plots.Series("all", values)], ["#4e79a7"], capacities, 2)


def test_capacity_labels_of_nearly_equal_gpus_do_not_overlap():
    caps = [("a: 80 GB", 80e9), ("b: 80 GiB", 80 * 2**30), ("c: 94 GB", 94e9)]
    fig = _sweep(caps, 100 * 2**30)
    labels = sorted((t for t in fig.axes[0].texts if (t.get_gid() or "").startswith("capacity-label")),
                    key=lambda t: t.get_position()[1])
    assert len(labels) == 3
    ys = [t.get_position()[1] for t in labels]
    assert all(b - a >= plots.LABEL_GAP - 1e-9 for a, b in zip(ys, ys[1:]))
    assert [t.get_text().split(":")[0] for t in labels] == ["a", "b", "c"]
    assert plots.spread([0.5, 0.5, 0.9], 0.06) == pytest.approx([0.5, 0.56, 0.9])


def test_markers_are_not_clipped_by_the_axes():
    fig = _sweep([("g", 80 * 2**30)], 60 * 2**30)
    ax = fig.axes[0]
    markers = [line for line in ax.lines if line.get_marker() == "o"]
    assert markers and all(not line.get_clip_on() for line in markers)
    low, high = ax.get_xlim()
    assert low < 1 and high > 16


def test_small_cards_stay_readable():
    fig = _sweep([("12 GiB card", 12 * 2**30), ("24 GiB card", 24 * 2**30)], 400 * 2**30)
    ax = fig.axes[0]
    top = ax.get_ylim()[1]
    assert 12 / top >= 0.2  # the 12 GiB line sits well above the axis, not squashed at the bottom
    assert [line for line in ax.lines if line.get_marker() == "^"]  # totals above the chart are marked
    assert "above the chart" in fig.legends[0].get_texts()[0].get_text()
    # without a GPU to compare against, the axis shows everything
    assert plots.y_top([1.0, 500.0], []) == 500.0


# --- 6. one figure, one label --------------------------------------------------------------------
def test_weights_labels_say_what_they_include(tmp_path):
    body = (LLAMA.replace('mode = "train"', 'mode = "infer"')
            .replace('optimizer = "adam-8bit"\nrecompute = "full"\nflash = true\nzero = 0\n', "")
            .replace('precision = "bf16"', 'weights = "bf16"'))
    _, scenario, ctx = _plain(_write(tmp_path, body))
    ev = scenario.evaluate()
    terms = {t.key: (t.title, v) for t, v in ev.terms}
    assert terms["weights"][0] == "bf16 weights (transformer layers)"
    breakdown = [row["cells"][0]["text"] for row in ctx["breakdown"]["table"]["rows"]]
    assert "bf16 weights (transformer layers)" in breakdown
    group = next(g for g in scenario.variants if g.title.startswith("Weights"))
    rows = {r.label.split(" ")[0]: r for r in group.rows}
    assert rows["bf16"].label == "bf16 weights (all: layers, embeddings and head)"
    assert rows["bf16"].value == terms["weights"][1] + terms["embeddings"][1] != terms["weights"][1]
    int8 = planning.plan("llama-3-8b", mode="infer", batch=1, seq=4096, weights="int8")
    parts = {t.key: v for t, v in int8.evaluate().terms}
    assert rows["int8"].label == "int8 weights (all: layers, scales, embeddings and head)"
    assert rows["int8"].value == parts["weights"] + parts["weight_scales"] + parts["embeddings"]
    assert sympy.Integer(0) < parts["weight_scales"]


# --- formulas too long to break (a max of long sums) -------------------------------------------------
PEAK = (r"\frac{3 \max\left(2 N, 2 B H L S + 14 B H S + \frac{4 B H S a_{\mathrm{kv}}}{a} + 12 B S V + 4 B S a"
        r" + 8 B S d_{\mathrm{ff}} + 8 B S\right)}{50}")


def test_hand_calculation_works_out_max_arguments():
    from symbolic.core.symbols import B, N
    from symbolic.report import calc

    expr = 3 * sympy.Max(2 * N, 2 * B * S + 14 * B) / 50 + 7
    values = {B: sympy.Integer(1), S: sympy.Integer(4096), N: sympy.Integer(8030261248)}
    shown = printing.latex_with_numbers(calc.worked(expr, values), values)
    assert r"\max\left(16{,}060{,}522{,}496, 8206\right)" in shown  # 2·N and 2·1·4096 + 14·1, worked out
    assert calc.worked(expr, values).xreplace(values) != expr.xreplace(values)  # printed, not evaluated
    assert calc.worked(expr, {}) == expr  # nothing to work out without values


def test_cell_math_too_long_to_break_is_shrunk_to_its_column():
    from symbolic.report.typeset import FIT, MIN_POINTS, SvgTypesetter

    ts = SvgTypesetter()
    assert ts.width(PEAK) > 240
    cell = ts.cell(math=r"\frac{123 N}{512} + " + PEAK + " + 23068672", width=240)
    lines = re.findall(r'<svg[^>]* width="([\d.]+)"[^>]* aria-label="([^"]*)"', str(cell["svg"]))
    assert len(lines) >= 2
    for w, latex in lines:  # each line fits, or is as small as a cell's formula gets
        assert float(w) <= 240 + 1 or abs(ts.width(html.unescape(latex), MIN_POINTS) - float(w)) < 0.5, latex
    tex = str(Typesetter().cell(math=PEAK + " + 2 N", width=240)["tex"])
    assert tex.startswith(rf"$\resizebox{{\ifdim\width>{FIT}{FIT}\else\width\fi}}{{!}}{{$\frac{{3 \max(")
    assert tex.endswith("} + 2 N$")  # short terms stay breakable text


def test_a_wide_max_breaks_after_its_commas():
    from symbolic.report import calc

    row = r"{} + \max\left(\frac{8 N}{N_{d}}, \frac{2 B H S}{t} + L \left(\frac{12 B H S}{t} + 4\right)\right) + 7"
    lines = calc.split_max(row, len, 80)
    assert lines == [r"{} + \max\left(\frac{8 N}{N_{d}},\right.",
                     r"\left.\quad \frac{2 B H S}{t} + L \left(\frac{12 B H S}{t} + 4\right)\right) + 7"]
    assert all(width(line) > 0 for line in lines)  # each line typesets on its own (balanced delimiters)
    assert calc.split_max(row, len, 500) == [row]  # fits: left alone
    inside = r"2 + \frac{3 \max\left(a, b\right)}{50}"
    assert calc.split_max(inside, len, 5) == [inside]  # a max inside a fraction cannot break


def test_an_argument_of_a_max_still_too_wide_breaks_between_its_terms():
    """Issue 25: a table cell's max whose argument alone is wider than the column (the peak term's phases)."""
    from symbolic.report import calc

    row = r"{} + \max\left(\frac{8 N}{N_{d}}, \frac{2 B H S}{t} + L \left(\frac{12 B H S}{t} + 4\right)\right) + 7"
    lines = calc.split_max(row, len, 50)
    assert lines == [r"{} + \max\left(\frac{8 N}{N_{d}},\right.", r"\left.\quad \frac{2 B H S}{t}\right.",
                     r"\left.\qquad {} + L \left(\frac{12 B H S}{t} + 4\right)\right) + 7"]
    assert all(width(line) > 0 for line in lines)  # each line typesets on its own (balanced delimiters)
