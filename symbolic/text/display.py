"""Notebook and REPL display of results: HTML tables, pandas frames, short reprs, LaTeX.

SymPy-printing style: result objects carry data and get thin ``_repr_html_``/``to_frame``/
``__repr__`` methods that call this module; nothing here computes a number. A ``Table`` is
plain data (caption, column names with units, raw cells); ``html`` escapes every cell and
``frame`` builds a pandas DataFrame (pandas stays optional: imported only when asked).
"""

from __future__ import annotations

import html as _html
import importlib
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ..core.errors import UserError

HTML_ROWS = 30  # rows an HTML table shows before it says how many more there are (to_frame has all)


@dataclass(frozen=True)
class Table:
    """What a result shows: a caption, columns (name, unit) and rows of raw cells."""

    caption: str
    columns: tuple[tuple[str, str], ...]
    rows: tuple[tuple[object, ...], ...]
    formats: tuple[str, ...] = ()  # per column: "" plain, "bytes", "count", "ratio"
    footer: tuple[object, ...] | None = None  # a total row, shown bold, not in the frame
    notes: tuple[str, ...] = field(default=())
    shown_only: tuple[str, ...] = ("shown",)  # columns that repeat another as text: not in the frame


def _plain(value: object) -> object:
    """A Python int/float/str/bool for a cell (SymPy numbers become int or float)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Fraction):
        return int(value) if value.denominator == 1 else float(value)
    if getattr(value, "is_Integer", False):
        return int(value)  # type: ignore[call-overload]
    if getattr(value, "is_number", False) or getattr(value, "is_Number", False):
        return float(value)  # type: ignore[arg-type]
    return str(value)


def cell_text(value: object, fmt: str = "") -> str:
    """One cell as text: grouped integers, IEC bytes, four-decimal ratios."""
    from ..core.units import format_bytes, format_count

    value = _plain(value)
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if fmt == "bytes":
            return format_bytes(value)
        if fmt == "ratio":
            return f"{value:.4f}"
        return format_count(value) if isinstance(value, int) or fmt == "count" else f"{value:.6g}"
    return str(value)


def _header(name: str, unit: str) -> str:
    head = _html.escape(name)
    return f"{head}<br><small>{_html.escape(unit)}</small>" if unit else head


def html(table: Table, limit: int = HTML_ROWS) -> str:
    """A compact HTML ``<table>`` (every cell escaped), numbers right-aligned with their units."""
    formats = table.formats or ("",) * len(table.columns)
    numeric = [all(isinstance(_plain(r[i]), (int, float)) or r[i] is None for r in table.rows) and table.rows
               for i in range(len(table.columns))]
    out = ['<table class="symbolic">']
    if table.caption:
        out.append(f"<caption>{_html.escape(table.caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{_header(n, u)}</th>" for n, u in table.columns) + "</tr></thead>")
    out.append("<tbody>")

    def row(cells: Sequence[object], tag: str = "td", bold: bool = False) -> str:
        parts = []
        for i, cell in enumerate(cells):
            text = _html.escape(cell_text(cell, formats[i]))
            style = ' style="text-align:right;white-space:nowrap"' if numeric[i] or formats[i] == "bytes" \
                else ' style="text-align:left"'
            parts.append(f"<{tag}{style}>{f'<b>{text}</b>' if bold else text}</{tag}>")
        return "<tr>" + "".join(parts) + "</tr>"

    shown = table.rows[:limit]
    out += [row(r) for r in shown]
    if len(table.rows) > limit:
        out.append(f'<tr><td colspan="{len(table.columns)}">… {len(table.rows) - limit:,} more rows '
                   "(to_frame() has them all)</td></tr>")
    if table.footer is not None:
        out.append(row(table.footer, bold=True))
    out.append("</tbody></table>")
    out += [f"<p><small>{_html.escape(n)}</small></p>" for n in table.notes]
    return "".join(out)


def pandas() -> Any:
    """The pandas module, or a one-line error saying how to get it (pandas is optional)."""
    try:
        return importlib.import_module("pandas")
    except ModuleNotFoundError:
        raise MissingOptional("to_frame() needs pandas: pip install pandas") from None


class MissingOptional(UserError, ImportError):
    """An optional package (pandas, pint) that a call needs is not installed."""


def frame(table: Table) -> Any:
    """A pandas DataFrame of the table's rows (raw numbers; units in ``frame.attrs['units']``)."""
    pd = pandas()
    keep = [i for i, (n, _) in enumerate(table.columns) if n not in table.shown_only]
    names = [table.columns[i][0] for i in keep]
    data = [[_plain(r[i]) for i in keep] for r in table.rows]
    df = pd.DataFrame(data, columns=names)
    df.attrs["units"] = {table.columns[i][0]: table.columns[i][1] for i in keep if table.columns[i][1]}
    df.attrs["caption"] = table.caption
    return df


def short(kind: str, head: str, *parts: str) -> str:
    """A one-line repr: ``<Kind head: part, part>`` (never a dump of every field)."""
    body = ", ".join(p for p in parts if p)
    return f"<{kind} {head}: {body}>" if body else f"<{kind} {head}>"


def point_text(values: Iterable[tuple[str, object]], limit: int = 8) -> str:
    """``B=8, S=1024, …`` for a caption or repr, at most ``limit`` entries."""
    items = [f"{k}={cell_text(v)}".replace(",", "") for k, v in values]
    return ", ".join(items[:limit]) + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def math(latex: str) -> str:
    """LaTeX for Jupyter's ``_repr_latex_``: display style, inline delimiters."""
    return f"$\\displaystyle {latex}$"


# --- expressions with the project's names --------------------------------------------------------

class Expression:
    """A SymPy expression that typesets with the project's symbol names (``d_{\\mathrm{ff}}``).

    Compares equal to, hashes like and combines arithmetically with the SymPy expression it
    wraps (``_sympy_`` lets SymPy functions take it); ``.expr`` is the plain expression.
    """

    __slots__ = ("expr",)

    def __init__(self, expr: Any) -> None:
        self.expr = expr.expr if isinstance(expr, Expression) else expr

    def _sympy_(self) -> Any:
        return self.expr

    def latex(self) -> str:
        """LaTeX with the symbol table's display names."""
        from . import printing

        return printing.latex(self.expr)

    def _repr_latex_(self) -> str:
        return math(self.latex())

    def __str__(self) -> str:
        from . import printing

        return printing.text(self.expr)

    def __repr__(self) -> str:
        return repr(self.expr)

    def __eq__(self, other: object) -> bool:
        return bool(self.expr == (other.expr if isinstance(other, Expression) else other))

    def __hash__(self) -> int:
        return hash(self.expr)

    def __getattr__(self, name: str) -> Any:
        if name == "expr":  # not set yet (copying, unpickling): no delegation, no recursion
            raise AttributeError(name)
        return getattr(self.expr, name)

    def __getstate__(self) -> object:
        return self.expr

    def __setstate__(self, state: object) -> None:
        self.expr = state

    def _op(self, other: object, fn: Any) -> Expression:
        return Expression(fn(self.expr, other.expr if isinstance(other, Expression) else other))

    def __add__(self, o: object) -> Expression: return self._op(o, lambda a, b: a + b)  # noqa: E704
    def __radd__(self, o: object) -> Expression: return self._op(o, lambda a, b: b + a)  # noqa: E704
    def __sub__(self, o: object) -> Expression: return self._op(o, lambda a, b: a - b)  # noqa: E704
    def __rsub__(self, o: object) -> Expression: return self._op(o, lambda a, b: b - a)  # noqa: E704
    def __mul__(self, o: object) -> Expression: return self._op(o, lambda a, b: a * b)  # noqa: E704
    def __rmul__(self, o: object) -> Expression: return self._op(o, lambda a, b: b * a)  # noqa: E704
    def __truediv__(self, o: object) -> Expression: return self._op(o, lambda a, b: a / b)  # noqa: E704
    def __rtruediv__(self, o: object) -> Expression: return self._op(o, lambda a, b: b / a)  # noqa: E704
    def __pow__(self, o: object) -> Expression: return self._op(o, lambda a, b: a ** b)  # noqa: E704
    def __neg__(self) -> Expression: return Expression(-self.expr)  # noqa: E704
    def __lt__(self, o: object) -> Any: return self.expr < getattr(o, "expr", o)  # noqa: E704
    def __le__(self, o: object) -> Any: return self.expr <= getattr(o, "expr", o)  # noqa: E704
    def __gt__(self, o: object) -> Any: return self.expr > getattr(o, "expr", o)  # noqa: E704
    def __ge__(self, o: object) -> Any: return self.expr >= getattr(o, "expr", o)  # noqa: E704
    def __int__(self) -> int: return int(self.expr)  # noqa: E704
    def __float__(self) -> float: return float(self.expr)  # noqa: E704


def init_printing() -> bool:
    """Typeset SymPy expressions that hold the project's symbols with its names, in this IPython session.

    Like ``sympy.init_printing``: registers a LaTeX formatter for SymPy objects, so that
    ``f.diff("S")`` and ``f.composed()`` show ``d_{\\mathrm{ff}}`` as the formula does. Other
    expressions print as before (through the formatter registered earlier, or SymPy's own).
    Runs when ``symbolic.math.formula`` is first imported inside IPython; returns False outside it.
    """
    shell = _shell()
    if shell is None:
        return False
    import sympy

    formatter = shell.display_formatter.formatters["text/latex"]
    try:
        previous = formatter.lookup_by_type(sympy.Basic)
    except KeyError:
        previous = None
    if getattr(previous, "_symbolic", False):
        return True

    def show(expr: Any) -> str | None:
        if _has_project_symbols(expr):
            from . import printing

            return math(printing.latex(expr))
        if previous is not None:
            return previous(expr)
        return expr._repr_latex_()

    show._symbolic = True  # type: ignore[attr-defined]
    formatter.for_type(sympy.Basic, show)
    return True


def _shell() -> Any:
    """The running IPython shell, or None (IPython is never imported here)."""
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    return get() if get is not None else None


def _has_project_symbols(expr: Any) -> bool:
    """True when ``expr`` contains a symbol of the project's table (the same SymPy object)."""
    from ..core import symbols as symtab

    table = {info.symbol for info in symtab.all_symbols()}
    return any(s in table or isinstance(s, symtab.ScopedSymbol) for s in getattr(expr, "free_symbols", ()))


# --- tables of results whose classes live in other layers (duck-typed: nothing is imported) ------

def unit_format(unit: str) -> str:
    """The cell format of a formula's unit."""
    return "bytes" if unit == "bytes" else "count"


def plan_table(plan: Any) -> Table:
    """A Plan: each term in whole bytes (as ``plan.terms()``), the phases it is alive in, and the peak."""
    layout = getattr(plan, "layout", None)
    components = layout.components() if layout is not None else plan.formula.terms
    titles = {t.key: t.title for t in components}
    where = layout.where() if layout is not None else {}
    terms = plan.terms()
    rows = tuple((key, titles.get(key, ""), ", ".join(where.get(key, ("resident",))), value, value)
                 for key, value in terms.items())
    regime = getattr(plan, "regime", None)
    mode = getattr(regime, "mode", "")
    peak = getattr(plan, "peak_phase", None)
    caption = f"{getattr(plan.model, 'name', '')} {mode}: per-GPU memory".strip()
    notes: tuple[str, ...] = ()
    if peak:
        caption += f", peak in the {peak} phase"
        found = plan.phase_bytes()
        notes = ("phases: " + ", ".join(f"{k} {cell_text(v, 'bytes')}" for k, v in found.items())
                 + f"; the {peak} phase leads by {cell_text(plan.peak_lead, 'bytes')}",)
    return Table(caption, (("term", ""), ("title", ""), ("alive in", ""), ("bytes", "B"), ("shown", "IEC")), rows,
                 ("", "", "", "count", "bytes"), (f"total (peak: {peak})" if peak else "total", "", "", plan.total,
                                                  plan.total), notes)


def serve_table(plan: Any) -> Table:
    """A ServePlan: each term per GPU in whole bytes with its source, inside the engine's budget or beside it."""
    found = plan.term_bytes()
    rows = tuple((t.key, t.title, t.source, "no" if t.key in plan.outside else "yes", found[t.key], found[t.key])
                 for t in plan.terms)
    caption = f"{plan.model} served with {plan.engine} on {plan.gpus} × {plan.gpu}: per-GPU memory"
    notes = (f"weights {cell_text(plan.weights_bytes, 'bytes')} ({plan.weights}), non-KV "
             f"{cell_text(plan.non_kv_bytes, 'bytes')}, KV pool {cell_text(plan.kv_cache_bytes, 'bytes')}: "
             f"{cell_text(plan.kv_cache_tokens, 'count')} tokens",)
    if "prefill" in plan.figures:
        notes += (f"prefill: {plan.figures['prefill']}",)
    if plan.max_concurrency is not None and plan.seq is not None:
        notes += (f"maximum concurrency at {cell_text(plan.seq, 'count')} tokens: {plan.max_concurrency}"
                  + ("" if plan.fits else " (nothing fits)"),)
    if plan.max_context is not None and plan.batch is not None:
        notes += (f"longest context at {plan.batch} requests at once: {cell_text(plan.max_context, 'count')} tokens",)
    notes += tuple(plan.log_lines)
    return Table(caption, (("term", ""), ("title", ""), ("source", ""), ("in budget", ""), ("bytes", "B"),
                           ("shown", "IEC")), rows, ("", "", "", "", "count", "bytes"),
                 ("budget", "", "", "", plan.budget_bytes, plan.budget_bytes), notes)


def fit_table(fit: Any) -> Table:
    """A Fit: capacity, per-GPU total and headroom in bytes and IEC units, and whether it fits."""
    gpu, budget = fit.gpu, fit.limit
    rows = tuple((n, v, cell_text(v, "bytes")) for n, v in
                 (("capacity", budget.bytes), ("per-GPU total", fit.total), ("headroom", fit.headroom)))
    verdict = "fits" if fit.fits else "does not fit"
    return Table(f"{verdict} on {budget.label} ({gpu.title})", (("", ""), ("bytes", "B"), ("shown", "IEC")),
                 (*rows, ("fits", fit.fits, "")), notes=budget.notes)


def breakdown_table(name: str, components: Sequence[Any]) -> Table:
    """A model's parameters per component (per-layer ones times the layers that have them)."""
    rows = tuple((c.key, c.title, c.per_layer, c.layers or None, c.total) for c in components)
    total = sum(c.total for c in components)
    return Table(f"{name}: parameters per component", (("component", ""), ("title", ""),
                 ("per layer", "parameters"), ("layers", ""), ("parameters", "parameters")), rows,
                 ("", "", "count", "count", "count"), ("total", "", None, None, total))
