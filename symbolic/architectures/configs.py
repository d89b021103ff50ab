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

from ..symbols import suggest
from ..userfiles import read_user_file
from .families import FAMILIES, SUPPORTED, Family, Head, Size
from .spec import MAX_SIZE, ModelSpec, SpecError

MAX_BYTES = 4 * 2**20
DEFAULT_LABELS = 2


class ConfigError(ValueError):
    """A config that cannot be read or counted; the message is one line."""


def read_json(path: str | Path) -> dict[str, Any]:
    """The JSON object in ``path``; bad JSON names the file, line and column."""
    p = Path(path)
    raw = read_user_file(p, limit=MAX_BYTES, what="a config.json", error=ConfigError)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{p}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    except ValueError as err:
        raise ConfigError(f"{p}: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a JSON object, found {type(data).__name__}")
    return data


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a valid number in a config")


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
    except (ConfigError, SpecError, ValueError) as err:
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
    if family.rule is not None:
        family.rule(cfg, out)
    architecture = _architecture(config, family)
    _apply_head(_head(family, architecture), config, out)
    return ModelSpec(name=name, model_type=family.model_type, architecture=architecture, source=source, **out)


def _family(config: Mapping[str, Any]) -> Family:
    supported = ", ".join(SUPPORTED)
    model_type = config.get("model_type")
    if model_type is None:
        raise ConfigError(f"no 'model_type' field; supported model types: {supported}")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        hint = suggest(model_type, SUPPORTED) if isinstance(model_type, str) else ""
        raise ConfigError(f"model_type {model_type!r} is not supported{hint}; supported: {supported}")
    return FAMILIES[model_type]


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
