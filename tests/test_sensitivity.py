"""Sensitivities where a total has no two-sided derivative (issue 25, items 3 and 5).

A ceil or floor of the symbol: "undefined (ceil/floor)", never SymPy's "Can't calculate derivative".
A corner of a max or min (two of its arguments equal at the point): the derivative is one-sided,
given from below and from above, in the math layer, the CLI (text and --json) and reports. The
expected values are worked out by hand from each formula's text (``symbolic show KEY``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sympy
from helpers import run

import symbolic
from symbolic.math.userterms import CustomTerm
from symbolic.report import adapter, context, spec
from symbolic.report.typeset import Typesetter

POINT = ["--set", "H=768", "--set", "L=12", "--set", "V=50000", "--set", "d_ff=3072", "--set", "S=1024",
         "--set", "D=1024", "--set", "B=8"]
GPT2 = Path(__file__).resolve().parent.parent / "reports" / "gpt2-article-b.toml"


def rows(out: str) -> dict[str, dict]:
    return {r["symbol"]: r for r in json.loads(out)["sensitivities"]}


# --- item 3: ceil and floor ------------------------------------------------------------------------
@pytest.mark.parametrize(("term", "values", "symbol"), [
    ("t=ceil(B)", [], "B"),
    ("t=ceil(B)*B", [], "B"),
    ("t=floor(x3)+1", ["--set", "x3=3"], "x3"),
    ("t=ceil(B/3)", [], "B"),  # the case that already worked
])
def test_ceil_and_floor_say_undefined(capsys, term, values, symbol):
    code, out, err = run(capsys, "sensitivity", "llm.peak", *POINT, "--term", term, *values)
    assert code == 0 and err == "", err
    line = next(line for line in out.splitlines() if line.split()[0] == symbol)
    assert line.split()[1:] == ["undefined", "(ceil/floor)"]
    code, out, _ = run(capsys, "sensitivity", "llm.peak", *POINT, "--term", term, *values, "--json")
    row = rows(out)[symbol]
    assert code == 0 and row["derivative"] is None and row["elasticity"] is None and row["undefined"] == "ceil/floor"


def test_a_report_with_a_floor_term_leaves_that_input_out(tmp_path):
    report_spec = spec.load(GPT2).with_extras((CustomTerm("t", "floor(x3) + 1"),), {"x3": "3"})
    scenario = adapter.scenario_for(report_spec)
    assert symbolic.symbol("x3") not in {r.symbol for r in scenario.sensitivities()}
    ctx = context.build(report_spec, scenario, Typesetter(), charts=False)
    assert ctx["sensitivity"]["table"]["rows"]


def test_an_infinite_derivative_is_not_called_ceil_or_floor(capsys):
    # sqrt(x1 − x2) at x1 = x2: the value 0 is fine, ∂/∂x1 = 1/(2·sqrt(x1 − x2)) is infinite there
    code, out, _ = run(capsys, "sensitivity", "llm.peak", *POINT, "--term", "t=sqrt(x1-x2)", "--set", "x1=1",
                       "--set", "x2=1", "--json")
    assert code == 0 and rows(out)["x1"]["undefined"] == rows(out)["x2"]["undefined"] == "infinite"
    code, out, _ = run(capsys, "sensitivity", "llm.peak", *POINT, "--term", "t=sqrt(x1-x2)", "--set", "x1=1",
                       "--set", "x2=1")
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:]}
    assert lines["x1"] == lines["x2"] == ["undefined", "(infinite)"] and "ceil/floor" not in out


# --- item 5: corners of a max or min ---------------------------------------------------------------
# infer.kv_cache.tp: M = 2·B·L·S·b_kv·d_head·max(1, a_kv/t). At a_kv = t the two arguments are equal:
# from below max = 1 (∂/∂a_kv = 0), from above max = a_kv/t (∂/∂a_kv = 2·B·L·S·b_kv·d_head/t).
TP = {**symbolic.formula("infer.kv_cache.tp").example, "t": 8}


def test_corner_of_a_max_gives_both_sides():
    assert TP["a_kv"] == TP["t"]  # the example's 8 KV heads on 8 ranks: the corner
    scale = 2 * TP["B"] * TP["L"] * TP["S"] * TP["b_kv"] * TP["d_head"]
    found = {r.symbol.name: r for r in symbolic.formula("infer.kv_cache.tp").sensitivity(TP)}
    a_kv, t, b = found["a_kv"], found["t"], found["B"]
    assert a_kv.corner and a_kv.derivative is None and a_kv.elasticity is None
    assert a_kv.sides() == ((0, 0), (sympy.Rational(scale, TP["t"]), 1))
    # t: from below a_kv/t is the larger (∂/∂t = −2·B·L·S·b_kv·d_head·a_kv/t²), from above 1 is
    assert t.corner and t.sides() == ((sympy.Rational(-scale * TP["a_kv"], TP["t"] ** 2), -1), (0, 0))
    # B multiplies the max whatever it picks: an ordinary two-sided derivative
    assert not b.corner and b.derivative == scale // TP["B"] and b.elasticity == 1


def test_corner_of_a_min():
    # infer.kv_cache.sliding: M = B·a_kv·b_kv·d_head·(S·(2L − 2L_swa) + 2·L_swa·min(S, W − 1)), at S = W − 1
    f = symbolic.formula("infer.kv_cache.sliding")
    point = {**f.example, "S": f.example["W"] - 1}
    per = point["B"] * point["a_kv"] * point["b_kv"] * point["d_head"]
    L, L_swa = point["L"], point["L_swa"]
    found = {r.symbol.name: r for r in f.sensitivity(point)}
    assert found["S"].sides() == ((per * 2 * L, 1), (per * (2 * L - 2 * L_swa), sympy.Rational(L - L_swa, L)))
    assert found["W"].sides()[0][0] == per * 2 * L_swa and found["W"].sides()[1] == (0, 0)


def test_cli_sensitivity_at_a_corner(capsys):
    argv = ["sensitivity", "infer.kv_cache.tp", "--example", "--set", f"t={TP['t']}"]
    code, out, _ = run(capsys, *argv, "--json")
    scale = 2 * TP["B"] * TP["L"] * TP["S"] * TP["b_kv"] * TP["d_head"]
    a_kv = rows(out)["a_kv"]
    assert code == 0 and a_kv["derivative"] is None and a_kv["elasticity"] is None and a_kv["undefined"] == "corner"
    assert (a_kv["left_derivative"], a_kv["right_derivative"]) == (0, scale // TP["t"])
    assert (a_kv["left_elasticity"], a_kv["right_elasticity"]) == (0.0, 1.0)
    b = rows(out)["B"]  # not at a corner in B: the sides are the derivative
    assert b["undefined"] is None and b["left_derivative"] == b["right_derivative"] == b["derivative"]
    code, out, _ = run(capsys, *argv)
    table = {line.split()[0]: line for line in out.splitlines()[2:] if line.strip()}
    assert code == 0 and table["a_kv"].split() == ["a_kv", "0", "/", f"{scale // TP['t']:,}", "0.0000", "/", "1.0000"]
    assert "a_kv, t: at a corner of a max/min" in out and "from below / from above" in out


def test_sensitivities_table_adds_one_sided_columns_only_at_a_corner():
    corner = symbolic.formula("infer.kv_cache.tp").sensitivity(TP).table()
    assert [c[0] for c in corner.columns][-2:] == ["elasticity from below", "elasticity from above"]
    plain = symbolic.formula("infer.kv_cache.tp").sensitivity({**TP, "t": 2}).table()
    assert "elasticity from below" not in [c[0] for c in plain.columns]


def test_report_shows_both_sides_at_a_corner():
    # max(64·B, 512) at B = 8: the two arguments are equal; from below it is 512 (adds 0 per B),
    # from above 64·B (adds 64 per B) to the article's total, whose ∂/∂B is the same on both sides
    report_spec = spec.load(GPT2).with_extras((CustomTerm("t", "max(64*B, 512)"),), {})
    scenario = adapter.scenario_for(report_spec)
    B, S, D = (symbolic.symbol(n) for n in ("B", "S", "D"))
    point = scenario.point()
    assert point[B] == 8
    base = sympy.diff(symbolic.formula("llm.peak").composed().xreplace({D: S}), B).xreplace(point)
    ctx = context.build(report_spec, scenario, Typesetter(), charts=False)
    batch = next(r for r in ctx["sensitivity"]["table"]["rows"] if "batch size" in r["cells"][1]["text"])
    assert batch["cells"][3]["text"] == f"{int(base):,} / {int(base) + 64:,}"
    total = scenario.evaluate().total
    assert batch["cells"][4]["text"] == f"{float(base * 8 / total):.4f} / {float((base + 64) * 8 / total):.4f}"
    assert "B has a one-sided derivative, given from below / from above" in ctx["sensitivity"]["intro"]


def test_a_max_whose_arguments_differ_is_no_corner():
    # the default report's B and S print 0: at B = 1 the optimizer phase's extra is larger than the
    # forward and backward ones', so the peak does not move with B or S on either side (not a corner)
    scenario = adapter.scenario_for(spec.load(GPT2.parent / "llama-3-8b-h100.toml"))
    expr, point = scenario.full_expr(), scenario.point()
    maxima = expr.atoms(sympy.Max)  # the peak's, and the backward's (the loss's moment or the rebuild) inside it
    (peak,) = [m for m in maxima if not any(other != m and other.has(m) for other in maxima)]
    assert len({arg.xreplace(point) for arg in peak.args}) == len(peak.args)
    found = {r.symbol.name: r for r in scenario.sensitivities()}
    assert not any(r.corner for r in found.values())
    assert found["B"].sides() == found["S"].sides() == ((0, 0), (0, 0))
