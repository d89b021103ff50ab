"""``symbolic serve``: a model on an engine (torch, vLLM, SGLang, llama.cpp): weights, KV pool, concurrency.

The common flags (model, GPU, formats, layout, context and concurrency) are this module's; each
engine's own flags come from ``engines.flag_table`` (data: no engine is imported to build the parser),
added here with no
default, so that one given to another engine is refused in one line rather than ignored.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import TYPE_CHECKING

from ..core.units import format_bytes
from ..engines import ENGINES
from ..engines.flags import Flag
from .common import (
    CliError,
    add_check,
    check_exit,
    print_json,
    quiet,
    table,
    verbose,
    whole,
    whole_type,
)
from .memory import add_budget_options, gpu_fraction

if TYPE_CHECKING:
    from ..engines import ServePlan



def _count(text: str) -> int:
    return whole(text, low=0)


def _numbers(text: str) -> tuple[float, ...]:
    try:
        out = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not out or any(not (0 <= v < float("inf")) for v in out) or sum(out) <= 0:
        raise argparse.ArgumentTypeError(f"expected non-negative shares with a positive sum, got {text!r}")
    return out


_PARSERS = {"whole": whole, "count": _count, "fraction": gpu_fraction, "text": str, "list": _numbers}


def _add_flag(group: argparse._ArgumentGroup, flag: Flag, engines: tuple[str, ...]) -> None:
    owner = f" [{', '.join(engines)}]"
    if flag.kind == "switch":
        group.add_argument(flag.name, dest=flag.dest, action=argparse.BooleanOptionalAction, default=None,
                           help=flag.help + owner)
    elif flag.kind == "choice":
        group.add_argument(flag.name, dest=flag.dest, choices=flag.choices, default=None, metavar=flag.metavar or None,
                           help=flag.help + f" ({', '.join(flag.choices)})" + owner)
    else:
        group.add_argument(flag.name, dest=flag.dest, type=_PARSERS[flag.kind], default=None,
                           metavar=flag.metavar or None, help=flag.help + owner)


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``serve``."""
    from ..engines import flag_tables
    from ..engines.flags import owners
    from ..formats import names

    p = sub.add_parser("serve", help="serve a model with an engine: weights, KV pool, concurrency, context",
                       description="What an engine holds per GPU serving a model: the weights, the KV pool in bytes and "
                                   "tokens, the largest concurrency at --seq and the longest context at --batch.")
    p.add_argument("model", metavar="MODEL", help="preset name, config.json path, GGUF file or model type")
    p.add_argument("--engine", choices=ENGINES, default="torch",
                   help="the serving engine whose memory rules apply (default torch: a plain PyTorch loop)")
    p.add_argument("--gpu", default="h100-80gb", help="GPU name, capacity (80GiB) or custom GPU .toml (default "
                   "h100-80gb)")
    p.add_argument("--weights", metavar="FORMAT", help="weight format (default: the config's quantization_config, "
                   "else bf16); one of " + ", ".join(names("weights")))
    p.add_argument("--kv-dtype", dest="kv_dtype", metavar="DTYPE",
                   help="KV-cache element type (default bf16); one of " + ", ".join(names("kv")))
    p.add_argument("--tp", type=whole_type(high=1024), default=1, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--pp", type=whole_type(high=1024), default=1, help="pipeline-parallel GPUs (default 1)")
    p.add_argument("--seq", type=whole, help="tokens per request: the largest concurrency at this context")
    p.add_argument("--batch", type=whole, help="requests at once: the longest context at this concurrency")
    add_budget_options(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_check(p)
    tables = flag_tables()
    who = owners(tables)
    seen: set[str] = set()
    for engine, flags in tables.items():
        if not flags:
            continue
        group = p.add_argument_group(f"{engine} flags")
        for flag in flags:
            if flag.dest not in seen:
                seen.add(flag.dest)
                _add_flag(group, flag, who[flag.dest])
    p.set_defaults(handler=cmd_serve)


def _engine_options(args: argparse.Namespace) -> dict[str, object]:
    from ..engines import flag_tables
    from ..engines.flags import owners

    return {dest: getattr(args, dest) for dest in owners(flag_tables()) if getattr(args, dest, None) is not None}


def cmd_serve(args: argparse.Namespace) -> int:
    """Print (or --json) one engine's answer: per GPU, the job, the two questions, the notes."""
    from ..catalogs.budget import parse_reserve
    from ..engines import serve

    reserve = [parse_reserve(r) for r in args.reserve or ()]
    if args.engine != "torch" and (args.gpu_fraction is not None or reserve):
        own = {"vllm": "--gpu-memory-utilization", "sglang": "--mem-fraction-static"}.get(args.engine)
        flag = "--gpu-fraction" if args.gpu_fraction is not None else "--reserve"
        raise CliError(f"{flag} sizes the torch engine's budget, not {args.engine}'s"
                       + (f"; its own fraction is {own}" if own else ""))
    plan = serve(args.model, args.engine, args.gpu, weights=args.weights, kv_dtype=args.kv_dtype, tp=args.tp,
                 pp=args.pp, seq=args.seq, batch=args.batch, gpu_fraction=args.gpu_fraction, reserve=reserve,
                 **_engine_options(args))
    if args.json:
        print_json(plan.as_dict())
    elif quiet(args):
        print(essential_line(plan))
    else:
        _print_plan(plan, verbose(args))
    return check_exit(args, plan.fits)


def essential_line(plan: ServePlan) -> str:
    """The answer in one line: how many requests of --seq tokens fit, or that nothing does."""
    where = f"{plan.model} on {plan.gpus} × {plan.gpu} with {plan.engine}"
    if not plan.fits:
        return f"{where}: nothing fits{_at(plan)}: {format_bytes(plan.non_kv_bytes)} per GPU before any cache, " \
               f"against a budget of {format_bytes(plan.budget_bytes)}"
    line = f"{where}: KV pool {format_bytes(plan.kv_cache_bytes)} ({plan.kv_cache_tokens:,} tokens) per GPU"
    if plan.max_concurrency is not None and plan.seq is not None:
        noun = "request" if plan.max_concurrency == 1 else "requests"
        line += f", {plan.max_concurrency} {noun} of {plan.seq:,} tokens at once"
    if plan.max_context is not None and plan.batch is not None:
        line += f", {plan.max_context:,} tokens each for {plan.batch} request{'' if plan.batch == 1 else 's'}"
    if plan.figures.get("fit_answer"):  # llama.cpp's --fit: the setting found is the answer asked for
        line += f"; --fit {plan.figures['fit']}: {plan.figures['fit_answer']}"
    return line


def _at(plan: ServePlan) -> str:
    return f", even one request of {plan.seq:,} tokens" if plan.seq is not None else ""


def _print_plan(plan: ServePlan, formulas: bool) -> None:
    from ..text import printing

    print(f"{plan.model} served with {plan.engine} ({plan.engine_version}) on {plan.gpus} × {plan.gpu}")
    settings = f"  weights {plan.weights} ({_from(plan.weights_from)}), KV cache {plan.kv_dtype}"
    if "prefill" in plan.figures:
        settings += f", prefill: {plan.figures['prefill']}"
    print(settings)
    if not plan.fits:
        print(f"  nothing fits{_at(plan)}: {format_bytes(plan.non_kv_bytes)} per GPU before any cache, against a "
              f"budget of {format_bytes(plan.budget_bytes)}")
    found = plan.term_bytes()
    head = ("per GPU", "bytes", "size", "title") + (("formula", "source") if formulas else ("source",))
    rows = [head]
    for t in plan.terms:
        title = t.title + (" (outside the budget)" if t.key in plan.outside else "")
        rows.append(("  " + t.key, f"{found[t.key]:,}", format_bytes(found[t.key]), title)
                    + ((printing.text(t.expr), t.source) if formulas else (t.source,)))
    blank = ("", "") if formulas else ("",)
    rows.append(("  weights (sum)", f"{plan.weights_bytes:,}", format_bytes(plan.weights_bytes), "the weights' terms")
                + blank)
    rows.append(("  non-KV (sum)", f"{plan.non_kv_bytes:,}", format_bytes(plan.non_kv_bytes),
                 "everything in the budget but the KV pool") + blank)
    rows.append(("  KV pool", f"{plan.kv_cache_bytes:,}", format_bytes(plan.kv_cache_bytes),
                 f"budget − non-KV: {plan.kv_cache_tokens:,} tokens") + blank)
    rows.append(("  budget", f"{plan.budget_bytes:,}", format_bytes(plan.budget_bytes), plan.gpu) + blank)
    print(table(rows, "<>><<<"))
    if formulas and plan.values:
        shown = ", ".join(f"{k}={v}" for k, v in sorted((str(k), v) for k, v in plan.values.items()))
        print(textwrap.fill(shown, width=100, initial_indent="  at ", subsequent_indent="     "))
    gpus = plan.gpus
    print(f"job, {gpus} GPU{'s' if gpus > 1 else ''}: weights {format_bytes(plan.weights_bytes * gpus)}, KV pool "
          f"{format_bytes(plan.kv_cache_bytes * gpus)}, budget {format_bytes(plan.budget_bytes * gpus)}"
          + (f" (each GPU alike; the pool holds {plan.kv_cache_tokens:,} tokens of every request's cache)"
             if gpus > 1 else ""))
    if plan.max_concurrency is not None and plan.seq is not None:
        print(f"  maximum concurrency at {plan.seq:,} tokens per request: {plan.max_concurrency}")
    if plan.max_context is not None and plan.batch is not None:
        print(f"  longest context at {plan.batch} requests at once: {plan.max_context:,} tokens")
    for line in plan.log_lines:
        print(f"  {plan.engine} would log: {line}")
    for note in plan.notes:
        print(f"  note: {note}")


def _from(where: str) -> str:
    return {"--weights": "as given", "quantization_config": "from the config's quantization_config",
            "file": "the file's tensor types", "default": "the default"}.get(where, where)
