"""Torch measurements for ``test_adam_8bit_step.py``: one parameter's step of torchao's ``AdamW8bit``.

torchao 0.18.0's ``AdamW8bit.step`` runs ``single_param_adam`` through ``torch.compile`` (inductor) for each
parameter. A bf16 weight of each of two shapes (every dimension a multiple of the 256-element block, so both
states are quantized) is given a gradient and stepped three times under the profiler (``profile_memory``):
the first step creates the states and compiles, the later ones are the steady step. The answer is each step's
peak over the level at its start (the parameter, its gradient and the states were allocated before).

Writes one JSON object on stdout; exits with 77 when torch or torchao cannot be imported or inductor finds
no C++ compiler.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script

SKIP = 77
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SHAPES = ((256, 512), (512, 768))  # two sizes: the step's bytes per element, and no constant beside them
STEPS = 3


def _imports() -> tuple[object, object]:
    torch, optim = child_main.inductor_modules("torch", "torchao.optim")
    return torch, optim.AdamW8bit


def _step_extra(torch: object, step: object) -> int:
    """Peak bytes the CPU allocator holds during ``step()``, over its level when the step starts."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    level = peak = 0
    memory = sorted((e.start_ns(), i, e.nbytes()) for i, e in enumerate(prof.profiler.kineto_results.events())
                    if e.name() == "[memory]")
    for _, _, delta in memory:
        level += delta
        peak = max(peak, level)
    return peak


def measure(torch: object, adamw8bit: object) -> list[dict]:
    out = []
    for rows, cols in SHAPES:
        torch.manual_seed(0)
        weight = torch.nn.Parameter(torch.randn(rows, cols, dtype=torch.bfloat16))
        optimizer = adamw8bit([weight], lr=1e-3)
        extras = []
        for _ in range(STEPS):
            weight.grad = torch.randn_like(weight)
            extras.append(_step_extra(torch, optimizer.step))
        state = optimizer.state[weight]
        out.append({"rows": rows, "cols": cols, "extras": extras, "block": state["exp_avg"].block_size,
                    "codes_dtype": str(state["exp_avg"].codes.dtype)})
    return out


if __name__ == "__main__":
    TORCH, ADAMW8BIT = _imports()
    TORCH.set_num_threads(1)  # small tensors: extra threads only spin on a shared machine
    child_main.lean_inductor()
    print(json.dumps({"points": measure(TORCH, ADAMW8BIT), "torchao": __import__("torchao").__version__}))
