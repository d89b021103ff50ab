"""Validated inputs: user-given values become exact SymPy numbers for known symbols only."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from numbers import Number

import sympy

from . import symbols as symtab

_NUMBER = re.compile(r"^\s*[+]?([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]{1,2})?|[0-9]+/[0-9]+)\s*$")
MAX_VALUE = 10**30


class ValueProblem(ValueError):
    """A value that is not a valid input for its symbol."""


def parse_number(text: str, name: str = "value") -> sympy.Rational:
    """An exact number from '768', '0.5', '1/2' or '1e6'; never evaluates the text."""
    match = _NUMBER.match(text)
    if not match and text.strip().startswith("-"):
        raise ValueProblem(f"{name} must be positive, got {text.strip()!r}")
    if not match:
        raise ValueProblem(f"{name}: {text!r} is not a number (write e.g. 768, 0.5, 1/2 or 1e6)")
    body = match.group(1)
    if "/" in body:
        num, den = body.split("/")
        if int(den) == 0:
            raise ValueProblem(f"{name}: division by zero in {text!r}")
        return sympy.Rational(int(num), int(den))
    mantissa, _, exponent = body.lower().partition("e")
    value = Fraction(mantissa) * (Fraction(10) ** int(exponent or 0))
    return sympy.Rational(value.numerator, value.denominator)


def to_number(value: object, name: str) -> sympy.Rational:
    """An exact SymPy number from an int, Fraction, float, SymPy number or numeric text."""
    if isinstance(value, bool):
        raise ValueProblem(f"{name}: {value!r} is not a number")
    if isinstance(value, str):
        return parse_number(value, name)
    if isinstance(value, sympy.Basic):
        if not (value.is_Number and value.is_real):
            raise ValueProblem(f"{name}: {value} is not a real number")
        if value.is_Float:
            return _from_float(float(value), name)
        return sympy.Rational(value)
    if isinstance(value, float):
        return _from_float(value, name)
    if isinstance(value, (int, Fraction)):
        value = Fraction(value)
        return sympy.Rational(value.numerator, value.denominator)
    if isinstance(value, Number):
        return _from_float(float(value), name)  # numpy scalars and the like
    raise ValueProblem(f"{name}: {value!r} is not a number")


def _from_float(value: float, name: str) -> sympy.Rational:
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueProblem(f"{name}: {value!r} is not a finite number")
    # repr gives the shortest decimal that round-trips: 0.1 -> 1/10, not 3602879701896397/2**55
    return parse_number(repr(value), name) if value >= 0 else -parse_number(repr(-value), name)


def validate(name: str, value: object) -> sympy.Rational:
    """The value for symbol ``name``, checked against the symbol's meaning."""
    entry = symtab.info(name)
    number = to_number(value, name)
    if number <= 0:
        raise ValueProblem(f"{name} must be positive, got {number}")
    if entry.integer and not number.is_Integer:
        raise ValueProblem(f"{name} counts {entry.description.split(':')[0]}; it must be a whole number, got {number}")
    if abs(number) > MAX_VALUE:
        raise ValueProblem(f"{name}={number} is implausibly large")
    return number


def bind(values: Mapping[object, object], allowed: Iterable[sympy.Symbol], where: str) -> dict[sympy.Symbol, sympy.Rational]:
    """Map names or symbols to validated numbers; names outside ``allowed`` are rejected."""
    allowed_by_name = {s.name: s for s in allowed}
    out: dict[sympy.Symbol, sympy.Rational] = {}
    for key, value in values.items():
        name = key.name if isinstance(key, sympy.Symbol) else str(key)
        if name not in allowed_by_name:
            raise symtab.UnknownSymbolError(name, allowed_by_name, where)
        out[allowed_by_name[name]] = validate(name, value)
    return out


def parse_assignment(text: str) -> tuple[str, str]:
    """('B', '8') from 'B=8'; a clear error otherwise."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise ValueProblem(f"malformed assignment {text!r}: expected NAME=VALUE, e.g. B=8")
    return name, value
