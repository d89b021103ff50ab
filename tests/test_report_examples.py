"""The example reports committed in reports/ are what the current formulas build, byte for byte.

Reports are reproducible (no dates, fixed ids), so a difference means a formula, a citation or
a template changed without `make examples`.
"""

from pathlib import Path

import pytest

from symbolic.report import Outputs, build

REPORTS = Path(__file__).resolve().parent.parent / "reports"


@pytest.mark.slow
@pytest.mark.parametrize("spec", sorted(REPORTS.glob("*.toml")), ids=lambda p: p.stem)
def test_committed_pdf_is_current(spec, tmp_path):
    committed = spec.with_suffix(".pdf")
    assert committed.exists(), f"{committed.name} is missing: run `make examples`"
    build(spec, Outputs(pdf=tmp_path / "fresh.pdf"))
    assert (tmp_path / "fresh.pdf").read_bytes() == committed.read_bytes(), (
        f"{committed.name} is stale: run `make examples` and commit the result")
