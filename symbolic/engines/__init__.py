"""Serving engines' memory rules: the same model on torch, vLLM, SGLang or llama.cpp (issue 27).

Each engine is one module with ``NAME``, ``VERSION`` (the release and commit whose source its rules
are read from), ``FLAGS`` (its own flags, as its CLI names them) and ``serve(setup) -> ServePlan``.
``serve`` here resolves the question once (``setup.make_setup``) and dispatches. Importing this package
is light (the command line does it for every command): the flags are data (``flag_table``), and the
engines' rules, the planner and the networks are imported when a question is asked::

    from symbolic.engines import serve
    plan = serve("gpt-oss-120b", engine="vllm", gpu="h200", seq=32768, gpu_memory_utilization=0.9)
    plan.kv_cache_tokens, plan.max_concurrency, plan.as_dict(), plan.to_frame()
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from ..core.errors import UnknownNameError
from .flag_table import TABLES
from .flags import EngineFlagError, Flag, check_flags

if TYPE_CHECKING:  # pragma: no cover
    from .result import ServePlan
    from .setup import ServeSetup

ENGINES = ("torch", "vllm", "sglang", "llamacpp")
_MODULES = {"torch": "pytorch", "vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp"}

__all__ = ["ENGINES", "ServePlan", "ServeSetup", "engine_module", "flag_tables", "serve"]


def engine_module(name: str) -> ModuleType:
    """The module of the engine called ``name``; a one-line error naming the engines otherwise."""
    if name not in _MODULES:
        raise UnknownNameError(f"unknown engine {name!r}; choose from {', '.join(ENGINES)}")
    return importlib.import_module(f"{__name__}.{_MODULES[name]}")


def flag_tables() -> dict[str, tuple[Flag, ...]]:
    """Every engine's own flags: engine name -> its FLAGS (data only: no engine module is imported)."""
    return {name: TABLES[name] for name in ENGINES}


def __getattr__(name: str) -> object:
    """``ServePlan`` and ``ServeSetup``, imported when first asked for (they import the networks)."""
    if name == "ServePlan":
        from .result import ServePlan

        return ServePlan
    if name == "ServeSetup":
        from .setup import ServeSetup

        return ServeSetup
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# the fraction of the GPU each engine takes by its own flag (the torch engine takes gpu_fraction)
OWN_FRACTION = {"vllm": "gpu_memory_utilization", "sglang": "mem_fraction_static"}


def serve(model: object, engine: str = "torch", gpu: object = "h100-80gb", *, weights: str | None = None,
          kv_dtype: str | None = None, tp: int = 1, pp: int = 1, seq: int | None = None, batch: int | None = None,
          gpu_fraction: object = None, reserve: object = None, **options: object) -> ServePlan:
    """Serve ``model`` with ``engine`` on ``gpu``: the weights, the KV pool, concurrency at ``seq``, context at ``batch``.

    ``options`` are the engine's own flags by their Python names (``gpu_memory_utilization=0.9``,
    ``n_gpu_layers=40``); one that the engine does not take is a one-line error. ``gpu_fraction``
    and ``reserve`` (``catalogs.budget.make_budget``'s) shape the torch engine's budget; the other
    engines size theirs by their own flags.
    """
    from .setup import make_setup

    module = engine_module(engine)
    given = {k: v for k, v in options.items() if v is not None}
    check_flags(engine, given, flag_tables())
    if gpu_fraction is not None or reserve:
        gpu = _budget(engine, gpu, gpu_fraction, reserve)
    setup = make_setup(model, engine, gpu, weights=weights, kv_dtype=kv_dtype, tp=tp, pp=pp, seq=seq, batch=batch,
                       options=given)
    return module.serve(setup)


def _budget(engine: str, gpu: object, fraction: object, reserve: object) -> object:
    """The torch engine's budget with a fraction and reservations; another engine's is refused in one line."""
    from ..catalogs.budget import make_budget

    if engine != "torch":
        what = "gpu_fraction" if fraction is not None else "reserve"
        own = OWN_FRACTION.get(engine)
        instead = f"; its own fraction is {own}" if own else ""
        raise EngineFlagError(f"{what} is the torch engine's budget, not {engine}'s{instead}")
    return make_budget(gpu, 1 if fraction is None else fraction, reserve)  # type: ignore[arg-type]
