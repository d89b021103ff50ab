"""Notebook display of results: HTML tables, pandas frames, short reprs, sizes and pint quantities.

Expected numbers are the README's worked example (article B's GPT-2 point, whose total
7,530,364,928 bytes and elasticity 363664/459617 the README's doctests check against the
formula), GPT-2's published 124,439,808 parameters, and sums of the objects' own terms.
"""

from __future__ import annotations

import sys

import pytest
import sympy

import symbolic
from symbolic import planning
from symbolic.core.errors import UserError
from symbolic.core.units import SizeError
from symbolic.math import quantities
from symbolic.networks.transformer import load as load_model
from symbolic.text import display

POINT = dict(H=768, L=12, V=50000, d_ff=3072, B=8, S=1024, D=1024)
NO_B = {k: v for k, v in POINT.items() if k != "B"}


@pytest.fixture(scope="module")
def peak() -> symbolic.Formula:
    return symbolic.formula("llm.peak")


# --- the renderer ----------------------------------------------------------------------------------

def test_html_escapes_every_cell_caption_and_header() -> None:
    table = display.Table("<b>cap</b>", (("<th>", "<u>"),), (("<script>x</script>",),))
    out = display.html(table)
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "&lt;b&gt;cap&lt;/b&gt;" in out and "&lt;th&gt;" in out and "&lt;u&gt;" in out


def test_html_says_how_many_rows_it_left_out() -> None:
    table = display.Table("", (("n", ""),), tuple((i,) for i in range(50)))
    out = display.html(table, limit=10)
    assert out.count("<tr>") == 1 + 10 + 1  # header, ten rows, the note
    assert "40 more rows" in out


def test_to_frame_without_pandas_is_a_one_line_user_error(monkeypatch: pytest.MonkeyPatch, peak) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(UserError, match="pip install pandas"):
        peak.evaluate(POINT).to_frame()


# --- evaluation, sensitivity, solution ------------------------------------------------------------

def test_evaluation_html_lists_every_term_and_the_total(peak) -> None:
    r = peak.evaluate(POINT)
    out = r._repr_html_()
    assert out.startswith("<table") and r.total == 7530364928
    for term, value in r.terms:
        assert f">{term.key}<" in out and f">{int(value):,}<" in out
    assert "<b>7,530,364,928</b>" in out and "<b>7.01 GiB</b>" in out
    assert "bytes" in out  # the unit heads the value column


def test_evaluation_repr_is_short_and_latex_is_the_total(peak) -> None:
    r = peak.evaluate(POINT)
    assert len(repr(r)) < 200 and "7530364928" in repr(r) and "7.01 GiB" in repr(r)
    assert r._repr_latex_() == r"$\displaystyle M_{\mathrm{peak}} = 7{,}530{,}364{,}928\ \mathrm{B}$"


def test_evaluation_frame_has_the_terms_values(peak) -> None:
    pytest.importorskip("pandas")
    r = peak.evaluate(POINT)
    frame = r.to_frame()
    assert list(frame["term"]) == [t.key for t, _ in r.terms]
    assert list(frame["value"]) == [int(v) for _, v in r.terms]
    assert frame["value"].sum() == r.total and frame.attrs["units"]["value"] == "bytes"


def test_sensitivity_is_still_a_list_and_shows_a_table(peak) -> None:
    s = peak.sensitivity(POINT)
    assert isinstance(s, list) and len(s) == 7
    by_name = {item.symbol.name: item for item in s}
    assert by_name["S"].elasticity == sympy.Rational(363664, 459617)  # the README's value
    assert [i.symbol for i in s] == [i.symbol for i in list(s)]
    out = s._repr_html_()
    assert out.startswith("<table") and "batch size" in out and f">{float(by_name['S'].elasticity):.4f}<" in out
    assert len(repr(s)) < 200 and "S 0.7912" in repr(s)


def test_sensitivity_frame(peak) -> None:
    pytest.importorskip("pandas")
    s = peak.sensitivity(POINT)
    frame = s.to_frame()
    assert list(frame["symbol"]) == [i.symbol.name for i in s]
    assert list(frame["elasticity"]) == [float(i.elasticity) for i in s]
    assert list(frame["value"]) == [POINT[i.symbol.name] for i in s]


def test_solve_takes_size_strings_as_the_cli_does(peak) -> None:
    assert peak.solve("B", "16GiB", NO_B).value == peak.solve("B", 16 * 2**30, NO_B).value == 21
    assert peak.solve("B", "16 GiB", NO_B).budget == 16 * 2**30
    assert peak.solve("B", "80GB", NO_B).budget == 80 * 10**9  # GB is 10^9, not 2^30
    with pytest.raises(SizeError, match="unknown unit"):
        peak.solve("B", "16 GiBs", NO_B)


def test_solution_html_repr_and_frame(peak) -> None:
    sol = peak.solve("B", "16GiB", NO_B)
    out = sol._repr_html_()
    at, nxt = peak.evaluate({**NO_B, "B": 21}).total, peak.evaluate({**NO_B, "B": 22}).total
    assert sol.total_at_value == at and sol.total_at_next == nxt and at <= 16 * 2**30 < nxt
    assert out.startswith("<table") and f">{int(at):,}<" in out and f">{int(nxt):,}<" in out and "16.00 GiB" in out
    assert len(repr(sol)) < 200 and "value=21" in repr(sol)
    pytest.importorskip("pandas")
    assert list(sol.to_frame()["value"]) == [21, 16 * 2**30, int(at), int(nxt)]


# --- planner, fit answers, model breakdown ------------------------------------------------------------

@pytest.fixture(scope="module")
def plan() -> planning.Plan:
    return planning.plan("gpt2", mode="train", batch=2, seq=512)


def test_plan_html_and_frame_add_up_to_its_total(plan) -> None:
    out = plan._repr_html_()
    assert out.startswith("<table") and f"<b>{plan.total:,}</b>" in out
    for key, value in plan.terms().items():
        assert f">{key}<" in out and f">{value:,}<" in out
    assert len(repr(plan)) < 120 and "gpt2 train" in repr(plan)
    pytest.importorskip("pandas")
    frame = plan.to_frame()
    # the total is the peak: the resident terms and those of the phase that sets it (issue 13)
    peak = [b for b, where in zip(frame["bytes"], frame["alive in"], strict=True)
            if where == "resident" or plan.peak_phase in where.split(", ")]
    assert sum(peak) == plan.total and list(frame["term"]) == list(plan.terms())


def test_fit_and_answer_show_tables(plan) -> None:
    gpu = planning.gpu("h100-80gb")
    fit = plan.fit(gpu)
    assert fit._repr_html_().startswith("<table") and f">{gpu.bytes - plan.total:,}<" in fit._repr_html_()
    assert len(repr(fit)) < 120
    answer = planning.fit_batch("gpt2", "h100-80gb", seq=512)
    assert answer.status == "ok" and answer.plan is not None
    out = answer._repr_html_()
    assert out.startswith("<table") and f">{answer.value:,}<" in out and f">{answer.plan.total:,}<" in out
    assert answer.plan.total <= gpu.bytes < answer.next_total  # the answer is the largest that fits
    assert len(repr(answer)) < 250
    pytest.importorskip("pandas")
    frame = answer.to_frame()
    assert dict(zip(frame[""], frame["value"], strict=True))["per-GPU total"] == answer.plan.total


def test_model_breakdown_html_and_frame() -> None:
    spec = load_model("gpt2")
    assert spec.param_count() == 124_439_808  # GPT-2 small, as transformers counts it
    out = spec._repr_html_()
    assert out.startswith("<table") and "<b>124,439,808</b>" in out
    assert len(repr(spec)) < 150
    pytest.importorskip("pandas")
    frame = spec.to_frame()
    assert frame["parameters"].sum() == spec.param_count()


# --- sweeps with per-term columns ------------------------------------------------------------------------

def test_sweep_has_a_column_per_term_matching_evaluate(peak) -> None:
    fixed = {k: v for k, v in NO_B.items() if k != "S"}
    result = symbolic.sweep("llm.peak", {"B": "1..4", "S": [512, 1024]}, fixed)
    assert len(result) == 8 and result.axes == ("B", "S")
    assert result.terms == tuple(t.key.removeprefix("llm.peak.") for t in peak.terms)
    compiled = peak.compile()(B=result.columns["B"], S=result.columns["S"], **fixed)
    assert list(result.total) == list(compiled)
    for i in (0, 7):
        at = peak.evaluate({**fixed, "B": int(result.columns["B"][i]), "S": int(result.columns["S"][i])})
        for term, value in at.terms:
            assert result.columns[term.key.removeprefix("llm.peak.")][i] == value
        assert result.total[i] == at.total
    assert result.total[list(zip(result.columns["B"], result.columns["S"], strict=True)).index((4, 1024))] \
        == peak.evaluate({**fixed, "B": 4, "S": 1024}).total
    assert result._repr_html_().startswith("<table") and len(repr(result)) < 120


def test_sweep_frame_and_errors(peak) -> None:
    with pytest.raises(UserError, match="swept and also given"):
        symbolic.sweep("llm.peak", {"B": [1, 2]}, POINT)
    with pytest.raises(UserError):
        symbolic.sweep("llm.peak", {}, POINT)
    pytest.importorskip("pandas")
    frame = symbolic.sweep(peak, {"B": [1, 8]}, NO_B).to_frame()
    assert list(frame.columns) == ["B", *(t.key.removeprefix("llm.peak.") for t in peak.terms), "total"]
    assert list(frame["total"]) == [2669142016, 7530364928]  # the CompiledFormula docstring's values


# --- expressions with the project's names -------------------------------------------------------------------

def test_display_expression_typesets_project_names_and_compares_equal(peak) -> None:
    d = peak.diff("H")
    e = peak.display(d)
    assert r"d_{\mathrm{ff}}" in e._repr_latex_() and "d_{ff}" in sympy.latex(d)
    assert e == d and d == e and hash(e) == hash(d)
    assert e + 1 == d + 1 and 2 * e == 2 * d and sympy.expand(e) == sympy.expand(d)
    assert e.free_symbols == d.free_symbols and str(e) == symbolic.text.printing.text(d)
    assert repr(e) == repr(d)


def test_init_printing_outside_ipython_does_nothing() -> None:
    assert symbolic.init_printing() is False


# --- pint ------------------------------------------------------------------------------------------------------

def test_pint_budgets_and_quantities(peak) -> None:
    pint = pytest.importorskip("pint")
    ureg = pint.UnitRegistry()
    assert peak.solve("B", 16 * ureg.GiB, NO_B).value == 21
    assert peak.solve("B", ureg.Quantity(80, "GB"), NO_B).budget == 80 * 10**9
    with pytest.raises(UserError, match="not in bytes"):
        peak.solve("B", 16 * ureg.meter, NO_B)
    r = peak.evaluate(POINT)
    q = r.quantity(ureg)
    assert q.magnitude == 7530364928 and isinstance(q.magnitude, int) and str(q.units) == "byte"
    product = r.total * ureg.byte  # float(ureg.byte) is 8.0: without the guard this is a SymPy Float, ×8
    assert isinstance(product, ureg.Quantity) and product.magnitude == r.total
    assert product.to("GiB").magnitude == pytest.approx(7530364928 / 2**30)


def test_pint_guard_registers_once() -> None:
    pytest.importorskip("pint")
    quantities.register()
    quantities.register()
    assert len(quantities._REGISTERED) == 1


def test_init_printing_in_ipython_typesets_only_project_expressions(monkeypatch: pytest.MonkeyPatch, peak) -> None:
    formatters = pytest.importorskip("IPython.core.formatters")
    import types

    shell = types.SimpleNamespace(display_formatter=formatters.DisplayFormatter())
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    assert symbolic.init_printing() is True and symbolic.init_printing() is True  # once
    latex = shell.display_formatter.formatters["text/latex"]
    assert r"d_{\mathrm{ff}}" in latex(peak.composed()) and "d_{ff}" not in latex(peak.composed())
    other = sympy.Symbol("d_ff") ** 2  # the user's own symbol (no assumptions): SymPy's printing
    assert latex(other) == other._repr_latex_() and "d_{ff}" in latex(other)


def test_display_expression_copies_pickles_and_compares(peak) -> None:
    import copy
    import pickle

    e = peak.display(peak.evaluate(POINT).total)
    assert copy.deepcopy(e) == e and pickle.loads(pickle.dumps(e)) == e
    assert e > 7530364927 and e <= 7530364928 and int(e) == 7530364928 and float(e) == 7530364928.0


def test_fit_questions_take_a_capacity_as_a_size() -> None:
    from symbolic.core.errors import UnknownNameError

    answer = planning.fit_batch("gpt2", "16GiB", seq=512)
    assert answer.status == "ok" and answer.plan.total <= 16 * 2**30 < answer.next_total
    assert planning.fit_batch("gpt2", 16 * 2**30, seq=512).value == answer.value
    assert answer.gpu.bytes == 16 * 2**30
    with pytest.raises(UnknownNameError, match="did you mean"):
        planning.fit_batch("gpt2", "h100-80", seq=512)
    with pytest.raises(UserError, match="positive whole number"):
        planning.fit_batch("gpt2", 0.5, seq=512)
