"""Read a Hugging Face ``config.json`` from a local file, offline, into a ModelSpec.

The reader follows the table in ``families.py``: every size comes from its config key or takes
the default ``transformers`` uses; every value is checked (integers, positive, booleans) and no
value is ever evaluated. Problems raise ``ConfigError``: one line naming the file and the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...core.errors import InputFileError
from ...core.symbols import suggest
from ...core.userfiles import parse_json, read_user_file
from .families import FAMILIES, OTHER_LAYOUTS, SUPPORTED, TEXT_PART, Family, Head, Size
from .spec import MAX_SIZE, ModelSpec, ModelSpecError, too_many_layers

MAX_BYTES = 4 * 2**20
DEFAULT_LABELS = 2


class ConfigError(InputFileError):
    """A config that cannot be read or counted; the message is one line."""


def read_json(path: str | Path) -> dict[str, Any]:
    """The JSON object in ``path``; bad JSON names the file, line and column."""
    p = Path(path)
    raw = read_user_file(p, limit=MAX_BYTES, what="a config.json", error=ConfigError)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text") from None
    if not text.strip():  # missing, unreadable, empty and not JSON are four different messages
        raise ConfigError(f"{p}: is empty (expected a config.json)" if not raw else
                          f"{p}: holds only white space (expected a config.json)")
    try:
        # Infinity and NaN are read (transformers writes time_step_limit: [0.0, Infinity] for Mamba-2
        # and Falcon-H1); a size field that holds one is refused by name, as any other non-integer
        data = parse_json(text, p, error=ConfigError)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{p}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    except ConfigError:
        raise  # already one line naming the file (depth, memory, digits)
    except ValueError as err:
        raise ConfigError(f"{p}: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a JSON object, found {type(data).__name__}")
    return data


def load_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """The ModelSpec of the config.json at ``path`` (a directory means its config.json)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    config = read_json(p)
    if name is None:
        name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return spec_from_config(config, name=name, where=str(p))


def spec_from_config(config: Mapping[str, Any], name: str, where: str | None = None,
                     source: str = "") -> ModelSpec:
    """The ModelSpec of an already-parsed config; ``where`` names it in errors."""
    where = where or name
    try:
        return _build(config, name, source)
    except (ConfigError, ModelSpecError, ValueError) as err:
        message = str(err)
        prefix = f"{name}: "
        if message.startswith(prefix):
            message = message[len(prefix):]
        raise ConfigError(f"{where}: {message}") from None


def _build(config: Mapping[str, Any], name: str, source: str) -> ModelSpec:
    family = _family(config)
    cfg: dict[str, Any] = {}
    out: dict[str, Any] = dict(family.fixed)
    for field, size in family.sizes.items():
        out[field] = _size(config, field, size)
    for key, flag in family.flags.items():
        cfg[key] = _flag(config, key, flag.default)
        for field in flag.sets:
            out[field] = cfg[key]
    for key in family.extra:
        cfg[key] = config.get(key)
    cfg["_present"] = frozenset(k for k, v in config.items() if v is not None)
    cfg["_null"] = frozenset(k for k, v in config.items() if v is None)
    if family.rule is not None:
        family.rule(cfg, out)
    _layer_kinds(config, family, out)
    architecture = _architecture(config, family)
    _apply_head(_head(family, architecture), config, out)
    return ModelSpec(name=name, model_type=family.model_type, architecture=architecture, source=source, **out)


ATTENTION_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def _layer_kinds(config: Mapping[str, Any], family: Family, out: dict[str, Any]) -> None:
    """Dense layers of a mixture of experts, and sliding-window layers with their window, from the config.

    An explicit ``layer_types`` list wins (as in transformers' cache); else the family's own
    pattern; the window is the family's window key (Llama-4: attention_chunk_size).
    """
    def read(key: str, default: Any) -> Any:
        value = config.get(key)
        return default if value is None and key not in config else value

    layers = out["layers"]
    if family.dense_layers is not None and out.get("experts"):
        dense = family.dense_layers(read, layers)
        out["dense_layers"], out["dense_at"] = len(dense), tuple(dense)
        if out["dense_layers"] >= layers:
            raise ConfigError("every layer is dense (no mixture-of-experts layer); this table entry needs at least one")
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise ConfigError(f"layer_types must be a list of strings, got {_short(types)}")
        if len(types) != layers:
            raise ConfigError(f"layer_types has {len(types)} entries for {layers} layers")
    elif family.layer_types is not None:
        types = family.layer_types(read, layers)
    else:
        return  # every layer full attention: nothing to count (and no list of L entries to build)
    known = ATTENTION_TYPES + (("conv",) if family.conv else ())
    unknown = sorted({t for t in types if t not in known})
    if unknown:
        raise ConfigError(f"layer type {unknown[0]!r} is not covered by the {family.model_type} table entry "
                          f"(known: {', '.join(ATTENTION_TYPES)})")
    conv = sum(1 for t in types if t == "conv")
    if conv and family.conv:
        key, default = family.conv
        kernel = config.get(key, default)
        if isinstance(kernel, bool) or not isinstance(kernel, int) or kernel < 1:
            raise ConfigError(f"{key} must be a positive integer for the convolution layers, got {_short(kernel)}")
        out["conv_layers"], out["conv_kernel"] = conv, kernel
        out["conv_at"] = tuple(i for i, t in enumerate(types) if t == "conv")
    sliding = sum(1 for t in types if t in ("sliding_attention", "chunked_attention"))
    if not sliding:
        return
    key, default = family.window
    if "chunked_attention" in types and key != "attention_chunk_size":
        key, default = "attention_chunk_size", None
    window = config.get(key, default)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ConfigError(f"{key} must be a positive integer for the sliding layers, got {_short(window)}")
    out["sliding_layers"] = sliding
    out["window"] = window


def _family(config: Mapping[str, Any]) -> Family:
    supported = ", ".join(SUPPORTED)
    model_type = config.get("model_type")
    if model_type is None:
        raise ConfigError(f"no 'model_type' field; supported model types: {supported}")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        hint = _hint(model_type) if isinstance(model_type, str) else ""
        raise ConfigError(f"model_type {model_type!r} is not supported{hint}; supported: {supported}")
    return FAMILIES[model_type]


def _hint(model_type: str) -> str:
    """A "did you mean" naming only a type with the same layout (never qwen3 for qwen3_next)."""
    if model_type in TEXT_PART:
        return f" (did you mean {TEXT_PART[model_type]!r}? give the config's text_config, whose layout it has)"
    if model_type in OTHER_LAYOUTS:
        return " (its layout differs from every table entry)"
    from ..generic.probes import generic_hint  # a type transformers knows is no typo of a table's (mamba is not llama)

    return generic_hint(model_type) or suggest(model_type, SUPPORTED)


def _size(config: Mapping[str, Any], field: str, size: Size) -> int | None:
    """The first of ``size.keys`` present in the config (null counts as absent), else the default."""
    for key in size.keys:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {_short(value)}")
        if value < size.minimum:
            kind = "positive" if size.minimum else "non-negative"
            raise ConfigError(f"{key} must be {kind}, got {value}")
        if value > MAX_SIZE:
            raise ConfigError(f"{key}={value} is implausibly large")
        problem = too_many_layers(key, value) if field == "layers" else None
        if problem:  # before any per-layer pattern walks the layers
            raise ConfigError(problem)
        return value
    return size.default


def _flag(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {_short(value)}")
    return value


def _architecture(config: Mapping[str, Any], family: Family) -> str:
    archs = config.get("architectures")
    if archs is None or archs == []:
        return family.default_class
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ConfigError(f"architectures must be a list of class names, got {_short(archs)}")
    return archs[0]


def _head(family: Family, architecture: str) -> Head:
    """The head a class adds: exact class names first, then by suffix (LLaMAForCausalLM)."""
    for suffix in sorted(family.heads, key=len, reverse=True):
        if architecture == family.prefix + suffix:
            return family.heads[suffix]
    for suffix in sorted(family.heads, key=len, reverse=True):
        if architecture.endswith(suffix):
            return family.heads[suffix]
    known = ", ".join(family.prefix + s for s in family.heads)
    raise ConfigError(f"architecture {architecture!r} is not supported for {family.model_type}; supported: {known}")


def _apply_head(head: Head, config: Mapping[str, Any], out: dict[str, Any]) -> None:
    out["lm_head"] = head.lm_head
    if head.mlm:
        out["mlm_transform"] = True
        out["lm_head_bias"] = True
    elif not head.lm_head:
        out["lm_head_bias"] = False
    out["pooler"] = head.pooler
    out["classifier"] = _labels(config) if head.classifier == "labels" else int(head.classifier)
    out["classifier_bias"] = head.classifier_bias and out["classifier"] > 0


def _labels(config: Mapping[str, Any]) -> int:
    """num_labels as transformers derives it: the key, else the size of id2label, else 2."""
    value = config.get("num_labels")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"num_labels must be a positive integer, got {_short(value)}")
        return value
    id2label = config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return len(id2label)
    return DEFAULT_LABELS


def _short(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
