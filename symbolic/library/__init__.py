"""The library of named formulas; importing it registers every source's terms."""

# Registration on import, in the order `symbolic list` shows: the two source articles first,
# then issue 4's memory terms and issue 6's measured PyTorch terms.
from . import article_a, article_b  # noqa: F401

# isort: split
from . import (  # noqa: F401
    activations,
    activations_pytorch,
    inference,
    optimizers,
    parallel,
    peak_pytorch,
    precision,
)

# isort: split
from . import flops, timing  # noqa: F401  (issue 15: time beside memory)

# isort: split
from .errata import ERRATA, Erratum, errata_for
from .registry import UnknownKeyError, get, keys

__all__ = ["ERRATA", "Erratum", "UnknownKeyError", "errata_for", "get", "keys"]
