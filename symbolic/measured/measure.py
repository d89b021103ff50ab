"""Measured truth: what a real PyTorch training step keeps in memory.

Optional: needs the ``torch`` extra (``pip install 'symbolic-memory[torch]'``). ``torch`` is imported
inside the functions, so ``import symbolic`` (and this module) never imports it.

Three measurements of one module, one input and one loss function:

``count_parameters``
    ``sum(p.numel())`` over ``module.parameters()``, which yields a shared (tied) tensor once.

``saved_tensors``
    The bytes autograd saves for backward in one forward pass, seen through
    ``torch.autograd.graph.saved_tensors_hooks``: the pack hook receives every tensor an
    autograd node saves (``ctx.save_for_backward`` and every ``SavedVariable`` of a built-in
    op). Each *storage* is counted once, with its full ``nbytes`` (a saved view keeps its whole
    storage alive; three views of one QKV projection count once). Storages of the module's
    parameters and buffers are excluded (they are model state, not activations). Counted: the
    inputs an op keeps (token ids, the input ``x`` of the first ``Linear``), masks, softmax
    outputs, the loss's saved tensors. Not counted: Python numbers saved as 0-d "wrapped number"
    tensors (autograd stores them without calling the hook: a few bytes per op), tensors kept
    in ``ctx`` attributes of custom ``autograd.Function``s instead of ``save_for_backward``,
    and anything that is alive but not saved (the logits object a caller still holds, say).
    Each storage is attributed to the innermost module running when it was first saved.

``step_peak``
    The peak memory of whole training steps (``zero_grad(set_to_none=True)``, forward, loss,
    ``backward()``, ``optimizer.step()``), taken over ``steps`` steps so that lazily created
    optimizer states are present. The output of the forward pass is dropped once the loss is
    computed (as Hugging Face's ``Trainer`` does), so logits not saved for backward are freed
    before backward. Methods:

    * ``"cuda"`` (CUDA devices): ``torch.cuda.max_memory_allocated`` after
      ``reset_peak_memory_stats``. Counts every block the caching allocator hands out, rounded
      up to its 512-byte granularity, including kernel workspaces that go through the allocator
      (cuBLAS workspace, attention scratch). Misses memory the allocator reserved but did not
      hand out (fragmentation, ``memory_reserved``), the CUDA context and library handles,
      and anything allocated with ``cudaMalloc`` directly.
    * ``"dispatch"`` (default on the CPU; works on any device): a ``TorchDispatchMode`` that sees the output of every
      ATen operator, registers each new storage with a weak reference and adds its ``nbytes``;
      the weak reference's callback subtracts them when the storage is freed. Before the step it
      registers what already exists: parameters, buffers, gradients, optimizer states and the
      input tensors. Counts exact tensor bytes, no allocator rounding. Misses scratch memory a
      kernel allocates and frees internally without returning it (e.g. per-thread buffers of the
      CPU flash-attention kernel, oneDNN/MKL workspaces), memory outside tensors, and
      ``UntypedStorage.resize_`` (never used by a plain training step).
    * ``"profiler"`` (CPU): the allocation and free events that ``torch.profiler`` records with
      ``profile_memory=True`` for c10's CPU allocator, summed in time order on top of the
      bytes registered before the step. Unlike ``"dispatch"`` it also sees kernel-internal
      allocations made through c10's allocator; it is slower, and events closer together than
      the profiler's clock resolution keep their recorded order. It also sees the buffers inductor's
      generated code allocates (``empty_strided_cpu``, below the dispatcher, which ``"dispatch"``
      misses): each phase is a ``record_function`` range, ``StepPeak.phases`` its peaks, and
      ``StepPeak.tensor_phases`` the same with each outermost ATen call's events folded into their
      sum at its end (its own scratch left out, as ``"dispatch"`` leaves it out).
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import formats
from ..core.errors import UnknownNameError, UserError
from ..networks import torch_env
from ..networks.module.probe import running_modules

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    import torch

LossFn = Callable[[Any], "torch.Tensor"]
OptimizerFactory = Callable[[Iterable["torch.nn.Parameter"]], "torch.optim.Optimizer"]

METHODS = ("cuda", "dispatch", "profiler")
PHASES = ("setup", "zero_grad", "forward", "backward", "optimizer")
AUTOCAST_DTYPES = ("bf16", "fp16")  # what torch.autocast computes in on a GPU


class TorchMissing(ImportError):
    """torch (the ``symbolic-memory[torch]`` extra) is not installed."""


def require_torch() -> Any:
    """The torch module, or a clear error saying how to install it."""
    try:
        import torch
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise TorchMissing("measuring needs torch: pip install 'symbolic-memory[torch]'") from err
    torch_env.ready()  # an installed torchvision importable before transformers imports it
    return torch


# --- results -------------------------------------------------------------------------------
@dataclass(frozen=True)
class SavedTensors:
    """Bytes saved for backward by one forward pass, each storage once."""

    total_bytes: int
    storages: int
    by_module: dict[str, int] = field(default_factory=dict)
    by_dtype: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {"total_bytes": self.total_bytes, "storages": self.storages,
                "by_module": dict(self.by_module), "by_dtype": dict(self.by_dtype)}


@dataclass(frozen=True)
class StepPeak:
    """Peak memory of whole training steps on one device."""

    device: str
    method: str
    baseline_bytes: int
    peak_bytes: int
    per_step: tuple[int, ...]
    phase: str
    steps: int
    phases: dict[str, int] = field(default_factory=dict)
    alive: dict[str, tuple[tuple[int, str, tuple[int, ...]], ...]] = field(default_factory=dict, compare=False)
    tensor_phases: dict[str, int] = field(default_factory=dict)  # profiler: each ATen call's scratch left out

    def as_dict(self) -> dict[str, object]:
        return {"device": self.device, "method": self.method, "baseline_bytes": self.baseline_bytes,
                "peak_bytes": self.peak_bytes, "per_step": list(self.per_step), "phase": self.phase,
                "steps": self.steps, "phases": dict(self.phases), "tensor_phases": dict(self.tensor_phases)}


@dataclass(frozen=True)
class Measurement:
    """Everything ``measure`` finds for one module, input and loss."""

    parameters: int
    parameter_bytes: int
    saved: SavedTensors
    peak: StepPeak | None
    torch_version: str

    def as_dict(self) -> dict[str, object]:
        return {"parameters": self.parameters, "parameter_bytes": self.parameter_bytes,
                "saved": self.saved.as_dict(), "peak": None if self.peak is None else self.peak.as_dict(),
                "torch_version": self.torch_version}


# --- helpers -------------------------------------------------------------------------------
def _call(module: Any, inputs: Any) -> Any:
    """module(*inputs), module(**inputs) or module(inputs)."""
    if isinstance(inputs, Mapping):
        return module(**inputs)
    if isinstance(inputs, tuple):
        return module(*inputs)
    return module(inputs)


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a (nested) tuple, list or mapping."""
    torch = require_torch()
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, (tuple, list)):
        for value in obj:
            yield from _tensors(value)


def _storage_key(t: torch.Tensor) -> tuple[int, int]:
    st = t.untyped_storage()
    return st.data_ptr(), st.nbytes()


def _state_storages(module: Any) -> set[int]:
    """data_ptrs of the storages of a module's parameters and buffers."""
    out = set()
    for t in list(module.parameters()) + list(module.buffers()):
        if t.device.type != "meta":
            out.add(t.untyped_storage().data_ptr())
    return out


def count_parameters(module: Any) -> int:
    """Exact parameter count; ``parameters()`` yields a tied tensor once."""
    return sum(p.numel() for p in module.parameters())


def parameter_bytes(module: Any) -> int:
    """Bytes of the parameters (each tensor once)."""
    return sum(p.numel() * p.element_size() for p in module.parameters())


# --- saved tensors -------------------------------------------------------------------------
def saved_tensors(module: Any, inputs: Any, loss_fn: LossFn, *, autocast: str | None = None) -> SavedTensors:
    """Bytes saved for backward by one forward pass and loss (see the module docstring).

    The module is used as it is (call ``module.train()`` first for training behaviour such as
    dropout). The autograd graph is dropped afterwards; no backward pass runs. ``autocast``:
    as in ``step_peak`` (the 16-bit weight copies autocast makes are saved tensors, counted).
    """
    torch = require_torch()
    excluded = _state_storages(module)
    seen: dict[tuple[int, int], tuple[str, str]] = {}

    with running_modules(module, qualified=False) as stack:
        def pack(t: torch.Tensor) -> torch.Tensor:
            try:
                st = t.untyped_storage()
            except (RuntimeError, NotImplementedError):  # sparse or wrapper tensors: no single storage
                return t
            ptr = st.data_ptr()
            if ptr not in excluded:
                key = (ptr, st.nbytes())
                if key not in seen:
                    seen[key] = (stack[-1] if stack else "(top level)", str(t.dtype).replace("torch.", ""))
            return t

        device = next(module.parameters()).device
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _autocast(torch, device, autocast):
            loss = loss_fn(_call(module, inputs))
    del loss
    by_module: dict[str, int] = defaultdict(int)
    by_dtype: dict[str, int] = defaultdict(int)
    for (_, nbytes), (mod, dtype) in seen.items():
        by_module[mod] += nbytes
        by_dtype[dtype] += nbytes
    return SavedTensors(sum(n for _, n in seen), len(seen), dict(sorted(by_module.items())),
                        dict(sorted(by_dtype.items())))


# --- live-storage tracking on the CPU ------------------------------------------------------
class _LiveBytes:
    """Live tensor bytes, their peak in each phase, with weak references that notice when a storage dies.

    ``detail``: also keep (nbytes, dtype, shape) of every live storage and, at each phase's peak,
    a snapshot of them (what is alive at that moment; slow, for finding terms).
    """

    def __init__(self, detail: bool = False) -> None:
        self.current = 0
        self.peak = 0
        self._phase = "setup"
        self.peak_phase = "setup"
        self.phase_peaks: dict[str, int] = {}
        self.detail = detail
        self.alive: dict[str, tuple[tuple[int, str, tuple[int, ...]], ...]] = {}
        self._info: dict[int, tuple[int, str, tuple[int, ...]]] = {}
        self._refs: dict[int, weakref.ref] = {}

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, name: str) -> None:
        """Enter a phase: what is alive at its start counts towards its peak."""
        self._phase = name
        self._note_phase_peak()

    def _note_phase_peak(self) -> None:
        if self.current > self.phase_peaks.get(self._phase, -1):
            self.phase_peaks[self._phase] = self.current
            if self.detail:
                self.alive[self._phase] = tuple(sorted(self._info.values(), reverse=True))

    def track(self, t: Any) -> None:
        if t.device.type == "meta":
            return
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse or wrapper tensors: no single storage
            return
        ident = id(st)
        if ident in self._refs and self._refs[ident]() is st:
            return
        nbytes = st.nbytes()
        if nbytes == 0:
            return

        def release(_: weakref.ref, ident: int = ident, nbytes: int = nbytes) -> None:
            self._refs.pop(ident, None)
            self._info.pop(ident, None)
            self.current -= nbytes

        self._refs[ident] = weakref.ref(st, release)
        if self.detail:
            self._info[ident] = (nbytes, str(t.dtype).replace("torch.", ""), tuple(t.shape))
        self.current += nbytes
        if self.current > self.peak:
            self.peak = self.current
            self.peak_phase = self._phase
        self._note_phase_peak()

    def reset_peak(self) -> None:
        self.peak = self.current
        self.peak_phase = self._phase


def tracking_mode(track: Callable[[Any], None]) -> Any:
    """A TorchDispatchMode that hands every tensor an ATen operator outputs to ``track``."""
    torch = require_torch()
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    tensor = torch.Tensor

    class _Track(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            if isinstance(out, tensor):  # most operators: one tensor, no tree to flatten
                track(out)
                return out
            for t in tree_flatten(out)[0]:
                if isinstance(t, tensor):
                    track(t)
            return out

    return _Track()


def _existing_state(module: Any, optimizer: Any, inputs: Any) -> list[Any]:
    """Tensors alive before a step: parameters, buffers, gradients, optimizer states, inputs (and
    what the loss function holds: its ``held`` attribute, e.g. class targets)."""
    found = list(module.parameters()) + list(module.buffers())
    found += [p.grad for p in module.parameters() if p.grad is not None]
    for state in optimizer.state.values():
        found += [v for v in state.values() if hasattr(v, "untyped_storage")]
    found += list(_tensors(inputs))
    return found


def _held(loss_fn: Any) -> tuple[Any, ...]:
    """Tensors a loss function holds (its ``held`` attribute), alive through the step like the inputs."""
    return tuple(getattr(loss_fn, "held", ()))


def _default_optimizer(params: Iterable[Any]) -> Any:
    torch = require_torch()
    return torch.optim.AdamW(params, lr=1e-4)


def _autocast(torch: Any, device: Any, autocast: str | None) -> Any:
    """``torch.autocast`` for the device in ``autocast``'s dtype ("bf16", "fp16"), or a no-op."""
    from contextlib import nullcontext

    if autocast is None:
        return nullcontext()
    if autocast not in AUTOCAST_DTYPES:
        raise UnknownNameError(f"unknown autocast dtype {autocast!r}; choose from {', '.join(AUTOCAST_DTYPES)}")
    return torch.autocast(device_type=device.type, dtype=formats.torch_dtype(torch, autocast))


def step_peak(module: Any, inputs: Any, loss_fn: LossFn, *, optimizer: OptimizerFactory | None = None,
              steps: int = 2, method: str | None = None, autocast: str | None = None,
              detail: bool = False, accumulate: int = 1, in_backward: bool = False) -> StepPeak:
    """Peak memory of ``steps`` whole training steps (see the module docstring for methods).

    ``optimizer`` builds the optimizer from the parameters (default: AdamW, lr 1e-4, PyTorch's
    default implementation for the device). The peak is the largest over the steps, counted
    from zero: parameters, buffers, inputs, gradients and optimizer states included. Each phase
    (``PHASES``: zero_grad, forward with the loss, backward, optimizer) gets its own peak, the
    largest over the steps, in ``StepPeak.phases``. ``autocast`` ("bf16", "fp16") runs the
    forward pass and the loss under ``torch.autocast``, backward and the optimizer outside it,
    as mixed-precision training does. ``detail`` (dispatch method): ``StepPeak.alive`` lists
    the storages alive at each phase's peak. ``accumulate`` K: gradient accumulation, K forward
    and backward passes of ``inputs`` (loss / K) per optimizer step; each phase's peak is the
    largest over the micro-batches. ``in_backward``: the optimizer step fused into backward as
    torchtune's ``optimizer_in_bwd`` does it: one optimizer per parameter, stepped and zeroed in a
    post-accumulate-grad hook; the optimizer phase then runs nothing.
    """
    torch = require_torch()
    if steps < 1:
        raise UserError("steps must be at least 1")
    device = next(module.parameters()).device
    method = method or ("cuda" if device.type == "cuda" else "dispatch")
    if method not in METHODS:
        raise UnknownNameError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if (method == "cuda" and device.type != "cuda") or (method == "profiler" and device.type != "cpu"):
        raise UserError(f"method {method!r} does not measure a module on {device.type}")
    _autocast(torch, device, autocast)  # checks the name before anything runs
    if accumulate < 1 or (in_backward and accumulate > 1):
        raise UserError("accumulate must be at least 1, and 1 with the optimizer in backward")
    module.zero_grad(set_to_none=True)
    factory = optimizer or _default_optimizer
    trainable = [p for p in module.parameters() if p.requires_grad]
    opt = _InBackward(factory, trainable) if in_backward else factory(trainable)

    def one_step(live: Any) -> None:  # a _LiveBytes, a _CudaPhases or None
        def phase(name: str) -> None:
            if live is not None:
                live.phase = name

        phase("zero_grad")
        opt.zero_grad(set_to_none=True)
        for _ in range(accumulate):
            phase("forward")
            with _autocast(torch, device, autocast):
                loss = loss_fn(_call(module, inputs))
            if accumulate > 1:
                loss = loss / accumulate
            phase("backward")
            loss.backward()
            del loss
        phase("optimizer")
        opt.step()

    try:
        return _measured_steps(torch, device, module, opt, inputs, loss_fn, one_step, steps, method, detail)
    finally:
        if in_backward:
            opt.remove()


def _measured_steps(torch: Any, device: Any, module: Any, opt: Any, inputs: Any, loss_fn: LossFn,
                    one_step: Callable[[Any], None], steps: int, method: str, detail: bool) -> StepPeak:
    """``steps`` calls of ``one_step`` measured by ``method`` (see ``step_peak``)."""
    if method == "cuda":
        return _cuda_peak(torch, device, module, opt, inputs, one_step, steps)
    if method == "profiler":
        return _profiler_peak(torch, module, opt, (inputs, _held(loss_fn)), one_step, steps)
    live = _LiveBytes(detail)
    for t in _existing_state(module, opt, (inputs, _held(loss_fn))):
        live.track(t)
    baseline = live.current
    per_step: list[int] = []
    phase = "setup"
    best = 0
    with tracking_mode(live.track):  # the storage of every operator output
        for _ in range(steps):
            live.reset_peak()
            one_step(live)
            per_step.append(live.peak)
            if live.peak > best:
                best, phase = live.peak, live.peak_phase
    phases = {k: v for k, v in live.phase_peaks.items() if k != "setup"}
    return StepPeak(str(device), "dispatch", baseline, best, tuple(per_step), phase, steps, phases, live.alive)


def forward_peak(module: Any, inputs: Any) -> int:
    """Peak live bytes of one inference forward under ``torch.no_grad()`` on the CPU (dispatch method).

    Counted from zero: parameters, buffers and inputs, then every operator output while it is
    alive (the output the forward returns included), as ``step_peak`` counts a training step.
    """
    torch = require_torch()
    live = _LiveBytes()
    held = list(module.parameters()) + list(module.buffers()) + list(_tensors(inputs))
    for t in held:
        live.track(t)
    with torch.no_grad(), tracking_mode(live.track):
        out = _call(module, inputs)
    del out
    return live.peak


class _InBackward:
    """torchtune's optimizer in backward: one optimizer per parameter, stepped and zeroed as its gradient
    is accumulated (``register_optim_in_bwd_hooks``, torchtune/training/memory.py); the whole's ``step``
    and ``zero_grad`` do nothing, ``state`` is every optimizer's."""

    def __init__(self, factory: OptimizerFactory, params: list[Any]) -> None:
        self.optimizers = {p: factory([p]) for p in params}

        def optim_step(param: Any) -> None:
            self.optimizers[param].step()
            self.optimizers[param].zero_grad(set_to_none=True)

        self._handles = [p.register_post_accumulate_grad_hook(optim_step) for p in params]

    @property
    def state(self) -> dict[Any, Any]:
        return {p: s for o in self.optimizers.values() for p, s in o.state.items()}

    def step(self) -> None:
        """Nothing: each parameter was stepped in backward."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing: each gradient was freed after its step."""

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


class _CudaPhases:
    """Reads and resets the allocator's peak at each phase boundary, so the peak has a phase."""

    def __init__(self, torch: Any, device: Any) -> None:
        self._torch, self._device = torch, device
        self._phase = "setup"
        self.peak, self.peak_phase = 0, "setup"
        self.phase_peaks: dict[str, int] = {}

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, name: str) -> None:
        self.close()
        self._phase = name

    def close(self) -> None:
        cuda = self._torch.cuda
        cuda.synchronize(self._device)
        value = cuda.max_memory_allocated(self._device)
        if value > self.peak:
            self.peak, self.peak_phase = value, self._phase
        if value > self.phase_peaks.get(self._phase, -1):
            self.phase_peaks[self._phase] = value
        cuda.reset_peak_memory_stats(self._device)


def _cuda_peak(torch: Any, device: Any, module: Any, opt: Any, inputs: Any,
               one_step: Callable[[Any], None], steps: int) -> StepPeak:
    torch.cuda.synchronize(device)
    baseline = torch.cuda.memory_allocated(device)
    per_step = []
    best, phase = 0, "setup"
    phases: dict[str, int] = {}
    for _ in range(steps):
        torch.cuda.reset_peak_memory_stats(device)
        tracker = _CudaPhases(torch, device)
        one_step(tracker)
        tracker.close()
        per_step.append(tracker.peak)
        if tracker.peak > best:
            best, phase = tracker.peak, tracker.peak_phase
        for name, value in tracker.phase_peaks.items():
            if name != "setup":
                phases[name] = max(phases.get(name, 0), value)
    return StepPeak(str(device), "cuda", baseline, best, tuple(per_step), phase, steps, phases)


class _ProfilerPhases:
    """Marks each phase as a ``record_function`` range, so that the profiler's memory events get a phase."""

    def __init__(self) -> None:
        self._range: Any = None

    @property
    def phase(self) -> str:
        return "" if self._range is None else self._range.name[len(PHASE_MARK):]

    @phase.setter
    def phase(self, name: str) -> None:
        from torch.profiler import record_function

        self.close()
        self._range = record_function(PHASE_MARK + name)
        self._range.__enter__()

    def close(self) -> None:
        """End the current phase's range."""
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None


PHASE_MARK = "symbolic.phase:"


def _phase_of(ranges: list[tuple[int, int, str]], when: int) -> str:
    """The phase whose marked range holds ``when`` (``setup`` outside every range)."""
    for start, end, name in ranges:
        if start <= when <= end:
            return name
    return "setup"


def _outermost(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges no other range holds, in time order."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges, key=lambda r: (r[0], -r[1])):
        if out and start <= out[-1][1]:
            continue
        out.append((start, end))
    return out


def _folded(memory: list[tuple[int, int, int]], calls: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """``memory`` (time, order, bytes) with each outermost ATen call's events replaced by their sum at its end.

    What a kernel allocates and frees before it returns (its scratch: oneDNN's buffers, the CPU flash-attention
    kernel's per-thread ones) then never counts, as the dispatch method never sees it; a tensor it returns counts
    from its end on. Inductor's own buffers are allocated outside any ATen call and stay as they are."""
    import bisect

    starts = [start for start, _ in calls]
    net: dict[int, int] = {}
    out = []
    for when, order, delta in memory:
        i = bisect.bisect_right(starts, when) - 1
        if i >= 0 and when <= calls[i][1]:
            net[i] = net.get(i, 0) + delta
        else:
            out.append((when, order, delta))
    out += [(calls[i][1], -1, delta) for i, delta in net.items() if delta]
    return sorted(out)


def _phase_peaks(memory: list[tuple[int, int, int]], ranges: list[tuple[int, int, str]], start: int,
                 peaks: dict[str, int]) -> tuple[int, str]:
    """The step's peak over ``start`` and its phase; each phase's peak raised in ``peaks``."""
    current = peak = start
    phase = "setup"
    for when, _, delta in memory:
        current += delta
        name = _phase_of(ranges, when)
        peaks[name] = max(peaks.get(name, 0), current)
        if current > peak:
            peak, phase = current, name
    return peak, phase


def _profiler_peak(torch: Any, module: Any, opt: Any, inputs: Any,
                   one_step: Callable[[Any], None], steps: int) -> StepPeak:
    from torch.profiler import ProfilerActivity, profile

    per_step = []
    baseline = 0
    best, best_phase = 0, "setup"
    phase_peaks: dict[str, int] = {}
    tensor_peaks: dict[str, int] = {}
    for _ in range(steps):
        live = _LiveBytes()
        for t in _existing_state(module, opt, inputs):
            live.track(t)
        if not per_step:
            baseline = live.current
        start = live.current  # before the step: its weak references follow the frees
        marks = _ProfilerPhases()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            one_step(marks)
            marks.close()
        found = list(prof.profiler.kineto_results.events())
        ranges = [(e.start_ns(), e.end_ns(), e.name()[len(PHASE_MARK):]) for e in found
                  if e.name().startswith(PHASE_MARK)]
        memory = sorted((e.start_ns(), i, e.nbytes()) for i, e in enumerate(found)
                        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
        peak, phase = _phase_peaks(memory, ranges, start, phase_peaks)
        calls = _outermost([(e.start_ns(), e.end_ns()) for e in found if e.name().startswith("aten::")])
        _phase_peaks(_folded(memory, calls), ranges, start, tensor_peaks)
        per_step.append(peak)
        if peak > best:
            best, best_phase = peak, phase
    phases = {k: v for k, v in phase_peaks.items() if k != "setup"}
    return StepPeak("cpu", "profiler", baseline, max(per_step), tuple(per_step), best_phase, steps, phases,
                    tensor_phases={k: v for k, v in tensor_peaks.items() if k != "setup"})


# --- everything at once --------------------------------------------------------------------
def measure(module: Any, inputs: Any, loss_fn: LossFn, *, peak: bool = True,
            optimizer: OptimizerFactory | None = None, steps: int = 2, method: str | None = None,
            autocast: str | None = None) -> Measurement:
    """Parameter count, saved bytes and (unless ``peak=False``) the peak of whole steps."""
    torch = require_torch()
    saved = saved_tensors(module, inputs, loss_fn, autocast=autocast)
    step = (step_peak(module, inputs, loss_fn, optimizer=optimizer, steps=steps, method=method, autocast=autocast)
            if peak else None)
    return Measurement(count_parameters(module), parameter_bytes(module), saved, step, torch.__version__)
