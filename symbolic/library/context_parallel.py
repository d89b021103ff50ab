"""Context parallelism (torchtitan's ``--experimental.context_parallel_degree``) as named terms per rank.

torchtitan (9dec370, ``train.py``) shards ``input_ids``, ``labels`` and the rotary table on the
sequence dimension with PyTorch's ``context_parallel``: ``_context_parallel_buffers`` cuts each
sequence into 2·cp chunks and gives rank r chunks r and 2·cp − 1 − r (round-robin load balance for
the causal mask), so every rank holds S/c_p tokens: its activations, checkpointed inputs and logits
are the single-rank plan's at S/c_p (``per_rank``). Attention is the ring of
``_templated_ring_attention`` (PyTorch 2.13.0), with torchtitan's default rotate method
``allgather``:

- forward: the local K and V are concatenated (``torch.cat``) and all-gathered once
  (``_AllGatherRotater``: every rank's block, c_p·2 blocks in all, alive to the end of the call);
  each step's block output and logsumexp are merged into an fp32 running output and logsumexp
  (``_SDPAMerger``, ``convert_to_f32``): at a merge the running output, the block's output in
  its dtype and in fp32, and two fp32 temporaries of ``out - sigmoid(lse_b - lse) * (out - out_b)``
  are alive, with the running and the block's fp32 logsumexp;
- backward: K and V are all-gathered again; dq, dk and dv accumulate in fp32 (``zeros_like(...,
  dtype=float32)``); dk and dv travel all-to-all each step (the received fp32 buffer and the new
  concatenation sent on), while the step's own dq, dk, dv come out of the kernel in the
  activations' dtype.

torchtitan's Llama repeats K and V to every query head before SDPA (``repeat_kv``), so the ring's
K/V blocks are as wide as the queries (a·d_head/t per token). The buffers live during one
attention call (checkpointed or not), so they are transients of the forward and backward phases.
"""

from __future__ import annotations

import sympy

from ..core.symbols import B, S, c_p
from ..core.term import Term

SRC = "pytorch-context-parallel"
CHUNKS_PER_RANK = 2  # _context_parallel_buffers: 2·cp chunks, two per rank (round-robin load balance)
FP32 = 4
ROTATE = "allgather"  # torchtitan's context_parallel_rotate_method default (config_manager.py, 9dec370)


def per_rank(expr: sympy.Expr) -> sympy.Expr:
    """A single-rank term at the rank's sequence shard: S → S/c_p (the tokens one context-parallel rank holds)."""
    return sympy.sympify(expr).subs(S, S / c_p)


def _block(width: sympy.Expr) -> sympy.Expr:
    """Elements of one rank's query (or one repeated K or V) block: B · S/c_p · a·d_head/t."""
    return B * (S / c_p) * width


def ring_forward_term(width: sympy.Expr, heads: sympy.Expr, act_bytes: int) -> Term:
    """The forward ring's buffers at the last merge: every rank's K/V gathered, the fp32 merge of one block."""
    block = _block(width)
    gathered = 2 * act_bytes * c_p * block  # K and V of every rank, concatenated by the all-gather
    merge = (4 * FP32 + act_bytes) * block + 2 * FP32 * B * (S / c_p) * heads
    return Term("cp_ring_forward", "ring attention, forward: the all-gathered K/V and the fp32 output merge",
                gathered + merge, "bytes", SRC, "_templated_ring_attention, _SDPAMerger",
                "All-gather rotater: 2·c_p·b blocks of K/V (b = B·S/c_p·a·d_head/t elements, K/V repeated to every "
                "head); at a merge the fp32 running output, the block output in its dtype and in fp32, two fp32 "
                "temporaries, and the running and block fp32 logsumexp (B·S/c_p·a/t each).")


def ring_backward_term(width: sympy.Expr, act_bytes: int) -> Term:
    """The backward ring's buffers at one step: K/V gathered again, fp32 dq/dk/dv, dk/dv rotated all-to-all."""
    block = _block(width)
    gathered = 2 * act_bytes * c_p * block
    grads = (FP32 + 2 * FP32 + 2 * FP32 + 3 * act_bytes) * block
    return Term("cp_ring_backward", "ring attention, backward: the all-gathered K/V, fp32 dq and the rotated dk/dv",
                gathered + grads, "bytes", SRC, "_templated_ring_attention_backward",
                "K/V all-gathered again (2·c_p·b); the fp32 dq accumulator (b); the fp32 dk/dv received (2b) and the "
                "concatenation sent on (2b); the step's dq, dk, dv from the kernel in the activations' dtype (3b).")
