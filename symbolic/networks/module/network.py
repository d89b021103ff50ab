"""Any ``nn.Module`` as a ``Network`` (issue 29): a ``ModuleSource`` probed, planned as article A's network is.

``module_network(source)`` probes the module (``probe``: parameters in its integer arguments, one
training step's saved and live bytes as polynomials in B and the input sizes), caches the result
(``cache``) and returns a ``ModuleNetwork``: a ``ModelShape`` without a token sequence, planned
with ``activations pytorch`` only, whose saved-tensor model and training step are its own
(``pytorch_saved``, ``pytorch_step``: the planner asks every network, never its kind). Input sizes
other than the batch take their values from the source (``--set SIZE=N``); the plan varies B.

What the step holds (the same phases as ``library.peak_pytorch``, measured by the same rule as
``measured.measure.step_peak``): resident, the weights, their optimizer state and the buffers;
forward, the inputs and the live bytes at the forward's peak (saved tensors, the loss's
transients); backward, the inputs and the live bytes at its peak (saved tensors and gradients in
flight, the parameters' gradients as they accumulate); optimizer, every gradient, the inputs and
AdamW's temporaries (the single-tensor loop's previous + 2 × current parameter on the CPU, one per
parameter with foreach). What is not modelled is refused in one line: mixed precision, LoRA,
frozen embeddings, recomputation, tensor and pipeline parallelism, serving.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy

from ...core import symbols as symtab
from ...core.errors import UserError
from ...core.symbols import B, N
from ...core.term import Term
from ...library import peak_pytorch as pypeak
from ...math.extrema import maximum
from ...math.formula import Formula
from ..shape import ModelShape
from . import cache, probe
from .kernels import KERNELS
from .source import ModuleError, ModuleSource

FAMILY = "module"  # the saved-tensor model's key (pytorch.saved.module, pytorch.peak.module)
SRC = "torch-meta"
REFUSED = ("{what}: {name} is a torch module probed on the meta device; its step is measured in pure fp32, bf16 or "
           "fp16 full training on one device only")


def _version() -> str:
    import torch

    from ... import __version__

    return f"torch {torch.__version__}; symbolic {__version__}"


# --- plain data for the cache -------------------------------------------------------------------
def _poly_data(p: probe.Poly) -> list[list[Any]]:
    return [[list(e), str(c)] for e, c in p.coefs]


def _poly(data: Sequence[Any]) -> probe.Poly:
    return probe.Poly(tuple((tuple(int(x) for x in e), cache.fraction(c)) for e, c in data))


def _expr_data(expr: sympy.Expr, names: Sequence[str]) -> list[list[Any]]:
    syms = [sympy.Symbol(n) for n in names]  # plain names: the arguments' symbols carry assumptions
    plain = expr.xreplace({s: sympy.Symbol(s.name) for s in expr.free_symbols})
    if not syms:
        return [[[], str(int(plain))]]
    return [[list(e), str(c)] for e, c in sympy.Poly(plain, *syms).terms()]


def _expr(data: Sequence[Any], syms: Sequence[sympy.Symbol]) -> sympy.Expr:
    out = []
    for exps, coef in data:
        c = cache.fraction(coef)
        out.append(sympy.Rational(c.numerator, c.denominator) * sympy.Mul(*(s**int(k) for s, k in zip(syms, exps))))
    return sympy.Add(*out)


def _params_data(p: probe.Params) -> dict[str, Any]:
    names = list(p.values)
    return {"names": names, "values": p.values, "total": p.total, "tensors": list(p.tensors),
            "matrices": [list(m) for m in p.matrices], "buffers": p.buffers, "unexplained": list(p.unexplained),
            "terms": [_term_data(t, names, p.values) for t in p.terms]}


def _term_data(term: Term, names: Sequence[str], values: Mapping[str, int]) -> dict[str, Any]:
    """A parameter term as cache data; one not polynomial in the arguments (a ViT's (image/patch)²) as its number."""
    try:
        return {"key": term.key, "note": term.note, "expr": _expr_data(term.expr, names)}
    except sympy.PolynomialError:
        count = int(term.expr.xreplace({s: values[s.name] for s in term.expr.free_symbols}))
        return {"key": term.key, "note": term.note or probe.NOTE_MEASURED, "expr": [[[0] * len(names), str(count)]]}


def _params(data: Mapping[str, Any], scope: symtab.SymbolScope) -> probe.Params:
    names = [str(n) for n in data["names"]]
    syms = list(probe.argument_symbols(names, scope).values())
    terms = tuple(Term(str(t["key"]), str(t["key"]), _expr(t["expr"], syms), "params", SRC, note=str(t["note"]))
                  for t in data["terms"])
    return probe.Params(terms, int(data["total"]), tuple(int(x) for x in data["tensors"]),
                        {str(k): int(v) for k, v in data["values"].items()},
                        tuple((str(m[0]), int(m[1]), int(m[2]), int(m[3])) for m in data["matrices"]),
                        int(data["buffers"]), tuple(str(u) for u in data["unexplained"]))


def _fit_data(f: probe.StepFit, buffers: int) -> dict[str, Any]:
    return {"names": list(f.names), "saved": [[m, _poly_data(p)] for m, p in f.saved],
            "forward": [_poly_data(p) for p in f.forward], "backward": [_poly_data(p) for p in f.backward],
            "inputs": _poly_data(f.inputs), "buffers": buffers, "shifted": f.shifted}


def _fit(data: Mapping[str, Any]) -> tuple[probe.StepFit, int]:
    return (probe.StepFit(tuple(str(n) for n in data["names"]), tuple((str(m), _poly(p)) for m, p in data["saved"]),
                          tuple(_poly(p) for p in data["forward"]), tuple(_poly(p) for p in data["backward"]),
                          _poly(data["inputs"]), bool(data.get("shifted", False))), int(data["buffers"]))


def _source_key(source: ModuleSource) -> list[Any]:
    inputs = [[i.name, list(i.dims), i.dtype, i.high] for i in source.inputs]
    return [list(source.fingerprint), source.label, dict(source.arguments), inputs, source.loss, _version()]


STRIDE_NOTE = ("; exact where the input sizes are multiples of the network's total stride (32 for a ResNet, the "
               "patch size for a ViT), which keeps every output size a polynomial in them")
SHIFTED_NOTE = ("; fitted at 2, 3 and 4 times the input sizes: at the sizes themselves the forward runs a few "
                "other operators (a ViT at its own image size does not interpolate its position embeddings)")


# --- the network --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModuleNetwork(ModelShape):
    """A torch module as the planner sees it (see the module docstring)."""

    module_source: Any = field(default=None, compare=False, repr=False)  # the ModuleSource
    probed: Any = field(default=None, compare=False, repr=False)  # probe.Params
    symbols: Any = field(default=None, compare=False, repr=False)  # the arguments' SymbolScope
    from_cache: bool = field(default=False, compare=False)
    _fits: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def total(self) -> int:
        return int(self.probed.total)

    @property
    def scope(self) -> symtab.SymbolScope:
        return self.symbols

    @property
    def active(self) -> int | None:
        return None

    @property
    def layers(self) -> int:
        return 1

    @property
    def layer_kinds(self) -> dict[str, int]:
        return {"module": 1}

    @property
    def pytorch_family(self) -> str | None:
        return FAMILY

    @property
    def lora_targets(self) -> tuple[str, ...]:
        return ()

    @property
    def attention_bias(self) -> bool:
        return False

    def lora_layout(self) -> str:
        raise UserError(REFUSED.format(what="LoRA", name=self.name))

    def sizes(self) -> dict[str, int]:
        """The input sizes' values the plan uses (the source's, with --set's)."""
        return {n: int(v) for n, v in self.module_source.sizes.items()}

    def step_fit(self, dtype: str, device: str | None = None) -> tuple[probe.StepFit, int, bool]:
        """One step's fitted bytes in ``dtype`` (probed once, then cached on disk), its buffers' bytes, from cache.

        ``device`` "cpu": attention as the CPU's kernels run it (``kernels.py``); else the reference path.
        """
        kernels = device if device in KERNELS else None
        if (dtype, kernels) not in self._fits:
            source = self.module_source

            def make() -> dict[str, Any]:
                fit = probe.fit_step(source, dtype, kernels)
                module = probe.build(source, dtype=dtype)
                return _fit_data(fit, sum(int(b.untyped_storage().nbytes()) for b in module.buffers()))

            parts = (dtype,) if kernels is None else (dtype, kernels)
            name = cache.key("step", _source_key(source), dict(source.sizes), *parts)
            data, hit = cache.cached(name, make)
            self._fits[(dtype, kernels)] = (*_fit(data), hit)
        return self._fits[(dtype, kernels)]

    def _at(self, poly: probe.Poly, names: Sequence[str]) -> sympy.Expr:
        sizes = self.sizes()
        return poly.expr([B, *(sympy.Integer(sizes[n]) for n in names)])

    def pytorch_saved(self, setup: Any, refused: Sequence[str] = ()) -> Any:
        """The saved-tensor model: one term per module that saves (the loss's as ``loss.``), in B."""
        from ...library import activations_pytorch as act

        self._refuse(setup, refused)
        fit, _, _ = self.step_fit(probe.DTYPES[setup.precision], setup.device)
        terms, saved_by = [], {}
        for name, poly in fit.saved:
            key = "loss.outside" if name == probe.TOP else name
            terms.append(Term(key, f"saved by {name}" if name != probe.TOP else "saved by the loss (outside the module)",
                              self._at(poly, fit.names), "bytes", SRC, f"saved by {name}"))
            saved_by[key] = name
        if not terms:
            terms.append(Term("nothing", "nothing saved", sympy.Integer(0), "bytes", SRC))
            saved_by["nothing"] = ""
        formula = Formula(f"pytorch.saved.{FAMILY}", f"Bytes saved for backward by one training step of {self.name} "
                          f"({setup.precision})", terms, source=SRC, name="A_saved",
                          note="Measured on the meta device with saved_tensors_hooks at several batch sizes and input "
                               "sizes, fitted exactly and checked at a further point (symbolic/networks/module).")
        return act.SavedModel(FAMILY, setup, formula, saved_by)

    def _refuse(self, setup: Any, refused: Sequence[str]) -> None:
        if setup.mixed:
            raise UserError(REFUSED.format(what=f"precision {setup.precision}", name=self.name))
        if refused:
            raise UserError(REFUSED.format(what=", ".join(refused), name=self.name))

    def pytorch_step(self, setup: Any, saved: Any, *, optimizer: str, accumulate: int = 1,
                     in_backward: bool = False) -> Any:
        """The training step's phases (contract S) from the fitted live bytes (see the module docstring)."""
        fit, buffers, _ = self.step_fit(probe.DTYPES[setup.precision], setup.device)
        tb = setup.param_bytes
        foreach = setup.device == "cuda"
        where = f"pytorch.step.{FAMILY}"

        def term(key: str, title: str, expr: sympy.Expr, note: str = "") -> Term:
            return Term(key, title, sympy.sympify(expr), "bytes", SRC, where, note)

        resident = [term("weights", "trainable weights", tb * N, "Parameters in the compute dtype.")]
        if buffers:
            resident.append(term("buffers", "the module's buffers (running statistics)", sympy.Integer(buffers)))
        if optimizer == "adamw":
            resident.append(term("optimizer_state", "AdamW moments exp_avg and exp_avg_sq", 2 * tb * N))
        elif optimizer == "sgd-momentum":
            resident.append(term("optimizer_state", "SGD momentum buffers", tb * N))
        inputs = self._at(fit.inputs, fit.names)
        saved_expr = saved.formula.expr
        forward = maximum(*(self._at(p, fit.names) for p in fit.forward))
        backward = maximum(*(self._at(p, fit.names) for p in fit.backward))
        sizes = [sympy.Integer(n) for n in self.probed.tensors]
        if optimizer == "adamw" and sizes:
            temporaries = tb * (N if foreach else pypeak.adamw_cpu_temporaries(sizes))
        else:
            temporaries = sympy.Integer(0)
        phases = {
            "forward": (term("saved", "tensors saved for backward (A_saved)", saved_expr),
                        term("forward_transients", "the inputs and what the forward and the loss hold besides the saved "
                             "tensors at the forward's peak", inputs + forward - saved_expr,
                             "Live bytes after every operator on the meta device, fitted in B and the input sizes.")),
            "backward": (term("backward_live", "the inputs and everything alive at backward's peak (saved tensors, "
                              "gradients in flight, the parameters' gradients so far)", inputs + backward,
                              "Live bytes after every operator of backward on the meta device."),),
            "optimizer": (term("gradients", "gradients of the trainable weights", tb * N),
                          term("optimizer_temporaries", "the optimizer step's temporaries", temporaries,
                               "AdamW single-tensor loop (CPU): previous + 2 × current parameter; foreach (CUDA): one "
                               "per parameter." if optimizer == "adamw" else "in place: none"),
                          term("inputs", "the step's inputs, still held by the caller", inputs)),
        }
        if accumulate > 1 or in_backward:
            per = 1 if foreach else 2
            largest = max(self.probed.tensors) if self.probed.tensors else 0
            moment = tb * largest * (1 + (per if optimizer == "adamw" else 0)) + inputs
            phases = pypeak.lifetime_phases(phases, accumulate, in_backward, maximum(inputs + backward, moment))
        return ModuleStep(FAMILY, setup, saved, tuple(resident), phases, optimizer, foreach, False, False, "module",
                          (STRIDE_NOTE if fit.names else "") + (SHIFTED_NOTE if fit.shifted else ""))

    def layer_activations(self, variant: Any, recompute: str, tp: sympy.Expr | int, sp: bool) -> sympy.Expr:
        raise UserError(f"{self.name} is planned with activations pytorch only (its saved tensors are measured)")

    def activations_label(self, variant: Any) -> str:
        return "what the module saves for backward, measured"

    def params_table(self) -> list[tuple[str, sympy.Expr, int, str]]:
        """(group, formula, count, note) per parameter group: what ``symbolic params`` prints."""
        values = {s: self.numbers[s.name] for t in self.probed.terms for s in t.expr.free_symbols}
        return [(t.key, t.expr, int(t.expr.xreplace(values)), t.note) for t in self.probed.terms]

    def saved_formula(self, precision: str = "fp32") -> sympy.Expr:
        """The bytes saved for backward as a polynomial in B and the input sizes (their own symbols)."""
        fit, _, _ = self.step_fit(probe.DTYPES[precision])
        return fit.saved_total().expr([B, *(sympy.Symbol(n, positive=True, integer=True) for n in fit.names)])


@dataclass(frozen=True)
class ModuleStep(pypeak.StepModel):
    """A module's training step: ``library.peak_pytorch.StepModel`` with its own ``formula``."""

    fit_note: str = ""  # what the probe's fit says about its input sizes (STRIDE_NOTE, SHIFTED_NOTE)

    def formula(self) -> Formula:
        """``pytorch.peak.module``: the resident terms and the largest phase's own."""
        phase = Term("phase", "the largest phase: " + " | ".join(
            f"{n}: " + " + ".join(t.key for t in ts) for n, ts in self.phases.items()),
            maximum(*self.phase_extras().values()), "bytes", SRC, "peak",
            "the module's step: forward and backward measured on the meta device; the optimizer's temporaries as "
            "PyTorch's " + self.optimizer + (" foreach" if self.foreach else " single-tensor loop") + " keeps them"
            + self.fit_note)
        return Formula(f"pytorch.peak.{FAMILY}", "Peak memory of one training step of a torch module",
                       (*self.resident, phase), source=SRC, name="M_peak")


def module_network(source: ModuleSource) -> ModuleNetwork:
    """The Network of a module source: parameters probed (or read from the cache) on the meta device."""
    scope = symtab.SymbolScope()
    name = cache.key("params", _source_key(source))
    data, hit = cache.cached(name, lambda: _params_data(probe.parameters(source, scope)))
    params = _params(data, scope)
    numbers = dict(params.values)
    if not params.terms:
        raise ModuleError(f"{source.label} has no parameters: there is nothing to train")
    formula = Formula("module.params", f"Parameters of {source.label}", params.terms, source=SRC, name="N",
                      note="Probed on the meta device from the constructor's integer arguments.")
    matrices = tuple((m, sympy.Integer(r), sympy.Integer(c), sympy.Integer(n)) for m, r, c, n in params.matrices)
    one = sympy.Integer(1)
    return ModuleNetwork(
        name=source.label, model_type="module", numbers=numbers, params=formula, head_dim=one, kv_heads=one,
        ffn=one, gated=False, moe=False, first_stage=sympy.Integer(0), head=sympy.Integer(0), matrices=matrices,
        positions=0, source=f"{source.origin}: {source.label}, probed on the meta device", cache_kinds=(),
        config={"model_type": "module"}, kind="module", label=f"the torch module {source.label}", sequence=False,
        has_attention=False, tensor_parallel=False, saved_family=FAMILY,
        cannot_say={"serving": f"serving a torch module ({source.label}) is not modelled: it is planned for training",
                    "flops": "FLOPs of a torch module are not modelled yet"},
        module_source=source, probed=params, symbols=scope, from_cache=hit)
