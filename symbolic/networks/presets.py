"""Presets, and the one resolver from a model reference to its config (preset, file, folder, hub id).

``load("llama-3-8b")`` reads ``symbolic/presets/llama-3-8b.json``; ``load("path/to/config.json")``
(or a directory holding one) reads that file; ``load("Qwen/Qwen3-8B")`` reads the config.json of
that hub id from the local Hugging Face cache (``hub.py``); a bare model type (``mixtral``,
``mamba``) that is no preset is that type's default config, ``{"model_type": "mamba"}``, as
transformers builds it (a family table's defaults, or the generic torch path). Nothing is fetched
from the network.
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

from ..core.errors import single_line
from . import gguf_config, hub
from .transformer.configs import ConfigError, load_config, spec_from_config
from .transformer.families import FAMILIES
from .transformer.spec import ModelSpec

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

    kind: str  # "preset", "path", "hub", "type" or "gguf"
    name: str  # the preset name, the hub id, the file's folder / stem, or the model type
    path: Path | None  # the config.json or GGUF file (None for a preset or a model type)


def resolve(name_or_path: str | os.PathLike[str]) -> Resolved:
    """A preset name, a config.json path, a model folder or a cached hub id (ORG/NAME), resolved.

    A name without a path separator or ``.json`` is looked up among the presets first
    (case-insensitively); an ORG/NAME that is not an existing path is looked up in the local
    Hugging Face cache; a name that is a model type (of a family table, or one transformers knows)
    is that type's default config; unknown names get the closest preset suggested.
    """
    kind, found = _resolve(name_or_path)
    if kind in ("preset", "type"):
        return Resolved(kind, found, None)
    if kind == "hub":
        return Resolved("hub", found, hub.cached_config(found))
    path = Path(found)
    if gguf_config.is_gguf(path):  # a GGUF file: its header is the config (a folder so named is refused by the reader)
        return Resolved("gguf", single_line(path.stem), path)
    if path.is_dir():
        path = path / "config.json"
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return Resolved("path", single_line(name), path)


def load(name_or_path: str | os.PathLike[str]) -> ModelSpec:
    """The ModelSpec of a preset (``"llama-3-8b"``), a local config.json (or its folder) or a cached hub id."""
    found = resolve(name_or_path)
    if found.kind == "preset":
        return _load_preset(found.name)
    if found.kind == "type":
        return spec_from_config(type_config(found.name), name=found.name, where=f"model type {found.name}",
                                source=f"transformers' default {found.name} config")
    assert found.path is not None
    if found.kind == "gguf":
        head = gguf_config.header(found.path)
        return spec_from_config(gguf_config.config(found.path), name=found.name, where=str(head.path),
                                source=gguf_config.source(head))
    return load_config(found.path, name=found.name)


def resolve_config(name_or_path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """(name, raw config dict without ``_source``) of a model reference, resolved as ``load``."""
    from .transformer.configs import read_json

    found = resolve(name_or_path)
    if found.kind == "preset":
        data = preset_config(found.name)
    elif found.kind == "type":
        data = type_config(found.name)
    elif found.kind == "gguf":
        assert found.path is not None
        data = gguf_config.config(found.path)
    else:
        assert found.path is not None
        data = read_json(found.path)
    return found.name, {k: v for k, v in data.items() if k != SOURCE_KEY}


def _resolve(name_or_path: str | os.PathLike[str]) -> tuple[str, str]:
    """('preset', name), ('path', path) or ('hub', id); unknown names raise with the closest presets."""
    text = os.fspath(name_or_path)
    looks_like_path = (isinstance(name_or_path, os.PathLike) or os.sep in text or "/" in text or text.endswith(".json")
                       or gguf_config.is_gguf(text))
    if not looks_like_path and text.strip().lower() in preset_names():
        return "preset", text.strip().lower()
    path = Path(text).expanduser()
    if path.exists():
        return "path", str(path)
    if not isinstance(name_or_path, os.PathLike) and hub.looks_like_hub_id(text.strip()):
        return "hub", text.strip()
    if looks_like_path:
        raise ConfigError(f"{text}: no such file")
    if text.strip() in model_types() or text.strip().lower() in model_types():
        return "type", text.strip() if text.strip() in model_types() else text.strip().lower()
    raise ConfigError(_unknown(text))


def model_types() -> frozenset[str]:
    """The model types a bare name may be: the family tables' and every one transformers knows (if installed)."""
    from .generic.probes import known_types

    return frozenset(FAMILIES) | known_types()


def type_config(model_type: str) -> dict[str, Any]:
    """A model type's default config: only its ``model_type`` (every size then takes transformers' default)."""
    return {"model_type": model_type}


def _unknown(name: str) -> str:
    key = name.strip().lower()
    close = get_close_matches(key, preset_names(), n=3, cutoff=0.6) or get_close_matches(
        key, sorted(model_types()), n=3, cutoff=0.8)  # a typo of a model type, when no preset is close
    quoted = [repr(c) for c in close]
    hint = f" (did you mean {', '.join(quoted[:-1]) + ' or ' if len(quoted) > 1 else ''}{quoted[-1]}?)" if close else ""
    return (f"unknown model {name!r}{hint}: give a preset name ('symbolic models' lists them), "
            f"the path of a config.json or a model folder, a hub id cached locally (ORG/NAME), or a model type "
            f"(a family table's, or with the torch extra any transformers model type)")
