"""A report's ``[plan]`` section for a torch module, beside ``symbolic plan --json``, for ``test_module_report_plan.py``.

torch is imported here, not in the test process. A tiny MLP of one's own (``tests/data/modules/mlp.py``)
is reported with a ``[plan]`` table (``--tex``: the section's text) and planned by ``symbolic plan`` with
the flags the specification gives. Writes one JSON object on stdout; exits 77 when torch is missing.
"""

from __future__ import annotations

from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script
from modules_child import _cli  # this folder: sys.path[0] of a child script

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "data" / "modules" / "mlp.py"
REPORT = """title = "An MLP of one's own, planned"
model = "{model}:MLP"
gpus = ["h100-80gb"]

[module]
arguments = {{ d_in = 64, d_h = 48 }}
inputs = ["x=B,64"]
loss = "cross-entropy"

[regime]
batch = 2
precision = "fp32"

[plan]
max_gpus = 4
global_batch = 8
tokens = 1e6
mfu = 0.4
{extra}"""
PLAN = ["plan", f"{MODEL}:MLP", "--arg", "d_in=64", "--arg", "d_h=48", "--input", "x=B,64", "--loss", "cross-entropy",
        "--precision", "fp32", "--gpu", "h100-80gb", "--mfu", "0.4", "--max-gpus", "4", "--global-batch", "8",
        "--tokens", "1e6"]


def _report(tmp, name, extra=""):
    """The report's run and its TeX (the plan section's text)."""
    spec = Path(tmp) / f"{name}.toml"
    spec.write_text(REPORT.format(model=MODEL, extra=extra))
    tex = Path(tmp) / f"{name}.tex"
    done = _cli("report", str(spec), "--tex", str(tex), "--trust-code", "-q")
    return {**done, "tex": tex.read_text() if tex.exists() else ""}


def main() -> None:
    child_main.run(lambda tmp: {"report": _report(tmp, "mlp"), "plan": _cli(*PLAN, "--json"),
                                "seq": _report(tmp, "seq", "seq = 128\n")}, threads=1)


if __name__ == "__main__":
    main()
