"""``symbolic.sweep``: a formula's terms and total over a grid, in Python, with per-term columns.

The CLI's ``symbolic sweep`` streams totals over up to millions of points; this is the notebook
version: every combination of a few axes, each term compiled once (``Formula.compile``) and
evaluated over the whole grid, kept as columns (``to_frame()`` gives a pandas DataFrame).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import UserError
from ..text import display
from .formula import Formula, Values

MAX_SWEEP_POINTS = 1_000_000  # rows kept in memory, every term a column: more belongs to the CLI


class SweepError(UserError):
    """A grid this function does not take (empty, too large, an axis also given a value)."""


@dataclass(frozen=True)
class Sweep:
    """Inputs, per-term values and totals at every grid point (row-major over the axes, in order)."""

    formula: Formula
    axes: tuple[str, ...]
    fixed: dict[str, object]
    columns: dict[str, Any]  # axis names, then term keys, then "total": NumPy arrays of equal length

    @property
    def total(self) -> Any:
        return self.columns["total"]

    @property
    def terms(self) -> tuple[str, ...]:
        return tuple(k for k in self.columns if k not in self.axes and k != "total")

    def __len__(self) -> int:
        return len(self.columns["total"])

    def table(self) -> display.Table:
        """Every point as a row: the axes, each term and the total (plain table data)."""
        names = list(self.columns)
        unit = self.formula.unit
        rows = tuple(zip(*(self.columns[n].tolist() for n in names), strict=True))
        columns = tuple((n, "" if n in self.axes else unit) for n in names)
        at = display.point_text(self.fixed.items())
        fmt = tuple("count" if n in self.axes else display.unit_format(unit) for n in names)
        return display.Table(f"{self.formula.key} over {' × '.join(self.axes)}" + (f" at {at}" if at else ""),
                             columns, rows, fmt)

    def _repr_html_(self) -> str:
        return display.html(self.table())

    def to_frame(self):  # noqa: ANN201 (pandas is optional)
        """One row per grid point, one column per axis, term and the total (needs pandas)."""
        pd = display.pandas()
        frame = pd.DataFrame(self.columns)
        frame.attrs["units"] = {n: self.formula.unit for n in self.columns if n not in self.axes}
        return frame

    def __repr__(self) -> str:
        return display.short("Sweep", self.formula.key, f"{len(self):,} points over {', '.join(self.axes)}",
                             f"{len(self.terms)} terms")


def _axis(name: str, values: object) -> Any:
    """One axis as a 1-D array: grid text ("1..64", "512,1024") or an iterable of numbers."""
    import numpy as np

    from .grid import parse_axis

    if isinstance(values, str):
        return parse_axis(f"{name}={values}").array()
    if not isinstance(values, Iterable):
        raise SweepError(f"{name}: give a list of values or grid text such as '1..64'")
    items = list(values)
    if not items:
        raise SweepError(f"{name}: no values to sweep")
    return np.asarray(items, dtype=object if any(isinstance(v, int) and abs(v) >= 2**62 for v in items) else None)


def _check_column(key: str, values: Any, inputs: Mapping[str, Any]) -> None:
    """A one-line error naming term ``key`` and the first grid point where it is negative or not a
    finite number (a term adds to the total: see ``algebra.term_value``)."""
    import numpy as np

    bad = values < 0
    if values.dtype.kind == "f":
        bad |= ~np.isfinite(values)
    if not bad.any():
        return
    i = int(np.argmax(bad))
    at = ", ".join(f"{name}={column[i]}" for name, column in inputs.items())
    if values.dtype.kind == "f" and not np.isfinite(values[i]):
        raise SweepError(f"term {key!r} is not a finite number at {at} ({values[i]}): a division by zero, or the "
                         "square root or log2 of a negative number")
    raise SweepError(f"term {key!r} is negative at {at} ({values[i]}); a term adds to the total, so it may not be "
                     "negative")


def sweep(formula: Formula, grid: Mapping[str, object], values: Values | None = None, /,
          **fixed: object) -> Sweep:
    """Each term and the total of ``formula`` at every combination of ``grid``'s axes.

    ``sweep(formula("llm.peak"), {"B": "1..8", "S": [512, 1024]}, H=768, L=12, V=50000,
    d_ff=3072, D=1024)``; the other inputs are fixed values (as for ``evaluate``). ``symbolic.sweep``
    takes a formula's key as well.
    """
    import numpy as np

    from .compiled import ZeroDivisorError

    given = {**(values or {}), **fixed}
    if not grid:
        raise SweepError("give at least one axis to sweep, e.g. {'B': '1..64'}")
    both = sorted(set(grid) & {str(k) for k in given})
    if both:
        raise SweepError(f"{', '.join(both)}: swept and also given a value")
    arrays = [_axis(name, spec) for name, spec in grid.items()]
    points = 1
    for a in arrays:
        points *= len(a)
    if points > MAX_SWEEP_POINTS:
        raise SweepError(f"the grid has {points:,} points; symbolic.sweep keeps at most {MAX_SWEEP_POINTS:,} "
                         "(use the CLI's `symbolic sweep` for larger grids)")
    mesh = [m.ravel() for m in np.meshgrid(*arrays, indexing="ij")]
    inputs = dict(zip(grid, mesh, strict=True))
    names = [*grid, *given]
    columns: dict[str, Any] = dict(inputs)
    total = None
    for term in formula.terms:
        single = Formula(term.key, term.title, [term], source=formula.source, definitions=formula.definitions)
        code = single.compile(keep=tuple(s.name for s in single.kept(names)))
        args = {k: v for k, v in {**inputs, **given}.items() if str(k) in code.inputs}
        try:
            with np.errstate(invalid="ignore", divide="ignore"):  # a nan or inf is reported below, by term
                value = code(args)
        except ZeroDivisorError:
            raise SweepError(f"term {term.key!r} divides by zero at some of these points") from None
        value = np.broadcast_to(np.asarray(value), (points,)).copy()
        _check_column(term.key, value, inputs)
        short = term.key.removeprefix(f"{formula.key}.")
        columns[short] = value
        total = value if total is None else total + value
    columns["total"] = total
    return Sweep(formula, tuple(grid), {str(k): v for k, v in given.items()}, columns)
