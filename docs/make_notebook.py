"""Write docs/notebook.ipynb from the cells below and execute it in a fresh kernel (nbclient).

Run ``.venv/bin/python docs/make_notebook.py`` after changing a cell: the committed notebook
keeps its executed outputs (tables and typeset formulas), and tests/test_notebook.py runs it again.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "docs" / "notebook.ipynb"

CELLS = [
    ("markdown", "# symbolic in a notebook\n\nEvery result shows itself as a table with units (`_repr_html_`), "
                 "formulas typeset themselves (`_repr_latex_`), and `to_frame()` gives a pandas DataFrame."),
    ("code", "import symbolic\n\nf = symbolic.formula(\"llm.peak\")\nf"),
    ("code", "f.composed()  # N and E replaced by their formulas; typeset with the project's names (d_ff)"),
    ("code", "f.diff(\"H\")"),
    ("code", "point = dict(H=768, L=12, V=50000, d_ff=3072, B=8, S=1024, D=1024)\nf.evaluate(point)"),
    ("code", "f.sensitivity(point)  # still a list of Sensitivity; shown as a table"),
    ("code", "f.solve(\"B\", \"16GiB\", H=768, L=12, V=50000, d_ff=3072, S=1024, D=1024)  # sizes as the CLI takes them"),
    ("markdown", "The project's symbols are positive integers: take them from the table, not from `sympy.Symbol`."),
    ("code", "import sympy\n\nS = symbolic.symbol(\"S\")  # not sympy.Symbol(\"S\"): differentiating by that gives 0\n"
             "f.diff(S) == f.diff(\"S\"), sympy.Symbol(\"S\") == S, sympy.diff(f.composed(), sympy.Symbol(\"S\"))"),
    ("markdown", "## A real model, the planner and fit questions"),
    ("code", "symbolic.architectures.load(\"llama-3-8b\")  # parameters per component"),
    ("code", "from symbolic import planning\n\nplan = planning.plan(\"llama-3-8b\", mode=\"infer\", batch=8, seq=8192)\nplan"),
    ("code", "planning.fit_seq(\"llama-3-8b\", \"h100-80gb\", mode=\"infer\", batch=8)"),
    ("markdown", "## Sweeps with a column per term"),
    ("code", "sweep = symbolic.sweep(\"llm.peak\", {\"B\": \"1..4\", \"S\": [512, 1024]}, "
             "H=768, L=12, V=50000, d_ff=3072, D=1024)\nsweep.to_frame()"),
]


def build() -> nbformat.NotebookNode:
    """The notebook's cells, unexecuted."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    make = {"markdown": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell}
    nb.cells = [make[kind](source) for kind, source in CELLS]
    return nb


def execute(nb: nbformat.NotebookNode, timeout: int = 120) -> nbformat.NotebookNode:
    """Run every cell in a fresh kernel started in the repository root."""
    NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    return nb


if __name__ == "__main__":
    notebook = execute(build())
    nbformat.write(notebook, NOTEBOOK)
    print(f"wrote {NOTEBOOK}")
