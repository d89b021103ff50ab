"""Coverage of the generic torch path over transformers' causal-LM types (``benchmarks/generic_coverage.py``).

Each row says, for one type at its default config, whether transformers builds it on the meta
device, whether the generic total and its formula give the plain build's count, whether every
term is written in fields, and whether the formula held at an independent point.
"""

from __future__ import annotations

from ...core import collector
from .. import torch_env
from .probes import GenericError, _first_line, _quiet, default_model


def survey_type(model_type: str) -> dict[str, object]:
    """One type at its default config: built?, exact total?, formula in fields?, verified at a second point?"""
    row: dict[str, object] = {"model_type": model_type, "built": False, "exact": False, "in_fields": False,
                              "verified": False}
    try:
        real = plain_count(model_type)
    except Exception as err:
        row["error"] = _first_line(err)
        return row
    row["built"] = True
    try:
        m = default_model(model_type)  # cached: a caller may want the same analysis again
    except GenericError as err:
        row["error"] = str(err)
        return row
    total = m.params_formula().evaluate(m.formula_values()).total
    row.update(exact=m.total == real and total == real, in_fields=m.in_fields, verified=m.verified, total=real)
    return row


def plain_count(model_type: str) -> int:
    """Parameters of the type's default config built the plain way on the meta device (raises if it cannot)."""
    torch_env.ready()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with _quiet(), collector.when_opted_in(collector.paused), torch.device("meta"):  # the reference count, built the plain way
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type))
    return sum(p.numel() for p in model.parameters())


def coverage(rows: list[dict[str, object]]) -> dict[str, object]:
    """Counts and percentages over the types that transformers could build."""
    built = [r for r in rows if r["built"]]
    n = len(built)

    def pct(key: str) -> float:
        return round(100 * sum(bool(r.get(key)) for r in built) / n, 1) if n else 0.0

    out: dict[str, object] = {"types": len(rows), "built": n}
    for key in ("exact", "in_fields", "verified", "cache_built", "cache_verified"):
        if any(key in r for r in built):
            out[key] = sum(bool(r.get(key)) for r in built)
            out[f"{key}_pct"] = pct(key)
    return out


def coverage_text(rows: list[dict[str, object]]) -> str:
    """One line of the coverage numbers."""
    c = coverage(rows)
    if "cache_verified" in c:
        other = [r for r in rows if not r.get("table")]
        o = coverage(other)
        return (f"{c['built']} of {c['types']} causal-LM types build, {c.get('cache_built', 0)} run a prefill; "
                f"cache formula confirmed for {c['cache_verified']} ({c['cache_verified_pct']} % of those built); "
                f"of the {o['built']} buildable types without a family table {o.get('cache_built', 0)} run, "
                f"{o.get('cache_verified', 0)} confirmed ({o.get('cache_verified_pct', 0.0)} %)")
    parts = [f"{c['built']} of {c['types']} causal-LM types build on the meta device"]
    for key in ("exact", "in_fields", "verified", "cache_built", "cache_verified"):
        if key in c:
            parts.append(f"{key}: {c[key]} ({c[f'{key}_pct']} %)")
    return "; ".join(parts)
