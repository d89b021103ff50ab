"""The allocation sequence of real PyTorch training steps, recorded on the CPU or meta device, for the allocator replay.

Optional: needs torch (imported inside the functions). A ``TorchDispatchMode`` sees the output of
every ATen operator; each new storage on the module's device is an ``alloc`` event with its
``nbytes``, and a weak reference's callback adds the ``free`` event when the storage is
released. On the meta device nothing is computed, and the events are the CPU's, one for one
(``tests/test_runtime.py`` checks), so full-size models take seconds. The module's
parameters and buffers come first, in ``named_parameters()`` order, as ``module.to("cuda")``
allocates them. Kernel-internal scratch memory that never becomes a tensor is not seen (on a
GPU it would also go through the allocator). ``symbolic.library.caching_allocator.replay`` turns
the events into the peaks the CUDA caching allocator would reach for the same sequence.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

Event = tuple[str, object, int]


class _Recorder:
    """Storages seen so far, each with a weak reference that records its release."""

    def __init__(self, device: Any = None) -> None:
        self.device = device
        self.events: list[Event] = []
        self._refs: dict[int, tuple[weakref.ref, int]] = {}
        self._next = 0

    def track(self, t: Any) -> None:
        if self.device is not None and t.device != self.device:
            return
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        ident = id(st)
        known = self._refs.get(ident)
        if known is not None and known[0]() is st:
            return
        nbytes = st.nbytes()
        if nbytes == 0:
            return
        key = self._next
        self._next += 1

        def release(_: weakref.ref, ident: int = ident, key: int = key) -> None:
            if self._refs.get(ident, (None, None))[1] == key:
                del self._refs[ident]
            self.events.append(("free", key, 0))

        self._refs[ident] = (weakref.ref(st, release), key)
        self.events.append(("alloc", key, nbytes))


def training_trace(module: Any, inputs: Any, loss_fn: Callable[[Any, Any], Any], *, steps: int = 2,
                   optimizer: Callable[[Any], Any] | None = None) -> list[Event]:
    """Events of ``steps`` training steps (zero_grad, forward, loss, backward, optimizer step) of ``module``.

    ``loss_fn(module, inputs)`` returns the loss; ``optimizer(params)`` builds the optimizer
    (default AdamW, PyTorch's defaults for the CPU: single-tensor). Only tensors on the module's
    device count: on the meta device, as on a GPU, AdamW's step counters stay on the CPU.
    """
    import torch
    from torch.utils._pytree import tree_flatten

    from .measure import tracking_mode

    first = next(iter(module.parameters()), None)
    rec = _Recorder(first.device if first is not None else None)
    for p in list(module.parameters()) + list(module.buffers()):
        rec.track(p)
    for t in tree_flatten(inputs)[0]:
        if isinstance(t, torch.Tensor):
            rec.track(t)
    opt = (optimizer or (lambda params: torch.optim.AdamW(params, lr=1e-4)))(module.parameters())

    with tracking_mode(rec.track):
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(module, inputs)
            loss.backward()
            del loss
            opt.step()
    return rec.events
