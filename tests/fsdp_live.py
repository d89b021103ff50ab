"""Live tensor bytes of one FSDP2 rank through a training step, as the GPU's allocator would be asked for them.

Used by the FSDP2 step children (``fsdp_step_child.py``, ``module_fsdp_child.py``). The dispatch method of
``measure.step_peak`` with what FSDP2 adds: a DTensor counts its local shard's storage (each storage once), and
the storages FSDP2 frees and re-allocates in place (``UntypedStorage.resize_`` in ``_fsdp_param.alloc_storage``
and ``free_storage``: the all-gather outputs, the unsharded parameters) count at their current size. What a
collective allocates inside the backend (gloo's own copies; NCCL allocates nothing through the caching
allocator) is not an operator's output and is not counted. torch is imported inside the functions.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

# Each rank's phases are the least over three measured steps: a tensor handed to a gloo collective is released when
# gloo's own thread drops it, at a moment that varies from run to run (one run in about five read up to 5 % more on
# one rank, never less: a release can come late, never early), so the least reading is FSDP2's own lifetimes.
MEASURED = 3


class Live:
    """Live bytes, each phase's peak, and ``snapshot()`` taken at each phase's peak."""

    def __init__(self, snapshot: Callable[[], dict] | None = None) -> None:
        self.current = 0
        self.phase = "setup"
        self.peaks: dict[str, int] = {}
        self.at_peak: dict[str, dict] = {}
        self._snapshot = snapshot
        self._sizes: dict[int, int] = {}
        self._refs: dict[int, weakref.ref] = {}
        self.paused = False  # inside a collective: what the backend allocates is its own

    def enter(self, phase: str) -> None:
        """Start ``phase``: what is alive now counts towards its peak."""
        self.phase = phase
        self._note()

    def _note(self) -> None:
        if self.current > self.peaks.get(self.phase, -1):
            self.peaks[self.phase] = self.current
            if self._snapshot is not None:
                self.at_peak[self.phase] = self._snapshot()

    def track(self, t: Any) -> None:
        """Count ``t``'s storage (a DTensor's local shard's) from now until it dies."""
        t = getattr(t, "_local_tensor", t)
        if self.paused or t.device.type == "meta":
            return
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        ident = id(st)
        if ident in self._refs and self._refs[ident]() is st:
            return
        nbytes = st.nbytes()
        if nbytes == 0:
            return

        def release(_: weakref.ref, ident: int = ident) -> None:
            self._refs.pop(ident, None)
            self.current -= self._sizes.pop(ident, 0)

        self._refs[ident] = weakref.ref(st, release)
        self._sizes[ident] = nbytes
        self.current += nbytes
        self._note()

    def resized(self, t: Any) -> None:
        """``t``'s storage was resized in place: count its new size."""
        st = t.untyped_storage()
        ident = id(st)
        if ident in self._refs and self._refs[ident]() is st:
            self.current += st.nbytes() - self._sizes[ident]
            self._sizes[ident] = st.nbytes()
            self._note()
        else:
            self.track(t)


COLLECTIVES = ("all_gather_single", "all_gather_into_tensor", "reduce_scatter_single", "reduce_scatter_tensor", "all_reduce")


def _outside(live: Live, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` with tracking paused: gloo allocates full-size copies of its buffers (a reduce-scatter's input, an
    all-gather's output) that NCCL does not; the buffers FSDP2 passes in are tracked where FSDP2 allocates them."""
    def paused(*args: Any, **kwargs: Any) -> Any:
        live.paused = True
        try:
            return call(*args, **kwargs)
        finally:
            live.paused = False
    return paused


@contextmanager
def counting(live: Live) -> Iterator[None]:
    """Every operator output tracked, and FSDP2's in-place storage resizes followed, while inside.

    Python's cyclic collector is off inside (after one collection): a collection at an arbitrary moment of the
    step made one rank read one block's gradient storage more, about one run in five; with it off every run
    reads the same bytes."""
    import gc

    import torch.distributed as dist
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group

    from symbolic.measured.measure import tracking_mode

    alloc, free = _fsdp_param.alloc_storage, _fsdp_param.free_storage

    def alloc_counted(tensor: Any) -> None:
        alloc(tensor)
        live.resized(tensor)

    def free_counted(tensor: Any) -> None:
        free(tensor)
        live.resized(tensor)

    collectives = {name: getattr(dist, name) for name in COLLECTIVES}
    _fsdp_param.alloc_storage = _fsdp_param_group.alloc_storage = alloc_counted
    _fsdp_param.free_storage = free_counted
    for name, call in collectives.items():
        setattr(dist, name, _outside(live, call))
    gc.collect()
    gc.disable()
    try:
        with tracking_mode(live.track):
            yield
    finally:
        gc.enable()
        _fsdp_param.alloc_storage = _fsdp_param_group.alloc_storage = alloc
        _fsdp_param.free_storage = free
        for name, call in collectives.items():
            setattr(dist, name, call)


def state(model: Any, optimizer: Any, extra: Iterable[Any] = ()) -> list[Any]:
    """What is alive before a step: parameters (local shards), buffers, gradients, optimizer states, inputs."""
    found = [*model.parameters(), *model.buffers(), *extra]
    found += [p.grad for p in model.parameters() if p.grad is not None]
    for values in optimizer.state.values():
        found += [v for v in values.values() if hasattr(v, "untyped_storage")]
    return found


def sharded_grad_bytes(groups: Iterable[Any]) -> int:
    """Bytes of the sharded gradients of FSDP2's parameter ``groups`` alive now (each storage once: one group's are
    views of its flat reduce-scatter output). Read from the sharded parameters: between a group's all-gather and
    its reshard the module holds the unsharded ones instead."""
    seen: dict[int, int] = {}
    for group in groups:
        for fp in group.fsdp_params:
            grad = fp.sharded_param.grad
            if grad is not None:
                st = getattr(grad, "_local_tensor", grad).untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def least_peaks(step: Callable[[Callable[[str], None]], None], model: Any, optimizer: Any, extra: Iterable[Any] = (),
                snapshot: Callable[[], dict] | None = None, runs: int = MEASURED) -> tuple[dict[str, int], dict, int]:
    """Each phase's least peak over ``runs`` measured steps (``step(enter)``, gradients set to None before each),
    ``snapshot()`` at that peak, and the bytes alive when the first measured step starts."""
    peaks: dict[str, int] = {}
    at_peak: dict[str, dict] = {}
    start = -1
    for _ in range(runs):
        optimizer.zero_grad(set_to_none=True)
        live = Live(snapshot)
        for t in state(model, optimizer, extra):
            live.track(t)
        start = live.current if start < 0 else start
        with counting(live):
            step(live.enter)
        for phase, peak in live.peaks.items():
            if phase != "setup" and peak < peaks.get(phase, peak + 1):
                peaks[phase] = peak
                if phase in live.at_peak:
                    at_peak[phase] = live.at_peak[phase]
    return peaks, at_peak, start
