"""A library model's source as plain cache data, so that a cached ask imports no library (issue 29).

Resolving ``torchvision:resnet50`` reads the library (its model list, its weights' crop size, a
diffusers class's signature and config), which imports it and torch: seconds. What that yields is
plain data (a label, the inputs, their default sizes, the loss, notes), stored here beside the
probes it keys (``cache``) and read back field by field: nothing stored is evaluated, and data
that does not read back as the fields expect is a miss (resolved again). The builder is not
stored: it is the library's own, looked up by name and imported only when the module is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import cache
from .source import Input, ModuleSource

Builder = Callable[[Mapping[str, Any]], Any]  # arguments -> the module


def source_data(source: ModuleSource) -> dict[str, Any]:
    """What a cached library source holds: every field but the builder (``extra`` sources are not stored)."""
    return {"label": source.label, "origin": source.origin, "arguments": dict(source.arguments),
            "inputs": [[i.name, list(i.dims), i.dtype, i.high] for i in source.inputs],
            "sizes": dict(source.sizes), "loss": source.loss, "fingerprint": list(source.fingerprint),
            "task": source.task, "notes": list(source.notes)}


def _input(data: Any) -> Input:
    name, dims, dtype, high = data
    return Input(str(name), tuple(d if type(d) is int else str(d) for d in dims),
                 None if dtype is None else str(dtype), None if high is None else int(high))


def _optional(value: Any) -> str | None:
    return None if value is None else str(value)


def source_from(data: Mapping[str, Any], build: Builder) -> ModuleSource | None:
    """The ModuleSource of stored data with ``build``, or None where the data does not read back."""
    try:
        return ModuleSource(
            label=str(data["label"]), origin=str(data["origin"]), build=build, arguments=dict(data["arguments"]),
            inputs=tuple(_input(i) for i in data["inputs"]),
            sizes={str(k): int(v) for k, v in dict(data["sizes"]).items()}, loss=_optional(data["loss"]),
            fingerprint=tuple(str(x) for x in data["fingerprint"]), task=_optional(data["task"]),
            notes=tuple(str(n) for n in data["notes"]))
    except (KeyError, TypeError, ValueError):
        return None


def cached_source(key: str, make: Callable[[], ModuleSource], builder: Callable[[str | None], Builder]) -> ModuleSource:
    """The source stored under ``key`` (built by ``builder(its task)``), else ``make()``'s, then stored."""
    found = cache.read(key)
    task = found.get("task") if found is not None else None
    source = source_from(found, builder(_optional(task))) if found is not None else None
    if source is not None:
        return source
    source = make()
    if source.extra is None:
        cache.write(key, source_data(source))
    return source
