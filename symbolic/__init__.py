"""symbolic: memory of training and serving neural networks as explicit SymPy formulas.

>>> import symbolic
>>> f = symbolic.formula("llm.params")
>>> f.evaluate(H=768, L=12, V=50000, d_ff=3072).total
123417600
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# imported on first use (SymPy takes a while): ``import symbolic`` stays light, so the CLI can
# handle Ctrl-C from the start
if TYPE_CHECKING:
    from collections.abc import Mapping

    from .core.symbols import lookup as symbol
    from .core.term import Term
    from .engines import ServePlan
    from .math.formula import Evaluation, Formula, Sensitivity
    from .math.sweeps import Sweep


_LAZY = {"Evaluation": ("math.formula", "Evaluation"), "Formula": ("math.formula", "Formula"),
         "Sensitivity": ("math.formula", "Sensitivity"), "symbol": ("core.symbols", "lookup"),
         "Term": ("core.term", "Term"), "ServePlan": ("engines.result", "ServePlan"),
         "init_printing": ("text.display", "init_printing"), "UserError": ("core.errors", "UserError")}

# Modules the documented Python API names at the top level, where they live now.
_MODULES = {"architectures": "networks.transformer"}

# The library builds every formula's expressions when it is imported (and SymPy's first sum
# imports sympy.tensor and sympy.combinatorics): it loads on the first lookup, not on
# ``import symbolic`` (see "Performance" in the README).
def formula(key: str) -> Formula:
    """The formula with this key, e.g. ``formula("llm.peak")``."""
    from .library import get

    return get(key)


def sweep(formula: Formula | str, grid: Mapping[str, object], values: Mapping[object, object] | None = None, /,
          **fixed: object) -> Sweep:
    """Each term and the total of a formula (or a formula's key) at every point of ``grid``; see ``math.sweeps``."""
    from .library import get
    from .math.sweeps import sweep as sweep_formula

    return sweep_formula(get(formula) if isinstance(formula, str) else formula, grid, values, **fixed)


def serve(model: object, engine: str = "torch", gpu: object = "h100-80gb", /, **options: object) -> ServePlan:
    """``model`` served by ``engine`` on ``gpu``: weights, KV pool, concurrency at ``seq``; see ``engines.serve``."""
    from .engines import serve as serve_model

    return serve_model(model, engine, gpu, **options)  # type: ignore[arg-type]


def keys() -> list[str]:
    """Every formula key, in registration order."""
    from .library import keys as library_keys

    return library_keys()


def __getattr__(name: str) -> object:
    """Submodules on first use (``symbolic.library``, ``symbolic.math.compiled``, ...), PEP 562."""
    import importlib

    if name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
        globals()[name] = value
        return value
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{_MODULES[name]}")
    if not name.startswith("_"):
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["Evaluation", "Formula", "Sensitivity", "ServePlan", "Term", "UserError", "formula", "keys", "serve", "sweep",
           "symbol"]
__version__ = "0.1.0"
