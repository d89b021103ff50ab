"""Built reports: the PDF's text carries the engine's numbers and every heading; LaTeX compiles; PDFs
are byte-identical from build to build."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sympy

import symbolic
from symbolic import algebra, planning
from symbolic.report import Outputs, build
from symbolic.units import format_bytes

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
HEADINGS = ("Summary", "Does it fit?", "Notes", "Model and regime", "Notation", "Hand calculations", "Breakdown",
            "Memory against batch size", "Memory against sequence length", "Sensitivity",
            "Where the sources disagree", "Sources", "Errata")

needs_poppler = pytest.mark.skipif(shutil.which("pdftotext") is None,
                                   reason="pdftotext is not installed (scripts/system-deps.sh installs poppler-utils)")


def pdftext(path: Path) -> str:
    out = subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, check=True)
    return out.stdout.decode("utf-8", errors="replace")


def row(text: str, start: str) -> str:
    """The first line of ``text`` that starts with ``start`` (after spaces)."""
    return next(line for line in text.splitlines() if line.strip().startswith(start))


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpt2")
    outputs = build(REPORTS / "gpt2-article-b.toml", Outputs(pdf=tmp / "r.pdf", html=tmp / "r.html", tex=tmp / "r.tex"))
    assert outputs.written == [tmp / "r.html", tmp / "r.pdf", tmp / "r.tex"]
    return tmp


@needs_poppler
def test_pdf_text_has_headings_and_engine_numbers(gpt2):
    text = pdftext(gpt2 / "r.pdf")
    for heading in HEADINGS:
        assert heading in text, heading
    f = symbolic.formula("llm.peak")
    point = dict(H=768, L=12, V=50000, d_ff=3072, B=8, S=1024, D=1024)
    total = f.evaluate(point).total
    assert f"{int(total):,}" in text and format_bytes(total) in text
    n = symbolic.formula("llm.params").evaluate(H=768, L=12, V=50000, d_ff=3072).total
    assert f"{int(n):,}" in text
    for name, capacity in (("RTX 4090 (24 GiB)", 24 * 2**30), ("A100 40GB", 40 * 2**30), ("H100 80GB", 80 * 2**30)):
        line = row(text, name)
        batch = f.solve("B", capacity, {k: v for k, v in point.items() if k != "B"}).value
        S, D = symbolic.symbol("S"), symbolic.symbol("D")
        expr = f.subs({k: v for k, v in point.items() if k not in ("S", "D")}).xreplace({D: S})
        context = algebra.solve_max(expr, S, sympy.Integer(capacity)).value
        assert re.search(rf"\b{batch:,}\b.*\b{context:,}$", line.strip()), line
        assert "yes" in line and format_bytes(capacity - total) in line
    # the article's figures and errata are in the report
    assert "4,722,432" in text and "123,383,808" in text


@needs_poppler
def test_pdf_sensitivities_agree_with_the_engine(gpt2):
    text = pdftext(gpt2 / "r.pdf")
    f = symbolic.formula("llm.peak")
    S, D = symbolic.symbol("S"), symbolic.symbol("D")
    expr = f.composed().xreplace({D: S})
    point = {symbolic.symbol(k): v for k, v in dict(H=768, L=12, V=50000, d_ff=3072, B=8, S=1024).items()}
    total = expr.xreplace(point)
    for name in ("S", "B", "V", "H", "L"):
        x = symbolic.symbol(name)
        elasticity = sympy.diff(expr, x).xreplace(point) * point[x] / total
        assert f"{float(elasticity):.4f}" in text, name


def test_html_is_self_contained(gpt2):
    html = (gpt2 / "r.html").read_text(encoding="utf-8")
    assert "<style>" in html and "<svg" in html and 'src="data:image/svg+xml;base64,' in html
    assert "http://" not in html.replace("http://www.w3.org", "") and "file:" not in html
    assert "<title>M_{\\mathrm{peak}} = 4 N + 8 N" in html  # LaTeX source kept as the SVG title


@pytest.mark.slow
def test_latex_output_compiles(gpt2, tmp_path):
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex is not installed (scripts/system-deps.sh installs texlive-latex-base)")
    shutil.copy(gpt2 / "r.tex", tmp_path / "r.tex")
    for _ in range(2):  # longtable settles its column widths on the second run
        result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "r.tex"],
                                cwd=tmp_path, capture_output=True, timeout=120)
        assert result.returncode == 0, result.stdout.decode("utf-8", "replace")[-3000:]
    log = (tmp_path / "r.log").read_text(encoding="utf-8", errors="replace")
    assert "Overfull \\hbox" not in log
    if shutil.which("pdftotext"):
        text = pdftext(tmp_path / "r.pdf")
        assert "7,530,364,928" in text and "Hand calculations" in text


@needs_poppler
def test_pdf_is_byte_identical_across_builds(tmp_path):
    spec = REPORTS / "article-a-mlp.toml"
    build(spec, Outputs(pdf=tmp_path / "a.pdf"))
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "symbolic", "report", str(spec), "-q", "-o", str(tmp_path / "b.pdf")],
                   check=True, env=env, cwd=tmp_path, capture_output=True)
    a, b = (tmp_path / "a.pdf").read_bytes(), (tmp_path / "b.pdf").read_bytes()
    assert a == b
    assert b"CreationDate" not in a and b"ModDate" not in a


@needs_poppler
def test_real_model_report_agrees_with_the_planner(tmp_path):
    build(REPORTS / "llama-3-8b-h100.toml", Outputs(pdf=tmp_path / "r.pdf"))
    text = pdftext(tmp_path / "r.pdf")
    options = dict(batch=1, seq=4096, precision="bf16", optimizer="adam-8bit", recompute="full", flash=True)
    plan = planning.plan("llama-3-8b", mode="train", **options)
    assert f"{plan.total:,}" in text and format_bytes(plan.total) in text
    assert "8,030,261,248" in text
    for gpu in ("h100-80gb", "a100-80gb"):
        line = row(text, gpu)
        batch = planning.fit_batch("llama-3-8b", gpu, mode="train", **{k: v for k, v in options.items() if k != "batch"})
        seq = planning.fit_seq("llama-3-8b", gpu, mode="train", **{k: v for k, v in options.items() if k != "seq"})
        assert re.search(rf"yes .*\b{batch.value:,}\s+{seq.value:,}\s+1$", line.strip()), line
    fewest = planning.fit_gpus("llama-3-8b", "rtx-4090", mode="train", over="dp",
                               **{k: v for k, v in options.items()})
    assert f"{fewest.gpus} (dp {fewest.value}, ZeRO-3)" in row(text, "rtx-4090")
    for heading in ("Bytes per parameter: 16, 18 or 20?", "Activations: article B against Korthikanti et al.",
                    "Rules of thumb against the formula", *HEADINGS[:2], *HEADINGS[4:-1]):
        assert heading in text, heading
    for key in ("states.zero2020", "states.megatron", "states.deepspeed"):
        f = symbolic.formula(key)
        per = f.evaluate({"N": 1}).total
        assert f"{per} bytes per parameter" in text, key
