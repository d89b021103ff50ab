"""``collector.paused``: no collector pass inside, and the collector left as it was found.

(``collector.frozen_heap``, the report build's policy, is checked in ``test_report_gc.py``.)
"""

import contextlib
import gc
import threading

import pytest

from symbolic.core import collector


@pytest.fixture(autouse=True)
def collector_restored():
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()


def test_paused_turns_the_collector_off_then_on():
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():  # nested: still off, and the inner exit does not turn it on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_turns_it_back_on_after_an_error():
    with pytest.raises(RuntimeError), collector.paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_paused_leaves_a_disabled_collector_disabled():
    gc.disable()
    with collector.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_the_last_thread_out_turns_it_back_on():
    inside, release = threading.Event(), threading.Event()

    def work():
        with collector.paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=work)
    thread.start()
    assert inside.wait(10)
    with collector.paused():
        pass
    assert not gc.isenabled()  # the other thread is still inside
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_no_pass_runs_inside():
    passes = []

    def count(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    gc.callbacks.append(count)
    try:
        with collector.paused():
            junk = [[i] for i in range(100_000)]  # far more allocations than the first generation's threshold
            inside = len(passes)
        del junk
        outside = [[i] for i in range(100_000)]  # the same allocations with the collector on: it runs
        del outside
    finally:
        gc.callbacks.remove(count)
    assert inside == 0 and len(passes) > 0


def test_the_generic_analysis_runs_paused(monkeypatch):
    from symbolic.networks.generic import probes as generic

    seen = []
    monkeypatch.setattr(generic, "torch_available", lambda: True)
    monkeypatch.setattr(generic, "_quiet", contextlib.nullcontext)  # it imports transformers, absent without torch
    monkeypatch.setattr(generic, "_analyse", lambda *args: seen.append(gc.isenabled()) or pytest.fail("stop"))
    with collector.opted_in(), pytest.raises(pytest.fail.Exception):  # as the CLI calls it
        generic.analyse({"model_type": "llama"})
    assert seen == [False] and gc.isenabled()


def test_the_generic_analysis_leaves_the_collector_alone_unless_opted_in(monkeypatch):
    from symbolic.networks.generic import probes as generic

    seen = []
    monkeypatch.setattr(generic, "torch_available", lambda: True)
    monkeypatch.setattr(generic, "_quiet", contextlib.nullcontext)
    monkeypatch.setattr(generic, "_analyse", lambda *args: seen.append(gc.isenabled()) or pytest.fail("stop"))
    with pytest.raises(pytest.fail.Exception):
        generic.analyse({"model_type": "llama"})
    assert seen == [True] and gc.isenabled()


def test_when_opted_in_applies_the_policy_only_inside_opted_in():
    with collector.when_opted_in(collector.paused):
        assert gc.isenabled()
    with collector.opted_in():
        with collector.when_opted_in(collector.paused):
            assert not gc.isenabled()
        with pytest.raises(RuntimeError), collector.opted_in():
            raise RuntimeError("boom")
        with collector.when_opted_in(collector.paused):  # a failed inner block does not end the outer one
            assert not gc.isenabled()
    with collector.when_opted_in(collector.paused):
        assert gc.isenabled()
    assert gc.isenabled()


def test_an_opt_in_does_not_reach_another_thread():
    seen = []

    def work():
        with collector.when_opted_in(collector.paused):
            seen.append(gc.isenabled())

    with collector.opted_in():
        thread = threading.Thread(target=work)
        thread.start()
        thread.join(10)
    assert seen == [True]
