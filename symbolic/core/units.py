"""Byte sizes: IEC formatting (GiB is 2**30, never labelled GB) and parsing of budgets."""

from __future__ import annotations

import re
from fractions import Fraction
from numbers import Rational as _Rational

from .errors import UserError, quote

IEC = (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
SI = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))

_MULTIPLIERS = {
    "": 1, "b": 1,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:[eE][+]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
MAX_BYTES = 2**80
MAX_SIZE_TEXT = 64  # characters: '80 GiB' needs 6; longer text is never a size


class SizeError(UserError):
    """A malformed or out-of-range size."""


def parse_size(text: str, flag: str | None = None) -> int:
    """Bytes from '80GiB', '80GB', '80 GiB', '8e10' or '1234'; whole bytes only.

    GiB/MiB/KiB/TiB are powers of two, GB/MB/kB/TB powers of ten, as their names say. With
    ``flag`` (the command line's ``--budget``), a number without a unit is refused: "80" there is
    far more often a slip for 80GiB than a budget of 80 bytes, so bytes must be written "80B".
    Python callers pass no ``flag``: a bare number is bytes, as everywhere in the API.
    """
    value = exact_size(text, flag)
    if value.denominator != 1:
        raise SizeError(f"size {quote(text)} is not a whole number of bytes")
    return int(value)


def floor_size(text: str, flag: str | None = None) -> tuple[int, str]:
    """Whole bytes from a size, rounded down, and a note saying so when it was not whole ("" when it was).

    '20.24GiB' is 21,732,534,517.76 bytes: a capacity can be given as a GPU's tools print it, and
    the fraction of a byte dropped (never more than a budget holds). Less than one byte is refused.
    """
    value = exact_size(text, flag)
    whole = value.numerator // value.denominator
    if whole < 1:
        raise SizeError(f"size {quote(text)} is less than one byte")
    if value.denominator == 1:
        return whole, ""
    number, unit = _SIZE.match(text).groups()  # type: ignore[union-attr]  (exact_size matched it)
    shown = f"{number} {unit}".strip()
    return whole, f"{shown} is {exact_decimal_text(value)} bytes; rounded down to {whole:,}"


def exact_size(text: str, flag: str | None = None) -> Fraction:
    """The exact number of bytes a size names (a fraction of a byte kept), checked: positive, at most 2**80."""
    shown = quote(text)
    if len(text) > MAX_SIZE_TEXT:
        raise SizeError(f"size {shown} is too long: sizes are at most {MAX_SIZE_TEXT} characters, e.g. 80GiB")
    match = _SIZE.match(text)
    if not match:
        raise SizeError(f"malformed size {shown}: expected a number with an optional unit, e.g. 80GiB, 80GB or 8e10")
    number, unit = match.groups()
    if flag is not None and not unit:
        raise SizeError(no_unit_message(flag, number))
    multiplier = _MULTIPLIERS.get(unit.lower())
    if multiplier is None:
        raise SizeError(f"unknown unit {quote(unit)} in {shown}: use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB")
    value = _exact_decimal(number) * multiplier
    if value <= 0:
        raise SizeError(f"size {shown} must be positive")
    if value > MAX_BYTES:
        raise SizeError(f"size {shown} is implausibly large: the largest size accepted is 2**80 bytes (1 YiB)")
    return value


def exact_decimal_text(value: Fraction) -> str:
    """'21,732,534,517.76': an exact number whose denominator has only the factors 2 and 5, in full."""
    whole, rest = divmod(value, 1)
    digits = ""
    while rest and len(digits) < MAX_SIZE_TEXT:  # decimal sizes end within a few dozen digits
        rest *= 10
        digit, rest = divmod(rest, 1)
        digits += str(digit)
    return f"{int(whole):,}" + (f".{digits}" if digits else "") + ("…" if rest else "")


def no_unit_message(what: str, number: str) -> str:
    """The one-line refusal of a size without a unit: '--budget 80 has no unit: did you mean 80GiB or 80GB? ...'."""
    return f"{what} {number} has no unit: did you mean {number}GiB or {number}GB? (write {number}B for bytes)"


def is_size(text: str) -> bool:
    """Whether ``text`` reads as a size (a number with an optional unit), e.g. '80GiB', '80 GB', '80'."""
    match = _SIZE.match(text) if len(text) <= MAX_SIZE_TEXT else None
    return match is not None and match.group(2).lower() in _MULTIPLIERS


def _exact_decimal(text: str) -> Fraction:
    mantissa, _, exponent = text.lower().partition("e")
    value = Fraction(mantissa)
    if exponent:
        exp = int(exponent)
        if exp > 30:
            raise SizeError(f"exponent in {quote(text)} is too large: at most e30")
        value *= 10**exp
    return value


def format_bytes(value: int | float | _Rational, digits: int = 2) -> str:
    """'128.08 MiB' style text with the IEC unit that keeps the number at least 1.

    Exact values (ints, fractions) are divided exactly, so totals beyond a float's range
    still print (in EiB); irrational SymPy values are rounded to a float first.
    """
    number = _exact(value)
    sign = "-" if number < 0 else ""
    number = abs(number)
    for label, size in IEC:
        if number >= size:
            return f"{sign}{_decimal(number / size, digits)} {label}"
    if number == int(number):
        return f"{sign}{int(number)} B"
    return f"{sign}{_decimal(number, digits)} B"


def _exact(value: object) -> Fraction | float:
    """A Fraction for exact numbers; a float for floats and irrational SymPy numbers."""
    if isinstance(value, float):
        return value
    try:
        return Fraction(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float(value)  # type: ignore[arg-type]


def _decimal(value: Fraction | float, digits: int) -> str:
    if isinstance(value, float):
        return f"{value:,.{digits}f}" if value >= 1e15 else f"{value:.{digits}f}"
    scaled = round(value * 10**digits)
    whole, frac = divmod(scaled, 10**digits)
    text = f"{whole:,}" if whole >= 10**15 else str(whole)
    return f"{text}.{frac:0{digits}d}" if digits else text


def format_si_bytes(value: int | float | _Rational, digits: int = 2) -> str:
    """'493.67 MB' style text in decimal units, for comparing with sources that use them."""
    number = float(value)
    for label, size in SI:
        if abs(number) >= size:
            return f"{number / size:.{digits}f} {label}"
    return f"{number:.{digits}f} B"


def format_count(value: int | float | _Rational) -> str:
    """'124,439,808' for whole counts; grouped with two decimals otherwise (irrational ones too)."""
    number = _exact(value)
    if isinstance(number, Fraction) and number.denominator == 1:
        return f"{int(number):,}"
    return f"{float(number):,.2f}"


def short_count(value: int) -> str:
    """'8.03 B', '124.44 M' or the plain number."""
    for label, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if value >= size:
            return f"{value / size:.2f} {label}"
    return str(value)
