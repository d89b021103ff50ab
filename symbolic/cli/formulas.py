"""Subcommands on named formulas: list, show, eval, sensitivity, solve, symbols, seeds."""

from __future__ import annotations

import argparse

from .. import library
from ..core import symbols as symtab
from ..core.units import format_bytes, format_count, parse_size
from ..library import seeds
from ..library.errata import ERRATA
from ..math.formula import Formula, Sensitivity, to_plain
from ..text import printing
from .common import CliError, add_term_options, parse_sets, print_json, table, with_cli_terms

FORMS = ("terms", "expanded", "simplified", "composed")


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this module's subcommands."""
    p = sub.add_parser("list", help="list formula keys")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_list)

    p = sub.add_parser("show", help="show a formula: its terms, sources and forms")
    p.add_argument("key")
    p.add_argument("--form", choices=FORMS, default="terms", help="which form of the total to print")
    p.add_argument("--latex", action="store_true", help="print LaTeX instead of text")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_show)

    for name, handler, helptext in (
        ("eval", cmd_eval, "evaluate a formula for given values"),
        ("sensitivity", cmd_sensitivity, "derivatives and elasticities at a point"),
        ("solve", cmd_solve, "largest whole value of one symbol that fits a budget"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("key")
        p.add_argument("--set", action="append", metavar="NAME=VALUE", help="value of a symbol (repeatable)")
        p.add_argument("--example", action="store_true", help="start from the source's worked-example values")
        add_term_options(p)
        p.add_argument("--json", action="store_true")
        if name == "solve":
            p.add_argument("--for", dest="target", required=True, metavar="SYMBOL", help="symbol to solve for")
            p.add_argument("--budget", required=True,
                           help="memory budget with its unit, e.g. 16GiB, 80GB or 8e10B (80B is 80 bytes; a bare "
                                "number only for formulas that count parameters)")
        p.set_defaults(handler=handler)

    p = sub.add_parser("symbols", help="the symbol table")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_symbols)

    p = sub.add_parser("seeds", help="reproduce every number of the two source articles")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_seeds)


def _values(formula: Formula, args: argparse.Namespace) -> dict[str, object]:
    given = parse_sets(args.set)
    target = getattr(args, "target", None)
    base = formula.restrict(formula.example) if args.example else {}
    base.pop(target, None)  # solving for a symbol drops its example value
    if base and formula.kept([*given, *([target] if target else [])]):
        # the one rule: a defined symbol named (N=..., --for N) is an input, so the example
        # values only its formula used (H, L, V, d_ff for N) are not shown as if they counted
        used = {s.name for s in formula.expr_for([*given, *base, *([target] if target else [])]).free_symbols}
        base = {k: v for k, v in base.items() if k in used}
    return {**base, **given}


def _amount(formula: Formula, value: object) -> str:
    return format_bytes(value) if formula.unit == "bytes" else format_count(value)


def cmd_list(args: argparse.Namespace) -> int:
    rows = [(k, library.get(k).unit, library.get(k).title) for k in library.keys()]
    if args.json:
        print_json([{"key": k, "unit": u, "title": t} for k, u, t in rows])
    else:
        print(table(rows))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    f = library.get(args.key)
    if args.json:
        print_json({
            "key": f.key, "title": f.title, "unit": f.unit, "source": f.source, "name": f.name,
            "text": f.text(), "latex": f.latex(args.form, equation=True),
            "terms": [{"key": t.key, "title": t.title, "expr": printing.text(t.expr), "latex": printing.latex(t.expr),
                       "source": t.source, "where": t.where, "note": t.note} for t in f.terms],
            "definitions": {s.name: d.key for s, d in f.definitions.items()},
            "inputs": [s.name for s in f.inputs], "example": f.example,
        })
        return 0
    if args.latex:
        print(f.latex(args.form, equation=True))
        return 0
    print(f"{f.key}: {f.title}  [{f.unit}; {f.source}{', ' + f.where if f.where else ''}]")
    if args.form == "terms":
        print(f"  {f}")
    else:
        expr = {"expanded": f.expanded, "simplified": f.simplified, "composed": f.composed}[args.form]()
        print(f"  {f.name} = {printing.text(expr)}")
    for s, d in f.definitions.items():
        if s in f.expr.free_symbols:
            print(f"  where {s.name} = {d.key}: {d.text()}")
    print(table([("  " + t.key, printing.text(t.expr), t.title) for t in f.terms]))
    for note in [f.note] + [f"{t.key}: {t.note}" for t in f.terms if t.note]:
        if note:
            print(f"  note: {note}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    f = with_cli_terms(library.get(args.key), args)
    result = f.evaluate(_values(f, args))
    if args.json:
        print_json(result.as_dict())
        return 0
    given = ", ".join(f"{s.name}={v}" for s, v in {**result.values, **result.derived}.items())
    print(f"{f.key}: {f.title}")
    print(f"  at {given}")
    rows = [(t.key, printing.text(t.expr), format_count(v), _amount(f, v) if f.unit == "bytes" else "")
            for t, v in result.terms]
    rows.append(("total", "", format_count(result.total), _amount(f, result.total) if f.unit == "bytes" else ""))
    unit = {"bytes": "bytes", "params": "parameters", "elements": "elements"}.get(f.unit, f.unit)
    print(table([("term", "formula", unit, "")] + rows, "<<>>"))
    return 0


def cmd_sensitivity(args: argparse.Namespace) -> int:
    f = with_cli_terms(library.get(args.key), args)
    values = _values(f, args)
    rows = f.sensitivity(values)
    total = f.evaluate(values).total
    data = [_sensitivity_data(r) for r in rows]
    if args.json:
        print_json({"key": f.key, "total": to_plain(total), "sensitivities": data})
        return 0
    print(f"{f.key} = {_amount(f, total)}; elasticity e means 1 % more of the symbol gives e % more {f.name}")
    ordered = sorted(data, key=lambda d: -max(abs(d["left_elasticity"] or 0), abs(d["right_elasticity"] or 0)))
    print(table([("symbol", "∂/∂symbol", "elasticity")] + [(d["symbol"], *_sensitivity_cells(d)) for d in ordered],
                "<>>"))
    corners = [d["symbol"] for d in ordered if d["undefined"] == "corner"]
    if corners:
        print(f"  {', '.join(corners)}: at a corner of a max/min (two of its arguments are equal here), so the "
              "derivative is one-sided: from below / from above")
    return 0


def _sensitivity_data(row: Sensitivity) -> dict[str, object]:
    """One symbol's sensitivity as JSON: the derivative and elasticity (null where there is none, and
    ``undefined`` says why), and the one-sided values (equal to them where the derivative exists)."""
    (left, left_e), (right, right_e) = row.sides()

    def plain(value: object) -> int | float | None:
        return None if value is None else to_plain(value)

    def ratio(value: object) -> float | None:
        return None if value is None else float(value)

    return {"symbol": row.symbol.name, "derivative": plain(row.derivative), "elasticity": ratio(row.elasticity),
            "undefined": row.reason or None, "left_derivative": plain(left), "right_derivative": plain(right),
            "left_elasticity": ratio(left_e), "right_elasticity": ratio(right_e)}


def _sensitivity_cells(row: dict[str, object]) -> tuple[str, str]:
    if row["undefined"] == "corner":
        sides = (_derivative_text(row["left_derivative"]), _derivative_text(row["right_derivative"]))
        shares = (row["left_elasticity"], row["right_elasticity"])
        return " / ".join(sides), "" if None in shares else " / ".join(f"{e:.4f}" for e in shares)
    if row["derivative"] is None:
        return "undefined", f"({row['undefined']})"
    elasticity = row["elasticity"]
    return _derivative_text(row["derivative"]), "" if elasticity is None else f"{elasticity:.4f}"


def _derivative_text(derivative: object) -> str:
    return f"{derivative:,}" if isinstance(derivative, int) else f"{derivative:.6g}"


def cmd_solve(args: argparse.Namespace) -> int:
    f = with_cli_terms(library.get(args.key), args)
    budget = parse_size(args.budget, "--budget" if f.unit == "bytes" else None)  # bytes need a unit
    if f.unit != "bytes" and not args.budget.strip().replace(".", "").replace("e", "").replace("E", "").isdigit():
        raise CliError(f"{f.key} counts {f.unit}; give --budget as a plain number")
    sol = f.solve(args.target, budget, _values(f, args))
    data = {
        "key": f.key, "symbol": sol.symbol.name, "status": sol.status, "value": sol.value,
        "budget": to_plain(sol.budget),
        "total_at_value": None if sol.total_at_value is None else to_plain(sol.total_at_value),
        "total_at_next": None if sol.total_at_next is None else to_plain(sol.total_at_next),
        "message": sol.message,
    }
    if args.json:
        print_json(data)
        return 0
    print(f"{f.key} ≤ {_amount(f, budget)}: {sol.message}")
    if sol.value is not None:
        print(f"  {sol.symbol.name} = {sol.value}: {_amount(f, sol.total_at_value)}; "
              f"{sol.symbol.name} = {sol.value + 1}: {_amount(f, sol.total_at_next)}")
    return 0


def cmd_symbols(args: argparse.Namespace) -> int:
    entries = symtab.all_symbols()
    if args.json:
        print_json([{"name": e.name, "latex": e.latex, "unit": e.unit, "integer": e.integer,
                     "description": e.description} for e in entries])
    else:
        print(table([(e.name, e.unit, e.description) for e in entries]))
    return 0


def cmd_seeds(args: argparse.Namespace) -> int:
    checks = seeds.report()
    if args.json:
        print_json({"checks": checks, "errata": [e.__dict__ for e in ERRATA]})
        return 0
    for source in ("article-A", "article-B"):
        print(f"{source}:")
        rows = [("", "figure", "article", "engine", "unit", "formula")]
        for c in checks:
            if c["source"] == source:
                mark = "ok" if c["agrees"] else "DIFF"
                prefix = "≈ " if c["approx"] else ""
                rows.append((mark, c["label"], prefix + c["article"], c["engine"], c["unit"], c["formula"]))
        print(table(rows, "<<>><<"))
        for c in checks:
            if c["source"] == source and not c["agrees"] and c["note"]:
                print(f"  DIFF {c['label']}: {c['note']}")
        print()
    print("errata:")
    for e in ERRATA:
        print(f"  {e.source} #{e.number} {e.title}: {e.text}")
    agree = sum(c["agrees"] for c in checks)
    print(f"\n{agree} of {len(checks)} printed figures agree; the others are the articles' errata.")
    return 0
