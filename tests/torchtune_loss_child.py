"""Torch measurements for ``test_torchtune_loss.py`` (issue 28, ``--logits-upcast model``): torchtune's loss path.

A small decoder written as torchtune's (pytorch/torchtune 1814feb, the optimization table's commit, and bd2a0fc):
``RMSNorm`` computing in fp32 (``x.float()``, ``rsqrt``, ``type_as``, times the scale), attention over SDPA, a
SwiGLU MLP, the tied output ``F.linear(h, tok_embeddings.weight)``, and ``TransformerDecoder.unembed``'s
``self.output(h).float()``: the model returns fp32 logits. The recipe's ``_loss_step``
(``full_finetune_single_device.py``): labels shifted with ``hstack`` and the ignore index, the logits reshaped to
``(B·S, V)``, ``nn.CrossEntropyLoss()`` over them, then ``del logits`` (the step's loss function returns the loss
only, so nothing else holds them). Three loss paths over the same model, bf16, pure (no autocast), one thread:

- ``loss``: the model returns bf16 logits and the loss upcasts them (Hugging Face's ``ForCausalLMLoss``): the
  planner's default, for comparison;
- ``model``: torchtune's path with the loss eager (``full_finetune_single_device`` discards ``compile_loss``'s
  return value, so its plain cross-entropy is never compiled);
- ``model_compiled``: torchtune's path with the loss compiled by inductor (``lora_finetune_single_device``
  assigns ``self._loss_fn = training.compile_loss(self._loss_fn)``): ``torch.compile(nn.CrossEntropyLoss())``.

Each at two (B, S): the bytes saved for backward (``measure.saved_tensors``) and the step's peaks by phase from the
CPU allocator's events (``measure.step_peak``, ``method="profiler"``; ``tensor_phases``: each ATen call's scratch
left out), in the steady state (AdamW's states exist). Writes one JSON object on stdout; exits with 77 when torch
cannot be imported or inductor finds no C++ compiler.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script

SKIP = 77
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


HIDDEN, HEADS, KV_HEADS, MLP, VOCAB = 64, 4, 2, 128, 4096
HEAD_DIM = HIDDEN // HEADS
MAX_POSITION = 128  # torchtune's cache covers max_seq_len; the plan does not count this buffer
POINTS = ((2, 96), (3, 80))  # (B, S): B·S above H, so that the loss's moments lead; no size of 1 (dynamic shapes)
PATHS = ("loss", "model", "model_compiled")
IGNORE = -100


def _torch() -> object:
    return child_main.inductor_modules("torch")[0]


def _decoder(torch: object, upcast: bool, layers: int = 1, offloading: object = None, vocab: int = VOCAB) -> object:
    """torchtune's decoder, small: ``layers`` layers, tied output; ``upcast``: ``unembed`` returns
    ``self.output(h).float()``. Called with ``input_pos`` (packed positions), RoPE gathers its cache rows.
    ``offloading`` (a ``_Stash``): each layer checkpointed (non-reentrant) and the output head under no-op hooks,
    as the recipe with activation checkpointing and offloading runs it; ``checkpointed`` on the model switches the
    layers' checkpoint alone (``CheckpointWrapper``'s non-reentrant checkpoint around each layer's call)."""
    import contextlib

    from torch.utils.checkpoint import checkpoint

    nn, functional = torch.nn, torch.nn.functional

    class RMSNorm(nn.Module):  # torchtune/modules/rms_norm.py (1814feb)
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(HIDDEN))

        def forward(self, x):  # noqa: ANN001, ANN202
            x_fp32 = x.float()
            x_normed = (x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x)
            return x_normed * self.scale

    class RoPE(nn.Module):  # RotaryPositionalEmbeddings / Llama3ScaledRoPE.forward: fp32, the cache by input_pos
        def __init__(self) -> None:
            super().__init__()
            theta = 1.0 / (500000.0 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
            angles = torch.outer(torch.arange(MAX_POSITION).float(), theta)
            self.register_buffer("cache", torch.stack([angles.cos(), angles.sin()], dim=-1), persistent=False)

        def forward(self, x, input_pos):  # noqa: ANN001, ANN202
            seq_len = x.size(1)
            rope_cache = self.cache[:seq_len] if input_pos is None else self.cache[input_pos]
            xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
            rope_cache = rope_cache.view(-1, xshaped.size(1), 1, xshaped.size(3), 2)
            x_out = torch.stack([xshaped[..., 0] * rope_cache[..., 0] - xshaped[..., 1] * rope_cache[..., 1],
                                 xshaped[..., 1] * rope_cache[..., 0] + xshaped[..., 0] * rope_cache[..., 1]], -1)
            return x_out.flatten(3).type_as(x)

    class Layer(nn.Module):  # TransformerSelfAttentionLayer with MultiHeadAttention and FeedForward (1814feb)
        def __init__(self, rope: nn.Module) -> None:
            super().__init__()
            self.sa_norm, self.mlp_norm, self.rope = RMSNorm(), RMSNorm(), rope  # one RoPE for every layer
            self.q_proj = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
            self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
            self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
            self.output_proj = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
            self.w1, self.w3 = nn.Linear(HIDDEN, MLP, bias=False), nn.Linear(HIDDEN, MLP, bias=False)
            self.w2 = nn.Linear(MLP, HIDDEN, bias=False)

        def forward(self, x, input_pos):  # noqa: ANN001, ANN202
            b, s, _ = x.shape
            h = self.sa_norm(x)
            q = self.rope(self.q_proj(h).view(b, s, HEADS, HEAD_DIM), input_pos).transpose(1, 2)
            k = self.rope(self.k_proj(h).view(b, s, KV_HEADS, HEAD_DIM), input_pos).transpose(1, 2)
            v = self.v_proj(h).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
            shape = (b, KV_HEADS, HEADS // KV_HEADS, -1, HEAD_DIM)  # K and V expanded to every query head
            k, v = k.unsqueeze(2).expand(shape).flatten(1, 2), v.unsqueeze(2).expand(shape).flatten(1, 2)
            # packed: flex attention with a block mask on the GPU; both it and the CPU's fused kernel keep q, k, v,
            # the output and the fp32 log-sum-exp
            attn = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = self.output_proj(attn.transpose(1, 2).contiguous().view(b, s, -1)) + x
            m = self.mlp_norm(h)
            return h + self.w2(functional.silu(self.w1(m)) * self.w3(m))

    class Decoder(nn.Module):  # TransformerDecoder with a tied output (llama3_2's TiedLinear)
        def __init__(self) -> None:
            super().__init__()
            self.tok_embeddings = nn.Embedding(vocab, HIDDEN)
            rope = RoPE()  # llama3_2's builder makes one and hands it to every layer
            self.layers = nn.ModuleList([Layer(rope) for _ in range(layers)])
            self.norm = RMSNorm()
            self.checkpointed = offloading is not None  # torchtune's checkpoint_wrapper around each layer

        def forward(self, tokens, input_pos=None):  # noqa: ANN001, ANN202
            h = self.tok_embeddings(tokens)
            for layer in self.layers:
                if not self.checkpointed:
                    h = layer(h, input_pos)
                    continue
                if offloading is not None:
                    offloading.layer_inputs.add(h.untyped_storage().data_ptr())
                h = checkpoint(layer, h, input_pos, use_reentrant=False)
            h = self.norm(h)  # unembed: the last layer's output is released here
            # get_act_offloading_ctx_manager: the output head under a NoOpManager (nothing of it offloaded)
            head = contextlib.nullcontext() if offloading is None else torch.autograd.graph.saved_tensors_hooks(
                lambda t: t, lambda t: t)
            with head:
                logits = functional.linear(h, self.tok_embeddings.weight)
            return logits.float() if upcast else logits  # self.output(h).float()

    torch.manual_seed(0)
    decoder = Decoder().to(torch.bfloat16)  # as built under set_default_dtype(bf16), except:
    rope = decoder.layers[0].rope
    rope.cache = rope.cache.float()  # rope_init builds the cache from .float() angles: it stays fp32
    return decoder


def _loss_fn(torch: object, path: str, labels: object, compiled: object) -> object:
    """The recipe's ``_loss_step`` after the model (``path``: whose loss), ``labels`` held through the step."""
    functional = torch.nn.functional
    shifted = torch.hstack((labels[..., 1:], torch.full((labels.shape[0], 1), IGNORE))).reshape(-1)

    def hugging_face(logits):  # noqa: ANN001, ANN202  (ForCausalLMLoss: the upcast inside the loss)
        return functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), shifted, ignore_index=IGNORE)

    def torchtune(logits):  # noqa: ANN001, ANN202  (_loss_step: reshape, the loss module, del logits)
        return compiled(logits.reshape(-1, logits.size(-1)), shifted)

    fn = hugging_face if path == "loss" else torchtune
    fn.held = (labels, shifted)
    return fn


def _point(torch: object, path: str, batch: int, seq: int, losses: dict) -> dict:
    from symbolic.measured import measure

    model = _decoder(torch, upcast=path != "loss")
    torch.manual_seed(1)
    tokens = torch.randint(0, VOCAB, (batch, seq))
    loss_fn = _loss_fn(torch, path, torch.randint(0, VOCAB, (batch, seq)), losses[path])
    loss_fn(model(tokens)).backward()  # warm-up: the compiled loss compiles for these sizes now
    model.zero_grad(set_to_none=True)
    saved = measure.saved_tensors(model, tokens, loss_fn).total_bytes
    peak = measure.step_peak(model, tokens, loss_fn, method="profiler", steps=2)
    weights = measure.parameter_bytes(model)
    unsaved = loss_fn.held[0].untyped_storage().nbytes()  # the labels (the ids and shifted labels are saved)
    return {"batch": batch, "seq": seq, "saved": saved, "weights": weights, "unsaved_inputs": unsaved,
            "phases": peak.tensor_phases, "parameter_tensors": len(list(model.parameters()))}


class _Stash:
    """OffloadActivations.pack_tensor's forward stash (torchtune 1814feb), without the copy and the streams: every
    pack call takes the next id; a tensor of at least 1024 bytes that is no parameter is stashed, and stash entries
    with an id at most the new id less max_fwd_stash_size (5) are dropped."""

    def __init__(self, torch: object) -> None:
        self.torch, self.id, self.stash, self.layer_inputs, self.last_input = torch, 0, {}, set(), 0

    def pack(self, t: object) -> object:
        self.id += 1
        if t.untyped_storage().data_ptr() in self.layer_inputs:
            self.last_input = self.id
        if t.element_size() * t.nelement() >= 1024 and not isinstance(t, self.torch.nn.Parameter):
            for key in [k for k in self.stash if k <= self.id - 5]:
                del self.stash[key]
            self.stash[self.id] = t
        return t


def _offload_stash(torch: object, batch: int, seq: int) -> dict:
    """What torchtune's forward stash holds when the forward pass ends: layer inputs among it, its bytes (each
    storage once) and the pack calls after the last layer input's."""
    stash = _Stash(torch)
    model = _decoder(torch, upcast=False, layers=2, offloading=stash)
    tokens = torch.randint(0, VOCAB, (batch, seq))
    with torch.autograd.graph.saved_tensors_hooks(stash.pack, lambda t: t):
        logits = model(tokens, _positions(torch, batch, seq))
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in stash.stash.values()}
    inputs = sum(1 for ptr in storages if ptr in stash.layer_inputs)
    del logits
    return {"batch": batch, "seq": seq, "layer_inputs": inputs, "bytes": sum(storages.values()),
            "packs_after_last_input": stash.id - stash.last_input}


def _positions(torch: object, batch: int, seq: int) -> object:
    """Packed positions: two documents per row, each counting from 0 (PackedDataset's input_pos)."""
    half = seq // 2
    return torch.cat([torch.arange(half), torch.arange(seq - half)]).repeat(batch, 1)


def _layers(torch: object, batch: int, seq: int, packed: bool, plain: object) -> dict:
    """Bytes saved with one and two layers (their difference: one layer's), torchtune's eager loss path."""
    from symbolic.measured import measure

    out = {}
    for layers in (1, 2):
        model = _decoder(torch, upcast=True, layers=layers)
        torch.manual_seed(1)
        inputs = {"tokens": torch.randint(0, VOCAB, (batch, seq))}
        if packed:
            inputs["input_pos"] = _positions(torch, batch, seq)
        loss_fn = _loss_fn(torch, "model", torch.randint(0, VOCAB, (batch, seq)), plain)
        out[layers] = measure.saved_tensors(model, inputs, loss_fn).total_bytes
    return {"batch": batch, "seq": seq, "packed": packed, "one": out[1], "two": out[2]}


def _packed_step(torch: object, batch: int, seq: int, plain: object) -> dict:
    """The table's "+ Packed Dataset" step, small: two torchtune layers, packed positions, the eager loss over the
    model's fp32 logits, AdamW; its peaks by phase and what the plan does not hold (the RoPE cache buffer)."""
    from symbolic.measured import measure

    model = _decoder(torch, upcast=True, layers=2)
    torch.manual_seed(1)
    inputs = {"tokens": torch.randint(0, VOCAB, (batch, seq)), "input_pos": _positions(torch, batch, seq)}
    loss_fn = _loss_fn(torch, "model", torch.randint(0, VOCAB, (batch, seq)), plain)
    loss_fn.held = (*loss_fn.held, inputs["input_pos"])
    peak = measure.step_peak(model, inputs, loss_fn, method="profiler", steps=2)
    buffers = sum(b.untyped_storage().nbytes() for b in model.buffers())
    unsaved = sum(t.untyped_storage().nbytes() for t in (loss_fn.held[0], inputs["input_pos"]))
    return {"batch": batch, "seq": seq, "phases": peak.tensor_phases, "buffers": buffers, "unsaved_inputs": unsaved,
            "parameter_tensors": len(list(model.parameters()))}


def main() -> None:
    torch = _torch()
    torch.set_num_threads(1)
    plain = torch.nn.CrossEntropyLoss(ignore_index=IGNORE)
    losses = {"loss": None, "model": plain,
              "model_compiled": torch.compile(torch.nn.CrossEntropyLoss(ignore_index=IGNORE), backend="inductor",
                                              dynamic=True)}
    out = {path: [_point(torch, path, b, s, losses) for b, s in POINTS] for path in PATHS}
    layers = [_layers(torch, b, s, packed, plain) for b, s in POINTS for packed in (False, True)]
    steps = [_packed_step(torch, b, s, plain) for b, s in POINTS]
    stashes = [_offload_stash(torch, b, s) for b, s in POINTS]
    config = {"hidden": HIDDEN, "heads": HEADS, "kv_heads": KV_HEADS, "mlp": MLP, "vocab": VOCAB}
    print(json.dumps({"paths": out, "layers": layers, "packed_steps": steps, "stashes": stashes, **config, "element_bytes": 2}))


if __name__ == "__main__":
    main()
