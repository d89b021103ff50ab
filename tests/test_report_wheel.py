"""A report builds from an installed wheel in a fresh virtual environment, outside the checkout;
the wheel's metadata makes the report work from a plain install; the sdist carries what the README links to.

The wheel is built from a clean copy of the sources (so stale ``build/`` files cannot leak in) and
installed with pip into a new venv. The venv finds the dependencies (sympy, jinja2, WeasyPrint...)
through a ``.pth`` line naming the project venv's site-packages, appended after its own: the
project venv's editable install of symbolic is not active there (``.pth`` files in an appended
folder are not processed), so ``import symbolic`` must come from the wheel, as the test checks.
"""

import email
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _copy_sources(target: Path, *, pictures: bool = False) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", *(() if pictures else ("*.pdf", "*.png")))
    shutil.copytree(ROOT / "symbolic", target / "symbolic", symlinks=True, ignore=ignore)
    shutil.copytree(ROOT / "reports", target / "reports", ignore=ignore)
    if pictures:
        shutil.copytree(ROOT / "docs", target / "docs", ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(ROOT / name, target / name)


def _wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name))


@pytest.mark.slow
def test_report_from_installed_wheel(tmp_path):
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext is not installed (scripts/system-deps.sh installs poppler-utils)")
    source, wheels, env_dir, work = (tmp_path / n for n in ("src", "wheels", "venv", "work"))
    _copy_sources(source)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                    str(source)], check=True, capture_output=True, cwd=tmp_path)
    wheel = next(wheels.glob("symbolic_memory-*.whl"))
    meta = _wheel_metadata(wheel)
    assert meta["Name"] == "symbolic-memory" and meta["License-Expression"] == "MIT"
    plain = [r.split(";")[0].split(">")[0].strip() for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    assert {"weasyprint", "ziamath", "matplotlib", "sympy", "jinja2"} <= set(plain), plain  # no extra needed
    assert "torch" not in plain and "report" in meta.get_all("Provides-Extra")  # '.[report]' still resolves
    assert meta.get_all("Classifier") and meta["Keywords"]
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    (purelib / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, capture_output=True, cwd=tmp_path)
    work.mkdir()
    where = subprocess.run([str(python), "-c", "import symbolic, symbolic.report.render as r; "
                            "print(symbolic.__file__); print(r.TEMPLATES)"],
                           check=True, capture_output=True, text=True, cwd=work).stdout.split()
    assert all(path.startswith(str(purelib)) for path in where), where
    result = subprocess.run([str(env_dir / "bin" / "symbolic"), "report", "-o", "out.pdf", "--tex", "out.tex"],
                            capture_output=True, text=True, cwd=work, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "symbolic report:" in result.stderr  # progress on the terminal
    text = subprocess.run(["pdftotext", "out.pdf", "-"], capture_output=True, text=True, cwd=work).stdout
    assert "Llama-3-8B full fine-tuning on one H100" in text and "Hand calculations" in text
    assert (work / "out.tex").read_text().startswith("\\documentclass")


@pytest.mark.slow
def test_sdist_carries_docs_and_example_reports(tmp_path):
    source, dist = tmp_path / "src", tmp_path / "dist"
    _copy_sources(source, pictures=True)
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(dist), str(source)],
                   check=True, capture_output=True, cwd=tmp_path)
    sdist = next(dist.glob("symbolic_memory-*.tar.gz"))
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {link for link in re.findall(r"\]\(([^)#\s]+)\)", readme) if "://" not in link}
    assert {"reports/llama-3-8b-h100.pdf", "docs/report-page-1.png"} <= linked  # the finder finds the links
    linked |= {f"docs/{p.name}" for p in (ROOT / "docs").iterdir() if p.is_file()}
    linked |= {f"reports/{p.name}" for p in (ROOT / "reports").glob("*.toml")}
    assert linked <= names, sorted(linked - names)
    assert {"LICENSE", "README.md", "pyproject.toml"} <= names


def test_a_missing_renderer_is_a_one_line_error(capsys, monkeypatch, tmp_path):
    """WeasyPrint is a dependency; an environment that lacks it gets one line saying how to repair it, at once."""
    from helpers import run

    monkeypatch.setitem(sys.modules, "weasyprint", None)  # `import weasyprint` now raises ImportError
    monkeypatch.setitem(sys.modules, "weasyprint.urls", None)
    monkeypatch.setattr("symbolic.report.context.build",  # found missing before the work, not after it
                        lambda *a, **k: pytest.fail("typeset the report before finding WeasyPrint missing"))
    code, out, err = run(capsys, "report", str(ROOT / "reports" / "article-a-mlp.toml"), "-q",
                         "-o", str(tmp_path / "x.pdf"))
    lines = [line for line in err.splitlines() if line.startswith("symbolic: error:")]
    assert code == 2 and len(lines) == 1 and "weasyprint" in lines[0] and "symbolic-memory" in lines[0], err
    assert "extra" not in err and not (tmp_path / "x.pdf").exists()
