"""What a ``ModuleSource`` holds in training, probed on the meta device (issue 29).

- Parameters: the module built on the meta device from changed integer arguments, fitted the way
  the generic path fits config fields (``generic.probes._fit_units``: each argument doubled, pairs
  where needed, the whole formula checked by one more build); a parameter group whose shape does
  not follow from the arguments keeps its measured number with a note. The total is exact.
- One step's tensors: forward, loss and backward on the meta device (no data, no arithmetic) at
  several batch sizes and input sizes, recording (a) what autograd saves (``saved_tensors_hooks``:
  each storage once, parameters adding nothing, attributed to the innermost module running when it
  is saved) and (b) the live bytes after every operator output (a dispatch mode; a weak reference
  per storage notices its release). Every quantity is fitted as a polynomial in B (degree 1) and
  the input sizes (degree 2 each): B·H·W for convolutions, B·S² for attention scores. The
  coefficients are exact rationals from a linear solve on a tensor-product grid; each fit is
  checked at an independent point, and a module whose bytes are not such a polynomial is a
  one-line error that says so (no formula is guessed). A phase's peak is the largest of the live
  bytes at its candidate moments (every moment no other one exceeds coefficient by coefficient),
  each moment's bytes a polynomial: the same operators run at every shape. A network whose
  operators differ only at the sizes themselves (a transformers ViT interpolates its position
  embeddings at every image size but its own) is fitted at 2, 3 and 4 times the sizes, with a note.
- ``--recompute full``: the blocks named run under ``torch.utils.checkpoint(use_reentrant=False)``
  in the trace (``checkpointing``), so what is saved and the backward's recompute are PyTorch's own;
  ``--fsdp``: each gradient is dropped as it accumulates (FSDP2's gradient terms are the planner's);
  ``--qlora``: bitsandbytes' 4-bit matmul run as its CPU kernel runs it (``qlora.expanding``).
- Strided networks: output sizes are floors of the input sizes over the strides, polynomial only
  where the input sizes are multiples of the network's total stride (32 for a ResNet); at others
  the check fails and the error names that rule.

The meta device runs the CPU's composite kernels (dropout keeps a mask of its input's dtype,
attention written with matmul and softmax keeps its scores): what ``--device cpu`` measures. SDPA
takes the reference path there; with ``kernels="cpu"`` (``--device cpu``) it runs the CPU's flash
kernel where the CPU would (``kernels.py``), with ``kernels="cuda"`` (the default device) the flash or
memory-efficient kernel where a CUDA GPU would (``cuda_attention.py``, derived from PyTorch's source).
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sympy

from ...core import symbols as symtab
from ...core.term import Term
from . import checkpointing, qlora
from .autocast import autocast as autocast_region
from .files import first_line
from .kernels import following
from .source import BATCH, ModuleError, ModuleSource, loss_of, make_inputs

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # the pure precisions a probe runs in
BATCHES = (2, 3)  # the fit's batch sizes (B = 1 makes some reshapes views)
SIZE_FACTORS = (1, 2, 3)  # the fit's input sizes: the size's value times these
SHIFTED = (2, 3, 4)  # the same where the operators at the sizes themselves differ (a ViT at its own image size)
CHECK = (5, 5)  # the independent point: batch 5, every size × 5
SOURCE = "torch-meta"
ARG_DOC = "constructor argument {!r} of a torch module (a size the module probes found in parameter shapes)"


# --- building ---------------------------------------------------------------------------------
def build(source: ModuleSource, arguments: Mapping[str, Any] | None = None, dtype: str | None = None) -> Any:
    """The module built on the meta device (in ``dtype`` when given, then ``source.adapt``ed), in training mode."""
    import torch

    with torch.device("meta"), _quiet():
        module = source.build(source.arguments if arguments is None else arguments)
    if dtype is not None:
        module = module.to(getattr(torch, dtype))
    if source.adapt is not None:  # LoRA's adapters, after the cast (they keep their own dtype)
        module = source.adapt(module)
    return module.train()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def shapes(source: ModuleSource, arguments: Mapping[str, Any]) -> dict[str, tuple[int, ...]] | None:
    """Name -> shape of every parameter at ``arguments`` (None where it does not build: a probe)."""
    try:
        module = build(source, arguments)
    except ModuleError:
        return None
    return {name: tuple(int(s) for s in p.shape) for name, p in module.named_parameters()}


# --- parameters -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Params:
    """The parameter groups: one term per name pattern, the exact total, what each tensor holds."""

    terms: tuple[Term, ...]
    total: int
    tensors: tuple[int, ...]  # elements of each parameter tensor, named_parameters() order
    values: dict[str, int]  # each argument symbol's value
    matrices: tuple[tuple[str, int, int, int], ...]  # (module name, in, out, uses): Linear and Conv weights
    buffers: int  # bytes of the buffers (batch norm's running statistics) at fp32
    unexplained: tuple[str, ...]  # groups kept as measured numbers


def argument_symbols(names: Sequence[str], scope: symtab.SymbolScope) -> dict[str, sympy.Symbol]:
    """One symbol per integer argument: the project's own where the name is one (article A's d_in), else the scope's."""
    out = {}
    for name in names:
        if symtab.in_table(name) and name not in ("B", "N", "b", "S"):
            out[name] = symtab.lookup(name)
            continue
        candidate = name if not symtab.in_table(name) else f"arg_{name}"
        if candidate in scope:
            out[name] = scope.info(candidate).symbol  # type: ignore[assignment]
            continue
        latex = r"\mathrm{" + candidate.replace("_", r"\_") + "}"
        out[name] = scope.declare(candidate, latex, ARG_DOC.format(name), "count")
    return out


def parameters(source: ModuleSource, scope: symtab.SymbolScope) -> Params:
    """The module's parameters as terms in its integer arguments (see the module docstring)."""
    from ..generic import probes as generic

    base = dict(source.arguments)
    module = build(source)
    base_shapes = {name: tuple(int(s) for s in p.shape) for name, p in module.named_parameters()}
    fields = {p: v for p, v in generic.int_fields(base).items() if len(p) == 1}
    sym = {p: s for p, s in zip(fields, argument_symbols([p[0] for p in fields], scope).values())}
    if fields:
        exprs, _ = generic._fit_units(base_shapes, base, fields, sym, lambda data: shapes(source, data))
    else:
        exprs = {u: None for u in generic.units(base_shapes)}
    terms, unexplained = generic._terms(exprs, generic.units(base_shapes))
    terms = tuple(t.replace(source=SOURCE, note=(NOTE_MEASURED if t.key in unexplained else "")) for t in terms)
    total = sum(p.numel() for p in module.parameters())
    return Params(terms, int(total), tuple(int(p.numel()) for p in module.parameters()),
                  {s.name: int(fields[p]) for p, s in sym.items()}, _matrices(module),
                  sum(int(b.numel()) * 4 for b in module.buffers()), tuple(unexplained))


NOTE_MEASURED = "shape not expressed in the constructor's integer arguments: the number measured on the meta device"


def _matrices(module: Any) -> tuple[tuple[str, int, int, int], ...]:
    """(module name, inputs, outputs, positions factor 1) of each Linear and Conv weight (LoRA, FLOPs)."""
    import torch

    out = []
    for name, sub in module.named_modules():
        if isinstance(sub, torch.nn.Linear):
            out.append((name or "(module)", int(sub.in_features), int(sub.out_features), 1))
        elif isinstance(sub, torch.nn.modules.conv._ConvNd):
            w = sub.weight
            out.append((name or "(module)", int(w.shape[1] * w[0, 0].numel()), int(w.shape[0]), 1))
    return tuple(out)


# --- one step on the meta device --------------------------------------------------------------
@dataclass
class Trace:
    """One step at one shape: saved bytes per module, live bytes after each allocation by phase."""

    saved: dict[str, int]
    forward: list[int]
    backward: list[int]
    inputs: int


class _Live:
    """Bytes of the storages created since it started that are still alive (meta storages included)."""

    def __init__(self) -> None:
        self.current = 0
        self.moments: list[int] = []
        self._refs: dict[int, weakref.ref] = {}

    def known(self, t: Any) -> None:
        """A storage that existed before (a parameter, a buffer, an input): its views are not new bytes."""
        st = t.untyped_storage()
        self._refs[id(st)] = weakref.ref(st)

    def track(self, t: Any) -> None:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        ident = id(st)
        if ident in self._refs and self._refs[ident]() is st:
            return
        nbytes = int(st.nbytes())
        if nbytes == 0:
            return

        def release(_: weakref.ref, ident: int = ident, nbytes: int = nbytes) -> None:
            self._refs.pop(ident, None)
            self.current -= nbytes

        self._refs[ident] = weakref.ref(st, release)
        self.current += nbytes
        self.moments.append(self.current)


def _tracking(track: Callable[[Any], None]) -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class _Track(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    track(t)
            return out

    return _Track()


@contextlib.contextmanager
def running_modules(module: Any, qualified: bool = True) -> Iterator[list[str]]:
    """A list holding the modules running now, innermost last: qualified names, or class names."""
    stack: list[str] = []
    handles = []

    def pop(*_: Any) -> None:
        if stack:
            stack.pop()

    for name, sub in module.named_modules():
        label = (name or "(module)") if qualified else type(sub).__name__
        handles.append(sub.register_forward_pre_hook(lambda *_, n=label: stack.append(n) and None))
        handles.append(sub.register_forward_hook(pop, always_call=True))
    try:
        yield stack
    finally:
        for h in handles:
            h.remove()


TOP = "loss"  # what is saved outside every module: the loss applied to the output


@contextlib.contextmanager
def _again(kernels: str | None, autocast: str | None) -> Iterator[None]:
    """What a checkpointed block's recompute runs in: the device's kernels and, in mixed precision, autocast."""
    with following(kernels), autocast_region(autocast, kernels):
        yield


def trace(source: ModuleSource, batch: int, sizes: Mapping[str, int], dtype: str = "float32",
          module: Any = None, kernels: str | None = None, autocast: str | None = None, blocks: Sequence[str] = (),
          free_grads: bool | Sequence[str] = False) -> Trace:
    """Forward, loss and backward of one step on the meta device (``kernels``: see ``kernels.following``).

    ``autocast`` ("bfloat16", "float16"): the forward and the loss under autocast's policy for the kernels'
    device (``autocast.py``), fp32 weights and inputs; backward outside it, as a real step runs (a checkpointed
    block's recompute under it again, as ``torch.utils.checkpoint`` re-enters autocast). ``blocks``: the
    submodules run under non-reentrant checkpointing, ``checkpointing.checkpointed``; ``free_grads``: each
    parameter's gradient dropped once accumulated (the named submodules' only), ``checkpointing.gradients_freed``.
    """
    import torch

    module = build(source, dtype=dtype) if module is None else module
    module.zero_grad(set_to_none=True)
    float_dtype = getattr(torch, dtype)
    inputs = make_inputs(source, batch, sizes, device="meta", float_dtype=float_dtype)
    excluded = {id(t.untyped_storage()) for t in (*module.parameters(), *module.buffers())}
    keep = [t.untyped_storage() for t in (*module.parameters(), *module.buffers())]  # ids stay theirs
    seen: dict[int, tuple[str, int, weakref.ref]] = {}  # weak: backward frees them as it goes
    dropped: list[tuple[str, int]] = []  # saved, then freed within the forward (a discarded branch's)
    live = _Live()
    for t in (*module.parameters(), *module.buffers(), *(v for v in inputs.values() if isinstance(v, torch.Tensor))):
        live.known(t)
    with running_modules(module) as stack:
        def pack(t: Any) -> Any:
            try:
                st = t.untyped_storage()
            except (RuntimeError, NotImplementedError):
                return t
            if id(st) in excluded:
                return t
            if id(st) in seen and seen[id(st)][2]() is not st:  # a freed storage's id, reused
                dropped.append(seen.pop(id(st))[:2])
            if id(st) not in seen:
                seen[id(st)] = (stack[-1] if stack else TOP, int(st.nbytes()), weakref.ref(st))
            return t

        try:
            with (torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _tracking(live.track), _quiet(),
                  qlora.expanding(module), following(kernels), checkpointing.checkpointed(module, blocks, lambda: _again(kernels, autocast)),
                  checkpointing.gradients_freed(module, free_grads)):
                with autocast_region(autocast, kernels):
                    loss = loss_of(module(**inputs), source.loss)
                forward = live.moments + [live.current]
                live.moments = [live.current]
                loss.backward()
                del loss
        except ModuleError:
            raise
        except Exception as err:
            raise ModuleError(_forward_error(source, batch, sizes, err)) from None
    saved: dict[str, int] = {}
    for name, nbytes in [*dropped, *(v[:2] for v in seen.values())]:  # each storage once, as measure counts them
        saved[name] = saved.get(name, 0) + nbytes
    del keep
    in_bytes = sum(int(t.untyped_storage().nbytes()) for t in inputs.values() if isinstance(t, torch.Tensor))
    return Trace(saved, forward, live.moments, in_bytes)


def _forward_error(source: ModuleSource, batch: int, sizes: Mapping[str, int], err: BaseException) -> str:
    """One line for a forward or backward that fails on the meta device."""
    shown = ", ".join(f"{i.name}={tuple(i.shape(batch, {**source.sizes, **sizes}))}" for i in source.inputs)
    text = str(err)
    if "meta" in text and any(w in text for w in ("item", "data-dependent", "nonzero", "Cannot", "cannot")):
        return (f"{source.label}: the forward needs the tensors' values, which the meta device does not have "
                f"({first_line(err)}); shapes must not depend on data")
    return f"{source.label}: the forward at {shown} raised {first_line(err)}"


# --- fitting ----------------------------------------------------------------------------------
Point = tuple[int, ...]  # (batch, size_1, size_2, ...)


def monomials(n_sizes: int) -> list[tuple[int, ...]]:
    """Exponents of (B, sizes...): B to 0 or 1, each size to 0, 1 or 2."""
    return [(e0, *rest) for e0 in (0, 1) for rest in itertools.product((0, 1, 2), repeat=n_sizes)]


def grid(base: Sequence[int], factors: Sequence[int] = SIZE_FACTORS) -> list[Point]:
    """The fit's points: a tensor product of the batches and each size's multiples (an invertible system)."""
    return [(b, *(f * v for f, v in zip(fs, base)))
            for b in BATCHES for fs in itertools.product(factors, repeat=len(base))]


def _row(point: Point, exps: Sequence[tuple[int, ...]]) -> list[Fraction]:
    out = []
    for e in exps:
        value = 1
        for x, k in zip(point, e):
            value *= x**k
        out.append(Fraction(value))
    return out


def inverse(points: Sequence[Point], exps: Sequence[tuple[int, ...]]) -> list[list[Fraction]]:
    """The inverse of the monomials' values at the points (Gauss-Jordan on exact rationals)."""
    n = len(exps)
    rows = [_row(p, exps) + [Fraction(int(i == j)) for j in range(n)] for i, p in enumerate(points)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        head = rows[col][col]
        rows[col] = [x / head for x in rows[col]]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[col])]
    return [row[n:] for row in rows]


def solve(inv: Sequence[Sequence[Fraction]], values: Sequence[int]) -> tuple[Fraction, ...]:
    """The monomials' coefficients that give ``values`` at the grid's points."""
    return tuple(sum((c * v for c, v in zip(row, values)), Fraction(0)) for row in inv)


def evaluate(coefs: Sequence[Fraction], exps: Sequence[tuple[int, ...]], point: Point) -> Fraction:
    return sum((c * r for c, r in zip(coefs, _row(point, exps))), Fraction(0))


@dataclass(frozen=True)
class Poly:
    """A fitted polynomial: exponents of (B, sizes...) -> exact coefficient (zeros left out)."""

    coefs: tuple[tuple[tuple[int, ...], Fraction], ...]

    @classmethod
    def of(cls, coefs: Sequence[Fraction], exps: Sequence[tuple[int, ...]]) -> Poly:
        return cls(tuple((e, c) for e, c in zip(exps, coefs) if c != 0))

    def at(self, point: Point) -> Fraction:
        total = Fraction(0)
        for e, c in self.coefs:
            value = c
            for x, k in zip(point, e):
                value *= x**k
            total += value
        return total

    def expr(self, variables: Sequence[sympy.Symbol]) -> sympy.Expr:
        return sympy.Add(*(sympy.Rational(c.numerator, c.denominator) * sympy.Mul(*(v**k for v, k in zip(variables, e)))
                           for e, c in self.coefs))


@dataclass(frozen=True)
class StepFit:
    """One step's bytes as polynomials in (B, sizes...): saved per module, each phase's candidate moments."""

    names: tuple[str, ...]  # the size names, in the polynomials' order after B
    saved: tuple[tuple[str, Poly], ...]  # module name -> saved bytes
    forward: tuple[Poly, ...]  # live bytes (new storages) at the forward's candidate moments
    backward: tuple[Poly, ...]
    inputs: Poly  # the inputs' bytes
    shifted: bool = False  # fitted at 2-4 x the sizes: the sizes themselves run a few other operators

    def saved_total(self) -> Poly:
        out: dict[tuple[int, ...], Fraction] = {}
        for _, p in self.saved:
            for e, c in p.coefs:
                out[e] = out.get(e, Fraction(0)) + c
        return Poly(tuple((e, c) for e, c in out.items() if c != 0))

    def peak(self, phase: str, point: Point) -> Fraction:
        return max(p.at(point) for p in getattr(self, phase))


def fit_step(source: ModuleSource, dtype: str = "float32", kernels: str | None = None,
             autocast: str | None = None, blocks: Sequence[str] = (),
             free_grads: bool | Sequence[str] = False) -> StepFit:
    """Fit one step's saved and live bytes (see the module docstring); checked at an independent point.

    ``autocast``: the 16-bit dtype of a mixed-precision step (``trace``), ``dtype`` then the weights' float32;
    ``blocks``: the submodules checkpointed (``--recompute full``), ``free_grads``: the gradients dropped once
    accumulated (``--fsdp``: the blocks' only), as ``trace`` runs them."""
    names = source.size_names
    base = [int(source.sizes[n]) for n in names]
    exps = monomials(len(names))
    module = build(source, dtype=dtype)
    done: dict[Point, Trace] = {}

    def at(point: Point) -> Trace:
        if point not in done:
            done[point] = trace(source, point[0], dict(zip(names, point[1:])), dtype, module, kernels, autocast,
                                blocks, free_grads)
        return done[point]

    points = grid(base)
    traces = [at(p) for p in points]
    shifted = bool(names) and _changes_at_base(traces, points, base)
    if shifted:  # fitted where the operators agree; the sizes themselves run a few others (see the note)
        points = grid(base, SHIFTED)
        traces = [at(p) for p in points]
    inv = inverse(points, exps)
    check_point = (CHECK[0], *(CHECK[1] * v for v in base))
    check = at(check_point)

    def fitted(values: Sequence[int]) -> Poly:
        return Poly.of(solve(inv, values), exps)

    modules = sorted({m for t in traces for m in t.saved} | set(check.saved))
    saved = tuple((m, fitted([t.saved.get(m, 0) for t in traces])) for m in modules)
    inputs = fitted([t.inputs for t in traces])
    result = StepFit(tuple(names), saved, _moments(traces, "forward", fitted),
                     _moments(traces, "backward", fitted), inputs, shifted)
    _check(source, result, check, check_point)
    return result


def _changes_at_base(traces: Sequence[Trace], points: Sequence[Point], base: Sequence[int]) -> bool:
    """Whether only the points at the sizes themselves run a different number of operators."""
    at_base = {len(t.forward) + len(t.backward) for t, p in zip(traces, points) if list(p[1:]) == list(base)}
    others = {len(t.forward) + len(t.backward) for t, p in zip(traces, points) if list(p[1:]) != list(base)}
    return len(others) == 1 and at_base != others


def _moments(traces: Sequence[Trace], phase: str, fitted: Callable[[Sequence[int]], Poly]) -> tuple[Poly, ...]:
    """The phase's candidate moments: every fitted moment no other one exceeds coefficient by coefficient.

    B and the sizes are positive, so a moment whose every coefficient another's reaches is never
    the larger; the rest are kept whole (probe points alone miss a moment that wins elsewhere).
    """
    series = [getattr(t, phase) for t in traces]
    if len({len(s) for s in series}) != 1:  # the operators depend on the shape: the peak itself fitted
        return (fitted([max(s) for s in series]),)
    polys = sorted({fitted(v) for v in {tuple(s[i] for s in series) for i in range(len(series[0]))}},
                   key=lambda p: str(p.coefs))
    return tuple(p for p in polys if not any(q != p and _covers(q, p) for q in polys))


def _covers(big: Poly, small: Poly) -> bool:
    """Whether ``big`` has every coefficient at least ``small``'s (so it is at least as large everywhere)."""
    b, s = dict(big.coefs), dict(small.coefs)
    return all(b.get(e, 0) >= s.get(e, 0) for e in set(b) | set(s))


def _check(source: ModuleSource, fit: StepFit, check: Trace, point: Point) -> None:
    """The fit against a step at an independent point: a one-line error where it disagrees."""
    what = []
    if fit.saved_total().at(point) != sum(check.saved.values()):
        what.append(f"saved bytes {sum(check.saved.values()):,} measured, {fit.saved_total().at(point)} fitted")
    for phase in ("forward", "backward"):
        measured = max(getattr(check, phase))
        if fit.peak(phase, point) != measured:
            what.append(f"{phase} peak {measured:,} measured, {fit.peak(phase, point)} fitted")
    if what:
        shown = ", ".join(f"{n}={v}" for n, v in zip((BATCH, *fit.names), point))
        raise ModuleError(f"{source.label}: its step's bytes are not a polynomial of degree 1 in {BATCH} and 2 in "
                          f"each input size (checked at {shown}: {'; '.join(what)}); {STRIDE_RULE}")


STRIDE_RULE = ("a strided network is exact only at input sizes that are multiples of its total stride "
               "(32 for a ResNet, the patch size for a ViT)")
