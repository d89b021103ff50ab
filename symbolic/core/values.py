"""Validated inputs: user-given values become exact SymPy numbers for known symbols only."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from numbers import Number

import sympy

from . import symbols as symtab
from .errors import UserError, quote, shorten

_NUMBER = re.compile(r"^\s*[+]?([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|[0-9]+/[0-9]+)\s*$")
MAX_VALUE = 10**30
LIMIT_TEXT = "1e30"  # MAX_VALUE as the messages write it
MAX_DIGITS = 40  # digits in a number the user writes (1e30 has 31; fractions like 1/3 need few)
MAX_EXPONENT = 99  # |e| in 1e±N: above, far outside MAX_VALUE; below, far smaller than any quantity here


class ValueProblem(UserError):
    """A value that is not a valid input for its symbol."""


def show_number(number: object) -> str:
    """A number for a message: exact when short, else its order of magnitude (never thousands of digits)."""
    value = Fraction(number) if not isinstance(number, Fraction) else number  # type: ignore[arg-type]
    if value == 0 or (abs(value.numerator) < 10**MAX_DIGITS and value.denominator < 10**MAX_DIGITS):
        return str(sympy.Rational(value.numerator, value.denominator))
    magnitude = math.log10(abs(value.numerator)) - math.log10(value.denominator)
    return f"about {'-' if value < 0 else ''}1e{magnitude:+.0f}"


def parse_number(text: str, name: str = "value") -> sympy.Rational:
    """An exact number from '768', '0.5', '1/2' or '1e6'; never evaluates the text."""
    digits = sum(ch.isdigit() for ch in text)
    if digits > MAX_DIGITS:
        raise ValueProblem(f"{name}: {quote(text)} has {digits:,} digits; numbers may have at most {MAX_DIGITS} "
                           f"(values are at most {LIMIT_TEXT})")
    match = _NUMBER.match(text)
    if not match and text.strip().startswith("-"):
        raise ValueProblem(f"{name} must be positive, got {quote(text.strip())}")
    if not match:
        raise ValueProblem(f"{name}: {quote(text)} is not a number (write e.g. 768, 0.5, 1/2 or 1e6)")
    body = match.group(1)
    if "/" in body:
        num, den = body.split("/")
        if int(den) == 0:
            raise ValueProblem(f"{name}: division by zero in {quote(text)}")
        return sympy.Rational(int(num), int(den))
    mantissa, _, exponent = body.lower().partition("e")
    if exponent and int(exponent) > MAX_EXPONENT:
        raise ValueProblem(f"{name}: {quote(text.strip())} is out of range; values are at most {LIMIT_TEXT}")
    if exponent and int(exponent) < -MAX_EXPONENT:
        raise ValueProblem(f"{name}: {quote(text.strip())} is out of range; exponents are at least e-{MAX_EXPONENT}")
    value = Fraction(mantissa) * (Fraction(10) ** int(exponent or 0))
    return sympy.Rational(value.numerator, value.denominator)


def to_number(value: object, name: str) -> sympy.Rational:
    """An exact SymPy number from an int, Fraction, float, SymPy number or numeric text."""
    if isinstance(value, bool):
        raise ValueProblem(f"{name}: {shorten(repr(value))} is not a number")
    if isinstance(value, str):
        return parse_number(value, name)
    if isinstance(value, sympy.Basic):
        if not (value.is_Number and value.is_real):
            raise ValueProblem(f"{name}: {quote(value)} is not a real number")
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
    raise ValueProblem(f"{name}: {shorten(repr(value))} is not a number")


def _from_float(value: float, name: str) -> sympy.Rational:
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueProblem(f"{name}: {value!r} is not a finite number")
    if abs(value) > MAX_VALUE:
        raise ValueProblem(f"{name}={value!r} is implausibly large: the largest value accepted is {LIMIT_TEXT}")
    # repr gives the shortest decimal that round-trips: 0.1 -> 1/10, not 3602879701896397/2**55
    return parse_number(repr(value), name) if value >= 0 else -parse_number(repr(-value), name)


def validate(name: str | sympy.Symbol, value: object) -> sympy.Rational:
    """The value for symbol ``name`` (or the symbol itself: a model's scoped one), checked against its meaning."""
    entry = symtab.info(name)
    name = entry.name
    number = to_number(value, name)
    if abs(number) > MAX_VALUE:
        raise ValueProblem(f"{name}={show_number(number)} is implausibly large: the largest value accepted is {LIMIT_TEXT}")
    if number <= 0:
        raise ValueProblem(f"{name} must be positive, got {show_number(number)}")
    if entry.integer and not number.is_Integer:
        raise ValueProblem(f"{name} counts {entry.description.split(':')[0]}; it must be a whole number, "
                           f"got {show_number(number)}")
    return number


def bind(values: Mapping[object, object], allowed: Iterable[sympy.Symbol], where: str) -> dict[sympy.Symbol, sympy.Rational]:
    """Map names or symbols to validated numbers; names outside ``allowed`` are rejected."""
    allowed_by_name = {s.name: s for s in allowed}
    out: dict[sympy.Symbol, sympy.Rational] = {}
    for key, value in values.items():
        name = key.name if isinstance(key, sympy.Symbol) else str(key)
        if name not in allowed_by_name:
            raise symtab.UnknownSymbolError(name, allowed_by_name, where)
        out[allowed_by_name[name]] = validate(allowed_by_name[name], value)
    return out


def parse_assignment(text: str) -> tuple[str, str]:
    """('B', '8') from 'B=8'; a clear error otherwise."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise ValueProblem(f"malformed assignment {quote(text)}: expected NAME=VALUE, e.g. B=8")
    return name, value
