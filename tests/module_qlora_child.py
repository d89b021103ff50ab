"""Torch modules fine-tuned with QLoRA, planned and measured for ``test_module_qlora.py`` (issue 29).

torch is imported here, not in the test process. Each case is a module planned with ``--qlora`` (its linears
bitsandbytes' NF4 ``Linear4bit`` on the meta device, peft's adapters on top: ``networks.module.qlora``), fitted
at one input size and asked at another, beside a real CPU step there, quantized the way users quantize:
- a module of one's own: each ``nn.Linear`` swapped for ``bnb.nn.Linear4bit`` holding a ``Params4bit`` of the
  bf16 weight, moved to the CPU so that bitsandbytes quantizes it (NF4, double quantization);
- a transformers model: saved and reloaded with ``BitsAndBytesConfig(load_in_4bit=True, nf4, double quant,
  compute dtype bf16)``, transformers' own replacement (which skips its head);
then peft's ``inject_adapter_in_model`` and AdamW over the adapters. The step's peak is measured with the
profiler method (c10's allocator events): bitsandbytes' 4-bit matmul dequantizes the weight inside its own
kernel, which the dispatch method cannot see. Also AdamW's step counters: a real CPU step's optimizer state
against the plan's, and what the allocator records for one 0-dim float32 tensor. Writes one JSON object on stdout.
"""

from __future__ import annotations

import dataclasses
import tempfile

import child_main  # this folder: sys.path[0] of a child script
from finetune_child import _quant_state_bytes  # this folder: sys.path[0] of a child script
from library_modules_child import VIT, _config  # this folder: sys.path[0] of a child script
from module_lora_child import _file  # this folder: sys.path[0] of a child script
from modules_child import _cli  # this folder: sys.path[0] of a child script

RANK = 8


def _swapped(module):
    """``module`` (bf16, CPU) with every nn.Linear an NF4 ``Linear4bit`` quantized by bitsandbytes on the CPU."""
    import bitsandbytes as bnb
    import torch

    for name, sub in list(module.named_modules()):
        if not name or type(sub) is not torch.nn.Linear:
            continue
        new = bnb.nn.Linear4bit(sub.in_features, sub.out_features, sub.bias is not None, torch.bfloat16,
                                compress_statistics=True, quant_type="nf4")
        new.weight = bnb.nn.Params4bit(sub.weight.data, requires_grad=False, quant_type="nf4",
                                       compress_statistics=True, module=new)
        if sub.bias is not None:
            new.bias = torch.nn.Parameter(sub.bias.data, requires_grad=False)
        module.set_submodule(name, new.to("cpu"))  # Params4bit.to quantizes
    module.is_loaded_in_4bit = True  # what transformers sets on a 4-bit model; peft reads it
    return module


def _reloaded(module):
    """A transformers model saved and reloaded in 4 bits by transformers (as QLoRA users load it)."""
    import torch
    from transformers import BitsAndBytesConfig

    folder = tempfile.mkdtemp()
    module.save_pretrained(folder)
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                bnb_4bit_compute_dtype=torch.bfloat16)
    return type(module).from_pretrained(folder, quantization_config=config, dtype=torch.bfloat16, device_map="cpu",
                                        attn_implementation=module.config._attn_implementation)


def _logical(module) -> int:
    """Parameters as the model has them: a 4-bit weight's elements are its quant_state's shape, not its packed bytes."""
    import math

    return sum(math.prod(p.quant_state.shape) if getattr(p, "quant_state", None) is not None else p.numel()
               for p in module.parameters())


def _measured(source, batch, targets, transformers_model, mixed=False):
    """A real CPU QLoRA step: saved bytes, the step's peak, parameters (logical, trainable) and storage bytes.

    ``mixed``: as peft's users train under autocast: ``prepare_model_for_kbit_training`` (every parameter but the
    NF4 weights to fp32; without its gradient checkpointing, which needs a transformers model), fp32 inputs, the
    forward and the loss under ``torch.autocast(bfloat16)``. The storage is read after the step: Linear4bit's
    forward casts its bias to the compute dtype for good."""
    import torch
    from peft import LoraConfig, inject_adapter_in_model, prepare_model_for_kbit_training
    from peft.tuners.tuners_utils import cast_adapter_dtype

    from symbolic.measured import measure
    from symbolic.networks.module.source import loss_of, make_inputs

    torch.manual_seed(0)
    module = source.build(source.arguments).to(torch.bfloat16)
    module = _reloaded(module) if transformers_model else _swapped(module)
    if mixed:
        module = prepare_model_for_kbit_training(module, use_gradient_checkpointing=False)
    module = inject_adapter_in_model(LoraConfig(r=RANK, lora_alpha=RANK, target_modules=targets), module).train()
    cast_adapter_dtype(module, "default")  # fp32 adapters, as get_peft_model's autocast_adapter_dtype
    x = make_inputs(source, batch, device="cpu", float_dtype=None if mixed else torch.bfloat16)
    autocast = "bf16" if mixed else None

    def loss(out):
        return loss_of(out, source.loss)

    step = measure.step_peak(module, x, loss, method="profiler", autocast=autocast)
    storage, states = _quant_state_bytes(module)
    return {"saved": measure.saved_tensors(module, x, loss, autocast=autocast).total_bytes,
            # the tensors' peak (each ATen call's own scratch left out, bitsandbytes' dequantized weights kept), and
            # the quantization states, which the module holds beside its parameters (not counted by step_peak)
            "peak": max(step.tensor_phases.values()) + states, "with_scratch": step.peak_bytes + states,
            "dispatch": measure.step_peak(module, x, loss).peak_bytes + states,
            "params": _logical(module), "trainable": sum(p.numel() for p in module.parameters() if p.requires_grad),
            "storage": storage, "quant_states": states,
            "nf4_layers": sum(1 for m in module.modules() if type(m).__name__ == "Linear4bit"
                              and type(m).__module__.startswith("bitsandbytes"))}


def _case(source, fit, batch, sizes, targets, transformers_model=False, mixed=False):
    """The QLoRA plan of ``source`` fitted at the sizes ``fit``, asked at ``sizes`` and ``batch``, and a CPU step there
    (``mixed``: ``--precision bf16-mixed``, peft's prepare_model_for_kbit_training under autocast)."""
    from symbolic import planning
    from symbolic.networks.module import lora, resolve

    fitted = resolve.module_network(resolve.with_sizes(source, fit))
    dtypes = ("float32", "cpu", None, "bfloat16") if mixed else ("bfloat16", "cpu", None, None)
    fitted.step_fit(*dtypes, lora=lora.Spec(RANK, tuple(targets), qlora=True))  # at ``fit``
    net = dataclasses.replace(fitted, module_source=resolve.with_sizes(source, sizes))
    plan = planning.plan(net, "train", batch=batch, precision="bf16-mixed" if mixed else "bf16", device="cpu",
                         lora_rank=RANK, lora_targets=",".join(targets), qlora=True)
    terms = plan.terms()
    found = net.lora_adapters(lora.Spec(RANK, tuple(targets), qlora=True))
    return {"plan": {"saved": plan.activation_bytes, "peak": plan.total, "params": net.total + found.total,
                     "trainable": found.total, "frozen_bytes": terms["frozen_weights"],
                     "adapter_bytes": terms["weights"], "nf4_layers": len(found.quantized), "notes": list(plan.notes)},
            "measured": _measured(net.module_source, batch, targets, transformers_model, mixed)}


def steps():
    vit = _file("nets.py:TinyViT", {"dim": 32}, ["x=B,3,H,W"], "cross-entropy")
    mlp = _file("mlp.py:MLP", {"d_in": 256, "d_h": 512}, ["x=B,256"], "cross-entropy")
    return {  # article A's network, wide and at a small batch: the dequantized up weight (512 x 512 bf16) sets the peak
            "mlp": _case(mlp, {}, 7, {}, ["up"]),
            "vit": _case(vit, {"H": 16, "W": 16}, 3, {"H": 24, "W": 40}, ["qkv", "proj"]),
            # --precision bf16-mixed: peft's prepare_model_for_kbit_training, the step under autocast
            "mlp_mixed": _case(mlp, {}, 7, {}, ["up"], mixed=True),
            "vit_mixed": _case(vit, {"H": 16, "W": 16}, 3, {"H": 24, "W": 40}, ["qkv", "proj"], mixed=True),
            # a transformers ViT classifier (eager attention) through the module path: transformers quantizes it
            "hf_vit": _case(_config({**VIT, "attn_implementation": "eager"}), {"H": 48, "W": 48}, 3,
                            {"H": 40, "W": 56}, ["q_proj", "v_proj"], transformers_model=True)}


def step_counters():
    """A real CPU AdamW step of a small module: its optimizer state's bytes beside the plan's; one 0-dim tensor's."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from symbolic import planning
    from symbolic.networks.module import resolve
    from symbolic.networks.module.source import loss_of, make_inputs

    source = _file("mlp.py:MLP", {"d_in": 64, "d_h": 32}, ["x=B,64"], "cross-entropy")
    net = resolve.module_network(source)
    terms = planning.plan(net, "train", batch=3, precision="fp32", device="cpu").terms()
    module = source.build(source.arguments)
    opt = torch.optim.AdamW(module.parameters())
    loss_of(module(**make_inputs(source, 3, device="cpu")), source.loss).backward()
    opt.step()
    state = sum(v.untyped_storage().nbytes() for s in opt.state.values() for v in s.values() if torch.is_tensor(v))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        one = torch.tensor(0.0)  # what AdamW's _init_group makes per parameter on the CPU
    allocated = [e.nbytes() for e in prof.profiler.kineto_results.events() if e.name() == "[memory]" and e.nbytes() > 0]
    del one
    return {"plan": {"moments": terms["optimizer_states"], "steps": terms.get("optimizer_steps", 0)},
            "tensors": len(list(module.parameters())), "measured": state, "allocated": allocated}


def cli():
    spec = [f"{child_main.ROOT}/tests/data/modules/mlp.py:MLP", "--arg", "d_in=64", "--arg", "d_h=32", "--input",
            "x=B,64", "--loss", "cross-entropy", "--batch", "3", "--device", "cpu", "--lora-rank", "4",
            "--lora-targets", "gat,up", "--qlora"]
    return {"memory": _cli("memory", *spec, "--precision", "bf16", "--json"),
            "mixed": _cli("memory", *spec, "--precision", "bf16-mixed", "--json"),
            "fp16_mixed": _cli("memory", *spec, "--precision", "fp16-mixed"),
            "params": _cli("params", *spec[:7], "--lora-rank", "4", "--lora-targets", "gat,up", "--qlora", "--json"),
            "params_text": _cli("params", *spec[:7], "--lora-rank", "4", "--lora-targets", "gat,up", "--qlora"),
            "no_linear": _cli("memory", f"{child_main.ROOT}/tests/data/modules/nets.py:Depthwise", "--input",
                              "x=B,8,H,W", "--set", "H=8", "--set", "W=8", "--loss", "mse", "--precision", "bf16",
                              "--lora-rank", "2", "--lora-targets", "pre", "--qlora")}


REPORT = """title = "QLoRA of an MLP of one's own"
model = "{root}/tests/data/modules/mlp.py:MLP"
gpus = ["h100-80gb"]

[module]
arguments = {{ d_in = 64, d_h = 32 }}
inputs = ["x=B,64"]
loss = "cross-entropy"

[regime]
batch = 3
precision = "bf16"
lora_rank = 4
lora_targets = ["gat", "up"]
qlora = true
"""


def report(tmp):
    """A report whose module trains with QLoRA (``--tex``: its text), and ``memory --json`` with the same settings."""
    from pathlib import Path

    spec, tex = Path(tmp) / "qlora.toml", Path(tmp) / "qlora.tex"
    spec.write_text(REPORT.format(root=child_main.ROOT))
    done = _cli("report", str(spec), "--tex", str(tex), "--trust-code", "-q")
    memory = _cli("memory", f"{child_main.ROOT}/tests/data/modules/mlp.py:MLP", "--arg", "d_in=64", "--arg", "d_h=32",
                  "--input", "x=B,64", "--loss", "cross-entropy", "--batch", "3", "--precision", "bf16", "--gpu",
                  "h100-80gb", "--lora-rank", "4", "--lora-targets", "gat,up", "--qlora", "--json")
    return {**done, "tex": tex.read_text() if tex.exists() else "", "memory": memory}


def main() -> None:
    child_main.run(lambda tmp: {"steps": steps(), "counters": step_counters(), "cli": cli(), "report": report(tmp)},
                   threads=1)


if __name__ == "__main__":
    main()
