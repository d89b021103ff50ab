"""``symbolic params`` for model types outside the family tables: the generic torch path (issue 12).

``table_or_generic(ref)`` resolves a model reference once (``architectures.resolve_config``) and
says which path counts it: a table family (``ModelSpec``) or, with the ``torch`` extra, the real
module tree (``networks.generic``). Without torch an unknown type gets one line listing the
supported types and naming the extra; a "did you mean" only names a family with the same layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.units import format_bytes, format_count

# which path counts a config, and the one-line refusal without torch, live with the generic network
from ..networks.generic.network import (  # noqa: F401
    generic_network,
    is_table_family,
    load_generic,
    same_layout,
    unsupported_message,
)
from .common import print_json, table


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


def stored_line(data: Mapping[str, Any]) -> str:
    """'  weights as stored in mxfp4 (the config's quantization_config): 12.82 GiB (...): mxfp4 9.46 GiB, bf16 ...'."""
    where = "--weights" if data["weight_format_from"] == "--weights" else "the config's quantization_config"
    parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in data["weight_bytes_by_type"].items())
    return (f"  weights as stored in {data['weight_format']} ({where}): {format_bytes(data['weight_bytes'])} "
            f"({data['weight_bytes']:,} bytes): {parts}")


def print_params(m: Any, json_out: bool, formula: bool, stored: dict[str, object] | None = None) -> int:
    """Print ``params`` for a GenericModel (``stored``: its weights as stored in a format, from ``models._stored``)."""
    from ..core.units import short_count
    from ..networks.transformer import with_numbers
    from ..text import printing

    data = {**params_data(m), **(stored or {})}
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
    if stored:
        print(stored_line(stored))
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
