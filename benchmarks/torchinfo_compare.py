#!/usr/bin/env python3
"""torchinfo's "Forward/backward pass size" beside the bytes a real CPU step saves for backward (issue 29).

For a few torchvision classifiers at 224 x 224 and the tiny diffusers UNet of the tests
(``tests/data/modules/unet.json``), prints a Markdown table: what ``torchinfo.summary`` (1.8.0)
reports as the forward/backward pass size, the bytes autograd saves in one training forward on
the CPU (``measured.measure.saved_tensors``: each storage once, parameters excluded) and what
``symbolic``'s module probe plans (``--device cpu``), fitted on the meta device. torchinfo counts
the output of every leaf module that has parameters, twice ("x2 for gradients",
``torchinfo/model_statistics.py``); it does not see what autograd keeps (a ReLU's output, the
inputs of a convolution, pooling indices, attention scores) nor what it does not (a BatchNorm
output that only feeds an in-place ReLU). A minute or two on the CPU.

    python benchmarks/torchinfo_compare.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

BATCH = 4
# (label, model, options, --set sizes)
CASES = (("torchvision:resnet18", "torchvision:resnet18", {}, {}),
         ("torchvision:resnet50", "torchvision:resnet50", {}, {}),
         ("torchvision:mobilenet_v3_small", "torchvision:mobilenet_v3_small", {}, {}),
         ("torchvision:convnext_tiny", "torchvision:convnext_tiny", {}, {}),
         ("diffusers:UNet2DConditionModel (tests/data/modules/unet.json)", "diffusers:UNet2DConditionModel",
          {"config": json.loads((ROOT / "tests" / "data" / "modules" / "unet.json").read_text())}, {"h": 32, "w": 32,
                                                                                                  "S": 77}))


def row(model: str, options: dict, sizes: dict) -> tuple[int, int, int]:
    """(torchinfo's forward/backward bytes, measured saved bytes, planned saved bytes) at batch BATCH."""
    import torch
    import torchinfo

    from symbolic import planning
    from symbolic.measured import measure
    from symbolic.networks.module import resolve
    from symbolic.networks.module.source import loss_of, make_inputs

    source = resolve.module_source(model, resolve.ModuleOptions(sizes=sizes, **options))
    torch.manual_seed(0)
    module = source.build(source.arguments).train()
    inputs = make_inputs(source, BATCH, device="cpu")
    stats = torchinfo.summary(module, input_data=dict(inputs), mode="train", verbose=0, device="cpu")
    saved = measure.saved_tensors(module, inputs, lambda out: loss_of(out, source.loss)).total_bytes
    plan = planning.plan(resolve.module_network(source), "train", batch=BATCH, precision="fp32", device="cpu")
    return int(stats.total_output_bytes), int(saved), int(plan.activation_bytes)


def main() -> None:
    print(f"| network (batch {BATCH}, fp32) | torchinfo forward/backward | saved for backward (CPU step) "
          "| planned (--device cpu) | torchinfo / saved |")
    print("|---|---:|---:|---:|---:|")
    for label, model, options, sizes in CASES:
        info, saved, planned = row(model, options, sizes)
        print(f"| {label} | {info / 1e6:,.1f} MB | {saved / 1e6:,.1f} MB | {planned / 1e6:,.1f} MB "
              f"| {info / saved:.2f} |", flush=True)


if __name__ == "__main__":
    main()
