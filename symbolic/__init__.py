"""symbolic: memory of training and serving neural networks as explicit SymPy formulas.

>>> import symbolic
>>> f = symbolic.formula("llm.params")
>>> f.evaluate(H=768, L=12, V=50000, d_ff=3072).total
123417600
"""

from __future__ import annotations

from .formula import Evaluation, Formula, Sensitivity
from .symbols import lookup as symbol
from .term import Term


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

    if not name.startswith("_"):
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["Evaluation", "Formula", "Sensitivity", "Term", "formula", "keys", "symbol"]
__version__ = "0.1.0"
