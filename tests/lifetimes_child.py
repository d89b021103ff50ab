"""The step's lifetimes measured on the CPU for ``test_step_lifetimes.py``, run in a child process.

- gradient accumulation and the optimizer in backward: tiny GPT-2 and Llama models (``tiny_models``,
  two layers) trained with ``measure.step_peak`` (``accumulate`` K micro-batches per optimizer step,
  or ``in_backward``: one optimizer per parameter stepped in a post-accumulate-grad hook, as
  torchtune's ``register_optim_in_bwd_hooks``), each phase's peak beside what ``symbolic memory
  ... --activations pytorch --device cpu --json`` says for the same flags;
- activation offloading: a stack of layers checkpointed as torchtune checkpoints them (non-reentrant,
  the layer's input its only argument) run under ``torch.autograd.graph.save_on_cpu``, whose pack
  hook is counted: the bytes it copies to the host, beside the plan's ``offloaded_activations``.

Writes one JSON object on stdout; exits with ``SKIP`` (77) when torch or transformers cannot be imported.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from tiny_models import GPT2, LLAMA  # this folder: sys.path[0] of a child script and of the tests

from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

SKIP = 77
ROOT = Path(__file__).resolve().parent.parent
LAYERS, BATCH, SEQ = 2, 2, 32
# name, sizes, precision, attn, optimizer, accumulate, in_backward
STEPS = [
    ("llama-3-8b", LLAMA, "bf16", "sdpa", "adamw", 2, False),
    ("llama-3-8b", LLAMA, "bf16", "sdpa", "adamw", 3, False),
    ("gpt2", GPT2, "fp32", "eager", "adamw", 2, False),
    ("llama-3-8b", LLAMA, "bf16-mixed", "sdpa", "sgd-momentum", 3, False),
    ("llama-3-8b", LLAMA, "bf16", "sdpa", "adamw", 1, True),
    ("gpt2", GPT2, "fp32", "eager", "adamw", 1, True),
    ("llama-3-8b", LLAMA, "fp32", "sdpa", "sgd-momentum", 1, True),
]
# the offloading stack: Llama-3-8B's width and layers, a short sequence (what is saved is one B·S·H input a layer)
OFFLOAD = {"model": "llama-3-8b", "batch": 2, "seq": 16, "hidden": 4096, "layers": 32}


def planner(model: str, precision: str, attn: str, optimizer: str, extra: list[str]) -> dict:
    """``symbolic memory ... --json`` for one case (the CLI, in this process)."""
    from helpers import cli_json

    argv = ["memory", model, "--activations", "pytorch", "--device", "cpu", "--batch", str(BATCH), "--seq", str(SEQ),
            "--precision", precision, "--attn", attn, "--optimizer", optimizer, "--no-use-cache", "--json", *extra]
    return cli_json(argv)


def steps(folder: Path) -> list[dict]:
    from symbolic.measured import crosscheck as cc
    from symbolic.measured import measure

    results = []
    for i, (name, sizes, precision, attn, optimizer, accumulate, in_backward) in enumerate(STEPS):
        target = cc.load_target(name, sizes, "off")
        model = cc.build(target, LAYERS, precision, attn, use_cache=False)
        inputs, loss_fn = cc.inputs_for(target, BATCH, SEQ, precision)
        peak = measure.step_peak(model, inputs, loss_fn, optimizer=cc.optimizer_factory(optimizer),
                                 autocast=cc.autocast_dtype(precision), accumulate=accumulate, in_backward=in_backward)
        path = folder / str(i) / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(cc._with_layers(target.config, LAYERS)))  # noqa: SLF001 (the measured config)
        extra = ["--optimizer-in-backward"] if in_backward else ["--grad-accum", str(accumulate)]
        data = planner(str(path), precision, attn, optimizer, extra)
        results.append({"case": [name, precision, optimizer, accumulate, in_backward], "measured": peak.phases,
                        "planned": data["phases"], "total_bytes": data["total_bytes"], "peak": peak.peak_bytes})
    return results


def offloaded() -> dict:
    """Bytes ``save_on_cpu`` copies from a checkpointed stack (torchtune's structure), and the tensors it saw."""
    import torch
    from torch.utils.checkpoint import checkpoint

    b, s, h, layers = OFFLOAD["batch"], OFFLOAD["seq"], OFFLOAD["hidden"], OFFLOAD["layers"]
    class Layer(torch.nn.Module):  # norm-like: saves several tensors when not checkpointed
        def __init__(self) -> None:
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(h, dtype=torch.bfloat16))

        def forward(self, x):  # noqa: ANN001, ANN202
            norm = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True)).to(x.dtype)
            return x + torch.nn.functional.silu(x * norm * self.scale)

    torch.manual_seed(0)
    stack = [Layer() for _ in range(layers)]
    x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    moved = {"bytes": 0, "tensors": 0, "small": 0}
    offload = torch.autograd.graph.save_on_cpu(pin_memory=False)
    pack = offload.pack_hook

    def counted(tensor):  # noqa: ANN001, ANN202
        moved["bytes"] += tensor.element_size() * tensor.nelement()
        moved["tensors"] += 1
        moved["small"] += tensor.element_size() * tensor.nelement() < 1024  # torchtune's min_offload_size
        return pack(tensor)

    offload.pack_hook = counted
    with offload:
        y = x
        for module in stack:  # torchtune's checkpoint_wrapper: NO_REENTRANT, the layer's input its only argument
            y = checkpoint(module, y, use_reentrant=False)
    y.float().pow(2).mean().backward()  # the head and loss outside the context, as torchtune's recipe runs them
    return {**moved, "grad_ok": bool(x.grad is not None and torch.isfinite(x.grad.float()).all())}


def main() -> int:
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        return SKIP
    sys.path.insert(0, str(ROOT))
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        data = {"steps": steps(Path(folder)), "offload": offloaded()}
    json.dump(data, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
