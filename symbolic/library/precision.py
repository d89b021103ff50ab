"""Model states under a precision regime: weights, gradients, master weights, optimizer states.

Each copy a training run keeps per parameter is its own named term, so that the published
"bytes per parameter" figures come out of stated choices instead of hidden ones:

========================  =======  =============  ======  =========  =====
choice                    weights  gradients      master  Adam m+v   total
========================  =======  =============  ======  =========  =====
ZeRO paper (fp16-mixed)   2        2 (16-bit)     4       8          16
Megatron (bf16-mixed)     2        4 (fp32)       4       8          18
DeepSpeed / Megatron fp16 2        2 + 4 (both)   4       8          20
fp32                      4        4              0       8          16
pure bf16                 2        2              0       4          8
========================  =======  =============  ======  =========  =====

Regimes (``PRECISIONS``):

- ``fp32``: fp32 weights and gradients, no master copy, fp32 optimizer states. PyTorch autocast
  ("AMP" with fp32 parameters) has these model states too; only its activations are 16-bit.
- ``bf16-mixed`` / ``fp16-mixed``: 16-bit weights for the forward and backward pass, an fp32
  master copy the optimizer updates (Micikevicius et al. 2018), fp32 optimizer states. The
  gradients are a choice (``GRADS``): ``16bit`` (the ZeRO paper's 2Ψ), ``fp32`` (Megatron
  accumulates bf16 runs' gradients in an fp32 ``main_grad`` buffer) or ``16bit+fp32`` (the
  16-bit gradients plus an fp32 copy for the optimizer: DeepSpeed's ZeRO-2 estimator and
  Megatron's fp16 row). Defaults: bf16-mixed → fp32 (Megatron, llm-analysis: 18 bytes),
  fp16-mixed → 16bit (ZeRO paper: 16 bytes).
- ``bf16``: everything in bf16, no master copy; optimizer states in bf16 (PyTorch creates them in
  the parameters' dtype).
- ``fp8``: torchao float8 training (``library.fsdp``): the model states of ``bf16-mixed``, the
  linear layers' matmuls at the fp8 rate on transient float8 casts of their operands.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .. import formats
from ..core.errors import UnknownNameError, UserError
from ..core.symbols import N
from ..core.term import Term
from ..math.formula import Formula
from . import optimizers as optim
from .registry import register

GRADS = {
    "16bit": "Gradients in the 16-bit training dtype.",
    "fp32": "Gradients accumulated in fp32 (Megatron's main_grad buffer).",
    "16bit+fp32": "16-bit gradients plus an fp32 copy for the optimizer (DeepSpeed, Megatron fp16).",
}

# The kinds of model-state term; parallel.py decides which ZeRO stage shards which kind.
STATE_KINDS = ("weights", "gradients", "fp32_gradients", "master_weights", "optimizer_states")


@dataclass(frozen=True)
class Precision:
    """A training precision regime: the format of each copy of the model (bytes from ``symbolic.formats``)."""

    key: str
    title: str
    dtype: str  # the training dtype, the weights' format: fp32, bf16 or fp16
    master: str  # format of the separate master copy ("": none)
    states: str  # format of the optimizer states
    activations: str  # format of stored activations
    default_grads: str
    grads: tuple[str, ...]  # allowed gradient choices
    source: str
    note: str
    rate: str = ""  # the format whose GPU rate the matmuls run at ("": the training dtype's)

    @property
    def compute_rate(self) -> str:
        """The format whose peak FLOP/s the step's matmuls run at (``time`` reads it)."""
        return self.rate or self.dtype

    @property
    def weight_bytes(self) -> int:
        """Bytes per weight of the copy the passes read."""
        return int(formats.nbytes(self.dtype))

    @property
    def master_bytes(self) -> int:
        """Bytes per weight of the master copy (0: none)."""
        return int(formats.nbytes(self.master)) if self.master else 0

    @property
    def state_bytes(self) -> int:
        """Bytes per optimizer-state element."""
        return int(formats.nbytes(self.states))

    @property
    def activation_bytes(self) -> int:
        """Bytes per stored activation element."""
        return int(formats.nbytes(self.activations))

    def grad_bytes(self, choice: str) -> int:
        """Bytes per gradient element of a gradient choice (``GRADS``): fp32, else the training dtype's."""
        return int(formats.nbytes("fp32" if choice == "fp32" else self.dtype))

    def grad_choice(self, grads: str | None) -> str:
        """The gradient choice, checked; ``None`` gives the regime's default."""
        choice = grads or self.default_grads
        if choice not in GRADS:
            raise UnknownNameError(f"unknown gradient dtype {choice!r}; choose from {', '.join(GRADS)}")
        if choice not in self.grads:
            raise UserError(f"precision {self.key} keeps {self.default_grads} gradients; "
                            f"{choice!r} applies to {', '.join(k for k, p in PRECISIONS.items() if choice in p.grads)}")
        return choice


PRECISIONS: dict[str, Precision] = {p.key: p for p in (
    Precision("fp32", "fp32 weights, gradients and optimizer states", "fp32", "", "fp32", "fp32", "fp32", ("fp32",),
              "pytorch", "No master copy: the weights are already fp32."),
    Precision("bf16-mixed", "bf16 weights with an fp32 master copy", "bf16", "fp32", "fp32", "bf16", "fp32",
              ("16bit", "fp32", "16bit+fp32"), "micikevicius2018",
              "Gradients default to fp32 (Megatron's bf16 default: main_grad accumulated in fp32)."),
    Precision("fp16-mixed", "fp16 weights with an fp32 master copy", "fp16", "fp32", "fp32", "fp16", "16bit",
              ("16bit", "fp32", "16bit+fp32"), "micikevicius2018",
              "Gradients default to fp16 (the ZeRO paper's accounting); 16bit+fp32 is DeepSpeed's and "
              "Megatron's fp16 row (20 bytes)."),
    Precision("bf16", "pure bf16: weights, gradients and optimizer states in bf16", "bf16", "", "bf16", "bf16",
              "16bit", ("16bit",), "pytorch",
              "No master copy; AdamW's m and v in bf16 (PyTorch's zeros_like(param))."),
    Precision("fp8", "float8 linear layers (torchao): bf16-mixed model states, matmuls on float8 casts", "bf16",
              "fp32", "fp32", "bf16", "fp32", ("16bit", "fp32", "16bit+fp32"), "torchao-float8",
              "Master weights, gradients and optimizer states as bf16-mixed; each linear casts its input and "
              "weight to e4m3 per matmul and saves the bf16 ones (torchao's Float8Linear).", rate="fp8"),
)}
# precisions whose model states equal another's (no formulas of their own in the registry)
SAME_STATES = {"fp8": "bf16-mixed"}


def get(key: str) -> Precision:
    """The precision regime called ``key``; a one-line error naming the choices otherwise."""
    try:
        return PRECISIONS[key]
    except KeyError:
        raise UnknownNameError(f"unknown precision {key!r}; choose from {', '.join(PRECISIONS)}") from None


def state_terms(precision: str, optimizer: str, grads: str | None = None, *, params: sympy.Expr = N,
                factored_entries: sympy.Expr | None = None) -> list[Term]:
    """Unsharded model-state terms (keys from ``STATE_KINDS``) for ``params`` parameters.

    Terms that are zero in this regime (no master copy, no fp32 gradient copy) are left out;
    SGD's empty state is kept as a zero term so that the optimizer is visible.
    """
    prec = get(precision)
    opt = optim.get(optimizer)
    choice = prec.grad_choice(grads)
    terms = [Term("weights", f"{prec.dtype} weights", prec.weight_bytes * params, "bytes", prec.source, "",
                  "The copy the forward and backward passes read.")]
    grad_bytes = prec.grad_bytes(choice)
    grad_src = "megatron" if choice == "fp32" and prec.master_bytes else ("zero2020" if prec.master_bytes else "pytorch")
    terms.append(Term("gradients", f"{'fp32' if choice == 'fp32' else prec.dtype} gradients", grad_bytes * params,
                      "bytes", grad_src, "", GRADS[choice]))
    if choice == "16bit+fp32":
        terms.append(Term("fp32_gradients", "fp32 copy of the gradients for the optimizer",
                          prec.grad_bytes("fp32") * params, "bytes", "deepspeed",
                          "estimate_zero2_model_states_mem_needs",
                          "DeepSpeed's fp32 gradient partition (and Megatron's fp16 main grads); sharded with the "
                          "optimizer states from ZeRO stage 1 (Megatron's fp16 row: 4 + 16/d)."))
    if prec.master_bytes:
        terms.append(Term("master_weights", f"{prec.master} master weights", prec.master_bytes * params, "bytes",
                          "micikevicius2018", "§3.1", "The optimizer updates this copy; ZeRO counts it in K."))
    title = f"{opt.title} states" + ("" if opt.quantized else f" ({prec.states})")
    terms.append(Term("optimizer_states", title, opt.state_expr(params, prec.state_bytes, factored_entries),
                      "bytes", opt.source, opt.where, opt.note))
    return terms


def bytes_per_param(precision: str, optimizer: str, grads: str | None = None) -> sympy.Rational | None:
    """Model-state bytes per parameter on one GPU without sharding (None for Adafactor)."""
    if optim.get(optimizer).factored:
        return None
    total = sympy.Add(*(t.expr for t in state_terms(precision, optimizer, grads)))
    return sympy.Rational(total / N)


def states_formula(key: str, title: str, precision: str, optimizer: str, grads: str | None = None,
                   note: str = "", source: str | None = None) -> Formula:
    """A model-states formula over N for one regime (not registered)."""
    terms = state_terms(precision, optimizer, grads)
    opt = optim.get(optimizer)
    example: dict[str, int | str] = {"N": 7_000_000_000}
    if opt.factored:
        example["n_mat"] = 226
    return Formula(key, title, terms, source=source or get(precision).source, name="M_states", example=example,
                   note=note)


def _register_all() -> None:
    for prec in PRECISIONS.values():
        if prec.key in SAME_STATES:
            continue
        for opt in optim.OPTIMIZERS.values():
            per = bytes_per_param(prec.key, opt.key)
            size = f" ({per} bytes/param)" if per is not None else ""
            register(states_formula(f"states.{prec.key}.{opt.key}", f"Model states: {prec.key}, {opt.title}{size}",
                                    prec.key, opt.key, note=f"{prec.title}. {GRADS[prec.default_grads]}"))
    register(states_formula("states.zero2020", "Model states as the ZeRO paper counts them: 2Ψ + 2Ψ + 12Ψ = 16Ψ",
                            "fp16-mixed", "adamw", "16bit",
                            note="fp16 weights and gradients, K = 12 (fp32 master 4 + Adam m and v 8).", source="zero2020"))
    register(states_formula("states.megatron", "Model states as Megatron counts them: 18 bytes/param",
                            "bf16-mixed", "adamw", "fp32",
                            note="bf16 weights, fp32 main gradients, fp32 master and Adam states "
                                 "(theoretical_memory_usage.py: 18; distributed optimizer 6 + 12/d).", source="megatron"))
    register(states_formula("states.deepspeed", "Model states as DeepSpeed's ZeRO-2 estimator counts them: 20 bytes/param",
                            "fp16-mixed", "adamw", "16bit+fp32",
                            note="fp16 weights and gradients plus an fp32 gradient copy (2 + 18/N_d at ZeRO-2; 20 on "
                                 "one GPU); also Megatron's fp16/fp16 row (20; distributed 4 + 16/d).", source="deepspeed"))


_register_all()
