"""Subcommands on the time half of a capacity plan: ``time`` (one layout) and ``plan`` (layout search).

Both take the shape, precision and parallel flags of ``symbolic memory`` (added by the same
function), a GPU of the catalogue or a custom GPU file, and one of ``--mfu`` or
``--achieved-tflops``. Handlers import the planner lazily (see the import rule in
``cli/__init__.py``).
"""

from __future__ import annotations

import argparse
import textwrap
from typing import TYPE_CHECKING

from ..formats import RATE_KEYS
from .common import CliError, print_json, quiet, table, verbose, whole

if TYPE_CHECKING:  # pragma: no cover
    from ..planning.time import TimePlan

DTYPES = RATE_KEYS  # the GPU rate keys (symbolic.formats)
MAX_COUNT = 10**30  # tokens to train on reach 1e13 and more: above the 2**40 of sizes and degrees


def add_memory_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``symbolic memory`` (MODEL_OR_CONFIG, --mode, shape, precision, parallelism, --json).

    A thin wrapper: ``cli/memory.py`` owns the definition (``add_plan_options``); this calls it so
    that ``time`` and ``plan`` always take the same flags as ``memory``.
    """
    from . import memory

    adder = getattr(memory, "add_plan_options", None) or memory._add_plan_options
    adder(p)


def memory_options(args: argparse.Namespace) -> dict[str, object]:
    """The planning options given on the command line (as ``symbolic memory`` reads them)."""
    from . import memory

    return memory.plan_options(args)


def _number(text: str, what: str) -> object:
    from ..core.values import parse_number

    try:
        value = parse_number(text, what)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{what} must be positive, got {text!r}")
    return value


def _count(text: str) -> int:
    return whole(text, high=MAX_COUNT)  # one parser and message for every whole-number flag (cli/common.py)


def _real(text: str) -> float:
    return float(_number(text, "value"))  # type: ignore[arg-type]


def _add_rate_flags(p: argparse.ArgumentParser) -> None:
    from . import memory

    p.add_argument("--gpu", required=True, help="a GPU of the catalogue ('symbolic gpus') or a custom GPU .toml file")
    memory.add_budget_options(p)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--mfu", type=_real, help="efficiency of the compute alone (0 < F ≤ 1); communication and the "
                                             "pipeline bubble are modelled on top")
    g.add_argument("--achieved-tflops", dest="achieved_tflops", type=_real,
                   help="end-to-end TFLOP/s per GPU, overheads included, as papers report it: time = FLOPs / "
                        "(GPUs · X)")
    p.add_argument("--compute-dtype", dest="compute_dtype", choices=DTYPES,
                   help="dtype whose peak FLOP/s applies (default: the training precision's, or the weights')")
    p.add_argument("--tokens", type=_count, help="tokens to train on (serving: tokens to generate), e.g. 3e11")
    p.add_argument("--price", type=_real, help="USD per GPU-hour (gives the cost)")
    p.add_argument("--set", action="append", metavar="SIZE=N",
                   help="the value of a torch module's input size (an --input size name; a library model's H, W, S)")


def module_model(args: argparse.Namespace) -> object:
    """``modules.model_of``; a --set item that names no input size of the model refused in one line."""
    from .modules import model_of

    model = model_of(args)  # takes the --set items that name an input size out of args.set
    if args.set:
        raise CliError(f"--set {args.set[0]}: not an input size of {getattr(model, 'name', model)} (--set gives a "
                       "torch module's input sizes here)")
    return model


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``time`` and ``plan``."""
    p = sub.add_parser("time", help="FLOPs, step time, throughput, time to train and cost of one layout",
                       description="Time half of a capacity plan: every figure a formula (roofline step, "
                                   "communication, bubble; or FLOPs at an achieved rate).")
    add_memory_flags(p)
    _add_rate_flags(p)
    p.add_argument("--gpus", type=_count, help="GPUs in the job (sets dp = gpus / (tp · pp) unless --dp is given)")
    p.add_argument("--formula", action="store_true", help="show the formula behind each figure")
    p.set_defaults(handler=cmd_time)

    p = sub.add_parser("plan", help="search parallel layouts that fit, ranked by time or cost",
                       description="Search dp × tp × pp × ZeRO × recompute × micro-batch × gradient accumulation "
                                   "for a global batch; keep what fits; rank.")
    add_memory_flags(p)
    _add_rate_flags(p)
    count = p.add_mutually_exclusive_group(required=True)
    count.add_argument("--gpus", type=_count, help="exactly this many GPUs")
    count.add_argument("--max-gpus", dest="max_gpus", type=_count,
                       help="every GPU count up to this (powers of two and whole nodes)")
    p.add_argument("--global-batch", dest="global_batch", type=_count, required=True,
                   help="sequences per optimizer step (dp × micro-batch × gradient accumulation); samples for a "
                        "network without a token sequence (a torch module), which takes no --seq")
    p.add_argument("--objective", choices=("time", "cost"), default="time", help="rank by time (default) or cost")
    p.add_argument("--top", type=_count, default=10, help="how many layouts to show (default 10)")
    p.set_defaults(handler=cmd_plan)


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e6 or abs(value) < 1e-3:
        return f"{value:.4g}"
    return f"{value:,.4f}".rstrip("0").rstrip(".")


_UNITS = {"flops_per_token": "FLOPs", "flops_per_step": "FLOPs", "step_seconds": "s", "tokens_per_second": "tokens/s",
          "train_seconds": "s", "train_days": "days", "gpu_hours": "GPU-h", "cost": "USD", "achieved_tflops": "TFLOP/s",
          "mfu_end_to_end": "", "prefill_seconds": "s", "decode_seconds": "s", "decode_tokens_per_second": "tokens/s",
          "decode_seconds_per_token": "s", "bandwidth_bound_tokens_per_second": "tokens/s", "max_concurrency": "sequences",
          "total_seconds": "s", "tokens_per_step": "tokens", "gpus": ""}


def cmd_time(args: argparse.Namespace) -> int:
    from ..planning import time as ptime
    from .common import budget_of
    from .memory import warn_plan_context

    model = module_model(args)  # before the options: a module's --loss is its own
    options = memory_options(args)
    result = ptime.time_plan(model, budget_of(args), args.mode, gpus=args.gpus, tokens=args.tokens, mfu=args.mfu,
                             achieved_tflops=args.achieved_tflops, price=args.price, compute=args.compute_dtype,
                             **options)
    if getattr(args, "seq", None) is not None and not result.memory.model.sequence:  # a sample is its token
        raise CliError(f"--seq applies to a network that takes a token sequence; {result.model} takes none (a token "
                       "of its figures is one sample)")
    warn_plan_context(args, result.memory)
    if args.json:
        print_json(result.as_dict(formulas=args.formula))
        return 0
    if quiet(args):  # the essential line
        print(_time_line(result))
        return 0
    _print_time(result, args.formula)
    return 0


# what --quiet prints of each mode's figures (those the run has), in this order
QUIET_FIGURES = {"train": ("step_seconds", "tokens_per_second", "train_days", "gpu_hours", "cost"),
                 "infer": ("prefill_seconds", "decode_seconds_per_token", "tokens_per_second", "max_concurrency")}


def _time_line(result: TimePlan) -> str:
    """One line: the mode's essential figures, the layout, and the verdict when the memory does not fit."""
    r = result.memory.regime
    figures = ", ".join(f"{name} {_fmt(float(result.figures[name]))}{' ' + _UNITS[name] if name in _UNITS else ''}"
                        for name in QUIET_FIGURES[result.mode] if result.figures.get(name) is not None)
    fits = "" if result.memory.total <= result.limit.bytes else "; memory does NOT fit"
    return f"{result.model} on {r.gpus} × {result.gpu.name}: {figures}{fits}"


def _print_time(result: TimePlan, formulas: bool) -> None:
    r = result.memory.regime
    what = "training" if result.mode == "train" else "serving"
    rate = (f"mfu {result.values['mfu']} of {float(result.values['F_peak']) / 1e12:,.1f} TFLOP/s peak"  # type: ignore[arg-type]
            if "mfu" in result.values else f"{float(result.values['X']) / 1e12:,.1f} TFLOP/s achieved per GPU")  # type: ignore[arg-type]
    print(f"{result.model}: {what} on {r.gpus} × {result.gpu.name} (dp {r.dp} × tp {r.tp} × pp {r.pp}), {rate}")
    rows = [("figure", "value", "unit")]
    rows += [(k, _fmt(float(v)), _UNITS.get(k, "")) for k, v in result.figures.items() if v is not None]
    rows.append(("memory_per_gpu", f"{result.memory.total:,}", "bytes" + ("" if result.memory.total <= result.limit.bytes
                                                                       else " (does NOT fit)")))
    print(table(rows, "<><"))
    step = result.formulas.get("step_seconds") or result.formulas.get("decode_seconds")
    if step is not None:
        ev = step.evaluate(step.restrict(result.values))
        print(f"{step.name} terms (s): " + ", ".join(f"{t.key} {_fmt(float(v))}" for t, v in ev.terms))
    if formulas:
        for key, f in result.formulas.items():
            print(f"{key}: {f}   [{f.key}]")
            for symbol, definition in f.definitions.items():
                print(textwrap.fill(f"where {symbol.name} = {definition.text()}   [{definition.key}]", width=110,
                                    initial_indent="  ", subsequent_indent="      "))
        values = ", ".join(f"{k}={_fmt(float(v)) if not isinstance(v, (int, str)) else v}"
                           for k, v in result.values.items())
        print(textwrap.fill(values, width=110, initial_indent="  at ", subsequent_indent="     "))
    for note in result.notes:
        print(f"  note: {note}")
    if result.flops_by_module:
        _print_module_flops(result)


def _print_module_flops(result: TimePlan) -> None:
    """The network's own FLOPs per module: forward and backward, a formula in B and the input sizes, per micro-batch."""
    from ..text import printing

    rows = [("module", "forward", "backward", "forward formula", "backward formula")]
    for row in result.flops_by_module:
        rows.append((str(row["module"]), f"{row['forward']:,}", f"{row['backward']:,}",
                     printing.text(row["forward_formula"]), printing.text(row["backward_formula"])))
    fwd = sum(int(row["forward"]) for row in result.flops_by_module)  # type: ignore[call-overload]
    bwd = sum(int(row["backward"]) for row in result.flops_by_module)  # type: ignore[call-overload]
    rows.append(("total", f"{fwd:,}", f"{bwd:,}", "", ""))
    print(f"FLOPs per micro-batch of {result.memory.regime.batch} by module (counted by FlopCounterMode on the meta "
          "device, fitted in B and the input sizes):")
    print(table(rows, "<>><<"))


def cmd_plan(args: argparse.Namespace) -> int:
    from ..planning import load, search
    from .common import budget_of, warn_context

    if args.mode != "train":
        raise CliError("plan searches training layouts; --mode infer is not searched (use 'symbolic time')")
    model = module_model(args)  # before the options: a module's --loss is its own
    options = memory_options(args)
    seq = options.pop("seq", None)
    shape = load(model)  # the model's config, as 'symbolic memory' reads it; a module network is itself
    _check_seq(seq, shape)
    result = search.search(model, budget_of(args), seq=seq, global_batch=args.global_batch, gpus=args.gpus,
                           max_gpus=args.max_gpus, tokens=args.tokens, mfu=args.mfu,
                           achieved_tflops=args.achieved_tflops, price=args.price, objective=args.objective,
                           top=args.top, compute=args.compute_dtype, **options)
    if seq is not None:
        warn_context(args, shape.config, shape.name, seq, shape.positions)
    if args.json:
        print_json(result.as_dict())
        return 0
    if quiet(args):  # the essential line: the best layout
        print(_best_line(result))
        return 0
    print(f"{result.model} on {result.limit.label}: {result.considered} layouts, {result.fitting} fit; best by "
          f"{result.objective}")
    if not result.layouts:  # none considered: the first note says why; else none fits the memory
        if result.considered:  # --offload only where the search has not tried it
            tried = any(note.startswith("offload was searched") for note in result.notes) or options.get("offload")
            print(f"  nothing fits: more GPUs, a smaller micro-batch or sequence{'' if tried else ', or --offload'}")
        for note in result.notes:
            print(f"  note: {note}")
        return 0
    with_cp = any(lay.get("cp", 1) > 1 for lay in result.layouts)  # the cp column only where a layout has cp > 1
    head = ["gpus", "dp", "tp", "pp", *(["cp"] if with_cp else []), "zero", "recompute", "mb", "accum", "memory",
            "step s"]
    extra = [k for k in ("train_seconds", "cost") if k in result.layouts[0]]
    rows = [tuple(head + [{"train_seconds": "train days", "cost": "cost USD"}[k] for k in extra])]
    from ..core.units import format_bytes

    for lay in result.layouts:
        row = [str(lay["gpus"]), str(lay["dp"]), str(lay["tp"]), str(lay["pp"]), *([str(lay["cp"])] if with_cp else []),
               search.sharding(lay), str(lay["recompute"]),
               str(lay["micro_batch"]), str(lay["grad_accum"]), format_bytes(int(lay["memory_bytes"])),  # type: ignore[call-overload]
               _fmt(float(lay["step_seconds"]))]  # type: ignore[arg-type]
        if "train_seconds" in lay:
            row.append(f"{float(lay['train_seconds']) / 86400:,.2f}")  # type: ignore[arg-type]
        if "cost" in lay:
            row.append(f"{float(lay['cost']):,.0f}")  # type: ignore[arg-type]
        rows.append(tuple(row))
    print(table(rows, "<>>>>" + (">" if with_cp else "") + "<>>>>>>"))
    for note in result.notes:
        print(f"  note: {note}")
    if verbose(args):
        print(f"  searched {result.considered:,} layouts in {result.seconds:.2f} s; {result.fitting:,} fit; "
              f"{len(result.layouts)} shown (--top)")
    return 0


def _check_seq(seq: int | None, shape: object) -> None:
    """--seq: needed by a network over a token sequence, refused in one line by one without (as ``time`` does)."""
    if getattr(shape, "sequence", True):
        if seq is None:
            raise CliError("plan needs --seq (tokens per sequence)")
    elif seq is not None:
        raise CliError(f"--seq applies to a network that takes a token sequence; {shape.name} takes none (a token "  # type: ignore[attr-defined]
                       "of its figures is one sample)")


def _cp_factor(layout: dict) -> str:
    """' × cp N' where a layout is context-parallel (nothing otherwise: cp 1 layouts print as before)."""
    return f" × cp {layout['cp']}" if layout.get("cp", 1) > 1 else ""


def _best_line(result: object) -> str:
    """One line: the best layout of a search (what --quiet prints)."""
    from ..core.units import format_bytes

    head = f"{result.model} on {result.limit.label}"  # type: ignore[attr-defined]
    if not result.layouts:  # type: ignore[attr-defined]
        return f"{head}: {result.notes[0] if not result.considered else 'nothing fits'}"  # type: ignore[attr-defined]
    lay = result.layouts[0]  # type: ignore[attr-defined]
    return (f"{head}: best by {result.objective}: gpus {lay['gpus']} (dp {lay['dp']} × tp {lay['tp']} × "  # type: ignore[attr-defined]
            f"pp {lay['pp']}{_cp_factor(lay)}), {'fsdp' if lay.get('fsdp') else 'zero ' + str(lay['zero'])}, recompute {lay['recompute']}, micro-batch {lay['micro_batch']}, "
            f"accum {lay['grad_accum']}: step {_fmt(float(lay['step_seconds']))} s, "  # type: ignore[arg-type]
            f"memory {format_bytes(int(lay['memory_bytes']))}")  # type: ignore[call-overload]
