"""``symbolic serve``: a model on an engine (torch, vLLM, SGLang, llama.cpp): weights, KV pool, concurrency.

The common flags (model, GPU, formats, layout, context and concurrency) are this module's; each
engine's own flags come from its module's ``FLAGS`` (``symbolic.engines``), added here with no
default, so that one given to another engine is refused in one line rather than ignored.
"""

from __future__ import annotations

import argparse

from ..core.units import format_bytes
from ..engines.flags import Flag
from .common import CliError, print_json, quiet, table, whole, whole_type

ENGINE_NAMES = ("torch", "vllm", "sglang", "llamacpp")


def _fraction(text: str) -> object:
    from ..catalogs.budget import as_fraction

    try:
        return as_fraction(text, "F")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


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


_PARSERS = {"whole": whole, "count": _count, "fraction": _fraction, "text": str, "list": _numbers}


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

    p = sub.add_parser("serve", help="serve a model with an engine: weights, KV pool, concurrency, context")
    p.add_argument("model", metavar="MODEL", help="preset name, config.json path, GGUF file or model type")
    p.add_argument("--engine", choices=ENGINE_NAMES, default="torch",
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
    p.add_argument("--json", action="store_true", help="machine-readable output")
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
    """Print (or --json) one engine's answer."""
    from ..engines import serve

    if args.engine is None:
        raise CliError("--engine is required")
    plan = serve(args.model, args.engine, args.gpu, weights=args.weights, kv_dtype=args.kv_dtype, tp=args.tp,
                 pp=args.pp, seq=args.seq, batch=args.batch, **_engine_options(args))
    if args.json:
        print_json(plan.as_dict())
        return 0
    print(f"{plan.model} served with {plan.engine} ({plan.engine_version}) on {plan.gpus} × {plan.gpu}")
    print(f"  weights {plan.weights} ({_from(plan.weights_from)}), KV cache {plan.kv_dtype}")
    found = plan.term_bytes()
    rows = [[t.key, t.title, format_bytes(found[t.key]), "" if t.key not in plan.outside else "outside the budget"]
            for t in plan.terms]
    print(table(rows, "<<><"))
    print(f"  per GPU: budget {format_bytes(plan.budget_bytes)}, weights {format_bytes(plan.weights_bytes)}, "
          f"non-KV {format_bytes(plan.non_kv_bytes)}, KV pool {format_bytes(plan.kv_cache_bytes)}")
    print(f"  KV cache: {plan.kv_cache_tokens:,} tokens")
    if plan.max_concurrency is not None and plan.seq is not None:
        print(f"  maximum concurrency at {plan.seq:,} tokens per request: {plan.max_concurrency}")
    if plan.max_context is not None and plan.batch is not None:
        print(f"  longest context at {plan.batch} requests at once: {plan.max_context:,} tokens")
    for line in plan.log_lines:
        print(f"  {plan.engine} would log: {line}")
    if not quiet(args):
        for note in plan.notes:
            print(f"  note: {note}")
    return 0


def _from(where: str) -> str:
    return {"--weights": "as given", "quantization_config": "from the config's quantization_config",
            "file": "the file's tensor types", "default": "the default"}.get(where, where)
