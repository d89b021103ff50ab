"""Compiled formulas: the same exact numbers as ``evaluate()``, over arrays, with safe fallbacks."""

import warnings
import zlib
from fractions import Fraction

import numpy as np
import pytest
import sympy

import symbolic
from symbolic.core.symbols import B, H, L, N, S, a, b, p
from symbolic.core.term import Term
from symbolic.math import compiled
from symbolic.math.formula import Formula

GPT2_LIKE = {"H": 768, "L": 12, "V": 50000, "d_ff": 3072}
RUN = {**GPT2_LIKE, "S": 1024, "D": 1024}


def exact(value: object) -> Fraction:
    """Any exact number (SymPy, int, Fraction, NumPy int) as a Fraction."""
    if isinstance(value, sympy.Basic):
        return Fraction(int(value.p), int(value.q))
    if isinstance(value, np.generic):
        value = value.item()
    assert not isinstance(value, float), f"inexact value {value!r}"
    return Fraction(value)


def custom(expr: sympy.Expr, key: str = "test.custom") -> Formula:
    return Formula(key, "a test formula", (Term("x", "x", expr, "bytes", "test"),), source="test")


def test_peak_matches_evaluate_on_random_points():
    f = symbolic.formula("llm.peak")
    rng = np.random.default_rng(7)
    n = 40
    values = {"B": rng.integers(1, 512, n), "S": rng.integers(1, 32768, n), "D": rng.integers(1, 32768, n),
              "H": rng.integers(1, 16384, n), "L": rng.integers(1, 128, n), "V": rng.integers(1, 256000, n),
              "d_ff": rng.integers(1, 65536, n)}
    totals = f.compile()(values)
    assert totals.dtype == np.int64 and totals.shape == (n,)
    for i in range(n):
        point = {k: int(v[i]) for k, v in values.items()}
        assert totals[i] == f.evaluate(point).total


def test_readme_example_and_scalars():
    totals = symbolic.formula("llm.peak").compile()(B=np.array([1, 8]), **RUN)
    assert totals.tolist() == [2669142016, 7530364928]
    one = symbolic.formula("llm.peak").compile()(B=8, **RUN)
    assert one.shape == () and one.dtype == np.int64 and int(one) == 7530364928


@pytest.mark.parametrize("key", symbolic.keys())
def test_every_library_formula_matches_evaluate(key):
    f = symbolic.formula(key)
    fn = f.compile()
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    points = []
    for _ in range(3):
        point: dict[str, object] = {}
        for name in fn.inputs:
            if symbolic.core.symbols.info(name).integer:
                point[name] = int(rng.integers(1, 5000))
            else:
                point[name] = [Fraction(1, 2), Fraction(1), Fraction(2), Fraction(4), Fraction(3, 8)][rng.integers(5)]
        if "L_swa" in point:  # sliding layers are some of the L layers: more would make a term negative (an error)
            point["L_swa"] = min(point["L_swa"], point["L"])
        points.append(point)
    arrays = {n: np.array([pt[n] for pt in points], dtype=object) for n in fn.inputs}
    roots = any(isinstance(x, sympy.Pow) and not x.exp.is_Integer for x in sympy.preorder_traversal(fn.expr))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", compiled.ApproximateWarning)
        totals = np.broadcast_to(fn(arrays), (3,))  # a formula without inputs gives one value
    assert bool(caught) == roots  # only square roots and the like leave exact arithmetic
    for i, point in enumerate(points):
        want = f.evaluate({k: str(v) for k, v in point.items()}).total
        if roots:
            assert totals[i] == pytest.approx(float(want), rel=1e-12)
        else:
            assert exact(totals[i]) == exact(want)


def test_rational_input_is_never_truncated():
    weights = symbolic.formula("llm.weights")
    fn = weights.compile()
    odd = {"H": 769, "L": 12, "V": 50001, "d_ff": 3072}  # an odd parameter count
    want = exact(weights.evaluate({**odd, "b": "1/2"}).total)
    assert want.denominator == 2
    for half in (Fraction(1, 2), 0.5, np.array([0.5]), sympy.Rational(1, 2)):
        got = fn(**odd, b=half)
        assert got.dtype == object and exact(np.asarray(got).reshape(-1)[0]) == want
    # a whole total stays int64 even with b = 1/2
    assert fn(**GPT2_LIKE, b=0.5).dtype == np.int64 and int(fn(**GPT2_LIKE, b=0.5)) == 61708800


def test_decimal_floats_read_as_their_decimal():
    fn = symbolic.formula("llm.weights").compile()
    got = fn(**GPT2_LIKE, b=np.array([0.1, 0.3, 2.5]))
    want = [symbolic.formula("llm.weights").evaluate({**GPT2_LIKE, "b": v}).total for v in ("0.1", "0.3", "2.5")]
    assert [exact(x) for x in got] == [exact(w) for w in want]


def test_rational_coefficients_and_division_are_exact():
    f = custom(N * sympy.Rational(3, 4) + B * H / a + sympy.Rational(1, 3) * S)
    fn = f.compile()
    values = {"N": np.array([4, 5, 7]), "B": 3, "H": np.array([768, 770, 771]), "a": 12, "S": np.array([3, 4, 5])}
    got = fn(values)
    for i in range(3):
        point = {k: (int(v[i]) if np.ndim(v) else v) for k, v in values.items()}
        assert exact(got[i]) == exact(f.evaluate(point).total)
    assert fn(N=4, B=1, H=12, a=12, S=3).dtype == np.int64  # 3 + 1 + 1, whole: int64


def test_floor_ceiling_max_min_are_exact():
    f = custom(sympy.ceiling(L / p) * H + sympy.floor(B * S / 3) + sympy.Max(B, S) * b + sympy.Min(L, p))
    fn = f.compile()
    rng = np.random.default_rng(3)
    values = {"L": rng.integers(1, 100, 30), "p": rng.integers(1, 9, 30), "H": rng.integers(1, 9000, 30),
              "B": rng.integers(1, 100, 30), "S": rng.integers(1, 9000, 30), "b": rng.choice([0.5, 1.0, 2.0], 30)}
    got = fn(values)
    for i in range(30):
        point = {k: (str(v[i]) if k == "b" else int(v[i])) for k, v in values.items()}
        assert exact(got[i]) == exact(f.evaluate(point).total)


def test_broadcasting():
    fn = symbolic.formula("llm.peak").compile()
    batch = np.arange(1, 5)[:, None]
    seq = np.array([512, 1024, 2048])
    got = fn(B=batch, S=seq, D=1024, **GPT2_LIKE)
    assert got.shape == (4, 3)
    assert got[2, 1] == symbolic.formula("llm.peak").evaluate(B=3, S=1024, D=1024, **GPT2_LIKE).total
    empty = fn(B=np.array([], dtype=np.int64), S=1024, D=1024, **GPT2_LIKE)
    assert empty.shape == (0,)


def test_overflow_falls_back_to_exact_python_ints():
    f = symbolic.formula("llm.peak")
    fn = f.compile()
    huge = {"B": 10**6, "S": 10**6, "D": 10**6, "H": 10**5, "L": 1000, "V": 10**6, "d_ff": 4 * 10**5}
    assert fn.mode(fn.prepare(huge)) == "object"
    got = fn(huge)
    assert got.dtype == object and int(got) == f.evaluate(huge).total > 2**63
    mixed = fn({**huge, "B": np.array([1, 10**6])})
    assert [int(x) for x in mixed] == [f.evaluate({**huge, "B": 1}).total, f.evaluate(huge).total]
    # the bound is not too timid: a large but fitting sweep stays int64
    assert fn.mode(fn.prepare({**RUN, "B": np.arange(1, 1025)})) == "int64"
    # inputs past int64 themselves
    steady = symbolic.formula("llm.steady").compile(keep=("N",))
    assert int(steady(N=10**20, B=1, D=1)) == 16 * 10**20 + 8


def test_keep_defined_symbol_as_input():
    fn = symbolic.formula("llm.steady").compile(keep=("N",))
    assert set(fn.inputs) == {"N", "B", "D"}
    assert fn(N=np.array([10**9, 7 * 10**9]), B=8, D=1024).tolist() == [16 * 10**9 + 65536, 112 * 10**9 + 65536]
    with pytest.raises(ValueError, match="not defined by another formula"):
        symbolic.formula("llm.steady").compile(keep=("B",))


def test_float_inputs():
    fn = symbolic.formula("llm.peak").compile()
    whole = fn(B=np.array([1.0, 8.0]), **RUN)
    assert whole.dtype == np.int64 and whole.tolist() == [2669142016, 7530364928]
    approx = fn(B=np.array([1, 8]), exact=False, **RUN)
    assert approx.dtype == np.float64 and approx.tolist() == [2669142016.0, 7530364928.0]
    irrational = symbolic.formula("llm.weights").compile()(**GPT2_LIKE, b=np.pi)
    assert irrational.dtype == np.float64 and irrational == pytest.approx(123417600 * np.pi)


def test_unsupported_function_warns_and_uses_floats():
    fn = custom(sympy.sqrt(H) * B, "test.sqrt").compile()
    with pytest.warns(compiled.ApproximateWarning, match="sqrt"):
        got = fn(H=np.array([4, 9]), B=2)
    assert got.dtype == np.float64 and got.tolist() == [4.0, 6.0]


@pytest.mark.parametrize("values, message", [
    ({"B": 0}, "B must be positive, got 0"),
    ({"B": np.array([1, -3])}, "B must be positive, got -3 (at index 1)"),
    ({"B": 2.5}, "it must be a whole number, got 5/2"),
    ({"B": Fraction(3, 2)}, "it must be a whole number, got 3/2"),
    ({"B": np.array([[1, 2], [3, 0]])}, "B must be positive, got 0 (at index (1, 1))"),
    ({"B": np.nan}, "B: nan is not a finite number"),
    ({"B": True}, "B: expected numbers, got booleans"),
    ({"B": "8"}, "B: expected numbers, got text"),
    ({"B": 10**31}, "implausibly large"),
    ({"B": np.ones(3, dtype=np.int64), "S": np.ones(2, dtype=np.int64)}, "do not broadcast"),
    ({"X": 1}, "unknown symbol 'X'"),
])
def test_validation_errors_are_one_line(values, message):
    fn = symbolic.formula("llm.peak").compile()
    with pytest.raises((ValueError, KeyError)) as info:  # unknown names raise UnknownSymbolError, a KeyError
        fn({**RUN, "B": 1, **values})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_missing_inputs():
    with pytest.raises(ValueError, match="values missing for B, S"):
        symbolic.formula("llm.peak").compile()(D=1, **GPT2_LIKE)


def test_division_by_zero_is_an_error():
    fn = custom(B * H / (H - a), "test.zero").compile()
    assert fn(B=2, H=6, a=3).tolist() == 4
    with pytest.raises(ValueError, match="division by zero"):
        fn(B=2, H=np.array([6, 3]), a=3)


def test_only_table_symbols_with_safe_names_compile():
    with pytest.raises(compiled.CompileError, match="unknown symbol 'x'"):
        custom(sympy.Symbol("x", positive=True) * B, "test.x").compile()
    with pytest.raises(compiled.CompileError, match="differs from the symbol table"):
        custom(sympy.Symbol("B") * H, "test.lookalike").compile()
    with pytest.raises(compiled.CompileError, match="unsupported"):
        custom(sympy.sin(H) * B, "test.sin").compile()


def test_cache_and_forms():
    f = symbolic.formula("llm.peak")
    assert f.compile() is f.compile()
    expanded = f.compile("expanded")
    assert expanded is not f.compile() and expanded.form == "expanded"
    values = {**RUN, "B": np.arange(1, 9)}
    assert np.array_equal(expanded(values), f.compile()(values))
    with pytest.raises(ValueError, match="unknown form"):
        f.compile("factored")


def test_sums_over_monomials_get_their_common_denominator_directly():
    """``_fraction``'s shortcut: whole numerators over monomial denominators, as ``together`` would give
    (the same fraction here); anything else (a sum in a denominator, a rational power) is left to it."""
    from symbolic.core.symbols import n_d, t

    expr = 3 * H * B / (2 * t) + N / n_d + 7 * S + H**2 / (t * n_d)
    num, den = compiled._over_monomials(expr)  # noqa: SLF001
    assert (num, den) == sympy.fraction(sympy.together(expr))
    assert sympy.expand(num - den * expr) == 0 and den == 2 * n_d * t
    assert compiled._over_monomials(H / (H + 1)) is None  # noqa: SLF001
    assert compiled._over_monomials(H / sympy.sqrt(t)) is None  # noqa: SLF001
    assert compiled._over_monomials(H / (2 * t) + sympy.Rational(1, 3)) == (3 * H + 2 * t, 6 * t)  # noqa: SLF001
