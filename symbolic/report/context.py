"""Everything a report shows, computed once into a plain dict for logic-free templates.

Like pandas' Styler: Python computes and formats every number, sentence and table cell here;
the templates only loop and print. Numbers come from the scenario's formula (exact SymPy
arithmetic), formatted with IEC units; LaTeX comes from the project's printers.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Any

import sympy

from .. import __version__
from ..core import symbols as symtab
from ..core.sources import SOURCES
from ..core.units import format_bytes
from ..library.errata import errata_for
from ..math.formula import Evaluation, Formula
from ..networks.shape import PAST_TRAINED, trained_phrase
from ..text import printing
from . import calc, peak, plan_section, serve_section, tables
from .scenario import Scenario, VariantGroup
from .spec import ReportSpec
from .texescape import TexCode, breakable, escape
from .typeset import CALC_POINTS, CALC_WIDTH_PX, Typesetter

Progress = Callable[[str], None]
UNIT_NAMES = {"bytes": "bytes", "params": "parameters", "elements": "elements"}
TERMS_MATH_PX = 220.0  # a sources table's formulas are set this wide at most, so that its notes keep 30 % (report.css)


def build(spec: ReportSpec, scenario: Scenario, ts: Typesetter, *, charts: bool = True,
          progress: Progress | None = None) -> dict[str, Any]:
    """The report as plain data: strings, numbers, lists, dicts (and SVG markup when typesetting)."""
    say = progress or (lambda _message: None)
    ev = scenario.evaluate()
    formula = scenario.formula
    if getattr(spec, "plan", None):
        say("searching the layouts of the capacity plan")
    plan = plan_section.build(spec, ts, charts)
    if getattr(spec, "serve", None):
        say("serving the model with its engine")
    serve = serve_section.build(spec, ts, charts)
    say("solving for the largest batch and context on each GPU")
    summary = _summary(scenario, ev, ts, [section["summary"] for section in (*plan, *serve)])
    say("typesetting the hand calculations")
    calculations = [_calculation(step.formula, step.formula.evaluate(step.formula.restrict(step.values)), ts) for step in scenario.steps]
    calculations.append(_calculation(formula, ev, ts, main=True))
    _align_calculations(calculations, ts)
    say("computing sensitivities and sweeps")
    sens = scenario.sensitivities()
    sweeps = _sweeps(scenario, ts, charts)
    context: dict[str, Any] = {
        "meta": {
            "title": spec.title, "author": spec.author, "date": spec.date, "model": scenario.model_name,
            "mode": "training" if spec.mode == "train" else "inference", "generator": f"symbolic {__version__}",
            "spec": spec.path.name if spec.path else "",
            "formula_name": ts.math(formula.name_latex), "formula_key": formula.key,
            "formula_name_big": ts.math(formula.name_latex, 15.0),
            "byline": " · ".join(x for x in (scenario.model_name, spec.author, spec.date) if x.strip()),
            "colophon": f"Built by symbolic {__version__}" + (f" from {spec.path.name}" if spec.path else "")
                        + ". Every number is computed exactly from the formulas shown.",
            "title_tex": breakable(spec.title), "pdf_title": escape(spec.title), "pdf_author": escape(spec.author),
            "pdf_subject": escape(f"{scenario.model_name}: {formula.title}"),
        },
        "summary": summary,
        "notes": [{"paragraphs": _paragraphs(spec.notes), "paragraphs_tex": [breakable(p) for p in _paragraphs(spec.notes)]}]
                 if spec.notes.strip() else [],
        "model": _pairs_table(ts, scenario.model_rows, ("model", "")),
        "regime": _pairs_table(ts, scenario.regime_rows, ("regime", "")),
        "notation": _notation(scenario, ev, ts),
        "calculations": calculations,
        "breakdown": _breakdown(scenario, ev, ts, charts),
        "sweeps": sweeps,
        "sensitivity": _sensitivity(scenario, ev, sens, ts, charts),
        "variants": [_variant(group, ts) for group in scenario.variants if group.rows],
        "sources": _sources(scenario, ts),
        "cited": _cited(scenario),
        "errata": _errata(scenario),
        "plan": plan,
        "serve": serve,
    }
    context["has_variants"] = [1] if context["variants"] else []
    context["has_sensitivity"] = [1] if context["sensitivity"]["table"]["rows"] else []
    context["has_cited"] = [1] if context["cited"] else []
    return context


# --- formatting ----------------------------------------------------------------------------------
def count(value: sympy.Rational | int) -> str:
    """'7,530,364,928' for whole numbers, four significant digits otherwise."""
    value = sympy.Rational(value)
    if value.is_Integer:
        return f"{int(value):,}"
    return f"{float(value):,.0f}" if abs(value) >= 1000 else f"{float(value):.4g}"


def whole(ev: Evaluation, unit: str) -> sympy.Rational:
    """The total as the planner counts it: in bytes, each term rounded up to a whole byte (``Plan.total``)."""
    if unit != "bytes":
        return ev.total
    return sympy.Integer(sum(int(sympy.ceiling(value)) for _, value in ev.terms))


def amount(value: sympy.Rational | int, unit: str = "bytes") -> str:
    """IEC bytes ('7.01 GiB') or a grouped count with its unit word."""
    return format_bytes(value) if unit == "bytes" else f"{count(value)} {UNIT_NAMES[unit]}"


def percent(fraction: float, digits: int = 1) -> str:
    return f"{fraction * 100:.{digits}f} %"


def _pairs_table(ts: Typesetter, pairs: list[tuple[str, str]], titles: tuple[str, str]) -> dict[str, Any]:
    """Label-value pairs, two pairs to a row when the values are short."""
    if all(len(v) <= 24 for _, v in pairs) and len(pairs) > 4:
        half = -(-len(pairs) // 2)
        left, right = pairs[:half], pairs[half:] + [("", "")] * (2 * half - len(pairs))
        rows = [tables.row([ts.cell(a), ts.cell(b), ts.cell(c), ts.cell(d)]) for (a, b), (c, d) in zip(left, right)]
        return tables.table([(titles[0], "left"), ("", "left"), ("", "left"), ("", "left")], rows,
                      {0: "4.6cm", 1: "3.2cm", 2: "4.6cm", 3: "3.2cm"})
    rows = [tables.row([ts.cell(k), ts.cell(v)]) for k, v in pairs]
    return tables.table([(titles[0], "left"), (titles[1], "left")], rows, {0: "5.5cm", 1: "10.5cm"})


def _paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]


def _chart(svg: str, alt: str) -> dict[str, str]:
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return {"src": f"data:image/svg+xml;base64,{data}", "alt": alt}


def _symbol_latex(symbol: sympy.Symbol) -> str:
    return printing.latex(symbol)


def _cell_latex(expr: sympy.Expr) -> str:
    """A term's expression for a table cell: a fraction of a max printed coefficient first, so that the max can break."""
    return printing.latex(calc.coefficient_first(expr))


# --- summary -------------------------------------------------------------------------------------
def _summary(scenario: Scenario, ev: Evaluation, ts: Typesetter, plan: Sequence[str] = ()) -> dict[str, Any]:
    """The first page: the total, the verdict per GPU, the plan's sentence (``plan``), the peak and the largest term."""
    formula = scenario.formula
    total = ev.total
    columns = [("GPU", "left"), ("capacity", "right"), ("fits?", "center"), ("headroom", "right")]
    for symbol, title in ((scenario.batch, "largest batch"), (scenario.seq, "largest context")):
        if symbol is not None:
            columns.append((title, "right"))
    if scenario.fewest is not None:
        columns.append(("fewest GPUs", "right"))
    rows, fits, fails = [], [], []
    for gpu in scenario.gpus:
        room = sympy.Integer(gpu.capacity) - total
        ok = room >= 0
        (fits if ok else fails).append(gpu.name)
        headroom = (f"{format_bytes(room)} ({percent(float(room / gpu.capacity), 0)})" if ok
                    else f"short by {format_bytes(-room)}")
        cells = [ts.cell(gpu.name), ts.cell(format_bytes(gpu.capacity)), ts.cell("yes" if ok else "no"),
                 ts.cell(headroom)]
        for symbol in (scenario.batch, scenario.seq):
            if symbol is not None:
                cells.append(ts.cell(scenario.largest(symbol, gpu.capacity)))
        if scenario.fewest is not None:
            cells.append(ts.cell(scenario.fewest(gpu)))
        rows.append(tables.row(cells, "fits" if ok else "fails"))
    phases = peak.view(scenario.phases, ev) if scenario.phases is not None else None
    terms = sorted(phases.at_peak() if phases else ev.terms, key=lambda tv: -tv[1])
    top_term, top_value = terms[0]
    share = float(top_value / total) if total else 0.0
    sens = scenario.sensitivities()
    at = ", ".join(f"{s.name} = {count(scenario.given[s])}" for s in (scenario.batch, scenario.seq)
                   if s is not None and s in scenario.given)
    points = [
        f"{_title_case(formula.title)}: {amount(total, formula.unit)} per GPU "
        f"({count(whole(ev, formula.unit))} {UNIT_NAMES[formula.unit]}){' at ' + at if at else ''}.",
    ]
    if scenario.gpus:
        if fits:
            points.append(f"Fits on {_join(fits)}" + (f"; does not fit on {_join(fails)}." if fails else "."))
        else:
            points.append(f"Does not fit on any of the GPUs compared ({_join(fails)}).")
        points.extend(f"{gpu.name}: {note}." for gpu in scenario.gpus for note in gpu.notes)
    points.extend(plan)
    if phases is not None and scenario.phases is not None:
        points.extend(peak.sentences(phases, scenario.phases, total, format_bytes, percent, count))
    expr_text = printing.text(top_term.expr)
    shown = f" ({expr_text})" if len(expr_text) <= 40 else ""
    points.append(f"Largest term: {top_term.title}{shown}, {amount(top_value, formula.unit)}, "
                  f"{percent(share)} of the total.")
    if sens:
        symbol, (_, below), (_, above) = sens[0].symbol, *sens[0].sides()
        meaning = symtab.info(symbol).description.split(":")[0].split("(")[0].strip()
        change = "more" if (above or 0) >= 0 else "less"
        less = (f", 1 % less gives {abs(float(below or 0)):.2f} % {'less' if (below or 0) >= 0 else 'more'} "
                "(one-sided: a corner of a max)") if sens[0].corner else ""
        points.append(f"Most sensitive input: {symbol.name} ({meaning}): 1 % more {symbol.name} gives "
                      f"{abs(float(above or 0)):.2f} % {change} memory{less}.")
    points.extend(_trained_points(scenario))
    points.extend(scenario.caveats)
    return {
        "peak": _peak_summary(phases, total),
        "total": amount(total, formula.unit), "total_exact": count(whole(ev, formula.unit)),
        "unit": UNIT_NAMES[formula.unit],
        "at": at, "exact_line": f"{count(whole(ev, formula.unit))} {UNIT_NAMES[formula.unit]}" + (f" at {at}" if at else ""), "points": points, "gpus": tables.table(columns, rows), "has_gpus": [1] if scenario.gpus else [],
        "dominant": {"title": top_term.title, "share": percent(share), "value": amount(top_value, formula.unit),
                     "math": ts.math(printing.latex(top_term.expr))},
    }


def _peak_summary(v: peak.PeakView | None, total: sympy.Rational) -> dict[str, Any]:
    """The peak as plain data (phase, lead, runner-up, each phase's bytes, runtime share); empty without phases."""
    if v is None:
        return {}
    return {"phase": v.phase, "lead": format_bytes(v.lead), "lead_bytes": count(v.lead),
            "runner_up": v.runner_up or "", "resident": format_bytes(v.resident_total),
            "phases": [{"name": n, "bytes": count(b), "size": format_bytes(b), "peak": n == v.phase}
                       for n, b in v.totals.items()],
            "runtime": format_bytes(v.runtime), "runtime_bytes": count(v.runtime),
            "runtime_share": percent(float(v.runtime / total)) if total else percent(0.0),
            "runtime_terms": list(v.runtime_keys)}


def _trained_points(scenario: Scenario) -> list[str]:
    """Sentences saying where the report's context goes past the length the model was trained for."""
    symbol = scenario.seq
    if symbol is None or symbol not in scenario.trained:
        return []
    trained = scenario.trained[symbol]
    what = trained_phrase(trained.value, trained.model, trained.source)  # the command line's warning says the same
    out = []
    current = scenario.given.get(symbol)
    if current is not None and current > trained.value:
        out.append(f"The report's context, {symbol.name} = {count(current)}, is beyond {what}.")
    beyond = [(gpu.name, value) for gpu in scenario.gpus
              if (value := scenario.largest_value(symbol, gpu.capacity)) is not None and value > trained.value]
    if beyond:
        listed = _join([f"{value:,} on {name}" for name, value in beyond])
        out.append(f"The largest context{'s' if len(beyond) > 1 else ''} that fit{'' if len(beyond) > 1 else 's'} "
                   f"({listed}) {'are' if len(beyond) > 1 else 'is'} beyond {what}: memory allows it, but "
                   f"{PAST_TRAINED}.")
    return out


def _title_case(text: str) -> str:
    return text[:1].upper() + text[1:]


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# --- notation and calculations -------------------------------------------------------------------
def _notation(scenario: Scenario, ev: Evaluation, ts: Typesetter) -> dict[str, Any]:
    symbols = set(scenario.formula.inputs)
    for step in scenario.steps:
        symbols |= set(step.formula.inputs)
    values = {**ev.values, **ev.derived}
    for step in scenario.steps:
        step_ev = step.formula.evaluate(step.formula.restrict(step.values))
        values.update({s: v for s, v in {**step_ev.values, **step_ev.derived}.items() if s not in values})
    definitions: dict[sympy.Symbol, Formula] = {}
    for f in [scenario.formula, *(s.formula for s in scenario.steps)]:
        definitions.update(f.definitions)
    rows = []
    for symbol in symtab.ordered(symbols):
        info = symtab.info(symbol)
        value = values.get(symbol)
        how = scenario.value_notes.get(symbol, "")
        if symbol in definitions and symbol not in scenario.given:
            how = f"derived: {definitions[symbol].name} = {definitions[symbol].text()}"
        rows.append(tables.row([ts.cell(math=_symbol_latex(symbol)), ts.cell(info.description),
                          ts.cell(count(value) if value is not None else "—"), ts.cell(how)]))
    return tables.table([("symbol", "center"), ("meaning", "left"), ("value", "right"), ("value from", "left")], rows,
                  {1: "6.3cm", 3: "4.2cm"})


def _calculation(formula: Formula, ev: Evaluation, ts: Typesetter, main: bool = False) -> dict[str, Any]:
    """One hand calculation: lines of left side, relation and body, every ``=`` in one column.

    The result line repeats the formula's name and gives the result as text (exact count, IEC
    size), so that it lines up with the lines above and can be searched and copied in the PDF.
    """
    lines = calc.lines(formula, ev, ts.measure, CALC_WIDTH_PX, ts.tolerance)
    result_line = (f"{count(whole(ev, 'bytes'))} bytes = {format_bytes(ev.total)}" if formula.unit == "bytes"
                   else f"{count(ev.total)} {UNIT_NAMES[formula.unit]}")
    out = []
    for line in lines:
        result = line.label == "result"
        lhs = formula.name_latex if result else line.lhs
        out.append({"label": line.label, "lhs": ts.math(lhs, CALC_POINTS), "rel": ts.math(line.rel, CALC_POINTS),
                    "body": ts.math("" if result else line.body, CALC_POINTS), "text": result_line if result else "",
                    "tex_lhs": TexCode(lhs), "tex_rel": TexCode(f"&{line.rel}" if line.rel else "&\\quad"),
                    "tex_body": TexCode(line.body), "lhs_width": ""})
    source = SOURCES.get(formula.source)
    return {
        "title": formula.title, "key": formula.key, "name": ts.math(formula.name_latex),
        "source": source.citation if source else formula.source, "where": formula.where,
        "origin": " · ".join(x for x in (source.citation if source else formula.source, formula.where) if x),
        "notes": [formula.note] if formula.note else [],
        "lines": out, "result": amount(ev.total, formula.unit), "result_exact": count(ev.total),
        "result_line": result_line, "lhs_width": "",
        "unit": UNIT_NAMES[formula.unit], "note": formula.note, "cls": "main" if main else "",
        "snippet": TexCode(formula.latex(equation=True)),
        "snippet_lines": out[: next(i for i, line in enumerate(lines) if line.label == "substituted")],
    }


def _align_calculations(calculations: list[dict[str, Any]], ts: Typesetter) -> None:
    """One width for the left-hand sides of every calculation, so that all their ``=`` share a column."""
    if not ts.svg:
        return
    width = max((ts.width(str(line["tex_lhs"]), CALC_POINTS) for c in calculations for line in c["lines"]
                 if line["tex_lhs"]), default=0.0)
    for c in calculations:
        c["lhs_width"] = f"{width + 4:.1f}px"
        for line in c["lines"]:
            line["lhs_width"] = c["lhs_width"]


# --- breakdown, sweeps, sensitivity --------------------------------------------------------------
def _breakdown(scenario: Scenario, ev: Evaluation, ts: Typesetter, charts: bool) -> dict[str, Any]:
    if scenario.phases is not None:
        return _phase_breakdown(scenario, peak.view(scenario.phases, ev), ev, ts, charts)
    formula = scenario.formula
    total = ev.total
    rows = []
    for term, value in ev.terms:
        share = float(value / total) if total else 0.0
        rows.append(tables.row([ts.cell(term.title), ts.cell(math=_cell_latex(term.expr), width=240), ts.cell(count(value)),
                          ts.cell(amount(value, formula.unit)), ts.cell(percent(share)), ts.cell(term.source)]))
    rows.append(tables.row([ts.cell("total"), ts.cell(math=formula.name_latex), ts.cell(count(total)),
                      ts.cell(amount(total, formula.unit)), ts.cell(percent(1.0, 0)), ts.cell("")], "total"))
    table = tables.table([("term", "left"), ("formula", "left"), (UNIT_NAMES[formula.unit], "right"), ("", "right"),
                    ("share", "right"), ("source", "left")], rows, {0: "3.6cm", 1: "4.6cm"})
    chart = {"src": "", "alt": ""}
    if charts:
        from . import plots

        labels = [t.title for t, _ in ev.terms]
        svg = plots.breakdown(labels, [float(v) for _, v in ev.terms], [plots.colour(i) for i in range(len(labels))])
        chart = _chart(svg, f"Breakdown of {formula.name} by term")
    return {"table": table, "chart": chart, "intro": ""}


def _phase_breakdown(scenario: Scenario, v: peak.PeakView, ev: Evaluation, ts: Typesetter,
                     charts: bool) -> dict[str, Any]:
    """Every term with the phases it is alive in, then each phase's total: the peak phase's rows add up to the total.

    Shares are of the total and given for the terms alive in the peak phase only (the others are
    not alive at the peak moment).
    """
    formula = scenario.formula
    total = ev.total
    where = v.where()
    at_peak = {t.key for t, _ in v.at_peak()}
    rows = []
    for term, value in v.components():
        share = percent(float(value / total)) if term.key in at_peak and total else "—"
        rows.append(tables.row([ts.cell(term.title), ts.cell(math=_cell_latex(term.expr), width=150), ts.cell(count(value)),
                          ts.cell(format_bytes(value)), ts.cell(share), ts.cell(", ".join(where[term.key])),
                          ts.cell(term.source)], "peak" if term.key in at_peak else "off-peak"))
    rows.append(_rule(tables.row([ts.cell("resident terms"), ts.cell("alive in every phase"),
                            ts.cell(count(v.resident_total)), ts.cell(format_bytes(v.resident_total)),
                            ts.cell(percent(float(v.resident_total / total)) if total else ""), ts.cell(peak.RESIDENT),
                            ts.cell("")], "phase first")))
    for name, value in v.totals.items():
        added = ", ".join(t.key for t, _ in v.extras[name]) or "nothing"
        label = f"{name} phase" + (" (sets the peak)" if name == v.phase else "")
        row = tables.row([ts.cell(label), ts.cell(f"resident + {added}"), ts.cell(count(value)), ts.cell(format_bytes(value)),
                    ts.cell(percent(float(value / total)) if total else ""), ts.cell(name), ts.cell("")],
                   "phase" + (" peak-phase" if name == v.phase else ""))
        rows.append(row)
    rows.append(_rule(tables.row([ts.cell(f"total (peak: {v.phase})"), ts.cell(math=formula.name_latex), ts.cell(count(total)),
                            ts.cell(format_bytes(total)), ts.cell(percent(1.0, 0)), ts.cell(v.phase), ts.cell("")],
                           "total")))
    table = tables.table([("term", "left"), ("formula", "left"), (UNIT_NAMES[formula.unit], "right"), ("", "right"),
                    ("share", "right"), ("alive in", "left"), ("source", "left")], rows,
                   {0: "2.9cm", 1: "3.4cm", 5: "1.7cm", 6: "2.4cm"})
    phase_list = ", ".join(v.totals)
    intro = (f"A step has {len(v.totals)} phases ({phase_list}). Resident terms are alive in every phase; the others "
             f"only in the phases named. Each phase's total is the resident terms plus what it adds; the {v.phase} "
             f"phase is the largest, so the total is its total, and the shares (of the total) are given for the "
             f"terms alive in it.")
    chart = {"src": "", "alt": ""}
    if charts:
        from . import plots

        live = v.at_peak()
        svg = plots.breakdown([t.title for t, _ in live], [float(x) for _, x in live],
                              [plots.colour(i) for i in range(len(live))])
        chart = _chart(svg, f"Breakdown of {formula.name} by term, in the {v.phase} phase (the peak)")
    return {"table": table, "chart": chart, "intro": intro}


def _rule(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with a rule above it in the LaTeX table (HTML draws it from the row's class)."""
    return {**row, "tex_before": TexCode("\\midrule\n")}


def _sweeps(scenario: Scenario, ts: Typesetter, charts: bool) -> list[dict[str, Any]]:
    out = []
    free = scenario.full_expr().free_symbols
    for symbol, given_points, label in ((scenario.batch, scenario.sweep_batch, "batch size"),
                                        (scenario.seq, scenario.sweep_seq, "sequence length")):
        if symbol is None or symbol not in free:
            continue
        points = given_points or scenario.default_points(symbol, 1 if symbol == scenario.batch else 128)
        evaluations = scenario.sweep(symbol, points)
        formula = scenario.formula
        columns = [(symbol.name, "right"), ("total", "right"), (UNIT_NAMES[formula.unit], "right")]
        columns += [(gpu.name, "center") for gpu in scenario.gpus]
        rows = []
        for value, ev in zip(points, evaluations):
            cells = [ts.cell(count(value)), ts.cell(amount(ev.total, formula.unit)), ts.cell(count(ev.total))]
            cells += [ts.cell("fits" if ev.total <= gpu.capacity else "—") for gpu in scenario.gpus]
            rows.append(tables.row(cells, "current" if value == scenario.given.get(symbol) else ""))
        chart = {"src": "", "alt": ""}
        if charts:
            from . import plots

            layers = [plots.Series(term.title, tuple(float(ev.terms[i][1]) for ev in evaluations))
                      for i, term in enumerate(formula.terms)]
            keep = [i for i, layer in enumerate(layers) if any(layer.values)]
            svg = plots.sweep(f"{label} {symbol.name} (log scale)", points, [layers[i] for i in keep],
                              [plots.colour(i) for i in keep], [(g.name, float(g.capacity)) for g in scenario.gpus],
                              int(scenario.given[symbol]) if symbol in scenario.given else None,
                              _marks(scenario, symbol, points))
            chart = _chart(svg, f"{formula.name} against {label} {symbol.name}")
        others = ", ".join(f"{s.name} = {count(v)}" for s, v in scenario.given.items()
                           if s in free and s != symbol and s not in scenario.ties)
        chart_note = "" if not charts else (
            f"Horizontal lines are the GPUs' capacities; the dotted vertical line is the report's {label}"
            + ("; the dash-dotted one is the context the model was trained for." if _marks(scenario, symbol, points)
               else "."))
        out.append({
            "title": f"Memory against {label}", "symbol": ts.math(_symbol_latex(symbol)),
            "intro": f"{formula.name} per GPU as {symbol.name} varies, everything else as in the regime"
                     f"{' (' + others + ')' if others else ''}.",
            "chart_note": chart_note, "chart": chart, "table": tables.table(columns, rows),
        })
    return out


def _marks(scenario: Scenario, symbol: sympy.Symbol, points: tuple[int, ...]) -> list[tuple[int, str, str]]:
    """Labelled vertical lines of a sweep chart: the trained length, when it lies inside the sweep."""
    trained = scenario.trained.get(symbol)
    if trained is None or not points[0] <= trained.value <= points[-1]:
        return []
    return [(trained.value, f"{trained.model} trained for {trained.value:,} positions ({trained.source})",
             f"trained: {trained.value:,}")]


def _sensitivity(scenario: Scenario, ev: Evaluation, sens: list, ts: Typesetter, charts: bool) -> dict[str, Any]:
    formula = scenario.formula
    point = scenario.point()
    rows = []
    for row in sens:
        symbol, sides = row.symbol, row.sides() if row.corner else row.sides()[:1]  # a corner: below / above
        info = symtab.info(symbol)
        derivative = " / ".join(count(d) for d, _ in sides)
        elasticity = " / ".join(f"{float(e or 0):.4f}" for _, e in sides)
        rows.append(tables.row([ts.cell(math=_symbol_latex(symbol)), ts.cell(info.description.split(":")[0]),
                          ts.cell(count(point[symbol])), ts.cell(derivative), ts.cell(elasticity)]))
    unit = {"bytes": "bytes", "params": "parameters", "elements": "elements"}[formula.unit]
    table = tables.table([("symbol", "center"), ("meaning", "left"), ("value", "right"),
                    (f"∂{formula.name}/∂x", "right"), ("elasticity", "right")], rows,
                   {1: "6.5cm"})
    chart = {"src": "", "alt": ""}
    if charts and sens:
        from . import plots

        labels = [f"${_symbol_latex(r.symbol)}$" for r in sens]
        chart = _chart(plots.elasticities(labels, [float(r.sides()[1][1] or 0) for r in sens]),  # 1 % more
                       f"Elasticities of {formula.name}")
    tied = "; ".join(f"{f.name} follows {leader.name}" for f, leader in scenario.ties.items())
    defined = _join([s.name for s in _definitions(formula)]) if _definitions(formula) else ""
    through = (f" Derivatives go through the definitions ({defined} expanded into their inputs)"
               if defined else " Derivatives are taken of the total as written")
    corner = [r.symbol.name for r in sens if r.corner]
    corners = (f" The point is a corner of a max (two of its arguments, such as two phases, are equal here): "
               f"{_join(corner)} {'has' if len(corner) == 1 else 'have'} a one-sided derivative, given from below / "
               f"from above; the chart shows it from above." if corner else "")
    return {
        "intro": f"The elasticity of {formula.name} with respect to an input x is x/{formula.name} · "
                 f"∂{formula.name}/∂x: 1 % more of x gives that many % more memory. ∂{formula.name}/∂x is in "
                 f"{unit} per unit of x.{through}{'; ' + tied if tied else ''}.{corners}",
        "table": table, "chart": chart,
    }


# --- variants, sources, errata -------------------------------------------------------------------
def _definitions(formula: Formula) -> list[sympy.Symbol]:
    """Defined symbols of a formula and of its definitions, in symbol-table order."""
    found: set[sympy.Symbol] = set()
    stack = [formula]
    while stack:
        f = stack.pop()
        for symbol, definition in f.definitions.items():
            found.add(symbol)
            stack.append(definition)
    return symtab.ordered(found)


def _variant(group: VariantGroup, ts: Typesetter) -> dict[str, Any]:
    chosen = next((r.value for r in group.rows if r.chosen), None)
    rows = []
    for row in group.rows:
        ratio = "—" if not chosen else f"{float(row.value / chosen):.2f}×"
        mark = " (this report)" if row.chosen and not row.label.startswith("this report") else ""
        label = row.label + mark + (f"; {row.note}" if row.note else "")
        rows.append(tables.row([ts.cell(label), ts.cell(math=row.latex, width=300), ts.cell(amount(row.value, group.unit)),
                          ts.cell(ratio), ts.cell(row.source)], "chosen" if row.chosen else ""))
    table = tables.table([("variant", "left"), ("formula", "left"), ("value", "right"), ("vs report", "right"),
                    ("source", "left")], rows, {0: "4.2cm", 1: "6.0cm"})
    return {"title": group.title, "intro": group.intro, "table": table}


def _sources(scenario: Scenario, ts: Typesetter) -> list[dict[str, Any]]:
    """Each source with the terms the report takes from it (each term once, with the formulas using it)."""
    terms: dict[str, dict[tuple, list]] = {}
    formulas = [*(s.formula for s in scenario.steps), scenario.formula]
    for f in formulas:
        for term in f.terms:
            entry = terms.setdefault(term.source, {}).setdefault(
                (term.title, sympy.srepr(term.expr), term.where, term.note), [term, []])
            if f.key not in entry[1]:
                entry[1].append(f.key)
    out = []
    for source_id, items in terms.items():
        source = SOURCES.get(source_id)
        rows = [tables.row([ts.cell(term.title), ts.cell(math=_cell_latex(term.expr), width=TERMS_MATH_PX),
                      ts.cell(", ".join(keys), code=True), ts.cell(term.where, code=True), ts.cell(term.note)])
                for term, keys in items.values()]
        out.append({
            "id": source_id, "citation": source.citation if source else source_id,
            "citation_tex": breakable(source.citation if source else source_id),
            "urls": [source.url] if source and source.url else [],
            "urls_tex": [breakable(source.url)] if source and source.url else [],
            "table": tables.table([("term", "left"), ("expression", "left"), ("used in", "left"), ("where", "left"),
                             ("note", "left")], rows, {0: "3.4cm", 1: "4.0cm", 2: "2.2cm", 3: "1.8cm", 4: "3.6cm"}),
            "has_terms": [1] if rows else [],
        })
    return out


def _cited(scenario: Scenario) -> list[dict[str, Any]]:
    """Sources that only the comparisons cite (no term of the report's formulas comes from them)."""
    used = {term.source for f in [*(s.formula for s in scenario.steps), scenario.formula] for term in f.terms}
    out, seen = [], set()
    for group in scenario.variants:
        for row in group.rows:
            if row.source in used or row.source in seen:
                continue
            seen.add(row.source)
            source = SOURCES.get(row.source)
            citation = source.citation if source else row.source
            url = source.url if source and source.url else ""
            out.append({"id": row.source, "citation": citation, "citation_tex": breakable(citation),
                        "url": url, "url_tex": breakable(url), "urls": [url] if url else [],
                        "urls_tex": [breakable(url)] if url else []})
    return out


def _errata(scenario: Scenario) -> list[dict[str, Any]]:
    out = []
    for source_id in scenario.errata_sources:
        source = SOURCES.get(source_id)
        items = [{"number": e.number, "title": e.title, "text": e.text} for e in errata_for(source_id)]
        out.append({"id": source_id, "citation": source.citation if source else source_id, "entries": items})
    return out
