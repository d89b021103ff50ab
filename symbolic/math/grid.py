"""Sweep grids: 'B=1..64', 'S=512,1024,2048', 'B=1..1024:*2' parsed into exact, validated axes.

Text is parsed by hand and every number goes through ``values.parse_number`` (never an
evaluator). An axis knows its length before any value is made, so a grid of a billion points is
refused before memory is spent on it, and it hands out the values at any indices
(``Axis.scaled``) without building the rest: a sweep's memory is bounded by its chunk, not by
its axes. Work is linear in the number of items. NumPy is imported only when values are made.

Grammar of one axis, ``NAME=ITEM[,ITEM...]``, where ITEM is

- ``v``: one value (``768``, ``0.5``, ``1/2``, ``1e6``);
- ``a..b``: every whole step from a to b inclusive;
- ``a..b:s``: a, a+s, a+2s, ... up to b (s may be a fraction: ``0.5..2:0.5``);
- ``a..b:*f``: a, a·f, a·f², ... up to b (f > 1: ``1..1024:*2`` gives powers of two).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from ..core import symbols as symtab
from ..core import values as vals
from ..core.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

MAX_POINTS = 50_000_000  # per axis and per grid
FRACTION_FACTOR_POINTS = 10_000  # a factor such as *3/2 grows every denominator: few values only
INT64_SAFE = 2**62  # scaled values up to here, and their sums with a step, stay within int64


class GridError(UserError):
    """A malformed or oversized grid."""


@dataclass(frozen=True)
class Segment:
    """One item of an axis: a single value (count 1) or an arithmetic or geometric range."""

    start: Fraction
    stop: Fraction
    step: Fraction
    geometric: bool
    count: int

    def values(self) -> list[Fraction]:
        """Every value (only for short segments; long whole ranges use ``Axis.array``)."""
        if self.geometric:
            return [self.start * self.step**k for k in range(self.count)]
        return [self.start + self.step * k for k in range(self.count)]

    @property
    def last(self) -> Fraction:
        k = self.count - 1
        return self.start * self.step**k if self.geometric else self.start + self.step * k


@dataclass(frozen=True)
class _Table:
    """An axis's segments as arrays, scaled to whole numbers: what ``Axis.scaled`` indexes."""

    offsets: np.ndarray  # first flat index of each segment
    starts: np.ndarray  # scaled first value of each arithmetic segment (0 for geometric ones)
    steps: np.ndarray  # scaled step of each arithmetic segment (0 for single values, geometric ones)
    geometric: np.ndarray | None  # True for geometric segments (None when there is none)
    geo_base: np.ndarray | None  # where each geometric segment's values start in geo_values
    geo_values: np.ndarray | None  # every geometric segment's scaled values (short: factors > 1)


@dataclass(frozen=True)
class Axis:
    """One swept symbol: its name, the text it came from and its segments in order.

    Every property is computed once (linear in the number of segments); values are made only
    for the indices asked for.
    """

    name: str
    spec: str
    segments: tuple[Segment, ...]

    @functools.cached_property
    def count(self) -> int:
        return sum(s.count for s in self.segments)

    @functools.cached_property
    def whole(self) -> bool:
        """True when every value is a whole number."""
        return all(s.start.denominator == 1 and s.step.denominator == 1 for s in self.segments)

    @functools.cached_property
    def scale(self) -> int:
        """The least common denominator of every value: value · scale is always whole."""
        dens = set()
        for seg in self.segments:
            if seg.geometric:
                dens.update(v.denominator for v in seg.values())
            else:
                dens.add(seg.start.denominator)
                if seg.count > 1:
                    dens.add(seg.step.denominator)
        return math.lcm(*dens) if dens else 1

    @functools.cached_property
    def largest(self) -> Fraction:
        """The largest value (every segment rises, so it is one of their last values)."""
        return max(s.last for s in self.segments)

    @property
    def big(self) -> bool:
        """True when scaled values may pass int64: ``scaled`` then gives Python ints (object)."""
        return self.largest * self.scale > INT64_SAFE

    @functools.cached_property
    def _table(self) -> _Table:
        import numpy as np

        scale, dtype = self.scale, object if self.big else np.int64
        counts = [s.count for s in self.segments]
        offsets = np.zeros(len(counts), dtype=np.int64)
        if len(counts) > 1:
            np.cumsum(counts[:-1], out=offsets[1:])
        starts = np.empty(len(counts), dtype=dtype)
        steps = np.empty(len(counts), dtype=dtype)
        starts[:] = [0 if s.geometric else int(s.start * scale) for s in self.segments]
        steps[:] = [0 if s.geometric or s.count == 1 else int(s.step * scale) for s in self.segments]
        if not any(s.geometric for s in self.segments):
            return _Table(offsets, starts, steps, None, None, None)
        geometric = np.array([s.geometric for s in self.segments], dtype=bool)
        base, values = np.zeros(len(counts), dtype=np.int64), []
        for i, seg in enumerate(self.segments):
            if seg.geometric:
                base[i] = len(values)
                values.extend(int(v * scale) for v in seg.values())
        geo = np.empty(len(values), dtype=dtype)
        geo[:] = values
        return _Table(offsets, starts, steps, geometric, base, geo)

    def scaled(self, index: np.ndarray) -> np.ndarray:
        """value · ``scale`` at each flat index, as whole numbers: int64, or object ints when ``big``."""
        import numpy as np

        index = np.asarray(index, dtype=np.int64)
        t = self._table
        seg = np.searchsorted(t.offsets, index, side="right") - 1
        k = index - t.offsets[seg]
        if self.big:
            k = k.astype(object)
        out = t.starts[seg] + t.steps[seg] * k
        if t.geometric is not None:
            g = t.geometric[seg]
            if g.any():
                out[g] = t.geo_values[t.geo_base[seg[g]] + k[g].astype(np.int64)]
        return out

    def take(self, index: np.ndarray) -> np.ndarray:
        """The values at these flat indices: whole numbers as in ``scaled``, else Fractions (object)."""
        import numpy as np

        scaled = self.scaled(index)
        if self.scale == 1:
            return scaled
        out = np.empty(scaled.shape, dtype=object)
        out[...] = [_exact(Fraction(int(v), self.scale)) for v in scaled.reshape(-1)] if scaled.size else []
        return out

    def array(self) -> np.ndarray:
        """Every value as a NumPy array (for short axes; a sweep indexes with ``scaled`` instead)."""
        import numpy as np

        return self.take(np.arange(self.count, dtype=np.int64))


def _exact(value: Fraction) -> int | Fraction:
    return value.numerator if value.denominator == 1 else value


def _number(text: str, name: str) -> Fraction:
    r = vals.parse_number(text, name)
    return Fraction(int(r.p), int(r.q))


def _check(name: str, value: Fraction) -> None:
    vals.validate(name, value)


def _segment(name: str, item: str) -> Segment:
    """One comma-separated item of an axis."""
    if ".." not in item:
        value = _number(item, name)
        _check(name, value)
        return Segment(value, value, Fraction(1), False, 1)
    lo_text, _, rest = item.partition("..")
    hi_text, colon, step_text = rest.partition(":")
    if not lo_text.strip() or not hi_text.strip() or (colon and not step_text.strip()):
        raise GridError(f"{name}: malformed range {item!r}; expected a..b, a..b:step or a..b:*factor")
    start, stop = _number(lo_text, name), _number(hi_text, name)
    _check(name, start)
    _check(name, stop)
    if start > stop:
        raise GridError(f"{name}: range {item!r} is empty (its start is above its end)")
    geometric = step_text.strip().startswith("*")
    step = _number(step_text.strip().lstrip("*"), name) if colon else Fraction(1)
    integer = symtab.info(name).integer
    if geometric:
        if step <= 1:
            raise GridError(f"{name}: factor in {item!r} must be above 1")
        if integer and step.denominator != 1:
            raise GridError(f"{name}: factor in {item!r} must be whole, {name} counts things")
        if math.log(stop / start) / math.log(step) > MAX_POINTS:
            raise GridError(f"{name}: {item!r} has more than {MAX_POINTS:,} values")
        if step.denominator != 1 and math.log(stop / start) / math.log(step) > FRACTION_FACTOR_POINTS:
            raise GridError(f"{name}: {item!r} has more than {FRACTION_FACTOR_POINTS:,} values; "
                            f"with a factor that is not whole that is the most allowed")
        count, value = 0, start
        while value <= stop:
            count += 1
            if count > MAX_POINTS:
                break
            value *= step
    else:
        if step <= 0:
            raise GridError(f"{name}: step in {item!r} must be positive")
        if integer and step.denominator != 1:
            raise GridError(f"{name}: step in {item!r} must be whole, {name} counts things")
        count = int((stop - start) // step) + 1
    if count > MAX_POINTS:
        raise GridError(f"{name}: {item!r} has more than {MAX_POINTS:,} values")
    return Segment(start, stop, step, geometric, count)


def parse_axis(text: str) -> Axis:
    """An axis from 'NAME=ITEM[,ITEM...]'; the name must be in the symbol table."""
    name, sep, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    if not sep or not name or not spec:
        raise GridError(f"malformed grid {text!r}: expected NAME=VALUES, e.g. B=1..64 or S=512,1024,2048")
    symtab.info(name)  # unknown names: a clear error with a suggestion
    items = [i.strip() for i in spec.split(",")]
    if any(not i for i in items):
        raise GridError(f"{name}: empty item in {spec!r}")
    segments = tuple(_segment(name, i) for i in items)
    axis = Axis(name, spec, segments)
    if axis.count > MAX_POINTS:
        raise GridError(f"{name}: {spec!r} has {axis.count:,} values; at most {MAX_POINTS:,}")
    return axis


def grid_size(axes: list[Axis] | tuple[Axis, ...], limit: int = MAX_POINTS) -> int:
    """The number of combinations; a clear error above ``limit``."""
    total = 1
    for axis in axes:
        total *= axis.count
    if total > limit:
        sizes = " × ".join(f"{a.count:,} {a.name}" for a in axes)
        raise GridError(f"the grid has {sizes} = {total:,} combinations; at most {limit:,} are allowed")
    return total
