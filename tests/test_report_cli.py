"""``symbolic report`` and ``symbolic latex`` on the command line: outputs, one-line errors, exit code 2."""

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import run

import symbolic
from symbolic.cli.report import snippet

ROOT = Path(__file__).resolve().parent.parent


def test_latex_snippet(capsys):
    code, out, _ = run(capsys, "latex", "llm.peak")
    f = symbolic.formula("llm.peak")
    assert code == 0
    assert out.splitlines()[1:] == ["\\begin{equation}", f"  {f.latex(equation=True)}", "  \\label{eq:llm.peak}",
                                    "\\end{equation}"]
    assert out.startswith("% llm.peak: ")
    code, out, _ = run(capsys, "latex", "llm.steady", "--form", "expanded", "--inline")
    assert out.strip() == "$M_{\\mathrm{steady}} = 8 B D + 16 N$"


@pytest.mark.parametrize("argv, expected", [
    (("latex", "llm.pek"), "did you mean 'llm.peak'"),
    (("latex", "llm.peak", "--label", "a}b"), "may contain only"),
    (("report", "no-such.toml", "-q"), "report specification not found"),
    (("report", str(ROOT / "reports" / "article-a-mlp.toml"), "-q", "--templates", "no-such-dir",
      "--html", "/tmp/x.html"), "templates folder not found"),
])
def test_errors_are_one_line(capsys, argv, expected):
    code, _, err = run(capsys, *argv)
    lines = [line for line in err.splitlines() if line.startswith("symbolic: error:")]
    assert code == 2 and len(lines) == 1 and expected in lines[0], err


def test_planner_errors_name_the_file(capsys, tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text('title = "x"\nmodel = "llama-3-8b"\n[regime]\ntp = 3\n')
    code, _, err = run(capsys, "report", str(spec), "-q", "--tex", str(tmp_path / "x.tex"))
    assert code == 2 and f"{spec}: regime: tp 3 must divide" in err
    spec.write_text('title = "x"\nmodel = "llama-3-8b"\ngpus = ["h100-80g"]\n')
    code, _, err = run(capsys, "report", str(spec), "-q", "--tex", str(tmp_path / "x.tex"))
    assert code == 2 and "unknown GPU 'h100-80g'" in err and "did you mean" in err
    spec.write_text('title = "x"\nmodel = "article-b"\n[regime]\nprecision = "bf16"\n')
    code, _, err = run(capsys, "report", str(spec), "-q", "--tex", str(tmp_path / "x.tex"))
    assert code == 2 and "article B's formulas count fp32" in err
    assert not (tmp_path / "x.tex").exists()


def test_report_writes_tex_and_prints_paths(capsys, tmp_path):
    code, out, err = run(capsys, "report", str(ROOT / "reports" / "gpt2-article-b.toml"), "--tex", str(tmp_path / "r.tex"))
    assert code == 0 and out.strip() == str(tmp_path / "r.tex")
    assert "symbolic report: [" in err and "done:" in err
    assert (tmp_path / "r.tex").read_text().count("\\begin{align*}") == 2 * 5  # calculations, then formulas for papers


@pytest.mark.slow
def test_every_library_formula_snippet_compiles(tmp_path):
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex is not installed (scripts/system-deps.sh installs texlive-latex-base)")
    body = "\n".join(snippet(symbolic.formula(key)) for key in symbolic.keys())
    (tmp_path / "s.tex").write_text("\\documentclass{article}\n\\begin{document}\n" + body + "\n\\end{document}\n")
    result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "s.tex"], cwd=tmp_path,
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stdout.decode("utf-8", "replace")[-2000:]


def test_custom_terms_join_the_total(capsys, tmp_path):
    from symbolic import planning
    from symbolic.report import adapter, spec

    path = tmp_path / "lora.toml"
    path.write_text('title = "LoRA"\nmodel = "llama-3-8b"\n[regime]\nprecision = "bf16"\n\n'
                    '[[terms]]\nname = "lora"\nexpr = "2*r*H*L*k"\n\n[values]\nr = 16\nk = 8\n')
    scenario = adapter.scenario_for(spec.load(path))
    plan = planning.plan("llama-3-8b", mode="train", precision="bf16")
    assert scenario.evaluate().total == plan.evaluate().total + 2 * 16 * 4096 * 32 * 8
    assert scenario.fewest is None and "lora" in [t.key for t in scenario.formula.terms]
    code, out, err = run(capsys, "report", str(ROOT / "reports" / "article-a-mlp.toml"), "-q", "--tex",
                         str(tmp_path / "a.tex"), "--term", "framework:MiB=q*64", "--set", "q=3")
    assert code == 0 and "192.00 MiB" in (tmp_path / "a.tex").read_text()


@pytest.mark.parametrize("expr, expected", [
    ("__import__('os').system('x')", "names must match"),
    ("9**9**7", "exponent"),
    ("lambda: 1", "r.toml:4"),
])
def test_hostile_custom_terms_are_rejected_with_file_and_line(tmp_path, expr, expected):
    from symbolic.report import spec

    path = tmp_path / "r.toml"
    path.write_text(f'title = "x"\nmodel = "article-a"\n[[terms]]\nexpr = {expr!r}\nname = "t"\n'.replace("'", '"')
                    if '"' not in expr and "'" not in expr else
                    f"title = 'x'\nmodel = 'article-a'\n[[terms]]\nexpr = \"{expr}\"\nname = 't'\n")
    with pytest.raises(spec.ReportSpecError) as info:
        spec.load(path)
    assert expected in str(info.value) and "\n" not in str(info.value)
