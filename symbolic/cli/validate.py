"""``symbolic validate MODEL``: measure real PyTorch training steps and compare with the formulas.

Needs the ``torch`` extra (torch; transformers for Hugging Face configs). They are imported by
the handler, never when the parser is built.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..core.errors import single_line
from ..options import table as opts
from .common import CliError, print_json, quiet, table, verbose, whole_list

DEFAULTS = {"batch": "1,2", "seq": "64,128", "layers": "1,2", "dtype": "fp32,bf16", "attn": "eager,sdpa"}
HELP = {"dtype": "precisions: fp32, bf16 (pure) and bf16-mixed, fp16-mixed (torch.autocast, fp32 weights); "
                 "comma-separated (default fp32,bf16)"}


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``validate``."""
    p = sub.add_parser("validate", help="measure real training steps (torch) and compare with the formulas",
                       description="Build MODEL with random weights (never downloaded), measure the bytes saved for "
                                   "backward and the peak of each phase (forward, backward, optimizer) of whole "
                                   "training steps over a grid, and print predicted vs measured. MODEL is 'mlp' or "
                                   "'mlp-nobias' (article A's network), a preset name (see 'symbolic models') or a "
                                   "path to a config.json.")
    p.add_argument("model", metavar="MODEL")
    for name, default in DEFAULTS.items():
        flags = ("--dtype", "--precision") if name == "dtype" else (f"--{name}",)
        p.add_argument(*flags, dest=name, default=default,
                       help=HELP.get(name, f"comma-separated values (default {default})"))
    p.add_argument("--set", action="append", default=None, metavar="KEY=N",
                   help="override a whole-number config field, e.g. vocab_size=8192 (repeatable)")
    p.add_argument("--dropout", choices=("config", "off"), default="config",
                   help="keep the config's dropout probabilities or set them all to 0")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--optimizer", choices=("adamw", "sgd-momentum", "sgd"), default="adamw",
                   help="the optimizer of the measured steps (default adamw; sgd-momentum uses momentum 0.9)")
    p.add_argument("--foreach", choices=("default", "on", "off"), default="default",
                   help="the optimizer's foreach implementation (default: PyTorch's on the device: cuda on, cpu off)")
    p.add_argument("--use-cache", action=argparse.BooleanOptionalAction, default=None,
                   help="build transformers' KV cache during the step (default: the config's use_cache, true)")
    p.add_argument("--dropout-masks", choices=("bool", "dtype"), default=None,
                   help="dropout mask element: bool (CUDA's fused dropout, via torch.native_dropout on the CPU) or "
                        "the compute dtype (default: bool on cuda, dtype on cpu)")
    p.add_argument("--loss", choices=("cross-entropy", "mse"), default="cross-entropy",
                   help="loss of article A's network: cross-entropy of its softmax output or mse to one-hot targets")
    p.add_argument("--no-peak", action="store_true", help="measure saved bytes only (faster)")
    p.add_argument("--method", choices=("dispatch", "profiler", "cuda"), default=None,
                   help="how the peak is measured (default: cuda on CUDA, dispatch on the CPU)")
    p.add_argument("--terms", action="store_true", help="also compare each module type's share")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable output")
    out.add_argument("--markdown", action="store_true", help="the summary as a Markdown table row")
    p.set_defaults(handler=cmd_validate)


def _ints(text: str, name: str) -> tuple[int, ...]:
    return whole_list(text, f"--{name}")  # the message of every whole-number flag (cli/common.py)


def _seqs(text: str) -> tuple[int, ...]:
    """--seq: whole numbers up to the planner's bound (``options.table.MAX_SEQ``), as every --seq."""
    values = _ints(text, "seq")
    try:
        for value in values:
            opts.check_seq(value)
    except opts.PlanOptionError as err:
        raise CliError(f"argument --seq: {err}") from None
    return values


def _words(text: str, name: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items or set(items) - set(allowed):
        raise CliError(f"--{name}: choose from {', '.join(allowed)}")
    return items


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:+.2f} %"


def cmd_validate(args: argparse.Namespace) -> int:
    from ..measured import measure

    seqs = _seqs(args.seq)  # bad input first, with or without torch
    try:
        measure.require_torch()
    except measure.TorchMissing as err:
        raise CliError(str(err)) from None
    from ..measured import crosscheck as val

    grid = val.Grid(batch=_ints(args.batch, "batch"), seq=seqs, layers=_ints(args.layers, "layers"),
                    dtype=_words(args.dtype, "dtype", val.DTYPES), attn=_words(args.attn, "attn", ("eager", "sdpa")))
    overrides = val.parse_overrides(args.set or [])
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise CliError("--device cuda: no CUDA device is available")
    foreach = {"default": None, "on": True, "off": False}[args.foreach]
    points = val.run(args.model, grid, device=args.device, peak=not args.no_peak, overrides=overrides,
                     method=args.method, dropout=args.dropout, optimizer=args.optimizer, foreach=foreach,
                     use_cache=args.use_cache, masks=args.dropout_masks or "", loss=args.loss)
    summary = val.summarize(points)
    info = val.environment()
    if args.json:
        print_json({"model": args.model, "environment": info, "summary": summary,
                    "points": [p.as_dict() for p in points]})
        return 0
    if args.markdown:
        print(MARKDOWN_HEAD)
        print(markdown_row(single_line(args.model), points, summary))
        return 0
    if quiet(args):  # the essential line: the verdict
        print("all within the targets" if summary["within_targets"] else "NOT within the targets")
        return 0
    args.terms = args.terms or verbose(args)  # --verbose: each module type's share too
    _print_text(args, points, summary, info)
    return 0


MARKDOWN_HEAD = ("| model | setup | points | saved: ours | saved: article A/B | saved: Korthikanti | peak: ours "
                 "| peak: article A/B | phases: forward / backward / optimizer |\n"
                 "|---|---|---:|---:|---:|---:|---:|---:|---:|")


def setup_label(points: list[Any]) -> str:
    """The options the points share: precisions, attention, optimizer, cache, masks, loss."""
    if not points:
        return ""
    first = points[0]
    parts = ["/".join(dict.fromkeys(p.dtype for p in points))]
    if first.S:  # a network with a token sequence (article A's points have none)
        parts.append("/".join(dict.fromkeys(p.attn for p in points)))
        parts.append("cache " + ("on" if first.use_cache else "off"))
        parts.append(f"{first.dropout_masks} masks")
    parts.append(first.optimizer + (" foreach" if first.foreach else ""))
    if first.loss != "cross-entropy":
        parts.append(first.loss)
    batches = sorted({p.B for p in points})
    parts.append("B " + ",".join(map(str, batches)))
    return ", ".join(parts)


def markdown_row(model: str, points: list[Any], summary: dict[str, Any]) -> str:
    """One README table row: ours as the largest |error|, the seeds' as their error range."""
    def worst(s: dict[str, Any] | None) -> str:
        return "–" if not s else f"{100 * s['max_abs']:.2f} %"

    def span(key: str) -> str:
        s = summary.get(key)
        if not s:
            return "–"
        low, high = 100 * s["min"], 100 * s["max"]
        return f"{low:+.0f} %" if round(low) == round(high) else f"{low:+.0f} … {high:+.0f} %"

    seed = "article A" if "article A" in summary else "article B"
    phases = summary.get("phases", {})
    per_phase = " / ".join(worst(phases.get(k)) for k in ("forward", "backward", "optimizer")) if phases else "–"
    return (f"| {model} | {setup_label(points)} | {summary['points']} | {worst(summary.get('saved'))} | {span(seed)} | "
            f"{span('Korthikanti')} | {worst(summary.get('peak'))} | {span('peak ' + seed)} | {per_phase} |")


def _print_text(args: argparse.Namespace, points: list[Any], summary: dict[str, Any], info: dict[str, str]) -> None:
    from ..core.units import format_bytes

    first = points[0]
    print(f"symbolic validate {single_line(args.model)}: family {first.family}, device {args.device}, "
          f"torch {info['torch']}, transformers {info.get('transformers', '-')}")
    print(f"  setup: {setup_label(points)}")
    if first.note:
        print(f"  note: {first.note}")
    seeds = list(first.seeds)
    head = ["B", "S", "L", "dtype", "attn", "saved (measured)", "ours", "error"]
    for seed in seeds:
        head += [seed, "error"]
    if first.peak_measured is not None:
        head += ["peak (measured)", "ours", "error", "at"]
    rows: list[list[str]] = [head]
    for p in points:
        row = [str(p.B), str(p.S or "-"), str(p.L or "-"), p.dtype, p.attn or "-", f"{p.saved_measured:,}",
               f"{p.saved_predicted:,}", _pct(p.saved_error)]
        for seed in seeds:
            row += [f"{p.seeds[seed]:,}", _pct(p.seed_errors()[seed])]
        if p.peak_measured is not None:
            row += [format_bytes(p.peak_measured), format_bytes(p.peak_predicted), _pct(p.peak_error), p.peak_phase]
        rows.append(row)
    print(table(rows, "<>><<>>>" + ">>" * len(seeds) + ">>><"))
    if first.phases_measured:
        print("\npeak by phase (whole-step bytes at each phase's peak): measured, ours, error")
        names = list(first.phases_predicted)
        rows = [["B", "S", "L", "dtype", "attn", *[f"{n} {x}" for n in names for x in ("measured", "ours", "error")],
                 "peak at", "ours at"]]
        for p in points:
            errors = p.phase_errors()
            row = [str(p.B), str(p.S or "-"), str(p.L or "-"), p.dtype, p.attn or "-"]
            for n in names:
                row += [format_bytes(p.phases_measured.get(n, 0)), format_bytes(p.phases_predicted[n]),
                        _pct(errors.get(n))]
            rows.append(row + [p.peak_phase, p.predicted_phase])
        print(table(rows, "<>><<" + ">>>" * len(names) + "<<"))
    if args.terms:
        for p in points:
            print(f"\n  B={p.B} S={p.S} L={p.L} {p.dtype} {p.attn}: bytes saved per module type")
            names = sorted(set(p.modules_measured) | set(p.modules_predicted))
            rows = [["  module", "measured", "ours", "ratio", "error"]]
            for n in names:
                got, want = p.modules_measured.get(n, 0), p.modules_predicted.get(n, 0)
                rows.append([f"  {n}", f"{got:,}", f"{want:,}", f"{want / got:.4f}" if got else "-",
                             _pct((want - got) / got if got else None)])
            print(table(rows, "<>>>>"))
    s = summary["saved"]
    print(f"\nsaved bytes: ours within {100 * s['max_abs']:.3f} % (mean {100 * s['mean_abs']:.3f} %) over "
          f"{summary['points']} points; target {100 * val_tolerance('saved'):g} %")
    for seed in seeds:
        t = summary[seed]
        print(f"  {seed}: {100 * t['min']:+.1f} % … {100 * t['max']:+.1f} %")
    if "peak" in summary:
        t = summary["peak"]
        print(f"peak of a step: ours within {100 * t['max_abs']:.3f} %; target {100 * val_tolerance('peak'):g} %")
        for name, t in summary.get("phases", {}).items():
            print(f"  {name} phase: ours within {100 * t['max_abs']:.3f} %")
        print(f"  the phase that sets the peak agrees on {summary['peak_phase_agrees']} of {summary['points']} points")
    print("all within the targets" if summary["within_targets"] else "NOT within the targets")


def val_tolerance(kind: str) -> float:
    from ..measured import crosscheck as val

    return val.TOLERANCE_SAVED if kind == "saved" else val.TOLERANCE_PEAK
