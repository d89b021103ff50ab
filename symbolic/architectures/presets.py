"""Presets, and the one resolver from a model reference to its config (preset, file, folder, hub id).

``load("llama-3-8b")`` reads ``symbolic/presets/llama-3-8b.json``; ``load("path/to/config.json")``
(or a directory holding one) reads that file; ``load("Qwen/Qwen3-8B")`` reads the config.json of
that hub id from the local Hugging Face cache (``hub.py``). Nothing is fetched from the network.
``resolve`` is the one place that turns such a reference into a config: ``predict``, the planner
and the generic torch path all call it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from difflib import get_close_matches
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import single_line
from . import hub
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


@dataclass(frozen=True)
class Resolved:
    """Where a model reference points: a preset, or a config.json file (given, in a folder, or cached)."""

    kind: str  # "preset", "path" or "hub"
    name: str  # the preset name, the hub id, or the file's folder / stem
    path: Path | None  # the config.json (None for a preset)


def resolve(name_or_path: str | os.PathLike[str]) -> Resolved:
    """A preset name, a config.json path, a model folder or a cached hub id (ORG/NAME), resolved.

    A name without a path separator or ``.json`` is looked up among the presets first
    (case-insensitively); an ORG/NAME that is not an existing path is looked up in the local
    Hugging Face cache; unknown names get the closest preset suggested.
    """
    kind, found = _resolve(name_or_path)
    if kind == "preset":
        return Resolved("preset", found, None)
    if kind == "hub":
        return Resolved("hub", found, hub.cached_config(found))
    path = Path(found)
    if path.is_dir():
        path = path / "config.json"
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return Resolved("path", single_line(name), path)


def load(name_or_path: str | os.PathLike[str]) -> ModelSpec:
    """The ModelSpec of a preset (``"llama-3-8b"``), a local config.json (or its folder) or a cached hub id."""
    found = resolve(name_or_path)
    if found.kind == "preset":
        return _load_preset(found.name)
    assert found.path is not None
    return load_config(found.path, name=found.name)


def resolve_config(name_or_path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """(name, raw config dict without ``_source``) of a model reference, resolved as ``load``."""
    from .configs import read_json

    found = resolve(name_or_path)
    if found.kind == "preset":
        data = preset_config(found.name)
    else:
        assert found.path is not None
        data = read_json(found.path)
    return found.name, {k: v for k, v in data.items() if k != SOURCE_KEY}


def _resolve(name_or_path: str | os.PathLike[str]) -> tuple[str, str]:
    """('preset', name), ('path', path) or ('hub', id); unknown names raise with the closest presets."""
    text = os.fspath(name_or_path)
    looks_like_path = isinstance(name_or_path, os.PathLike) or os.sep in text or "/" in text or text.endswith(".json")
    if not looks_like_path and text.strip().lower() in preset_names():
        return "preset", text.strip().lower()
    path = Path(text).expanduser()
    if path.exists():
        return "path", str(path)
    if not isinstance(name_or_path, os.PathLike) and hub.looks_like_hub_id(text.strip()):
        return "hub", text.strip()
    if looks_like_path:
        raise ConfigError(f"{text}: no such file")
    raise ConfigError(_unknown(text))


def _unknown(name: str) -> str:
    close = get_close_matches(name.strip().lower(), preset_names(), n=3, cutoff=0.6)
    quoted = [repr(c) for c in close]
    hint = f" (did you mean {', '.join(quoted[:-1]) + ' or ' if len(quoted) > 1 else ''}{quoted[-1]}?)" if close else ""
    return (f"unknown model {name!r}{hint}: give a preset name ('symbolic models' lists them), "
            f"the path of a config.json or a model folder, or a hub id cached locally (ORG/NAME)")
