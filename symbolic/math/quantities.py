"""Budgets and results as sizes: "80GiB" strings and pint quantities (pint stays optional).

``budget`` takes what the CLI takes ("80GiB", "80GB", "8e10") and, when pint is installed,
a pint Quantity of information ("80 GiB"); ``quantity`` returns a result as one. pint's units
convert to ``float`` (``float(ureg.byte)`` is 8.0: a byte is 8 bits), so SymPy's numbers would
silently turn ``total * ureg.byte`` into a Float eight times too large; ``register`` makes SymPy
refuse pint objects instead, so the product is a pint Quantity with the exact magnitude.
"""

from __future__ import annotations

import importlib
import sys
from fractions import Fraction
from typing import Any

import sympy

from ..core import values as vals
from ..core.errors import UserError, quote
from ..core.units import parse_size

_REGISTERED: set[type] = set()


def _is_pint(value: object) -> bool:
    """A pint Quantity or Unit (duck-typed on pint's own base class, never importing pint)."""
    return any(c.__module__.split(".")[0] == "pint" for c in type(value).__mro__[:-1])


def budget(value: object, unit: str = "bytes") -> sympy.Rational:
    """An exact budget from a number, numeric text, a size string ("80GiB") or a pint Quantity."""
    if isinstance(value, str) and unit == "bytes" and any(ch.isalpha() and ch not in "eE" for ch in value):
        return sympy.Integer(parse_size(value))
    if _is_pint(value):
        return _from_pint(value, unit)
    return vals.to_number(value, "budget")


def _from_pint(value: Any, unit: str) -> sympy.Rational:
    """Bytes (or a plain count) of a pint Quantity, exactly when its magnitude is exact."""
    register()
    target = "byte" if unit == "bytes" else "dimensionless"
    try:
        converted = value.to(target)
    except Exception as err:  # pint's DimensionalityError and friends: a unit that is not a size
        raise UserError(f"budget {quote(str(value))} is not in {target}s: {err}") from None
    magnitude = converted.magnitude
    if isinstance(magnitude, sympy.Basic):
        return vals.to_number(magnitude, "budget")
    if isinstance(magnitude, float):
        exact = Fraction(magnitude).limit_denominator(1)
        if abs(float(exact) - magnitude) <= 1e-9 * abs(magnitude):
            return sympy.Integer(int(exact))
    return vals.to_number(magnitude, "budget")


def registry(given: object = None) -> Any:
    """The pint UnitRegistry to use: the one given, else pint's application registry (needs pint)."""
    if given is not None:
        return given
    try:
        pint = importlib.import_module("pint")
    except ModuleNotFoundError:
        from ..text.display import MissingOptional

        raise MissingOptional("quantity() needs pint: pip install pint") from None
    register()
    return pint.get_application_registry()


def quantity(value: sympy.Expr, unit: str, given: object = None) -> Any:
    """``value`` as a pint Quantity: bytes, or dimensionless for counts; int/Fraction magnitude."""
    reg = registry(given)
    register()
    number = Fraction(int(value.p), int(value.q)) if value.is_Rational else float(value)
    if isinstance(number, Fraction) and number.denominator == 1:
        number = int(number)
    return reg.Quantity(number, "byte" if unit == "bytes" else "dimensionless")


def register() -> None:
    """Make SymPy refuse to convert pint objects (so ``Integer * ureg.byte`` is a pint Quantity, not a Float)."""
    pint = sys.modules.get("pint")
    if pint is None:
        return
    from sympy.core.sympify import SympifyError, converter

    base = pint.util.SharedRegistryObject
    if base in _REGISTERED:
        return

    def refuse(value: object) -> sympy.Basic:
        raise SympifyError(value, "a pint quantity is not a SymPy number; use result.quantity()")

    converter[base] = refuse
    _REGISTERED.add(base)


register()  # when pint is already imported; quantity() and budgets register it on first use too
