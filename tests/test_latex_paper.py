"""``symbolic latex --width`` output fits a two-column article: compiled with pdflatex, no overfull box over 1 pt.

The width estimate (ziamath, scaled) only chooses the breaks; these tests judge them with TeX itself,
by the "Overfull \\hbox (Xpt too wide)" lines of the log. They skip only when pdflatex is absent
(scripts/system-deps.sh installs it; CI has it).
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import run

import symbolic
from symbolic.cli.report import snippet
from symbolic.report import latex_layout

OVERFULL = re.compile(r"Overfull \\hbox \((\d+(?:\.\d+)?)pt too wide\)[^\n]*?lines? (\d+)")
needs_tex = pytest.mark.skipif(shutil.which("pdflatex") is None,
                               reason="pdflatex is not installed (scripts/system-deps.sh installs texlive-latex-base)")


@pytest.fixture(scope="module")
def library_snippets():
    """``symbolic latex`` of every library formula for a form, width and environment, made once per module.

    Module-scoped, so the module runs on one worker (see tests/conftest.py): the width estimates
    (ziamath typesetting, cached in ``latex_layout.width``) are then measured once, not per worker.
    """
    made: dict[tuple[str, str | None, str | None], list[str]] = {}

    def get(form: str, width: str | None = None, env: str | None = None) -> list[str]:
        if (form, width, env) not in made:
            made[form, width, env] = [snippet(symbolic.formula(key), form, width=width, env=env)
                                      for key in symbolic.keys()]
        return made[form, width, env]

    return get


def compile_overfull(tmp_path: Path, snippets: list[str], box: str | None = None) -> list[tuple[float, str]]:
    """Compile the snippets in a two-column article (each in a minipage ``box`` wide, if given);
    each overfull box as (points too wide, its snippet's header)."""
    if box is not None:
        snippets = [f"\\noindent\\begin{{minipage}}{{{box}}}\n{s}\n\\end{{minipage}}\n" for s in snippets]
    document = latex_layout.document(snippets, latex_layout.COLUMNWIDTH)
    assert document.startswith("\\documentclass[twocolumn]{article}")
    (tmp_path / "paper.tex").write_text(document)
    result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper.tex"], cwd=tmp_path,
                            capture_output=True, timeout=300)
    log = (tmp_path / "paper.log").read_text(errors="replace")
    assert result.returncode == 0, log[-3000:]
    lines = document.splitlines()
    out = []
    for match in OVERFULL.finditer(log):
        line = int(match.group(2))
        header = next((lines[i] for i in range(line - 1, -1, -1) if lines[i].startswith("% ")), "?")
        out.append((float(match.group(1)), header))
    return out


@needs_tex
def test_overfull_boxes_are_detected(tmp_path):
    """Without --width llm.peak is one line too wide for the column (the detector can fail)."""
    found = compile_overfull(tmp_path, [snippet(symbolic.formula("llm.peak"))])
    assert len(found) == 1 and found[0][0] == pytest.approx(49, abs=1) and "llm.peak" in found[0][1], found


@needs_tex
@pytest.mark.slow
@pytest.mark.parametrize("form", ["terms", "composed", "expanded"])
@pytest.mark.parametrize("env", [None, "multline", "align", "split"])
def test_every_formula_fits_a_column(tmp_path, library_snippets, form, env):
    found = compile_overfull(tmp_path, library_snippets(form, "\\columnwidth", env))
    assert not [f for f in found if f[0] > 1.0], found


@needs_tex
@pytest.mark.slow
@pytest.mark.parametrize("form", ["terms", "composed"])
def test_every_formula_fits_six_centimetres(tmp_path, library_snippets, form):
    """A narrower measure than any journal's column: each equation in a 6 cm minipage."""
    assert not [f for f in compile_overfull(tmp_path, library_snippets(form, "6cm"), "6cm") if f[0] > 1.0]
    plain = [snippet(symbolic.formula(key), form) for key in ("llm.peak", "time.step")]
    assert len([f for f in compile_overfull(tmp_path, plain, "6cm") if f[0] > 1.0]) == 2  # the box does bind


@needs_tex
def test_centimetres_and_several_keys(tmp_path, capsys):
    code, out, _ = run(capsys, "latex", "llm.peak", "llm.steady", "--width", "6cm", "--env", "align")
    assert code == 0 and out.count("\\begin{align}") == 2
    assert not [f for f in compile_overfull(tmp_path, [out]) if f[0] > 1.0]


def _normal(latex: str) -> str:
    """LaTeX with the line structure (breaks, alignment, indents, the opened delimiters) taken out."""
    latex = latex.replace("\\bigl(", "\\left(").replace("\\bigr)", "\\right)")
    for mark in ("\\\\", "{}", "\\nonumber", "&", "\\quad"):
        latex = latex.replace(mark, " ")
    return " ".join(latex.split())


@pytest.mark.parametrize("form", ["terms", "composed"])
def test_breaks_keep_every_term_in_order(form):
    """Broken onto lines, the equation says exactly what the one-line one says, in the author's order."""
    checked = 0
    for key in symbolic.keys():
        f = symbolic.formula(key)
        one_line = f.latex(form, equation=True)
        if "\\frac" in one_line:
            continue  # an opened product may move a factor out of its fraction (same value, other layout)
        body = snippet(f, form, width="6cm", env="multline").split("\\begin{multline}")[1].split("\\label")[0]
        assert _normal(body) == _normal(one_line), key
        checked += 1
    assert checked > 50


def test_llm_peak_breaks_between_terms_in_the_authors_order():
    out = snippet(symbolic.formula("llm.peak"), width="8.4cm", env="align", label="eq:peak")
    rows = [row.strip() for row in out.split("\\begin{align}\n")[1].split("\n\\end{align}")[0].splitlines()]
    assert len(rows) >= 3 and rows[0].startswith("M_{\\mathrm{peak}} &= 4 N + 8 N + 4 N")
    assert all(row.endswith("\\nonumber \\\\") for row in rows[:-2]) and rows[-1] == "\\label{eq:peak}"
    assert "\\nonumber" not in rows[-2] and all(row.startswith("&\\quad {} + ") for row in rows[1:-1])


@pytest.mark.parametrize("text, points", [
    ("8.4cm", 8.4 / 2.54 * 72.27),  # 239.0 pt: TeX's 72.27 pt to the inch
    ("240pt", 240.0),
    ("3.3in", 3.3 * 72.27),
    ("\\columnwidth", 229.5),  # pdflatex's \the\columnwidth in \documentclass[twocolumn]{article}
    ("0.5\\textwidth", 0.5 * 469.0),  # and its \the\textwidth
    ("85mm", 85 / 25.4 * 72.27),
])
def test_widths(text, points):
    assert latex_layout.parse_width(text) == pytest.approx(points)


@pytest.mark.parametrize("argv, expected", [
    (("latex", "llm.peak", "--width", "3furlongs"), "give a length such as"),
    (("latex", "llm.peak", "--width", "1cm"), "between 50pt and 2000pt"),
    (("latex", "llm.peak", "--width", "\\hsize"), "give a length such as"),
    (("latex", "llm.peak", "--width", "5cm", "--env", "equation"), "does not fit in"),
    (("latex", "llm.peak", "llm.E", "--label", "eq:x"), "--label names one equation"),
    (("latex", "llm.peak", "--inline", "--width", "5cm"), "--inline is one line"),
])
def test_errors_are_one_line(capsys, argv, expected):
    code, out, err = run(capsys, *argv)
    lines = [line for line in err.splitlines() if line.startswith("symbolic: error:") or "error:" in line]
    assert code == 2 and out == "" and len(lines) == 1 and expected in lines[0], err


def test_default_output_is_unchanged_and_format_stays_bare(capsys):
    """Without --width the equation is one line as before; format(f, "L") is bare math (delimiters are the caller's)."""
    f = symbolic.formula("llm.peak")
    code, out, _ = run(capsys, "latex", "llm.peak")
    assert code == 0 and out.splitlines()[1:3] == ["\\begin{equation}", f"  {f.latex(equation=True)}"]
    assert format(f, "L") == f.latex(equation=True) and "$" not in format(f, "L")
    code, out, _ = run(capsys, "latex", "llm.peak", "--width", "30cm")  # wide enough: one line, no split
    assert code == 0 and "\\begin{split}" not in out and f"  {f.latex(equation=True)}" in out.splitlines()


def test_width_picks_split_only_when_needed(capsys):
    code, out, _ = run(capsys, "latex", "llm.E", "llm.peak", "--width", "\\columnwidth")
    first, second = out.split("\n\n")
    assert code == 0 and "\\begin{split}" not in first and "\\begin{split}" in second
    assert first.startswith("% llm.E: ") and second.startswith("% llm.peak: ")


@needs_tex
def test_document_compiles_and_fits(tmp_path, capsys):
    code, out, _ = run(capsys, "latex", "llm.peak", "llm.steady", "pytorch.peak.llama", "--form", "composed",
                       "--width", "\\columnwidth", "--env", "align", "--document")
    assert code == 0 and out.startswith("\\documentclass[twocolumn]{article}\n\\usepackage{amsmath}")
    assert out.count("\\begin{align}") == 3 and out.rstrip().endswith("\\end{document}")
    (tmp_path / "doc.tex").write_text(out)
    result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path,
                            capture_output=True, timeout=120)
    log = (tmp_path / "doc.log").read_text(errors="replace")
    assert result.returncode == 0, log[-2000:]
    assert not [float(m.group(1)) for m in OVERFULL.finditer(log) if float(m.group(1)) > 1.0]
