"""symbolic: memory of training and serving neural networks as explicit SymPy formulas.

>>> import symbolic
>>> f = symbolic.formula("llm.params")
>>> f.evaluate(H=768, L=12, V=50000, d_ff=3072).total
123417600
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported on first use (SymPy takes a while): ``import symbolic`` stays light,
    from .formula import Evaluation, Formula, Sensitivity  # so the CLI can handle Ctrl-C from the start
    from .symbols import lookup as symbol
    from .term import Term


class _Package(types.ModuleType):
    """This package's module type: importing the submodule ``symbolic.formula`` keeps the function ``formula``."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "formula" and isinstance(value, types.ModuleType):
            return  # the import system binds each submodule on its package; this name is the function's
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

_LAZY = {"Evaluation": ("formula", "Evaluation"), "Formula": ("formula", "Formula"),
         "Sensitivity": ("formula", "Sensitivity"), "symbol": ("symbols", "lookup"), "Term": ("term", "Term"),
         "sweep": ("sweeps", "sweep"), "init_printing": ("display", "init_printing")}


# The library builds every formula's expressions when it is imported (and SymPy's first sum
# imports sympy.tensor and sympy.combinatorics): it loads on the first lookup, not on
# ``import symbolic`` (see "Performance" in the README).
def formula(key: str) -> Formula:
    """The formula with this key, e.g. ``formula("llm.peak")``."""
    from .library import get

    return get(key)


def keys() -> list[str]:
    """Every formula key, in registration order."""
    from .library import keys as library_keys

    return library_keys()


def __getattr__(name: str) -> object:
    """Submodules on first use (``symbolic.library``, ``symbolic.compiled``, ...), PEP 562."""
    import importlib

    if name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
        globals()[name] = value
        return value
    if not name.startswith("_"):
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["Evaluation", "Formula", "Sensitivity", "Term", "formula", "keys", "symbol"]
__version__ = "0.1.0"
