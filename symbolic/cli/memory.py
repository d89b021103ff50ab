"""Subcommands on per-GPU memory of real models: ``memory``, ``fit`` and ``gpus``.

The handlers are thin: they turn arguments into the keyword options of ``symbolic.planning``
(the same API the report uses), print, and let ``ValueError`` become a one-line error. The
planner is imported inside the handlers (see the import rule in ``cli/__init__.py``).
"""

from __future__ import annotations

import argparse
import textwrap
from typing import TYPE_CHECKING

from ..core.errors import quote, single_line
from ..core.units import format_bytes
from ..options import table as opts
from .common import (
    CliError,
    add_check,
    add_term_options,
    budget_of,
    check_exit,
    cli_terms,
    parse_sets,
    print_budget,
    print_json,
    quiet,
    table,
    verbose,
    warn_context,
    whole,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..catalogs import Budget
    from ..planning import Plan


def _positive(text: str) -> int:
    return whole(text)  # one parser and message for every whole-number flag (cli/common.py)


def _seq(text: str) -> int:
    """--seq: a whole number up to the planner's bound (``options.table.MAX_SEQ``), refused past it in one line."""
    try:
        return opts.check_seq(whole(text))
    except opts.PlanOptionError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _fraction(text: str) -> float:
    try:
        return opts.parse_fraction("value", text)
    except opts.PlanOptionError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to below 1, got {quote(text)}") from None


def gpu_fraction(text: str) -> object:
    """A fraction flag (--gpu-fraction, vLLM's and SGLang's): 0 < F ≤ 1 (a decimal such as 0.9), refused in one line."""
    from ..catalogs.budget import as_fraction

    try:
        return as_fraction(text, "F")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_budget_options(p: argparse.ArgumentParser) -> None:
    """--gpu-fraction and --reserve: what of --gpu's memory a plan may use (``catalogs.budget``)."""
    p.add_argument("--gpu-fraction", dest="gpu_fraction", type=gpu_fraction, metavar="F",
                   help="use this fraction of --gpu's memory, 0 < F ≤ 1 (as vLLM's gpu_memory_utilization; "
                        "default 1, all of it)")
    p.add_argument("--reserve", action="append", metavar="NAME=SIZE",
                   help="memory something else holds, subtracted from --gpu's (after --gpu-fraction); "
                        "repeatable, e.g. --reserve other-process=2GiB")


def add_plan_options(p: argparse.ArgumentParser, *, model: bool = True, json: bool = True) -> None:
    """Add the planner's options to ``p``, one flag per entry of ``options.table.OPTIONS``.

    Also the ``MODEL_OR_CONFIG`` argument and ``--mode`` (and ``--json``); other commands that
    plan a model (``memory``, ``fit``, ...) call this so that their flags stay the same.
    """
    if model:
        p.add_argument("model", metavar="MODEL_OR_CONFIG",
                       help="preset name (see 'symbolic models') or path to config.json")
    p.add_argument("--mode", choices=opts.MODES, default=opts.DEFAULT_MODE,
                   help=f"training or inference (default {opts.DEFAULT_MODE})")
    groups = {mode: p.add_argument_group(title) for mode, title in opts.GROUPS.items()}
    for option in opts.OPTIONS:
        _add_option(groups[option.mode], option)
    if json:
        p.add_argument("--json", action="store_true", help="machine-readable output")
    if model:
        from .modules import add_module_options

        add_module_options(p)


def _add_option(group: argparse._ArgumentGroup, option: opts.Option) -> None:
    """One flag; every flag defaults to None ("the planner's default")."""
    kwargs: dict[str, object] = {"dest": option.name, "help": option.help}
    if option.kind in ("size", "degree"):
        kwargs["type"] = _seq if option.name == "seq" else _positive
    elif option.kind == "stage":
        kwargs.update(type=int, choices=option.choices)
    elif option.kind == "flag":
        kwargs.update(action=argparse.BooleanOptionalAction, default=None)
    elif option.kind == "names":
        kwargs.update(metavar="NAME[,NAME...]")
    elif option.kind == "fraction":
        kwargs.update(type=_fraction, metavar="P")
    else:
        kwargs["choices"] = option.choices
    group.add_argument(option.flag, **kwargs)  # type: ignore[arg-type]


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``memory``, ``fit`` and ``gpus``."""
    p = sub.add_parser("memory", help="per-GPU memory of a model: every term and the total",
                       description="Per-GPU training or inference memory of a preset or config.json, term by term.")
    add_plan_options(p)
    p.add_argument("--gpu", help="check the total against a GPU of the catalogue ('symbolic gpus'), a size such as "
                                 "20.24GiB (rounded down to whole bytes) or a custom GPU .toml file")
    add_budget_options(p)
    p.add_argument("--formula", action="store_true", help="show the formula behind each number, and each phase's")
    add_check(p)
    add_term_options(p)
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="value of a symbol a --term introduces")
    p.set_defaults(handler=cmd_memory)

    p = sub.add_parser("fit", help="largest batch or context, or fewest GPUs, that fit a GPU",
                       description="Solve the per-GPU memory formula against a GPU's capacity.")
    add_plan_options(p)
    p.add_argument("--gpu", required=True, help="a GPU of the catalogue ('symbolic gpus'), a size such as 20.24GiB "
                                                "(rounded down to whole bytes) or a custom GPU .toml file")
    add_budget_options(p)
    p.add_argument("--for", dest="question", required=True, choices=("batch", "seq", "image-size", "gpus"),
                   help="batch: largest micro-batch; seq: longest context (a torch module's size S); image-size: "
                        "a torch module's largest H and W, grown together keeping their ratio; gpus: fewest GPUs")
    p.add_argument("--vary", metavar="NAME[,NAME]",
                   help="for --for seq or image-size of a torch module: the input sizes (--set names) to grow "
                        "together, keeping their ratio, in steps of the network's total stride (default S, or H,W)")
    p.add_argument("--over", choices=("auto", "dp", "tp", "pp"), default="auto",
                   help="for --for gpus: which degree grows (auto: dp with ZeRO-3 when training, tp when serving)")
    p.add_argument("--set", action="append", metavar="SIZE=N",
                   help="the value of a torch module's input size (an --input size name): where --for image-size "
                        "or seq starts and the ratio it keeps")
    add_check(p)
    p.set_defaults(handler=cmd_fit)

    p = sub.add_parser("gpus", help="the GPU catalogue: memory in bytes and where each number comes from")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_gpus)


def warn_plan_context(args: argparse.Namespace, plan: Plan) -> None:
    """``warn_context`` for a plan: its model's config and the plan's sequence length."""
    warn_context(args, plan.model.config, plan.model.name, plan.regime.seq, plan.model.positions)


def plan_options(args: argparse.Namespace) -> dict[str, object]:
    """The planning keyword options the user gave (None: the planner's default)."""
    return {name: getattr(args, name) for name in opts.NAMES if getattr(args, name, None) is not None}


def _show(value: object) -> str:
    return {True: "on", False: "off"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def _choices_text(plan: Plan) -> str:
    defaulted = set(plan.defaulted())
    options = plan.options()
    items = [f"{name.replace('_', '-')} {_show(value)}{'*' if name in defaulted else ''}"
             for name, value in options.items() if name != "mode"]
    body = textwrap.fill(", ".join(items), width=96, initial_indent="  options: ", subsequent_indent="           ")
    return body + "\n  (* = default)"


def _fit_line(plan: Plan, budget: Budget) -> str:
    fit = plan.fit(budget)
    head = f"  on {budget.label} ({budget.bytes:,} bytes = {format_bytes(budget.bytes)}, {budget.gpu.basis}): "
    if fit.fits:
        return head + f"fits, headroom {format_bytes(fit.headroom)} ({fit.headroom:,} bytes)"
    return head + f"does NOT fit: {format_bytes(-fit.headroom)} over ({-fit.headroom:,} bytes)"


def cmd_memory(args: argparse.Namespace) -> int:
    from .. import planning
    from . import generic_memory
    from .modules import is_task_model, model_of

    if args.mode == "infer" and generic_memory.wants_generic(args.model) and not is_task_model(args):
        # the generic path's serving estimate (a config planned as a task's module goes to the planner)
        return generic_memory.cmd_memory(args, plan_options(args))
    if getattr(args, "check", False) and not args.gpu:
        raise CliError("--check needs --gpu (the GPU to check the peak against)")
    gpu = budget_of(args)
    plan = planning.plan(model_of(args), args.mode, gpu, **plan_options(args))
    if getattr(args, "seq", None) is not None and not plan.model.sequence:  # as time says it
        raise CliError(f"--seq applies to a network that takes a token sequence; {plan.model.name} takes none "
                       "(a module's input sizes are --set values)")
    terms, values = cli_terms(args), parse_sets(args.set)
    if terms or values:
        plan = plan.with_terms(terms, values)
        plan.terms()  # evaluated (each term checked) before anything is printed: an error, not half a table
    fits = plan.fit(gpu).fits if gpu is not None else True
    warn_plan_context(args, plan)
    if args.json:
        print_json(plan.as_dict(gpu, formulas=args.formula))
        return check_exit(args, fits)
    if quiet(args):  # the essential line: the total, and the verdict with --gpu
        verdict = "" if gpu is None else f";{_fit_line(plan, gpu)[1:]}"
        print(f"{plan.model.name}: {plan.total:,} bytes = {format_bytes(plan.total)} per GPU{verdict}")
        return check_exit(args, fits)
    what = "training" if plan.regime.train else "inference"
    print(f"{plan.model.name}: peak {what} memory per GPU ({plan.regime.gpus} GPU{'s' if plan.regime.gpus > 1 else ''} "
          f"in the job)")
    print(_choices_text(plan))
    _print_terms(plan, args.formula or verbose(args))  # --verbose: the formulas too
    if plan.saved is not None:
        print(f"  activation_bytes = {plan.activation_bytes:,} (saved for backward: activations + inputs + logits, "
              f"{plan.saved.formula.key})")
    if plan.host is not None:
        rows = [("  " + k, f"{v:,}", format_bytes(v)) for k, v in plan.host_terms().items()]
        rows.append(("  host total", f"{plan.host_total:,}", format_bytes(plan.host_total)))
        print("host memory per GPU process (offload):")
        print(table(rows, "<>>"))
    if gpu is not None:
        print(_fit_line(plan, gpu))
        print_budget(gpu)
    _print_prefill(plan)
    for note in plan.notes:
        print(f"  note: {note}")
    return check_exit(args, fits)


def _print_prefill(plan: Plan) -> None:
    """A serving plan of whole prompts says so (a chunked one says it in its notes)."""
    from ..library.inference import prefill_text

    if not plan.regime.train and plan.regime.sequence and not plan.regime.prefill_chunk:
        print(f"  prefill: {prefill_text(None)} (--prefill-chunk TOKENS: chunked prefill, as serving engines run it)")


def _phase_line(plan: Plan) -> str:
    """Which phase sets the peak, by how much it leads, and every phase's bytes."""
    found = plan.phase_bytes()
    if not found:
        return ""
    peak, lead = plan.peak_phase, plan.peak_lead
    ranked = sorted((v, k) for k, v in found.items() if k != peak)
    second = f", {format_bytes(lead)} ({lead:,} bytes) more than {ranked[-1][1]}" if ranked else ""
    each = ", ".join(f"{k} {format_bytes(v)}" for k, v in found.items())
    return f"  peak: the {peak} phase sets it{second}\n  phases: {each}"


def _print_terms(plan: Plan, formulas: bool) -> None:
    from ..text import printing

    terms = plan.terms()
    total = plan.total
    where = plan.layout.where() if plan.layout is not None else {}
    peak = plan.peak_phase
    rows = [("term", "bytes", "size", "share", "alive in") + (("formula", "source") if formulas else ())]
    for term in (plan.layout.components() if plan.layout is not None else plan.formula.terms):
        value = terms[term.key]
        phases = where.get(term.key, ("resident",))
        in_peak = "resident" in phases or peak in phases
        share = f"{100 * value / total:.1f} %" if total and in_peak else ""
        row = (term.key, f"{value:,}", format_bytes(value), share, ", ".join(phases))
        rows.append(row + ((printing.text(term.expr), term.source) if formulas else ()))
    rows.append((f"total (peak: {peak})" if peak else "total", f"{total:,}", format_bytes(total), "", "")
                + (("", "") if formulas else ()))
    print(table(rows, "<>>><<<"))
    line = _phase_line(plan)
    if line:
        print(line)
    if plan.runtime_bytes:
        print(f"  runtime: {format_bytes(plan.runtime_bytes)} of the total is the CUDA runtime's own memory "
              f"({', '.join(k for k in terms if k in planning_runtime_keys())}; --no-runtime leaves it out)")
    if not formulas:
        return
    print(f"formula: {plan.formula}")
    for name, phase in plan.phases.items():
        print(textwrap.fill(f"{name}: {phase}", width=100, initial_indent="  ", subsequent_indent="      "))
    _print_definitions(plan.formula, "  ")
    values = ", ".join(f"{k}={v}" for k, v in plan.values.items())
    print(textwrap.fill(values, width=100, initial_indent="  at ", subsequent_indent="     "))
    for term in plan.formula.terms:
        if term.note:
            print(textwrap.fill(f"{term.key}: {term.note}", width=100, initial_indent="  ", subsequent_indent="    "))
    for term in (plan.layout.components() if plan.layout is not None else ()):
        if term.note and term not in plan.formula.terms:
            print(textwrap.fill(f"{term.key}: {term.note}", width=100, initial_indent="  ", subsequent_indent="    "))


def planning_runtime_keys() -> tuple[str, ...]:
    """The runtime terms' keys (imported lazily, as the planner is)."""
    from ..planning.build import runtime_keys

    return runtime_keys()


def _print_definitions(formula: object, indent: str) -> None:
    for symbol, definition in formula.definitions.items():  # type: ignore[attr-defined]
        print(f"{indent}where {symbol.name} = {definition.text()}   [{definition.key}]")
        _print_definitions(definition, indent + "  ")


def cmd_fit(args: argparse.Namespace) -> int:
    from .. import planning
    from .modules import model_of

    model = model_of(args)  # before the options: a module's --loss is its own
    grown = _grown_sizes(args, model)
    options = plan_options(args)
    if args.question != "gpus" and args.over != "auto":
        raise CliError("--over applies to --for gpus only")
    budget = budget_of(args)
    if grown:
        answer = planning.fit_size(model, budget, grown, args.mode, args.question, **options)
    elif args.question == "batch":
        answer = planning.fit_batch(model, budget, args.mode, **options)
    elif args.question == "seq":
        answer = planning.fit_seq(model, budget, args.mode, **options)
    else:
        answer = planning.fit_gpus(model, budget, args.mode, args.over, **options)
    fits = answer.plan is not None and answer.status == "ok"
    if args.question != "seq":  # a solved context says so in the answer itself
        shape = planning.load(model)  # the answer may have no plan: nothing fits
        seq = options.get("seq") or planning.regime.default_seq(shape)
        warn_context(args, shape.config, shape.name, int(seq), shape.positions)  # type: ignore[call-overload]
    if args.json:
        print_json(answer.as_dict())
        return check_exit(args, fits)
    limit = answer.limit
    print(f"{answer.plan.model.name if answer.plan else single_line(args.model)} on {limit.label} "
          f"({limit.bytes:,} bytes = {format_bytes(limit.bytes)}): {answer.message}")
    if not quiet(args):
        print_budget(limit)
    if answer.plan is not None and not quiet(args):  # --quiet: the answer line only
        print(_choices_text(answer.plan))
        _print_terms(answer.plan, False)
        _print_prefill(answer.plan)
        for note in answer.plan.notes:
            print(f"  note: {note}")
    return check_exit(args, fits)


def _grown_sizes(args: argparse.Namespace, model: object) -> tuple[str, ...]:
    """The input sizes ``fit --for seq|image-size`` grows (a torch module's; none: a transformer's context)."""
    names = tuple(n.strip() for n in args.vary.split(",")) if args.vary else ()
    if args.question in ("batch", "gpus"):
        if names:
            raise CliError("--vary applies to --for seq or --for image-size")
        return ()
    sizes = tuple(getattr(model, "input_sizes", ()))
    if args.question == "seq" and not names and not sizes and not getattr(model, "forward_inference", False):
        return ()  # a token sequence's context: the planner's own question
    if names:
        return names
    default = ("H", "W") if args.question == "image-size" else ("S",) if "S" in sizes else sizes[:1] * (len(sizes) == 1)
    if not default or any(n not in sizes for n in default):
        name = getattr(model, "name", model)
        raise CliError(f"--for {args.question}: {single_line(str(name))} has input sizes {', '.join(sizes) or 'none'}; "
                       "name the ones to grow with --vary NAME[,NAME]" if sizes else
                       f"--for {args.question}: {single_line(str(name))} has no input sizes to grow (ask --for batch "
                       "or --for gpus)")
    return default


def cmd_gpus(args: argparse.Namespace) -> int:
    from .. import catalogs

    gpus = list(catalogs.GPUS.values())
    if args.json:
        print_json([g.as_dict() for g in gpus])
        return 0
    def rate(value: float | None, scale: float, digits: int) -> str:
        return f"{value / scale:,.{digits}f}" if value else ""

    rows = [("name", "bytes", "GiB", "GB", "vendor says", "basis", "CUDA GiB", "sm", "bf16 TFLOP/s", "HBM TB/s")]
    rows += [(g.name, f"{g.bytes:,}", f"{g.gib:.2f}", f"{g.gb:.2f}", g.vendor_label, g.basis,
              "" if g.cuda_bytes is None else f"{g.cuda_bytes / 2**30:.2f}", g.capability or "",
              rate(g.flops.get("bf16"), 1e12, 1), rate(g.hbm_bandwidth, 1e12, 2)) for g in gpus]
    print(table(rows, "<>>><<>>>>"))
    print("bytes: nvidia-smi memory.total (MiB × 2²⁰) or rocm-smi VRAM total as quoted in each source; 'vendor' where "
          "no device report was found. CUDA GiB: CUDA's own total (cudaMemGetInfo), what vLLM, SGLang and llama.cpp "
          "read, the median of published readings (blank: none found, the engines use 'bytes' and say so); training "
          "plans use 'bytes'. The CUDA context takes a few hundred MiB more. sm: the compute capability, from NVIDIA's CUDA "
          "GPUs table (https://developer.nvidia.com/cuda-gpus; blank: not a CUDA GPU), which decides the attention "
          "kernels a torch module's planned step runs. Rates: peak dense bf16 and memory "
          "bandwidth from each datasheet or architecture whitepaper "
          "(blank where the catalogue has none; 'symbolic time' uses them). 'symbolic gpus --json' gives each source and the other dtypes.")
    return 0
