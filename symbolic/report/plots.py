"""Report charts as deterministic SVG text (matplotlib, Agg canvas, no pyplot state).

Same data, same bytes: ``svg.hashsalt`` fixes the ids, ``svg.fonttype = 'path'`` draws glyphs as
outlines from matplotlib's bundled DejaVu Sans (no dependence on installed fonts) and the
``Date`` metadata is dropped; each glyph is then drawn in place instead of through a ``<use>``
(``svgglyphs.inline``: the same outlines, half the nodes for WeasyPrint). Colours follow the
term's position so that the breakdown and the sweep charts agree.
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from . import svgglyphs

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac", "#86bcb6", "#d4a6c8", "#8cd17d", "#f1ce63", "#a0cbe8", "#ffbe7d")
LINE_STYLES = ("--", "-.", ":", (0, (6, 2, 1, 2)), (0, (2, 2)), (0, (8, 3)), (0, (4, 1, 1, 1, 1, 1)), "--")
GPU_COLORS = ("#222222", "#c0392b", "#1f618d", "#7d3c98", "#117a65", "#9a7d0a", "#6e2c00", "#566573")
MARK_COLOR = "#8e44ad"
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
    return svgglyphs.inline(text)


def _context():  # noqa: ANN202
    import matplotlib

    return matplotlib.rc_context(RC)


LEGEND_WIDTH = 44  # characters per legend line (two columns on A4); longer labels wrap, never cut
LABEL_GAP = 0.06  # least distance between two capacity labels, as a fraction of the plot's height
ABOVE = 2.0  # a sweep's y axis stops at this multiple of the largest capacity when totals run far past it
X_MARGIN = 2 ** 0.2  # the log-x axis reaches this factor beyond the first and last point (whole markers)


def wrap(label: str, width: int = LEGEND_WIDTH) -> str:
    """A legend label broken into lines of at most ``width`` characters (the whole label, never cut)."""
    return textwrap.fill(label, width, break_long_words=True, break_on_hyphens=False) or label


def legend_lines(labels: Sequence[str], columns: int) -> float:
    """Text lines a legend of ``labels`` needs, filled column by column as matplotlib does."""
    if not labels:
        return 0.0
    rows = -(-len(labels) // columns)
    heights = [1] * rows
    for index, label in enumerate(labels):
        heights[index % rows] = max(heights[index % rows], label.count("\n") + 1)
    return float(sum(heights))


def spread(positions: Sequence[float], gap: float) -> list[float]:
    """Label heights near ``positions`` (same order), moved up just enough to be ``gap`` apart."""
    order = sorted(range(len(positions)), key=lambda i: positions[i])
    out = list(positions)
    previous = None
    for i in order:
        if previous is not None and out[i] < previous + gap:
            out[i] = previous + gap
        previous = out[i]
    return out


def y_top(totals: Sequence[float], capacities: Sequence[float]) -> float:
    """Top of a sweep's y axis: everything, unless the totals dwarf the GPUs (then ABOVE × the largest)."""
    largest = max([*totals, *capacities] or [1.0])
    if capacities and max(totals or [0.0]) > ABOVE * max(capacities):
        largest = max(ABOVE * max(capacities), min(totals or [0.0]))
    return largest


def breakdown_figure(labels: Sequence[str], values: Sequence[float], colours: Sequence[str]):  # noqa: ANN201
    """The breakdown chart as a matplotlib Figure (``breakdown`` draws it as SVG)."""
    total = float(sum(values))
    unit, size = unit_for(total)
    columns = 2
    names = [wrap(f"{label}: {float(value) / total if total else 0.0:.1%}") for label, value in zip(labels, values)]
    rows = legend_lines(names, columns)
    height = 1.05 + 0.15 * rows
    with _context():
        fig = _figure(height)
        ax = fig.add_axes((0.03, 1 - 0.55 / height, 0.94, 0.28 / height))
        left = 0.0
        handles = []
        for value, col in zip(values, colours):
            width = float(value) / size
            bar = ax.barh([0], [width], left=[left], color=col, edgecolor="white", linewidth=0.6, height=0.8)
            share = float(value) / total if total else 0.0
            if share >= 0.07:
                ax.text(left + width / 2, 0, f"{share:.0%}", ha="center", va="center", color="white",
                        fontsize=7.5, fontweight="bold")
            handles.append(bar)
            left += width
        ax.set_xlim(0, left * 1.0001 if left else 1)
        ax.set_ylim(-0.5, 0.5)
        ax.set_yticks([])
        ax.spines["left"].set_visible(False)
        ax.set_xlabel(f"memory per GPU ({unit})", labelpad=2)
        fig.legend(handles, names, loc="upper left", ncols=columns, bbox_to_anchor=(0.02, 1 - 0.98 / height),
                   frameon=False, handlelength=1.2, columnspacing=1.5, labelspacing=0.3)
        return fig


def breakdown(labels: Sequence[str], values: Sequence[float], colours: Sequence[str]) -> str:
    """One horizontal bar, stacked by term in the author's order, with the share of each term."""
    return _svg(breakdown_figure(labels, values, colours))


def sweep_figure(xlabel: str, xs: Sequence[int], layers: Sequence[Series], colours: Sequence[str],
                 capacities: Sequence[tuple[str, float]], current: int | None = None,
                 marks: Sequence[tuple[int, str, str]] = ()):  # noqa: ANN201
    """The sweep chart as a matplotlib Figure (``sweep`` draws it as SVG).

    Each capacity line carries its label at the right, spread apart so that GPUs of nearly equal
    memory (80 GB, 80 GiB, 94 GB) stay readable; ``marks`` are vertical lines (x, legend label,
    short tag written beside the line), e.g. the context the model was trained for. Markers are never clipped by the axes; totals above the
    y axis (see ``y_top``) are shown as triangles on its top edge.
    """
    totals = [sum(layer.values[i] for layer in layers) for i in range(len(xs))]
    top = y_top(totals, [c for _, c in capacities])
    unit, size = unit_for(max([*totals, *(c for _, c in capacities)] or [1]))
    columns = 2
    above = [i for i, t in enumerate(totals) if t > top * 1.08]
    names = ["total" + (" (▲: above the chart, see the table)" if above else ""),
             *(wrap(f"{name}: {_amount(capacity)}") for name, capacity in capacities),
             *(wrap(label) for _, label, _ in marks), *(wrap(layer.label) for layer in layers)]
    plot_in, top_in, axis_in, line_in = 2.2, 0.08, 0.42, 0.135
    height = top_in + plot_in + axis_in + line_in * legend_lines(names, columns) + 0.1
    with _context():
        fig = _figure(height)
        ax = fig.add_axes((0.085, (height - top_in - plot_in) / height, 0.895, plot_in / height))
        scaled = [[v / size for v in layer.values] for layer in layers]
        stacks = ax.stackplot(list(xs), *scaled, colors=list(colours), alpha=0.85, linewidth=0)
        ylim = top / size * 1.08
        (line,) = ax.plot(list(xs), [v / size for v in totals], color="black", linewidth=1.3)
        inside = [i for i in range(len(xs)) if i not in above]
        ax.plot([xs[i] for i in inside], [totals[i] / size for i in inside], color="black", linestyle="none",
                marker="o", markersize=2.5, clip_on=False, zorder=4)
        if above:
            ax.plot([xs[i] for i in above], [ylim] * len(above), color="black", linestyle="none", marker="^",
                    markersize=4, clip_on=False, zorder=4)
        gpu_lines = []
        for index, (_name, capacity) in enumerate(capacities):
            gpu_lines.append(ax.axhline(capacity / size, color=GPU_COLORS[index % len(GPU_COLORS)],
                                        linestyle=LINE_STYLES[index % len(LINE_STYLES)], linewidth=1.2))
        heights = spread([c / size / ylim for _, c in capacities], LABEL_GAP)
        for index, ((name, capacity), y) in enumerate(zip(capacities, heights)):
            ax.text(0.995, y + 0.012, f"{name}: {_amount(capacity)}", transform=ax.transAxes, ha="right", va="bottom",
                    fontsize=6.5, color=GPU_COLORS[index % len(GPU_COLORS)], gid=f"capacity-label-{index}",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.75, "pad": 0.6})
        if current is not None and xs[0] <= current <= xs[-1]:
            ax.axvline(current, color="#888888", linewidth=0.8, linestyle=":")
        mark_lines = []
        for x, _, tag in marks:
            mark_lines.append(ax.axvline(x, color=MARK_COLOR, linewidth=1.1, linestyle="-."))
            ax.text(x, 0.97, tag, transform=ax.get_xaxis_transform(), rotation=90, ha="right", va="top",
                    fontsize=6.5, color=MARK_COLOR, gid="mark-label",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.75, "pad": 0.6})
        ax.set_xscale("log", base=2)
        ax.set_xlim(xs[0] / X_MARGIN, xs[-1] * X_MARGIN)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([_short(x) for x in xs], rotation=0 if len(xs) <= 12 else 45)
        ax.minorticks_off()
        ax.set_ylim(0, ylim)
        ax.set_xlabel(xlabel, labelpad=2)
        ax.set_ylabel(f"memory per GPU ({unit})")
        ax.grid(axis="y", color="#dddddd", linewidth=0.5)
        ax.set_axisbelow(True)
        handles = [line, *gpu_lines, *mark_lines, *stacks]
        fig.legend(handles, names, loc="lower left", ncols=columns, bbox_to_anchor=(0.0, 0.0), frameon=False,
                   handlelength=2.0, columnspacing=1.2, labelspacing=0.35, borderaxespad=0.2)
        return fig


def sweep(xlabel: str, xs: Sequence[int], layers: Sequence[Series], colours: Sequence[str],
          capacities: Sequence[tuple[str, float]], current: int | None = None,
          marks: Sequence[tuple[int, str, str]] = ()) -> str:
    """Memory against one input: stacked terms, their total, and each GPU's capacity as a line."""
    return _svg(sweep_figure(xlabel, xs, layers, colours, capacities, current, marks))


def elasticities(labels: Sequence[str], values: Sequence[float]) -> str:
    """Horizontal bars of x/M · ∂M/∂x, largest at the top, labelled with their value."""
    return _svg(elasticities_figure(labels, values))


def elasticities_figure(labels: Sequence[str], values: Sequence[float]):  # noqa: ANN201
    """The elasticity chart as a matplotlib Figure (``elasticities`` draws it as SVG)."""
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
        return fig


def plan(xs: Sequence[float], ys: Sequence[float], frontier: Sequence[int], xlabel: str, ylabel: str,
         log_x: bool) -> str:
    """Every fitting layout a dot, the frontier joined, the first (chosen) layout starred."""
    return _svg(plan_figure(xs, ys, frontier, xlabel, ylabel, log_x))


def plan_figure(xs: Sequence[float], ys: Sequence[float], frontier: Sequence[int], xlabel: str, ylabel: str,
                log_x: bool):  # noqa: ANN201
    """The plan chart as a matplotlib Figure (``plan`` draws it as SVG): the axes leave room for both labels."""
    height, left_in, bottom_in, top_in, right_in = 3.2, 0.62, 0.52, 0.1, 0.12
    with _context():
        fig = _figure(height)
        ax = fig.add_axes((left_in / WIDTH_IN, bottom_in / height, 1 - (left_in + right_in) / WIDTH_IN,
                           1 - (bottom_in + top_in) / height))
        ax.scatter(xs, ys, s=10, color=colour(0), alpha=0.5, label="layouts that fit")
        front = sorted(frontier, key=lambda i: xs[i])
        ax.plot([xs[i] for i in front], [ys[i] for i in front], color=colour(1), marker="o", markersize=4,
                label="frontier")
        ax.scatter([xs[0]], [ys[0]], s=80, marker="*", color=colour(2), zorder=3, label="chosen")
        ax.set_xlabel(xlabel, labelpad=2)
        ax.set_ylabel(ylabel)
        if log_x:
            ax.set_xscale("log", base=2)
        ax.legend(frameon=False, fontsize=8)
        return fig


def concurrency(contexts: Sequence[int], lines: Sequence[tuple[str, Sequence[float]]]) -> str:
    """Requests at once against tokens per request, one line per GPU (``lines``: label and values)."""
    return _svg(concurrency_figure(contexts, lines))


def concurrency_figure(contexts: Sequence[int], lines: Sequence[tuple[str, Sequence[float]]]):  # noqa: ANN201
    """The serving chart as a matplotlib Figure (``concurrency`` draws it as SVG): log-2 context axis."""
    height, left_in, bottom_in, top_in, right_in = 3.0, 0.62, 0.52, 0.1, 0.12
    with _context():
        fig = _figure(height)
        ax = fig.add_axes((left_in / WIDTH_IN, bottom_in / height, 1 - (left_in + right_in) / WIDTH_IN,
                           1 - (bottom_in + top_in) / height))
        for index, (label, values) in enumerate(lines):
            ax.plot(contexts, values, color=GPU_COLORS[index % len(GPU_COLORS)], marker="o", markersize=4,
                    label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(contexts), [_short(c) for c in contexts])
        ax.set_xlabel("tokens per request", labelpad=2)
        ax.set_ylabel("requests at once")
        ax.set_ylim(bottom=0)
        ax.grid(color="#dddddd", linewidth=0.5)
        ax.set_axisbelow(True)
        ax.legend(frameon=False, fontsize=8)
        return fig


def _short(x: int) -> str:
    if x >= 2**20 and x % 2**20 == 0:
        return f"{x // 2**20}M"
    if x >= 1024 and x % 1024 == 0:
        return f"{x // 1024}k"
    return str(x)


def _amount(value: float) -> str:
    label, size = unit_for(value)
    return f"{value / size:.4g} {label}"
