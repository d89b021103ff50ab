"""Python's cyclic garbage collector kept out of work that allocates much and makes few cycles.

Both policies leave the collector as they found it, and the output never changes:

- ``frozen_heap``: a report build; the objects alive when it starts are skipped by every pass.
- ``paused``: meta-device model builds (the generic torch path); no pass runs until it ends.

The collector is the process's, so a library call never switches it on its own: the library wraps
its heavy work in ``when_opted_in(policy)``, which applies the policy only inside an ``opted_in()``
block of the caller (the CLI opens one around each command) and leaves the collector alone otherwise.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from contextvars import ContextVar

_opted_in: ContextVar[bool] = ContextVar("symbolic_collector_opted_in", default=False)


@contextlib.contextmanager
def opted_in() -> Iterator[None]:
    """Let the library apply its collector policies inside the block (the caller owns the process)."""
    token = _opted_in.set(True)
    try:
        yield
    finally:
        _opted_in.reset(token)


def when_opted_in(policy: Callable[[], AbstractContextManager[None]]) -> AbstractContextManager[None]:
    """``policy()`` inside a caller's ``opted_in()`` block, else a block that leaves the collector alone."""
    return policy() if _opted_in.get() else contextlib.nullcontext()


_frozen_depth = 0


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects that exist now out of the garbage collector's passes until the block ends.

    A report is built in a process that already holds SymPy, the formula library and, once loaded,
    matplotlib, ziamath and WeasyPrint: some 300,000 long-lived objects that every full collection
    traverses again while ziamath and WeasyPrint allocate millions of short-lived ones (0.9 s of a
    5 s ``symbolic report`` went to the collector). The outermost block collects once (so that
    garbage left by earlier work, e.g. a previous report, is freed rather than frozen), then
    ``gc.freeze()`` moves everything alive to the permanent generation; ``gc.unfreeze()`` puts it
    back when the outermost block ends. A nested block freezes again, so it also skips what was
    made since the outer one began. A caller that disabled the collector or froze objects itself
    is left alone. One thread at a time: the depth is a plain counter (a report build is).
    """
    global _frozen_depth
    if _frozen_depth == 0 and (not gc.isenabled() or gc.get_freeze_count()):
        yield
        return
    if _frozen_depth == 0:
        gc.collect()
    gc.freeze()
    _frozen_depth += 1
    try:
        yield
    finally:
        _frozen_depth -= 1
        if _frozen_depth == 0:
            gc.unfreeze()


_pause_lock = threading.Lock()
_paused = 0  # threads inside paused()
_resume = False  # whether the last one out turns the collector back on (it was on when the first came in)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No collector pass while any thread is inside; the last one out turns it back on if it was on.

    Building a model on the meta device allocates a few hundred thousand objects (modules, their
    dicts, parameters) that reference counting frees; none is cyclic garbage. Yet the allocations
    trigger collections, and each full one traverses every object of a process that holds torch
    and transformers. Measured over a quarter of the coverage survey (49 model types): a quarter
    of its CPU time (44.7 s -> 33.5 s) at the same peak memory. The few cycles made inside (a few
    hundred objects per model type) are collected by the first pass after the block. The switch
    is the process's: other threads run without passes meanwhile too, and a ``gc.disable()`` by
    another thread while one is inside is undone when the last one leaves (if it was on before).
    """
    global _paused, _resume
    with _pause_lock:
        if _paused == 0:
            _resume = gc.isenabled()
            gc.disable()
        _paused += 1
    try:
        yield
    finally:
        with _pause_lock:
            _paused -= 1
            if _paused == 0 and _resume:
                gc.enable()
