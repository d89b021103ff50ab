"""symbolic: memory of training and serving neural networks as explicit SymPy formulas.

>>> import symbolic
>>> f = symbolic.formula("llm.params")
>>> f.evaluate(H=768, L=12, V=50000, d_ff=3072).total
123417600
"""

from __future__ import annotations

from .formula import Evaluation, Formula, Sensitivity
from .library import get as formula
from .library import keys
from .symbols import lookup as symbol
from .term import Term

__all__ = ["Evaluation", "Formula", "Sensitivity", "Term", "formula", "keys", "symbol"]
__version__ = "0.1.0"
