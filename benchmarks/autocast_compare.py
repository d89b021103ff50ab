#!/usr/bin/env python3
"""Library networks in bf16-mixed: real CPU steps under ``torch.autocast`` beside the plan (issue 29).

For a few torchvision classifiers and the tests' tiny diffusers UNet (``tests/data/modules/unet.json``),
prints a Markdown table: the bytes one training step under ``torch.autocast("cpu", torch.bfloat16)``
saves for backward and its peak with AdamW (``measured.measure``: fp32 weights, forward and loss
under autocast, backward and the optimizer outside it), beside ``symbolic memory MODEL
--precision bf16-mixed --device cpu`` (the module probe under autocast's CPU policy on the meta
device, ``symbolic/networks/module/autocast.py``), fitted at other input sizes than those asked.
A minute or two on the CPU.

    python benchmarks/autocast_compare.py
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

BATCH = 3
# (label, model, options, sizes the fit uses, sizes asked)
CASES = (("torchvision:resnet18", "torchvision:resnet18", {}, {"H": 32, "W": 32}, {"H": 64, "W": 96}),
         ("torchvision:mobilenet_v3_small", "torchvision:mobilenet_v3_small", {}, {"H": 32, "W": 32},
          {"H": 64, "W": 96}),
         ("torchvision:convnext_tiny", "torchvision:convnext_tiny", {}, {"H": 32, "W": 32}, {"H": 64, "W": 96}),
         ("diffusers:UNet2DConditionModel (tests/data/modules/unet.json)", "diffusers:UNet2DConditionModel",
          {"config": json.loads((ROOT / "tests" / "data" / "modules" / "unet.json").read_text())},
          {"h": 16, "w": 16, "S": 8}, {"h": 32, "w": 24, "S": 12}))


def row(model: str, options: dict, fit: dict, sizes: dict) -> tuple[int, int, int, int]:
    """(measured saved, planned saved, measured peak, planned peak) at batch BATCH and ``sizes``."""
    import torch

    from symbolic import planning
    from symbolic.measured import measure
    from symbolic.networks.module import resolve
    from symbolic.networks.module.source import loss_of, make_inputs

    fitted = resolve.module_network(resolve.module_source(model, resolve.ModuleOptions(sizes=fit, **options)))
    asked = resolve.module_source(model, resolve.ModuleOptions(sizes=sizes, **options))
    net = dataclasses.replace(fitted, module_source=asked)  # the fit's polynomials evaluated at ``sizes``
    plan = planning.plan(net, "train", batch=BATCH, precision="bf16-mixed", device="cpu")
    torch.manual_seed(0)
    module = asked.build(asked.arguments).train()
    inputs = make_inputs(asked, BATCH, device="cpu")

    def loss(out: object) -> object:
        return loss_of(out, asked.loss)

    saved = measure.saved_tensors(module, inputs, loss, autocast="bf16").total_bytes
    peak = measure.step_peak(module, inputs, loss, autocast="bf16").peak_bytes
    return int(saved), int(plan.activation_bytes), int(peak), int(plan.total)


def main() -> None:
    print(f"| network (batch {BATCH}, bf16-mixed, CPU) | sizes (fit at) | saved, CPU step | saved, planned "
          "| peak, CPU step | peak, planned | peak error |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, model, options, fit, sizes in CASES:
        saved, planned, peak, total = row(model, options, fit, sizes)
        shown = " × ".join(str(v) for v in sizes.values())
        at = " × ".join(str(v) for v in fit.values())
        print(f"| {label} | {shown} ({at}) | {saved:,} | {planned:,} | {peak:,} | {total:,} "
              f"| {(total - peak) / peak:+.4%} |", flush=True)


if __name__ == "__main__":
    main()
