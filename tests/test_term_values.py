"""A term is a real, nonnegative amount wherever it is evaluated (issue 25, items 1 and 2).

A user-defined term that is negative at the point, or not a real number there (complex,
infinite, undefined), is bad input: exit 2 and one line naming the term, in eval, sensitivity,
solve, memory, reports and sweeps, never a negative total or a traceback. Every expected value
below is worked out from the term's own text and the values given.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
from helpers import run

import symbolic
from symbolic.core.errors import UserError
from symbolic.math.compiled import ApproximateWarning
from symbolic.math.sweeps import SweepError
from symbolic.math.userterms import CustomTerm, with_terms
from symbolic.report import adapter, context, spec
from symbolic.report.typeset import Typesetter

SIZES = ["--set", "H=768", "--set", "L=12", "--set", "V=50000", "--set", "d_ff=3072", "--set", "S=1024",
         "--set", "D=1024"]
POINT = [*SIZES, "--set", "B=8"]
GPT2 = Path(__file__).resolve().parent.parent / "reports" / "gpt2-article-b.toml"
RUN = {"H": 768, "L": 12, "V": 50000, "d_ff": 3072, "S": 1024, "D": 1024}


def sets(*pairs: str) -> list[str]:
    return [word for pair in pairs for word in ("--set", pair)]


def one_line_error(capsys, *argv: str) -> str:
    """Run the command; it must fail with exit 2, print nothing on stdout and one line on stderr."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, ""), (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def commands(term: str, values: list[str]) -> list[list[str]]:
    """The same custom term at the same point, in every command that takes --term."""
    return [["eval", "llm.peak", *POINT, "--term", term, *values],
            ["eval", "llm.peak", *POINT, "--term", term, *values, "--json"],
            ["sensitivity", "llm.peak", *POINT, "--term", term, *values],
            ["solve", "llm.peak", *SIZES, "--for", "B", "--budget", "80GiB", "--term", term, *values],
            ["memory", "gpt2", "--batch", "8", "--seq", "1024", "--term", term, *values]]


# --- item 1: a negative term --------------------------------------------------------------------
NEGATIVE = [("t=x1-x2", ("x1=1", "x2=100000000000"), f"{1 - 100_000_000_000:,}"),
            ("t=log2(x1)", ("x1=1/1024",), f"{math.log2(1 / 1024):g}")]


@pytest.mark.parametrize(("term", "values", "shown"), NEGATIVE)
def test_a_negative_term_is_an_error_naming_it_in_every_command(capsys, term, values, shown):
    for argv in commands(term, sets(*values)):
        err = one_line_error(capsys, *argv)
        assert f"term 't' is negative at {', '.join(values)} ({shown})" in err, (argv, err)


def test_the_python_api_refuses_a_negative_term_too():
    f = with_terms(symbolic.formula("llm.peak"), [CustomTerm("t", "x1 - x2")])
    with pytest.raises(UserError, match=r"term 't' is negative at x1=1, x2=100 \(-99\)"):
        f.evaluate({**RUN, "B": 8, "x1": 1, "x2": 100})
    with pytest.raises(UserError, match="term 't' is negative"):
        f.sensitivity({**RUN, "B": 8, "x1": 1, "x2": 100})


def test_library_terms_at_valid_points_are_unchanged():
    peak = symbolic.formula("llm.peak")
    evaluation = peak.evaluate({**RUN, "B": 8})
    assert all(value >= 0 for _, value in evaluation.terms)
    assert evaluation.total == sum(value for _, value in evaluation.terms)


# --- solving: a term that goes negative must not make "every B fit" --------------------------------
def test_solve_a_falling_negative_term_does_not_make_every_batch_fit(capsys):
    # 1 − B·10¹¹ is negative from B = 1: before, the total fell with B and "every B ≥ 1 fits"
    err = one_line_error(capsys, "solve", "llm.peak", *SIZES, "--for", "B", "--budget", "80GiB",
                         "--term", "t=x1-B*x2", *sets("x1=1", "x2=100000000000"))
    assert f"term 't' is negative at B=1 ({1 - 100_000_000_000:,})" in err


def test_solve_names_the_first_batch_where_the_term_turns_negative(capsys):
    # 10¹² − B·10⁹ falls faster than the rest grows, so the total falls; it is 0 at B = 1000 and
    # negative from B = 1001 on, inside the range "every B fits" would speak for
    x, y = 10**12, 10**9
    first = x // y + 1
    err = one_line_error(capsys, "solve", "llm.peak", *SIZES, "--for", "B", "--budget", "2000GiB",
                         "--term", "t=x1-B*x2", *sets(f"x1={x}", f"x2={y}"))
    assert f"term 't' is negative at B={first} ({x - first * y:,})" in err
    f = with_terms(symbolic.formula("llm.peak"), [CustomTerm("t", "x1 - B*x2")])
    with pytest.raises(UserError, match=f"term 't' is negative at B={first} "):
        f.solve("B", 2000 * 2**30, {**RUN, "x1": x, "x2": y})


def test_solve_a_term_negative_only_past_the_answer_is_fine():
    x, y = 10**12, 10**8  # the term turns negative at B = 10,001, far past what fits
    f = with_terms(symbolic.formula("llm.peak"), [CustomTerm("t", "x1 - B*x2")])
    solution = f.solve("B", 2000 * 2**30, {**RUN, "x1": x, "x2": y})
    assert solution.status == "ok" and x - (solution.value + 1) * y > 0
    assert solution.total_at_value <= 2000 * 2**30 < solution.total_at_next


@pytest.mark.parametrize(("term", "values", "message"), [
    ("t=sqrt(x1-B)", ("x1=1",), "term 't' is not a real number at B=2"),  # sqrt(1 − B): 0 at B = 1, then imaginary
    ("t=1/(B-8)", (), f"term 't' is negative at B=1 ({1 / (1 - 8):.6g})"),
    ("t=max(sqrt(x1-B),1)", ("x1=1",), "term 't': an argument of its max or min is not a real number at B=2"),
])
def test_solve_names_where_a_term_stops_being_a_real_amount(capsys, term, values, message):
    err = one_line_error(capsys, "solve", "llm.peak", *SIZES, "--for", "B", "--budget", "80GiB", "--term", term,
                         *sets(*values))
    assert message in err


# --- item 2: a term that is not a real number ------------------------------------------------------
NOT_REAL = [
    ("t=sqrt(x1-x2)", ("x1=1", "x2=100"), "is not a real number at x1=1, x2=100"),
    ("t=log2(x1-x2)", ("x1=1", "x2=100"), "is not a real number at x1=1, x2=100"),
    ("t=log2(x1-x2)", ("x1=1", "x2=1"), "is infinite at x1=1, x2=1"),
    ("t=1/(x1-x2)", ("x1=1", "x2=1"), "is infinite at x1=1, x2=1"),
    ("t=x1*(x1-x2)**-1", ("x1=1", "x2=1"), "is infinite at x1=1, x2=1"),
    ("t=ceil(sqrt(x1-x2))", ("x1=1", "x2=100"), "is not a real number at x1=1, x2=100"),
    ("t=max(sqrt(x1-x2),1)", ("x1=1", "x2=100"), ": an argument of its max or min is not a real number at x1=1, x2=100"),
    ("t=min(1/(x1-x2),2)", ("x1=1", "x2=1"), ": an argument of its max or min is infinite at x1=1, x2=1"),
]


@pytest.mark.parametrize(("term", "values", "message"), NOT_REAL)
def test_a_term_that_is_not_a_real_number_is_an_error_naming_it(capsys, term, values, message):
    for argv in commands(term, sets(*values)):
        err = one_line_error(capsys, *argv)
        assert f"term 't'{' ' if not message.startswith(':') else ''}{message}" in err, (argv, err)


def test_a_constant_zero_division_is_refused_when_parsed(capsys):
    err = one_line_error(capsys, "eval", "llm.peak", *POINT, "--term", "t=0**-1")
    assert "term 't'" in err and "division by zero" in err


# --- reports ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("term", "values", "message"), [
    ("t=sqrt(x1-x2)", ("x1=1", "x2=100"), "term 't' is not a real number at x1=1, x2=100"),
    ("t=x1-x2", ("x1=1", "x2=100"), "term 't' is negative at x1=1, x2=100 (-99)"),
    ("t=max(1/(x1-x2),1)", ("x1=1", "x2=1"), "term 't': an argument of its max or min is infinite at x1=1, x2=1"),
])
def test_report_with_such_a_term_is_one_line_exit_2(capsys, tmp_path, term, values, message):
    out = tmp_path / "r.tex"
    err = one_line_error(capsys, "report", str(GPT2), "--tex", str(out), "-q", "--term", term, *sets(*values))
    assert message in err and not out.exists()


def test_report_term_negative_at_a_batch_the_report_reaches_names_it(tmp_path):
    # 10¹¹ − B·10¹⁰ is positive at the report's B = 8 and negative from B = 11, which the search for
    # the largest batch and the batch sweep reach
    path = tmp_path / "r.toml"
    path.write_text(GPT2.read_text(encoding="utf-8") + '\n[[terms]]\nname = "t"\nexpr = "x1 - B*x2"\n\n'
                    "[values]\nx1 = 100000000000\nx2 = 10000000000\n", encoding="utf-8")
    report_spec = spec.load(path)
    with pytest.raises(UserError, match=r"term 't' is negative at B=\d+"):
        context.build(report_spec, adapter.scenario_for(report_spec), Typesetter(), charts=False)


# --- sweeps ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("expr", "message"), [
    ("x1 - x2", "term 't' is negative at x1=1"),
    ("sqrt(x1 - x2)", "term 't' is not a finite number at x1=1"),
    ("log2(x1 - x2)", "term 't' is not a finite number at x1=2"),
    ("1/(x1 - x2)", "term 't' divides by zero"),
])
def test_sweep_names_a_term_that_is_negative_or_not_finite(expr, message):
    f = with_terms(symbolic.formula("llm.params"), [CustomTerm("t", expr, unit="params")])
    with warnings.catch_warnings(), pytest.raises(SweepError, match=message):
        warnings.simplefilter("ignore", ApproximateWarning)  # sqrt and log2 are computed in float64
        symbolic.sweep(f, {"x1": [3, 2, 1]}, H=768, L=12, V=50000, d_ff=3072, x2=2)
