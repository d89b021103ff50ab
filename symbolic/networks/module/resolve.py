"""Which models are torch modules, and the ``ModuleSource`` of each (issue 29): the one way in.

``module_source(model, ...)`` recognises ``PATH.py:NAME`` (a user's file, ``files``) and every
prefix registered in ``PREFIXES`` (``"torchvision"`` for ``torchvision:resnet50`` and the like:
the place where library models and transformers tasks plug in, each a function
``(name, options) -> ModuleSource``, added with ``register``). ``module_network`` turns any of
them into the ``ModuleNetwork`` the planner takes; ``is_module_model`` says, without importing
anything, whether a model name is one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .files import file_source, is_file_model
from .source import Input, ModuleError, ModuleSource


@dataclass(frozen=True)
class ModuleOptions:
    """What the command line gives a module source: --arg, --input, --loss and the sizes' --set values."""

    arguments: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[Input, ...] = ()
    loss: str | None = None
    sizes: Mapping[str, int] = field(default_factory=dict)
    config: Mapping[str, Any] | None = None  # a diffusers model's --config FILE.json


Resolver = Callable[[str, ModuleOptions], ModuleSource]
# prefix -> the resolver of "prefix:NAME" models (torchvision, timm, diffusers, transformers tasks: see above)
PREFIXES: dict[str, Resolver] = {}


def register(prefix: str, resolver: Resolver) -> None:
    """Make ``prefix:NAME`` models resolve through ``resolver`` (a library's models)."""
    PREFIXES[prefix] = resolver


def _prefix(model: str) -> str | None:
    head, sep, rest = model.partition(":")
    return head if sep and rest and head in PREFIXES else None


def is_module_model(model: object) -> bool:
    """Whether ``model`` names a torch module: ``PATH.py:NAME`` or a registered ``prefix:NAME``."""
    return isinstance(model, str) and (is_file_model(model) or _prefix(model) is not None)


def module_source(model: str, options: ModuleOptions | None = None) -> ModuleSource | None:
    """The ModuleSource of a module model (a user's file is imported: its code runs), else None."""
    options = options or ModuleOptions()
    if is_file_model(model):
        return file_source(model, options.arguments, options.inputs, options.loss, options.sizes, check=False)
    prefix = _prefix(model)
    if prefix is not None:
        return PREFIXES[prefix](model.partition(":")[2], options)
    return None


def module_network(model: str | ModuleSource, options: ModuleOptions | None = None) -> Any:
    """The ModuleNetwork of a module model or source (probed on the meta device, or from the cache)."""
    from .network import module_network as network_of

    source = model if isinstance(model, ModuleSource) else module_source(model, options)
    if source is None:
        from ...core.errors import UnknownNameError

        raise UnknownNameError(f"{model!r} is not a torch module (PATH.py:NAME or one of "
                               f"{', '.join(p + ':' for p in PREFIXES) or 'no prefixes'})")
    return network_of(source)


def with_sizes(source: ModuleSource, sizes: Mapping[str, int], loss: str | None = None) -> ModuleSource:
    """``source`` with --set values over its default sizes (each an input size of it) and --loss over its loss."""
    names = source.size_names
    for key, value in sizes.items():
        if key not in names:
            raise ModuleError(f"{source.label}: {key!r} is not an input size of this model (its sizes: "
                              f"{', '.join(names) or 'none'})")
        if type(value) is not int or value < 1:
            raise ModuleError(f"{source.label}: size {key}={value!r} must be a positive integer")
    if not sizes and loss is None:
        return source
    return replace(source, sizes={**source.sizes, **sizes}, loss=loss if loss is not None else source.loss)


def _library(prefix: str) -> Resolver:
    """The resolver of ``prefix:NAME`` library models (torchvision, timm, diffusers), imported when used."""

    def resolve(name: str, options: ModuleOptions) -> ModuleSource:
        from . import cache, stored
        from .libraries import library_builder, library_source

        if options.inputs:
            raise ModuleError(f"--input applies to a PATH.py:NAME model; {prefix}:{name} takes its library's "
                              "inputs (their sizes with --set NAME=N)")
        key = cache.key("source", prefix, name, dict(options.arguments), options.config,
                        cache.package_version(prefix), cache.package_version("torch"))
        source = stored.cached_source(key, lambda: library_source(prefix, name, options.arguments, options.config),
                                      lambda _task: library_builder(prefix, name))
        return with_sizes(source, options.sizes, options.loss)

    return resolve


for _library_name in ("torchvision", "timm", "diffusers"):
    register(_library_name, _library(_library_name))


def sizes_from(items: Sequence[tuple[str, int]]) -> dict[str, int]:
    """--set pairs as input sizes."""
    return dict(items)
