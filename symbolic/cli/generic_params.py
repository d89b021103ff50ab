"""``symbolic params`` for model types outside the family tables: the generic torch path (issue 12).

``table_or_generic(ref)`` resolves a model reference once (``architectures.resolve_config``) and
says which path counts it: a table family (``ModelSpec``) or, with the ``torch`` extra, the real
module tree (``architectures.generic``). Without torch an unknown type gets one line listing the
supported types and naming the extra; a "did you mean" only names a family with the same layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.errors import UnknownNameError
from ..core.units import format_count
from .common import print_json, table

# Integer fields that size nothing in a decoder's parameters (positions are rotary in most families).
_NOT_SIZES = {"max_position_embeddings", "sliding_window", "max_window_layers", "num_experts_per_tok",
              "original_max_position_embeddings", "rope_theta"}


def is_table_family(config: Mapping[str, Any]) -> bool:
    """Whether the config's model_type has a family table (counted without torch)."""
    from ..networks.transformer.families import FAMILIES

    model_type = config.get("model_type")
    return isinstance(model_type, str) and model_type in FAMILIES  # a list or dict is the config reader's error


def same_layout(config: Mapping[str, Any]) -> str | None:
    """A table family that reads every size field this config has (the only kind worth suggesting)."""
    from ..networks.generic.probes import int_fields
    from ..networks.transformer.families import FAMILIES

    present = {p[0] for p in int_fields(config) if len(p) == 1} - _NOT_SIZES
    if not present:
        return None
    best: tuple[int, str] | None = None
    for model_type, family in FAMILIES.items():
        keys = {k for size in family.sizes.values() for k in size.keys}
        if present <= keys:
            score = len(keys & present)
            if best is None or score > best[0]:
                best = (score, model_type)
    return best[1] if best else None


def unsupported_message(config: Mapping[str, Any]) -> str:
    """One line for a model type without a table when torch is missing."""
    from ..networks.generic.probes import EXTRA, INSTALL_EXTRA, known_types
    from ..networks.transformer.families import FAMILIES

    model_type = config.get("model_type")
    if model_type in known_types():  # a type transformers builds: what it needs, not a table it might be
        return (f"model_type {model_type!r} is a transformers model type without a family table (tables: "
                f"{', '.join(FAMILIES)}): counting it needs the '{EXTRA}' extra ({INSTALL_EXTRA}), which builds it "
                "on the meta device")
    like = same_layout(config)
    hint = f" (its size fields are those of {like!r}: set model_type to {like!r} if it is that layout)" if like else ""
    return (f"model_type {model_type!r} has no family table{hint}; tables: {', '.join(FAMILIES)}; "
            f"any other transformers model type needs the '{EXTRA}' extra ({INSTALL_EXTRA})")


def load_generic(name: str, config: Mapping[str, Any]) -> Any:
    """The GenericModel of a resolved config, or a one-line error without torch."""
    from ..networks.generic import probes as generic

    if not generic.torch_available():
        raise UnknownNameError(unsupported_message(config))
    archs = config.get("architectures")
    architecture = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    return generic.analyse(config, name=name, architecture=architecture)


def params_data(m: Any) -> dict[str, object]:
    """What ``params --json`` prints for a GenericModel (the same keys as the table path's where they apply)."""
    from ..networks.transformer import with_numbers

    f = m.params_formula()
    values = m.formula_values()
    data: dict[str, object] = {
        "model": m.name, "model_type": m.model_type, "architecture": m.architecture, "source": "",
        "coverage": "generic", "total": m.total,
        "components": {t.key: int(v) for t, v in f.evaluate(values).terms},
        "per_layer": {}, "layers": values.get("L"), "values": dict(m.values), "fields": dict(m.fields),
        "formula": str(f), "latex": f.latex(equation=True),
        "with_numbers": f"{f.name} = {with_numbers(f, values)}",
        "in_fields": m.in_fields, "verified": m.verified, "measured_terms": list(m.unexplained),
    }
    if m.is_moe:
        fa = m.params_formula(active=True)
        data["active"] = m.active
        data["active_formula"] = str(fa)
        data["active_with_numbers"] = f"{fa.name} = {with_numbers(fa, m.formula_values(active=True))}"
    return data


def print_params(m: Any, json_out: bool, formula: bool) -> int:
    """Print ``params`` for a GenericModel."""
    from ..core.units import short_count
    from ..networks.transformer import with_numbers
    from ..text import printing

    data = params_data(m)
    if json_out:
        print_json(data)
        return 0
    head = (f"{m.name}: {m.architecture} ({m.model_type}, generic torch path), {format_count(m.total)} parameters "
            f"({short_count(m.total)})")
    if m.is_moe:
        head += f"; {format_count(m.active)} active per token ({short_count(m.active)})"
    print(head)
    f = m.params_formula()
    values = m.formula_values()
    rows = [["tensor", "formula", "parameters"]]
    for t, v in f.evaluate(values).terms:
        rows.append([t.key, printing.text(t.expr), format_count(int(v))])
    rows.append(["total", "", format_count(m.total)])
    print(table(rows, "<<>"))
    if values:
        print("  at " + ", ".join(f"{k}={v}" for k, v in values.items()))
    named = {k: v for k, v in m.fields.items() if k != v}
    if named:
        print("  fields: " + ", ".join(f"{k} = {v}" for k, v in named.items()))
    status = ("formula checked against a real build at an independent point" if m.verified else
              "formula exact at these values; " + (f"{len(m.unexplained)} tensor size(s) not expressed in the "
                                                  "config's fields (their measured number is shown)"
                                                  if m.unexplained else "not checked at a second point"))
    print(f"  note: {status}")
    if formula:
        print()
        print(f)
        print(f"{f.name} = {with_numbers(f, values)}")
        print(f"{' ' * len(f.name)} = {format_count(m.total)}")
    return 0


def generic_rows(tables: set[str]) -> list[dict[str, object]]:
    """``symbolic models`` rows for the causal-LM types without a table (only with torch installed)."""
    from ..networks.generic import probes as generic

    if not generic.torch_available():
        return []
    return [{"model_type": t, "coverage": "generic", "default_class": cls, "classes": [cls], "presets": []}
            for t, cls in generic.causal_lm_classes().items() if t not in tables]
