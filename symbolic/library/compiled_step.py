"""The compiled step's forward and backward moments: blocks compiled by inductor, the loss compiled too (issue 28).

torchtitan's ``apply_compile`` (one ``torch.compile`` per block) and torchtune's ``compile_loss`` (the loss,
``F.cross_entropy(logits.float(), labels)``, compiled). Measured on the CPU with real inductor (torch 2.13.0,
``tests/compile_step_child.py``: a tiny bf16 Llama and GPT-2, AdamW, the allocator's events read by
``torch.profiler`` with each ATen call's own scratch left out, as the eager step's measurement leaves it out),
each moment read at two (B, S) points and checked at two others:

- **forward**: the saved tensors and nothing more. The eager loss's transients (the fp32 copy of the logits,
  Hugging Face's padded labels, the log-softmax being written) do not exist: the compiled loss reads the bf16
  logits (saved) and writes two fp32 numbers per token (saved) in fused kernels; the blocks' elementwise chains
  are fused and keep no intermediates outside what they save.
- **backward, the loss** (``loss_moment``): the compiled loss's backward writes the logits' gradient in their
  dtype beside everything saved, with one fp32 number per token of its own (4·B·S: the scaled per-token
  gradient), before it frees the saved logits.
- **backward, the head** (``head_moment``): the LM head's weight gradient (V·H, the tied embedding's too) and its
  input's gradient (B·S·H), beside the logits' gradient, after the compiled loss freed its saved logits and
  statistics; a frozen head writes only the input's gradient and never leads. It leads where B·S is small beside
  the vocabulary's weight: b·V·H > b·B·S·(V − H) + 12·B·S.
- The later moments (each compiled block's backward, the end of backward with every gradient) stay below these
  at the measured sizes; the end of backward is kept as the eager step models it.

The CPU's own kernels allocate scratch around these moments (the bf16 matmul's fp32 workspace at the LM head,
4·B·S·H and more, measured in forward and backward): a kernel's workspace, not a tensor, which a GPU's cuBLAS
does not take from the tensors' pool; left out, as in the eager step.

Under tensor parallelism (the Korthikanti plan's ``tp``, not measured): the logits, their gradient, the loss's
per-token numbers and the head's weight gradient are split over the vocabulary (``loss_parallel``); the head's
input gradient is whole on every rank (a column-parallel head's partial sum, before its all-reduce).
"""

from __future__ import annotations

import sympy

from ..core.symbols import B, H, S, V


def loss_moment(act_bytes: int, tp: sympy.Expr | int = 1) -> sympy.Expr:
    """Over everything saved: the logits' gradient in their dtype and the loss backward's fp32 number per token."""
    return (act_bytes * B * S * V + 4 * B * S) / tp


def head_moment(act_bytes: int, tp: sympy.Expr | int = 1) -> sympy.Expr:
    """Over everything saved: the head's weight and input gradients, the logits' gradient in place of the saved
    logits (the same bytes), the loss's two fp32 statistics per token freed."""
    return act_bytes * (V * H / tp + B * S * H) - 8 * B * S / tp


def backward_moments(act_bytes: int, head_trained: bool, tp: sympy.Expr | int = 1) -> list[sympy.Expr]:
    """The compiled step's backward moments over the saved tensors (the head's only when it is trained)."""
    moments = [loss_moment(act_bytes, tp)]
    if head_trained:
        moments.append(head_moment(act_bytes, tp))
    return moments


def note() -> str:
    """What the compiled step's phases hold, in a sentence (for the terms' notes)."""
    return ("Compiled blocks and loss: forward holds the saved tensors only (the loss fused, no fp32 logits); "
            "backward peaks at the compiled loss's bf16 logit gradient or at the LM head's weight gradient "
            "(measured on the CPU with inductor).")

