#!/usr/bin/env python3
"""Report build time: the default PDF report against WeasyPrint rendering the same HTML alone.

``build(None, Outputs(pdf=...))`` inside ``collector.opted_in()`` is what ``symbolic report -o x.pdf``
does (the CLI lets the build apply its garbage-collector policy; see ``core/collector.py``). The baseline is
``render.html_to_pdf`` (WeasyPrint with the report's URL fetcher and fixed metadata) on the very
HTML that build produces, captured once; the script checks that it gives the same PDF bytes, so
both sides lay out the same document and the difference is everything the report adds.

In one process, after a warm-up build (imports, fonts), every round times in turn:

- ``build``: a build with the in-process memos cleared first (SymPy's cache, every
  ``lru_cache`` in ``symbolic``, compiled formulas): what a new report costs, as in the CLI;
- ``build, collector left alone``: the same with ``render.frozen_heap`` turned off, as before it
  was added (the garbage collector then traverses every long-lived object on each full pass);
- ``build, caches kept``: the same report built again, the memos still full;
- ``staged``: the same steps as ``build``, each timed (the collection and freeze, specification
  and scenario, the context with its typesetting and charts timed apart, HTML, PDF); its PDF is
  checked against build's;
- ``WeasyPrint alone``: the captured HTML to PDF.

Then, unless ``--cli-repeat 0``, each round runs ``symbolic report -q -o x.pdf`` and a script that
imports only WeasyPrint and renders the same HTML, each in a fresh interpreter (start-up
included on both sides).

Usage: ``python benchmarks/bench_report.py [--repeat 5] [--cli-repeat 3] [--profile] [--readme]``;
``--profile`` prints cProfile's top functions of one build with the memos cleared.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ROOT, markdown_table, seconds, update_readme  # noqa: E402

PY = sys.executable
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")

# WeasyPrint alone in a fresh interpreter: the same call as render.html_to_pdf, without importing
# symbolic (the HTML is self-contained, so WeasyPrint's own URL fetcher gives the same bytes).
WEASYPRINT_ONLY = """
import hashlib, logging, sys
import weasyprint
logging.getLogger("fontTools").setLevel(logging.ERROR)
html = open(sys.argv[1], encoding="utf-8").read()
identifier = hashlib.sha256(html.encode("utf-8")).hexdigest()[:32].encode("ascii")
pdf = weasyprint.HTML(string=html, base_url=sys.argv[2]).write_pdf(pdf_identifier=identifier)
open(sys.argv[3], "wb").write(pdf)
"""

STAGES = ("collect + freeze", "spec + scenario", "typesetting", "charts", "context, rest", "HTML", "PDF")
STAGE_TITLES = {
    "collect + freeze": "garbage collector: one full collection, then `gc.freeze()` (`render.frozen_heap`)",
    "spec + scenario": "specification and scenario (TOML, planner, formulas)",
    "typesetting": "context: formulas typeset to SVG (ziamath), widths measured for line breaks",
    "charts": "context: four charts (matplotlib SVG)",
    "context, rest": "context: the rest (exact evaluation, solving, sensitivities, sweeps, tables)",
    "HTML": "HTML (jinja2)",
    "PDF": "PDF (WeasyPrint)",
}


def clear_caches() -> None:
    """Drop the memos a second build in the same process would reuse; imports and loaded fonts stay."""
    import sympy.core.cache

    from symbolic.math import compiled

    for name, module in list(sys.modules.items()):
        if name != "symbolic" and not name.startswith("symbolic."):
            continue
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", None) == name:
                value.cache_clear()
    compiled.clear_cache()
    sympy.core.cache.clear_cache()


@contextlib.contextmanager
def timers(spent: dict[str, float]) -> Iterator[None]:
    """Accumulate the time spent in ziamath typesetting and in the chart functions into ``spent``."""
    from symbolic.report import mathsvg, plots

    def timed(fn: Callable, key: str) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - start
        return wrapper

    originals = {(mathsvg, "typeset"): mathsvg.typeset}
    originals.update({(plots, name): getattr(plots, name) for name in ("breakdown", "sweep", "elasticities")})
    try:
        for (module, name), fn in originals.items():
            setattr(module, name, timed(fn, "typesetting" if module is mathsvg else "charts"))
        yield
    finally:
        for (module, name), fn in originals.items():
            setattr(module, name, fn)


def staged_build(spec_path: Path) -> tuple[dict[str, float], bytes]:
    """The steps of ``build`` for a PDF, each timed (memos cleared first); the PDF bytes."""
    from symbolic.report import adapter, context, render, spec
    from symbolic.report.typeset import SvgTypesetter

    clear_caches()
    spent = {"typesetting": 0.0, "charts": 0.0}
    out: dict[str, float] = {}
    start = time.perf_counter()
    report_spec = spec.load(spec_path)
    loading = time.perf_counter() - start
    with contextlib.ExitStack() as stack:
        start = time.perf_counter()
        stack.enter_context(render.frozen_heap())  # as build() does: one full collection, then gc.freeze()
        out["collect + freeze"] = time.perf_counter() - start
        start = time.perf_counter()
        scenario = adapter.scenario_for(report_spec)
        out["spec + scenario"] = loading + time.perf_counter() - start
        start = time.perf_counter()
        with timers(spent):
            ctx = context.build(report_spec, scenario, SvgTypesetter(), charts=True)
        total = time.perf_counter() - start
        out.update(spent)
        out["context, rest"] = total - spent["typesetting"] - spent["charts"]
        start = time.perf_counter()
        html = render.render_html(ctx)
        out["HTML"] = time.perf_counter() - start
        start = time.perf_counter()
        pdf = render.html_to_pdf(html)
        out["PDF"] = time.perf_counter() - start
    return out, pdf


def profile(pdf: Path, limit: int = 30) -> None:
    """cProfile of one build (memos cleared), by cumulative and by own time."""
    from symbolic.report.build import Outputs, build

    clear_caches()
    profiler = cProfile.Profile()
    profiler.runcall(build, None, Outputs(pdf=pdf))
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(limit)
    stats.sort_stats("tottime").print_stats(limit)


def fresh_processes(html: Path, expected: bytes, repeat: int, folder: Path) -> dict[str, float]:
    """Median wall seconds of the CLI and of WeasyPrint alone, each a new interpreter, interleaved."""
    from symbolic.report import render

    cli_pdf, alone_pdf = folder / "cli.pdf", folder / "alone.pdf"
    commands = {
        "cli": [PY, "-m", "symbolic", "report", "-q", "-o", str(cli_pdf)],
        "alone": [PY, "-c", WEASYPRINT_ONLY, str(html), render.TEMPLATES.as_uri() + "/", str(alone_pdf)],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(repeat + 1):  # the first round warms the disk cache and the bytecode
        for name, command in commands.items():
            start = time.perf_counter()
            subprocess.run(command, env=ENV, cwd=folder, stdout=subprocess.DEVNULL, check=True)
            if round_:
                samples[name].append(time.perf_counter() - start)
    for path in (cli_pdf, alone_pdf):
        if path.read_bytes() != expected:
            raise SystemExit(f"{path.name}: not the PDF the in-process build wrote")
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--repeat", type=int, default=5, help="in-process rounds (median)")
    parser.add_argument("--cli-repeat", type=int, default=3, help="fresh-interpreter rounds (0: skip)")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of one build")
    parser.add_argument("--readme", action="store_true", help="write the tables into README.md")
    args = parser.parse_args()

    import weasyprint

    from symbolic.core import collector
    from symbolic.report import render
    from symbolic.report.build import Outputs, build, default_spec

    with tempfile.TemporaryDirectory() as tmp, collector.opted_in():  # as the CLI runs a command
        folder = Path(tmp)
        pdf_path, html_path = folder / "report.pdf", folder / "report.html"
        build(None, Outputs(pdf=pdf_path, html=html_path))  # warm-up: imports, fonts; the final HTML
        html = html_path.read_text(encoding="utf-8")
        expected = pdf_path.read_bytes()
        if render.html_to_pdf(html) != expected:
            raise SystemExit("WeasyPrint on the captured HTML does not give the build's PDF")
        if args.profile:
            profile(pdf_path)
            return

        def cold_build() -> None:
            clear_caches()
            build(None, Outputs(pdf=pdf_path))

        def unfrozen_build() -> None:
            frozen_heap = render.frozen_heap
            render.frozen_heap = contextlib.nullcontext  # the collector left alone, as before frozen_heap
            try:
                cold_build()
            finally:
                render.frozen_heap = frozen_heap

        candidates: dict[str, Callable[[], object]] = {
            "build": cold_build,
            "build, collector left alone": unfrozen_build,
            "build, caches kept": lambda: build(None, Outputs(pdf=pdf_path)),
            "WeasyPrint alone": lambda: render.html_to_pdf(html),
        }
        samples: dict[str, list[float]] = {name: [] for name in candidates}
        stages: dict[str, list[float]] = {name: [] for name in STAGES}
        for _ in range(args.repeat):
            for name, fn in candidates.items():
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
                if name.startswith("build") and pdf_path.read_bytes() != expected:
                    raise SystemExit(f"{name}: the PDF changed from one build to the next")
            parts, pdf = staged_build(default_spec())
            if pdf != expected:
                raise SystemExit("the staged build's PDF differs from build()'s")
            for name in STAGES:
                stages[name].append(parts[name])
        times = {name: statistics.median(values) for name, values in samples.items()}
        stage_times = {name: statistics.median(values) for name, values in stages.items()}
        fresh = fresh_processes(html_path, expected, args.cli_repeat, folder) if args.cli_repeat > 0 else {}

    alone = times["WeasyPrint alone"]
    rows = [
        ("`build()` to PDF, warm process, memos cleared, vs WeasyPrint alone on the same HTML",
         f"{seconds(times['build'])} vs {seconds(alone)}", f"**{times['build'] / alone:.2f}×** (target ≤ 2×)"),
        ("… the same with `render.frozen_heap` turned off (the collector left alone, as before)",
         f"{seconds(times['build, collector left alone'])} vs {seconds(alone)}",
         f"{times['build, collector left alone'] / alone:.2f}× (the change saves "
         f"{seconds(times['build, collector left alone'] - times['build'])})"),
        ("`build()` of the same report again, memos kept, vs WeasyPrint alone",
         f"{seconds(times['build, caches kept'])} vs {seconds(alone)}",
         f"{times['build, caches kept'] / alone:.2f}×"),
    ]
    if fresh:
        rows.append(("`symbolic report -q -o x.pdf` vs WeasyPrint alone, each in a fresh interpreter",
                     f"{seconds(fresh['cli'])} vs {seconds(fresh['alone'])}", f"{fresh['cli'] / fresh['alone']:.2f}×"))
    table = markdown_table(("default report (`llama-3-8b-h100`, 8 pages)", "median time", "ratio"), rows)
    staged_total = sum(stage_times.values())
    stage_rows = [(STAGE_TITLES[name], seconds(stage_times[name]), f"{stage_times[name] / staged_total:.0%}")
                  for name in STAGES]
    stage_rows.append(("sum of the stages' medians", seconds(staged_total), "100%"))
    stage_table = markdown_table(("where a build's time goes (memos cleared)", "median time", "share"), stage_rows)
    note = (f"Measured by `benchmarks/bench_report.py` (median of {args.repeat} interleaved rounds in one process "
            f"after a warm-up build"
            + (f", {args.cli_repeat} rounds of fresh interpreters" if fresh else "")
            + f"; WeasyPrint {weasyprint.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs). "
            f"Every build gave the same PDF bytes as WeasyPrint alone on the captured HTML.")
    text = table + "\n\n" + stage_table + "\n\n" + note
    print(text)
    if args.readme:
        update_readme("report", text)


if __name__ == "__main__":
    main()
