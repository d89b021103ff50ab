"""The report's plan section (issue 15): the chosen layout, time to train and cost, the alternatives.

A specification asks for it with a ``[plan]`` table::

    [plan]
    gpu = "h100-80gb"          # default: the first GPU of ``gpus`` (with its fraction and reserve, if
                               # any: an entry of ``gpus`` named here brings its budget); or a .toml file
    gpus = 64                  # or max_gpus = 256
    seq = 8192                 # default: the regime's seq
    global_batch = 512         # sequences per optimizer step
    tokens = 1e12              # tokens to train on
    mfu = 0.4                  # or achieved_tflops = 400
    price = 2.5                # USD per GPU-hour (optional; gives the cost and the cost chart)
    objective = "time"         # or "cost"
    top = 8                    # alternatives shown

``check`` validates the table (called by ``spec.py``), ``build`` makes the context entry: plain
strings, a table for both templates, and an SVG chart of time against cost (or GPUs) with the
frontier marked. Everything is computed by ``planning.search`` and ``planning.time``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from ..options.table import MAX_SEQ, seq_too_long
from . import tables

PLAN_KEYS = ("gpu", "gpus", "max_gpus", "seq", "global_batch", "tokens", "mfu", "achieved_tflops", "price",
             "objective", "top")
OBJECTIVES = ("time", "cost")
TITLE = "Capacity plan: layout, time and cost"  # the section's heading in both templates
Fail = Callable[[tuple[str, ...], str], Exception]


def _positive(value: Any, where: tuple[str, ...], fail: Fail, whole: bool) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        raise fail(where, f"must be a positive number, got {value!r}")
    if whole:
        if float(value) != int(value):
            raise fail(where, f"must be a whole number, got {value!r}")
        return int(value)
    return float(value)


def check(value: Any, fail: Fail) -> dict[str, Any] | None:
    """The validated ``[plan]`` table (None when absent); ``fail(where, message)`` makes the error."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise fail(("plan",), "expected a table")
    for key in value:
        if key not in PLAN_KEYS:
            raise fail(("plan", key), f"unknown key; keys are {', '.join(PLAN_KEYS)}")
    out: dict[str, Any] = {}
    for key, val in value.items():
        where = ("plan", key)
        if key == "gpu":
            if not isinstance(val, str) or not val.strip():
                raise fail(where, "must be a GPU name of the catalogue")
            out[key] = val.strip()
        elif key == "objective":
            if val not in OBJECTIVES:
                raise fail(where, f"must be one of {', '.join(OBJECTIVES)}")
            out[key] = val
        elif key in ("mfu", "achieved_tflops", "price"):
            out[key] = _positive(val, where, fail, whole=False)
        else:
            out[key] = _positive(val, where, fail, whole=True)
    if out.get("seq", 0) > MAX_SEQ:
        raise fail(("plan", "seq"), seq_too_long(out["seq"]))
    if ("gpus" in out) == ("max_gpus" in out):
        raise fail(("plan",), "give exactly one of gpus or max_gpus")
    if ("mfu" in out) == ("achieved_tflops" in out):
        raise fail(("plan",), "give exactly one of mfu or achieved_tflops")
    for key in ("global_batch", "tokens"):
        if key not in out:
            raise fail(("plan",), f"missing the required key {key!r}")
    return out


TIME_UNITS = (("days", 86400), ("hours", 3600), ("minutes", 60))


def time_unit(seconds: float) -> tuple[str, int]:
    """The unit of the section's times: the largest in which the chosen layout's time to train is at least 1."""
    return next(((label, size) for label, size in TIME_UNITS if seconds >= size), TIME_UNITS[-1])


def _duration(seconds: float, unit: tuple[str, int]) -> str:
    return f"{seconds / unit[1]:,.1f} {unit[0]}"


def _sharding_words(layout: dict[str, Any]) -> str:
    """'ZeRO 1' or 'FSDP2': how the chosen layout shards its states, in the summary sentence."""
    return "FSDP2" if layout.get("fsdp") else f"ZeRO {layout['zero']}"


def _summary(best: dict[str, Any], gpu: str, tokens: int, unit: tuple[str, int], result: Any) -> str:
    """The plan in one sentence for the first page: the chosen layout, time to train, GPU-hours and cost."""
    cost = f", {best['cost']:,.0f} USD" if "cost" in best else ""
    ranked = "fastest" if result.objective == "time" else "cheapest"
    return (f"Capacity plan: training on {tokens:,} tokens takes {_duration(best['train_seconds'], unit)} on "
            f"{best['gpus']} × {gpu} (dp {best['dp']} × tp {best['tp']} × pp {best['pp']}, {_sharding_words(best)}), "
            f"{best['gpu_hours']:,.0f} GPU-hours{cost}: the {ranked} of {result.fitting:,} layouts that fit "
            f"(see “{TITLE}”).")


def _chart(layouts: list[dict[str, Any]], frontier: list[int], by_cost: bool, unit: tuple[str, int]) -> str:
    """Time to train (in the section's unit) against cost (or GPUs), the frontier joined, the chosen starred."""
    from . import plots

    xs = [lay["cost"] if by_cost else lay["gpus"] for lay in layouts]
    ys = [lay["train_seconds"] / unit[1] for lay in layouts]
    return plots.plan(xs, ys, frontier, "cost (USD)" if by_cost else "GPUs", f"time to train ({unit[0]})",
                      log_x=not by_cost)


def _model(spec: Any) -> Any:
    """What the search plans: a torch module's probed network (as the memory part builds it), else the name or path."""
    if spec.model.module:
        from . import module_model

        return module_model.network(spec.model)
    return str(spec.model.path) if spec.model.path else spec.model.name


def _samples(seq: int | None) -> str:
    """'sequences of S tokens', or 'samples' for a network without a token sequence (a token is a sample)."""
    return f"sequences of {seq:,} tokens" if seq is not None else "samples"


def build(spec: Any, ts: Any, charts: bool = True) -> list[dict[str, Any]]:
    """The plan section's context entry: one section, or none without a ``[plan]`` table (templates loop over it).

    Each section has ``intro`` and ``summary`` (text; the summary is the first page's line about the
    plan), ``chosen``, ``alternatives`` and ``charts`` (lists of zero or one table or chart, so that
    the logic-free templates only loop).
    """
    plan = getattr(spec, "plan", None)
    if not plan or spec.model.is_article or spec.mode != "train":
        return []
    from ..catalogs import as_budget
    from ..catalogs import get as get_gpu
    from ..core.units import format_bytes
    from ..planning import search

    gpu_name = plan.get("gpu") or (spec.gpus[0].name if spec.gpus else None)
    if gpu_name is None:
        raise ValueError("the [plan] table needs a gpu (or the specification a gpus list)")
    if gpu_name.endswith(".toml") and spec.path is not None:  # a custom GPU file, relative to the specification
        gpu_name = str((spec.path.parent / gpu_name).resolve()) if not gpu_name.startswith("/") else gpu_name
    ref = next((r for r in spec.gpus if r.name == gpu_name and (r.fraction or r.reserve)), None)
    budget = ref.budget(spec.path) if ref is not None else as_budget(get_gpu(gpu_name))  # the entry's budget
    gpu = budget.gpu
    model = _model(spec)
    fixed = {k: v for k, v in spec.regime.options.items()
             if k not in ("batch", "seq", "dp", "tp", "pp", "zero", "recompute", "microbatches", "sequence_parallel")}
    seq = plan.get("seq") or spec.regime.options.get("seq") or (4096 if getattr(model, "sequence", True) else None)
    price = plan.get("price")
    result = search.search(model, budget, seq=seq, global_batch=plan["global_batch"], gpus=plan.get("gpus"),
                           max_gpus=plan.get("max_gpus"), tokens=plan["tokens"], mfu=plan.get("mfu"),
                           achieved_tflops=plan.get("achieved_tflops"), price=price,
                           objective=plan.get("objective", "time"), top=None, **fixed)
    how = (f"mfu {plan['mfu']}" if "mfu" in plan else f"{plan['achieved_tflops']} TFLOP/s achieved per GPU")
    intro = (f"{result.considered:,} layouts of {plan.get('gpus') or 'up to ' + str(plan['max_gpus'])} × {gpu.name} "
             f"for {plan['global_batch']:,} {_samples(seq)} per step and {plan['tokens']:,} tokens "
             f"({how}); {result.fitting:,} fit, ranked by {result.objective}.")
    if not budget.whole:
        intro += f" Each GPU's budget: {budget.describe()}."
    pool = f"{plan.get('gpus') or 'up to ' + str(plan['max_gpus'])} × {gpu.name}"
    section: dict[str, Any] = {"intro": intro, "chosen": [], "alternatives": [], "charts": [],
                               "summary": f"Capacity plan: none of the {result.considered:,} layouts of {pool} fits "
                                          f"{plan['global_batch']:,} {_samples(seq)} per step (see "
                                          f"“{TITLE}”)."}
    if not result.layouts:
        section["intro"] += " None fits: more GPUs, a shorter sequence or offload."
        return [section]
    best = result.layouts[0]
    unit = time_unit(best["train_seconds"])  # one unit for the chosen layout, the alternatives and the chart
    cp = f" × cp {best['cp']}" if best.get("cp", 1) > 1 else ""  # printed only where context-parallel
    pairs = [("GPUs", f"{best['gpus']} (dp {best['dp']} × tp {best['tp']} × pp {best['pp']}{cp})"),
             ("ZeRO stage", search.sharding(best)), ("recompute", str(best["recompute"])),
             ("sequence parallel", "on" if best["sequence_parallel"] else "off"),
             ("micro-batch × accumulation", f"{best['micro_batch']} × {best['grad_accum']}"),
             ("memory per GPU", f"{best['memory_bytes']:,} bytes = {format_bytes(best['memory_bytes'])}"),
             ("step", f"{best['step_seconds']:,.3f} s"), ("time to train", _duration(best["train_seconds"], unit)),
             ("GPU-hours", f"{best['gpu_hours']:,.0f}")]
    if "cost" in best:
        pairs.append(("cost", f"{best['cost']:,.0f} USD at {price} USD per GPU-hour"))
    section["summary"] = _summary(best, gpu.name, plan["tokens"], unit, result)
    section["chosen"] = [tables.table([("chosen layout", "left"), ("", "left")],
                               [tables.row([ts.cell(k), ts.cell(v)]) for k, v in pairs], {0: "5.5cm", 1: "10.5cm"})]
    with_cp = any(lay.get("cp", 1) > 1 for lay in result.layouts[: plan.get("top", 8)])
    columns = [("GPUs", "right"), ("dp", "right"), ("tp", "right"), ("pp", "right"),
               *([("cp", "right")] if with_cp else []), ("ZeRO", "right"),
               ("recompute", "left"), ("mb × acc.", "right"), ("memory", "right"), ("time", "right")]
    if price is not None:
        columns.append(("cost (USD)", "right"))
    rows = []
    for lay in result.layouts[: plan.get("top", 8)]:
        cells = [str(lay["gpus"]), str(lay["dp"]), str(lay["tp"]), str(lay["pp"]), *([str(lay["cp"])] if with_cp else []),
                 search.sharding(lay), lay["recompute"],
                 f"{lay['micro_batch']} × {lay['grad_accum']}", format_bytes(lay["memory_bytes"]),
                 _duration(lay["train_seconds"], unit)]
        if price is not None:
            cells.append(f"{lay['cost']:,.0f}")
        rows.append(tables.row([ts.cell(c) for c in cells]))
    section["alternatives"] = [tables.table(columns, rows)]
    if charts:
        by_cost = price is not None
        front = (search.frontier(result.layouts, "train_seconds", "cost") if by_cost
                 else search.frontier(result.layouts, "gpus", "train_seconds"))
        svg = _chart(result.layouts, front, by_cost, unit)
        data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
        section["charts"] = [{"src": f"data:image/svg+xml;base64,{data}",
                              "alt": "time to train against " + ("cost" if by_cost else "GPUs") + ", frontier marked"}]
    return [section]
