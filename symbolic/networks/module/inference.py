"""What a ``ModuleSource`` holds in inference: one forward under ``torch.no_grad()``, probed on the meta device.

The module is built in eval mode (batch norm reads its running statistics, dropout does nothing)
and run without labels (``DROPPED``: a transformers task model then computes no loss). The live
bytes after every operator output (``probe._Live``, the training probe's rule: each storage once,
parameters, buffers and inputs not new) are recorded at the points of ``probe.grid`` and fitted
exactly as polynomials in B and the input sizes; the forward's peak is the largest of its candidate
moments (``probe._moments``), checked at an independent point. What is modelled is one forward
pass, no generation loop (an encoder-decoder's generation with its KV caches: ``generation.py``). Attention runs as the
planned device's kernels run it (``kernels.following``: "cpu", "cuda"; None, the reference path).

Each input size's step (``Fit.steps``): the smallest divisor d of its value at which the fit
still holds at value·5 + d (the others at 5 × theirs); a strided network's output sizes are
floors of the input over its total stride, so d is that stride (32 for a ResNet), 1 where
nothing is strided. ``fit`` of an input size moves on multiples of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import probe
from .kernels import following
from .source import ModuleError, ModuleSource, make_inputs

DROPPED = ("labels", "return_loss")  # the inputs that only make a training forward compute its loss


@dataclass
class ForwardTrace:
    """One forward at one shape: the live bytes after each allocation, the inputs' bytes."""

    forward: list[int]
    inputs: int
    backward: list[int] = field(default_factory=list)  # none: ``probe._changes_at_base`` reads both


@dataclass(frozen=True)
class Fit:
    """The forward's bytes as polynomials in (B, sizes...): its candidate moments, the inputs, each size's step."""

    names: tuple[str, ...]
    forward: tuple[probe.Poly, ...]
    inputs: probe.Poly
    steps: tuple[int, ...]
    shifted: bool = False

    def peak(self, point: probe.Point) -> Any:
        return max(p.at(point) for p in self.forward)


def build(source: ModuleSource, dtype: str) -> Any:
    """The module on the meta device in ``dtype``, in eval mode."""
    return probe.build(source, dtype=dtype).eval()


def forward_inputs(source: ModuleSource, batch: int, sizes: dict[str, int], device: str, float_dtype: Any) -> dict:
    """The forward's keyword inputs without the labels (``DROPPED``)."""
    made = make_inputs(source, batch, sizes, device=device, float_dtype=float_dtype)
    return {k: v for k, v in made.items() if k not in DROPPED}


def trace(source: ModuleSource, batch: int, sizes: dict[str, int], dtype: str, module: Any,
          kernels: str | None = None) -> ForwardTrace:
    """One forward under ``torch.no_grad()`` on the meta device (``kernels``: see ``kernels.following``)."""
    import torch

    inputs = forward_inputs(source, batch, sizes, "meta", getattr(torch, dtype))
    tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
    live = probe._Live()
    keep = [t.untyped_storage() for t in (*module.parameters(), *module.buffers())]  # their ids stay theirs
    for t in (*module.parameters(), *module.buffers(), *tensors):
        live.known(t)
    try:
        with torch.no_grad(), probe._tracking(live.track), probe._quiet(), following(kernels):
            out = module(**inputs)
            moments = live.moments + [live.current]
    except ModuleError:
        raise
    except Exception as err:
        raise ModuleError(probe._forward_error(source, batch, sizes, err)) from None
    del out, keep
    return ForwardTrace(moments, sum(int(t.untyped_storage().nbytes()) for t in tensors))


def fit(source: ModuleSource, dtype: str = "float32", kernels: str | None = None) -> Fit:
    """Fit the forward's live bytes (see the module docstring); checked at an independent point."""
    names = source.size_names
    base = [int(source.sizes[n]) for n in names]
    exps = probe.monomials(len(names))
    module = build(source, dtype)
    done: dict[probe.Point, ForwardTrace] = {}

    def at(point: probe.Point) -> ForwardTrace:
        if point not in done:
            done[point] = trace(source, point[0], dict(zip(names, point[1:])), dtype, module, kernels)
        return done[point]

    points = probe.grid(base)
    traces = [at(p) for p in points]
    shifted = bool(names) and probe._changes_at_base(traces, points, base)
    if shifted:
        points = probe.grid(base, probe.SHIFTED)
        traces = [at(p) for p in points]
    inv = probe.inverse(points, exps)

    def fitted(values: Sequence[int]) -> probe.Poly:
        return probe.Poly.of(probe.solve(inv, values), exps)

    moments = probe._moments(traces, "forward", fitted)
    inputs = fitted([t.inputs for t in traces])
    check_point = (probe.CHECK[0], *(probe.CHECK[1] * v for v in base))
    _check(source, names, moments, inputs, at(check_point), check_point)
    series = [t.forward for t in traces]
    every = [fitted([s[i] for s in series]) for i in range(len(series[0]))] if len({len(s) for s in series}) == 1 \
        else list(moments)  # every moment's polynomial: a step must keep each (not only the peak) exact
    steps = tuple(_step(i, base, every, at) for i in range(len(names)))
    return Fit(tuple(names), moments, inputs, steps, shifted)


def _check(source: ModuleSource, names: Sequence[str], moments: Sequence[probe.Poly], inputs: probe.Poly,
           check: ForwardTrace, point: probe.Point) -> None:
    """The fit against a forward at an independent point: a one-line error where it disagrees."""
    fitted, measured = max(p.at(point) for p in moments), max(check.forward)
    if fitted != measured or inputs.at(point) != check.inputs:
        shown = ", ".join(f"{n}={v}" for n, v in zip((probe.BATCH, *names), point))
        raise ModuleError(f"{source.label}: its forward's bytes are not a polynomial of degree 1 in {probe.BATCH} and 2 "
                          f"in each input size (checked at {shown}: peak {measured:,} measured, {fitted} fitted); "
                          f"{probe.STRIDE_RULE}")


def _step(index: int, base: Sequence[int], every: Sequence[probe.Poly],
          at: Callable[[probe.Point], ForwardTrace]) -> int:
    """The smallest divisor d of size ``index``'s value at which every moment's fit holds at value·5 + d.

    Every moment, not only the peak: a ResNet's peak (its first convolution) is exact at even
    sizes, its later layers (and so its training step) only at multiples of 32.
    """
    value = base[index]
    for d in (d for d in range(1, value) if value % d == 0):
        sizes = [probe.CHECK[1] * v for v in base]
        sizes[index] += d
        point = (probe.CHECK[0], *sizes)
        try:
            measured = at(point).forward
        except ModuleError:  # a size the forward rejects (a patch embedding that needs multiples of its patch)
            continue
        if len(measured) == len(every) and all(p.at(point) == m for p, m in zip(every, measured)):
            return d
    return value
