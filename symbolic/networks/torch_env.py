"""Make an installed torchvision importable beside a CPU torch whose build its operators do not match.

The package index's torchvision 0.28.0 is a CUDA build: its compiled operators (``_C.so``) do not
load beside the CPU torch 2.13.0, and its import then fails on registering fake kernels for two
operators that were never declared (``torchvision::nms``, ``torchvision::qnms``); transformers
and diffusers import torchvision and fail with it. ``ready()`` tries torchvision's own operator
library first and, only where it does not load, declares those two schemas with
``torch.library``, so that the Python parts of torchvision (models, transforms) import; the
operators themselves (box NMS) stay unavailable, and nothing here calls them. Without
torchvision installed it does nothing. ``install()`` defers the same to just before torchvision is
first imported (a finder on ``sys.meta_path`` that wraps torchvision's loader), for scripts that
import transformers themselves (the tests' reference and child scripts, the benchmarks): it imports
nothing until then.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import io
import logging
import sys
from collections.abc import Iterator
from functools import lru_cache
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

# The operators torchvision's fake-kernel registrations need declared (torchvision 0.28.0,
# torchvision/_meta_registrations.py; their schemas as torchvision/csrc/ops/nms.cpp declares them).
SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_LIBRARIES: list[object] = []  # the declaring torch.library.Library, kept alive for the process


@lru_cache(maxsize=1)
def ready() -> bool:
    """Prepare torchvision's import once per process; True when its compiled operators are loaded."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    import torch

    if all(torch._C._jit_get_schemas_for_operator(f"torchvision::{op}") for op in SCHEMAS):
        return True
    folder = Path(next(iter(spec.submodule_search_locations)))
    for library in sorted(folder.glob("_C*.so")) + sorted(folder.glob("_C*.pyd")):
        try:
            torch.ops.load_library(str(library))
            return True
        except (OSError, RuntimeError):
            break
    declared = torch.library.Library("torchvision", "FRAGMENT")
    for op, schema in SCHEMAS.items():
        if not torch._C._jit_get_schemas_for_operator(f"torchvision::{op}"):
            declared.define(schema)
    _LIBRARIES.append(declared)
    return False


class _ReadyFirst(importlib.abc.Loader):
    """torchvision's own loader, with ``ready()`` run just before the package executes."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        ready()
        self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:  # resource readers and the rest: the real loader's
        return getattr(self._loader, name)


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    """Finds torchvision as the other finders do, with a loader that runs ``ready()`` first.

    Only executing the package runs it: looking for torchvision (``importlib.util.find_spec``, as
    transformers does to see whether it is installed) imports nothing.
    """

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name != "torchvision":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and not isinstance(spec.loader, _ReadyFirst):
                    spec.loader = _ReadyFirst(spec.loader)
                return spec
        return None


def install() -> None:
    """Have ``ready()`` run just before torchvision is first imported (idempotent; imports nothing now)."""
    if not any(isinstance(f, _BeforeTorchvision) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeTorchvision())


@contextlib.contextmanager
def quiet_imports() -> Iterator[None]:
    """Imports of torch's neighbours kept quiet (bitsandbytes logs its missing CPU kernels, transformers' quantizers
    bring torchao's), with torchvision made importable first (``ready``)."""
    ready()
    quiet = io.StringIO()
    level = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            yield
    finally:
        logging.disable(level)
