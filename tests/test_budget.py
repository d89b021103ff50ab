"""A Budget (issue 26, item 3): a GPU's capacity × a fraction − named reservations is what a plan is
checked against, on the command line (memory --gpu, fit, time, plan), in Python and in reports.

Every capacity here is the catalogue's (``catalogs.gpus``), every total the planner's own; the
expected numbers are computed from them, never copied.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest
from helpers import run

from symbolic import planning
from symbolic.catalogs import GPUS, Budget, make_budget
from symbolic.catalogs.budget import BudgetError
from symbolic.core.units import SizeError, floor_size, parse_size
from symbolic.planning import search
from symbolic.planning import time as ptime
from symbolic.report import adapter, context, plan_section
from symbolic.report import spec as report_spec
from symbolic.report.typeset import Typesetter

L4 = GPUS["l4"].bytes  # nvidia-smi's 23,034 MiB
H100 = GPUS["h100-80gb"].bytes
NINETY = math.floor(L4 * Fraction(9, 10))  # 90 % of an L4, rounded down to whole bytes
SERVE = ("llama-3-8b", "--mode", "infer")


def one_error(code: int, err: str) -> str:
    """The error line of a refused command (exit 2, one line, no traceback)."""
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def _between_batch() -> int:
    """A serving batch whose peak fits all of an L4 but not 90 % of it (found with the planner, not assumed)."""
    for batch in range(1, 64):
        total = planning.plan("llama-3-8b", "infer", batch=batch).total
        if NINETY < total <= L4:
            return batch
    raise AssertionError("no batch between 90 % and all of an L4")


# --- the record -------------------------------------------------------------------------------
def test_ninety_percent_of_an_l4_is_its_catalogue_bytes_times_nine_tenths_rounded_down():
    for fraction in (0.9, "0.9", "9/10", Fraction(9, 10)):  # a float is read as the decimal it prints as
        budget = make_budget("l4", fraction=fraction)
        assert budget.bytes == NINETY and budget.capacity == L4 and budget.gpu is GPUS["l4"]
    assert budget.label == "90% of l4" and not budget.whole
    exact = L4 * Fraction(9, 10)
    assert exact.denominator != 1  # so the rounding is said
    assert any(f"rounded down to {NINETY:,}" in note for note in budget.notes)
    data = json.loads(json.dumps(budget.as_dict()))
    assert data["bytes"] == NINETY and data["capacity_bytes"] == L4 and data["fraction"] == 0.9


def test_reservations_are_subtracted_after_the_fraction_and_named():
    budget = make_budget("h100-80gb", fraction="0.5", reserve={"other-process": "2GiB", "graphs": 1000})
    assert budget.bytes == H100 // 2 - 2 * 2**30 - 1000
    assert [r.name for r in budget.reservations] == ["other-process", "graphs"]
    assert "less other-process 2.00 GiB less graphs" in budget.describe()
    assert budget.label == "50% of h100-80gb less other-process, graphs"


def test_a_reservation_that_is_not_whole_bytes_is_rounded_up_with_a_note():
    budget = make_budget("l4", reserve={"x": "0.1KiB"})  # 102.4 bytes
    assert budget.bytes == L4 - math.ceil(Fraction("0.1") * 1024)
    assert any("rounded up to 103" in note for note in budget.notes)


def test_the_whole_gpu_is_the_default_and_says_nothing_more():
    budget = make_budget("l4")
    assert budget.whole and budget.bytes == L4 and budget.label == "l4" and budget.notes == () and budget.lines() == ()
    assert make_budget("l4", fraction=1, reserve={}) == budget == Budget(GPUS["l4"])


@pytest.mark.parametrize("kwargs, message", [
    ({"fraction": 0}, "above 0 and at most 1"),
    ({"fraction": 1.5}, "above 0 and at most 1"),
    ({"fraction": -0.5}, "above 0 and at most 1"),
    ({"fraction": float("nan")}, "above 0 and at most 1"),
    ({"fraction": True}, "above 0 and at most 1"),
    ({"fraction": "ninety"}, "above 0 and at most 1"),
    ({"reserve": {"x": "-1GiB"}}, "must be a positive size"),
    ({"reserve": {"x": -5}}, "must be a positive size"),
    ({"reserve": {"x": "30GiB"}}, "leave nothing"),
    ({"reserve": {"x": L4}}, "leave nothing"),  # exactly the capacity: no byte left
    ({"reserve": {"a b": "1GiB"}}, "one short word"),
    ({"reserve": [("x", "1GiB"), ("x", "2GiB")]}, "given twice"),
])
def test_bad_budgets_are_one_line_errors(kwargs, message):
    with pytest.raises(BudgetError, match=message) as err:
        make_budget("l4", **kwargs)
    assert "\n" not in str(err.value)


# --- sizes that are not whole bytes ---------------------------------------------------------------
def test_a_capacity_that_is_not_whole_bytes_is_rounded_down_with_a_note():
    exact = Fraction("20.24") * 2**30
    hundredths = exact * 100
    assert hundredths.denominator == 1 and exact.denominator != 1
    shown = f"{int(hundredths) // 100:,}.{int(hundredths) % 100:02d}"
    size, note = floor_size("20.24GiB", flag="GPU")
    assert size == math.floor(exact)
    assert note == f"20.24 GiB is {shown} bytes; rounded down to {math.floor(exact):,}"
    assert planning.gpu("20.24GiB").bytes == math.floor(exact)
    assert make_budget("20.24GiB").notes == (note,)
    with pytest.raises(SizeError, match="not a whole number of bytes"):
        parse_size("20.24GiB")  # solve --budget and the API's strict sizes are unchanged
    with pytest.raises(SizeError, match="less than one byte"):
        floor_size("0.5B")


def test_memory_gpu_takes_a_size_that_is_not_whole_bytes(capsys):
    size = math.floor(Fraction("20.24") * 2**30)
    code, out, err = run(capsys, "memory", *SERVE, "--gpu", "20.24GiB")
    assert code == 0, err
    assert f"on 20.24GiB ({size:,} bytes" in out
    assert "  budget: 20.24 GiB is " in out and f"rounded down to {size:,}" in out
    code, out, err = run(capsys, "memory", *SERVE, "--gpu", "20.24GiB", "--json")
    data = json.loads(out)
    assert data["gpu"]["bytes"] == size and data["headroom_bytes"] == size - data["total_bytes"]
    assert data["budget"]["notes"][0].endswith(f"rounded down to {size:,}")
    code, out, err = run(capsys, "fit", *SERVE, "--gpu", "20.24GiB", "--for", "batch", "--json")
    assert code == 0, err
    assert json.loads(out)["capacity_bytes"] == size


# --- the verdict changes ---------------------------------------------------------------------------
def test_ninety_percent_of_an_l4_changes_the_memory_verdict(capsys):
    batch = str(_between_batch())
    code, out, err = run(capsys, "memory", *SERVE, "--batch", batch, "--gpu", "l4", "--json")
    whole = json.loads(out)
    assert code == 0 and whole["fits"] is True and "budget" not in whole
    code, out, err = run(capsys, "memory", *SERVE, "--batch", batch, "--gpu", "l4", "--gpu-fraction", "0.9", "--json")
    part = json.loads(out)
    assert part["fits"] is False and part["headroom_bytes"] == NINETY - part["total_bytes"]
    assert part["budget"]["bytes"] == NINETY and part["total_bytes"] == whole["total_bytes"]
    code, out, err = run(capsys, "memory", *SERVE, "--batch", batch, "--gpu", "l4", "--gpu-fraction", "0.9")
    assert f"on 90% of l4 ({NINETY:,} bytes" in out and "does NOT fit" in out
    code, _, _ = run(capsys, "memory", *SERVE, "--batch", batch, "--gpu", "l4", "--gpu-fraction", "0.9", "--check")
    assert code == 3  # --check: does not fit


def test_ninety_percent_of_an_l4_lowers_the_largest_batch(capsys):
    whole = planning.fit_batch("llama-3-8b", "l4", "infer")
    part = planning.fit_batch("llama-3-8b", make_budget("l4", fraction=0.9), "infer")
    assert part.value < whole.value
    assert part.plan.total <= NINETY < part.next_total and part.limit.bytes == NINETY and part.gpu is GPUS["l4"]
    code, out, err = run(capsys, "fit", *SERVE, "--gpu", "l4", "--gpu-fraction", "0.9", "--for", "batch", "--json")
    data = json.loads(out)
    assert data["value"] == part.value and data["capacity_bytes"] == NINETY
    assert data["headroom_bytes"] == NINETY - data["total_bytes"]


def test_serving_time_counts_concurrency_within_the_budget():
    whole = ptime.infer_time("llama-3-8b", "l4", mfu=0.5)
    part = ptime.infer_time("llama-3-8b", make_budget("l4", fraction=0.9), mfu=0.5)
    assert part.figures["max_concurrency"] == planning.fit_batch("llama-3-8b", make_budget("l4", fraction=0.9),
                                                                 "infer").value
    assert part.figures["max_concurrency"] < whole.figures["max_concurrency"]
    assert part.figures["decode_seconds"] == whole.figures["decode_seconds"]  # the rates are the L4's
    assert part.as_dict()["budget"]["bytes"] == NINETY and "budget" not in whole.as_dict()


# --- reservations on the command line -------------------------------------------------------------
def test_a_reservation_is_subtracted_and_named_in_the_output(capsys):
    left = H100 - 10 * 2**30
    code, out, err = run(capsys, "memory", "llama-3-8b", "--gpu", "h100-80gb", "--reserve", "other-process=10GiB")
    assert code == 0, err
    assert f"on h100-80gb less other-process ({left:,} bytes" in out
    assert f"  budget: reserved other-process: {10 * 2**30:,} bytes = 10.00 GiB (given on the command line)" in out
    code, out, err = run(capsys, "memory", "llama-3-8b", "--gpu", "h100-80gb", "--reserve", "other-process=10GiB",
                         "--json")
    data = json.loads(out)
    assert data["headroom_bytes"] == left - data["total_bytes"]
    assert data["budget"]["reservations"][0] == {"name": "other-process", "bytes": 10 * 2**30, "human": "10.00 GiB",
                                                 "source": "given on the command line"}
    code, out, err = run(capsys, "fit", "llama-3-8b", "--gpu", "h100-80gb", "--reserve", "a=10GiB", "--reserve",
                         "b=1GiB", "--for", "batch")
    assert code == 0, err
    assert out.startswith(f"llama-3-8b on h100-80gb less a, b ({H100 - 11 * 2**30:,} bytes")
    assert "  budget: reserved a: " in out and "  budget: reserved b: " in out


def test_time_and_plan_check_memory_against_the_budget(capsys):
    code, out, err = run(capsys, "time", "llama-3-8b", "--gpu", "h100-80gb", "--reserve", "other=70GiB", "--mfu", "0.4",
                         "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["fits"] is (data["memory_bytes"] <= H100 - 70 * 2**30) and data["fits"] is False
    assert any(n.startswith("budget: reserved other") for n in data["notes"])
    code, out, err = run(capsys, "plan", "llama-3-8b", "--gpu", "h100-80gb", "--reserve", "other=40GiB", "--mfu", "0.4",
                         "--gpus", "8", "--seq", "2048", "--global-batch", "64", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["layouts"] and all(lay["memory_bytes"] <= H100 - 40 * 2**30 for lay in data["layouts"])
    whole = search.search("llama-3-8b", "h100-80gb", seq=2048, global_batch=64, gpus=8, mfu=0.4)
    assert data["fitting"] < whole.fitting  # 40 GiB less rules some layouts out
    assert data["budget"]["bytes"] == H100 - 40 * 2**30


def test_the_whole_gpu_prints_what_it_printed_before(capsys):
    """--gpu-fraction 1 is the default: the output is the same, byte for byte."""
    for argv in (("memory", *SERVE, "--gpu", "l4"), ("fit", *SERVE, "--gpu", "l4", "--for", "batch"),
                 ("memory", *SERVE, "--gpu", "l4", "--json")):
        _, before, _ = run(capsys, *argv)
        _, after, _ = run(capsys, *argv, "--gpu-fraction", "1")
        assert after == before


@pytest.mark.parametrize("argv, message", [
    (("memory", *SERVE, "--gpu", "l4", "--gpu-fraction", "0"), "above 0 and at most 1"),
    (("memory", *SERVE, "--gpu", "l4", "--gpu-fraction", "1.5"), "above 0 and at most 1"),
    (("fit", *SERVE, "--gpu", "l4", "--gpu-fraction", "1.5", "--for", "batch"), "above 0 and at most 1"),
    (("memory", *SERVE, "--gpu", "l4", "--gpu-fraction", "lots"), "above 0 and at most 1"),
    (("memory", *SERVE, "--gpu", "l4", "--reserve", "x=-1GiB"), "reservation x must be a positive size"),
    (("fit", *SERVE, "--gpu", "l4", "--reserve", "x=-1GiB", "--for", "batch"), "must be a positive size"),
    (("memory", *SERVE, "--gpu", "l4", "--reserve", "x=30GiB"), "leave nothing of l4"),
    (("time", *SERVE, "--gpu", "l4", "--reserve", "x=30GiB", "--mfu", "0.5"), "leave nothing of l4"),
    (("plan", "llama-3-8b", "--gpu", "l4", "--reserve", "x=30GiB", "--mfu", "0.5", "--gpus", "8", "--seq", "2048",
      "--global-batch", "64"), "leave nothing of l4"),
    (("memory", *SERVE, "--gpu", "l4", "--reserve", "x"), "expects NAME=SIZE"),
    (("memory", *SERVE, "--gpu", "l4", "--reserve", "x=2"), "has no unit"),
    (("memory", *SERVE, "--gpu-fraction", "0.9"), "--gpu-fraction needs --gpu"),
    (("memory", *SERVE, "--reserve", "x=1GiB"), "--reserve needs --gpu"),
])
def test_bad_budget_flags_are_one_line_errors(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert message in one_error(code, err) and out == ""


# --- reports ---------------------------------------------------------------------------------------
BASE = {"title": "T", "model": "llama-3-8b", "mode": "infer"}


def test_a_report_gpu_entry_takes_a_fraction_and_reservations():
    spec = report_spec.parse({**BASE, "gpus": ["l4", {"name": "l4", "fraction": 0.9, "reserve": {"other": "1GiB"}},
                                               {"name": "My card", "memory": "20.24GiB"}]})
    gpus = adapter.resolve_gpus(spec)
    assert [(g.name, g.capacity) for g in gpus] == [
        ("l4", L4), ("90% of l4 less other", NINETY - 2**30), ("My card", math.floor(Fraction("20.24") * 2**30))]
    assert gpus[0].notes == () and gpus[1].notes[0].startswith(f"{NINETY - 2**30:,} bytes")
    assert gpus[2].notes[0].startswith("20.24 GiB is ")
    points = context.build(spec, adapter.scenario_for(spec), Typesetter(), charts=False)["summary"]["points"]
    assert any(p.startswith("90% of l4 less other: ") for p in points)
    assert any(p.startswith("My card: 20.24 GiB is ") for p in points)


@pytest.mark.parametrize("entry, message", [
    ({"name": "l4", "fraction": 0}, "above 0 and at most 1"),
    ({"name": "l4", "fraction": "0.9"}, "expected a number"),
    ({"name": "l4", "reserve": {"x": "-1GiB"}}, "must be a positive size"),
    ({"name": "l4", "reserve": "1GiB"}, "expected a table"),
    ({"name": "x"}, "needs both name and memory"),
])
def test_bad_report_budgets_are_one_line_errors(entry, message):
    with pytest.raises(report_spec.ReportSpecError, match=message) as err:
        report_spec.parse({**BASE, "gpus": [entry]})
    assert "\n" not in str(err.value)


def test_a_report_reservation_exceeding_the_gpu_is_an_error():
    spec = report_spec.parse({**BASE, "gpus": [{"name": "l4", "reserve": {"x": "30GiB"}}]})
    with pytest.raises(report_spec.ReportSpecError, match="gpus: l4: .*leave nothing"):
        adapter.resolve_gpus(spec)


def test_the_plan_section_searches_within_the_first_gpus_budget():
    plan = {"gpus": 8, "global_batch": 64, "tokens": 10**10, "mfu": 0.4, "top": 3}
    spec = report_spec.parse({"title": "T", "model": "llama-3-8b", "regime": {"seq": 2048}, "plan": plan,
                              "gpus": [{"name": "h100-80gb", "reserve": {"other": "40GiB"}}]})
    (section,) = plan_section.build(spec, Typesetter(), charts=False)
    found = search.search("llama-3-8b", make_budget("h100-80gb", reserve={"other": "40GiB"}), seq=2048,
                                   global_batch=64, gpus=8, tokens=10**10, mfu=0.4)
    assert f"{found.fitting:,} fit" in section["intro"] and f"budget: {found.limit.describe()}" in section["intro"]
    assert all(lay["memory_bytes"] <= H100 - 40 * 2**30 for lay in found.layouts)


def test_one_gpu_may_be_listed_with_two_budgets_but_not_twice_with_one():
    spec = report_spec.parse({**BASE, "gpus": ["l4", {"name": "l4", "fraction": 0.9}]})
    assert [g.name for g in adapter.resolve_gpus(spec)] == ["l4", "90% of l4"]
    for twice in (["l4", "l4"], [{"name": "l4", "fraction": 0.9}, {"name": "l4", "fraction": 0.9}]):
        with pytest.raises(report_spec.ReportSpecError, match="listed twice"):
            report_spec.parse({**BASE, "gpus": twice})
