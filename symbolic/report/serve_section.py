"""The report's serving section (issue 27): an engine's weights, KV pool and concurrency, and formats compared.

A specification asks for it with a ``[serve]`` table; every key but ``engine``'s own settings has
the name ``symbolic.serve`` takes, and the settings are the engine's flags by their Python names
(``symbolic.engines``: ``gpu_memory_utilization``, ``max_model_len``, ``n_gpu_layers``,
``ctx_size``, ``prefill_chunk``, ...)::

    [serve]
    engine = "vllm"                 # torch (default), vllm, sglang or llamacpp
    gpu = "h200"                    # default: the first entry of the specification's gpus
    gpus = 1                        # GPUs of the job: tensor-parallel ranks (llama.cpp: layer split); or tp/pp
    seq = 32768                     # concurrency is asked at this context
    batch = 4                       # (optional) the longest context for this many requests
    weights = "mxfp4"               # default: the config's quantization_config, else bf16
    kv_dtype = "bf16"
    formats = ["bf16", "fp8", "mxfp4"]   # weight formats compared: bytes, fits or not
    gpu_memory_utilization = 0.9    # the engine's own settings

``check`` validates the table (called by ``spec.py``); ``build`` makes the context entry: text,
tables for both templates and a chart of concurrency against context. Every number is the
engine module's answer (``engines.serve``).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

from ..core.errors import UserError
from ..options.table import MAX_SEQ
from . import tables

COMMON_KEYS = ("engine", "gpu", "gpus", "tp", "pp", "seq", "batch", "weights", "kv_dtype", "formats")
ENGINES = ("torch", "vllm", "sglang", "llamacpp")
TITLE = "Serving: weights, KV pool and concurrency"  # the section's heading in both templates
MAX_FORMATS = 12
MAX_GPUS = 2**10
CHART_POINTS = 6  # contexts charted: seq, seq/2, ... (at least 256 tokens)
FORMAT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,40}(?::[A-Za-z0-9_.\-]{1,40})?")
Fail = Callable[[tuple[str, ...], str], Exception]


def _flags() -> dict[str, Any]:
    """Every engine flag by its Python name (the first engine's entry where two share one)."""
    from ..engines import flag_tables

    out: dict[str, Any] = {}
    for flags in flag_tables().values():
        for flag in flags:
            out.setdefault(flag.dest, flag)
    return out


def keys() -> tuple[str, ...]:
    """The keys a ``[serve]`` table takes: the common ones and every engine's settings."""
    return COMMON_KEYS + tuple(_flags())


def _whole(value: Any, where: tuple[str, ...], fail: Fail, low: int = 1, high: int = MAX_SEQ) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise fail(where, f"must be a whole number from {low} to {high:,}, got {value!r}")
    return value


def _name(value: Any, where: tuple[str, ...], fail: Fail) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise fail(where, f"expected a name in quotes, got {value!r}")
    return value.strip()


def _format(value: Any, where: tuple[str, ...], fail: Fail) -> str:
    """A format's name (``bf16``, ``mxfp4``, ``gguf:Q4_K_M``): its spelling here, the format itself when the
    engine resolves it (``engines.setup``: an unknown one is the report's one-line error), as a model name is."""
    name = _name(value, where, fail)
    if not FORMAT_NAME.fullmatch(name):
        raise fail(where, f"{name!r} is not a format name (letters, digits, '_', '-', '.', one ':')")
    return name


def _setting(flag: Any, value: Any, where: tuple[str, ...], fail: Fail) -> object:
    """One engine setting checked as its flag's kind (``engines.flags.Flag``)."""
    if flag.kind in ("whole", "count"):
        return _whole(value, where, fail, 1 if flag.kind == "whole" else 0, 2**40)
    if flag.kind == "fraction":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise fail(where, f"must be a number above 0 and at most 1, got {value!r}")
        return float(value)
    if flag.kind == "switch":
        if not isinstance(value, bool):
            raise fail(where, f"expected true or false, got {value!r}")
        return value
    if flag.kind == "choice":
        if value not in flag.choices:
            raise fail(where, f"{value!r} is not one of {', '.join(flag.choices)}")
        return value
    if flag.kind == "list":
        ok = isinstance(value, list) and value and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in value)
        if not ok or sum(value) <= 0:
            raise fail(where, f"expected a list of non-negative shares with a positive sum, got {value!r}")
        return tuple(float(v) for v in value)
    return _name(value, where, fail)


def check(value: Any, fail: Fail) -> dict[str, Any] | None:
    """The validated ``[serve]`` table (None when absent); ``fail(where, message)`` makes the one-line error."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise fail(("serve",), "expected a table")
    allowed, flags = keys(), _flags()
    for key in value:
        if key not in allowed:
            raise fail(("serve", key), f"unknown key; keys are {', '.join(allowed)}")
    engine = value.get("engine", "torch")
    if engine not in ENGINES:
        raise fail(("serve", "engine"), f"{engine!r} is not one of {', '.join(ENGINES)}")
    out: dict[str, Any] = {"engine": engine, "settings": {}}
    for key, val in value.items():
        where = ("serve", key)
        if key in ("seq", "batch"):
            out[key] = _whole(val, where, fail)
        elif key in ("gpus", "tp", "pp"):
            out[key] = _whole(val, where, fail, high=MAX_GPUS)
        elif key == "gpu":
            out[key] = _name(val, where, fail)
        elif key in ("weights", "kv_dtype"):
            out[key] = _format(val, where, fail)
        elif key == "formats":
            if not isinstance(val, list) or not 1 <= len(val) <= MAX_FORMATS:
                raise fail(where, f"expected a list of 1 to {MAX_FORMATS} weight formats, got {val!r}")
            out[key] = tuple(_format(v, where, fail) for v in val)
        elif key != "engine":
            _own(engine, key, fail)
            out["settings"][key] = _setting(flags[key], val, where, fail)
    if "gpus" in out and ("tp" in out or "pp" in out):
        raise fail(("serve", "gpus"), "give gpus, or tp and pp, not both")
    return out


def _own(engine: str, key: str, fail: Fail) -> None:
    """Refuse a setting of another engine in one line (``engines.flags.check_flags``' words)."""
    from ..engines import flag_tables
    from ..engines.flags import check_flags

    try:
        check_flags(engine, {key: True}, flag_tables())
    except UserError as err:
        raise fail(("serve", key), str(err).replace(f"--{key.replace('_', '-')}", key).replace(
            "--engine ", "engine ")) from None


def layout(table: dict[str, Any]) -> tuple[int, int]:
    """(tp, pp) of the ``[serve]`` table: ``gpus`` are tensor-parallel ranks (llama.cpp splits layers: pp)."""
    if "gpus" in table:
        return (1, table["gpus"]) if table["engine"] == "llamacpp" else (table["gpus"], 1)
    return table.get("tp", 1), table.get("pp", 1)


def _serve(spec: Any, table: dict[str, Any], gpu: object, **changes: object) -> Any:
    from ..engines import serve

    model = str(spec.model.path) if spec.model.path else spec.model.name
    tp, pp = layout(table)
    asked = {"weights": table.get("weights"), "kv_dtype": table.get("kv_dtype"), "seq": table.get("seq"),
             "batch": table.get("batch"), **changes}
    return serve(model, table["engine"], gpu, tp=tp, pp=pp, **asked, **table["settings"])  # type: ignore[arg-type]


def _gpu(spec: Any, table: dict[str, Any]) -> object:
    """The GPU named in ``[serve]``, else the first of ``gpus`` (with its budget when it has a fraction or reserve)."""
    name = table.get("gpu")
    refs = getattr(spec, "gpus", ())
    if name is None:
        if not refs:
            raise ValueError("the [serve] table needs a gpu (or the specification a gpus list)")
        name = refs[0].name
    if name.endswith(".toml") and spec.path is not None and not name.startswith("/"):
        return str((spec.path.parent / name).resolve())
    ref = next((r for r in refs if r.name == name and (r.fraction or r.reserve)), None)
    return ref.budget(spec.path) if ref is not None and table["engine"] == "torch" else name


def build(spec: Any, ts: Any, charts: bool = True) -> list[dict[str, Any]]:
    """The serving section's context entry: one section, or none without a ``[serve]`` table (templates loop).

    Each section has ``intro`` and ``summary`` (the first page's line), ``settings``, ``memory``,
    ``formats`` (lists of zero or one table) and ``charts`` (zero or one chart).
    """
    table = getattr(spec, "serve", None)
    if not table:
        return []
    gpu = _gpu(spec, table)
    plan = _serve(spec, table, gpu)
    section: dict[str, Any] = {"intro": _intro(plan), "summary": _summary(plan), "answers": _answers(plan),
                               "settings": [_settings(plan, table, ts)], "memory": [_memory(plan, ts)],
                               "formats": [], "charts": []}
    if table.get("formats"):
        section["formats"] = [_formats(spec, table, gpu, plan, ts)]
    if charts:
        section["charts"] = [_chart(spec, table, gpu, plan)]
    return [section]


def _intro(plan: Any) -> str:
    return (f"{plan.model} served by {plan.engine} ({plan.engine_version}) on {plan.gpus} × {plan.gpu}: weights "
            f"{plan.weights} ({_from(plan.weights_from)}), KV cache {plan.kv_dtype}. Every figure is per GPU unless "
            "it says otherwise.")


def _from(where: str) -> str:
    return {"--weights": "as given", "quantization_config": "from the config's quantization_config",
            "default": "the default"}.get(where, where)


def _summary(plan: Any) -> str:
    from ..core.units import format_bytes

    where = f"{plan.model} on {plan.gpus} × {plan.gpu} with {plan.engine}"
    if not plan.fits:
        return f"Serving: nothing fits {where}, even one request of {plan.seq:,} tokens (see “{TITLE}”)."
    return (f"Serving: {where} holds a KV pool of {format_bytes(plan.kv_cache_bytes)} ({plan.kv_cache_tokens:,} "
            f"tokens) per GPU: {plan.max_concurrency} requests of {plan.seq:,} tokens at once (see “{TITLE}”).")


def _answers(plan: Any) -> list[str]:
    out = []
    if plan.max_concurrency is not None and plan.seq is not None:
        out.append(f"Maximum concurrency at {plan.seq:,} tokens per request: {plan.max_concurrency}"
                   + ("" if plan.fits else " (nothing fits)") + ".")
    if plan.max_context is not None and plan.batch is not None:
        out.append(f"Longest context at {plan.batch} requests at once: {plan.max_context:,} tokens.")
    out += [f"{plan.engine} would log: {line}" for line in plan.log_lines]
    out += [f"Note: {note}" for note in plan.notes]
    return out


def _pairs(pairs: list[tuple[str, str]], ts: Any, head: str) -> dict[str, Any]:
    return tables.table([(head, "left"), ("", "left")], [tables.row([ts.cell(k), ts.cell(v)]) for k, v in pairs],
                        {0: "5.5cm", 1: "10.5cm"})


def _settings(plan: Any, table: dict[str, Any], ts: Any) -> dict[str, Any]:
    pairs = [("engine", f"{plan.engine} ({plan.engine_version})"), ("GPUs", f"{plan.gpus} × {plan.gpu}"),
             ("weights", f"{plan.weights} ({_from(plan.weights_from)})"), ("KV cache", plan.kv_dtype)]
    pairs += [(key, _shown(value)) for key, value in table["settings"].items()]
    pairs += [(key, _shown(value)) for key, value in plan.figures.items() if key not in table["settings"]
              and isinstance(value, (str, int, float, bool)) and not isinstance(value, dict)]
    return _pairs(pairs, ts, "setting")


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return ",".join(f"{v:g}" for v in value)  # type: ignore[str-format]
    return f"{value:,}" if isinstance(value, int) else str(value)


def _memory(plan: Any, ts: Any) -> dict[str, Any]:
    from ..core.units import format_bytes

    found = plan.term_bytes()
    rows = [tables.row([ts.cell(t.key, code=True), ts.cell(t.title + (" (outside the budget)" if t.key in plan.outside
                                                                       else "")),
                        ts.cell(f"{found[t.key]:,}"), ts.cell(format_bytes(found[t.key])), ts.cell(t.source)])
            for t in plan.terms]
    for label, value, what in (("weights", plan.weights_bytes, "the weights' terms"),
                               ("non-KV", plan.non_kv_bytes, "everything in the budget but the KV pool"),
                               ("KV pool", plan.kv_cache_bytes, f"budget − non-KV: {plan.kv_cache_tokens:,} tokens"),
                               ("budget", plan.budget_bytes, plan.gpu)):
        rows.append(tables.row([ts.cell(label), ts.cell(what), ts.cell(f"{value:,}"), ts.cell(format_bytes(value)),
                                ts.cell("")], "total"))
    columns = [("per GPU", "left"), ("", "left"), ("bytes", "right"), ("size", "right"), ("source", "left")]
    return tables.table(columns, rows, {1: "6.2cm"})


def _formats(spec: Any, table: dict[str, Any], gpu: object, plan: Any, ts: Any) -> dict[str, Any]:
    from ..core.units import format_bytes

    rows = []
    for fmt in table["formats"]:
        try:
            other = plan if fmt == plan.weights else _serve(spec, table, gpu, weights=fmt)
        except UserError:  # the engine refuses to start (vLLM, SGLang): the weights alone say why
            per_gpu = -(-_whole_weights(spec, fmt) // plan.gpus)
            cells = [fmt, f"{per_gpu:,}", format_bytes(per_gpu), "no", "0 (the engine would not start)"]
            rows.append(tables.row([ts.cell(c) for c in cells], "fails"))
            continue
        cells = [fmt, f"{other.weights_bytes:,}", format_bytes(other.weights_bytes), "yes" if other.fits else "no",
                 "" if other.max_concurrency is None else str(other.max_concurrency)]
        rows.append(tables.row([ts.cell(c) for c in cells], "fits" if other.fits else "fails"))
    columns = [("weights", "left"), ("bytes per GPU", "right"), ("size", "right"), ("fits?", "center"),
               (f"requests of {plan.seq:,} tokens", "right")]
    return tables.table(columns, rows)


def _whole_weights(spec: Any, fmt: str) -> int:
    """The model's weights stored as ``fmt``, every tensor (``networks.stored``)."""
    from ..networks.network import load
    from ..networks.stored import weight_bytes

    return weight_bytes(load(str(spec.model.path) if spec.model.path else spec.model.name), fmt)


def _chart(spec: Any, table: dict[str, Any], gpu: object, plan: Any) -> dict[str, str]:
    """Concurrency against context: the engine's answer at seq, seq/2, ... (one line per GPU type asked)."""
    from . import plots

    contexts = sorted({max(plan.seq >> k, 256) for k in range(CHART_POINTS)})
    values = [float(plan.max_concurrency) if c == plan.seq else float(_serve(spec, table, gpu, seq=c).max_concurrency)
              for c in contexts]
    svg = plots.concurrency(contexts, [(f"{plan.gpus} × {plan.gpu}", values)])
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return {"src": f"data:image/svg+xml;base64,{data}", "alt": "requests at once against tokens per request"}
