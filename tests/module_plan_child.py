"""``symbolic plan`` of torch modules for ``test_module_plan.py``, run in a child process (issue 29).

torch is imported here, not in the test process. The command line runs in this process: ``plan
--json`` over every layout of a small search, then ``memory --json`` and ``time --json`` with each
layout's own flags, so the test compares the search's compiled figures with the commands' own.
Writes one JSON object on stdout; exits with ``SKIP`` (77) when torch is missing.
"""

from __future__ import annotations

import json
from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script
from modules_child import _cli  # this folder: sys.path[0] of a child script

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "modules"
RATE = ["--gpu", "h100-80gb", "--mfu", "0.4"]
# the MLP of article A's shape at small widths (the roofline's step: --mfu), and a weight multiplied out in the
# forward, whose FLOPs per sample differ between micro-batches (FLOPs alone: --achieved-tflops)
MODELS = {"mlp": [f"{DATA}/mlp.py:MLP", "--arg", "d_in=64", "--arg", "d_h=48", "--input", "x=B,64", "--loss",
                  "cross-entropy"],
          "factored": [f"{DATA}/factored.py:Factored", "--input", "x=B,32", "--loss", "mean"],
          "attention": [f"{DATA}/nets.py:Attention", "--input", "ids=B,S:int64", "--set", "S=24", "--loss", "mean"]}
RATES = {"mlp": RATE, "factored": ["--gpu", "h100-80gb", "--achieved-tflops", "0.001"], "attention": RATE}
SEARCH = ["--max-gpus", "4", "--global-batch", "8", "--top", "100"]


def _flags(layout):
    """The flags of ``memory`` and ``time`` that give one searched layout."""
    return ["--dp", str(layout["dp"]), "--zero", str(layout["zero"]), "--batch", str(layout["micro_batch"]),
            "--microbatches", str(layout["grad_accum"]), *(["--fsdp"] if layout.get("fsdp") else []),
            *(["--recompute", str(layout["recompute"])] if layout.get("recompute", "none") != "none" else [])]


def _json(done):
    return json.loads(done["out"]) if done["code"] == 0 else {"error": done["err"]}


def searched(name):
    """The plan's layouts, and per layout what ``memory`` and ``time`` say for the same flags."""
    model, rate = MODELS[name], RATES[name]
    plan = _cli("plan", *model, *rate, *SEARCH, "--json")
    if plan["code"]:
        return {"plan": {"error": plan["err"]}}
    layouts = json.loads(plan["out"])["layouts"]
    same = [{"memory": _json(_cli("memory", *model, *_flags(lay), "--json"))["total_bytes"],
             "time": _json(_cli("time", *model, *rate, *_flags(lay), "--gpus", str(lay["gpus"]), "--json"))}
            for lay in layouts]
    return {"plan": json.loads(plan["out"]), "same": same, "text": _cli("plan", *model, *rate, *SEARCH)}


def bad():
    mlp = MODELS["mlp"]
    return {"seq": _cli("plan", *mlp, *RATE, *SEARCH, "--seq", "128"),
            "tp": _cli("plan", *mlp, *RATE, *SEARCH, "--tp", "2"),
            "missing": _cli("plan", f"{DATA}/nets.py:Missing", "--input", "x=B,4", *RATE, *SEARCH),
            "set": _cli("plan", *mlp, *RATE, *SEARCH, "--set", "H=4"),
            "fp8": _cli("plan", *mlp, *RATE, *SEARCH, "--precision", "fp8")}


def main() -> None:
    child_main.run(lambda tmp: {**{name: searched(name) for name in MODELS}, "bad": bad(),
                                "mixed": _cli("plan", *MODELS["mlp"], *RATE, *SEARCH, "--precision", "bf16-mixed")},
                   threads=1)


if __name__ == "__main__":
    main()
