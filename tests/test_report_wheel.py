"""The sdist carries what the README links to; a missing renderer is a one-line error.

The report built from an installed wheel (in a fresh virtual environment, outside the checkout) is
checked in ``test_report_examples.py``, whose byte-for-byte comparison of builds shares it.
"""

import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from wheel_env import clean_environment, copy_sources

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_sdist_carries_docs_and_example_reports(tmp_path):
    source, dist = tmp_path / "src", tmp_path / "dist"
    copy_sources(source, pictures=True)
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(dist), str(source)],
                   check=True, capture_output=True, cwd=tmp_path, env=clean_environment())
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
