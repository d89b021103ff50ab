"""The generic torch path run in a child process (``test_generic_torch.py``: torch stays out of the test process).

Reads ``{"params": {name: config}, "cache": {name: config}, "presets": [name, ...], "forward": [type, ...]}`` on
stdin and writes, per name, what ``symbolic.architectures.generic`` found (total, the formula's
value at its values, active counts, status, the formula's expanded text) and, per cache name, the
measured cache formula; per forward type, a plain forward's argument and output names. Exits with ``SKIP`` when torch or transformers cannot be imported.
"""

from __future__ import annotations

import json
import sys

SKIP = 77


def params(name: str, config: dict) -> dict:
    import sympy

    from symbolic.architectures import generic

    archs = config.get("architectures")
    m = generic.analyse(config, name=name, architecture=archs[0] if archs else None)
    f = m.params_formula()
    out = {"total": m.total, "formula_total": int(f.evaluate(m.formula_values()).total), "verified": m.verified,
           "in_fields": m.in_fields, "unexplained": list(m.unexplained), "values": m.values, "fields": m.fields,
           "expanded": str(sympy.expand(f.expr)), "active": m.active}
    if m.is_moe:
        out["active_formula_total"] = int(m.params_formula(active=True).evaluate(m.formula_values(active=True)).total)
    return out


def cache(config: dict) -> dict:
    from symbolic.architectures import generic_cache

    c = generic_cache.cache_formula(config)
    return {"per_token": int(c.per_token), "per_sequence": int(c.per_sequence), "verified": c.verified,
            "windowed": int(c.windowed), "cap": c.cap,
            "class": c.cache_class, "measured": c.measured, "at_4x100": c.bytes_at(4, 100), "note": c.note}


def plain_forward(model_type: str) -> dict:
    """What transformers itself does for the type, apart from the generic path: its forward's arguments and outputs."""
    import inspect

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type))
        out = model(input_ids=torch.zeros((2, 8), dtype=torch.long), use_cache=True)
    return {"arguments": sorted(inspect.signature(model.forward).parameters), "outputs": sorted(out.keys())}


def main() -> int:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as err:
        print(f"torch or transformers not importable: {err}", file=sys.stderr)
        return SKIP
    request = json.load(sys.stdin)
    out: dict[str, dict] = {"params": {}, "cache": {}, "presets": {}}
    for name, config in request.get("params", {}).items():
        try:
            out["params"][name] = params(name, config)
        except Exception as err:  # reported by the test that asked
            out["params"][name] = {"error": f"{type(err).__name__}: {err}"}
    for name, config in request.get("cache", {}).items():
        try:
            out["cache"][name] = cache(config)
        except Exception as err:
            out["cache"][name] = {"error": f"{type(err).__name__}: {err}"}
    out["forward"] = {t: plain_forward(t) for t in request.get("forward", [])}
    from symbolic import architectures

    for name in request.get("presets", []):
        _, config = architectures.resolve_config(name)
        out["presets"][name] = params(name, config)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
