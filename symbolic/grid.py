"""Sweep grids: 'B=1..64', 'S=512,1024,2048', 'B=1..1024:*2' parsed into exact, validated axes.

Text is parsed by hand and every number goes through ``values.parse_number`` (never an
evaluator). An axis knows its length before any value is made, so a grid of a billion points is
refused before memory is spent on it. NumPy is imported only when an axis is materialised.

Grammar of one axis, ``NAME=ITEM[,ITEM...]``, where ITEM is

- ``v``: one value (``768``, ``0.5``, ``1/2``, ``1e6``);
- ``a..b``: every whole step from a to b inclusive;
- ``a..b:s``: a, a+s, a+2s, ... up to b (s may be a fraction: ``0.5..2:0.5``);
- ``a..b:*f``: a, a·f, a·f², ... up to b (f > 1: ``1..1024:*2`` gives powers of two).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from . import symbols as symtab
from . import values as vals

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

MAX_POINTS = 50_000_000  # per axis and per grid: 50 M int64 totals are 400 MB


class GridError(ValueError):
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
class Axis:
    """One swept symbol: its name, the text it came from and its segments in order."""

    name: str
    spec: str
    segments: tuple[Segment, ...]

    @property
    def count(self) -> int:
        return sum(s.count for s in self.segments)

    @property
    def whole(self) -> bool:
        """True when every value is a whole number."""
        return all(s.start.denominator == 1 and s.step.denominator == 1 for s in self.segments)

    def array(self) -> np.ndarray:
        """The values as a NumPy array: int64 (or Python ints) when whole, else Fractions (object)."""
        import numpy as np

        parts = []
        for seg in self.segments:
            if self.whole and not seg.geometric and seg.last <= 2**62:
                parts.append(np.arange(int(seg.start), int(seg.last) + 1, int(seg.step), dtype=np.int64))
            else:
                items = [int(v) if v.denominator == 1 else v for v in seg.values()]
                big = any(isinstance(v, Fraction) or v > 2**62 for v in items)
                part = np.empty(len(items), dtype=object) if big else np.array(items, dtype=np.int64)
                if big:
                    part[:] = items
                parts.append(part)
        if not parts:  # pragma: no cover - an axis always has a segment
            return np.empty(0, dtype=np.int64)
        kinds = {p.dtype for p in parts}
        return np.concatenate(parts) if len(kinds) == 1 else np.concatenate([p.astype(object) for p in parts])


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
