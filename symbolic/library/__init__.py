"""The library of named formulas; importing it registers every source's terms."""

# Registration on import: the two articles; issue 4's memory terms (activations, inference,
# optimizers, parallel, precision); issue 6's measured PyTorch terms (activations_pytorch, peak_pytorch).
from . import (  # noqa: F401
    activations,
    activations_pytorch,
    article_a,
    article_b,
    inference,
    optimizers,
    parallel,
    peak_pytorch,
    precision,
)
from .errata import ERRATA, Erratum, errata_for
from .registry import UnknownKeyError, get, keys

__all__ = ["ERRATA", "Erratum", "UnknownKeyError", "errata_for", "get", "keys"]
