"""The backward pass of torchtune's chunked cross-entropy with its loss compiled: its moments in autograd's order.

torchtune's ``CEWithChunkedOutputLoss`` (commit bd2a0fc) with ``compile_loss``: the model's head runs on N
chunks of the sequence, each chunk's bf16 logits go to a compiled ``compute_cross_entropy``, which saves them
(``library.activations``: ``logits_compiled``). Backward then runs, measured on the CPU with inductor (torch
2.13.0, ``tests/chunked_backward_child.py``, forward and backward under one profiler so that frees of tensors
made in the forward are seen):

1. **The losses first.** autograd's ready queue takes the node with the highest sequence number first
   (``torch/csrc/autograd/engine.h``, ``CompareNodeTaskTime``), and every chunk's loss was created after every
   chunk's head matmul. Each compiled loss node writes its chunk's gradient in the logits' dtype and frees
   the chunk's saved logits as it ends (the engine releases a node's saved variables): one chunk more than
   the saved logits at any time (``loss_moment``).
2. **The head, chunk by chunk.** Each head matmul's backward frees its chunk's logit gradient; with a trained
   head each writes a full H·V weight gradient in the compute dtype, which autograd's input buffer sums
   before the weight's AccumulateGrad runs. The first sum is out of place (measured): at the second chunk
   three H·V gradients live beside the N − 2 chunk gradients left (``head_moment``). A frozen head (LoRA,
   frozen tied embeddings) writes only its input's gradient, a chunk of B·S·H.
3. **The layers.** The logits and the head's input are gone when the last layer is rebuilt (full recompute).

The plan's backward phase keeps what is saved (the logits among it) plus the largest of these moments over
it (``backward_term``), in place of the logits' whole gradient beside the saved logits and the recompute
buffer.
"""

from __future__ import annotations

import sympy

from ..core.symbols import B, H, S, V
from ..core.term import Term
from ..math.extrema import maximum

SRC = "torchtune-chunked-backward"


def chunk_gradient(act_bytes: int, chunks: int, tp: sympy.Expr | int = 1) -> sympy.Expr:
    """Bytes of one chunk's logit gradient (or saved logits): a·B·S·V/N."""
    return act_bytes * B * S * V / (tp * chunks)


def loss_moment(act_bytes: int, chunks: int, tp: sympy.Expr | int = 1) -> sympy.Expr:
    """Over the saved logits, while the chunks' compiled losses run backward: one chunk's gradient."""
    return chunk_gradient(act_bytes, chunks, tp)


def head_moment(act_bytes: int, chunks: int, tp: sympy.Expr | int = 1) -> sympy.Expr:
    """Over the saved logits (all freed by then), a trained head's backward at its worst chunk.

    First chunk: N − 1 chunk gradients and one H·V weight gradient; second: N − 2 chunk gradients and three
    H·V gradients (the two chunks' and their out-of-place sum)."""
    chunk, weight = chunk_gradient(act_bytes, chunks, tp), act_bytes * H * V / tp
    first = weight - chunk
    if chunks < 2:
        return first
    return maximum(first, 3 * weight - 2 * chunk)


def backward_term(act_bytes: int, chunks: int, saved_logits: sympy.Expr, rebuilt: sympy.Expr,
                  head_trained: bool, tp: sympy.Expr | int = 1) -> Term:
    """The backward phase's bytes over what is saved: the largest of the loss, head and recompute moments."""
    moments = [loss_moment(act_bytes, chunks, tp)]
    if head_trained:
        moments.append(head_moment(act_bytes, chunks, tp))
    if rebuilt != 0:
        moments.append(rebuilt - saved_logits)
    head = "the head's weight gradients" if head_trained else "a frozen head (its input's gradient only)"
    return Term("loss_gradients", f"compiled chunked loss, backward: max(one chunk's logit gradient | {head}"
                + (" | the rebuilt layer, the logits freed)" if rebuilt != 0 else ")"),
                maximum(*moments), "bytes", SRC, "CEWithChunkedOutputLoss + compile_loss, backward",
                "The losses run first, each freeing its chunk's saved logits as it writes their gradient; then the "
                "head chunk by chunk" + (", its H·V weight gradients summed out of place" if head_trained else "")
                + (", then the layers, rebuilt one at a time after the logits are freed" if rebuilt != 0 else "")
                + " (measured on the CPU with inductor).")
