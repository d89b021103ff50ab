"""Torch measurements for ``test_compile.py`` (issue 28, ``--compile``), run in one child process.

- ``models``: each decoder block of a tiny bf16 Hugging Face GPT-2 and Llama (sdpa, no dropout, no
  cache) compiled as torchtitan compiles its TransformerBlocks (``apply_compile``: one
  ``torch.compile`` per block), and the loss, ``F.cross_entropy(logits.float(), labels)``, compiled
  too (torchtune's ``compile_loss``).
- ``checkpointed``: one Llama block wrapped in ``checkpoint(..., use_reentrant=False)`` first and
  compiled after (torchtitan's ``apply_ac`` then ``apply_compile``), under full checkpointing and
  under torchtitan's per-op policy (``saved_for_backward_child._policy``, 9dec370).
- ``chunked``: torchtune's ``CEWithChunkedOutputLoss`` with ``compute_cross_entropy`` compiled
  (``compile_loss``), an LM head on N sequence chunks: its saved bytes and the live peaks of its
  forward and backward passes.

What a compiled graph saves is read by a saved-tensors pack hook (``CompiledFunction`` saves with
``save_for_backward``); each storage once, parameters excluded. Saved bytes are decided by the
min-cut partitioner before any code is generated, so they are measured with
``aot_eager_decomp_partition`` (inductor's decompositions and partitioner, no C++ compiler: seconds
instead of minutes); ``BACKEND=inductor`` in the environment measures them with inductor itself
(the same bytes at every point, checked with torch 2.13.0). The chunked loss's peaks depend on
inductor's fused kernels: they are measured with inductor, from the CPU allocator's events
(``torch.profiler``, ``profile_memory``). ``dynamic=True`` and no size of 1 (which dynamic shapes
specialise): one compilation per graph serves every point.

Writes one JSON object on stdout; exits with 77 when torch or transformers cannot be imported, or
when inductor finds no C++ compiler.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script

SKIP = 77
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from saved_for_backward_child import _chunked_head  # noqa: E402  (the same head, its loss compiled)
from tiny_models import GPT2, LLAMA  # noqa: E402

# (B, S): read the terms at the first two, checked at the third; no B or S of 1 (a recompile)
POINTS = ((2, 32), (3, 48), (2, 80))
CHUNK_POINTS = ((2, 64, 8), (3, 48, 4))  # (B, S, N chunks)
LAYERS = 2
SAVED_BACKEND = os.environ.get("BACKEND", "aot_eager_decomp_partition")


def _torch() -> tuple:
    """torch and transformers, imported here; exits 77 when they or a C++ compiler are missing."""
    return child_main.inductor_modules("torch", "transformers")


def _sibling(name: str):  # noqa: ANN202
    """``tests/<name>.py`` as a module (torchtitan's per-op policy is written there once)."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model(torch: object, transformers: object, family: str, backend: str = SAVED_BACKEND) -> tuple:
    """The tiny bf16 model with its blocks compiled (by ``backend``), and its config."""
    torch.manual_seed(0)
    if family == "llama":
        config = transformers.LlamaConfig(**LLAMA, num_hidden_layers=LAYERS, attn_implementation="sdpa",
                                          use_cache=False)
        model = transformers.LlamaForCausalLM(config)
        blocks = model.model.layers
    else:
        config = transformers.GPT2Config(**GPT2, n_layer=LAYERS, embd_pdrop=0.0, attn_pdrop=0.0, resid_pdrop=0.0,
                                         attn_implementation="sdpa", use_cache=False)
        model = transformers.GPT2LMHeadModel(config)
        blocks = model.transformer.h
    model = model.to(torch.bfloat16).train()
    for block in blocks:
        block.compile(backend=backend, dynamic=True)
    return model, config


def _counter(excluded: set[int]) -> tuple[dict, object]:
    """A pack hook that records each saved storage once (``excluded`` data pointers left out)."""
    seen: dict[int, int] = {}

    def pack(t: object) -> object:
        storage = t.untyped_storage()
        if storage.data_ptr() not in excluded:
            seen.setdefault(storage.data_ptr(), storage.nbytes())
        return t
    return seen, pack


def models(torch: object, transformers: object) -> dict:
    """Saved bytes of the compiled blocks and loss, per family and (B, S)."""
    functional = torch.nn.functional

    def cross_entropy(logits, labels):  # noqa: ANN001, ANN202
        return functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))

    loss_fn = torch.compile(cross_entropy, backend=SAVED_BACKEND, dynamic=True)
    out: dict = {}
    for family in ("llama", "gpt2"):
        model, config = _model(torch, transformers, family)
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        rows = []
        for batch, seq in POINTS:
            ids = torch.randint(0, config.vocab_size, (batch, seq))
            labels = torch.randint(0, config.vocab_size, (batch, seq))
            seen, pack = _counter(params)
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = loss_fn(model(input_ids=ids).logits, labels)
            loss.backward()  # the compiled backward runs: what was saved is enough
            model.zero_grad(set_to_none=True)
            rows.append({"batch": batch, "seq": seq, "saved": sum(seen.values())})
        out[family] = rows
    return out


def checkpointed(torch: object, transformers: object) -> dict:
    """Saved bytes of one compiled, checkpointed Llama block (full and per-op), per (B, S)."""
    from torch.utils import checkpoint
    from transformers.models.llama import modeling_llama as modeling

    policy = _sibling("saved_for_backward_child")._policy
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**LLAMA, attn_implementation="sdpa")
    layer = modeling.LlamaDecoderLayer(config, 0).to(torch.bfloat16)
    rotary = modeling.LlamaRotaryEmbedding(config)

    def per_op() -> tuple:  # the policy's contexts, fresh counts per call (torchtitan's selective_checkpointing_context_fn)
        return checkpoint.create_selective_checkpoint_contexts(policy(torch, defaultdict(int)))

    class Checkpointed(torch.nn.Module):  # torchtitan's apply_ac: the wrapper, compiled after
        def __init__(self, selective: bool) -> None:
            super().__init__()
            self.layer, self.selective = layer, selective

        def forward(self, h, cos, sin):  # noqa: ANN001, ANN202
            if self.selective:  # dynamo reads context_fn only as a function it can see, not an attribute
                return checkpoint.checkpoint(self.layer, h, None, position_embeddings=(cos, sin),
                                             use_reentrant=False, preserve_rng_state=False, context_fn=per_op)
            return checkpoint.checkpoint(self.layer, h, None, position_embeddings=(cos, sin), use_reentrant=False,
                                         preserve_rng_state=False)

    params = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    out: dict = {"rng_state": int(torch.get_rng_state().numel())}
    for name, selective in (("ops", True), ("full", False)):
        block = Checkpointed(selective)
        block.compile(backend=SAVED_BACKEND, dynamic=True)
        rows = []
        for batch, seq in POINTS[:2]:
            x = torch.randn(batch, seq, config.hidden_size, dtype=torch.bfloat16, requires_grad=True)
            cos, sin = rotary(x, torch.arange(seq)[None])
            seen, pack = _counter(params | {cos.untyped_storage().data_ptr(), sin.untyped_storage().data_ptr()})
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                y = block(x.clone(), cos, sin)  # the block's input made here: only the block keeps it
            (y[0] if isinstance(y, tuple) else y).float().sum().backward()
            rows.append({"batch": batch, "seq": seq, "saved": sum(seen.values())})
        out[name] = rows
    return out


def _allocated(torch: object, run: object) -> tuple[int, int]:
    """(peak, net) bytes the CPU allocator gave out while ``run()`` ran, relative to its start."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = sorted((e.start_ns(), i, e.nbytes()) for i, e in enumerate(prof.profiler.kineto_results.events())
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    current = peak = 0
    for _, _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak, current


def chunked(torch: object) -> list[dict]:
    """torchtune's chunked loss with compute_cross_entropy compiled (inductor): saved bytes, and the forward and
    backward peaks above the head's inputs and parameters, per (B, S, N)."""
    functional = torch.nn.functional

    def compute_cross_entropy(logits, labels):  # noqa: ANN001, ANN202  (CEWithChunkedOutputLoss, bd2a0fc)
        return functional.cross_entropy(logits.float(), labels, ignore_index=-100, reduction="sum")

    compiled = torch.compile(compute_cross_entropy, backend="inductor", dynamic=True)  # torchtune's compile_loss
    hidden, vocab = LLAMA["hidden_size"], LLAMA["vocab_size"]
    out = []
    for batch, seq, chunks in CHUNK_POINTS:
        torch.manual_seed(0)
        head = _chunked_head(torch, hidden, vocab, chunks, compiled).to(torch.bfloat16)
        x = torch.randn(batch, seq, hidden, dtype=torch.bfloat16, requires_grad=True)
        labels = torch.randint(0, vocab, (batch, seq))
        excluded = {p.untyped_storage().data_ptr() for p in head.parameters()} | {x.untyped_storage().data_ptr()}
        for _ in range(2):  # the first pass compiles; the second is measured
            seen, pack = _counter(excluded)
            holder: dict = {}

            def forward() -> None:
                with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):  # noqa: B023
                    holder["loss"] = head(x, labels)  # noqa: B023

            forward_peak, net = _allocated(torch, forward)
            backward_peak, _ = _allocated(torch, lambda: holder.pop("loss").backward())  # noqa: B023
            x.grad = None
            head.zero_grad(set_to_none=True)
        out.append({"batch": batch, "seq": seq, "chunks": chunks, "saved": sum(seen.values()),
                    "forward": forward_peak, "after_forward": net, "backward": net + backward_peak})
    return out


if __name__ == "__main__":
    TORCH, TRANSFORMERS = _torch()
    print(json.dumps({"models": models(TORCH, TRANSFORMERS), "checkpointed": checkpointed(TORCH, TRANSFORMERS),
                      "chunked": chunked(TORCH), "llama": LLAMA, "gpt2": GPT2, "layers": LAYERS,
                      "saved_backend": SAVED_BACKEND}))
