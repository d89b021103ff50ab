"""Subcommands on real models: ``params`` (exact count of a preset or config.json) and ``models``."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .. import formats
from ..core.errors import single_line
from ..core.units import format_bytes, format_count, short_count
from .common import CliError, print_json, table

if TYPE_CHECKING:
    from ..math.formula import Formula
    from ..networks.shape import ModelShape
    from ..networks.transformer import ModelSpec


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this module's subcommands."""
    p = sub.add_parser("params", help="exact parameter count of a preset or a Hugging Face config.json")
    p.add_argument("model", metavar="MODEL_OR_CONFIG", help="preset name (see 'symbolic models'), path to config.json, "
                   "a GGUF file (its header), or mlp / mlp-nobias (article A's network)")
    p.add_argument("--formula", action="store_true", help="also print the formula, symbolic and with the numbers")
    p.add_argument("--weights", metavar="FORMAT", choices=formats.names("weights"),
                   help="also say the weights' bytes as stored in FORMAT, every tensor, by stored type (default: the "
                        "config's quantization_config, if it has one); one of " + ", ".join(formats.names("weights")))
    p.add_argument("--json", action="store_true", help="machine-readable output")
    from .modules import add_lora_options, add_module_options

    add_module_options(p, sets=True)
    add_lora_options(p)
    p.set_defaults(handler=cmd_params)

    p = sub.add_parser("models", help="list the preset models with their sources, and the model types covered")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_models)


def _values(spec: ModelSpec) -> dict[str, int]:
    values = spec.values()
    if spec.is_moe and spec.active_defined:
        values.update(spec.values(active=True))
    return values


def _active(spec: ModelSpec) -> bool:
    """Whether ``params`` shows an active count: a mixture of experts whose top-k the config gives."""
    return spec.is_moe and spec.active_defined


def params_data(spec: ModelSpec) -> dict[str, object]:
    """Everything ``params`` prints, as plain data."""
    from ..networks import transformer as arch

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
    kinds = [{"kind": key, "layers": number, "per_layer": sum(int(v) for _, v in
                                                           arch.formulas.kind_formula(spec, key).evaluate(
                                                               arch.formulas.kind_formula(spec, key).example).terms)}
             for key, _, _, number, _ in arch.formulas.kinds(spec)]
    data["layer_kinds"] = {"params": kinds, "counts": spec.layer_kinds()}
    if spec.sliding_layers:
        data["layer_kinds"]["window"] = spec.window
    if spec.is_moe and not spec.active_defined:
        from ..networks.transformer.spec import ACTIVE_UNDEFINED

        data["active"] = None
        data["active_note"] = ACTIVE_UNDEFINED
    elif spec.is_moe:
        fa = spec.active_params_formula()
        data["active"] = spec.active_param_count()
        data["active_without_embedding"] = data["active"] - data["components"]["embedding"]
        data["active_components"] = {c.key: c.total for c in arch.breakdown(spec, active=True)}
        data["active_formula"] = str(fa)
        data["active_with_numbers"] = f"{fa.name} = {arch.with_numbers(fa, spec.values(active=True))}"
    return data


def article_a_data(name: str) -> dict[str, object]:
    """What ``params`` prints for article A's network (``mlp``, ``mlp-nobias``): the planner's model of it."""
    from ..networks.shape import article_a_shape
    from ..networks.transformer import with_numbers

    shape = article_a_shape(name)  # what 'symbolic memory mlp' plans
    f = shape.params
    values = {s.name: shape.numbers[s.name] for s in f.inputs}
    ev = f.evaluate(values)
    return {
        "model": name, "model_type": shape.model_type, "architecture": ARTICLE_A_ARCHITECTURE, "source": shape.source,
        "total": int(ev.total), "components": {t.key: int(v) for t, v in ev.terms}, "per_layer": {},
        "layers": len(shape.matrices), "values": values, "formula": str(f), "latex": f.latex(equation=True),
        "with_numbers": f"{f.name} = {with_numbers(f, values)}",
    }


ARTICLE_A_ARCHITECTURE = "article A's network (nn.Linear layers gat, up, down, out)"


def print_article_a(name: str, json_out: bool, formula: bool) -> int:
    """``params mlp``: article A's network, its parameter formula and count, in the table path's shape."""
    from ..networks.shape import article_a_shape
    from ..text import printing

    data = article_a_data(name)
    if json_out:
        print_json(data)
        return 0
    f = article_a_shape(name).params
    total = int(data["total"])  # type: ignore[call-overload]
    print(f"{name}: {data['architecture']}, {format_count(total)} parameters ({short_count(total)})")
    components: dict[str, int] = data["components"]  # type: ignore[assignment]
    rows = [["component", "formula", "parameters"]]
    rows += [[t.key, printing.text(t.expr), format_count(components[t.key])] for t in f.terms]
    rows.append(["total", "", format_count(total)])
    print(table(rows, "<<>"))
    values: dict[str, int] = data["values"]  # type: ignore[assignment]
    print("  at " + ", ".join(f"{k}={v}" for k, v in values.items()))
    for note in filter(None, [f.note] + [f"{t.key}: {t.note}" for t in f.terms if t.note]):
        print(f"  note: {note}")
    if formula:
        print()
        _print_formula(f, values, total)
    return 0


def cmd_params(args: argparse.Namespace) -> int:
    from ..networks import transformer as arch
    from ..networks.shape import ARTICLE_A_MODELS, ModelShape
    from . import generic_params, modules

    model = modules.model_of(args)
    if args.set:  # what model_of left: no input size of the model (params has no --term symbols)
        raise CliError(f"--set {args.set[0]}: not an input size of {single_line(args.model)}")
    if hasattr(model, "params_table"):  # a probed torch module: its parameter groups
        return modules.print_params(model, args.json, modules.lora_of(args))
    if args.lora_rank or args.lora_targets:
        raise CliError("--lora-rank and --lora-targets: params counts LoRA adapters of a torch module (PATH.py:NAME, "
                       "torchvision:, timm:, diffusers:, a transformers task); for a table family use symbolic memory")
    if isinstance(model, ModelShape):  # article A's network at other widths (--arg d_in=512)
        return modules.print_widths(model, args.json)
    if args.model in ARTICLE_A_MODELS:  # article A's network, as 'symbolic memory mlp' resolves it
        return print_article_a(args.model, args.json, args.formula)
    name, config = arch.resolve_config(args.model)
    if not generic_params.is_table_family(config):  # any other transformers type: the generic torch path
        stored = _stored(lambda: generic_params.generic_network(name, config), args.weights, config)
        return generic_params.print_params(generic_params.load_generic(name, config), args.json, args.formula, stored)
    spec = arch.load(args.model)
    data = params_data(spec)
    stored = _file_weights(args.model) if args.weights is None else {}
    if not stored:
        stored = _stored(lambda: ModelShape.from_spec(spec, config), args.weights, config)
    if args.json:
        print_json({**data, **stored})
        return 0
    total = spec.param_count()
    head = f"{spec.name}: {spec.architecture} ({spec.model_type}), {format_count(total)} parameters ({short_count(total)})"
    if _active(spec):
        active = spec.active_param_count()
        head += f"; {format_count(active)} active per token ({short_count(active)})"
    elif spec.is_moe:
        head += "; active per token undefined (num_experts_per_tok is not set)"
    print(head)
    _print_file_weights(stored)
    if "active_note" in data:
        print(f"  note: {data['active_note']}")
    if _active(spec) and arch.families.card_counts_active_without_embedding(spec.model_type):
        without = data["active_without_embedding"]
        print(f"  active {format_count(active)} counts the embedding and the LM head; without the input embedding, "
              f"as the {spec.model_type} model card counts: {format_count(without)} ({short_count(without)})")
    counts = spec.layer_kinds()
    if len(counts) > 2:
        window = f" (window W = {spec.window})" if spec.sliding_layers else ""
        print("  layer kinds: " + ", ".join(f"{n} {k}" for k, n in counts.items()) + window)
    print(_table(spec))
    print("  at " + ", ".join(f"{k}={v}" for k, v in _values(spec).items()))
    f = spec.params_formula()
    notes = [f.note] + [f"{t.key}: {t.note}" for t in f.terms if t.note]
    for note in filter(None, notes):
        print(f"  note: {note}")
    if stored and "tensors" not in stored:
        print(generic_params.stored_line(stored))
    if args.formula:
        print()
        _print_formula(spec.params_formula(), spec.values(), total)
        if _active(spec):
            _print_formula(spec.active_params_formula(), spec.values(active=True), spec.active_param_count())
    return 0


def _stored(network: Callable[[], ModelShape], weights: str | None, config: Mapping[str, Any]) -> dict[str, object]:
    """``weight_format``, ``weight_format_from``, ``weight_bytes`` and ``weight_bytes_by_type`` ({} without a format)."""
    from ..networks import quantization, stored

    if weights is None and "quantization_config" not in config:
        return {}  # no format asked for, none shipped: the count alone (the network is not built)
    net = network()
    fmt = weights or quantization.shipped_format(net)
    if fmt is None:
        return {}
    by_type = stored.stored_weights(net, fmt)
    return {"weight_format": fmt, "weight_format_from": "--weights" if weights else "quantization_config",
            "weight_bytes": sum(by_type.values()), "weight_bytes_by_type": by_type}


def _file_weights(model: str) -> dict[str, object]:
    """A GGUF file's weights as stored (``weight_bytes``, ``weight_bytes_by_type``) and its notes; {} for a config."""
    from ..networks import gguf
    from ..networks.gguf_config import is_gguf

    if not is_gguf(model):
        return {}
    network = gguf.load_network(model)
    return {**gguf.weight_summary(network), "tensors": len(network.stored_tensors), "notes": list(network.notes)}


def _print_file_weights(stored: dict[str, object]) -> None:
    if "tensors" not in stored:
        return
    by_type: dict[str, int] = stored["weight_bytes_by_type"]  # type: ignore[assignment]
    parts = ", ".join(f"{t} {format_bytes(n)}" for t, n in by_type.items())
    print(f"  stored as {stored['weight_format']}: {format_bytes(int(stored['weight_bytes']))} in "  # type: ignore[call-overload]
          f"{stored['tensors']:,} tensors ({parts})")
    for note in stored["notes"]:  # type: ignore[attr-defined]
        print(f"  note: {note}")


def _table(spec: ModelSpec) -> str:
    from ..networks import transformer as arch
    from ..text import printing

    parts = arch.breakdown(spec)
    active = {c.key: c.total for c in arch.breakdown(spec, active=True)} if _active(spec) else {}
    mixed = arch.formulas.mixed(spec)
    header = ["component", "formula", "per layer"] + (["layers"] if mixed else []) + ["parameters"]
    rows = [header + (["active"] if active else [])]
    for c in parts:
        per_layer = format_count(c.per_layer) if c.per_layer is not None else ""
        layers = [str(c.layers) if c.per_layer is not None else ""] if mixed else []
        row = [c.key, printing.text(c.expr), per_layer, *layers, format_count(c.total)]
        rows.append(row + ([format_count(active[c.key])] if active else []))
    if mixed:
        total_row = ["total", "sum over the layer kinds", "", ""]
    else:
        layer_total = sum(c.per_layer for c in parts if c.per_layer is not None)
        total_row = ["total", f"× L = {spec.layers} layers", format_count(layer_total)]
    total_row.append(format_count(spec.param_count()))
    rows.append(total_row + ([format_count(spec.active_param_count())] if active else []))
    return table(rows, "<<>" + (">" if mixed else "") + ">>")


def _print_formula(f: Formula, values: dict[str, int], total: int) -> None:
    from ..networks.transformer import with_numbers

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


def family_rows(presets: list[dict[str, object]]) -> list[dict[str, object]]:
    """One row per model type the table covers: its classes, its presets and how it is covered."""
    from ..networks.transformer.families import FAMILIES

    rows = []
    for model_type, family in FAMILIES.items():
        rows.append({"model_type": model_type, "coverage": "table", "default_class": family.default_class,
                     "classes": [family.prefix + suffix for suffix in family.heads],
                     "presets": [str(r["name"]) for r in presets if r["model_type"] == model_type]})
    from .generic_params import generic_rows

    return rows + generic_rows(set(FAMILIES))


def cmd_models(args: argparse.Namespace) -> int:
    from ..networks import transformer as arch

    rows = []
    for name in arch.preset_names():
        spec = arch.load(name)
        rows.append({"name": name, "model_type": spec.model_type, "architecture": spec.architecture,
                     "total": spec.param_count(), "active": spec.active_param_count() if _active(spec) else None,
                     "source": spec.source})
    families = family_rows(rows)
    if args.json:
        print_json({"presets": rows, "families": families})
        return 0
    lines = [["preset", "model_type", "parameters", "active", "source"]]
    for r in rows:
        active = format_count(r["active"]) if r["active"] is not None else ""
        lines.append([r["name"], r["model_type"], format_count(r["total"]), active, short_source(r["source"])])
    print(table(lines, "<<>><"))
    print()
    lines = [["model_type", "coverage", "class", "presets"]]
    for f in families:
        lines.append([f["model_type"], f["coverage"], f["default_class"], ", ".join(f["presets"])])
    print(table(lines, "<<<<"))
    print(f"\n{len(rows)} presets and {len(families)} model types; 'symbolic params NAME' shows a preset, or give "
          "the path of any config.json of a listed model_type (coverage 'table': exact counts from the family "
          "table, no torch needed; 'generic': counted from the real module tree, needs the torch extra)")
    return 0
