"""A report builds from an installed wheel in a fresh virtual environment, outside the checkout.

The wheel is built from a clean copy of the sources (so stale ``build/`` files cannot leak in) and
installed with pip into a new venv. The venv finds the dependencies (sympy, jinja2, WeasyPrint...)
through a ``.pth`` line naming the project venv's site-packages, appended after its own: the
project venv's editable install of symbolic is not active there (``.pth`` files in an appended
folder are not processed), so ``import symbolic`` must come from the wheel, as the test checks.
"""

import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _copy_sources(target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pdf", "*.png")
    shutil.copytree(ROOT / "symbolic", target / "symbolic", symlinks=True, ignore=ignore)
    shutil.copytree(ROOT / "reports", target / "reports", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, target / name)


@pytest.mark.slow
def test_report_from_installed_wheel(tmp_path):
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext is not installed (scripts/system-deps.sh installs poppler-utils)")
    source, wheels, env_dir, work = (tmp_path / n for n in ("src", "wheels", "venv", "work"))
    _copy_sources(source)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                    str(source)], check=True, capture_output=True, cwd=tmp_path)
    wheel = next(wheels.glob("symbolic-*.whl"))
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
