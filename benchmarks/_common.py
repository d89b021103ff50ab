"""Shared helpers of the benchmarks: interleaved repeated timing, medians, README tables.

Every figure a benchmark reports is a ratio of medians measured in the same run, with the
candidates timed in turn inside each repetition, so a busy machine slows both sides alike.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def interleaved(candidates: dict[str, Callable[[], object]], repeat: int, min_sample: float = 0.05) -> dict[str, float]:
    """Median seconds per call of each candidate over ``repeat`` rounds; each round runs them all.

    A fast candidate is called several times in a row per sample (enough for ``min_sample``
    seconds) so that timer resolution and one-off hiccups do not dominate.
    """
    loops = {}
    for name, fn in candidates.items():
        start = time.perf_counter()
        fn()
        loops[name] = max(1, math.ceil(min_sample / max(time.perf_counter() - start, 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeat):
        for name, fn in candidates.items():
            start = time.perf_counter()
            for _ in range(loops[name]):
                fn()
            samples[name].append((time.perf_counter() - start) / loops[name])
    return {name: statistics.median(values) for name, values in samples.items()}


def seconds(value: float) -> str:
    """A duration with a unit that keeps three significant digits."""
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.1f} µs"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def update_readme(block: str, text: str, path: Path | None = None) -> None:
    """Replace the text between ``<!-- bench:BLOCK -->`` and ``<!-- /bench:BLOCK -->`` in the page that has
    the block (README.md or docs/*.md; most are in docs/performance.md)."""
    pattern = re.compile(rf"(<!-- bench:{re.escape(block)} -->\n).*?(<!-- /bench:{re.escape(block)} -->)", re.S)
    pages = [path] if path is not None else [README, *sorted((ROOT / "docs").glob("*.md"))]
    path = next((p for p in pages if pattern.search(p.read_text(encoding="utf-8"))), None)
    if path is None:
        raise SystemExit(f"no page has a <!-- bench:{block} --> ... <!-- /bench:{block} --> block")
    content = path.read_text(encoding="utf-8")
    path.write_text(pattern.sub(lambda m: m.group(1) + text.rstrip() + "\n" + m.group(2), content), encoding="utf-8")


def publish(block: str, table: str, note: str, readme: bool) -> None:
    """Print a result table and its note; with ``readme``, also write them into the README block."""
    print(table)
    print()
    print(note)
    if readme:
        update_readme(block, table + "\n\n" + note)
