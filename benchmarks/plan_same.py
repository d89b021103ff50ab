#!/usr/bin/env python3
"""Whether two versions of ``symbolic plan`` give the same answers: every layout that fits, in rank order.

Runs ``symbolic plan --json`` on each case (``bench_plan.py``'s Llama-3-70B search, and Llama 3.1 405B,
``tests/test_pipeline.py``'s config, on 256 H100s) with this checkout and with ``--base`` (another checkout
or an extracted tree of an earlier commit, e.g. ``git archive HEAD~3 symbolic | tar -x -C /tmp/base``), each
in a fresh interpreter, and compares the JSON: the layouts listed (every one that fits, ``--top`` large), their
order, bytes and step times, the counts and the notes. Prints each case's CPU seconds on both sides.

The two sides must search the same space: the commit that searched ``recompute ops`` at every pp (after the
floors) differs from earlier ones by design wherever such a layout fits.

Usage: ``python benchmarks/plan_same.py --base /tmp/base [--case NAME ...]``; exit status 1 if any differ.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_pipeline import LLAMA3_405B  # noqa: E402

ALL = "100000"  # --top: every layout that fits
CASES = {
    "llama-3-70b, ≤ 256 GPUs (bench_plan)": ["llama-3-70b", "--gpu", "h100-80gb", "--max-gpus", "256", "--seq", "8192",
                                            "--global-batch", "1024", "--tokens", "1e12", "--mfu", "0.4",
                                            "--price", "2.5"],
    "llama 3.1 405b, 256 GPUs": ["{405b}", "--gpu", "h100-80gb", "--gpus", "256", "--seq", "8192", "--global-batch",
                                 "2048", "--tokens", "15e12", "--mfu", "0.4", "--price", "2.5"],
    "llama 3.1 405b, ≤ 128 GPUs by cost": ["{405b}", "--gpu", "h100-80gb", "--max-gpus", "128", "--seq", "8192",
                                           "--global-batch", "512", "--tokens", "1e12", "--mfu", "0.4", "--price",
                                           "2.5", "--objective", "cost"],
}


def run(root: Path, args: list[str]) -> tuple[dict, float]:
    """The JSON answer of ``symbolic plan`` from the checkout at ``root``, and the child's CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-m", "symbolic", "plan", *args, "--top", ALL, "--json"], env=env,
                          cwd=root, capture_output=True, text=True, check=False)  # cwd: -m imports from it first
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{root}: plan {' '.join(args)} failed: {done.stderr.strip().splitlines()[-1:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return json.loads(done.stdout), cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the other checkout (its symbolic/ package)")
    parser.add_argument("--case", action="append", choices=list(CASES), help="only these cases")
    args = parser.parse_args()
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "llama-3.1-405b.json"
        config.write_text(json.dumps(LLAMA3_405B))
        for name in args.case or list(CASES):
            argv = [str(config) if a == "{405b}" else a for a in CASES[name]]
            base, base_cpu = run(args.base, argv)
            here, here_cpu = run(ROOT, argv)
            same = base == here
            differ += not same
            count = len(here.get("layouts", []))
            print(f"{name}: {'same' if same else 'DIFFERENT'} ({count} layouts that fit); CPU {base_cpu:.1f} s "
                  f"(base) → {here_cpu:.1f} s")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
