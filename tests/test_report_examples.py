"""The example reports in reports/, each built once for this module (a build takes seconds):

- the committed PDFs say what the current formulas build: same text (every number), same page
  count, same title; a build is byte-for-byte reproducible, in one process and from a fresh one;
- the built PDF's text carries the engine's numbers and every heading, the HTML is self-contained
  and the LaTeX compiles (the checks of what a built report shows share these builds, so that no
  report is built twice for them);
- the default report builds from an installed wheel, in a fresh virtual environment outside the
  checkout (``wheel_env.py``), with another hash seed: the same bytes as this module's build of its
  specification.

The committed bytes are not compared: a new WeasyPrint or matplotlib release changes them (font
subsets, path rounding) without any change in what the report says. A difference in the text means
a formula, a citation or a template changed without `make examples`.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import sympy
from wheel_env import clean_environment, install_wheel, wheel_metadata

import symbolic
from symbolic import planning
from symbolic.core.units import format_bytes
from symbolic.math import algebra
from symbolic.report import Outputs, build
from symbolic.report.build import default_spec

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
NUMBER = re.compile(r"[-+]?\d[\d,.]*")
HEADINGS = ("Summary", "Does it fit?", "Notes", "Model and regime", "Notation", "Hand calculations", "Breakdown",
            "Memory against batch size", "Memory against sequence length", "Sensitivity",
            "Where the sources disagree", "Sources", "Errata")
needs_poppler = pytest.mark.skipif(shutil.which("pdftotext") is None or shutil.which("pdfinfo") is None,
                                   reason="pdftotext/pdfinfo are not installed (scripts/system-deps.sh installs poppler-utils)")


def _words(pdf: Path) -> list[str]:
    """The PDF's text as words in reading order (line breaks and spacing ignored)."""
    out = subprocess.run(["pdftotext", "-enc", "UTF-8", str(pdf), "-"], check=True, capture_output=True, text=True)
    return out.stdout.split()


def _info(pdf: Path) -> dict[str, str]:
    out = subprocess.run(["pdfinfo", "-enc", "UTF-8", str(pdf)], check=True, capture_output=True, text=True).stdout
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines())}


def pdftext(path: Path) -> str:
    out = subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, check=True)
    return out.stdout.decode("utf-8", errors="replace")


def row(text: str, start: str) -> str:
    """The first line of ``text`` that starts with ``start`` (after spaces)."""
    return next(line for line in text.splitlines() if line.strip().startswith(start))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A fresh build (PDF, HTML and LaTeX) of an example spec, made once for the module; gives the PDF's path."""
    folder = tmp_path_factory.mktemp("fresh")
    built: dict[Path, Path] = {}

    def get(spec: Path) -> Path:
        if spec not in built:
            pdf, html, tex = (folder / f"{spec.stem}.{ext}" for ext in ("pdf", "html", "tex"))
            outputs = build(spec, Outputs(pdf=pdf, html=html, tex=tex))
            assert outputs.written == [html, pdf, tex]
            built[spec] = pdf
        return built[spec]

    return get


@pytest.fixture
def gpt2(fresh) -> Path:
    """The folder of the GPT-2 article-B example's fresh build (gpt2-article-b.pdf, .html, .tex)."""
    return fresh(REPORTS / "gpt2-article-b.toml").parent


@needs_poppler
@pytest.mark.slow
@pytest.mark.parametrize("spec", sorted(REPORTS.glob("*.toml")), ids=lambda p: p.stem)
def test_committed_pdf_is_current(spec, fresh):
    committed = spec.with_suffix(".pdf")
    assert committed.exists(), f"{committed.name} is missing: run `make examples`"
    fresh = fresh(spec)
    stale = f"{committed.name} is stale: run `make examples` and commit the result"
    old, new = _words(committed), _words(fresh)
    old_numbers, new_numbers = [w for w in old if NUMBER.search(w)], [w for w in new if NUMBER.search(w)]
    assert new_numbers == old_numbers, f"{stale} (numbers differ)"
    assert new == old, f"{stale} (text differs)"
    old_info, new_info = _info(committed), _info(fresh)
    assert new_info["Pages"] == old_info["Pages"] and int(new_info["Pages"]) > 0, stale
    assert new_info["Title"] == old_info["Title"] and new_info["Title"], stale


@needs_poppler
@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama-3-8b-h100", "mixtral-serving-long-context"])
def test_two_builds_are_byte_identical(name, tmp_path, fresh):
    spec = REPORTS / f"{name}.toml"
    first, second = fresh(spec), tmp_path / "b.pdf"
    build(spec, Outputs(pdf=second))
    assert first.read_bytes() == second.read_bytes(), f"two builds of {name} differ: something in it is not reproducible"


@needs_poppler
def test_the_comparison_sees_a_changed_number():
    """The text check is not vacuous: two committed reports differ in their numbers, and one report's words
    include the numbers a reader checks."""
    a, b = _words(REPORTS / "article-a-mlp.pdf"), _words(REPORTS / "llama-3-8b-h100.pdf")
    assert [w for w in a if NUMBER.search(w)] != [w for w in b if NUMBER.search(w)]
    assert sum(bool(NUMBER.search(w)) for w in b) > 100 and "Llama-3-8B" in " ".join(b)
    assert _info(REPORTS / "llama-3-8b-h100.pdf")["Title"].startswith("Llama-3-8B")


@needs_poppler
def test_pdf_text_has_headings_and_engine_numbers(gpt2):
    text = pdftext(gpt2 / "gpt2-article-b.pdf")
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
    text = pdftext(gpt2 / "gpt2-article-b.pdf")
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
    html = (gpt2 / "gpt2-article-b.html").read_text(encoding="utf-8")
    assert "<style>" in html and "<svg" in html and 'src="data:image/svg+xml;base64,' in html
    assert "http://" not in html.replace("http://www.w3.org", "") and "file:" not in html
    assert "<title>M_{\\mathrm{peak}} = 4 N + 8 N" in html  # LaTeX source kept as the SVG title


@pytest.mark.slow
def test_latex_output_compiles(gpt2, tmp_path):
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex is not installed (scripts/system-deps.sh installs texlive-latex-base)")
    shutil.copy(gpt2 / "gpt2-article-b.tex", tmp_path / "r.tex")
    for _ in range(2):  # longtable settles its column widths on the second run
        result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "r.tex"],
                                cwd=tmp_path, capture_output=True, timeout=120)
        assert result.returncode == 0, result.stdout.decode("utf-8", "replace")[-3000:]
    log = (tmp_path / "r.log").read_text(encoding="utf-8", errors="replace")
    assert "Overfull \\hbox" not in log
    if shutil.which("pdftotext"):
        text = pdftext(tmp_path / "r.pdf")
        assert "7,530,364,928" in text and "Hand calculations" in text


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The wheel installed into a new venv, and the default report it builds outside the checkout (a fresh
    interpreter with PYTHONHASHSEED=12345): ``env`` (``wheel_env.Installed``), ``where`` (the files
    ``import symbolic`` and its templates came from), ``result`` (the report's run) and ``work`` (its folder)."""
    folder = tmp_path_factory.mktemp("wheel")
    env = install_wheel(folder)
    work = folder / "work"
    work.mkdir()
    where = subprocess.run([str(env.bin / "python"), "-c", "import symbolic, symbolic.report.render as r; "
                            "print(symbolic.__file__); print(r.TEMPLATES)"],
                           check=True, capture_output=True, text=True, cwd=work, env=clean_environment()).stdout.split()
    result = subprocess.run([str(env.bin / "symbolic"), "report", "-o", "out.pdf", "--tex", "out.tex"],
                            capture_output=True, text=True, cwd=work, timeout=300,
                            env={**clean_environment(), "PYTHONHASHSEED": "12345"})
    return {"env": env, "where": where, "result": result, "work": work}


@needs_poppler
@pytest.mark.slow
def test_report_from_installed_wheel(installed):
    env, work, result = installed["env"], installed["work"], installed["result"]
    meta = wheel_metadata(env.wheel)
    assert meta["Name"] == "symbolic-memory" and meta["License-Expression"] == "MIT"
    plain = [r.split(";")[0].split(">")[0].strip() for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    assert {"weasyprint", "ziamath", "matplotlib", "sympy", "jinja2"} <= set(plain), plain  # no extra needed
    assert "torch" not in plain and "report" in meta.get_all("Provides-Extra")  # '.[report]' still resolves
    assert meta.get_all("Classifier") and meta["Keywords"]
    assert all(path.startswith(str(env.purelib)) for path in installed["where"]), installed["where"]
    assert result.returncode == 0, result.stderr
    assert "symbolic report:" in result.stderr  # progress on the terminal
    text = subprocess.run(["pdftotext", "out.pdf", "-"], capture_output=True, text=True, cwd=work).stdout
    assert "Llama-3-8B full fine-tuning on one H100" in text and "Hand calculations" in text
    assert (work / "out.tex").read_text().startswith("\\documentclass")


@needs_poppler
@pytest.mark.slow
def test_pdf_is_byte_identical_across_builds(installed, fresh):
    """The module's build of the default specification and the installed wheel's (a fresh interpreter with
    another hash seed, outside the checkout) give the same bytes. A difference comes from one of the
    two: build the spec with ``PYTHONHASHSEED`` set from the checkout to tell which."""
    assert installed["result"].returncode == 0, installed["result"].stderr
    spec = REPORTS / "llama-3-8b-h100.toml"
    assert default_spec().read_bytes() == spec.read_bytes()  # what `symbolic report` builds without a spec
    a, b = fresh(spec).read_bytes(), (installed["work"] / "out.pdf").read_bytes()
    assert a == b
    assert b"CreationDate" not in a and b"ModDate" not in a


@needs_poppler
def test_real_model_report_agrees_with_the_planner(fresh):
    text = pdftext(fresh(REPORTS / "llama-3-8b-h100.toml"))
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
