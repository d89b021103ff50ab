#!/usr/bin/env python3
"""Sweep memory: peak RSS of ``symbolic sweep ... --csv FILE`` as one axis grows from 10⁶ to 3·10⁷ values.

Each size runs the real command in a fresh process, ``symbolic sweep llm.peak --example
--set D=1024 --grid B=1..n --grid S=512 --csv FILE``, the grid of issue 11 (there
``B=1..50000000`` peaked at 7.9 GB because every axis value became a Python string up front).
The process is started by a small wrapper whose ``resource.getrusage(RUSAGE_CHILDREN)``
gives the command's own peak resident set; a 10-row sweep gives the interpreter's share.

Every CSV is checked: n + 1 lines, and its last row equal to exact ``Formula.evaluate``.
Memory is bounded when the peak stays flat as n grows 30-fold (chunks of 2²⁰ rows, text
formatted 2¹⁶ rows at a time).

Usage: ``python benchmarks/bench_sweep_memory.py [--sizes 1e6,3e6,1e7,3e7] [--readme]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import ROOT, markdown_table, publish, seconds  # noqa: E402

import symbolic  # noqa: E402

# runs argv[1:] as a child and prints its peak RSS (KiB on Linux) and wall time as JSON
WRAPPER = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
wall = time.perf_counter() - start
print(json.dumps({"code": code, "maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "wall": wall}))
"""


def sweep_argv(n: int, out: str) -> list[str]:
    """The measured command: llm.peak over B = 1..n at S = 512, every row written to ``out``."""
    return [sys.executable, "-m", "symbolic", "sweep", "llm.peak", "--example", "--set", "D=1024",
            "--grid", f"B=1..{n}", "--grid", "S=512", "--csv", out, "--progress", "never"]


def measure(n: int, directory: str) -> dict[str, float]:
    """Peak RSS and wall time of one sweep of n rows; the CSV is checked, then removed."""
    out = os.path.join(directory, f"sweep{n}.csv")
    result = subprocess.run([sys.executable, "-c", WRAPPER, *sweep_argv(n, out)], capture_output=True, text=True,
                            check=True, cwd=ROOT)
    data = json.loads(result.stdout)
    if data["code"] != 0:
        raise SystemExit(f"sweep of {n:,} rows failed with exit code {data['code']}")
    lines, last = 0, b""
    with open(out, "rb") as handle:
        while block := handle.read(1 << 24):
            lines += block.count(b"\n")
            last = (last + block)[-200:]
    os.remove(out)
    b, s, total = last.rstrip(b"\n").rsplit(b"\n", 1)[-1].decode().split(",")
    example = symbolic.formula("llm.peak").example
    want = symbolic.formula("llm.peak").evaluate({**example, "D": 1024, "B": n, "S": 512}).total
    assert lines == n + 1 and (int(b), int(s)) == (n, 512) and int(total) == want, (lines, b, s, total, want)
    return {"rss": data["maxrss_kib"] * 1024, "wall": data["wall"]}


def mib(value: float) -> str:
    return f"{value / 2**20:,.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--sizes", default="1e6,3e6,1e7,3e7", help="axis lengths, comma-separated")
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    args = parser.parse_args()
    sizes = [int(float(text)) for text in args.sizes.split(",")]

    with tempfile.TemporaryDirectory() as tmp:
        base = measure(10, tmp)
        results = {}
        for n in sizes:
            start = time.perf_counter()
            results[n] = measure(n, tmp)
            print(f"  {n:,} rows: {mib(results[n]['rss'])} in {time.perf_counter() - start:.1f} s", file=sys.stderr)

    rows = [("10 (interpreter, SymPy, NumPy)", mib(base["rss"]), "", seconds(base["wall"]), "")]
    for n, r in results.items():
        rows.append((f"{n:,}", mib(r["rss"]), mib(r["rss"] - base["rss"]), seconds(r["wall"]),
                     f"{n / r['wall'] / 1e6:.2f} M"))
    table = markdown_table(("`--grid B=1..n --grid S=512` rows", "peak RSS", "above 10 rows", "wall time",
                            "rows/s"), rows)
    peaks = [r["rss"] for r in results.values()]
    note = (f"Measured by `benchmarks/bench_sweep_memory.py` (`symbolic sweep llm.peak --example --set D=1024 "
            f"--grid B=1..n --grid S=512 --csv FILE`, one fresh process each, peak RSS from "
            f"`getrusage(RUSAGE_CHILDREN)`; {os.cpu_count()} CPUs). From {sizes[0]:,} to {sizes[-1]:,} rows the "
            f"peak changes by {(max(peaks) - min(peaks)) / 2**20:,.0f} MiB: memory is set by the chunk, not the "
            f"axis. Every CSV was checked: n + 1 lines, last row equal to exact `evaluate()`.")
    publish("sweep-memory", table, note, args.readme)


if __name__ == "__main__":
    main()
