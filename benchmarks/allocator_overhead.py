#!/usr/bin/env python3
"""How much memory the CUDA caching allocator needs beyond the live tensors of real training steps.

Records the allocation sequence of three training steps on the meta device
(``symbolic.measured.allocator_trace.training_trace``: no computation, the same events as on the CPU),
replays it through the allocator's rules (``symbolic.library.caching_allocator``) and prints, as
a Markdown table, the tensor peak, the reserved peak with memory to spare, and the least memory
with which the allocator serves the step (``min_capacity``), against the runtime's allowance
(``runtime.terms(...)``'s ``allocator`` term). Default: under a minute; ``--full`` adds GPT-2 355M
and a TinyLlama-1.1B-shaped Llama (a few minutes).

    python benchmarks/allocator_overhead.py [--full]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

GPT2 = {"vocab_size": 50257, "n_positions": 1024, "attn_implementation": "eager"}
TINYLLAMA = {"num_hidden_layers": 22, "hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 32,
             "num_key_value_heads": 4, "vocab_size": 32000, "attn_implementation": "eager"}
# (label, family, config, batch, seq, dtype, optimizer)
QUICK = [
    ("GPT-2 124M", "gpt2", {"n_layer": 12, "n_embd": 768, "n_head": 12}, 1, 1024, "fp32", "adamw"),
    ("GPT-2 124M", "gpt2", {"n_layer": 12, "n_embd": 768, "n_head": 12}, 8, 1024, "fp32", "adamw"),
    ("GPT-2 124M", "gpt2", {"n_layer": 12, "n_embd": 768, "n_head": 12}, 4, 1024, "bf16", "sgd-momentum"),
    ("GPT-2 6 layers, H 768", "gpt2", {"n_layer": 6, "n_embd": 768, "n_head": 12}, 1, 128, "bf16", "sgd-momentum"),
    ("GPT-2 2 layers, H 512", "gpt2", {"n_layer": 2, "n_embd": 512, "n_head": 8}, 4, 128, "bf16", "adamw"),
    ("GPT-2 2 layers, H 512", "gpt2", {"n_layer": 2, "n_embd": 512, "n_head": 8}, 8, 512, "fp32", "sgd-momentum"),
]
FULL = QUICK + [
    ("GPT-2 355M", "gpt2", {"n_layer": 24, "n_embd": 1024, "n_head": 16}, 4, 1024, "bf16", "adamw"),
    ("TinyLlama-1.1B shape", "llama", {}, 1, 2048, "bf16", "adamw"),
    ("TinyLlama-1.1B shape", "llama", {}, 2, 2048, "bf16", "sgd-momentum"),
]


def row(label: str, family: str, config: dict, batch: int, seq: int, dtype: str, optimizer: str) -> str:
    """One Markdown row: the replayed peaks of three steps of this model."""
    import torch
    import transformers

    from symbolic.library import runtime
    from symbolic.library.caching_allocator import min_capacity, replay
    from symbolic.measured.allocator_trace import training_trace

    transformers.logging.set_verbosity_error()
    with torch.device("meta"):
        if family == "gpt2":
            model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2, **config))
        else:
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINYLLAMA, **config))
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, seq), device="meta")
    opt = (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)) if optimizer == "sgd-momentum" else None
    events = training_trace(model, ids, lambda m, x: m(input_ids=x, labels=x).loss, steps=3, optimizer=opt)
    free = replay(events)
    needed = min_capacity(events)
    allowance = int(runtime.terms(gpus_in_job=1, tensors=free.requested)[2].expr)
    over = needed - free.requested
    covered = "yes" if over <= allowance else "no"
    return (f"| {label} | {batch} × {seq} | {dtype}, {optimizer} | {free.requested / 2**30:.3f} GiB | "
            f"{(free.reserved / free.requested - 1) * 100:.2f} % | {over / 2**20:,.1f} MiB "
            f"({over / free.requested * 100:.2f} %) | {allowance / 2**20:,.1f} MiB | {covered} |")


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="add GPT-2 355M and a TinyLlama-shaped model")
    args = parser.parse_args(argv)
    print("| model | B × S | dtype, optimizer | tensor peak | reserved beyond it (memory to spare) | "
          "least memory beyond it | runtime allowance | covered |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for spec in FULL if args.full else QUICK:
        print(row(*spec), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
