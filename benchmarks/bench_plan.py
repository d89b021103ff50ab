#!/usr/bin/env python3
"""Layout search speed: ``symbolic plan``'s compiled search against a Python loop over ``plan()``.

The case: Llama-3-70B on H100-80GB, every GPU count up to 256 (powers of two and whole nodes),
seq 8192, 1024 sequences per step, mfu 0.4: 7,052 layouts (dp × tp × pp × ZeRO or FSDP2 × recompute ×
micro-batch × gradient accumulation, uneven pipelines).

Figures:

- the compiled search, cold (every cache cleared: floors and plans built, formulas compiled) and warm
  (median of repeated calls, the structures' compiled formulas reused);
- the Python loop: ``planning.plan(...)`` (memory) and ``planning.time.train_time(...)`` (time)
  for each layout of a random sample, scaled to all layouts: what the search replaces;
- a check that the sample's memory and step time agree with the search (exact bytes, float
  step time to 1e-9).

Usage: ``python benchmarks/bench_plan.py [--repeat 5] [--sample 40] [--readme]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import markdown_table, publish, seconds  # noqa: E402

from symbolic import planning  # noqa: E402
from symbolic.math import compiled
from symbolic.planning import search  # noqa: E402
from symbolic.planning import time as ptime  # noqa: E402

MODEL, GPU = "llama-3-70b", "h100-80gb"
CASE = {"max_gpus": 256, "seq": 8192, "global_batch": 1024, "tokens": 10**12, "mfu": 0.4, "price": 2.5, "top": None}


def _flags(lay: dict) -> dict:
    out = {"batch": lay["micro_batch"], "seq": CASE["seq"], "dp": lay["dp"], "tp": lay["tp"], "pp": lay["pp"],
           "zero": lay["zero"], "recompute": lay["recompute"], "microbatches": lay["grad_accum"]}
    if lay["sequence_parallel"]:
        out["sequence_parallel"] = True
    if lay.get("fsdp"):
        out["fsdp"] = True
    if lay.get("cp", 1) != 1:
        out["cp"] = lay["cp"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sample", type=int, default=40)
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    args = parser.parse_args()

    search._PARTS.clear()
    search._COMPILED.clear()
    search._FLOORS.clear()
    search._FLOOR_CODE.clear()
    compiled.clear_cache()
    ptime._flops.cache_clear()
    ptime.rank_layers.cache_clear()
    builds: list[object] = []
    build = search._memory_plan
    search._memory_plan = lambda *a: (builds.append(a), build(*a))[1]  # counts the structures given a plan
    start = time.perf_counter()
    result = search.search(MODEL, GPU, **CASE)
    cold = time.perf_counter() - start
    search._memory_plan = build
    built, structures = len(builds), len(search._FLOORS)  # NCCL buffers aside (structures that differ only there)
    warm_times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        search.search(MODEL, GPU, **CASE)
        warm_times.append(time.perf_counter() - start)
    warm = statistics.median(warm_times)

    sample = random.Random(15).sample(result.layouts, min(args.sample, len(result.layouts)))
    start = time.perf_counter()
    for lay in sample:
        _ = planning.plan(MODEL, "train", **_flags(lay)).total
    memory_each = (time.perf_counter() - start) / len(sample)
    start = time.perf_counter()
    timed = [ptime.train_time(MODEL, GPU, tokens=CASE["tokens"], mfu=CASE["mfu"], price=CASE["price"], **_flags(lay))
             for lay in sample]
    time_each = (time.perf_counter() - start) / len(sample)
    for lay, one in zip(sample, timed):
        assert lay["memory_bytes"] == one.memory.total, lay
        assert abs(lay["step_seconds"] / one.figures["step_seconds"] - 1) < 1e-9, lay

    n = result.considered  # every pass's layouts (FSDP2, uneven pipelines, recompute ops, cp where it matters)
    loop = (memory_each + time_each) * n
    rows = [
        ("compiled search, cold (floors, the plans that may fit, formulas compiled)", seconds(cold), f"{n / cold:,.0f}",
         f"{loop / cold:,.0f}×"),
        ("compiled search, warm (median of repeats)", seconds(warm), f"{n / warm:,.0f}", f"{loop / warm:,.0f}×"),
        (f"Python loop: plan() + train_time() per layout (sample of {len(sample)}, scaled)", seconds(loop),
         f"{n / loop:,.0f}", "1×"),
        ("  of which plan() alone (memory)", seconds(memory_each * n), f"{1 / memory_each:,.0f}", ""),
    ]
    table = markdown_table(("Llama-3-70B on H100, ≤ 256 GPUs: " + f"{n:,} layouts, {result.fitting} fit", "time",
                            "layouts/s", "vs the loop"), rows)
    note = (f"`python benchmarks/bench_plan.py` on this machine ({os.cpu_count()} CPUs, shared). The sample's memory "
            "equals `plan().total` byte for byte and its step time `train_time()`'s to 1e-9. Cold includes building "
            f"every structure's floor, one plan per structure that may fit ({built} of {structures}) and compiling "
            "their terms (once per session); warm reuses them.")
    publish("plan", table, note, args.readme)


if __name__ == "__main__":
    main()
