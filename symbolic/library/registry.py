"""The catalogue of named formulas: every term and total is reachable by its key."""

from __future__ import annotations

from ..core.errors import UnknownNameError, quote
from ..core.symbols import suggest
from ..math.formula import Formula

_FORMULAS: dict[str, Formula] = {}


class UnknownKeyError(UnknownNameError, KeyError):
    """A formula key that does not exist."""

    def __init__(self, key: str) -> None:
        self.message = f"unknown formula {quote(key)}{suggest(key, _FORMULAS)}; 'symbolic list' shows them all"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


def register(formula: Formula) -> Formula:
    """Add a formula under its key (keys are unique)."""
    if formula.key in _FORMULAS:
        raise ValueError(f"formula key {formula.key!r} registered twice")
    _FORMULAS[formula.key] = formula
    return formula


def get(key: str) -> Formula:
    """The formula with this key."""
    try:
        return _FORMULAS[key]
    except KeyError:
        raise UnknownKeyError(key) from None


def keys() -> list[str]:
    """All keys, in registration order (grouped by source)."""
    return list(_FORMULAS)
