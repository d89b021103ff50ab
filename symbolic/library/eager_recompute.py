"""What an eager checkpointed layer holds in its backward: the recompute buffer of ``--recompute full`` and
``--recompute ops`` without ``--compile`` (issue 28), for the gated (Llama) layer.

torchtitan 9dec370 ``apply_ac`` wraps each block in ``checkpoint_wrapper(block, preserve_rng_state=False)``
(non-reentrant ``torch.utils.checkpoint``; under ``selective_ac_option = 'op'`` with its per-op policy). When the
backward reaches the block, the first unpack of a saved tensor reruns its forward: the layer's whole saved set
(``activations.layer_parts``) is rebuilt, the tensors the policy saved served from its cache. Measured on the CPU
(torch 2.13.0, ``tests/eager_rebuild_child.py``: a block with exactly the eager gated flash layer's tensors at two
widths and five (B, S), and a two-block model's step), the backward peaks in the MLP's backward, at B·S ≥ H after
the down projection's: the product SiLU(gate)·up (its saved input) is freed and three B·S·d_ff gradients are alive (of
the product, of SiLU(gate) and of up), beside the rest of the rebuilt set and the gradient of the layer's output.
Under the per-op policy the down projection's output stays in the policy's cache (saved, read by nothing).

One moment earlier, inside the down projection's backward, the product is still alive (its ``MmBackward0``
holds it as its saved input until the node returns) beside the projection's weight gradient and the product's
gradient: ``MmBackward0`` writes its ``mat2`` (weight) gradient first, then its input's, and the weight gradient
lives until ``AccumulateGrad`` hands it to ``.grad`` (then the optimizer in backward steps and frees it; the
plan's backward holds no parameter gradient beyond that moment). This moment leads by b·d_ff·(H − B·S): below
B·S = H (``inside_down_projection_parts``, the buffer the larger of the two).

Over what the layer keeps anyway (full: its input, which the rebuilt first norm saves again as the same
storage; ops: the policy's saved set) the buffer is to the byte what the block's backward held over its start,
each parameter gradient freed as it is written (the post-accumulate-grad hook of an optimizer in backward), at
B·S from 0.17·H to 4·H, less the norms' fp32 1/rms (8 bytes a token, ``layer_parts`` leaves them out). In the
step the loss's moment and the rebuild never coincide: the loss and the head free what they saved before the
last block's backward starts (``planning.build._rebuilt_after_loss``).
"""

from __future__ import annotations

import sympy

from ..core.symbols import B, H, S, d_ff
from ..core.term import Term
from ..math.extrema import maximum
from . import activations as acts
from .activations import Part

SRC = "torchtitan-ac"
KEPT = {"full": ("ln1_input",), "ops": ()}  # rebuilt parts that are the kept tensors themselves


def measured(v: acts.LayerVariant) -> bool:
    """Whether the buffer is the measured one: the eager gated dense Korthikanti layer (GeLU and MoE MLPs keep
    the saved set as the buffer, beside the loss's moment: a bound)."""
    return v.gated and not v.moe and not v.compiled and v.impl == "korthikanti"


def _output_grad(v: acts.LayerVariant) -> Part:
    return Part("output_grad", "the gradient of the layer's output", v.act_bytes * S * B * H, "sp", source=SRC)


def backward_parts(v: acts.LayerVariant) -> list[Part]:
    """What the rebuilt layer's backward holds after the down projection's beyond what it saves: the MLP
    backward's three gradients and the gradient of the layer's output (the product, read by the down projection,
    is freed; so is the projection's weight gradient, once accumulated)."""
    return [Part("mlp_grads", "the MLP backward's gradients of the product, of SiLU(gate) and of up",
                 3 * v.act_bytes * S * B * d_ff, "tp", source=SRC), _output_grad(v)]


def inside_down_projection_parts(v: acts.LayerVariant) -> list[Part]:
    """What the rebuilt layer's backward holds inside the down projection's backward beyond what it saves (the
    product still saved): the projection's weight gradient (``MmBackward0`` writes it before its input's, in the
    compute weight's dtype, the activations': measured with bf16 parameters, as FSDP2's unsharded ones; autocast
    over fp32 weights, whose cast's backward then writes an fp32 copy, is not measured), the product's gradient
    and the layer output's."""
    b = v.act_bytes
    return [Part("w2_weight_grad", "the down projection's weight gradient (before AccumulateGrad takes it)",
                 b * H * d_ff, "tp", source=SRC),
            Part("product_grad", "the gradient of the product SiLU(gate)·up", b * S * B * d_ff, "tp", source=SRC),
            _output_grad(v)]


def _sum(parts: list[Part], tp: sympy.Expr | int, sp: bool) -> sympy.Expr:
    return sympy.Add(*(p.expr / tp if p.shard == "tp" or (p.shard == "sp" and sp) else p.expr for p in parts))


def _moment(v: acts.LayerVariant, recompute: str, tp: sympy.Expr | int, sp: bool, saved: list[Part],
            grads: list[Part]) -> sympy.Expr:
    """``saved`` and ``grads`` over what the layer keeps: under ops less the policy's set, with the down
    projection's output, which the policy's cache holds."""
    held = _sum(saved + grads, tp, sp)
    if recompute == "full":
        return held
    ops = acts.ops_parts(v, sp)
    cached = [p for p in ops if p.key == "w2_output"]
    return held + _sum(cached, tp, sp) - _sum(ops, tp, sp)


def after_down_projection(v: acts.LayerVariant, recompute: str, tp: sympy.Expr | int = 1,
                          sp: bool = False) -> sympy.Expr:
    """The moment after the down projection's backward: the rebuilt set less the product and the kept tensors,
    with ``backward_parts``."""
    rebuilt = [p for p in acts.layer_parts(v) if p.key not in ("product", *KEPT[recompute])]
    return _moment(v, recompute, tp, sp, rebuilt, backward_parts(v))


def inside_down_projection(v: acts.LayerVariant, recompute: str, tp: sympy.Expr | int = 1,
                           sp: bool = False) -> sympy.Expr:
    """The moment inside the down projection's backward: the rebuilt set less the kept tensors (the product
    still saved), with ``inside_down_projection_parts``."""
    rebuilt = [p for p in acts.layer_parts(v) if p.key not in KEPT[recompute]]
    return _moment(v, recompute, tp, sp, rebuilt, inside_down_projection_parts(v))


def buffer(v: acts.LayerVariant, recompute: str, tp: sympy.Expr | int = 1, sp: bool = False) -> sympy.Expr:
    """Bytes the eager checkpointed layer holds at its backward's peak over what it keeps (``recompute`` full or
    ops): the larger of the moments inside and after the down projection's backward (the first leads by
    b·d_ff·(H − B·S)/t, below B·S = H)."""
    return maximum(after_down_projection(v, recompute, tp, sp), inside_down_projection(v, recompute, tp, sp))


def buffer_term(v: acts.LayerVariant, recompute: str, tp: sympy.Expr | int = 1, sp: bool = False) -> Term:
    """``buffer`` as the plan's ``recompute_buffer`` term."""
    what = "its recomputed tensors" if recompute == "ops" else "the layer rebuilt"
    return Term("recompute_buffer", f"one eager checkpointed layer's backward at its peak ({what}, the MLP "
                "backward's gradients and the output's gradient)", buffer(v, recompute, tp, sp), "bytes", SRC,
                "apply_ac", "The first unpack reruns the layer's forward; its backward peaks after the down "
                "projection's (the rebuilt set less the product, three B·S·d_ff gradients and the layer output's "
                "gradient) or, below B·S = H, inside it (the product still saved, the projection's weight gradient "
                "and the product's gradient beside the output's)" + (
                    "; the down projection's output still in the policy's cache" if recompute == "ops" else "")
                + "; measured eager on the CPU.")
