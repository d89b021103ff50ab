"""User-defined terms: parsed safely, added to totals, usable everywhere a built-in term is."""

import json

import pytest
import sympy
from helpers import run

import symbolic
from symbolic.math.userterms import CustomTerm, CustomTermError, parse_cli_term, with_terms

RUN = {"H": 768, "L": 12, "V": 50000, "d_ff": 3072, "B": 8, "S": 1024, "D": 1024}


def test_lora_term_joins_the_total_and_its_symbols():
    peak = symbolic.formula("llm.peak")
    f = with_terms(peak, [CustomTerm("lora", "2*r*H*L*2", title="LoRA adapters, bf16")])
    assert [t.key for t in f.terms][-1] == "lora"
    r = symbolic.symbol("r")
    assert r in f.expr.free_symbols
    base = peak.evaluate(RUN).total
    total = f.evaluate({**RUN, "r": 16}).total
    assert total - base == 2 * 16 * 768 * 12 * 2  # hand-checked: 2·r·H·L·2 bytes
    # the term takes part in calculus and solving like a built-in one
    assert f.diff("r") == 4 * symbolic.symbol("H") * symbolic.symbol("L")
    assert f.solve("B", 16 * 2**30, {k: v for k, v in RUN.items() if k != "B"} | {"r": 16}).value == 21
    assert r"r" in f.latex()


def test_units_scale_bytes_and_must_match_the_formula():
    f = with_terms(symbolic.formula("llm.peak"), [CustomTerm("ctx", "1.5", unit="GiB")])
    assert f.evaluate(RUN).terms[-1][1] == 3 * 2**29
    with pytest.raises(CustomTermError, match="counts params"):
        with_terms(symbolic.formula("llm.params"), [CustomTerm("x", "2*H")])
    params = with_terms(symbolic.formula("llm.params"), [CustomTerm("x", "2*H", unit="params")])
    assert params.evaluate(H=768, L=12, V=50000, d_ff=3072).total == 123_417_600 + 1536


def test_article_notation_only_when_asked():
    e, b, s, layers = (symbolic.symbol(n) for n in ("E", "B", "S", "L"))
    term = CustomTerm("act", "L(14E + 4BSS)", implicit=True).to_term()
    assert sympy.expand(term.expr - layers * (14 * e + 4 * b * s * s)) == 0
    with pytest.raises(CustomTermError, match="column"):
        CustomTerm("act", "L(14E + 4BSS)").to_term()


@pytest.mark.parametrize("text", ["__import__('os').system('x')", "H.__class__", "lambda: 1", "9**9**7", "'s'",
                                  "H[0]", "open('f')"])
def test_attacks_in_terms_are_rejected(text):
    with pytest.raises(CustomTermError):
        CustomTerm("x", text).to_term()


@pytest.mark.parametrize("spec", ["x", "=2", "x=", "1x=2", "a__b=2", "x:parsecs=2", "x_=2"])
def test_bad_cli_terms(spec):
    with pytest.raises(CustomTermError):
        parse_cli_term(spec)


def test_duplicate_term_name():
    with pytest.raises(CustomTermError, match="already exists"):
        with_terms(symbolic.formula("llm.peak"), [CustomTerm("logits", "1")])


def test_cli_eval_sensitivity_solve_with_terms(capsys):
    base = ["--example", "--set", "B=8", "--set", "S=1024", "--set", "D=1024"]
    code, out, _ = run(capsys, "eval", "llm.peak", *base, "--term", "lora=2*r*H*L*2", "--set", "r=16", "--json")
    data = json.loads(out)
    assert code == 0 and data["terms"]["lora"] == 2 * 16 * 768 * 12 * 2
    code, out, _ = run(capsys, "sensitivity", "llm.peak", *base, "--term", "lora=2*r*H*L*2", "--set", "r=16",
                       "--json")
    assert "r" in {row["symbol"] for row in json.loads(out)["sensitivities"]}
    code, out, _ = run(capsys, "solve", "llm.peak", "--example", "--set", "S=1024", "--set", "D=1024", "--for", "B",
                       "--budget", "16GiB", "--term", "ctx:GiB=1", "--json")
    # by hand: M_peak = 16N + B·694,460,416 at these sizes (16N = 1,974,681,600), so with 1 GiB more
    # the largest B is floor((15 GiB − 16N) / 694,460,416) = 20
    assert 694_460_416 == 8 * 1024 + 12 * (14 * 1024 * 768 + 4 * 1024**2) + 10 * 1024 * 50000
    assert code == 0 and json.loads(out)["value"] == (15 * 2**30 - 16 * 123_417_600) // 694_460_416 == 20


def test_cli_memory_with_terms(capsys):
    code, out, _ = run(capsys, "memory", "gpt2", "--term", "lora=2*r*H*L*4", "--set", "r=8", "--json")
    data = json.loads(out)
    assert code == 0 and data["terms"]["lora"] == 2 * 8 * 768 * 12 * 4
    # a custom term is resident: the total is the resident terms plus the terms of the phase at the peak
    assert "lora" in data["resident_terms"]
    alive = data["resident_terms"] + data["phase_terms"][data["peak_phase"]]
    assert data["total_bytes"] == sum(data["terms"][k] for k in alive) == data["phases"][data["peak_phase"]]


@pytest.mark.parametrize("argv,fragment", [
    (["eval", "llm.peak", "--example", "--term", "x=__import__('os')"], "unexpected '__import__' at column 1"),
    (["eval", "llm.peak", "--example", "--term", "x=2**99999"], "term 'x'"),
    (["eval", "llm.params", "--example", "--term", "x=H"], "give it a params unit"),
    (["memory", "gpt2", "--set", "r=1"], "unknown symbol 'r'"),
    (["memory", "gpt2", "--term", "x=1", "--set", "S=4"], "set by the plan's options"),
])
def test_cli_term_errors(capsys, argv, fragment):
    code, _, err = run(capsys, *argv)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1
