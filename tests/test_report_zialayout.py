"""symbolic.report.zialayout: ziamath's row layout without the nested measuring pass gives the same SVG, for less work."""

from __future__ import annotations

import pytest

from symbolic.report import zialayout
from symbolic.report.mathsvg import _ziamath, for_ziamath, px

# what reports typeset: long substituted sums with grouped digits, fractions inside stretchy delimiters,
# nested \left( \right), max() of worked-out phases, sub- and superscripts, accents, matrices, cases
FORMULAS = [
    r"M_{\mathrm{peak}} = \max\left(16{,}060{,}522{,}496, 10{,}201{,}104{,}384\right)",
    r"2 \cdot 8{,}030{,}261{,}248 + \frac{8 \cdot 8{,}622{,}081{,}024}{8} + 419430400 + L \left(4 B S^{2} + 14 E\right)",
    r"\frac{4 \left(4 \cdot 8 \cdot 1024^{2} + 14 \cdot 6{,}291{,}456\right)}{\left(t p\right)} + 6 B S V",
    r"\left(\left(\left(\frac{a}{b}\right)\right)\right)^{2} + \left[\frac{\frac{c}{d}}{e}\right]",
    r"( \frac{a}{b} ) + [ \frac{\frac{c}{d}}{e} ] + \left\lfloor\frac{B S}{\left(t p\right)}\right\rfloor",
    r"\sum_{i=1}^{n} \left(\frac{x_i}{\sqrt{y}}\right)^{2} + \hat{\left(\frac{x^2}{y}\right)}",
    r"\overbrace{\left(a+\frac{b}{c}\right)}^{n} + \underbrace{a + \left[\frac{c}{d}\right]}_{k}",
    r"\begin{pmatrix} \frac{a}{b} & c \\ d & \left(e\right) \end{pmatrix}",
    r"x = \begin{cases} \frac{a}{b} & a > 0 \\ \left(c\right) & \text{else}\end{cases}",
    r"a^{\left(\frac{b}{c}\right)^{\left(\frac{d}{e}\right)}} - \frac{\left(a\right)}{\left[\frac{b}{\left(c\right)}\right]}",
    r"{} + \frac{2 B S H L}{t} \cdot \frac{s}{1{,}024} - 4 H V S\max\left(B, 2\right)",
]


@pytest.fixture
def zm():
    module = _ziamath()
    if not zialayout.install(module):
        pytest.skip(f"zialayout applies to ziamath {zialayout.VERSION} only (found {module.__version__})")
    return module


def _draw(zm, latex: str) -> tuple[str, tuple[float, float], float]:
    math = zm.Math.fromlatex(for_ziamath(latex), size=px(10.0), margin=1.0)
    return math.svg(), math.getsize(), math.getyofst()


def _count_nodes(zm, latex: str) -> int:
    """How many math nodes ziamath builds for ``latex`` (every measuring and real pass)."""
    from ziamath.nodes.mnode import Mnode

    made = []
    build = Mnode.fromelement.__func__

    def counting(cls, *args, **kwargs):
        made.append(1)
        return build(cls, *args, **kwargs)

    original = Mnode.__dict__["fromelement"]
    Mnode.fromelement = classmethod(counting)
    try:
        _draw(zm, latex)
    finally:
        Mnode.fromelement = original
    return len(made)


def test_the_same_svg_as_ziamaths_own_layout(zm, monkeypatch):
    from ziamath.nodes.mrow import Mrow

    ours = [_draw(zm, latex) for latex in FORMULAS]
    monkeypatch.setattr(Mrow, "_setup_single_line", Mrow._symbolic_full)
    theirs = [_draw(zm, latex) for latex in FORMULAS]
    for latex, a, b in zip(FORMULAS, ours, theirs):
        assert a == b, latex
    assert len({svg for svg, _, _ in ours}) == len(FORMULAS)  # distinct formulas: the comparison sees each


def test_nested_groups_no_longer_double_the_work(zm, monkeypatch):
    from ziamath.nodes.mrow import Mrow

    ours = [_count_nodes(zm, latex) for latex in FORMULAS]
    monkeypatch.setattr(Mrow, "_setup_single_line", Mrow._symbolic_full)
    theirs = [_count_nodes(zm, latex) for latex in FORMULAS]
    assert all(a <= b for a, b in zip(ours, theirs)) and sum(theirs) > 2 * sum(ours), (ours, theirs)


def test_installing_twice_keeps_one_wrapper(zm):
    from ziamath.nodes.mrow import Mrow

    first = Mrow._setup_single_line
    assert zialayout.install(zm) and Mrow._setup_single_line is first
