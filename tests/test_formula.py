"""Core operations on formulas, with hand-checked values."""

import pytest
import sympy

import symbolic
from symbolic.core.symbols import B, H, L, S, V, d_ff
from symbolic.core.term import Term
from symbolic.math.formula import Formula

GPT2_LIKE = {"H": 768, "L": 12, "V": 50000, "d_ff": 3072}
RUN = {**GPT2_LIKE, "B": 8, "S": 1024, "D": 1024}


def test_terms_keep_the_authors_order():
    f = symbolic.formula("llm.peak")
    assert [t.key for t in f.terms] == ["weights", "adam", "gradients", "inputs", "layers", "logits", "backward_extra"]
    assert all(t.source == "article-B" for t in f.terms)
    assert f.text() == "4·N + 8·N + 4·N + 8·B·D + L·(4·B·S^2 + 14·E) + 6·B·S·V + 4·B·S·V"


def test_composed_form_replaces_defined_symbols():
    f = symbolic.formula("llm.peak")
    composed = f.composed()
    assert symbolic.symbol("N") not in composed.free_symbols
    assert symbolic.symbol("E") not in composed.free_symbols
    # 16N + 8BD + L(14BSH + 4BS^2) + 10BSV with N = L(4H^2 + 2H d_ff + H + d_ff + 4H) + VH
    n = L * (4 * H**2 + 2 * H * d_ff + H + d_ff + 4 * H) + V * H
    expected = 16 * n + 8 * B * symbolic.symbol("D") + L * (14 * B * S * H + 4 * B * S**2) + 10 * B * S * V
    assert sympy.expand(composed - expected) == 0


def test_expanded_simplified_collected_agree():
    f = symbolic.formula("llm.activations")
    assert sympy.expand(f.expanded() - f.expr) == 0
    assert sympy.simplify(f.simplified() - f.expr) == 0
    collected = f.collected("S", composed=True)
    assert sympy.expand(collected - f.composed()) == 0


def test_evaluate_article_b_parameters_exactly():
    result = symbolic.formula("llm.params").evaluate(GPT2_LIKE)
    # hand check: per layer 4·768² + 2·768·3072 + 768 + 3072 + 2·2·768 = 7,084,800
    assert result.total == 12 * 7_084_800 + 50_000 * 768 == 123_417_600
    assert isinstance(result.total, sympy.Integer)


def test_evaluate_derives_defined_symbols_and_accepts_them_directly():
    peak = symbolic.formula("llm.peak")
    derived = peak.evaluate(RUN)
    assert derived.derived[symbolic.symbol("N")] == 123_417_600
    assert derived.derived[symbolic.symbol("E")] == 8 * 1024 * 768
    given = peak.evaluate(B=8, S=1024, D=1024, H=768, L=12, V=50000, N=123_417_600)
    assert given.total == derived.total
    # hand check: 16N + 8BD + L(14BSH + 4BS²) + 10BSV
    n, b, s, h, layers, v = 123_417_600, 8, 1024, 768, 12, 50000
    assert derived.total == 16 * n + 8 * b * 1024 + layers * (14 * b * s * h + 4 * b * s * s) + 10 * b * s * v


def test_missing_values_are_named():
    with pytest.raises(ValueError, match="values missing for B, S"):
        symbolic.formula("llm.activations").evaluate(H=768, L=12, V=50000)


def test_unknown_symbol_suggests_the_closest():
    with pytest.raises(KeyError, match="did you mean 'd_ff'"):
        symbolic.formula("llm.params").evaluate(d_f=3072)


def test_derivative_goes_through_definitions():
    params = symbolic.formula("llm.params")
    assert params.diff("L") == 4 * H**2 + 2 * H * d_ff + 5 * H + d_ff
    peak = symbolic.formula("llm.peak")
    # E = BSH, so ∂/∂S of L·14E includes 14·L·B·H
    assert sympy.expand(peak.diff("S") - (14 * L * B * H + 8 * L * B * S + 10 * B * V)) == 0
    assert peak.diff("S", composed=False) == 8 * L * B * S + 10 * B * V


def test_elasticity_symbolic_and_at_a_point():
    params = symbolic.formula("llm.params")
    # N is linear in L through the layer term: elasticity = layers / total
    assert params.elasticity("L", at=GPT2_LIKE) == sympy.Rational(85_017_600, 123_417_600)
    assert sympy.simplify(params.elasticity("V") - V * H / params.composed()) == 0
    rows = {r.symbol.name: r for r in symbolic.formula("llm.peak").sensitivity(RUN)}
    assert set(rows) == {"B", "S", "D", "H", "L", "V", "d_ff"}
    # B scales every activation and input term exactly once: elasticity_B = (total - 16N) / total
    total = symbolic.formula("llm.peak").evaluate(RUN).total
    assert rows["B"].elasticity == (total - 16 * 123_417_600) / total


def test_solve_largest_batch_hand_checked():
    f = symbolic.formula("mlp.total")
    net = {"d_in": 2048, "d_h": 4096, "n_out": 10, "b": 4}
    # fixed 4·N·b = 537,198,592 B; each sample 16,394·4 = 65,576 B; 600 MiB = 629,145,600 B
    sol = f.solve("B", 600 * 2**20, net)
    assert sol.status == "ok" and sol.value == (629_145_600 - 537_198_592) // 65_576 == 1402
    assert sol.total_at_value <= 600 * 2**20 < sol.total_at_next


def test_solve_nothing_fits_and_unbounded():
    f = symbolic.formula("mlp.total")
    net = {"d_in": 2048, "d_h": 4096, "n_out": 10, "b": 4}
    assert f.solve("B", 500 * 2**20, net).status == "none"
    shrinking = Formula("test.shrink", "falls with B", [Term("t", "t", 1000 + 100 / B, "bytes", "project")],
                        source="project")
    sol = shrinking.solve("B", 2000)
    assert sol.status == "unbounded" and sol.value is None


def test_solve_rejects_missing_values():
    with pytest.raises(ValueError, match="values missing for D"):
        symbolic.formula("llm.peak").solve("B", 2**34, H=768, L=12, V=50000, d_ff=3072, S=1024)


def test_latex_forms():
    f = symbolic.formula("llm.params.ffn")
    assert f.latex() == r"2 H d_{\mathrm{ff}} + H + d_{\mathrm{ff}}"
    assert f._repr_latex_().startswith(r"$\displaystyle N_{\mathrm{ffn}} = ")
    assert f._repr_latex_().endswith("$")
    assert format(f, "L") == f.latex(equation=True)
    with pytest.raises(ValueError):
        format(f, "Q")
    assert r"L \left(4 B S^{2} + 14 E\right)" in symbolic.formula("llm.activations").latex()


def test_formula_rejects_mixed_units():
    with pytest.raises(ValueError, match="mixes units"):
        Formula("x", "x", [Term("a", "a", B, "bytes", "project"), Term("b", "b", B, "params", "project")],
                source="project")


def test_a_term_counted_as_zero_adds_no_plus_zero(capsys):
    # article B counts the output head as 0 (tied to the embedding): the term stays in the table,
    # but a printed sum does not end in "+ 0" (issue 25)
    from helpers import run

    from symbolic.report import calc, latex_layout
    from symbolic.text import printing

    params = symbolic.formula("llm.params")
    assert params.term("output").expr == 0
    shown = [t.expr for t in params.terms if t.expr != 0]
    assert params.text() == " + ".join(printing.text(e) for e in shown)
    assert params.latex() == " + ".join(printing.latex(e) for e in shown)
    assert all("+ 0" not in text for text in (str(params), params.latex(dot=True), params.latex(equation=True)))
    assert [p for _, p in latex_layout.body_parts(params, "terms")] == shown
    evaluation = params.evaluate(GPT2_LIKE)
    lines = calc.lines(params, evaluation, lambda text: float(len(text)), 10_000.0)
    assert all(not line.body.rstrip().endswith("+ 0") for line in lines)
    for argv in (["show", "llm.params"], ["latex", "llm.params"], ["latex", "llm.params", "--width", "8cm"],
                 ["eval", "llm.params", "--example", "-v"]):
        code, out, _ = run(capsys, *argv)
        assert code == 0 and "+ 0" not in out, argv
    code, out, _ = run(capsys, "eval", "llm.params", "--example")
    assert "output     0" in out  # the term itself is still listed
    zero = Formula("z", "all zero", (Term("a", "a", sympy.Integer(0), "params", "test"),), source="test")
    assert zero.text() == "0" and zero.latex() == "0"
