"""Torch measurements for ``test_saved_for_backward.py`` (issue 28), run in a child process.

Two mechanisms, measured on the CPU as they run (torch 2.13, transformers 5.24):

- torchtitan's per-op selective checkpointing: one bf16 ``LlamaDecoderLayer`` (sdpa) under
  ``checkpoint(..., context_fn=create_selective_checkpoint_contexts(policy))`` with torchtitan's
  policy as written at commit 9dec370 (``parallelize_llama.py``: ``_save_list`` and "every second
  mm recomputed"). The CPU runs ``_scaled_dot_product_flash_attention_for_cpu``, which the CUDA
  save list does not name; it is added as the CPU counterpart of the flash kernel (the same
  outputs: the attention output and its fp32 log-sum-exp). Saved bytes: the live tensor bytes the
  forward pass leaves behind (``measure._LiveBytes``), less the layer's output; the layer's input
  is made inside the measured region, so only the checkpoint keeps it.
- what the same policy runs again in backward: the ``aten.mm`` FLOPs of the backward pass of one
  checkpointed layer less those of the plain layer (a dispatch mode that counts 2·m·k·n per mm; a
  saved mm is served from the checkpoint's cache and never reaches it), for the gated Llama layer
  and for a GeLU block of the same widths (wq, wk, wv, wo, fc1, fc2; fp32), with torch's early stop
  (its default, as torchtitan 9dec370 left it) and without (early_stop=False, torchtitan's
  SelectiveAC since 25413d2).
- torchtune's ``CEWithChunkedOutputLoss.forward`` (commit bd2a0fc, its loop reproduced here:
  torchtune is not installed): a bf16 LM head on N chunks of the sequence, each chunk upcast to
  fp32 for ``F.cross_entropy``. Saved bytes (``measure.saved_tensors``) and the live peaks of the
  forward pass with the loss and of the backward pass.

Writes one JSON object on stdout; exits with 77 when torch or transformers cannot be imported.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

SKIP = 77
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

from tiny_models import LLAMA  # noqa: E402

from symbolic.measured.measure import _LiveBytes, saved_tensors, tracking_mode  # noqa: E402


def _torch() -> object:
    """torch and what the measurements use of it, imported here (a test file imports no torch when collected)."""
    try:
        import torch
        import torch.nn.functional as F  # noqa: N812
        from torch.utils import checkpoint
        from transformers import LlamaConfig
        from transformers.models.llama import modeling_llama
    except ImportError as err:  # pragma: no cover - depends on the environment
        print(err, file=sys.stderr)
        sys.exit(SKIP)
    return torch, F, checkpoint, LlamaConfig, modeling_llama


SAC_POINTS = ((2, 32), (1, 96))
CE_POINTS = ((2, 64, 8), (1, 128, 4), (2, 96, 3))


def _policy(torch: object, meta: dict, abs_saved: bool = True) -> object:
    """torchtitan's _custom_policy (9dec370, parallelize_llama.py), its _save_list plus the CPU flash kernel;
    ``abs_saved=False``: the list after torchtitan 88247277c (Feb 2025), which dropped ``aten.abs``."""
    aten = torch.ops.aten
    save_list = {aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
                 aten._scaled_dot_product_flash_attention.default,
                 torch.ops._c10d_functional.reduce_scatter_tensor.default, aten.max.default,
                 aten._scaled_dot_product_flash_attention_for_cpu.default}
    if abs_saved:  # "for low precision training, it's useful to always save the result of max(abs(tensor))"
        save_list.add(aten.abs.default)
    policy_kind = torch.utils.checkpoint.CheckpointPolicy

    def policy(ctx, func, *args, **kwargs):  # noqa: ANN001, ANN202
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == aten.mm.default:
            meta[key] += 1
        to_save = func in save_list and not (func == aten.mm.default and meta[key] % 2 == 0)
        return policy_kind.MUST_SAVE if to_save else policy_kind.PREFER_RECOMPUTE
    return policy


def sac(prepare: object = None, abs_saved: bool = True) -> list[dict]:
    """Bytes one checkpointed layer keeps under the per-op policy, at each (B, S); ``prepare(layer)`` converts the
    bf16 layer first (``float8_child``: torchao's float8 linears)."""
    torch, _, checkpoint, config_class, modeling = _torch()
    torch.manual_seed(0)
    cfg = config_class(**LLAMA, attn_implementation="sdpa")
    layer = modeling.LlamaDecoderLayer(cfg, 0).to(torch.bfloat16)
    if prepare is not None:
        layer = prepare(layer)
    rotary = modeling.LlamaRotaryEmbedding(cfg)
    out = []
    for batch, seq in SAC_POINTS:
        x0 = torch.randn(batch, seq, cfg.hidden_size, dtype=torch.bfloat16, requires_grad=True)
        cos, sin = rotary(x0, torch.arange(seq)[None])
        live = _LiveBytes()
        for t in (x0, cos, sin, *layer.parameters()):
            live.track(t)
        before = live.current
        with tracking_mode(live.track):
            h = x0.clone()
            context = lambda: checkpoint.create_selective_checkpoint_contexts(  # noqa: E731
                _policy(torch, defaultdict(int), abs_saved))
            y = checkpoint.checkpoint(layer, h, None, position_embeddings=(cos, sin), use_reentrant=False,
                                      preserve_rng_state=False, context_fn=context)
            y = y[0] if isinstance(y, tuple) else y
            del h
            kept = live.current - before - y.untyped_storage().nbytes()
            y.float().sum().backward()  # the recomputation runs: the policy is a working one
        out.append({"batch": batch, "seq": seq, "saved": kept})
    return out


def _mm_flops(torch: object, run: object) -> int:
    """2·m·k·n summed over the ``aten.mm`` calls ``run()`` makes."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        flops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            if func == torch.ops.aten.mm.default:
                Count.flops += 2 * args[0].shape[0] * args[0].shape[1] * args[1].shape[1]
            return func(*args, **(kwargs or {}))

    with Count():
        run()
    return Count.flops


def _gelu_block(torch: object, hidden: int, heads: int, width: int) -> object:
    """A GeLU transformer block as torchtitan orders its matmuls: wq, wk, wv, wo, then fc1, fc2 (no norms, no bias)."""
    functional = torch.nn.functional

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(hidden, hidden, bias=False) for _ in range(4))
            self.fc1, self.fc2 = torch.nn.Linear(hidden, width, bias=False), torch.nn.Linear(width, hidden, bias=False)

        def forward(self, x):  # noqa: ANN001, ANN202
            b, s, _ = x.shape
            split = lambda t: t.view(b, s, heads, hidden // heads).transpose(1, 2)  # noqa: E731
            att = functional.scaled_dot_product_attention(split(self.wq(x)), split(self.wk(x)), split(self.wv(x)),
                                                          is_causal=True)
            h = x + self.wo(att.transpose(1, 2).reshape(b, s, hidden))
            return h + self.fc2(functional.gelu(self.fc1(h)))
    return Block()


def recomputed() -> dict:
    """Backward mm FLOPs of one layer under the per-op policy less those without checkpointing, gated and GeLU."""
    torch, _, checkpoint, config_class, modeling = _torch()
    torch.manual_seed(0)
    cfg = config_class(**LLAMA, attn_implementation="sdpa")
    layer, rotary = modeling.LlamaDecoderLayer(cfg, 0), modeling.LlamaRotaryEmbedding(cfg)
    gelu = _gelu_block(torch, cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size)
    batch, seq = SAC_POINTS[0]
    out = {"batch": batch, "seq": seq}
    for name, block in (("gated", None), ("gelu", gelu)):
        flops = []
        for sac in ("early stop", "no early stop", None):  # torch's default (9dec370); early_stop=False (b5bcd76)
            x = torch.randn(batch, seq, cfg.hidden_size, requires_grad=True)
            cos, sin = rotary(x, torch.arange(seq)[None])
            run = block or (lambda h, cos=cos, sin=sin: layer(h, None, position_embeddings=(cos, sin)))
            context = lambda: checkpoint.create_selective_checkpoint_contexts(_policy(torch, defaultdict(int)))  # noqa: E731
            y = (checkpoint.checkpoint(run, x, use_reentrant=False, preserve_rng_state=False, context_fn=context,
                                       early_stop=sac == "early stop") if sac else run(x))
            y = y[0] if isinstance(y, tuple) else y
            flops.append(_mm_flops(torch, y.sum().backward))
        out[name], out[f"{name}_no_early_stop"] = flops[0] - flops[2], flops[1] - flops[2]
    return out


def _chunked_head(torch: object, hidden: int, vocab: int, chunks: int, cross_entropy: object) -> object:
    """An LM head on N sequence chunks and torchtune's chunked cross-entropy (CEWithChunkedOutputLoss.forward,
    torchtune bd2a0fc), each chunk's summed loss by ``cross_entropy`` (compute_cross_entropy, eager or compiled)."""

    class ChunkedHead(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.output = torch.nn.Linear(hidden, vocab, bias=False)

        def forward(self, x, labels):  # noqa: ANN001, ANN202
            h = x.clone()  # the final norm's output: the head's input
            logits = [self.output(chunk) for chunk in h.tensor_split(chunks, dim=1)]
            del h
            total_elements = (labels != -100).sum()
            targets = [c.reshape(-1) for c in labels.tensor_split(chunks, dim=1)]
            total = 0.0
            for logits_chunk, labels_chunk in zip(logits, targets, strict=True):
                total += cross_entropy(logits_chunk.reshape(-1, vocab), labels_chunk)
            return total / total_elements

    return ChunkedHead()


def _summed_cross_entropy(functional: object) -> object:
    """torchtune's compute_cross_entropy: the chunk upcast to fp32, the loss summed."""
    return lambda logits, labels: functional.cross_entropy(logits.float(), labels, ignore_index=-100, reduction="sum")


def chunked() -> list[dict]:
    """Saved bytes and the forward/backward live peaks of the chunked loss, at each (B, S, N)."""
    torch, functional, *_ = _torch()
    torch.manual_seed(0)
    hidden, vocab = LLAMA["hidden_size"], LLAMA["vocab_size"]
    out = []
    for batch, seq, chunks in CE_POINTS:
        head = _chunked_head(torch, hidden, vocab, chunks, _summed_cross_entropy(functional)).to(torch.bfloat16)
        x = torch.randn(batch, seq, hidden, dtype=torch.bfloat16, requires_grad=True)
        labels = torch.randint(0, vocab, (batch, seq))
        saved = saved_tensors(head, (x, labels), lambda loss: loss).total_bytes
        live = _LiveBytes()
        for t in (x, labels, *head.parameters()):
            live.track(t)
        base = live.current
        with tracking_mode(live.track):
            live.phase = "forward"
            loss = head(x, labels)
            live.phase = "backward"
            loss.backward()
            del loss
        out.append({"batch": batch, "seq": seq, "chunks": chunks, "saved": saved,
                    "forward": live.phase_peaks["forward"] - base, "backward": live.phase_peaks["backward"] - base})
    return out


if __name__ == "__main__":
    print(json.dumps({"sac": sac(), "chunked": chunked(), "recomputed": recomputed(), "llama": LLAMA}))
