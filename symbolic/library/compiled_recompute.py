"""What a compiled block holds in its backward under full checkpointing: the recompute buffer of ``--recompute full
--compile`` (issue 28), bf16 and float8.

torchtitan 9dec370 wraps each TransformerBlock in ``ptd_checkpoint_wrapper(block, preserve_rng_state=False)``
(``apply_ac``) and then compiles the wrapper, ``fullgraph=True`` (``apply_compile``). Dynamo turns the checkpoint
into one ``tag_activation_checkpoint`` region, the partitioner saves the block's input only (and the generator's
state for the recomputed attention, ``run_with_rng_state``: a seed and offset on a GPU, not a size), and the forward
is recomputed inside the one compiled backward graph, whose buffers inductor plans (allocates at first write, frees
at last read). Measured on the CPU with inductor (torch 2.13.0, torchao 0.18.0, ``tests/float8_compile_child.py``:
one Llama layer at three widths and four (B, S) each; the generated code's buffer plan, read line by line, gives
each measured peak to the byte), the backward peaks in the MLP's backward:

- **bf16**: the recomputed tensors the rest of the backward still reads (the compiled layer's saved set,
  ``activations.compiled_parts``, less the input, which the checkpoint keeps: the attention norm's output, Q, K,
  V, the attention output and its log-sum-exp, the output projection's output, the MLP norm's output, gate, up,
  SiLU(gate)·up, both 1/rms), with a second copy of the attention output laid out as the output projection's input,
  and the three bf16 gradients one fused kernel writes (of the down projection's input, of gate and of up). No
  weight gradient is written yet.
- **float8** (torchao's ``Float8Linear``): the attention norm's output is not kept (recast from the input and its
  1/rms when the weight gradients need it); the attention output's second copy is its e4m3 cast, beside the output
  projection's e4m3 weight; the fused SiLU backward writes SiLU(gate)·up, an fp32 B·S·d_ff intermediate, the
  product's e4m3 cast and two e5m2 gradient casts, beside the down projection's input gradient (bf16), and beside
  them inductor holds either the block output gradient's e5m2 cast (the down weight's gradient) or the gate
  projection's e4m3 weight, which it orders by the widths (H 64: the first, H 96 and 128: the second): the larger
  is counted (``SCHEDULED``), 0.4 % over the measured peak at most.
- **rowwise float8** (``rowwise_parts``): torchao runs the backward's two gemms without fast accumulation, and
  for rowwise scales that is ``_scaled_mm`` with unit scales, the row and column scales multiplied after
  (``float8_ops.addmm_float8_unwrapped``): the down projection's input gradient is written unscaled (bf16) and its
  scales wait for the fused SiLU backward, which reads SiLU(gate) (kept instead of the product) and up, and writes
  the product's e4m3 cast along tokens, up's gradient cast by rows and along tokens (up's bf16 gradient is never
  written) and gate's bf16 gradient (into the gate output's buffer) with its cast by rows. Beside them the block
  output gradient's cast along tokens, two casts of the MLP norm's output along tokens (one per linear; the
  norm's bf16 output is not held), the gate and up weights' e4m3 casts, and every cast's amax (bf16) and scale
  (fp32) by row or column. One moment at every measured point, B·S = 64 included: to the byte (read at H 64,
  checked at H 96 and 128); the tensorwise buffer planned for it before was 6.6-16.5 % over.

Below B·S ≈ 1.25·H moments that hold weight gradients lead (bf16 and tensorwise: at B·S = 64 up to 16 % over the
term, bf16 at H 128): not modelled; the GPU rows run at B·S ≥ 2·H.

Per-op checkpointing (``--recompute ops``) compiled the same way, tensorwise: the layer's backward holds more than
the compiled bf16 layer's, its casts (``ops_float8_backward_parts``, the plan's backward ``fp8_casts`` term there).

Everything is over what the block holds when its backward starts (its saved input and the incoming gradient). The
float8 casts in this backward are these tensors: under full checkpointing the separate ``fp8_casts`` term of the
backward is not added beside them. Measured for the gated (Llama) layer on one rank; the shards under tensor
parallelism follow ``activations.compiled_parts`` (not measured); under PyTorch's (``tp_impl`` dtensor) both norms'
outputs are held as the rebuilt forward all-gathered them: B·S·H each, bf16, or e4m3 with torchao's float8 styles
(``activations.linear_input``; the compiled layer's saved set and the eager layer's rebuild with them measured,
``tests/test_dtensor_tp.py``; the compiled rebuild not).
"""

from __future__ import annotations

import sympy

from ..core.errors import UnknownNameError
from ..core.symbols import B, H, S, a, d_ff, d_head
from ..core.term import Term
from ..math.extrema import maximum
from . import activations as acts
from .activations import Part

SRC = "torch-compile-checkpoint"
SHARED = ("query", "key", "value", "attn_output", "softmax_stats", "attn_proj_output", "mlp_input", "gate_output",
          "up_output", "product", "norm_stats")  # the compiled layer's parts both precisions hold at the peak


def _shared(v: acts.LayerVariant, drop: tuple[str, ...] = ()) -> list[Part]:
    """The compiled bf16 layer's saved parts (``compiled_parts``) that the checkpointed backward rebuilds and holds."""
    bf16 = acts.compiled_parts(acts.LayerVariant(flash=v.flash, gated=v.gated, dropout=v.dropout, moe=v.moe,
                                                 act_bytes=v.act_bytes, compiled=True, tp_impl=v.tp_impl))
    return [part for part in bf16 if part.key in SHARED and part.key not in drop]


def _gathered_float8(v: acts.LayerVariant) -> list[Part]:
    """Under PyTorch's tensor parallelism with torchao's float8 styles: both norms' outputs as the rebuilt forward
    all-gathers them, e4m3 (``activations.compiled_float8_parts``); one backward graph computes each once and holds it
    until its last weight gradient (read from the sources, not measured)."""
    if v.tp_impl != "dtensor":
        return []
    return [p for p in acts.compiled_parts(v) if p.key in acts.GATHERED]


def bf16_parts(v: acts.LayerVariant) -> list[Part]:
    """The bf16 block's backward peak: the rebuilt layer (less its input), the attention output's second copy, and
    the MLP backward's three gradients."""
    b, tokens = v.act_bytes, S * B
    qkv = [p for p in acts.compiled_parts(acts.LayerVariant(flash=v.flash, gated=v.gated, dropout=v.dropout,
                                                            act_bytes=b, compiled=True, tp_impl=v.tp_impl))
           if p.key == "qkv_input"]
    return [*qkv, *_shared(v),
            Part("attn_output_copy", "the attention output laid out as the output projection's input (a second copy)",
                 b * tokens * a * d_head, "tp", source=SRC),
            Part("mlp_grads", "the MLP backward's gradients of the down projection's input, gate and up (one fused "
                 "kernel)", 3 * b * tokens * d_ff, "tp", source=SRC)]


def float8_parts(v: acts.LayerVariant) -> list[Part]:
    """The float8 block's backward peak (4·B·S ≥ 5·H): the rebuilt layer less the attention norm's output, the casts
    the backward makes, the fused SiLU backward's outputs and the down projection's input gradient."""
    b, tokens = v.act_bytes, S * B
    gathered = _gathered_float8(v)  # dtensor: the gathered e4m3 inputs in place of the MLP norm's bf16 output
    return [*_shared(v, drop=("mlp_input",) if gathered else ()), *gathered,
            Part("attn_output_cast", "the attention output's e4m3 cast (the output projection's weight gradient)",
                 tokens * a * d_head, "tp", source=SRC),
            Part("wo_weight_cast", "the output projection's e4m3 weight", H * a * d_head, "tp", source=SRC),
            Part("down_input_grad", "the down projection's input gradient (bf16)", b * tokens * d_ff, "tp",
                 source=SRC),
            Part("silu_backward_fp32", "the fused SiLU backward's fp32 B·S·d_ff intermediate", 4 * tokens * d_ff,
                 "tp", source=SRC),
            Part("product_cast", "SiLU(gate)·up's e4m3 cast (the down projection's weight gradient)", tokens * d_ff,
                 "tp", source=SRC),
            Part("gate_up_grad_casts", "two e5m2 casts of the SiLU backward's gradients", 2 * tokens * d_ff, "tp",
                 source=SRC)]


ROWWISE_SRC = "torchao-float8-rowwise"


def rowwise_parts(v: acts.LayerVariant) -> list[Part]:
    """The rowwise float8 block's backward peak: the rebuilt layer less the MLP norm's output (its two e4m3 casts
    instead) and the product (SiLU(gate) instead), the down projection's unscaled input gradient and the scales it
    waits for, and the casts the fused SiLU backward writes, each with its scale vectors."""
    if v.tp_impl == "dtensor":
        raise UnknownNameError("PyTorch's tensor parallelism with float8 is modelled for the tensorwise recipe "
                               "(torchao's float8 TP styles)")
    b, tokens = v.act_bytes, S * B
    amax_scale = b + 4  # a cast's amax (bf16) and its power-of-two scale (fp32), per row or column
    return [*_shared(v, drop=("mlp_input", "product")),
            Part("silu_gate", "SiLU(gate) (bf16): the product is recomputed from it and up in the SiLU backward",
                 b * tokens * d_ff, "tp", source=SRC),
            Part("down_input_grad", "the down projection's input gradient before its scales (bf16: the backward's "
                 "gemms run with unit scales, the row and column scales applied after)", b * tokens * d_ff, "tp",
                 source=ROWWISE_SRC),
            Part("down_grad_scales", "the block output gradient's per-token and the down weight's per-column fp32 "
                 "scales that input gradient still waits for", 4 * tokens + 4 * d_ff, "tp", source=ROWWISE_SRC),
            Part("output_grad_cast", "the block output's gradient cast along tokens (e4m3, the down weight's "
                 "gradient) with its per-column amax and scale", tokens * H + amax_scale * H, "sp", source=SRC),
            Part("product_cast", "SiLU(gate)·up cast along tokens (e4m3, the down weight's gradient) with its "
                 "per-column amax and scale", tokens * d_ff + amax_scale * d_ff, "tp", source=SRC),
            Part("up_grad_casts", "up's gradient cast by rows (its input gradient) and along tokens (its weight "
                 "gradient), e4m3, with their amaxes and scales (up's bf16 gradient is not written)",
                 2 * tokens * d_ff + amax_scale * (tokens + d_ff), "tp", source=SRC),
            Part("gate_grad_cast", "gate's gradient cast by rows (e4m3) with its amax and scale (the bf16 gradient "
                 "overwrites the gate output in place)", tokens * d_ff + amax_scale * tokens, "tp", source=SRC),
            Part("mlp_input_casts", "the MLP norm's output cast along tokens for the gate and up weights' gradients "
                 "(e4m3, one each; one per-column fp32 scale)", 2 * tokens * H + 4 * H, "sp", source=SRC),
            Part("w1_w3_weight_casts", "the gate and up projections' e4m3 weights (their input gradients) with "
                 "their fp32 scales", 2 * H * d_ff + 2 * 4 * H, "tp", source=SRC),
            Part("unit_scale", "the unit fp32 scale the backward's gemms run with", sympy.Integer(4), "whole",
                 source=ROWWISE_SRC)]


def _sum(parts: list[Part], tp: sympy.Expr | int, sp: bool) -> sympy.Expr:
    """The parts' bytes on one rank (``activations.layer_terms``' sharding rule)."""
    return sympy.Add(*(p.expr / tp if p.shard == "tp" or (p.shard == "sp" and sp) else p.expr for p in parts))


SCHEDULED = (Part("output_grad_cast", "the block output's gradient, e5m2 (the down projection's weight gradient)",
                  S * B * H, "sp", source=SRC),
             Part("w1_weight_cast", "the gate projection's e4m3 weight", H * d_ff, "tp", source=SRC))


def buffer(v: acts.LayerVariant, tp: sympy.Expr | int = 1, sp: bool = False) -> sympy.Expr:
    """Bytes the compiled checkpointed block holds at its backward's peak over its start (float8: beside the
    fused SiLU backward's writes, the block output gradient's e5m2 cast or the gate weight's e4m3 cast, as inductor
    orders them by the widths: the larger)."""
    if not v.float8:
        return _sum(bf16_parts(v), tp, sp)
    if v.float8 == "rowwise":
        return _sum(rowwise_parts(v), tp, sp)
    held = _sum(float8_parts(v), tp, sp)
    return maximum(*(held + _sum([part], tp, sp) for part in SCHEDULED))


def buffer_term(v: acts.LayerVariant, tp: sympy.Expr | int = 1, sp: bool = False) -> Term:
    """``buffer`` as the plan's ``recompute_buffer`` term."""
    what = f"float8 {v.float8}" if v.float8 else "bf16"
    return Term("recompute_buffer", f"one compiled checkpointed layer's backward at its peak ({what}): the rebuilt "
                "tensors it still reads and the buffers its backward writes", buffer(v, tp, sp), "bytes", SRC,
                "apply_ac, apply_compile", "Under full checkpointing the compiled block recomputes its forward inside "
                "its backward graph; at the MLP's backward it holds the rebuilt layer less its input"
                + {"": ", the attention output's second copy and the MLP backward's gradients",
                   "tensorwise": ", the attention output's e4m3 cast, the MLP backward's gradients, its float8 casts "
                                 "and fp32 SiLU intermediate",
                   "rowwise": " and its norm's output, the MLP backward's unscaled input gradient and float8 casts "
                              "with their per-row and per-column scales"}[v.float8 or ""]
                + (" (the casts of this backward are these tensors: no fp8_casts term beside them)" if v.float8 else "")
                + "; measured with inductor on the CPU.")


OPS_SRC = "torch-compile-ops-float8"


def ops_float8_backward_parts(v: acts.LayerVariant) -> list[Part]:
    """What the compiled per-op checkpointed layer's backward holds at its peak beyond the compiled bf16 layer's, with
    tensorwise float8 linears (measured on the CPU with inductor, ``tests/test_float8_compile.py``).

    At both peaks the fused SiLU backward runs beside the recomputed output projection's output, the up projection's
    output and the down projection's input gradient. Where bf16 writes the product and gate's and up's bf16
    gradients, float8 writes the product (bf16) and an fp32 B·S·d_ff intermediate (the same bytes), the product's
    e4m3 cast and up's gradient's two e5m2 casts (up's bf16 gradient is not written); the MLP norm's output is held
    as two e4m3 casts (one per linear) in place of its bf16 copy (the same bytes). Beside them: the attention output's
    e4m3 cast, the output projection's e4m3 weight (cast in FSDP2's hook instead with the float8 all-gather: not
    counted there, read, not measured) and the block output gradient's e5m2 cast. The amax and scale scalars (under
    64 bytes) are not a term."""
    tokens = S * B
    parts = [Part("attn_output_cast", "the attention output's e4m3 cast (the output projection's weight gradient)",
                  tokens * a * d_head, "tp", source=OPS_SRC),
             Part("output_grad_cast", "the block output's gradient, e5m2 (the down projection's weight gradient)",
                  tokens * H, "sp", source=OPS_SRC),
             Part("product_cast", "SiLU(gate)·up's e4m3 cast (the down projection's weight gradient)", tokens * d_ff,
                  "tp", source=OPS_SRC),
             Part("up_grad_casts", "up's gradient's two e5m2 casts (its input and weight gradients)",
                  2 * tokens * d_ff, "tp", source=OPS_SRC)]
    if not v.float8_gathered:
        parts.append(Part("wo_weight_cast", "the output projection's e4m3 weight", H * a * d_head, "tp",
                          source=OPS_SRC))
    return parts


def ops_float8_backward_term(v: acts.LayerVariant, tp: sympy.Expr | int = 1, sp: bool = False) -> Term:
    """``ops_float8_backward_parts`` as the plan's backward ``fp8_casts`` term under ``--recompute ops --compile``."""
    return Term("fp8_casts", "float8 casts and buffers the compiled per-op checkpointed layer's backward holds beyond "
                "the bf16 layer's (tensorwise)", _sum(ops_float8_backward_parts(v), tp, sp), "bytes", OPS_SRC,
                "apply_ac (op), apply_compile", "At the fused SiLU backward: the attention output's and the product's "
                "e4m3 casts, the output projection's e4m3 weight, the block output gradient's and up's gradient's "
                "e5m2 casts; the fp32 SiLU intermediate and the MLP norm output's casts take the bytes of the bf16 "
                "layer's gradients and norm output; measured with inductor on the CPU.")
