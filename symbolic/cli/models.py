"""Subcommands on real models: ``params`` (exact count of a preset or config.json) and ``models``."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from ..units import format_count
from .common import print_json, table

if TYPE_CHECKING:
    from ..architectures import ModelSpec
    from ..formula import Formula


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this module's subcommands."""
    p = sub.add_parser("params", help="exact parameter count of a preset or a Hugging Face config.json")
    p.add_argument("model", metavar="MODEL_OR_CONFIG", help="preset name (see 'symbolic models') or path to config.json")
    p.add_argument("--formula", action="store_true", help="also print the formula, symbolic and with the numbers")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_params)

    p = sub.add_parser("models", help="list the preset models and their sources")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_models)


def short_count(value: int) -> str:
    """'8.03 B', '124.44 M' or the plain number."""
    for label, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if value >= size:
            return f"{value / size:.2f} {label}"
    return str(value)


def _values(spec: ModelSpec) -> dict[str, int]:
    values = spec.values()
    if spec.is_moe:
        values.update(spec.values(active=True))
    return values


def params_data(spec: ModelSpec) -> dict[str, object]:
    """Everything ``params`` prints, as plain data."""
    from .. import architectures as arch

    f = spec.params_formula()
    parts = arch.breakdown(spec)
    data: dict[str, object] = {
        "model": spec.name, "model_type": spec.model_type, "architecture": spec.architecture,
        "source": spec.source, "total": spec.param_count(),
        "components": {c.key: c.total for c in parts},
        "per_layer": {c.key: c.per_layer for c in parts if c.per_layer is not None},
        "layers": spec.layers, "values": _values(spec),
        "formula": str(f), "latex": f.latex(equation=True),
        "with_numbers": f"{f.name} = {arch.with_numbers(f, spec.values())}",
    }
    if spec.is_moe:
        fa = spec.active_params_formula()
        data["active"] = spec.active_param_count()
        data["active_components"] = {c.key: c.total for c in arch.breakdown(spec, active=True)}
        data["active_formula"] = str(fa)
        data["active_with_numbers"] = f"{fa.name} = {arch.with_numbers(fa, spec.values(active=True))}"
    return data


def cmd_params(args: argparse.Namespace) -> int:
    from .. import architectures as arch

    spec = arch.load(args.model)
    data = params_data(spec)
    if args.json:
        print_json(data)
        return 0
    total = spec.param_count()
    head = f"{spec.name}: {spec.architecture} ({spec.model_type}), {format_count(total)} parameters ({short_count(total)})"
    if spec.is_moe:
        active = spec.active_param_count()
        head += f"; {format_count(active)} active per token ({short_count(active)})"
    print(head)
    print(_table(spec))
    print("  at " + ", ".join(f"{k}={v}" for k, v in _values(spec).items()))
    f = spec.params_formula()
    notes = [f.note] + [f"{t.key}: {t.note}" for t in f.terms if t.note]
    for note in filter(None, notes):
        print(f"  note: {note}")
    if args.formula:
        print()
        _print_formula(spec.params_formula(), spec.values(), total)
        if spec.is_moe:
            _print_formula(spec.active_params_formula(), spec.values(active=True), spec.active_param_count())
    return 0


def _table(spec: ModelSpec) -> str:
    from .. import architectures as arch
    from .. import printing

    parts = arch.breakdown(spec)
    active = {c.key: c.total for c in arch.breakdown(spec, active=True)} if spec.is_moe else {}
    header = ["component", "formula", "per layer", "parameters"] + (["active"] if active else [])
    rows = [header]
    for c in parts:
        per_layer = format_count(c.per_layer) if c.per_layer is not None else ""
        row = [c.key, printing.text(c.expr), per_layer, format_count(c.total)]
        rows.append(row + ([format_count(active[c.key])] if active else []))
    layer_total = sum(c.per_layer for c in parts if c.per_layer is not None)
    total_row = ["total", f"× L = {spec.layers} layers", format_count(layer_total), format_count(spec.param_count())]
    rows.append(total_row + ([format_count(spec.active_param_count())] if active else []))
    return table(rows, "<<>>>")


def _print_formula(f: Formula, values: dict[str, int], total: int) -> None:
    from ..architectures import with_numbers

    print(f"{f}")
    print("  at " + ", ".join(f"{k}={v}" for k, v in values.items()) + ":")
    print(f"{f.name} = {with_numbers(f, values)}")
    print(f"{' ' * len(f.name)} = {format_count(total)}")


_HUB = re.compile(r"hub: ([\w.\-]+/[\w.\-]+)")


def short_source(source: str) -> str:
    """'meta-llama/Meta-Llama-3-8B (reconstructed)' from a preset's _source text."""
    match = _HUB.search(source)
    repo = match.group(1) if match else source[:40]
    lower = source.lower()
    kind = "reconstructed" if "reconstructed" in lower else "verbatim" if "verbatim" in lower else ""
    return f"{repo} ({kind})" if kind else repo


def cmd_models(args: argparse.Namespace) -> int:
    from .. import architectures as arch

    rows = []
    for name in arch.preset_names():
        spec = arch.load(name)
        rows.append({"name": name, "model_type": spec.model_type, "architecture": spec.architecture,
                     "total": spec.param_count(), "active": spec.active_param_count() if spec.is_moe else None,
                     "source": spec.source})
    if args.json:
        print_json(rows)
        return 0
    lines = [["preset", "model_type", "parameters", "active", "source"]]
    for r in rows:
        active = format_count(r["active"]) if r["active"] is not None else ""
        lines.append([r["name"], r["model_type"], format_count(r["total"]), active, short_source(r["source"])])
    print(table(lines, "<<>><"))
    print(f"\n{len(rows)} presets; 'symbolic params NAME' shows one, or give the path of any config.json "
          f"of a supported model_type ({', '.join(arch.SUPPORTED)})")
    return 0
