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
import shutil
import sys
from pathlib import Path

SKIP = 77
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from symbolic.networks import torch_env  # noqa: E402

HIDDEN, HEADS, MLP, VOCAB = 64, 4, 128, 4096
POINTS = ((2, 96), (3, 80))  # (B, S): B·S above H, so that the loss's moments lead; no size of 1 (dynamic shapes)
PATHS = ("loss", "model", "model_compiled")
IGNORE = -100


def _torch() -> object:
    if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        print("inductor needs a C++ compiler on the CPU (g++, c++ or clang++): none found", file=sys.stderr)
        sys.exit(SKIP)
    try:
        torch_env.ready()
        import torch
    except ImportError as err:
        print(f"torch is not importable: {err}", file=sys.stderr)
        sys.exit(SKIP)
    return torch


def _decoder(torch: object, upcast: bool) -> object:
    """torchtune's decoder, small: one layer, tied output; ``upcast``: ``unembed`` returns ``output(h).float()``."""
    nn, functional = torch.nn, torch.nn.functional

    class RMSNorm(nn.Module):  # torchtune/modules/rms_norm.py
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(HIDDEN))

        def forward(self, x):  # noqa: ANN001, ANN202
            x_fp32 = x.float()
            x_normed = (x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x)
            return x_normed * self.scale

    class Layer(nn.Module):  # TransformerSelfAttentionLayer: norm, attention, residual; norm, MLP, residual
        def __init__(self) -> None:
            super().__init__()
            self.sa_norm, self.mlp_norm = RMSNorm(), RMSNorm()
            self.q_proj, self.k_proj, self.v_proj, self.output_proj = (nn.Linear(HIDDEN, HIDDEN, bias=False)
                                                                       for _ in range(4))
            self.w1, self.w3 = nn.Linear(HIDDEN, MLP, bias=False), nn.Linear(HIDDEN, MLP, bias=False)
            self.w2 = nn.Linear(MLP, HIDDEN, bias=False)

        def forward(self, x):  # noqa: ANN001, ANN202
            b, s, _ = x.shape
            h = self.sa_norm(x)
            q, k, v = (proj(h).view(b, s, HEADS, -1).transpose(1, 2) for proj in (self.q_proj, self.k_proj,
                                                                                   self.v_proj))
            attn = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = self.output_proj(attn.transpose(1, 2).reshape(b, s, HIDDEN)) + x
            m = self.mlp_norm(h)
            return h + self.w2(functional.silu(self.w1(m)) * self.w3(m))

    class Decoder(nn.Module):  # TransformerDecoder with a tied output (llama3_2's TiedLinear)
        def __init__(self) -> None:
            super().__init__()
            self.tok_embeddings = nn.Embedding(VOCAB, HIDDEN)
            self.layers = nn.ModuleList([Layer()])
            self.norm = RMSNorm()

        def forward(self, tokens):  # noqa: ANN001, ANN202
            h = self.tok_embeddings(tokens)
            for layer in self.layers:
                h = layer(h)
            h = self.norm(h)  # unembed: the last layer's output is released here
            if upcast:
                return functional.linear(h, self.tok_embeddings.weight).float()  # self.output(h).float()
            return functional.linear(h, self.tok_embeddings.weight)

    torch.manual_seed(0)
    return Decoder().to(torch.bfloat16)


def _loss_fn(torch: object, path: str, labels: object, compiled: object) -> object:
    """The recipe's ``_loss_step`` after the model (``path``: whose loss), ``labels`` held through the step."""
    functional = torch.nn.functional
    shifted = torch.hstack((labels[..., 1:], torch.full((labels.shape[0], 1), IGNORE))).reshape(-1)

    def hugging_face(logits):  # noqa: ANN001, ANN202  (ForCausalLMLoss: the upcast inside the loss)
        return functional.cross_entropy(logits.float().reshape(-1, VOCAB), shifted, ignore_index=IGNORE)

    def torchtune(logits):  # noqa: ANN001, ANN202  (_loss_step: reshape, the loss module, del logits)
        return compiled(logits.reshape(-1, VOCAB), shifted)

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


def main() -> None:
    torch = _torch()
    torch.set_num_threads(1)
    plain = torch.nn.CrossEntropyLoss(ignore_index=IGNORE)
    losses = {"loss": None, "model": plain,
              "model_compiled": torch.compile(torch.nn.CrossEntropyLoss(ignore_index=IGNORE), backend="inductor",
                                              dynamic=True)}
    out = {path: [_point(torch, path, b, s, losses) for b, s in POINTS] for path in PATHS}
    print(json.dumps({"paths": out, "hidden": HIDDEN, "vocab": VOCAB, "element_bytes": 2}))


if __name__ == "__main__":
    main()
