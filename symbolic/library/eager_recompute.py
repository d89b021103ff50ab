"""What an eager checkpointed layer holds in its backward: the recompute buffer of ``--recompute full`` and
``--recompute ops`` without ``--compile`` (issue 28), for the gated (Llama) layer.

torchtitan 9dec370 ``apply_ac`` wraps each block in ``checkpoint_wrapper(block, preserve_rng_state=False)``
(non-reentrant ``torch.utils.checkpoint``; under ``selective_ac_option = 'op'`` with its per-op policy). When the
backward reaches the block, the first unpack of a saved tensor reruns its forward: the layer's whole saved set
(``activations.layer_parts``) is rebuilt, the tensors the policy saved served from its cache. Measured on the CPU
(torch 2.13.0, ``tests/eager_rebuild_child.py``: a block with exactly the eager gated flash layer's tensors at two
widths and three (B, S), and a two-block model's step), the backward peaks in the MLP's backward, after the down
projection's: the product SiLU(gate)·up (its saved input) is freed and three B·S·d_ff gradients are alive (of
the product, of SiLU(gate) and of up), beside the rest of the rebuilt set and the gradient of the layer's output.
Under the per-op policy the down projection's output stays in the policy's cache (saved, read by nothing).

Over what the layer keeps anyway (full: its input, which the rebuilt first norm saves again as the same
storage; ops: the policy's saved set) the buffer is to the byte what the block's backward held over its start,
at B·S ≥ 1.5·H, less two things the plan does not count: the parameter gradients (the down projection's weight
gradient, written by then; the plan's backward holds none) and the norms' fp32 1/rms (8 bytes a token,
``layer_parts`` leaves them out). In the step the loss's moment and the rebuild never coincide: the loss and the
head free what they saved before the last block's backward starts (``planning.build._rebuilt_after_loss``).
"""

from __future__ import annotations

import sympy

from ..core.symbols import B, H, S, d_ff
from ..core.term import Term
from . import activations as acts
from .activations import Part

SRC = "torchtitan-ac"
KEPT = {"full": ("ln1_input",), "ops": ()}  # rebuilt parts that are the kept tensors themselves


def measured(v: acts.LayerVariant) -> bool:
    """Whether the buffer is the measured one: the eager gated dense Korthikanti layer (GeLU and MoE MLPs keep
    the saved set as the buffer, beside the loss's moment: a bound)."""
    return v.gated and not v.moe and not v.compiled and v.impl == "korthikanti"


def backward_parts(v: acts.LayerVariant) -> list[Part]:
    """What the rebuilt layer's backward holds at its peak beyond what it saves: the MLP backward's three
    gradients and the gradient of the layer's output (the product, read by the down projection, is freed)."""
    b = v.act_bytes
    return [Part("mlp_grads", "the MLP backward's gradients of the product, of SiLU(gate) and of up",
                 3 * b * S * B * d_ff, "tp", source=SRC),
            Part("output_grad", "the gradient of the layer's output", b * S * B * H, "sp", source=SRC)]


def _sum(parts: list[Part], tp: sympy.Expr | int, sp: bool) -> sympy.Expr:
    return sympy.Add(*(p.expr / tp if p.shard == "tp" or (p.shard == "sp" and sp) else p.expr for p in parts))


def buffer(v: acts.LayerVariant, recompute: str, tp: sympy.Expr | int = 1, sp: bool = False) -> sympy.Expr:
    """Bytes the eager checkpointed layer holds at its backward's peak over what it keeps (``recompute`` full or
    ops): the rebuilt saved set less the product and the kept tensors, with ``backward_parts``; under ops also
    the down projection's output, which the policy's cache holds."""
    plain = [p for p in acts.layer_parts(v) if p.key not in ("product", *KEPT[recompute])]
    held = _sum(plain + backward_parts(v), tp, sp)
    if recompute == "full":
        return held
    ops = acts.ops_parts(v, sp)
    cached = [p for p in ops if p.key == "w2_output"]
    return held + _sum(cached, tp, sp) - _sum(ops, tp, sp)


def buffer_term(v: acts.LayerVariant, recompute: str, tp: sympy.Expr | int = 1, sp: bool = False) -> Term:
    """``buffer`` as the plan's ``recompute_buffer`` term."""
    what = "its recomputed tensors" if recompute == "ops" else "the layer rebuilt"
    return Term("recompute_buffer", f"one eager checkpointed layer's backward at its peak ({what}, the MLP "
                "backward's gradients and the output's gradient)", buffer(v, recompute, tp, sp), "bytes", SRC,
                "apply_ac", "The first unpack reruns the layer's forward; its backward peaks after the down "
                "projection's: the rebuilt set less the product, three B·S·d_ff gradients and the layer output's "
                "gradient" + (", the down projection's output still in the policy's cache" if recompute == "ops"
                              else "") + "; measured eager on the CPU.")
