"""Per-process memos are bounded (core/memo.py): a long session does not grow them without end."""

import pytest
import sympy

from symbolic.core.memo import BoundedMemo
from symbolic.core.symbols import B, H, S
from symbolic.library.registry import get as formula
from symbolic.math import compiled
from symbolic.planning import pytorch, search


def test_a_full_memo_forgets_its_oldest_entry():
    memo: BoundedMemo[int, int] = BoundedMemo(3)
    for i in range(10):
        memo[i] = i * i
        assert len(memo) <= 3
    assert dict(memo) == {7: 49, 8: 64, 9: 81}
    memo[8] = 0  # storing a key it holds forgets nothing
    assert dict(memo) == {7: 49, 8: 0, 9: 81}
    with pytest.raises(ValueError):
        BoundedMemo(0)


def test_the_compiled_formula_memo_is_bounded(monkeypatch):
    compiled.clear_cache()
    monkeypatch.setattr(compiled._CACHE, "size", 2)
    keys = ("llm.params", "llm.peak", "llm.activations")
    for key in keys:
        formula(key).compile()
        assert len(compiled._CACHE) <= 2
    assert {k[0] for k in compiled._CACHE} == set(keys[1:])
    compiled.clear_cache()


def test_the_planner_memos_are_bounded(monkeypatch):
    for memo in (pytorch._AT_WIDTHS, search._COMPILED, search._PARTS):
        assert isinstance(memo, BoundedMemo) and memo.size <= 4096
    monkeypatch.setattr(pytorch._AT_WIDTHS, "size", 2)
    monkeypatch.setattr(search._COMPILED, "size", 2)
    pytorch._AT_WIDTHS.clear()
    search._COMPILED.clear()
    for i in range(1, 6):
        expr = B * S * H * i
        assert pytorch._at_widths(expr, {H: sympy.Integer(64)}) == 64 * i * B * S
        search._compiled(expr, "x", "bytes")
        assert len(pytorch._AT_WIDTHS) <= 2 and len(search._COMPILED) <= 2
    pytorch._AT_WIDTHS.clear()
    search._COMPILED.clear()
