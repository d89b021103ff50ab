"""The example reports committed in reports/ say what the current formulas build: same text (every
number), same page count, same title; and a build is byte-for-byte reproducible in one environment.

The committed bytes are not compared: a new WeasyPrint or matplotlib release changes them (font
subsets, path rounding) without any change in what the report says. A difference in the text means
a formula, a citation or a template changed without `make examples`.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from symbolic.report import Outputs, build

REPORTS = Path(__file__).resolve().parent.parent / "reports"
NUMBER = re.compile(r"[-+]?\d[\d,.]*")
pytestmark = pytest.mark.skipif(shutil.which("pdftotext") is None or shutil.which("pdfinfo") is None,
                                reason="pdftotext/pdfinfo are not installed (scripts/system-deps.sh installs poppler-utils)")


def _words(pdf: Path) -> list[str]:
    """The PDF's text as words in reading order (line breaks and spacing ignored)."""
    out = subprocess.run(["pdftotext", "-enc", "UTF-8", str(pdf), "-"], check=True, capture_output=True, text=True)
    return out.stdout.split()


def _info(pdf: Path) -> dict[str, str]:
    out = subprocess.run(["pdfinfo", "-enc", "UTF-8", str(pdf)], check=True, capture_output=True, text=True).stdout
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines())}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A fresh build of an example spec, made once for the module (each build takes seconds)."""
    folder = tmp_path_factory.mktemp("fresh")
    built: dict[Path, Path] = {}

    def get(spec: Path) -> Path:
        if spec not in built:
            built[spec] = folder / f"{spec.stem}.pdf"
            build(spec, Outputs(pdf=built[spec]))
        return built[spec]

    return get


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


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama-3-8b-h100", "mixtral-serving-long-context"])
def test_two_builds_are_byte_identical(name, tmp_path, fresh):
    spec = REPORTS / f"{name}.toml"
    first, second = fresh(spec), tmp_path / "b.pdf"
    build(spec, Outputs(pdf=second))
    assert first.read_bytes() == second.read_bytes(), f"two builds of {name} differ: something in it is not reproducible"


def test_the_comparison_sees_a_changed_number():
    """The text check is not vacuous: two committed reports differ in their numbers, and one report's words
    include the numbers a reader checks."""
    a, b = _words(REPORTS / "article-a-mlp.pdf"), _words(REPORTS / "llama-3-8b-h100.pdf")
    assert [w for w in a if NUMBER.search(w)] != [w for w in b if NUMBER.search(w)]
    assert sum(bool(NUMBER.search(w)) for w in b) > 100 and "Llama-3-8B" in " ".join(b)
    assert _info(REPORTS / "llama-3-8b-h100.pdf")["Title"].startswith("Llama-3-8B")
