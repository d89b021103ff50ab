"""FLOPs of one training step of a torch module, per module, counted on the meta device and fitted (issue 29).

What is counted: ``torch.utils.flop_counter.FlopCounterMode``'s operators (matmuls, convolutions
and fused attention, forward and backward; 2 FLOPs per multiply-add; element-wise operators,
norms and softmax count nothing), over the forward, the loss and the backward that autograd
really runs (no input gradient of the first layer: the inputs need none). One correction: a
grouped convolution's weight gradient counted once, not ``groups`` times (``_conv_backward``). Each operator is
charged to the innermost module running it: in the forward the module hooks' stack
(``probe.running_modules``); in the backward the module whose forward created the autograd node
being run (``torch._C._current_autograd_node``), found from the nodes' sequence numbers, which
module hooks mark as each module starts and ends. The parts add up to FlopCounterMode's own
total (checked at every shape).

Recovered as the saved bytes are (``probe``): counted at several batch sizes and input sizes,
each module's forward and backward FLOPs fitted exactly as a polynomial of degree 1 in B and 2 in
each input size (a convolution's B·H·W, attention's B·S²) on the same grid, and checked at an
independent point; a network whose operators differ at its own sizes is fitted at 2-4 times them.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from ...core.symbols import B
from ...core.term import Term
from ...math.formula import Formula
from . import cache, probe
from .source import ModuleError, ModuleSource, loss_of, make_inputs

PHASES = ("forward", "backward")
SRC = "torch-meta"
NOTE = ("Counted with torch.utils.flop_counter.FlopCounterMode on the meta device (matmuls, convolutions and "
        "attention, 2 FLOPs per multiply-add; element-wise operators, norms and softmax not counted) at several "
        "batch sizes and input sizes, fitted exactly and checked at a further point (symbolic/networks/module/flops.py).")


@dataclass(frozen=True)
class Count:
    """One step's FLOPs at one shape: per module and phase, and FlopCounterMode's own total."""

    forward: dict[str, int]
    backward: dict[str, int]
    total: int


@dataclass(frozen=True)
class FlopFit:
    """One step's FLOPs per module as polynomials in (B, sizes...), forward and backward."""

    names: tuple[str, ...]  # the size names, in the polynomials' order after B
    forward: tuple[tuple[str, probe.Poly], ...]
    backward: tuple[tuple[str, probe.Poly], ...]
    shifted: bool = False  # fitted at 2-4 x the sizes (see probe.SHIFTED)

    def modules(self) -> list[str]:
        """Every module with FLOPs in either phase, in the order they first appear."""
        return list(dict.fromkeys([m for m, _ in self.forward] + [m for m, _ in self.backward]))

    def total(self, phase: str, point: probe.Point) -> int:
        return int(sum(p.at(point) for _, p in getattr(self, phase)))


# --- counting one step --------------------------------------------------------------------------
class _Marks:
    """(sequence number of an autograd node made at a module's start or end, the innermost module from then)."""

    def __init__(self) -> None:
        self.numbers: list[int] = []
        self.names: list[str] = []

    def add(self, marker: Any, name: str) -> None:
        node = marker.view(()).grad_fn  # a fresh node: its sequence number follows every node made before it
        if node is not None:
            self.numbers.append(int(node._sequence_nr()))
            self.names.append(name)

    def owner(self, sequence: int) -> str:
        """The innermost module running when the node numbered ``sequence`` was made in the forward."""
        i = bisect.bisect_left(self.numbers, sequence) - 1
        return self.names[i] if i >= 0 else probe.TOP


@contextlib.contextmanager
def _marking(module: Any, stack: list[str], marks: _Marks) -> Iterator[None]:
    """Mark each module's start and end (after ``running_modules`` has pushed or popped it)."""
    import torch

    marker = torch.empty((), device="meta", requires_grad=True)

    def mark(*_: Any) -> None:
        marks.add(marker, stack[-1] if stack else probe.TOP)

    handles = []
    for sub in module.modules():
        handles.append(sub.register_forward_pre_hook(mark))
        handles.append(sub.register_forward_hook(mark, always_call=True))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _attributing(registry: Mapping[Any, Any], stack: list[str], marks: _Marks,
                 counts: dict[str, dict[str, int]]) -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Attribute(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            if packet in registry:
                node = torch._C._current_autograd_node()
                if node is None:
                    phase, name = "forward", (stack[-1] if stack else probe.TOP)
                else:
                    phase, name = "backward", marks.owner(int(node._sequence_nr()))
                flops = int(registry[packet](*args, **kwargs, out_val=out))
                counts[phase][name] = counts[phase].get(name, 0) + flops
            return out

    return _Attribute()


def _conv_backward(grad_out_shape: Any, x_shape: Any, w_shape: Any, bias: Any, stride: Any, padding: Any,
                   dilation: Any, transposed: bool, output_padding: Any, groups: int, output_mask: Sequence[bool],
                   out_shape: Any, **kwargs: Any) -> int:
    """FlopCounterMode's convolution backward with a grouped convolution's weight gradient counted once.

    torch's ``conv_backward_flop`` ignores ``groups`` in the weight gradient (it counts the
    convolution of every input channel with every output channel's gradient): ``groups`` times the
    multiply-adds a depthwise convolution runs. The input gradient it counts right.
    """
    from torch.utils.flop_counter import conv_backward_flop

    rest = (grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed, output_padding, groups)
    inputs = conv_backward_flop(*rest, [output_mask[0], False], out_val=out_shape, **kwargs)  # shapes pass through
    weights = conv_backward_flop(*rest, [False, output_mask[1]], out_val=out_shape, **kwargs)
    return int(inputs) + int(weights) // int(groups)


def count(source: ModuleSource, batch: int, sizes: Mapping[str, int], dtype: str = "float32",
          module: Any = None) -> Count:
    """Forward, loss and backward of one step on the meta device, FLOPs per module (see the module docstring)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    module = probe.build(source, dtype=dtype) if module is None else module
    module.zero_grad(set_to_none=True)
    inputs = make_inputs(source, batch, sizes, device="meta", float_dtype=getattr(torch, dtype))
    counts: dict[str, dict[str, int]] = {phase: {} for phase in PHASES}
    marks = _Marks()
    counter = FlopCounterMode(display=False, custom_mapping={torch.ops.aten.convolution_backward: _conv_backward})
    with probe.running_modules(module) as stack, _marking(module, stack, marks):
        try:
            # FlopCounterMode innermost: it decomposes what it cannot count (attention), and the parts it counts
            # reach the attributing mode below it
            with probe._quiet(), _attributing(counter.flop_registry, stack, marks, counts), counter:
                loss = loss_of(module(**inputs), source.loss)
                loss.backward()
        except ModuleError:
            raise
        except Exception as err:
            raise ModuleError(probe._forward_error(source, batch, sizes, err)) from None
    return Count(counts["forward"], counts["backward"], int(counter.get_total_flops()))


# --- fitting ------------------------------------------------------------------------------------
def fit(source: ModuleSource, dtype: str = "float32") -> FlopFit:
    """Each module's forward and backward FLOPs as exact polynomials, checked at an independent point."""
    names = source.size_names
    base = [int(source.sizes[n]) for n in names]
    module = probe.build(source, dtype=dtype)
    done: dict[probe.Point, Count] = {}

    def at(point: probe.Point) -> Count:
        if point not in done:
            done[point] = _whole(source, count(source, point[0], dict(zip(names, point[1:])), dtype, module))
        return done[point]

    check_point = (probe.CHECK[0], *(probe.CHECK[1] * v for v in base))
    result = _fit_on(names, probe.grid(base), at, shifted=False)
    if _agrees(result, at(check_point), check_point) or not names:
        return _checked(source, result, at(check_point), check_point)
    result = _fit_on(names, probe.grid(base, probe.SHIFTED), at, shifted=True)
    return _checked(source, result, at(check_point), check_point)


def _whole(source: ModuleSource, c: Count) -> Count:
    """The count, once its parts are seen to add up to FlopCounterMode's total."""
    parts = sum(c.forward.values()) + sum(c.backward.values())
    if parts != c.total:  # an operator charged nowhere: the attribution, not the model, is wrong
        raise ModuleError(f"{source.label}: FLOPs per module add up to {parts:,}, FlopCounterMode counts {c.total:,}")
    return c


def _fit_on(names: Sequence[str], points: Sequence[probe.Point], at: Any, *, shifted: bool) -> FlopFit:
    exps = probe.monomials(len(names))
    inv = probe.inverse(points, exps)
    counts = [at(p) for p in points]

    def fitted(phase: str) -> tuple[tuple[str, probe.Poly], ...]:
        modules = list(dict.fromkeys(m for c in counts for m in getattr(c, phase)))
        return tuple((m, probe.Poly.of(probe.solve(inv, [getattr(c, phase).get(m, 0) for c in counts]), exps))
                     for m in modules)

    return FlopFit(tuple(names), fitted("forward"), fitted("backward"), shifted)


def _agrees(result: FlopFit, check: Count, point: probe.Point) -> bool:
    """Whether every module's fitted FLOPs equal the count at ``point``, in both phases."""
    for phase in PHASES:
        fitted = {m: p.at(point) for m, p in getattr(result, phase)}
        measured = getattr(check, phase)
        if any(fitted.get(m, 0) != measured.get(m, 0) for m in set(fitted) | set(measured)):
            return False
    return True


def _checked(source: ModuleSource, result: FlopFit, check: Count, point: probe.Point) -> FlopFit:
    if _agrees(result, check, point):
        return result
    shown = ", ".join(f"{n}={v}" for n, v in zip(("B", *result.names), point))
    raise ModuleError(f"{source.label}: its step's FLOPs are not a polynomial of degree 1 in B and 2 in each input "
                      f"size (checked at {shown}: {check.total:,} counted, "
                      f"{result.total('forward', point) + result.total('backward', point):,} fitted); "
                      f"{probe.STRIDE_RULE}")


# --- the cache's plain data ---------------------------------------------------------------------
def to_data(f: FlopFit) -> dict[str, Any]:
    return {"names": list(f.names), "shifted": f.shifted,
            **{phase: [[m, [[list(e), str(c)] for e, c in p.coefs]] for m, p in getattr(f, phase)]
               for phase in PHASES}}


def from_data(data: Mapping[str, Any]) -> FlopFit:
    def polys(items: Sequence[Any]) -> tuple[tuple[str, probe.Poly], ...]:
        return tuple((str(m), probe.Poly(tuple((tuple(int(x) for x in e), cache.fraction(c)) for e, c in p)))
                     for m, p in items)

    return FlopFit(tuple(str(n) for n in data["names"]), polys(data["forward"]), polys(data["backward"]),
                   bool(data.get("shifted", False)))


# --- what ``time`` reads ------------------------------------------------------------------------
@dataclass(frozen=True)
class OwnFlops:
    """A network's own FLOPs per sample (``Network.own_flops``): forward and training Formulas, per-module rows."""

    forward: Formula
    train: Formula
    values: dict[str, int]
    modules: tuple[dict[str, Any], ...]  # module, forward and backward: formula in B and the sizes, FLOPs per step


def own_flops(name: str, result: FlopFit, sizes: Mapping[str, int], batch: int,
              blocks: Sequence[str] = ()) -> OwnFlops:
    """Per sample (the step's FLOPs over B, at the source's input sizes) as Formulas; per step at ``batch`` as rows.

    ``blocks``: the checkpointed blocks (``--recompute full``), whose forward FLOPs the training Formula counts
    again as its ``recompute`` term."""
    at = [B, *(sympy.Integer(sizes[n]) for n in result.names)]
    sym = [B, *(sympy.Symbol(n, positive=True, integer=True) for n in result.names)]
    point = (batch, *(int(sizes[n]) for n in result.names))
    fwd, bwd = dict(result.forward), dict(result.backward)
    zero = probe.Poly(())

    def term(module: str, expr: sympy.Expr, what: str) -> Term:
        title = f"{module}: {what}" if module != probe.TOP else f"the loss (outside the module): {what}"
        return Term(module, title, sympy.simplify(expr / B), "flops", SRC, "FlopCounterMode")

    modules = result.modules()
    forward = Formula(f"flops.{name}.forward", f"Forward FLOPs per sample of {name}",
                      [term(m, fwd.get(m, zero).expr(at), "forward FLOPs per sample") for m in modules],
                      source=SRC, name="F_fwd", note=NOTE)
    train = Formula(f"flops.{name}.train", f"Training FLOPs per sample of {name} (forward and backward, counted)",
                    [term(m, fwd.get(m, zero).expr(at) + bwd.get(m, zero).expr(at), "forward + backward FLOPs per "
                          "sample") for m in modules] + _recompute(blocks, fwd, at, term), source=SRC, name="F_tok",
                    note=NOTE)
    rows = tuple({"module": m, "forward_formula": fwd.get(m, zero).expr(sym),
                  "backward_formula": bwd.get(m, zero).expr(sym), "forward": int(fwd.get(m, zero).at(point)),
                  "backward": int(bwd.get(m, zero).at(point))} for m in modules)
    return OwnFlops(forward, train, {"B": batch}, rows)


RECOMPUTE_NOTE = ("the checkpointed blocks' forward once more in backward (non-reentrant torch.utils.checkpoint); "
                  "an upper bound by the few last operators whose outputs nothing in the block saves (PyTorch stops "
                  "the recompute early)")


def _recompute(blocks: Sequence[str], fwd: Mapping[str, probe.Poly], at: Sequence[sympy.Expr],
               term: Any) -> list[Term]:
    """The ``recompute`` term: the forward FLOPs of every module in a checkpointed block ([] without blocks)."""
    if not blocks:
        return []
    inside = [m for m in fwd if any(m == b or m.startswith(f"{b}.") for b in blocks)]
    expr = sympy.Add(*(fwd[m].expr(at) for m in inside))
    return [term("recompute", expr, "the checkpointed blocks' forward again").replace(
        title="recompute: the checkpointed blocks' forward FLOPs again, per sample", note=RECOMPUTE_NOTE)]
