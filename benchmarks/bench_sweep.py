#!/usr/bin/env python3
"""Sweep speed: one million configurations of llm.peak, compiled vs NumPy by hand vs SymPy ``subs``.

The grid is B = 1..100 × S = 512..5120 (step 512) × H = 256..2560 (step 256) × L = 1..100 with
V = 50000, d_ff = 3072, D = 1024: 1,000,000 configurations, every total exact in int64.

Figures (ratios of medians, each round timing every candidate in turn):

- ``compile()`` called on flat arrays of one million values each (validation included) against
  the same closed form written by hand in NumPy on the same arrays (target: within 1.5×);
- the same on the grid's broadcast form (four orthogonal axes, no flat copies);
- a ``subs`` loop (and ``Formula.evaluate``) on a sample of points, scaled to one million,
  against the compiled call: the speed-up;
- absolute: compiling once, and ``symbolic sweep`` writing the million rows as CSV.

Usage: ``python benchmarks/bench_sweep.py [--repeat 7] [--sample 200] [--readme]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import interleaved, markdown_table, publish, seconds  # noqa: E402

import symbolic  # noqa: E402
from symbolic.cli import main as cli_main  # noqa: E402
from symbolic.math import compiled as compiled_module  # noqa: E402

FIXED = {"V": 50000, "d_ff": 3072, "D": 1024}
AXES = {
    "B": np.arange(1, 101),
    "S": np.arange(512, 5121, 512),
    "H": np.arange(256, 2561, 256),
    "L": np.arange(1, 101),
}


def peak_by_hand(B, S, D, H, L, V, d_ff):  # noqa: N803  (the formula's own symbol names)
    """Article B's M_peak = 16N + 8BD + L(14E + 4BS²) + 10BSV, N and E written out, in NumPy."""
    N = L * (4 * H**2 + 2 * H * d_ff + 5 * H + d_ff) + V * H  # noqa: N806
    E = B * S * H  # noqa: N806
    return 16 * N + 8 * B * D + L * (14 * E + 4 * B * S**2) + 10 * B * S * V


def grid_inputs() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(flat arrays of every combination, orthogonal broadcast axes)."""
    names = list(AXES)
    crossed = {n: AXES[n].reshape([-1 if j == k else 1 for j in range(len(names))]) for k, n in enumerate(names)}
    mesh = np.meshgrid(*AXES.values(), indexing="ij")
    flat = {n: np.ascontiguousarray(m.reshape(-1)) for n, m in zip(names, mesh)}
    return {**flat, **FIXED}, {**crossed, **FIXED}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--repeat", type=int, default=7, help="rounds per measurement (median)")
    parser.add_argument("--sample", type=int, default=200, help="points for the subs loop")
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    args = parser.parse_args()

    formula = symbolic.formula("llm.peak")
    compiled_module.clear_cache()
    start = time.perf_counter()
    peak = formula.compile()
    peak(B=1, S=1, D=1, H=1, L=1, V=1, d_ff=1)  # code is generated on the first call
    compile_s = time.perf_counter() - start
    flat, crossed = grid_inputs()
    count = flat["B"].size
    assert count == 1_000_000

    # correctness first: same integers as the hand-written form and as exact evaluation
    ours, theirs = peak(flat), peak_by_hand(**flat)
    assert ours.dtype == np.int64 and np.array_equal(ours, theirs)
    assert np.array_equal(peak(crossed).reshape(-1), ours)
    rng = np.random.default_rng(0)
    for i in rng.choice(count, 20, replace=False):
        point = {n: int(np.asarray(v).reshape(-1)[i] if np.ndim(v) else v) for n, v in flat.items()}
        assert formula.evaluate(point).total == ours[i]
    prepared = peak.prepare(flat)

    times = interleaved({
        "compiled": lambda: peak(flat),
        "compiled_run": lambda: peak.run(prepared),
        "hand": lambda: peak_by_hand(**flat),
        "compiled_grid": lambda: peak(crossed),
        "hand_grid": lambda: peak_by_hand(**crossed),
    }, args.repeat)

    composed = formula.composed()
    symbols = {s.name: s for s in composed.free_symbols}
    picks = rng.choice(count, args.sample, replace=False)
    points = [{n: int(np.asarray(v).reshape(-1)[i]) if np.ndim(v) else v for n, v in flat.items()} for i in picks]
    start = time.perf_counter()
    for point in points:
        composed.subs({symbols[n]: v for n, v in point.items()})
    subs_each = (time.perf_counter() - start) / len(points)
    start = time.perf_counter()
    for point in points[: max(1, len(points) // 4)]:
        formula.evaluate(point)
    evaluate_each = (time.perf_counter() - start) / max(1, len(points) // 4)

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "sweep.csv")
        argv = ["sweep", "llm.peak", "--grid", "B=1..100", "--grid", "S=512..5120:512", "--grid", "H=256..2560:256",
                "--grid", "L=1..100", "--set", "V=50000", "--set", "d_ff=3072", "--set", "D=1024", "--csv", out,
                "--progress", "never"]

        def sweep() -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                assert cli_main(argv) == 0

        sweep_s = interleaved({"sweep": sweep}, max(1, min(3, args.repeat)))["sweep"]
        with open(out, encoding="utf-8") as handle:
            assert sum(1 for _ in handle) == count + 1

    ratio = times["compiled"] / times["hand"]
    rows = [
        ("compile() on 1,000,000 flat configurations vs NumPy by hand",
         f"{seconds(times['compiled'])} vs {seconds(times['hand'])}", f"**{ratio:.2f}×** (target ≤ 1.5×)"),
        ("… without validation (`run` on prepared inputs)", f"{seconds(times['compiled_run'])}",
         f"{times['compiled_run'] / times['hand']:.2f}×"),
        ("compile() on the broadcast grid (4 axes) vs NumPy by hand",
         f"{seconds(times['compiled_grid'])} vs {seconds(times['hand_grid'])}",
         f"{times['compiled_grid'] / times['hand_grid']:.2f}×"),
        (f"`subs` loop ({args.sample} points, scaled to 1,000,000) vs compile()",
         f"{seconds(subs_each * count)} vs {seconds(times['compiled'])}",
         f"**{subs_each * count / times['compiled']:,.0f}× faster**"),
        ("`Formula.evaluate` loop (exact, per point) vs compile()",
         f"{seconds(evaluate_each)} a point", f"{evaluate_each * count / times['compiled']:,.0f}× faster"),
        ("compiling llm.peak (cache cleared, first call included)", seconds(compile_s), ""),
        ("`symbolic sweep` of the same grid, 1,000,000 CSV rows", seconds(sweep_s), ""),
    ]
    table = markdown_table(("llm.peak sweep", "median time", "ratio"), rows)
    note = (f"Measured by `benchmarks/bench_sweep.py` (median of {args.repeat} interleaved rounds; "
            f"NumPy {np.__version__}, {os.cpu_count()} CPUs); results identical to the hand-written form "
            f"and to exact `evaluate()` on samples.")
    publish("sweep", table, note, args.readme)


if __name__ == "__main__":
    main()
