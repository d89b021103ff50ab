"""The library of named formulas; importing it registers every source's terms."""

from . import article_a, article_b  # noqa: F401  (registration on import)
from .errata import ERRATA, Erratum, errata_for
from .registry import UnknownKeyError, get, keys

__all__ = ["ERRATA", "Erratum", "UnknownKeyError", "errata_for", "get", "keys"]
