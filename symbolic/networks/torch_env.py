"""Make an installed torchvision importable beside a CPU torch whose build its operators do not match.

The package index's torchvision 0.28.0 is a CUDA build: its compiled operators (``_C.so``) do not
load beside the CPU torch 2.13.0, and its import then fails on registering fake kernels for two
operators that were never declared (``torchvision::nms``, ``torchvision::qnms``); transformers
and diffusers import torchvision and fail with it. ``ready()`` tries torchvision's own operator
library first and, only where it does not load, declares those two schemas with
``torch.library``, so that the Python parts of torchvision (models, transforms) import; the
operators themselves (box NMS) stay unavailable, and nothing here calls them. Without
torchvision installed it does nothing.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

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
