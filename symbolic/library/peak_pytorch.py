"""Peak memory of a whole PyTorch training step (forward, backward, AdamW step), as terms.

The step is ``zero_grad(set_to_none=True)``; ``loss = loss_fn(model(x))``; ``loss.backward()``;
``opt.step()``, in the steady state (step 2 onwards, when AdamW's moments exist), with weights,
gradients and moments all in the compute dtype (pure fp32 or pure bf16 training, no autocast).
Measured on the CPU with ``symbolic.measure.step_peak``, the live bytes peak at one of two moments:

1. Early in backward, inside the loss's backward: everything saved for backward (``A_saved``,
   which includes the input ids or the input ``x``) is alive, plus the loss's first gradients.
   For a Hugging Face causal LM these are the fp32 gradients of ``nll_loss`` and of
   ``log_softmax``, B·S·V each: 8·B·S·V bytes (article A's network: two B·n_out tensors). No
   parameter gradient exists yet: they were set to None before the forward pass.
2. In the optimizer step: every gradient (N·b), the inputs the caller still holds, and AdamW's
   temporaries. PyTorch's default AdamW on the CPU is the single-tensor loop. Its
   ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` holds two temporaries the
   size of the parameter being updated, while the previous parameter's ``denom`` is still alive
   (the loop variable is only rebound at the next iteration): max over consecutive parameters of
   (previous + 2 · current) elements, in ``named_parameters()`` order. On CUDA the default is the
   ``foreach`` implementation, whose ``_foreach_sqrt`` makes one temporary per parameter at
   once: N·b. With a tied embedding the end of backward also holds the two V·H gradients
   (embedding backward and its sum with the LM head's), 2·V·H·b, which the CPU term covers.

So M_peak = N·b (weights) + 2·N·b (AdamW moments) + max(A_saved + X_loss, N·b + X_opt + inputs).

Not counted: tensors of a few bytes (AdamW's per-parameter step counters, the loss scalar), and
on CUDA the allocator's rounding to 512-byte blocks and its workspaces (cuBLAS, attention
kernels), which ``torch.cuda.max_memory_allocated`` includes.

The maxima are built by ``maximum``, not ``sympy.Max``: SymPy compares every pair of arguments
through its assumption system (about 110 ms at import for the registered formulas), where for
these polynomials in nonnegative symbols ``maximum`` makes the same proofs from the coefficients
of each difference (about 10 ms); the expressions are identical (``tests/test_activations_pytorch.py``
checks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sympy

from ..formula import Formula
from ..symbols import B, H, N, S, V, a, a_kv, d_ff, d_h, d_head, d_in, n_out, n_pos
from ..term import Term
from . import activations_pytorch as act
from .registry import register

SRC = "pytorch"
BIG = 1000  # a large size, for the sample points in _at_least


@dataclass(frozen=True)
class PeakModel:
    """The peak formula of one family and setup, its saved-tensor model and its two phases."""

    saved: act.SavedModel
    formula: Formula
    tied: bool
    backward: sympy.Expr
    optimizer: sympy.Expr

    def phases(self) -> dict[str, sympy.Expr]:
        """The two candidate peaks as whole-step totals: early backward and the optimizer step."""
        base = self.formula.term("weights").expr + self.formula.term("adamw").expr
        return {"backward": base + self.backward, "optimizer": base + self.optimizer}


def parameter_tensors(family: str, *, bias: bool = True, tied: bool = True) -> list[sympy.Expr]:
    """Elements of each parameter tensor in ``named_parameters()`` order (one layer, as repeated).

    ``bias``: the MLP's ``nn.Linear`` biases, or Llama-family q/k/v projection biases (Qwen2).
    """
    if family == "mlp":
        weights = [d_in * d_h, d_h**2, d_h * d_in, d_in * n_out]
        biases = [d_h, d_h, d_in, n_out]
        return [x for w, c in zip(weights, biases) for x in ((w, c) if bias else (w,))]
    if family == "gpt2":
        layer = [H, H, 3 * H**2, 3 * H, H**2, H, H, H, H * d_ff, d_ff, d_ff * H, H]
        return [V * H, n_pos * H, *layer, *layer, H, H]
    q, kv = a * d_head, a_kv * d_head
    attn = [q * H, q, kv * H, kv, kv * H, kv] if bias else [q * H, kv * H, kv * H]
    layer = [*attn, H * q, H * d_ff, H * d_ff, d_ff * H, H, H]
    return [V * H, *layer, *layer, H, *([] if tied else [V * H])]


def maximum(*args: sympy.Expr) -> sympy.Expr:
    """``sympy.Max(*args)`` for polynomials in nonnegative symbols, without SymPy's slow search.

    SymPy's Max drops an argument another one provably exceeds and keeps the rest, asking its
    assumption system about every pair (about 110 ms for this module's registered formulas).
    The same two proofs are made here directly on ``big − small``: expanded, it has no negative
    coefficient; or, its terms' common monomial taken out, what is left is known to be
    nonnegative (``d_ff·(H − 1)`` with H a positive integer). An inner Max or Min of
    nonnegative arguments counts as one more nonnegative symbol. The arguments no other one
    dominates are kept unevaluated (``evaluate=False``; SymPy orders them the same way). Only
    true inequalities are used, so the value is ``sympy.Max``'s at every point, and on this
    module's formulas the expression is identical (``tests/test_activations_pytorch.py``). With a
    symbol not known to be nonnegative, or anything but polynomials, it is ``sympy.Max``.
    """
    exprs = list(dict.fromkeys(sympy.sympify(x) for x in args))
    inner = set().union(*(x.atoms(sympy.Max, sympy.Min) for x in exprs))
    stand_in = {m: sympy.Dummy(nonnegative=True) for m in inner}
    plain = [x.xreplace(stand_in) for x in exprs]
    gens = sorted(set().union(*(x.free_symbols for x in plain)), key=sympy.default_sort_key)
    if (len(exprs) < 2 or not gens or not all(s.is_nonnegative for s in gens)
            or not all(m.is_nonnegative for m in inner) or not all(x.is_polynomial(*gens) for x in plain)):
        return sympy.Max(*exprs)
    polys: dict[sympy.Poly, sympy.Expr] = {}
    for x, px in zip(exprs, plain):
        polys.setdefault(sympy.Poly(px, *gens), x)  # equal polynomials: the first one stands for both
    kept = [x for p, x in polys.items() if not any(q is not p and _at_least(q - p) for q in polys)]
    return kept[0] if len(kept) == 1 else sympy.Max(*kept, evaluate=False)


def _at_least(gap: sympy.Poly) -> bool:
    """Whether ``gap`` (= big − small, see ``maximum``) is proved ≥ 0 at nonnegative symbols."""
    if all(c >= 0 for c in gap.coeffs()):
        return True
    _, rest = gap.terms_gcd()
    # SymPy's proofs are sound: a cofactor negative somewhere is never proved nonnegative, and
    # evaluating it at a few points is far cheaper than asking (most cofactors fail here)
    low = [1 if g.is_integer and g.is_positive else 0 for g in rest.gens]
    points = [low] + [[BIG if i == j else x for j, x in enumerate(low)] for i in range(len(low))]
    points += [[x if i == j else BIG for j, x in enumerate(low)] for i in range(len(low))]
    terms = rest.terms()
    if any(sum(c * math.prod(x**e for x, e in zip(point, m)) for m, c in terms) < 0 for point in points):
        return False
    return rest.as_expr().is_nonnegative is True


def adamw_cpu_temporaries(sizes: list[sympy.Expr]) -> sympy.Expr:
    """Elements alive in the single-tensor AdamW loop: max of previous + 2 · current."""
    pairs = {2 * sizes[0]} | {prev + 2 * cur for prev, cur in zip(sizes, sizes[1:])}
    return maximum(*pairs)


def loss_backward_extra(family: str) -> sympy.Expr:
    """Gradients alive with all saved tensors at the start of backward (see the docstring)."""
    if family == "mlp":
        return 2 * B * n_out  # times b: cross-entropy runs in the compute dtype
    return 8 * B * S * V


def input_bytes(family: str, b: int) -> sympy.Expr:
    """The step's inputs: x and int64 targets, or the int64 ids (labels are the same tensor)."""
    return b * B * d_in + 8 * B if family == "mlp" else 8 * B * S


def peak(family: str, setup: act.Setup | None = None, *, tied: bool | None = None, bias: bool | None = None,
         **options: object) -> PeakModel:
    """Peak bytes of one steady-state training step with AdamW (see the module docstring).

    ``tied``: the LM head shares the embedding (default: GPT-2 yes, Llama no). ``bias``: see
    ``parameter_tensors`` (default: the MLP yes, Llama no). N, the exact parameter count, stays
    a symbol: give it as a value (``validate`` passes the counted one).
    """
    model = act.saved(family, setup, **options)
    s = model.setup
    b = s.b
    tied = (family == "gpt2") if tied is None else tied
    bias = (family == "mlp") if bias is None else bias
    if s.device == "cpu":
        x_opt = b * adamw_cpu_temporaries(parameter_tensors(family, bias=bias, tied=tied))
        opt_note = ("CPU AdamW (single-tensor loop): the previous parameter's denominator and two temporaries "
                    "the size of the current one.")
    else:
        x_opt = maximum(b * N, 2 * b * V * H) if tied and family != "mlp" else b * N
        opt_note = "CUDA AdamW (foreach): one temporary per parameter, N·b, at once."
    extra = loss_backward_extra(family) * (b if family == "mlp" else 1)
    backward = model.formula.expr + extra
    optimizer = b * N + x_opt + input_bytes(family, b)
    terms = (
        Term("weights", "weights", b * N, "bytes", SRC, "step", "Parameters in the compute dtype."),
        Term("adamw", "AdamW moments exp_avg and exp_avg_sq", 2 * b * N, "bytes", SRC, "optimizer state",
             "torch.zeros_like(param): the parameters' dtype."),
        Term("phase", "the larger of: saved tensors + loss gradients (early backward) | gradients + AdamW "
                      "temporaries + inputs (optimizer step)",
             maximum(backward, optimizer), "bytes", SRC, "peak", opt_note),
    )
    names = {x.name for t in terms for x in t.expr.free_symbols}
    example = {k: v for k, v in {**act.EXAMPLES[family], **_EXAMPLE_N[family]}.items() if k in names}
    formula = Formula(
        f"pytorch.peak.{family}", f"Peak memory of one AdamW training step of {act.TITLES[family]} ({s.label(family)})",
        terms, source=SRC, name="M_peak", example=example,
        note="Steady state (AdamW moments exist); measured with symbolic.measure.step_peak.")
    return PeakModel(model, formula, tied, backward, optimizer)


_EXAMPLE_N = {"mlp": {"N": 33_585_162}, "gpt2": {"N": 124_439_808, "n_pos": 1024}, "llama": {"N": 8_030_261_248}}
for _family, _setup in act.CANONICAL.items():
    register(peak(_family, _setup).formula)
