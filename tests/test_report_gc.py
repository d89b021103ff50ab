"""The report build keeps pre-existing objects out of the garbage collector's passes, and leaves the
collector as it found it (render.frozen_heap)."""

import gc
import weakref

import pytest

from symbolic.report import Outputs, ReportSpecError, build, render


@pytest.fixture(autouse=True)
def collector_restored():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()


def test_frozen_heap_freezes_then_unfreezes():
    assert gc.get_freeze_count() == 0
    with render.frozen_heap():
        outer = gc.get_freeze_count()
        assert outer > 0
        kept = [[i] for i in range(1000)]  # made inside the block: frozen again by a nested block
        with render.frozen_heap():
            assert gc.get_freeze_count() >= outer + len(kept)
        assert gc.get_freeze_count() > 0  # only the outermost block unfreezes
    assert gc.get_freeze_count() == 0


def test_frozen_heap_unfreezes_on_error():
    with pytest.raises(RuntimeError), render.frozen_heap():
        raise RuntimeError("boom")
    assert gc.get_freeze_count() == 0


def test_frozen_heap_leaves_a_callers_freeze_and_a_disabled_collector_alone():
    gc.freeze()
    frozen = gc.get_freeze_count()
    # frozen objects that other threads (a test worker's) release drop out of the count, so the
    # count may shrink a little; what must not happen is a second freeze (more) or an unfreeze (0)
    with render.frozen_heap():
        assert frozen - 1000 < gc.get_freeze_count() <= frozen
    assert frozen - 1000 < gc.get_freeze_count() <= frozen  # not unfrozen behind the caller's back
    gc.unfreeze()
    gc.disable()
    with render.frozen_heap():
        assert gc.get_freeze_count() == 0
    assert not gc.isenabled()


def test_build_leaves_the_collector_as_found(tmp_path):
    build(None, Outputs(tex=tmp_path / "r.tex"))
    assert gc.isenabled() and gc.get_freeze_count() == 0
    spec = tmp_path / "bad.toml"
    spec.write_text('title = "x"\nmodel = "llama-3-8b"\nmode = "train"\n[values]\nH = 8\n', encoding="utf-8")
    with pytest.raises(ReportSpecError):
        build(spec, Outputs(tex=tmp_path / "bad.tex"))  # fails inside the frozen block (the planner's scenario)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_frozen_heap_does_not_keep_garbage_alive():
    class Node:
        pass

    def cycle():
        node = Node()
        node.me = node  # unreachable once returned: only the collector frees it
        return weakref.ref(node)

    with render.frozen_heap():
        ref = cycle()
        with render.frozen_heap():  # freezes the garbage too
            pass
    assert gc.get_freeze_count() == 0
    with render.frozen_heap():  # the next outermost block collects before it freezes
        assert ref() is None


def _freeze_count_inside_build(monkeypatch, run):
    """The freeze count while a build computes (its scenario is the first step inside the block)."""
    from symbolic.core.errors import UserError
    from symbolic.report import adapter

    seen = []

    def scenario_for(spec):
        seen.append(gc.get_freeze_count())
        raise UserError("stop")

    monkeypatch.setattr(adapter, "scenario_for", scenario_for)
    run()
    return seen


def test_a_library_build_leaves_the_collector_alone(monkeypatch, tmp_path):
    from symbolic.core.errors import UserError

    def run():
        with pytest.raises(UserError):
            build(None, Outputs(tex=tmp_path / "r.tex"))

    assert _freeze_count_inside_build(monkeypatch, run) == [0]


def test_a_build_opted_in_freezes_the_heap(monkeypatch, tmp_path):
    from symbolic.core import collector
    from symbolic.core.errors import UserError

    def run():
        with collector.opted_in(), pytest.raises(UserError):
            build(None, Outputs(tex=tmp_path / "r.tex"))

    seen = _freeze_count_inside_build(monkeypatch, run)
    assert len(seen) == 1 and seen[0] > 0 and gc.get_freeze_count() == 0


def test_the_cli_report_opts_in(monkeypatch, tmp_path):
    from symbolic import cli

    seen = _freeze_count_inside_build(monkeypatch, lambda: cli.main(["report", "--tex", str(tmp_path / "r.tex")]))
    assert len(seen) == 1 and seen[0] > 0 and gc.get_freeze_count() == 0
