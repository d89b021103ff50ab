"""FLOPs of torch modules counted, fitted and checked for ``test_module_flops.py``, run in a child process (issue 29).

torch is imported here, not in the test process. Each case is fitted through the module path
(``networks.module.flops``: FlopCounterMode on the meta device, fitted in B and the input sizes)
and counted again by ``torch.utils.flop_counter.FlopCounterMode`` around a real step on the CPU
(forward, then backward, each under its own counter) at a shape the fit did not use. torchvision's
published ``_ops`` figures come from its own weights metadata. Writes one JSON object on stdout;
exits with ``SKIP`` (77) when torch is missing.
"""

from __future__ import annotations

from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script
from modules_child import _cli  # this folder: sys.path[0] of a child script

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "modules"
# the library child's tiny ViT (transformers), eager attention: the CPU's fused SDPA kernel is not in
# FlopCounterMode's registry, so a real CPU step with it counts no attention
VIT = {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_size": 32, "num_hidden_layers": 2,
       "num_attention_heads": 4, "intermediate_size": 64, "image_size": 32, "patch_size": 8, "num_labels": 10,
       "attn_implementation": "eager"}


def _file(spec, args, inputs, loss, sizes=None):
    from symbolic.networks.module import files

    return files.file_source(str(DATA / spec), args, files.parse_inputs(inputs), loss, sizes)


def _real(source, batch, targets=None):
    """FlopCounterMode around a real CPU step: forward and backward totals, and per module (its own names).

    ``targets``: peft's own ``inject_adapter_in_model(LoraConfig(r=LORA_RANK, target_modules=targets))`` first (every
    base weight frozen by peft)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from symbolic.networks.module.source import loss_of, make_inputs

    torch.manual_seed(0)
    module = source.build(source.arguments).train()
    if targets is not None:
        from peft import LoraConfig, inject_adapter_in_model

        module = inject_adapter_in_model(LoraConfig(r=LORA_RANK, target_modules=targets), module).train()
    x = make_inputs(source, batch, device="cpu")
    with FlopCounterMode(display=False) as forward:
        loss = loss_of(module(**x), source.loss)
    with FlopCounterMode(display=False) as backward:
        loss.backward()
    root = type(module).__name__

    def per_module(counter):
        return {("" if name == root else name.removeprefix(root + ".")): sum(ops.values())
                for name, ops in counter.get_flop_counts().items() if name != "Global"}

    return {"forward": forward.get_total_flops(), "backward": backward.get_total_flops(),
            "forward_modules": per_module(forward)}


def _fitted(source, batch, sizes):
    """The fit (at the source's own sizes) evaluated at ``batch`` and ``sizes``: totals and each module's forward."""
    from symbolic.networks.module import resolve

    net = resolve.module_network(source)
    fit = net.flop_fit("float32")
    point = (batch, *(sizes[n] for n in fit.names))
    return {"forward": fit.total("forward", point), "backward": fit.total("backward", point),
            "forward_modules": {m: int(p.at(point)) for m, p in fit.forward},
            "backward_modules": {m: int(p.at(point)) for m, p in fit.backward}, "names": list(fit.names),
            "fit_sizes": {n: source.sizes[n] for n in fit.names}}


LORA_RANK = 4


def _lora_case(source, batch, targets):
    """The LoRA step's fit (``flop_fit`` with peft's adapters on the meta device) against a real peft step."""
    from symbolic.networks.module import lora, resolve

    fit = resolve.module_network(source).flop_fit("float32", lora.Spec(LORA_RANK, tuple(targets)))
    point = (batch, *(source.sizes[n] for n in fit.names))
    plain = resolve.module_network(source).flop_fit("float32")
    return {"fitted": {"forward": fit.total("forward", point), "backward": fit.total("backward", point),
                       "backward_modules": {m: int(p.at(point)) for m, p in fit.backward}},
            "full": {"forward": plain.total("forward", point), "backward": plain.total("backward", point)},
            "real": _real(source, batch, list(targets))}


def _case(source, batch, sizes):
    from symbolic.networks.module import resolve

    asked = resolve.with_sizes(source, sizes) if sizes else source
    return {"fitted": _fitted(source, batch, sizes), "real": _real(asked, batch)}


def cases():
    from symbolic.networks.module import resolve
    from symbolic.networks.module.transformers_task import transformers_source

    resnet = resolve.with_sizes(resolve.module_source("torchvision:resnet18"), {"H": 32, "W": 32})
    vit = resolve.with_sizes(transformers_source("vit", VIT, None), {"H": 48, "W": 48})
    return {
        "mlp": _case(_file("mlp.py:MLP", {"d_in": 64, "d_h": 48, "n_out": 10}, ["x=B,64"], "cross-entropy"), 7, {}),
        "cnn": _case(_file("cnn.py:CNN", {"channels": 8}, ["x=B,3,H,W"], "cross-entropy", {"H": 16, "W": 16}), 5,
                     {"H": 40, "W": 24}),
        "resnet18": _case(resnet, 4, {"H": 96, "W": 128}),  # fitted at 32-96, multiples of its stride 32
        "vit": _case(vit, 3, {"H": 40, "W": 56}),  # fitted at 48-144 (multiples of its patch size 8)
        "mlp_lora": _lora_case(_file("mlp.py:MLP", {"d_in": 64, "d_h": 48, "n_out": 10}, ["x=B,64"], "cross-entropy"),
                               7, ("up", "out")),
        "depthwise": _case(_file("nets.py:Depthwise", {"channels": 8}, ["x=B,8,H,W"], "mean", {"H": 8, "W": 8}), 3,
                           {"H": 12, "W": 20}),
    }


def published():
    """torchvision's own ``_ops`` beside the fitted forward per image at 224 × 224 (batch 1)."""
    from torchvision import models

    from symbolic.networks.module import resolve

    out = {}
    small = resolve.with_sizes(resolve.module_source("torchvision:resnet18"), {"H": 32, "W": 32})
    fit = resolve.module_network(small).flop_fit("float32")  # the fit of cases(), from the cache
    out["resnet18"] = {"forward": fit.total("forward", (1, 224, 224)),
                       "ops": models.ResNet18_Weights.IMAGENET1K_V1.meta["_ops"]}
    vit = resolve.module_network(resolve.module_source("torchvision:vit_b_16")).flop_fit("float32")
    out["vit_b_16"] = {"forward": vit.total("forward", (1,)), "ops": models.ViT_B_16_Weights.IMAGENET1K_V1.meta["_ops"]}
    return out


def cli():
    mlp = [f"{DATA}/mlp.py:MLP", "--arg", "d_in=64", "--arg", "d_h=48", "--input", "x=B,64", "--gpu", "h100-80gb",
           "--mfu", "0.4", "--loss", "cross-entropy", "--batch", "8"]
    from symbolic.networks.module import flops

    out = {"time": _cli("time", *mlp), "json": _cli("time", *mlp, "--json"),
           "lora": _cli("time", *mlp, "--lora-rank", str(LORA_RANK), "--lora-targets", "up,out", "--json")}
    fit, flops.fit = flops.fit, None  # asked again: from the cache, or a TypeError (exit 1)
    try:
        out["again"] = _cli("time", *mlp, "--json")
    finally:
        flops.fit = fit
    return {**out,
            "infer": _cli("time", *mlp[:-2], "--mode", "infer"),
            "missing": _cli("time", f"{DATA}/nets.py:Missing", "--input", "x=B,4", "--gpu", "h100-80gb", "--mfu", "0.4"),
            "shape": _cli("time", f"{DATA}/nets.py:make_mlp", "--input", "x=B,7", "--loss", "mean", "--gpu",
                          "h100-80gb", "--mfu", "0.4", "--precision", "fp32")}


def main() -> None:
    child_main.run(lambda tmp: {"cases": cases(), "published": published(), "cli": cli()}, threads=1)


if __name__ == "__main__":
    main()
