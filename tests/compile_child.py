"""Torch measurements for ``test_compile.py`` (issue 28, ``--compile``), run in a child process.

Each decoder block of a tiny bf16 Hugging Face GPT-2 and Llama (sdpa, no dropout, no cache) is
compiled as torchtitan compiles its TransformerBlocks (``apply_compile``: one ``torch.compile`` per
block), and the loss, ``F.cross_entropy(logits.float(), labels)``, is compiled too (torchtune's
``compile_loss``); backend inductor, ``dynamic=True`` so that one compilation serves every (B, S).
What the compiled graph saves is read by a saved-tensors pack hook: ``CompiledFunction`` saves its
tensors with ``save_for_backward``, which calls the hook; each storage is counted once,
parameters excluded (as ``measure.saved_tensors``).

Writes one JSON object on stdout; exits with 77 when torch or transformers cannot be imported, or
when inductor finds no C++ compiler.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

SKIP = 77
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tiny_models import GPT2, LLAMA  # noqa: E402

from symbolic.networks import torch_env  # noqa: E402

# (B, S): the first two are the points the terms were read from, the third an independent check
POINTS = ((2, 32), (1, 96), (3, 48))
LAYERS = 2


def _torch() -> tuple:
    """torch and transformers, imported here; exits 77 when they or a C++ compiler are missing."""
    if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        print("inductor needs a C++ compiler on the CPU (g++, c++ or clang++): none found", file=sys.stderr)
        sys.exit(SKIP)
    try:
        torch_env.ready()
        import torch
        import transformers
    except ImportError as err:  # pragma: no cover - depends on the environment
        print(err, file=sys.stderr)
        sys.exit(SKIP)
    return torch, transformers


def _model(torch: object, transformers: object, family: str) -> tuple:
    """The tiny bf16 model with its blocks compiled, and the blocks."""
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
        block.compile(backend="inductor", dynamic=True)
    return model, config


def _counter(excluded: set[int]) -> tuple[dict, object]:
    """A pack hook that records each saved storage once (parameters excluded)."""
    seen: dict[int, int] = {}

    def pack(t: object) -> object:
        storage = t.untyped_storage()
        if storage.data_ptr() not in excluded:
            seen.setdefault(storage.data_ptr(), storage.nbytes())
        return t
    return seen, pack


def models() -> dict:
    """Saved bytes of the compiled blocks and loss, per family and (B, S)."""
    torch, transformers = _torch()
    functional = torch.nn.functional

    def cross_entropy(logits, labels):  # noqa: ANN001, ANN202
        return functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))

    loss_fn = torch.compile(cross_entropy, backend="inductor", dynamic=True)
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


if __name__ == "__main__":
    print(json.dumps({"models": models(), "llama": LLAMA, "gpt2": GPT2, "layers": LAYERS}))
