"""Torch modules fine-tuned with LoRA, planned and measured for ``test_module_lora.py`` (issue 29).

torch is imported here, not in the test process. Each case is a module planned with ``lora_rank``
and ``lora_targets`` (peft's adapters injected on the meta device, ``networks.module.lora``),
fitted at one input size and asked at another, beside a real CPU step there: the module built on
the CPU, peft's own ``inject_adapter_in_model(LoraConfig(...))`` on it (the base frozen by peft),
forward, backward and AdamW over the adapters (``measured.measure``). Writes one JSON object on
stdout; exits 77 when torch is missing.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script
from library_modules_child import VIT, _config  # this folder: sys.path[0] of a child script
from modules_child import _cli  # this folder: sys.path[0] of a child script

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "modules"
RANK = 8
TEXT_TOKENS = 6  # the UNet's encoder_hidden_states length, fixed (as networks_child.py)


def _measured(source, batch, targets, dropout, autocast, dtype):
    """A real CPU step of the module with peft's adapters: saved bytes, the step's peak, trainable and all parameters.

    In a pure 16-bit ``dtype`` the adapters are cast to fp32 by peft's ``cast_adapter_dtype`` (what
    ``get_peft_model`` does with its default ``autocast_adapter_dtype=True``).
    """
    import torch
    from peft import LoraConfig, inject_adapter_in_model
    from peft.tuners.tuners_utils import cast_adapter_dtype

    from symbolic.measured import measure
    from symbolic.networks.module.source import loss_of, make_inputs

    torch.manual_seed(0)
    module = source.build(source.arguments).to(getattr(torch, dtype))
    config = LoraConfig(r=RANK, target_modules="all-linear" if targets == ["all-linear"] else targets,
                        lora_dropout=dropout)
    module = inject_adapter_in_model(config, module).train()
    cast_adapter_dtype(module, "default")
    x = make_inputs(source, batch, device="cpu", float_dtype=getattr(torch, dtype))

    def loss(out):
        return loss_of(out, source.loss)

    return {"saved": measure.saved_tensors(module, x, loss, autocast=autocast).total_bytes,
            "peak": measure.step_peak(module, x, loss, autocast=autocast).peak_bytes,
            "params": sum(p.numel() for p in module.parameters()),
            "trainable": sum(p.numel() for p in module.parameters() if p.requires_grad),
            "wrapped": sum(1 for m in module.modules() if hasattr(m, "lora_A"))}


def _case(source, fit, batch, sizes, targets, *, dropout=0.0, precision="fp32"):
    """The LoRA plan of ``source`` fitted at the sizes ``fit``, asked at ``sizes`` and ``batch``, and a CPU step there."""
    from symbolic import planning
    from symbolic.networks.module import lora, resolve
    from symbolic.networks.module.network import step_dtypes

    fitted = resolve.module_network(resolve.with_sizes(source, fit))
    dtype, mixed = step_dtypes(precision)
    fitted.step_fit(dtype, "cpu", None, mixed, lora=lora.Spec(RANK, tuple(targets), dropout))  # at ``fit``'s points
    net = dataclasses.replace(fitted, module_source=resolve.with_sizes(source, sizes))
    plan = planning.plan(net, "train", batch=batch, precision=precision, device="cpu", lora_rank=RANK,
                         lora_targets=",".join(targets), lora_dropout=dropout)
    adapters = plan.terms()["weights"] // 4  # fp32 adapters
    return {"plan": {"saved": plan.activation_bytes, "peak": plan.total, "params": net.total + adapters,
                     "trainable": adapters, "frozen_bytes": plan.terms()["frozen_weights"], "base": net.total,
                     "notes": list(plan.notes)},
            "measured": _measured(net.module_source, batch, targets, dropout,
                                  "bf16" if precision == "bf16-mixed" else None, dtype)}


def _file(spec, args, inputs, loss):
    from symbolic.networks.module import files

    return files.file_source(str(DATA / spec), args, files.parse_inputs(inputs), loss)


def _unet():
    from symbolic.networks.module import resolve
    from symbolic.networks.module.source import Input

    config = json.loads((DATA / "unet.json").read_text())
    source = resolve.module_source("diffusers:UNet2DConditionModel", resolve.ModuleOptions(config=config))
    fixed = {"w": "h", "S": TEXT_TOKENS}  # square latents, the text length fixed: a fit in h alone
    inputs = tuple(Input(i.name, tuple(fixed.get(d, d) if isinstance(d, str) else d for d in i.dims), i.dtype, i.high)
                   for i in source.inputs)
    return dataclasses.replace(source, inputs=inputs, sizes={k: v for k, v in source.sizes.items() if k not in fixed})


def steps():
    vit = _file("nets.py:TinyViT", {"dim": 32}, ["x=B,3,H,W"], "cross-entropy")
    cnn = _file("cnn.py:CNN", {"channels": 8}, ["x=B,3,H,W"], "cross-entropy")
    return {"vit": _case(vit, {"H": 16, "W": 16}, 3, {"H": 24, "W": 40}, ["qkv", "proj"]),
            "cnn": _case(cnn, {"H": 16, "W": 16}, 5, {"H": 40, "W": 24}, ["conv1", "conv2"]),
            "vit_bf16": _case(vit, {"H": 16, "W": 16}, 3, {"H": 24, "W": 40}, ["qkv", "proj"], precision="bf16"),
            "vit_mixed": _case(vit, {"H": 16, "W": 16}, 3, {"H": 24, "W": 40}, ["all-linear"], dropout=0.1,
                               precision="bf16-mixed"),
            # a transformers ViT classifier (eager attention), its q_proj and v_proj (transformers 5's names)
            "hf_vit": _case(_config({**VIT, "attn_implementation": "eager"}), {"H": 48, "W": 48}, 3, {"H": 40, "W": 56},
                            ["q_proj", "v_proj"]),
            # the usual Stable Diffusion LoRA: diffusers' attention projections
            "unet": _case(_unet(), {"h": 4}, 2, {"h": 10}, ["to_q", "to_k", "to_v", "to_out.0"])}


def cli():
    spec = [f"{DATA}/mlp.py:MLP", "--arg", "d_in=64", "--arg", "d_h=32", "--input", "x=B,64", "--loss",
            "cross-entropy", "--batch", "3", "--device", "cpu", "--precision", "fp32", "--lora-rank", "4"]
    return {"json": _cli("memory", *spec, "--lora-targets", "gat,up", "--json"),
            "unmatched": _cli("memory", *spec, "--lora-targets", "gat,nope"),
            "none": _cli("memory", *spec),
            "params": _cli("params", *spec[:7], "--lora-rank", "4", "--lora-targets", "gat,up", "--json"),
            "params_alone": _cli("params", *spec[:7], "--lora-rank", "4")}


def main() -> None:
    child_main.run(lambda tmp: {"steps": steps(), "cli": cli()}, threads=1)


if __name__ == "__main__":
    main()
