"""Report charts as deterministic SVG text (matplotlib, Agg canvas, no pyplot state).

Same data, same bytes: ``svg.hashsalt`` fixes the ids, ``svg.fonttype = 'path'`` draws glyphs as
outlines from matplotlib's bundled DejaVu Sans (no dependence on installed fonts) and the
``Date`` metadata is dropped. Colours follow the term's position so that the breakdown and the
sweep charts agree.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac", "#86bcb6", "#d4a6c8", "#8cd17d", "#f1ce63", "#a0cbe8", "#ffbe7d")
LINE_STYLES = ("--", "-.", ":", (0, (6, 2, 1, 2)), (0, (2, 2)), (0, (8, 3)), (0, (4, 1, 1, 1, 1, 1)), "--")
GPU_COLORS = ("#222222", "#c0392b", "#1f618d", "#7d3c98", "#117a65", "#9a7d0a", "#6e2c00", "#566573")
WIDTH_IN = 6.7
RC = {
    "svg.hashsalt": "symbolic-report",
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "font.size": 8.0,
    "axes.titlesize": 9.0,
    "axes.labelsize": 8.0,
    "legend.fontsize": 7.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": False,
}
UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("bytes", 1))


@dataclass(frozen=True)
class Series:
    """One stacked layer of a chart: a label and a value per x."""

    label: str
    values: tuple[float, ...]


def colour(index: int) -> str:
    """The colour of the term at ``index`` (shared by every chart)."""
    return PALETTE[index % len(PALETTE)]


def unit_for(largest: float) -> tuple[str, int]:
    """The IEC unit that keeps the largest value at least 1."""
    for label, size in UNITS:
        if largest >= size:
            return label, size
    return "bytes", 1


def _figure(height: float):  # noqa: ANN202 - matplotlib Figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, height))
    FigureCanvasAgg(fig)
    return fig


def _svg(fig) -> str:  # noqa: ANN001
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context(RC):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": "symbolic"})
    text = buffer.getvalue()
    text = re.sub(r"<\?xml[^>]*>\s*", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)
    return text


def _context():  # noqa: ANN202
    import matplotlib

    return matplotlib.rc_context(RC)


def _legend_rows(count: int, columns: int) -> int:
    return -(-count // columns)


def short(label: str, limit: int = 46) -> str:
    """A legend label cut to ``limit`` characters (tables carry the full title)."""
    return label if len(label) <= limit else label[: limit - 1].rstrip(" ,;:(") + "…"


def breakdown(labels: Sequence[str], values: Sequence[float], colours: Sequence[str]) -> str:
    """One horizontal bar, stacked by term in the author's order, with the share of each term."""
    total = float(sum(values))
    unit, size = unit_for(total)
    columns = 2
    rows = _legend_rows(len(labels), columns)
    with _context():
        fig = _figure(1.05 + 0.19 * rows)
        ax = fig.add_axes((0.03, 1 - 0.55 / (1.05 + 0.19 * rows), 0.94, 0.28 / (1.05 + 0.19 * rows)))
        left = 0.0
        handles = []
        for label, value, col in zip(labels, values, colours):
            width = float(value) / size
            bar = ax.barh([0], [width], left=[left], color=col, edgecolor="white", linewidth=0.6, height=0.8)
            share = float(value) / total if total else 0.0
            if share >= 0.07:
                ax.text(left + width / 2, 0, f"{share:.0%}", ha="center", va="center", color="white",
                        fontsize=7.5, fontweight="bold")
            handles.append((bar, f"{short(label)}: {share:.1%}"))
            left += width
        ax.set_xlim(0, left * 1.0001 if left else 1)
        ax.set_ylim(-0.5, 0.5)
        ax.set_yticks([])
        ax.spines["left"].set_visible(False)
        ax.set_xlabel(f"memory per GPU ({unit})", labelpad=2)
        fig.legend([h for h, _ in handles], [t for _, t in handles], loc="upper left", ncols=columns,
                   bbox_to_anchor=(0.02, 1 - 0.98 / (1.05 + 0.19 * rows)), frameon=False, handlelength=1.2,
                   columnspacing=1.5)
        return _svg(fig)


def sweep(xlabel: str, xs: Sequence[int], layers: Sequence[Series], colours: Sequence[str],
          capacities: Sequence[tuple[str, float]], current: int | None = None) -> str:
    """Memory against one input: stacked terms, their total, and each GPU's capacity as a line."""
    totals = [sum(layer.values[i] for layer in layers) for i in range(len(xs))]
    largest = max([*totals, *(c for _, c in capacities)] or [1])
    unit, size = unit_for(largest)
    columns = 2
    rows = _legend_rows(len(layers) + len(capacities) + 1, columns)
    plot_in, top_in, axis_in, row_in = 2.2, 0.08, 0.42, 0.165
    height = top_in + plot_in + axis_in + row_in * rows + 0.06
    with _context():
        fig = _figure(height)
        ax = fig.add_axes((0.085, (height - top_in - plot_in) / height, 0.895, plot_in / height))
        scaled = [[v / size for v in layer.values] for layer in layers]
        stacks = ax.stackplot(list(xs), *scaled, colors=list(colours), alpha=0.85, linewidth=0)
        (line,) = ax.plot(list(xs), [v / size for v in totals], color="black", linewidth=1.3, marker="o",
                          markersize=2.5)
        gpu_lines = []
        for index, (_name, capacity) in enumerate(capacities):
            gpu_lines.append(ax.axhline(capacity / size, color=GPU_COLORS[index % len(GPU_COLORS)],
                                        linestyle=LINE_STYLES[index % len(LINE_STYLES)], linewidth=1.2))
        if current is not None and xs[0] <= current <= xs[-1]:
            ax.axvline(current, color="#888888", linewidth=0.8, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.set_xlim(xs[0], xs[-1])
        ax.set_xticks(list(xs))
        ax.set_xticklabels([_short(x) for x in xs], rotation=0 if len(xs) <= 12 else 45)
        ax.minorticks_off()
        ax.set_ylim(0, largest / size * 1.08)
        ax.set_xlabel(xlabel, labelpad=2)
        ax.set_ylabel(f"memory per GPU ({unit})")
        ax.grid(axis="y", color="#dddddd", linewidth=0.5)
        ax.set_axisbelow(True)
        handles = [line, *gpu_lines, *stacks]
        names = ["total", *(f"{short(name, 30)}: {_amount(capacity)}" for name, capacity in capacities),
                 *(short(layer.label) for layer in layers)]
        fig.legend(handles, names, loc="lower left", ncols=columns, bbox_to_anchor=(0.0, 0.0), frameon=False,
                   handlelength=2.0, columnspacing=1.2, labelspacing=0.35, borderaxespad=0.2)
        return _svg(fig)


def elasticities(labels: Sequence[str], values: Sequence[float]) -> str:
    """Horizontal bars of x/M · ∂M/∂x, largest at the top, labelled with their value."""
    count = max(len(labels), 1)
    height = 0.55 + 0.24 * count
    with _context():
        fig = _figure(height)
        ax = fig.add_axes((0.14, 0.38 / height, 0.78, 1 - 0.5 / height))
        positions = list(range(count))[::-1]
        ax.barh(positions, list(values), color=[colour(0) if v >= 0 else colour(3) for v in values], height=0.65)
        ax.set_yticks(positions)
        ax.set_yticklabels(list(labels))
        top = max([abs(v) for v in values] or [1]) or 1.0
        low = min([0.0, *values])
        ax.set_xlim(low - (top * 0.05 if low < 0 else 0), max(values or [0]) + top * 0.2)
        for y, v in zip(positions, values):
            ax.text(max(v, 0.0) + top * 0.01, y, f"{v:.3f}", va="center", ha="left", fontsize=7.5)
        ax.axvline(0, color="black", linewidth=0.6)
        ax.set_xlabel("elasticity: % more memory for 1 % more of the input", labelpad=2)
        ax.grid(axis="x", color="#dddddd", linewidth=0.5)
        ax.set_axisbelow(True)
        return _svg(fig)


def _short(x: int) -> str:
    if x >= 2**20 and x % 2**20 == 0:
        return f"{x // 2**20}M"
    if x >= 1024 and x % 1024 == 0:
        return f"{x // 1024}k"
    return str(x)


def _amount(value: float) -> str:
    label, size = unit_for(value)
    return f"{value / size:.4g} {label}"
