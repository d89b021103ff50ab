"""Everything a report shows, computed once into a plain dict for logic-free templates.

Like pandas' Styler: Python computes and formats every number, sentence and table cell here;
the templates only loop and print. Numbers come from the scenario's formula (exact SymPy
arithmetic), formatted with IEC units; LaTeX comes from the project's printers.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import sympy

from .. import __version__, printing
from .. import symbols as symtab
from ..formula import Evaluation, Formula
from ..library.errata import errata_for
from ..sources import SOURCES
from ..units import format_bytes
from . import calc, plan_section
from .scenario import Scenario, VariantGroup
from .spec import ReportSpec
from .texescape import TexCode, escape
from .typeset import CALC_POINTS, CALC_WIDTH_PX, Typesetter

Progress = Callable[[str], None]
UNIT_NAMES = {"bytes": "bytes", "params": "parameters", "elements": "elements"}


def build(spec: ReportSpec, scenario: Scenario, ts: Typesetter, *, charts: bool = True,
          progress: Progress | None = None) -> dict[str, Any]:
    """The report as plain data: strings, numbers, lists, dicts (and SVG markup when typesetting)."""
    say = progress or (lambda _message: None)
    ev = scenario.evaluate()
    formula = scenario.formula
    say("solving for the largest batch and context on each GPU")
    summary = _summary(scenario, ev, ts)
    say("typesetting the hand calculations")
    calculations = [_calculation(step.formula, step.formula.evaluate(step.formula.restrict(step.values)), ts) for step in scenario.steps]
    calculations.append(_calculation(formula, ev, ts, main=True))
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
        },
        "summary": summary,
        "notes": [{"paragraphs": _paragraphs(spec.notes)}] if spec.notes.strip() else [],
        "model": _pairs_table(ts, scenario.model_rows, ("model", "")),
        "regime": _pairs_table(ts, scenario.regime_rows, ("regime", "")),
        "notation": _notation(scenario, ev, ts),
        "calculations": calculations,
        "breakdown": _breakdown(scenario, ev, ts, charts),
        "sweeps": sweeps,
        "sensitivity": _sensitivity(scenario, ev, sens, ts, charts),
        "variants": [_variant(group, ts) for group in scenario.variants],
        "sources": _sources(scenario, ts),
        "errata": _errata(scenario),
        "plan": plan_section.build(spec, ts, charts),
    }
    return context


# --- formatting ----------------------------------------------------------------------------------
def count(value: sympy.Rational | int) -> str:
    """'7,530,364,928' for whole numbers, four significant digits otherwise."""
    value = sympy.Rational(value)
    if value.is_Integer:
        return f"{int(value):,}"
    return f"{float(value):,.0f}" if abs(value) >= 1000 else f"{float(value):.4g}"


def amount(value: sympy.Rational | int, unit: str = "bytes") -> str:
    """IEC bytes ('7.01 GiB') or a grouped count with its unit word."""
    return format_bytes(value) if unit == "bytes" else f"{count(value)} {UNIT_NAMES[unit]}"


def percent(fraction: float, digits: int = 1) -> str:
    return f"{fraction * 100:.{digits}f} %"


def _table(columns: list[tuple[str, str]], rows: list[dict[str, Any]], widths: dict[int, str] | None = None
           ) -> dict[str, Any]:
    """A table for both templates: column titles and alignment, rows of cells, a LaTeX column spec."""
    spec = []
    for index, (_, align) in enumerate(columns):
        if widths and index in widths:
            spec.append(f">{{\\raggedright\\arraybackslash}}p{{{widths[index]}}}")
        else:
            spec.append({"left": "l", "right": "r", "center": "c"}[align])
    return {"columns": [{"title": t, "align": a} for t, a in columns], "rows": rows,
            "colspec": TexCode("".join(spec)), "ncols": len(columns)}


def _row(cells: list[dict[str, Any]], cls: str = "") -> dict[str, Any]:
    return {"cells": cells, "cls": cls}


def _pairs_table(ts: Typesetter, pairs: list[tuple[str, str]], titles: tuple[str, str]) -> dict[str, Any]:
    """Label-value pairs, two pairs to a row when the values are short."""
    if all(len(v) <= 24 for _, v in pairs) and len(pairs) > 4:
        half = -(-len(pairs) // 2)
        left, right = pairs[:half], pairs[half:] + [("", "")] * (2 * half - len(pairs))
        rows = [_row([ts.cell(a), ts.cell(b), ts.cell(c), ts.cell(d)]) for (a, b), (c, d) in zip(left, right)]
        return _table([(titles[0], "left"), ("", "left"), ("", "left"), ("", "left")], rows,
                      {0: "4.6cm", 1: "3.2cm", 2: "4.6cm", 3: "3.2cm"})
    rows = [_row([ts.cell(k), ts.cell(v)]) for k, v in pairs]
    return _table([(titles[0], "left"), (titles[1], "left")], rows, {0: "5.5cm", 1: "10.5cm"})


def _paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]


def _chart(svg: str, alt: str) -> dict[str, str]:
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return {"src": f"data:image/svg+xml;base64,{data}", "alt": alt}


def _symbol_latex(symbol: sympy.Symbol) -> str:
    return printing.latex(symbol)


# --- summary -------------------------------------------------------------------------------------
def _summary(scenario: Scenario, ev: Evaluation, ts: Typesetter) -> dict[str, Any]:
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
        rows.append(_row(cells, "fits" if ok else "fails"))
    terms = sorted(ev.terms, key=lambda tv: -tv[1])
    top_term, top_value = terms[0]
    share = float(top_value / total) if total else 0.0
    sens = scenario.sensitivities()
    at = ", ".join(f"{s.name} = {count(scenario.given[s])}" for s in (scenario.batch, scenario.seq)
                   if s is not None and s in scenario.given)
    points = [
        f"{_title_case(formula.title)}: {amount(total, formula.unit)} per GPU "
        f"({count(total)} {UNIT_NAMES[formula.unit]}){' at ' + at if at else ''}.",
    ]
    if scenario.gpus:
        if fits:
            points.append(f"Fits on {_join(fits)}" + (f"; does not fit on {_join(fails)}." if fails else "."))
        else:
            points.append(f"Does not fit on any of the GPUs compared ({_join(fails)}).")
    expr_text = printing.text(top_term.expr)
    shown = f" ({expr_text})" if len(expr_text) <= 40 else ""
    points.append(f"Largest term: {top_term.title}{shown}, {amount(top_value, formula.unit)}, "
                  f"{percent(share)} of the total.")
    if sens:
        symbol, _, elasticity = sens[0]
        meaning = symtab.info(symbol).description.split(":")[0].split("(")[0].strip()
        change = "more" if elasticity >= 0 else "less"
        points.append(f"Most sensitive input: {symbol.name} ({meaning}): 1 % more {symbol.name} gives "
                      f"{abs(float(elasticity)):.2f} % {change} memory.")
    points.extend(scenario.caveats)
    return {
        "total": amount(total, formula.unit), "total_exact": count(total), "unit": UNIT_NAMES[formula.unit],
        "at": at, "exact_line": f"{count(total)} {UNIT_NAMES[formula.unit]}" + (f" at {at}" if at else ""), "points": points, "gpus": _table(columns, rows), "has_gpus": [1] if scenario.gpus else [],
        "dominant": {"title": top_term.title, "share": percent(share), "value": amount(top_value, formula.unit),
                     "math": ts.math(printing.latex(top_term.expr))},
    }


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
        rows.append(_row([ts.cell(math=_symbol_latex(symbol)), ts.cell(info.description),
                          ts.cell(count(value) if value is not None else "—"), ts.cell(how)]))
    return _table([("symbol", "center"), ("meaning", "left"), ("value", "right"), ("value from", "left")], rows,
                  {1: "6.3cm", 3: "4.2cm"})


def _calculation(formula: Formula, ev: Evaluation, ts: Typesetter, main: bool = False) -> dict[str, Any]:
    lines = calc.lines(formula, ev, ts.measure, CALC_WIDTH_PX)
    out = []
    for line in lines:
        out.append({"label": line.label, "lhs": ts.math(line.lhs, CALC_POINTS), "rel": ts.math(line.rel, CALC_POINTS),
                    "body": ts.math(line.body, CALC_POINTS), "tex_lhs": TexCode(line.lhs),
                    "tex_rel": TexCode(f"&{line.rel}" if line.rel else "&\\quad"), "tex_body": TexCode(line.body)})
    source = SOURCES.get(formula.source)
    return {
        "title": formula.title, "key": formula.key, "name": ts.math(formula.name_latex),
        "source": source.citation if source else formula.source, "where": formula.where,
        "origin": " · ".join(x for x in (source.citation if source else formula.source, formula.where) if x),
        "notes": [formula.note] if formula.note else [],
        "lines": out, "result": amount(ev.total, formula.unit), "result_exact": count(ev.total),
        "result_line": (f"{count(ev.total)} bytes = {format_bytes(ev.total)}" if formula.unit == "bytes"
                        else f"{count(ev.total)} {UNIT_NAMES[formula.unit]}"),
        "unit": UNIT_NAMES[formula.unit], "note": formula.note, "cls": "main" if main else "",
        "snippet": TexCode(formula.latex(equation=True)),
        "snippet_lines": out[: next(i for i, line in enumerate(lines) if line.label == "substituted")],
    }


# --- breakdown, sweeps, sensitivity --------------------------------------------------------------
def _breakdown(scenario: Scenario, ev: Evaluation, ts: Typesetter, charts: bool) -> dict[str, Any]:
    formula = scenario.formula
    total = ev.total
    rows = []
    for term, value in ev.terms:
        share = float(value / total) if total else 0.0
        rows.append(_row([ts.cell(term.title), ts.cell(math=printing.latex(term.expr), width=240), ts.cell(count(value)),
                          ts.cell(amount(value, formula.unit)), ts.cell(percent(share)), ts.cell(term.source)]))
    rows.append(_row([ts.cell("total"), ts.cell(math=formula.name_latex), ts.cell(count(total)),
                      ts.cell(amount(total, formula.unit)), ts.cell(percent(1.0, 0)), ts.cell("")], "total"))
    table = _table([("term", "left"), ("formula", "left"), (UNIT_NAMES[formula.unit], "right"), ("", "right"),
                    ("share", "right"), ("source", "left")], rows, {0: "3.6cm", 1: "4.6cm"})
    chart = {"src": "", "alt": ""}
    if charts:
        from . import plots

        labels = [t.title for t, _ in ev.terms]
        svg = plots.breakdown(labels, [float(v) for _, v in ev.terms], [plots.colour(i) for i in range(len(labels))])
        chart = _chart(svg, f"Breakdown of {formula.name} by term")
    return {"table": table, "chart": chart}


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
            rows.append(_row(cells, "current" if value == scenario.given.get(symbol) else ""))
        chart = {"src": "", "alt": ""}
        if charts:
            from . import plots

            layers = [plots.Series(term.title, tuple(float(ev.terms[i][1]) for ev in evaluations))
                      for i, term in enumerate(formula.terms)]
            keep = [i for i, layer in enumerate(layers) if any(layer.values)]
            svg = plots.sweep(f"{label} {symbol.name} (log scale)", points, [layers[i] for i in keep],
                              [plots.colour(i) for i in keep], [(g.name, float(g.capacity)) for g in scenario.gpus],
                              int(scenario.given[symbol]) if symbol in scenario.given else None)
            chart = _chart(svg, f"{formula.name} against {label} {symbol.name}")
        others = ", ".join(f"{s.name} = {count(v)}" for s, v in scenario.given.items()
                           if s in free and s != symbol and s not in scenario.ties)
        out.append({
            "title": f"Memory against {label}", "symbol": ts.math(_symbol_latex(symbol)),
            "intro": f"{formula.name} per GPU as {symbol.name} varies, everything else as in the regime"
                     f"{' (' + others + ')' if others else ''}. Horizontal lines are the GPUs' capacities; "
                     f"the dotted vertical line is the report's {label}.",
            "chart": chart, "table": _table(columns, rows),
        })
    return out


def _sensitivity(scenario: Scenario, ev: Evaluation, sens: list, ts: Typesetter, charts: bool) -> dict[str, Any]:
    formula = scenario.formula
    point = scenario.point()
    rows = []
    for symbol, derivative, elasticity in sens:
        info = symtab.info(symbol)
        rows.append(_row([ts.cell(math=_symbol_latex(symbol)), ts.cell(info.description.split(":")[0]),
                          ts.cell(count(point[symbol])), ts.cell(count(derivative)),
                          ts.cell(f"{float(elasticity):.4f}")]))
    unit = {"bytes": "bytes", "params": "parameters", "elements": "elements"}[formula.unit]
    table = _table([("symbol", "center"), ("meaning", "left"), ("value", "right"),
                    (f"∂{formula.name}/∂x", "right"), ("elasticity", "right")], rows,
                   {1: "6.5cm"})
    chart = {"src": "", "alt": ""}
    if charts and sens:
        from . import plots

        labels = [f"${_symbol_latex(s)}$" for s, _, _ in sens]
        chart = _chart(plots.elasticities(labels, [float(e) for _, _, e in sens]),
                       f"Elasticities of {formula.name}")
    tied = "; ".join(f"{f.name} follows {leader.name}" for f, leader in scenario.ties.items())
    defined = _join([s.name for s in _definitions(formula)]) if _definitions(formula) else ""
    through = (f" Derivatives go through the definitions ({defined} expanded into their inputs)"
               if defined else " Derivatives are taken of the total as written")
    return {
        "intro": f"The elasticity of {formula.name} with respect to an input x is x/{formula.name} · "
                 f"∂{formula.name}/∂x: 1 % more of x gives that many % more memory. ∂{formula.name}/∂x is in "
                 f"{unit} per unit of x.{through}{'; ' + tied if tied else ''}.",
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
        rows.append(_row([ts.cell(label), ts.cell(math=row.latex, width=300), ts.cell(amount(row.value, group.unit)),
                          ts.cell(ratio), ts.cell(row.source)], "chosen" if row.chosen else ""))
    table = _table([("variant", "left"), ("formula", "left"), ("value", "right"), ("vs report", "right"),
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
    for group in scenario.variants:
        for row in group.rows:
            terms.setdefault(row.source, {})
    out = []
    for source_id, items in terms.items():
        source = SOURCES.get(source_id)
        rows = [_row([ts.cell(term.title), ts.cell(math=printing.latex(term.expr), width=200),
                      ts.cell(", ".join(keys), code=True), ts.cell(term.where, code=True), ts.cell(term.note)])
                for term, keys in items.values()]
        out.append({
            "id": source_id, "citation": source.citation if source else source_id,
            "citation_tex": TexCode(escape(source.citation if source else source_id).replace("/", "/\\allowbreak{}")),
            "urls": [source.url] if source and source.url else [],
            "table": _table([("term", "left"), ("expression", "left"), ("used in", "left"), ("where", "left"),
                             ("note", "left")], rows, {0: "3.4cm", 1: "4.0cm", 2: "2.2cm", 3: "1.8cm", 4: "3.6cm"}),
            "has_terms": [1] if rows else [],
        })
    return out


def _errata(scenario: Scenario) -> list[dict[str, Any]]:
    out = []
    for source_id in scenario.errata_sources:
        source = SOURCES.get(source_id)
        items = [{"number": e.number, "title": e.title, "text": e.text} for e in errata_for(source_id)]
        out.append({"id": source_id, "citation": source.citation if source else source_id, "entries": items})
    return out
