"""The shared entry of the torch-module child scripts (issue 29): one place for what each main did.

Without torch the child exits with ``SKIP`` (the test is skipped); otherwise the checkout is importable,
torchvision imports beside the CPU torch (``torch_env.ready``), the probes use a fresh cache folder, and
what ``produce(cache_folder)`` returns is printed as JSON for the test.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

SKIP = 77
ROOT = Path(__file__).resolve().parent.parent


def run(produce: Callable[[str], Mapping[str, Any]], *, threads: int | None = None) -> None:
    """Run ``produce`` as a child script's main: skip without torch, fresh cache, JSON on stdout."""
    try:
        import torch
    except ImportError as err:
        print(f"torch is not installed: {err}", file=sys.stderr)
        sys.exit(SKIP)
    if threads is not None:
        torch.set_num_threads(threads)  # one core: the CPU steps are small, the machine shared
    sys.path.insert(0, str(ROOT))
    from symbolic.networks import torch_env

    torch_env.ready()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SYMBOLIC_CACHE"] = tmp
        out = dict(produce(tmp))
    json.dump(out, sys.stdout)


def inductor_modules(*names: str) -> tuple[Any, ...]:
    """The named modules for a child that compiles with inductor on the CPU, torchvision made importable first; exits
    with ``SKIP`` and one line on stderr when no C++ compiler is found (inductor needs one) or a module is missing."""
    import importlib
    import shutil

    if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        print("inductor needs a C++ compiler on the CPU (g++, c++ or clang++): none found", file=sys.stderr)
        sys.exit(SKIP)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        from symbolic.networks import torch_env

        torch_env.ready()
        return tuple(importlib.import_module(name) for name in names)
    except ImportError as err:
        print(f"not importable: {err}", file=sys.stderr)
        sys.exit(SKIP)


def lean_inductor() -> None:
    """Scalar C++ and one compile thread: less compiling on a cold cache, the same buffers (checked by the children
    that use it); no pool of compile workers on a shared machine."""
    import torch._inductor.config as inductor_config

    inductor_config.cpp.vec_isa_ok = False
    inductor_config.compile_threads = 1
