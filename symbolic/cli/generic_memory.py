"""``symbolic memory --mode infer`` for model types without a family table (the generic torch path).

(Training, ``fit``, ``time``, ``plan`` and reports of such a model go through the planner, which takes its
``networks.generic.network.GenericNetwork``; this serving estimate, checked against ``--gpu``, is kept as it was.)

Serving memory of one GPU holding the whole model: the weights (the generic parameter count
times bytes per weight) and the serving cache measured on the meta device
(``networks.generic.cache``: bytes = B·(c_0 + c_S·S + c_W·min(S, K)) after a prefill,
bfloat16, scaled to the ``--kv-dtype`` element size). Tensor parallelism, quantised weights and the prefill working set
need the table families' layer structure; other options are refused with one line.
"""

from __future__ import annotations

import argparse
from typing import Any

from .. import formats
from ..core.errors import UserError
from ..core.symbols import B, S
from ..core.units import format_bytes
from ..text import printing
from .common import print_json, table

# weights: the unquantised formats (group-wise scales need the table families' layer structure)
WEIGHT_FORMATS = tuple(w for w in formats.names("weights") if not formats.get(w).quantised)
DEFAULT_SEQ = 4096
SUPPORTED_OPTIONS = ("batch", "seq", "weights", "kv_dtype")


def wants_generic(model: str) -> bool:
    """Whether ``model`` resolves to a config whose type has no family table (False: the planner says why not)."""
    from ..networks import transformer as architectures
    from .generic_params import is_table_family

    try:
        _, config = architectures.resolve_config(model)
    except UserError:  # not a config (article A's network, a typo): the planner's own answer or error
        return False
    return not is_table_family(config)


def infer_data(model: str, options: dict[str, object]) -> dict[str, Any]:
    """Plain data of the generic inference estimate (the keys ``memory --json`` uses where they apply)."""
    from ..networks import transformer as architectures
    from ..networks.generic import cache as generic_cache
    from .generic_params import load_generic

    extra = sorted(k for k in options if k not in SUPPORTED_OPTIONS and k != "mode")
    if extra:
        raise UserError(f"the generic torch path plans one GPU holding the model; --{extra[0].replace('_', '-')} "
                        "needs a model type with a family table ('symbolic models')")
    name, config = architectures.resolve_config(model)
    m = load_generic(name, config)
    batch = int(options.get("batch") or 1)
    seq = int(options.get("seq") or DEFAULT_SEQ)
    weights = str(options.get("weights") or "bf16")
    if weights not in WEIGHT_FORMATS:
        raise UserError(f"the generic torch path stores weights in bf16, fp16 or fp32, not {weights!r}")
    kv = str(options.get("kv_dtype") or ("fp32" if weights == "fp32" else "bf16"))
    kv_bytes = formats.get(kv, "kv", "--kv-dtype").element_bytes
    archs = config.get("architectures")
    cache = generic_cache.cache_formula(config, architecture=archs[0] if isinstance(archs, list) and archs else None)
    ratio = kv_bytes / generic_cache.BYTES_PER_ELEMENT
    per_token, per_sequence, windowed = (cache.per_token * ratio, cache.per_sequence * ratio, cache.windowed * ratio)
    cache_bytes = int(cache.expr.xreplace({B: batch, S: seq}) * ratio)
    weight_bytes = int(m.total * formats.nbytes(weights))
    terms = {"weights": weight_bytes, "kv_cache": cache_bytes}
    return {
        "model": m.name, "mode": "infer", "coverage": "generic", "architecture": m.architecture,
        "options": {"batch": batch, "seq": seq, "weights": weights, "kv_dtype": kv},
        "total_bytes": weight_bytes + cache_bytes, "total_human": format_bytes(weight_bytes + cache_bytes),
        "terms": terms, "cache_bytes": cache_bytes, "cache_terms": {"kv_cache": cache_bytes},
        "cache_formula": {"per_token_bytes": str(per_token), "per_sequence_bytes": str(per_sequence),
                          "windowed_per_token_bytes": str(windowed), "window_cap": cache.cap,
                          "text": printing.text(cache.expr * ratio),
                          "cache_class": cache.cache_class, "verified": cache.verified},
        "values": {"B": batch, "S": seq, "N": m.total},
        "notes": ["cache measured after a prefill on the meta device (bfloat16), scaled to the KV dtype; "
                  "no prefill working set or runtime overhead counted"],
    }


def cmd_memory(args: argparse.Namespace, options: dict[str, object]) -> int:
    """Print the generic inference estimate (and, with ``--gpu``, whether it fits)."""
    from .. import planning
    from ..networks import transformer as architectures
    from .common import budget_of, check_exit, print_budget, warn_context

    if getattr(args, "check", False) and not args.gpu:
        raise UserError("--check needs --gpu (the GPU to check the peak against)")
    budget = budget_of(args)
    gpu = budget.gpu if budget is not None else None
    data = infer_data(args.model, options)
    fit = planning.Fit(gpu, data["total_bytes"], data["total_bytes"] <= budget.bytes,
                       budget.bytes - data["total_bytes"], budget) if budget is not None else None
    if fit is not None:
        data.update(fit.as_dict())
    warn_context(args, architectures.resolve_config(args.model)[1], data["model"], data["options"]["seq"])
    fits = fit.fits if fit is not None else True
    if getattr(args, "json", False):
        print_json(data)
        return check_exit(args, fits)
    o = data["options"]
    print(f"{data['model']}: inference memory, one GPU ({data['architecture']}, generic torch path)")
    print(f"  options: batch {o['batch']}, seq {o['seq']}, weights {o['weights']}, kv-dtype {o['kv_dtype']}")
    rows = [(k, f"{v:,}", format_bytes(v)) for k, v in data["terms"].items()]
    rows.append(("total", f"{data['total_bytes']:,}", data["total_human"]))
    print(table(rows, "<>>"))
    c = data["cache_formula"]
    print(f"  kv_cache = {c['text']} bytes ({c['cache_class']}, "
          f"{'checked at a further point' if c['verified'] else 'not confirmed at a further point'})")
    if fit is not None:
        verdict = (f"fits, headroom {format_bytes(fit.headroom)} ({fit.headroom:,} bytes)" if fit.fits else
                   f"does NOT fit: {format_bytes(-fit.headroom)} over ({-fit.headroom:,} bytes)")
        if budget.whole:
            print(f"  on {gpu.name} ({gpu.bytes:,} bytes = {format_bytes(gpu.bytes)}, {gpu.basis}): {verdict}")
        else:
            print(f"  on {budget.label} ({budget.bytes:,} bytes = {format_bytes(budget.bytes)}): {verdict}")
        print_budget(budget)
    for note in data["notes"]:
        print(f"  note: {note}")
    return check_exit(args, fits)
