"""Torch measurements for ``test_torchtune_rows.py``: the backward of torchtune's chunked loss, compiled.

An LM head on N sequence chunks and torchtune's ``CEWithChunkedOutputLoss`` with ``compute_cross_entropy``
compiled by inductor (``compile_loss``; the head of ``saved_for_backward_child``), its head weight trained or
frozen (LoRA). Forward and backward run under one profiler (``profile_memory``), so that the frees of tensors
the forward made (each chunk's saved logits) are seen; the answer is the backward's peak over the level at
its start, per (B, S, N, frozen).

In fp32: with a frozen bf16 weight the CPU's matmul backward makes an fp32 copy of it (oneDNN; 2-3 H·V copies
measured), a CPU kernel's workspace that a GPU does not have. The autograd order measured is dtype-free.

Writes one JSON object on stdout; exits with 77 when torch cannot be imported or inductor finds no C++ compiler.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script

SKIP = 77
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from saved_for_backward_child import _chunked_head, _summed_cross_entropy  # noqa: E402

HIDDEN, VOCAB = 256, 8192
POINTS = ((2, 256, 4), (3, 128, 8))  # (B, S, N chunks); no size of 1 (dynamic shapes specialise it)


def _torch() -> object:
    return child_main.inductor_modules("torch")[0]


def _backward_extra(torch: object, head: object, x: object, labels: object) -> int:
    """Peak bytes the CPU allocator holds during backward, over its level when backward starts."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = head(x, labels)
        with record_function("chunked_backward"):
            loss.backward()
        del loss
    events = list(prof.profiler.kineto_results.events())
    start = next(e.start_ns() for e in events if e.name() == "chunked_backward")
    memory = sorted((e.start_ns(), i, e.nbytes()) for i, e in enumerate(events) if e.name() == "[memory]")
    level, base, peak = 0, None, 0
    for when, _, delta in memory:
        if base is None and when >= start:
            base = peak = level
        level += delta
        if base is not None:
            peak = max(peak, level)
    return peak - (base or 0)


def measure(torch: object) -> list[dict]:
    compiled = torch.compile(_summed_cross_entropy(torch.nn.functional), backend="inductor", dynamic=True)
    out = []
    for batch, seq, chunks in POINTS:
        for frozen in (True, False):
            torch.manual_seed(0)
            head = _chunked_head(torch, HIDDEN, VOCAB, chunks, compiled)
            head.output.weight.requires_grad_(not frozen)
            x = torch.randn(batch, seq, HIDDEN, requires_grad=True)
            labels = torch.randint(0, VOCAB, (batch, seq))
            for _ in range(2):  # the first pass compiles; the second is measured
                extra = _backward_extra(torch, head, x, labels)
                x.grad = None
                head.zero_grad(set_to_none=True)
            out.append({"batch": batch, "seq": seq, "chunks": chunks, "frozen": frozen, "extra": extra})
    return out


if __name__ == "__main__":
    TORCH = _torch()
    print(json.dumps({"points": measure(TORCH), "hidden": HIDDEN, "vocab": VOCAB, "element_bytes": 4}))
