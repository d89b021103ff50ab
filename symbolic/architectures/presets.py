"""Presets: Hugging Face configs of popular models shipped with the package, each with its source.

``load("llama-3-8b")`` reads ``symbolic/presets/llama-3-8b.json``; ``load("path/to/config.json")``
(or a directory holding one) reads that file. Nothing is fetched from the network.
"""

from __future__ import annotations

import json
import os
import re
from difflib import get_close_matches
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from .configs import ConfigError, load_config, spec_from_config
from .spec import ModelSpec

NOT_PRESETS = ("reference_counts",)
SOURCE_KEY = "_source"


def _directory() -> Any:
    return resources.files("symbolic") / "presets"


def _natural(name: str) -> list[object]:
    """Sort key that puts llama-2-7b before llama-2-13b."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


@lru_cache(maxsize=1)
def preset_names() -> tuple[str, ...]:
    """Every preset name, in natural order (gpt2, gpt2-medium, ..., llama-2-7b, llama-2-13b, ...)."""
    names = [e.name[:-5] for e in _directory().iterdir() if e.name.endswith(".json")]
    return tuple(sorted((n for n in names if n not in NOT_PRESETS), key=_natural))


def preset_config(name: str) -> dict[str, Any]:
    """The preset's config.json contents, including its ``_source`` key."""
    if name not in preset_names():
        raise ConfigError(_unknown(name))
    data = json.loads((_directory() / f"{name}.json").read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ConfigError(f"preset {name}: not a JSON object")
    return data


def preset_source(name: str) -> str:
    """Where the preset's config text comes from (its ``_source`` key)."""
    return str(preset_config(name).get(SOURCE_KEY, ""))


@lru_cache(maxsize=64)
def _load_preset(name: str) -> ModelSpec:
    config = preset_config(name)
    source = str(config.pop(SOURCE_KEY, ""))
    return spec_from_config(config, name=name, where=f"preset {name}", source=source)


def load(name_or_path: str | os.PathLike[str]) -> ModelSpec:
    """The ModelSpec of a preset (``"llama-3-8b"``) or of a local config.json (or its directory).

    A name without a path separator or ``.json`` is looked up among the presets first
    (case-insensitively); unknown names get the closest preset suggested.
    """
    kind, found = _resolve(name_or_path)
    return _load_preset(found) if kind == "preset" else load_config(Path(found))


def resolve_config(name_or_path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """(name, raw config dict without ``_source``) of a preset or a config.json, resolved as ``load``."""
    from .configs import read_json

    kind, found = _resolve(name_or_path)
    if kind == "preset":
        data = preset_config(found)
        name = found
    else:
        path = Path(found)
        data = read_json(path / "config.json" if path.is_dir() else path)
        name = path.parent.name if path.name == "config.json" else path.stem
    return name, {k: v for k, v in data.items() if k != SOURCE_KEY}


def _resolve(name_or_path: str | os.PathLike[str]) -> tuple[str, str]:
    """('preset', name) or ('path', path); unknown names raise with the closest presets."""
    text = os.fspath(name_or_path)
    looks_like_path = isinstance(name_or_path, os.PathLike) or os.sep in text or "/" in text or text.endswith(".json")
    if not looks_like_path and text.strip().lower() in preset_names():
        return "preset", text.strip().lower()
    path = Path(text).expanduser()
    if path.exists():
        return "path", str(path)
    if looks_like_path:
        raise ConfigError(f"{text}: no such file")
    raise ConfigError(_unknown(text))


def _unknown(name: str) -> str:
    close = get_close_matches(name.strip().lower(), preset_names(), n=3, cutoff=0.6)
    quoted = [repr(c) for c in close]
    hint = f" (did you mean {', '.join(quoted[:-1]) + ' or ' if len(quoted) > 1 else ''}{quoted[-1]}?)" if close else ""
    return (f"unknown model {name!r}{hint}: give a preset name ('symbolic models' lists them) "
            f"or the path of a config.json")
