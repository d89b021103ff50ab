"""Sizes, units and validated inputs."""

import pytest
import sympy

from symbolic.core.units import SizeError, format_bytes, format_count, parse_size
from symbolic.core.values import ValueProblem, bind, parse_number, validate


@pytest.mark.parametrize("text,expected", [
    ("16GiB", 16 * 2**30), ("80GB", 80 * 10**9), ("8e10", 80_000_000_000), ("80 GiB", 80 * 2**30),
    ("1.5GiB", 3 * 2**29), ("512MiB", 2**29), ("1234", 1234), ("2TB", 2 * 10**12), ("64kB", 64_000),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "16XB", "-1GiB", "0", "1e99", "1.5", "16 Gi B", "1/2GiB", "nan"])
def test_parse_size_rejects(text):
    with pytest.raises(SizeError):
        parse_size(text)


def test_format_bytes_uses_iec_labels():
    assert format_bytes(134_299_648) == "128.08 MiB"
    assert format_bytes(16 * 2**30) == "16.00 GiB"
    assert format_bytes(512) == "512 B"
    assert format_count(124_439_808) == "124,439,808"


def test_parse_number_exact():
    assert parse_number("0.5") == sympy.Rational(1, 2)
    assert parse_number("1/2") == sympy.Rational(1, 2)
    assert parse_number("1e6") == 10**6
    for bad in ["abc", "-1", "1e999", "__import__('os')", "2**10", "1/0", ""]:
        with pytest.raises(ValueProblem):
            parse_number(bad)


def test_validate_by_symbol_meaning():
    assert validate("b", "0.5") == sympy.Rational(1, 2)
    with pytest.raises(ValueProblem, match="whole number"):
        validate("B", 1.5)
    with pytest.raises(ValueProblem, match="positive"):
        validate("L", 0)
    with pytest.raises(ValueProblem):
        validate("B", True)
    with pytest.raises(ValueProblem):
        validate("B", float("nan"))


def test_bind_rejects_names_outside_the_formula():
    from symbolic.core.symbols import B, S
    assert bind({"B": 2}, [B, S], "test") == {B: 2}
    with pytest.raises(KeyError, match="did you mean 'B'"):
        bind({"BB": 2}, [B, S], "test")
