"""``symbolic sweep``: one formula over every combination of a grid of inputs, compiled once.

This module's top level imports only the standard library and the light CLI helpers (see the
rule in ``symbolic/cli/__init__.py``); NumPy and the compiler are imported by the handler.

Memory is bounded by the chunk, whatever the axes: an axis is never materialised whole (its
values and their CSV text are made per chunk from its segments, ``Axis.scaled``); only axes of
at most ``SMALL_AXIS`` values are tabulated once, to save formatting the same values again.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from ..core.atomic import atomic_text_open
from .common import CliError, parse_sets, print_json, table, verbosity

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from ..math.compiled import CompiledFormula, Inputs
    from ..math.formula import Formula
    from ..math.grid import Axis

CHUNK = 1 << 20  # rows computed (and written) at a time: bounded memory, progress steps
TABLE_ROWS = 100  # the text output lists every row up to this many
JSON_ROWS = 1_000_000  # --json puts rows on stdout up to this many; --csv takes any number
TEXT_ROWS = 1 << 16  # rows formatted as CSV text at a time (text takes ~10× the memory of numbers)
SMALL_AXIS = 1 << 16  # axes up to this many values have their values and labels tabulated once


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``sweep``."""
    p = sub.add_parser(
        "sweep", help="evaluate a formula over every combination of a grid (compiled, vectorised)",
        description="Evaluate a formula at every combination of the --grid values, compiled once to NumPy. "
                    "Axes: B=1..64 (inclusive range), B=1..64:8 (step), B=1..1024:*2 (factor), "
                    "S=512,1024,2048 (list); items combine: B=1..8,16,32.")
    p.add_argument("key")
    p.add_argument("--grid", action="append", required=True, metavar="NAME=VALUES",
                   help="values of one symbol to sweep (repeatable; the last varies fastest)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="fixed value of a symbol (repeatable)")
    p.add_argument("--example", action="store_true", help="start from the source's worked-example values")
    p.add_argument("--csv", metavar="OUT", help="write every row to OUT as CSV (written atomically; '-' for stdout)")
    p.add_argument("--json", action="store_true", help="machine-readable summary (and rows, without --csv)")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress on stderr: auto shows it for long sweeps when stderr is a terminal")
    p.set_defaults(handler=cmd_sweep)


# --- the plan: which symbols vary, which are fixed ---------------------------------------
def _plan(formula: Formula, args: argparse.Namespace) -> tuple[CompiledFormula, list[Axis], dict[str, object]]:
    """The compiled formula, the axes and the fixed values, all validated."""
    from ..core import symbols as symtab
    from ..core import values as vals
    from ..math import grid as grids

    axes = [grids.parse_axis(text) for text in args.grid]
    sets = parse_sets(args.set)
    inputs = {s.name for s in formula.inputs}
    seen: set[str] = set()
    for axis in axes:
        if axis.name in seen:
            raise CliError(f"{axis.name} is swept twice; give all its values in one --grid")
        seen.add(axis.name)
        if axis.name not in inputs:
            raise symtab.UnknownSymbolError(axis.name, sorted(inputs), f"formula {formula.key!r}")
        if axis.name in sets:
            raise CliError(f"{axis.name} is both swept (--grid) and fixed (--set)")
    for name in sets:
        if name not in inputs:
            raise symtab.UnknownSymbolError(name, sorted(inputs), f"formula {formula.key!r}")
    keep = sorted(s.name for s in formula.kept(seen | set(sets)))  # the one rule: N or E named stays
    compiled = formula.compile(keep=tuple(keep))
    for axis in axes:
        if axis.name not in compiled.inputs:
            raise CliError(f"{axis.name} no longer appears in {formula.key} once {', '.join(keep)} is given")
    fixed: dict[str, object] = {}
    if args.example:
        fixed.update({k: v for k, v in formula.example.items() if k in compiled.inputs and k not in seen})
    fixed.update({k: v for k, v in sets.items() if k in compiled.inputs})
    missing = [n for n in compiled.inputs if n not in seen and n not in fixed]
    if missing:
        hint = "" if args.example or not formula.example else " or --example"
        raise CliError(f"values missing for {', '.join(missing)}: give --grid or --set{hint}")
    fixed = {k: vals.validate(k, v) for k, v in fixed.items()}
    grids.grid_size(axes)
    return compiled, axes, fixed


def _exact_scalar(value: Any) -> object:
    """A validated SymPy number as an int or Fraction (what the compiler takes exactly)."""
    from fractions import Fraction

    return int(value.p) if value.q == 1 else Fraction(int(value.p), int(value.q))


# --- formatting ---------------------------------------------------------------------------
def _plain(value: object) -> int | float:
    """int for whole numbers, float otherwise (as ``Evaluation.as_dict`` does)."""
    from fractions import Fraction

    if isinstance(value, Fraction):
        return value.numerator if value.denominator == 1 else float(value)
    if hasattr(value, "item"):
        value = value.item()  # NumPy scalars
    return value  # type: ignore[return-value]


def _text(value: object) -> str:
    return str(_plain(value))


def _grouped(value: object) -> str:
    """'7,530,364,928' for whole totals, two decimals otherwise (text output only)."""
    plain = _plain(value)
    return f"{plain:,}" if isinstance(plain, int) else f"{plain:,.2f}"


def _human(unit: str, value: object) -> str:
    from ..core.units import format_bytes, format_count

    plain = _plain(value)
    return format_bytes(plain) if unit == "bytes" else format_count(plain)


def _strings(values: np.ndarray, scale: int = 1) -> np.ndarray:
    """Each value (``values / scale``) as CSV text, as an object array (indexable like the values)."""
    from fractions import Fraction

    import numpy as np

    if scale == 1 and values.dtype.kind == "i":
        return values.astype(str).astype(object)
    out = np.empty(values.shape, dtype=object)
    if scale == 1:
        out[...] = [_text(v) for v in values.reshape(-1)] if values.size else []
    else:
        out[...] = [_text(Fraction(int(v), scale)) for v in values.reshape(-1)] if values.size else []
    return out


# --- progress -----------------------------------------------------------------------------
class Progress:
    """'sweep: 45 % (472,000 of 1,048,576)' on stderr, at most every few seconds."""

    def __init__(self, label: str, total: int, enabled: bool, stream: IO[str]) -> None:
        self.label, self.total, self.enabled, self.stream = label, total, enabled, stream
        self.tty = enabled and stream.isatty()
        self.interval = 0.5 if self.tty else 5.0
        self.last = time.monotonic()

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < self.total and now - self.last < self.interval:
            return
        self.last = now
        line = f"{self.label}: {100 * done // self.total:3d} % ({done:,} of {self.total:,})"
        if self.tty:
            self.stream.write("\r" + line + ("\n" if done >= self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


# --- the command --------------------------------------------------------------------------
@dataclass
class _Grid:
    """A validated sweep: the compiled formula, its axes, fixed values and prepared inputs.

    Axis values are made per chunk from the axes' segments; ``small`` holds the scaled values
    and CSV text of the short axes (at most ``SMALL_AXIS`` each), made once.
    """

    formula: Formula
    compiled: CompiledFormula
    axes: list[Axis]
    fixed: dict[str, object]
    base: Inputs  # fixed values validated once; each axis's scale and largest value
    small: dict[str, tuple[np.ndarray, np.ndarray]]  # short axes: (scaled values, labels)

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.axes]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.count for a in self.axes)

    @property
    def total(self) -> int:
        return math.prod(self.shape)

    def column(self, axis: Axis, index: np.ndarray) -> np.ndarray:
        """The axis's scaled values at these indices (what the compiled code takes)."""
        if axis.name in self.small:
            return self.small[axis.name][0][index]
        return axis.scaled(index)

    def labels(self, axis: Axis, index: np.ndarray) -> np.ndarray:
        """The axis's values at these indices as CSV text."""
        if axis.name in self.small:
            return self.small[axis.name][1][index]
        return _strings(axis.scaled(index), axis.scale)

    def at(self, flat_index: int) -> dict[str, str]:
        """The grid values of one row, as text."""
        import numpy as np

        where = np.unravel_index(flat_index, self.shape)
        return {a.name: str(self.labels(a, np.array([int(i)]))[0]) for a, i in zip(self.axes, where)}


def _grid(formula: Formula, args: argparse.Namespace) -> _Grid:
    import numpy as np

    compiled, axes, fixed = _plan(formula, args)
    small = {}
    for a in axes:
        if a.count <= SMALL_AXIS:
            values = a.scaled(np.arange(a.count, dtype=np.int64))
            small[a.name] = (values, _strings(values, a.scale))
    columns = {a.name: (a.scaled(np.zeros(1, dtype=np.int64)), a.scale, int(a.largest * a.scale)) for a in axes}
    base = compiled.prepare_columns({k: _exact_scalar(v) for k, v in fixed.items()}, columns)
    return _Grid(formula, compiled, axes, fixed, base, small)


class _Extreme:
    """The smallest or largest total seen so far and where."""

    def __init__(self, largest: bool) -> None:
        self.largest, self.value, self.index = largest, None, -1

    def offer(self, totals: np.ndarray, offset: int) -> None:
        import numpy as np

        if not totals.size:
            return
        i = int(np.argmax(totals) if self.largest else np.argmin(totals))
        value = totals[i]
        if self.value is None or (value > self.value if self.largest else value < self.value):
            self.value, self.index = value, offset + i


def _chunks(grid: _Grid, progress: Progress) -> Iterator[tuple[int, tuple[np.ndarray, ...], np.ndarray]]:
    """(first row, per-axis indices, totals) for CHUNK rows at a time, in row order."""
    import numpy as np

    for start in range(0, grid.total, CHUNK):
        stop = min(start + CHUNK, grid.total)
        index = np.unravel_index(np.arange(start, stop), grid.shape)
        chunk = grid.base.with_arrays({a.name: grid.column(a, i) for a, i in zip(grid.axes, index)})
        yield start, index, grid.compiled.run(chunk).reshape(-1)
        del index, chunk  # freed before the next chunk is made: one chunk's arrays at a time
        progress.update(stop)


def _sweep(grid: _Grid, out: IO[str] | None, keep: bool, progress: Progress
           ) -> tuple[_Extreme, _Extreme, list[tuple[list[str], object]]]:
    """Evaluate every row; write CSV to ``out``; keep the rows in memory only if ``keep``."""
    low, high = _Extreme(False), _Extreme(True)
    rows: list[tuple[list[str], object]] = []
    if out is not None:
        out.write(",".join(grid.names + ["total"]) + "\n")
    for start, index, totals in _chunks(grid, progress):
        low.offer(totals, start)
        high.offer(totals, start)
        for lo in range(0, len(totals), TEXT_ROWS):  # text is the bulk of the memory: a slice at a time
            part = slice(lo, lo + TEXT_ROWS)
            columns = [grid.labels(a, i[part]) for a, i in zip(grid.axes, index)]
            if out is not None:
                out.write("".join(",".join(row) + "\n" for row in zip(*columns, _strings(totals[part]))))
            if keep:
                rows.extend((list(values), t) for *values, t in zip(*columns, totals[part].tolist()))
        del index, totals, columns
    return low, high, rows


def cmd_sweep(args: argparse.Namespace) -> int:
    from .. import library
    from ..math.compiled import ApproximateWarning

    formula = library.get(args.key)
    if args.json and args.csv == "-":
        raise CliError("--json and --csv - both write to stdout; give --csv a file name")
    grid = _grid(formula, args)
    mode = grid.compiled.mode(grid.base)
    if mode == "float64":
        print(f"symbolic: note: {formula.key}: {grid.compiled.inexact_reason()}; totals are float64 approximations",
              file=sys.stderr)
    keep = not args.csv and (args.json or grid.total <= TABLE_ROWS)
    if args.json and not args.csv and grid.total > JSON_ROWS:
        raise CliError(f"{grid.total:,} rows are too many for --json on stdout; add --csv FILE to write them")
    shown = args.progress == "always" or (args.progress == "auto" and grid.total > CHUNK and sys.stderr.isatty())
    progress = Progress(f"sweep {formula.key}", grid.total, shown, sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproximateWarning)  # said once above, not once a chunk
        if args.csv and args.csv != "-":
            with atomic_text_open(args.csv) as handle:
                low, high, rows = _sweep(grid, handle, keep, progress)
        else:
            low, high, rows = _sweep(grid, sys.stdout if args.csv == "-" else None, keep, progress)
    if args.csv == "-":
        return 0
    if args.json:
        print_json(_as_json(grid, mode, low, high, rows, args.csv))
    else:
        _print_text(grid, mode, low, high, rows, args.csv, verbosity(args))
    return 0


def _as_json(grid: _Grid, mode: str, low: _Extreme, high: _Extreme, rows: list[tuple[list[str], object]],
             csv: str | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "key": grid.formula.key, "title": grid.formula.title, "unit": grid.formula.unit, "count": grid.total,
        "mode": mode, "fixed": {k: _plain(_exact_scalar(v)) for k, v in grid.fixed.items()},
        "grid": [{"name": a.name, "spec": a.spec, "count": a.count} for a in grid.axes],
        "min": {"total": _plain(low.value), "at": {k: _num(v) for k, v in grid.at(low.index).items()}},
        "max": {"total": _plain(high.value), "at": {k: _num(v) for k, v in grid.at(high.index).items()}},
    }
    if csv:
        data["csv"] = csv
    else:
        data["rows"] = [{**{n: _num(v) for n, v in zip(grid.names, vs)}, "total": _plain(t)} for vs, t in rows]
    return data


def _print_text(grid: _Grid, mode: str, low: _Extreme, high: _Extreme, rows: list[tuple[list[str], object]],
                csv: str | None, level: int = 0) -> None:
    """The summary; ``level`` -1 (--quiet): the smallest and largest only, 1 (--verbose): the formula too."""
    f = grid.formula
    in_bytes = f.unit == "bytes"  # other units: the grouped count says it all
    if level >= 0:
        _print_head(grid, mode, level)
    if level >= 0 and rows:
        unit = {"bytes": "bytes", "params": "parameters", "elements": "elements"}.get(f.unit, f.unit)
        header = tuple(grid.names) + ((unit, "") if in_bytes else (unit,))
        body = [tuple(vs) + ((_grouped(t), _human(f.unit, t)) if in_bytes else (_grouped(t),)) for vs, t in rows]
        print(table([header] + body, "<" * len(grid.names) + ">>"))
    elif level >= 0 and not csv:
        print(f"  ({grid.total:,} rows: --csv FILE writes them all)")
    if csv and level >= 0:
        print(f"  wrote {grid.total:,} rows to {csv}")
    for word, extreme in (("smallest", low), ("largest", high)):
        where = ", ".join(f"{k}={v}" for k, v in grid.at(extreme.index).items())
        amount = _grouped(extreme.value)
        print(f"  {word}: {_human(f.unit, extreme.value)} ({amount}) at {where}" if in_bytes
              else f"  {word}: {amount} at {where}")


def _print_head(grid: _Grid, mode: str, level: int) -> None:
    """Formula, fixed values and grid size (with --verbose, the formula's expression too)."""
    f = grid.formula
    print(f"{f.key}: {f.title}")
    if level > 0:
        print(f"  formula: {f}")
    if grid.fixed:
        print("  at " + ", ".join(f"{k}={_text(_exact_scalar(v))}" for k, v in grid.fixed.items()))
    sizes = " × ".join(f"{a.count:,} {a.name}" for a in grid.axes)
    print(f"  over {sizes} = {grid.total:,} configurations ({mode})")


def _num(text: str) -> int | float:
    """A grid value's text back as a JSON number."""
    return int(text) if text.lstrip("-").isdigit() else float(text)
