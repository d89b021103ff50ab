"""Optimizer states: bytes each optimizer keeps per parameter, with sources.

Every optimizer here keeps some number of full-size per-parameter states (SGD none, momentum
one, Adam/AdamW two, Lion one), except two that change the element size or the shape:

- ``adam-8bit`` (bitsandbytes, Dettmers et al. 2022) stores Adam's two states as 8-bit codes
  in blocks with one fp32 absmax per block. The paper's blocks are 2048 elements; bitsandbytes
  has used 256 since 0.44.0 (0.50.2: ``optim/optimizer.py``, ``Optimizer2State.init_state``,
  ``blocksize = 256``), so 2 · (1 + 4/256) = 2 + 1/32 bytes per parameter, whatever the
  training precision. bitsandbytes keeps tensors smaller than
  4096 elements (norm weights, biases) in 32-bit; that difference is ignored here. torchao's
  ``AdamW8bit`` keeps the same layout; what each one's step allocates is ``adam_8bit_step``'s.
- ``adafactor`` (Shazeer & Stern 2018, no first moment: the paper's and Hugging Face's default
  beta1 = None) keeps, for an r × c weight matrix, a row accumulator of r and a column
  accumulator of c numbers instead of r·c: "square-root sized". With only the parameter count
  N known, the library formula assumes n_mat equal square matrices, each of N/n_mat
  parameters, so the state is 2·sqrt(N/n_mat) numbers per matrix and 2·sqrt(n_mat·N) in all.
  The planner does better: it sums r + c over the model's real matrices
  (``factored_entries``). For Llama-3-8B the approximation (226 matrices) gives 2,694,319
  numbers against the exact 2,886,144 (7 % low). Vectors (norms, biases) keep a full second
  moment; they are ignored in both forms (< 0.01 % of N for the models in the presets).

The element size of the states is the regime's (fp32 4 in fp32 and mixed precision; 2 in pure
bf16, where PyTorch creates the states in the parameters' dtype).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sympy

from ..core.errors import UnknownNameError
from ..core.symbols import N, n_mat
from ..core.term import Term
from ..math.formula import Formula
from .registry import register

BLOCK_8BIT = 256  # bitsandbytes >= 0.44 block-wise quantization: elements per fp32 absmax (the paper: 2048)


@dataclass(frozen=True)
class Optimizer:
    """One optimizer's per-parameter state."""

    key: str
    title: str
    states: int  # full-size states per parameter (before quantization)
    source: str
    where: str
    note: str
    quantized: bool = False  # 8-bit codes + fp32 absmax per BLOCK_8BIT elements
    factored: bool = False  # Adafactor: row + column accumulators per matrix

    def bytes_per_param(self, state_bytes: int | sympy.Rational) -> sympy.Rational | None:
        """State bytes per parameter at this element size; None for the factored optimizer."""
        if self.factored:
            return None
        if self.quantized:
            return sympy.Integer(self.states) * (1 + sympy.Rational(4, BLOCK_8BIT))
        return sympy.Integer(self.states) * sympy.Rational(state_bytes)

    def state_expr(self, params: sympy.Expr, state_bytes: int | sympy.Rational,
                   factored_entries: sympy.Expr | None = None) -> sympy.Expr:
        """Bytes of state for ``params`` parameters.

        For Adafactor ``factored_entries`` is Σ(rows + columns) over the weight matrices; without
        it the square-matrix approximation 2·sqrt(n_mat·params) is used.
        """
        if self.factored:
            entries = factored_entries if factored_entries is not None else 2 * sympy.sqrt(n_mat * params)
            return sympy.Rational(state_bytes) * entries
        return self.bytes_per_param(state_bytes) * params  # type: ignore[operator]


OPTIMIZERS: dict[str, Optimizer] = {o.key: o for o in (
    Optimizer("sgd", "SGD (no momentum)", 0, "pytorch", "torch.optim.SGD(momentum=0)",
              "Plain SGD keeps no state."),
    Optimizer("sgd-momentum", "SGD with momentum", 1, "pytorch", "torch.optim.SGD(momentum>0)",
              "One momentum buffer per parameter (EleutherAI counts 8 bytes/param with the fp32 master copy)."),
    Optimizer("adamw", "Adam / AdamW", 2, "zero2020", "§3.1 (K = 12 with the fp32 master copy)",
              "First and second moments m and v per parameter."),
    Optimizer("adam-8bit", "8-bit Adam (bitsandbytes)", 2, "dettmers2022", "§2 block-wise quantization",
              "m and v as 8-bit codes, one fp32 absmax per 256-element block (bitsandbytes >= 0.44; the paper's "
              "blocks are 2048): 2 + 1/32 bytes/param; "
              "tensors under 4096 elements stay 32-bit in bitsandbytes (ignored).", quantized=True),
    Optimizer("lion", "Lion", 1, "chen2023", "Algorithm 2",
              "Only the momentum is kept (half of Adam's state)."),
    Optimizer("adafactor", "Adafactor (factored second moment, no momentum)", 1, "shazeer2018", "§3 factored "
              "second-moment estimation", "Row and column accumulators per r × c matrix: r + c numbers instead of "
              "r·c. Library form assumes n_mat equal square matrices: 2·sqrt(n_mat·N) numbers.", factored=True),
)}


def get(key: str) -> Optimizer:
    """The optimizer called ``key``; a one-line error naming the choices otherwise."""
    try:
        return OPTIMIZERS[key]
    except KeyError:
        raise UnknownNameError(f"unknown optimizer {key!r}; choose from {', '.join(OPTIMIZERS)}") from None


def factored_entries(matrices: Iterable[tuple[sympy.Expr, sympy.Expr]]) -> sympy.Expr:
    """Σ (rows + columns) over weight matrices given as (rows, columns): Adafactor's state count."""
    return sympy.Add(*(r + c for r, c in matrices))


for _opt in OPTIMIZERS.values():
    _term = Term("optimizer_states", f"{_opt.title}: state (fp32)", _opt.state_expr(N, 4), "bytes", _opt.source,
                 _opt.where, _opt.note)
    register(Formula(f"optimizer.{_opt.key}", f"Optimizer state of {_opt.title}, fp32 states", (_term,),
                     source=_opt.source, where=_opt.where, name="M_opt",
                     example={"N": 7_000_000_000, **({"n_mat": 226} if _opt.factored else {})},
                     note=_opt.note))
