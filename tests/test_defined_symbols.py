"""One rule for defined symbols (N = the parameter formula, E = B·S·H), in every method and command:
a defined symbol the caller names (gives a value for, differentiates by, solves for, sweeps over,
keeps when compiling) is an input; every other one is expanded into its formula."""

import json

import numpy as np
import pytest
import sympy
from helpers import run

import symbolic
from symbolic.core.symbols import B, D, H, L, N, S, V
from symbolic.core.term import Term
from symbolic.math.formula import Formula

GPT2_LIKE = {"H": 768, "L": 12, "V": 50000, "d_ff": 3072}
RUN = {**GPT2_LIKE, "B": 8, "S": 1024, "D": 1024}
N_GPT2 = 123_417_600  # 12·7,084,800 + 50,000·768 (tests/test_formula.py checks it by hand)
PEAK_RUN = 7_530_364_928  # llm.peak at RUN (README; 16N + 8BD + L(14BSH + 4BS²) + 10BSV)
GIB80 = 80 * 2**30


def test_diff_by_a_defined_symbol_keeps_it():
    steady = symbolic.formula("llm.steady")  # 4N + 8N + 4N + 8BD
    assert steady.diff("N") == 16
    peak = symbolic.formula("llm.peak")
    assert peak.diff("N") == 16
    assert sympy.expand(peak.diff("E") - 14 * L) == 0  # L·(4BS² + 14E)
    # a symbol that is not defined still goes through every definition, N and E expanded
    assert sympy.expand(peak.diff("S") - (14 * L * B * H + 8 * L * B * S + 10 * B * V)) == 0
    assert sympy.simplify(steady.elasticity("N") - 16 * N / (16 * N + 8 * B * D)) == 0
    assert sympy.expand(steady.collected("N", composed=True) - (16 * N + 8 * B * D)) == 0


def test_solve_for_a_defined_symbol():
    sol = symbolic.formula("llm.steady").solve("N", GIB80, B=8, D=1024)
    # hand check: 16N + 8·8·1024 ≤ 85,899,345,920  ⇔  N ≤ (85,899,345,920 − 65,536) / 16
    assert sol.status == "ok" and sol.value == (85_899_345_920 - 65_536) // 16 == 5_368_705_024
    assert sol.total_at_value <= GIB80 < sol.total_at_next


def test_cli_solve_for_n(capsys):
    code, out, err = run(capsys, "solve", "llm.steady", "--for", "N", "--budget", "80GiB", "--set", "B=8",
                         "--set", "D=1024", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["symbol"] == "N" and data["status"] == "ok" and data["value"] == 5_368_705_024
    assert data["total_at_value"] == 16 * 5_368_705_024 + 65_536


def test_sensitivity_names_n_when_the_point_gives_it():
    peak = symbolic.formula("llm.peak")
    rows = {r.symbol.name: r for r in peak.sensitivity({**RUN, "N": N_GPT2})}
    # N given: N is an input; H, L, V stay where they appear outside N (E = BSH, 4BS², 10BSV), d_ff does not
    assert set(rows) == {"N", "B", "S", "D", "H", "L", "V"}
    assert rows["N"].derivative == 16 and rows["N"].elasticity == sympy.Rational(16 * N_GPT2, PEAK_RUN)
    # naming N (not giving it) also keeps it: its value is derived, 16N/M = 120525/459617
    assert peak.elasticity("N", at=RUN) == sympy.Rational(16 * N_GPT2, PEAK_RUN) == sympy.Rational(120525, 459617)
    # without N named, the default rows are the base inputs, as before
    assert {r.symbol.name for r in peak.sensitivity(RUN)} == {"B", "S", "D", "H", "L", "V", "d_ff"}


def test_cli_sensitivity_with_n_set(capsys):
    code, out, err = run(capsys, "sensitivity", "llm.steady", "--set", "N=1e9", "--set", "B=8", "--set", "D=1024",
                         "--json")
    assert code == 0, err
    data = json.loads(out)
    rows = {r["symbol"]: r for r in data["sensitivities"]}
    assert set(rows) == {"N", "B", "D"} and data["total"] == 16 * 10**9 + 65_536
    assert rows["N"]["derivative"] == 16
    assert rows["N"]["elasticity"] == pytest.approx(16e9 / (16e9 + 65_536), rel=1e-12)


def test_compiled_call_naming_n_keeps_it():
    fn = symbolic.formula("llm.peak").compile()
    got = fn(N=np.array([N_GPT2, 2 * N_GPT2]), **{k: v for k, v in RUN.items() if k != "d_ff"})
    assert got.tolist() == [PEAK_RUN, PEAK_RUN + 16 * N_GPT2]
    # the same code compile(keep=...) gives: keep is the same rule, decided up front
    kept = symbolic.formula("llm.peak").compile(keep=("N",))
    assert fn.for_names({"N", "B"}) is kept and set(kept.inputs) == {"N", "B", "S", "D", "H", "L", "V"}
    with pytest.raises(ValueError, match="d_ff does not appear in llm.peak once N is given"):
        fn(N=N_GPT2, **RUN)
    with pytest.raises(ValueError, match="N is expanded in this code"):
        fn.prepare({"N": 1, **RUN})


def _nested() -> Formula:
    """M = 2·N_gpu + B with N_gpu = N/2 (its own formula) and N = 3·H (a definition inside it)."""
    n_gpu = sympy.Symbol("N_gpu", positive=True)
    params = Formula("t.params", "params", [Term("t.params.h", "h", 3 * H, "params", "project")], source="project")
    split = Formula("t.split", "split", [Term("t.split.n", "n", N / 2, "params", "project")], source="project",
                    definitions={N: params})
    return Formula("t.total", "total", [Term("t.total.w", "w", 2 * n_gpu, "params", "project"),
                                        Term("t.total.b", "b", B, "params", "project")],
                   source="project", definitions={n_gpu: split})


def test_a_defined_symbol_inside_a_definition_follows_the_rule():
    f = _nested()
    assert f.composed() == 3 * H + B
    assert f.expr_for(["N"]) == N + B  # N named: N_gpu expands, N inside it stays
    assert f.diff("N") == 1 and f.diff("H") == 3
    assert f.evaluate(N=10, B=1).total == 11 and f.evaluate(H=10, B=1).total == 31
    assert f.evaluate(H=10, B=1).derived[sympy.Symbol("N_gpu", positive=True)] == 15
    assert f.solve("N", 100, B=1).value == 99
    assert {r.symbol.name for r in f.sensitivity({"N": 10, "B": 1})} == {"N", "B"}
    assert f.subs(N=4) == 4 + B


def test_cli_example_values_only_n_used_are_left_out_once_n_is_named(capsys):
    code, out, _ = run(capsys, "solve", "llm.peak", "--example", "--for", "N", "--budget", "80GiB",
                       "--set", "B=8", "--set", "S=1024", "--set", "D=1024", "--json")
    # hand check: 8BD + L(14E + 4BS²) + 10BSV = 65,536 + 12·121,634,816 + 4,096,000,000 = 5,555,683,328
    # (E = 8·1024·768), so N ≤ (85,899,345,920 − 5,555,683,328) / 16
    assert code == 0 and json.loads(out)["value"] == (85_899_345_920 - 5_555_683_328) // 16 == 5_021_478_912
    code, out, _ = run(capsys, "eval", "llm.steady", "--example", "--set", "N=1e9", "--set", "B=8", "--set", "D=1024")
    assert code == 0 and out.splitlines()[1] == "  at N=1000000000, B=8, D=1024"  # not H, L, V, d_ff
    code, out, _ = run(capsys, "eval", "llm.steady", "--example", "--set", "B=8", "--set", "D=1024")
    assert code == 0 and out.splitlines()[1] == "  at H=768, L=12, V=50000, d_ff=3072, B=8, D=1024, N=123417600"
