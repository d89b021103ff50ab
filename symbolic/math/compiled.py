"""Compiled formulas: one formula, compiled once, evaluated over NumPy arrays of inputs.

``Formula.evaluate`` is exact but works one point at a time through SymPy (milliseconds a
point); planners sweep millions of configurations. ``compile_formula`` turns a formula's fully
composed total into vectorised NumPy code once (``sympy.lambdify`` over the formula's own
symbols, each checked against the symbol table first) and caches it.

Results stay exact wherever the inputs are:

- whole-number inputs (and rationals such as b = 1/2, which are scaled to whole numbers) are
  evaluated in ``int64`` when a bound on every intermediate value, computed exactly from the
  largest input of each symbol, fits in 64 bits; the total is put over one integer
  denominator (numerator and denominator evaluated separately), so nothing is truncated;
- when the bound does not fit, the same code runs over Python integers (``object`` arrays):
  slower, still exact;
- a total that is not a whole number at some point (b = 1/2 with an odd parameter count) comes
  back as an ``object`` array holding ``int`` and ``fractions.Fraction`` values;
- floats are read exactly when they are whole, or (for non-counting symbols such as b) binary
  fractions or decimals of up to nine places, read as the decimal they print as (0.1 is 1/10,
  as in ``values.to_number``); other floats, and ``exact=False``, use ``float64``; so do
  formulas with functions that have no exact vectorised form (square roots, logarithms), with
  an :class:`ApproximateWarning`.

Values are validated as in :mod:`symbolic.core.values`: positive, whole for counting symbols, at
most ``MAX_VALUE``; errors are one-line ``ValueError`` messages naming the symbol (an unknown
name raises ``UnknownSymbolError``, a ``KeyError``, as ``Formula.evaluate`` does).

Defined symbols (N, E) follow the formula's one rule (``Formula.expr_for``): those named in
``keep``, or given a value when the compiled formula is called, are inputs; the others are
expanded. Calling ``f.compile()`` with ``N=...`` runs the variant that keeps N (compiled once,
cached like any other).
"""

from __future__ import annotations

import builtins
import functools
import keyword
import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import sympy

from ..core import symbols as symtab
from ..core import values as vals
from ..core.errors import UserError
from ..core.memo import BoundedMemo

if TYPE_CHECKING:  # pragma: no cover
    from .formula import Formula

FORMS = ("composed", "expanded")
INT64_MAX = 2**63 - 1
_EXACT_FLOAT_INT = 2**53  # every whole float up to here is an exact int64
_MAX_BINARY_SCALE = 10  # floats for non-integer symbols are tried as k / 2**j, j <= 10,
_MAX_DECIMALS = 9  # then as decimals with up to nine places
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# names the generated code may refer to: builtins, modules and NumPy's functions (floor, log, ...)
_RESERVED = frozenset(dir(builtins)) | frozenset(dir(np)) | {"numpy", "math", "mpmath", "scipy", "builtins", "sympy"}

# Integer-valued helpers the exact code calls; SymPy prints them by name and lambdify looks
# them up in the namespace we give it.
_FLOORDIV = sympy.Function("symbolic_floordiv")
_CEILDIV = sympy.Function("symbolic_ceildiv")
_IMAX = sympy.Function("symbolic_max")
_IMIN = sympy.Function("symbolic_min")
_QMAX = sympy.Function("symbolic_qmax")  # (D, t_1, ..., t_k): max of t_i where D > 0, min where D < 0
_QMIN = sympy.Function("symbolic_qmin")


class CompileError(UserError):
    """A formula that cannot be compiled (unknown symbol, unsupported function)."""


class ApproximateWarning(UserWarning):
    """Results computed in float64 although exact results were asked for."""


class ZeroDivisorError(vals.ValueProblem):
    """The formula divides by zero at some of the inputs (its value there is infinite or undefined)."""


class _NotExact(Exception):
    """Internal: the expression has no exact integer form."""


# --- the expression checks --------------------------------------------------------------
def check_symbols(expr: sympy.Expr) -> list[sympy.Symbol]:
    """The free symbols of ``expr`` in table order, each a table symbol with a safe name.

    Only these names reach ``lambdify``'s generated code, so each must be exactly the table's
    SymPy object (same assumptions) and a plain identifier that shadows nothing.
    """
    out = []
    for s in symtab.ordered(expr.free_symbols):
        if not isinstance(s, sympy.Symbol) or isinstance(s, (sympy.Dummy, sympy.Wild)):
            raise CompileError(f"cannot compile: {s!r} is not a plain symbol")
        try:
            entry = symtab.info(s)  # a model's scoped symbol carries its entry
        except symtab.UnknownSymbolError as err:
            raise CompileError(f"cannot compile: {err}") from None
        if entry.symbol != s:
            raise CompileError(f"cannot compile: {s.name!r} differs from the symbol table's {s.name}")
        if not _NAME.fullmatch(s.name) or keyword.iskeyword(s.name) or s.name in _RESERVED or s.name.startswith("symbolic_"):
            raise CompileError(f"cannot compile: symbol name {s.name!r} is not a safe identifier")
        out.append(s)
    return out


def _check_nodes(expr: sympy.Expr) -> None:
    """Only arithmetic and a few known functions may be compiled."""
    allowed = (sympy.Symbol, sympy.Number, sympy.Add, sympy.Mul, sympy.Pow, sympy.floor, sympy.ceiling,
               sympy.Max, sympy.Min, sympy.log, sympy.exp)
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Number) and not node.is_finite:
            raise CompileError(f"cannot compile: the expression contains {node}")
        if not isinstance(node, allowed):
            raise CompileError(f"cannot compile: unsupported {type(node).__name__} in {node}")


def _is_integer_poly(expr: sympy.Expr) -> bool:
    """Whole coefficients, non-negative whole powers: evaluates exactly in integers."""
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Number) and not node.is_Integer:
            return False
        if isinstance(node, sympy.Pow) and not (node.exp.is_Integer and node.exp >= 0):
            return False
    return True


def _fraction(expr: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    """(numerator, denominator) with whole coefficients; expr = numerator / denominator."""
    if _is_integer_poly(expr):
        return expr, sympy.Integer(1)
    found = _over_monomials(expr)
    if found is not None:
        return found
    num, den = sympy.fraction(sympy.together(expr))
    if not (_is_integer_poly(num) and _is_integer_poly(den)):
        raise _NotExact(expr)
    return num, den


def _over_monomials(expr: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr] | None:
    """``_fraction`` of a sum whose terms are whole over monomials (3·H·B/(2·t), N/n_d), or None.

    The denominator is the least common multiple of the terms' (whole coefficient, symbols to
    their highest powers) and each numerator is scaled to it: exact, and without ``together``'s
    general search for common factors, the most of a planner's compilation.
    """
    parts = []
    for term in sympy.Add.make_args(expr):
        num, den = term.as_numer_denom()
        coeff, rest = den.as_coeff_Mul()
        powers = rest.as_powers_dict()
        if not (coeff.is_Integer and coeff > 0 and _is_integer_poly(num)) or not all(
                b.is_Symbol and e.is_Integer and e > 0 for b, e in powers.items() if b != 1):
            return None
        parts.append((num, int(coeff), {b: int(e) for b, e in powers.items() if b != 1}))
    common = math.lcm(*(c for _, c, _ in parts))
    highest: dict[sympy.Expr, int] = {}
    for _, _, powers in parts:
        for b, e in powers.items():
            highest[b] = max(highest.get(b, 0), e)
    den = sympy.Integer(common) * sympy.Mul(*(b**e for b, e in highest.items()))
    num = sympy.Add(*(n * (common // c) * sympy.Mul(*(b**(e - powers.get(b, 0)) for b, e in highest.items()))
                      for n, c, powers in parts))
    return (num, den) if _is_integer_poly(num) else None


def _integerise(expr: sympy.Expr) -> sympy.Expr:
    """floor/ceiling/Max/Min replaced by integer helpers over whole-coefficient arguments."""
    if expr.is_Symbol or expr.is_Rational:
        return expr
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        return expr.func(*(_integerise(a) for a in expr.args))
    if isinstance(expr, sympy.Pow):
        if not expr.exp.is_Integer:
            raise _NotExact(expr)
        return sympy.Pow(_integerise(expr.base), expr.exp)
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        num, den = _fraction(_integerise(expr.args[0]))
        return (_FLOORDIV if isinstance(expr, sympy.floor) else _CEILDIV)(num, den)
    if isinstance(expr, (sympy.Max, sympy.Min)):
        return _extremum(expr)
    raise _NotExact(expr)


def _extremum(expr: sympy.Expr) -> sympy.Expr:
    """Max/Min of fractions n_i/d_i as (whole-valued helper) / common denominator.

    With constant denominators the common one is their lcm (positive). With symbolic ones it is
    their product D, whose sign is known only at run time: the helper gets D and takes the
    max of the n_i·D/d_i where D > 0 and the min where D < 0 (and the reverse for Min).
    """
    biggest = isinstance(expr, sympy.Max)
    parts = [_fraction(_integerise(a)) for a in expr.args]
    if all(d.is_Integer for _, d in parts):
        common = math.lcm(*(int(d) for _, d in parts))
        scaled = [n * (common // int(d)) for n, d in parts]
        return (_IMAX if biggest else _IMIN)(*scaled) / common
    dens = [d for _, d in parts]
    product = sympy.Mul(*dens)
    scaled = [n * sympy.Mul(*(dens[:i] + dens[i + 1:])) for i, (n, _) in enumerate(parts)]
    return (_QMAX if biggest else _QMIN)(product, *scaled) / product


def _bound(expr: sympy.Expr, maxima: Mapping[str, int], peak: list[int]) -> int:
    """An exact bound on |value| of ``expr`` and of every intermediate NumPy computes for it.

    Inputs are whole and at least 1, so replacing each coefficient by its absolute value and
    each symbol by its largest value bounds the node; partial sums and products are bounded
    by their node's bound because every factor's bound is at least 1. ``peak`` collects the
    largest bound seen.
    """
    if expr.is_Symbol:
        value = maxima[expr.name]
    elif expr.is_Integer:
        value = abs(int(expr))
    elif isinstance(expr, sympy.Add):
        value = sum(_bound(a, maxima, peak) for a in expr.args)
    elif isinstance(expr, sympy.Mul):
        value = math.prod(max(1, _bound(a, maxima, peak)) for a in expr.args)
    elif isinstance(expr, sympy.Pow):
        base = max(1, _bound(expr.base, maxima, peak))
        exp = int(expr.exp)
        value = base**exp if base == 1 or exp * base.bit_length() <= 4 * 64 else 2**256
    elif expr.func in (_FLOORDIV, _CEILDIV):
        value = _bound(expr.args[0], maxima, peak)
        _bound(expr.args[1], maxima, peak)
    elif expr.func in (_IMAX, _IMIN):
        value = max(_bound(a, maxima, peak) for a in expr.args)
    elif expr.func in (_QMAX, _QMIN):
        _bound(expr.args[0], maxima, peak)
        value = max(_bound(a, maxima, peak) for a in expr.args[1:])
    else:  # pragma: no cover - _integerise admits nothing else
        raise _NotExact(expr)
    peak[0] = max(peak[0], value)
    return value


# --- the integer helpers (work on int64 and on object arrays of Python ints) --------------
def _nonzero(den: object) -> None:
    if np.any(np.asarray(den) == 0):
        raise ZeroDivisorError("division by zero in the formula at some of these inputs")


def _floordiv(num: object, den: object) -> object:
    _nonzero(den)
    return num // den  # type: ignore[operator]


def _ceildiv(num: object, den: object) -> object:
    _nonzero(den)
    return -((-num) // den)  # type: ignore[operator]


def _imax(*args: object) -> object:
    return functools.reduce(np.maximum, args)


def _imin(*args: object) -> object:
    return functools.reduce(np.minimum, args)


def _qmax(den: object, *args: object) -> object:
    _nonzero(den)
    return np.where(np.asarray(den) > 0, _imax(*args), _imin(*args))


def _qmin(den: object, *args: object) -> object:
    _nonzero(den)
    return np.where(np.asarray(den) > 0, _imin(*args), _imax(*args))


_NAMESPACE = {"symbolic_floordiv": _floordiv, "symbolic_ceildiv": _ceildiv, "symbolic_max": _imax,
              "symbolic_min": _imin, "symbolic_qmax": _qmax, "symbolic_qmin": _qmin}


def _lambdify(symbols: list[sympy.Symbol], expr: sympy.Expr) -> Callable[..., object]:
    """NumPy code for ``expr``; ``symbols`` were checked by :func:`check_symbols`."""
    return sympy.lambdify(symbols, expr, modules=[_NAMESPACE, "numpy"], dummify=False)


_HELPERS = {f.__name__: f for f in (_FLOORDIV, _CEILDIV, _IMAX, _IMIN, _QMAX, _QMIN)}


class _NoSource(Exception):
    """A node the exact code writer does not write (``sympy.lambdify`` then does)."""


def _source(expr: sympy.Expr) -> str:
    """Python source for an exact program's expression: whole numbers, table symbols, + * ** and the helpers."""
    if expr.is_Symbol:
        return expr.name
    if expr.is_Integer:
        return f"({int(expr)})"
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        joiner = " + " if isinstance(expr, sympy.Add) else " * "
        return "(" + joiner.join(_source(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp >= 0:
        return f"({_source(expr.base)} ** {int(expr.exp)})"
    name = getattr(expr.func, "__name__", "")
    if name in _HELPERS and expr.func is _HELPERS[name]:
        return f"{name}({', '.join(_source(a) for a in expr.args)})"
    raise _NoSource(type(expr).__name__)


def _exact_code(symbols: list[sympy.Symbol], expr: sympy.Expr) -> Callable[..., object]:
    """The same function ``_lambdify`` makes for an exact program, written directly (several times faster).

    An exact program holds only whole numbers, the table's symbols (safe identifiers, see
    :func:`check_symbols`), sums, products, whole powers and the integer helpers, so its code is
    one expression; NumPy evaluates it as lambdify's code would (any order of a sum or product
    stays within the bound :func:`_bound` checks). Anything else goes through ``sympy.lambdify``.
    """
    try:
        code = compile(f"def _exact({', '.join(s.name for s in symbols)}):\n    return {_source(expr)}\n",
                       "<symbolic exact code>", "exec")
    except (_NoSource, RecursionError, SyntaxError, MemoryError):  # SyntaxError: nesting past the parser's limit
        return _lambdify(symbols, expr)
    namespace: dict[str, object] = {name: _NAMESPACE[name] for name in _HELPERS}
    exec(code, namespace)  # noqa: S102 - the source holds only numbers, checked names and operators
    return namespace["_exact"]  # type: ignore[return-value]


# --- inputs ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Inputs:
    """Validated inputs: whole-number arrays with a scale each (value = array / scale), or floats.

    ``maxima`` holds the largest scaled value of each symbol (for the overflow bound); the
    sweep command reuses one ``Inputs`` for many chunks with :meth:`with_arrays`, so every
    chunk is computed the same way.
    """

    arrays: dict[str, np.ndarray]
    scales: dict[str, int] = field(default_factory=dict)
    maxima: dict[str, int] = field(default_factory=dict)
    exact: bool = True

    def with_arrays(self, arrays: Mapping[str, np.ndarray]) -> Inputs:
        """The same scales and bounds over other arrays (drawn from the same values)."""
        return Inputs({**self.arrays, **arrays}, self.scales, self.maxima, self.exact)

    @property
    def shape(self) -> tuple[int, ...]:
        return np.broadcast_shapes(*(a.shape for a in self.arrays.values()))


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _fail(name: str | sympy.Symbol, value: object, where: tuple[int, ...]) -> None:
    """Raise the value module's message for one bad element, saying where it is."""
    place = f" (at index {where[0] if len(where) == 1 else where})" if where else ""
    try:
        vals.validate(name, value)
    except vals.ValueProblem as err:
        raise vals.ValueProblem(f"{err}{place}") from None
    raise vals.ValueProblem(f"{name}: {value!r} is not a valid value{place}")  # pragma: no cover


def _exact_object(name: str, arr: np.ndarray) -> tuple[np.ndarray, int]:
    """An object array (ints, Fractions, SymPy numbers, numeric text) as whole numbers and a scale."""
    flat = arr.reshape(-1)
    numbers: list[Fraction] = []
    for i, item in enumerate(flat):
        try:
            r = vals.to_number(item, name)
        except vals.ValueProblem as err:
            raise vals.ValueProblem(f"{err} (at index {np.unravel_index(i, arr.shape) if arr.ndim > 1 else i})") from None
        numbers.append(Fraction(int(r.p), int(r.q)))
    scale = math.lcm(*(n.denominator for n in numbers)) if numbers else 1
    scaled = np.empty(len(numbers), dtype=object)
    scaled[:] = [int(n * scale) for n in numbers]
    return scaled.reshape(arr.shape), scale


def _float_scale(arr: np.ndarray) -> int | None:
    """The smallest scale making every float whole, read as values.to_number reads one float.

    Binary fractions (0.5, 0.25) are exact as they are; other floats are taken as the shortest
    decimal that gives the same float (0.1 is 1/10, as ``to_number(0.1)`` says), up to nine
    decimal places. None when some value is neither.
    """
    for j in range(_MAX_BINARY_SCALE + 1):
        scaled = arr * 2**j
        if np.all(scaled == np.floor(scaled)):
            return 2**j
    for k in range(1, _MAX_DECIMALS + 1):
        scale = 10**k
        whole = np.round(arr * scale)
        if float(np.abs(whole).max()) < _EXACT_FLOAT_INT and np.all(whole / scale == arr):
            return scale
    return None


def prepare_one(symbol: str | sympy.Symbol, value: object) -> tuple[np.ndarray, int | None, int | float]:
    """One input as (whole-number array, scale, largest) or (float64 array, None, largest); validated.

    ``symbol``: its name, or the symbol itself (a model's scoped symbol is known only by the object).
    """
    entry = symtab.info(symbol)
    name, ref = entry.name, entry.symbol
    arr = np.asarray(value)
    kind = arr.dtype.kind
    if kind == "b":
        raise vals.ValueProblem(f"{name}: expected numbers, got booleans")
    if kind in "US":
        raise vals.ValueProblem(f"{name}: expected numbers, got text (parse it with symbolic.core.values.parse_number)")
    if kind not in "iufO":
        raise vals.ValueProblem(f"{name}: expected real numbers, got {arr.dtype}")
    scale: int | None = 1
    if kind == "u":
        arr = arr.astype(np.int64) if arr.size == 0 or int(arr.max()) <= INT64_MAX else arr.astype(object)
    elif kind == "i" and arr.dtype != np.int64:
        arr = arr.astype(np.int64)
    elif kind == "f":
        arr = arr.astype(np.float64, copy=False)
        bad = ~np.isfinite(arr)
        if bad.any():
            where = _first(bad)
            raise vals.ValueProblem(f"{name}: {arr[where].item()!r} is not a finite number"
                                    + (f" (at index {where[0] if len(where) == 1 else where})" if where else ""))
        if entry.integer and not np.all(arr == np.floor(arr)):
            where = _first(arr != np.floor(arr))
            _fail(ref, arr[where].item(), where)
        scale = 1 if entry.integer or not arr.size else _float_scale(arr)
        if scale is not None:
            whole = np.round(arr * scale) if scale != 1 else arr
            if arr.size and float(np.abs(whole).max()) > _EXACT_FLOAT_INT:
                arr = np.vectorize(int, otypes=[object])(whole)  # whole floats past 2**53: their exact value
            else:
                arr = whole.astype(np.int64)
    elif kind == "O":
        arr, scale = _exact_object(name, arr)
        if arr.size and max(abs(int(v)) for v in arr.reshape(-1)) <= INT64_MAX:
            arr = arr.astype(np.int64)
    high = _check_range(ref, entry.integer, arr, scale) if arr.size else 1
    return arr, scale, high


def _check_range(name: str | sympy.Symbol, integer: bool, arr: np.ndarray, scale: int | None) -> int | float:
    """Positive, whole where the symbol counts things, at most MAX_VALUE; returns the largest value.

    Two passes (min, max) when everything is valid; the masks that find the first bad element
    are built only on failure.
    """
    low, high = _py(arr.min()), _py(arr.max())
    limit = vals.MAX_VALUE * (scale or 1)
    fractional = integer and scale not in (1, None)  # a scale > 1 means some value is not whole
    if low <= 0 or high > limit or fractional:
        bad = np.asarray(arr <= 0, dtype=bool) | np.asarray(arr > (float(limit) if scale is None else limit), dtype=bool)
        if fractional:
            bad |= np.asarray(arr % scale != 0, dtype=bool)
        where = _first(bad)
        item = arr[where]
        _fail(name, item.item() if scale is None else Fraction(int(item), scale), where)
    return high


def _py(x: object) -> object:
    """A NumPy scalar as a Python number (object arrays already hold them)."""
    return x.item() if isinstance(x, np.generic) else x


# --- the compiled formula ----------------------------------------------------------------
@dataclass
class _Program:
    """Exact code for one set of input scales: total = numerator / denominator."""

    num_expr: sympy.Expr
    den_expr: sympy.Expr
    num: Callable[..., object]
    den: Callable[..., object] | None


class CompiledFormula:
    """A formula's total as vectorised NumPy code; call it with keyword arrays.

    >>> import symbolic, numpy as np
    >>> peak = symbolic.formula("llm.peak").compile()
    >>> peak(B=np.array([1, 8]), S=1024, D=1024, H=768, L=12, V=50000, d_ff=3072)
    array([2669142016, 7530364928])
    """

    def __init__(self, key: str, form: str, expr: sympy.Expr, unit: str = "", *,
                 formula: Formula | None = None, kept: tuple[str, ...] = ()) -> None:
        _check_nodes(expr)
        self.key = key
        self.form = form
        self.expr = expr
        self.unit = unit
        self.formula = formula  # where other defined symbols come from when a call names them
        self.kept: tuple[str, ...] = tuple(kept)
        self.symbols = check_symbols(expr)
        self.inputs: tuple[str, ...] = tuple(s.name for s in self.symbols)
        self._by_name = {s.name: s for s in self.symbols}
        self._float: Callable[..., object] | None = None
        self._programs: dict[tuple[tuple[str, int], ...], _Program | None] = {}

    def __repr__(self) -> str:
        return f"<CompiledFormula {self.key} ({self.form}) of {', '.join(self.inputs)}>"

    # --- calling ---------------------------------------------------------------------------
    def __call__(self, values: Mapping[str, object] | None = None, /, *, exact: bool = True,
                 **arrays: object) -> np.ndarray:
        """Totals at every point of the broadcast inputs (see the module docstring for dtypes)."""
        given = {**(values or {}), **arrays}
        target = self.for_names(given)
        return target.run(target.prepare(given), exact=exact)

    def for_names(self, names: Iterable[object]) -> CompiledFormula:
        """This code, or (by the one rule) the formula's code that also keeps the defined symbols named."""
        if self.formula is None:
            return self
        wanted = {k.name if isinstance(k, sympy.Symbol) else str(k) for k in names}
        extra = {s.name for s in self.formula.kept(wanted)} - set(self.inputs) - set(self.kept)
        if not extra:
            return self
        return compile_formula(self.formula, self.form, (*self.kept, *extra))

    def _require(self, names: Iterable[str]) -> None:
        """Every input of the formula among ``names``, and no other name (one-line errors)."""
        names = list(dict.fromkeys(names))  # the caller's order, so the first unknown name is reported
        for name in names:
            if name not in self.inputs:
                self._unknown(name)
        missing = [n for n in self.inputs if n not in names]
        if missing:
            raise vals.ValueProblem(f"values missing for {', '.join(missing)}")

    def prepare(self, values: Mapping[str, object]) -> Inputs:
        """Validate and convert the inputs: every input of the formula, no other name."""
        given = {k.name if isinstance(k, sympy.Symbol) else str(k): v for k, v in values.items()}
        self._require(given)
        arrays: dict[str, np.ndarray] = {}
        scales: dict[str, int] = {}
        maxima: dict[str, int] = {}
        exact = True
        for name in self.inputs:
            arr, scale, high = prepare_one(self._by_name[name], given[name])
            arrays[name] = arr
            if scale is None:
                exact = False
            else:
                scales[name] = scale
                maxima[name] = int(high)
        try:
            np.broadcast_shapes(*(a.shape for a in arrays.values()))
        except ValueError:
            shapes = ", ".join(f"{n}{arrays[n].shape}" for n in self.inputs)
            raise vals.ValueProblem(f"input shapes do not broadcast together: {shapes}") from None
        return Inputs(arrays, scales, maxima, exact)

    def prepare_columns(self, fixed: Mapping[str, object], columns: Mapping[str, tuple[np.ndarray, int, int]]) -> Inputs:
        """Inputs from fixed values (validated here) and columns already validated and scaled.

        Each column is (whole-number array, scale, largest scaled value over every value it
        will take): the sweep command passes one row of each axis here and the axis's chunks
        later through :meth:`Inputs.with_arrays`, so no axis is ever materialised whole.
        """
        self._require([*fixed, *columns])
        arrays: dict[str, np.ndarray] = {}
        scales: dict[str, int] = {}
        maxima: dict[str, int] = {}
        exact = True
        for name, value in fixed.items():
            arr, scale, high = prepare_one(self._by_name[name], value)
            arrays[name] = arr
            if scale is None:
                exact = False
            else:
                scales[name], maxima[name] = scale, int(high)
        for name, (arr, scale, high) in columns.items():
            arrays[name], scales[name], maxima[name] = arr, int(scale), int(high)
        return Inputs(arrays, scales, maxima, exact)

    def _unknown(self, name: str) -> None:
        """Raise the error for a name that is not an input of this code."""
        if self.formula is not None and name in {s.name for s in self.formula.defined}:
            raise CompileError(f"{name} is expanded in this code; compile with keep=({name!r},) "
                               f"or call the compiled formula with {name}=... to give it a value")
        if self.formula is not None and name in {s.name for s in self.formula.inputs}:
            once = f" once {', '.join(self.kept)} is given" if self.kept else ""
            raise CompileError(f"{name} does not appear in {self.key}{once}; leave it out")
        raise symtab.UnknownSymbolError(name, self.inputs, f"compiled formula {self.key!r}")

    def mode(self, inputs: Inputs, exact: bool = True) -> str:
        """How ``run`` will compute: 'int64', 'object' (exact Python ints) or 'float64'."""
        if not (exact and inputs.exact):
            return "float64"
        program = self._program(inputs.scales)
        if program is None:
            return "float64"
        peak = [0]
        _bound(program.num_expr, inputs.maxima, peak)
        _bound(program.den_expr, inputs.maxima, peak)
        return "int64" if peak[0] <= INT64_MAX else "object"

    def run(self, inputs: Inputs, exact: bool = True) -> np.ndarray:
        """Evaluate at prepared inputs; the result has the inputs' broadcast shape."""
        shape = inputs.shape
        how = self.mode(inputs, exact)
        if how == "float64" and exact and inputs.exact:
            warnings.warn(f"{self.key}: {self.inexact_reason()}; results are float64 approximations",
                          ApproximateWarning, stacklevel=3)
        if how == "float64":
            result = self._run_float(inputs)
        else:
            result = self._run_exact(inputs, how)
        out = np.asarray(result)
        if out.shape != shape:
            out = np.broadcast_to(out, shape).copy()
        return out

    # --- the three ways -------------------------------------------------------------------
    def _run_float(self, inputs: Inputs) -> np.ndarray:
        if self._float is None:
            self._float = _lambdify(self.symbols, self.expr)
        args = []
        for name in self.inputs:
            arr = inputs.arrays[name]
            scale = inputs.scales.get(name, 1)
            arr = arr.astype(np.float64) if arr.dtype != np.float64 else arr
            args.append(arr / scale if scale != 1 else arr)
        with np.errstate(over="ignore"):
            return np.asarray(self._float(*args), dtype=np.float64)

    def _run_exact(self, inputs: Inputs, how: str) -> np.ndarray:
        program = self._program(inputs.scales)
        assert program is not None
        dtype = np.int64 if how == "int64" else object
        args = [a if a.dtype == dtype else a.astype(dtype) for a in (inputs.arrays[n] for n in self.inputs)]
        num = np.asarray(program.num(*args))
        if how == "int64" and num.dtype != np.int64:  # pragma: no cover - guarded by _integerise
            raise RuntimeError(f"{self.key}: integer code produced {num.dtype}")
        if program.den is None:
            return num
        den = np.asarray(program.den(*args))
        _nonzero(den)
        if not bool(np.any(num % den)):
            return num // den
        return _fractions(num, den)

    def _program(self, scales: Mapping[str, int]) -> _Program | None:
        signature = tuple(sorted((n, s) for n, s in scales.items() if s != 1))
        if signature not in self._programs:
            self._programs[signature] = self._build(dict(signature))
        return self._programs[signature]

    def _build(self, scales: Mapping[str, int]) -> _Program | None:
        by_name = {s.name: s for s in self.symbols}
        expr = self.expr.xreplace({by_name[n]: by_name[n] / s for n, s in scales.items()})
        try:
            num, den = _fraction(_integerise(expr))
        except _NotExact:
            return None
        den_fn = None if den == 1 else _exact_code(self.symbols, den)
        return _Program(num, den, _exact_code(self.symbols, num), den_fn)

    def inexact_reason(self) -> str:
        """Why exact inputs still give float64 results (a square root, a logarithm, ...)."""
        for node in sympy.preorder_traversal(self.expr):
            if isinstance(node, (sympy.log, sympy.exp)) or (isinstance(node, sympy.Pow) and not node.exp.is_Integer):
                return f"{node} has no exact integer form"
            if isinstance(node, sympy.Float):
                return f"the expression holds the float {node}"
        return "the expression has no exact integer form"


def _fractions(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Elementwise exact quotients: int where whole, Fraction otherwise."""
    def one(n: object, d: object) -> object:
        q = Fraction(int(n), int(d))
        return q.numerator if q.denominator == 1 else q
    out = np.empty(np.broadcast_shapes(num.shape, den.shape), dtype=object)
    out[...] = np.frompyfunc(one, 2, 1)(num, den)
    return out


# --- the cache ---------------------------------------------------------------------------
_CACHE: BoundedMemo[tuple[str, str, tuple[str, ...], sympy.Expr, sympy.Expr], CompiledFormula] = BoundedMemo(4096)


def expression(formula: Formula, form: str = "composed", keep: Iterable[str] = ()) -> sympy.Expr:
    """The total to compile in ``form``, by the formula's one rule: ``keep`` stays, the rest is expanded."""
    if form not in FORMS:
        raise CompileError(f"unknown form {form!r}; choose from {', '.join(FORMS)}")
    kept = {k.name if isinstance(k, sympy.Symbol) else str(k) for k in keep}
    defined = {s.name for s in formula.defined}
    for name in sorted(kept - defined):
        raise CompileError(f"{name} is not defined by another formula in {formula.key!r}; "
                           f"only {', '.join(sorted(defined)) or 'none'} can be kept")
    expr = formula.expr_for(kept)
    return sympy.expand(expr) if form == "expanded" else expr


def compile_formula(formula: Formula, form: str = "composed", keep: Iterable[str] = ()) -> CompiledFormula:
    """The formula's total as vectorised NumPy code, compiled once per (key, form, kept symbols).

    ``form`` is 'composed' (the total as written, definitions substituted) or 'expanded'.
    ``keep`` names defined symbols (N, E) that stay inputs instead of being expanded.
    """
    kept = tuple(sorted({k.name if isinstance(k, sympy.Symbol) else str(k) for k in keep}))
    expr = expression(formula, form, kept)
    cache_key = (formula.key, form, kept, expr, formula.expr)
    compiled = _CACHE.get(cache_key)
    if compiled is None:
        compiled = CompiledFormula(formula.key, form, expr, formula.unit, formula=formula, kept=kept)
        _CACHE[cache_key] = compiled
    return compiled


def clear_cache() -> None:
    """Forget every compiled formula (for tests and long sessions)."""
    _CACHE.clear()
