"""calc.wrap with a tolerance: widths summed from the terms typeset alone break lines where measuring every run does."""

from __future__ import annotations

import pytest

import symbolic
from symbolic.report import calc, mathsvg
from symbolic.report.typeset import CALC_POINTS, WRAP_TOLERANCE_PX, SvgTypesetter, Typesetter

POINT = dict(H=768, L=12, V=50000, d_ff=3072, B=8, S=1024, D=1024)  # the GPT-2 article-B example's regime


def _measured() -> tuple[list[str], object]:
    seen: list[str] = []

    def measure(latex: str) -> float:
        seen.append(latex)
        return mathsvg.width(latex, CALC_POINTS)

    return seen, measure


@pytest.mark.parametrize("limit", [150.0, 300.0, 470.0])
def test_summed_widths_break_the_calculation_where_full_measurement_does(limit):
    formula = symbolic.formula("llm.peak")
    evaluation = formula.evaluate(POINT)
    every, measure_every = _measured()
    summed, measure_summed = _measured()
    full = calc.lines(formula, evaluation, measure_every, limit)
    fast = calc.lines(formula, evaluation, measure_summed, limit, WRAP_TOLERANCE_PX)
    assert fast == full
    assert sum(1 for line in full if line.label == "") >= 1  # the sums were broken somewhere
    # typesetting work grows with the text typeset: one run per term instead of every growing run
    assert sum(map(len, set(summed))) < sum(map(len, set(every)))


def test_summed_width_of_a_run_is_its_typeset_width():
    pieces = calc.split_sum(r"4 B S H L + 2 \cdot 8{,}030{,}261{,}248 + \frac{B S a}{t} - 6 B S V + L \left(4 B S^{2} + 14 E\right)")
    width = mathsvg.width(pieces[0], CALC_POINTS)
    joined = pieces[0]
    for piece in pieces[1:]:
        width += mathsvg.width(calc._continued(piece), CALC_POINTS) - mathsvg.width("{}", CALC_POINTS)
        joined = calc._join(joined, piece)
        assert width == pytest.approx(mathsvg.width(joined, CALC_POINTS), abs=0.01), joined


def test_only_typesetters_that_measure_use_the_tolerance():
    assert Typesetter.tolerance is None and SvgTypesetter.tolerance == WRAP_TOLERANCE_PX > 0


def test_rows_that_the_summed_widths_let_grow_too_wide_are_wrapped_again():
    """A measure that is not additive (wider than its parts, as glyph overhang could make it): no row
    wider than the limit comes back, and the lines are those of measuring every candidate."""
    pieces = [f"x_{{{i}}}" for i in range(30)]

    def measure(latex: str) -> float:
        return float(len(latex)) ** 1.25

    limit = 60.0
    fast = calc.wrap(pieces, measure, limit, tolerance=0.5)
    assert fast == calc.wrap(pieces, measure, limit)
    rows = [row.removeprefix("{} + ") for row in fast]  # continuation lines carry their sign after "{}"
    assert len(rows) > 1 and all(measure(row) <= limit for row in rows)
    # and the shortcut alone would have let a row grow too wide: the fallback is what keeps it inside
    summed = measure(pieces[0]) + sum(measure(calc._continued(p)) - measure("{}") for p in pieces[1:4])
    assert summed <= limit < measure(" + ".join(pieces[:4]))
