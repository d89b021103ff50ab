"""docs/notebook.ipynb: executed in a fresh kernel, its outputs show tables and typeset formulas.

The committed notebook keeps its outputs (written by docs/make_notebook.py); the slow test runs
its cells again and checks that the committed outputs are what they produce now.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "docs" / "notebook.ipynb"


def _maker():  # noqa: ANN202 (the docs script, imported by path)
    spec = importlib.util.spec_from_file_location("make_notebook", ROOT / "docs" / "make_notebook.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_notebook", module)
    spec.loader.exec_module(module)
    return module


def _shown(nb: object) -> list[dict[str, str]]:
    """Each code cell's rich outputs (mime type -> text), errors as 'error'."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        data: dict[str, str] = {}
        for o in cell.outputs:
            if o.output_type in ("execute_result", "display_data"):
                data.update(o.data)
            elif o.output_type == "error":
                data["error"] = f"{o.ename}: {o.evalue}"
        out.append(data)
    return out


def _check(shown: list[dict[str, str]]) -> None:
    assert not [d["error"] for d in shown if "error" in d]
    html = [d.get("text/html", "") for d in shown]
    latex = [d.get("text/latex", "") for d in shown]
    assert sum("<table" in h for h in html) >= 7  # evaluation, sensitivity, solution, model, plan, fit, sweep
    assert latex[0].startswith(r"$\displaystyle M_{\mathrm{peak}} = 4 N")
    assert r"d_{\mathrm{ff}}" in latex[1] and r"d_{\mathrm{ff}}" in latex[2]  # composed() and diff(): project names
    assert not any("d_{ff}" in text for text in latex)
    assert "7,530,364,928" in html[3] and ">21<" in html[5]  # the README's worked example


def test_committed_notebook_shows_tables_and_formulas() -> None:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    maker = _maker()
    assert [c.source for c in nb.cells] == [source for _, source in maker.CELLS]  # outputs are of these cells
    _check(_shown(nb))


@pytest.mark.slow
def test_notebook_runs_in_a_fresh_kernel_and_matches_its_committed_outputs() -> None:
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("pandas")
    committed = nbformat.read(NOTEBOOK, as_version=4)
    fresh = copy.deepcopy(committed)
    for cell in fresh.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    _maker().execute(fresh, timeout=120)
    shown = _shown(fresh)
    _check(shown)
    assert shown == _shown(committed), "docs/notebook.ipynb is stale: run .venv/bin/python docs/make_notebook.py"
