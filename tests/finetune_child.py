"""peft and bitsandbytes measurements for ``test_measure.py``, run in a child process.

torch, transformers, peft and bitsandbytes are imported here, not in the test process; the tests
get these measurements through ``plan_phases_child.py`` (``measure_all``), which runs them in the
same process as its own cases so that torch, transformers and peft are imported once. Each case
builds a tiny GPT-2 or Llama (hidden 64, two layers, vocabulary 512) on the CPU, wraps it as the
user would (``peft.get_peft_model`` with a ``LoraConfig``; QLoRA: ``from_pretrained`` with a
``BitsAndBytesConfig``; frozen embeddings: ``get_input_embeddings().requires_grad_(False)``), and
measures the bytes saved for backward and the peak of two AdamW steps over the trainable
parameters (``symbolic.measured.measure``). Writes one JSON object on stdout; exits with ``SKIP`` (77)
when a package is missing.
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
SIZES = {"gpt2": GPT2, "llama-3-8b": LLAMA}
BATCH, SEQ, LAYERS, RANK = 2, 32, 2, 4
# name: (model, dtype, attn, dropout of the config, lora options); rank None: no LoRA (frozen embeddings)
CASES: dict[str, tuple[str, str, str, str, dict]] = {
    "gpt2-fp32-eager": ("gpt2", "fp32", "eager", "off", {}),
    "gpt2-bf16-sdpa": ("gpt2", "bf16", "sdpa", "off", {}),
    "gpt2-bf16-eager-dropout": ("gpt2", "bf16", "eager", "config", {}),
    "gpt2-fp32-all-linear": ("gpt2", "fp32", "sdpa", "off", {"lora_targets": "all-linear"}),
    "gpt2-fp32-lora-dropout": ("gpt2", "fp32", "eager", "off", {"lora_dropout": 0.1}),
    "llama-fp32-eager": ("llama-3-8b", "fp32", "eager", "off", {}),
    "llama-bf16-eager": ("llama-3-8b", "bf16", "eager", "off", {}),
    "llama-bf16-sdpa": ("llama-3-8b", "bf16", "sdpa", "off", {}),
    "llama-bf16-all-linear": ("llama-3-8b", "bf16", "eager", "off", {"lora_targets": "all-linear"}),
    "llama-bf16-k-o": ("llama-3-8b", "bf16", "eager", "off", {"lora_targets": "k_proj,o_proj"}),
    "llama-bf16-adapters-bf16": ("llama-3-8b", "bf16", "eager", "off", {"adapter_dtype": "bf16"}),
    "llama-bf16-dropout-bf16": ("llama-3-8b", "bf16", "sdpa", "off", {"adapter_dtype": "bf16", "lora_dropout": 0.1}),
    "llama-bf16-mlp-only": ("llama-3-8b", "bf16", "eager", "off", {"lora_targets": "gate_proj,up_proj,down_proj"}),
    "llama-fp32-o-only": ("llama-3-8b", "fp32", "sdpa", "off", {"lora_targets": "o_proj"}),
    "gpt2-fp32-c-fc-only": ("gpt2", "fp32", "eager", "off", {"lora_targets": "mlp.c_fc"}),
    "gpt2-fp32-frozen-embeddings": ("gpt2", "fp32", "eager", "off", {"freeze_embeddings": True}),
    "llama-bf16-frozen-embeddings": ("llama-3-8b", "bf16", "eager", "off", {"freeze_embeddings": True}),
    "llama-qlora": ("llama-3-8b", "bf16", "sdpa", "off", {"qlora": True}),
    "llama-qlora-all-linear": ("llama-3-8b", "bf16", "sdpa", "off", {"qlora": True, "lora_targets": "all-linear"}),
}
# gradient checkpointing (model.gradient_checkpointing_enable()), full training or LoRA; WIDE: layers dominate
CHECKPOINTED: dict[str, tuple[str, str, str, bool, dict]] = {
    "gc-gpt2-fp32-full": ("gpt2", "fp32", "sdpa", False, {}),
    "gc-gpt2-bf16-lora": ("gpt2", "bf16", "eager", True, {}),
    "gc-llama-bf16-full": ("llama-3-8b", "bf16", "sdpa", False, {}),
    "gc-llama-fp32-lora": ("llama-3-8b", "fp32", "eager", True, {}),
    "gc-llama-bf16-lora-wide": ("llama-3-8b", "bf16", "sdpa", True, {"hidden_size": 256, "intermediate_size": 704}),
    "gc-gpt2-fp32-full-wide": ("gpt2", "fp32", "sdpa", False, {"n_embd": 256}),
}


def _peft_model(model, options: dict):  # noqa: ANN001, ANN202
    import peft

    if options == {"freeze_embeddings": True}:  # full training but the token embedding
        model.get_input_embeddings().requires_grad_(False)
        return model
    targets = options.get("lora_targets")
    if targets and targets != "all-linear":
        targets = targets.split(",")
    config = peft.LoraConfig(r=RANK, target_modules=targets, lora_dropout=options.get("lora_dropout", 0.0))
    out = peft.get_peft_model(model, config, autocast_adapter_dtype=options.get("adapter_dtype", "fp32") == "fp32")
    return out.train()


def _quantized(target, dtype: str, attn: str):  # noqa: ANN001, ANN202
    """The tiny model saved and reloaded in 4 bits, as QLoRA users load it."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from symbolic.measured import crosscheck as cc

    model = cc.build(target, LAYERS, dtype, attn)
    folder = tempfile.mkdtemp()
    model.save_pretrained(folder)
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                bnb_4bit_compute_dtype=torch.bfloat16)
    quantized = AutoModelForCausalLM.from_pretrained(folder, quantization_config=config, dtype=torch.bfloat16,
                                                     device_map="cpu", attn_implementation=attn)
    quantized.config.use_cache = False
    return quantized.train()


def _quant_state_bytes(model) -> tuple[int, int]:  # noqa: ANN001
    """(bytes of every parameter and 4-bit quantization state storage, of the states alone); buffers
    (rotary inverse frequencies) are not weights."""
    seen: dict[int, int] = {}
    states: dict[int, int] = {}

    def add(t, into) -> None:  # noqa: ANN001
        import torch

        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            into.setdefault(st.data_ptr(), st.nbytes())

    for p in model.parameters():
        add(p, seen)
    for p in model.parameters():
        qs = getattr(p, "quant_state", None)
        if qs is None:
            continue
        for value in vars(qs).values():
            add(value, states)
            for inner in (vars(value).values() if hasattr(value, "absmax") else ()):
                add(inner, states)
    extra = {k: v for k, v in states.items() if k not in seen}
    return sum(seen.values()) + sum(extra.values()), sum(extra.values())


def measure_case(name: str) -> dict:
    import torch

    from symbolic.measured import crosscheck as cc
    from symbolic.measured import measure

    model_name, dtype, attn, dropout, options = CASES[name]
    target = cc.load_target(model_name, SIZES[model_name], dropout)
    base = _quantized(target, dtype, attn) if options.get("qlora") else cc.build(target, LAYERS, dtype, attn)
    out: dict = {}
    if options.get("qlora"):
        out["storage_bytes"], out["quant_state_bytes"] = _quant_state_bytes(base)
        out["parameters"] = sum(p.numel() for p in cc.build(target, LAYERS, dtype, attn).parameters())
    else:
        out["parameters"] = sum(p.numel() for p in base.parameters())
    model = _peft_model(base, options)
    inputs, loss_fn = cc.inputs_for(target, BATCH, SEQ, dtype)
    saved = measure.saved_tensors(model, inputs, loss_fn)
    peak = measure.step_peak(model, inputs, loss_fn,
                             optimizer=lambda ps: torch.optim.AdamW([p for p in ps if p.requires_grad], lr=1e-4))
    out.update(saved=saved.total_bytes, by_module=saved.by_module, peak=peak.peak_bytes, phase=peak.phase,
               trainable=sum(p.numel() for p in model.parameters() if p.requires_grad))
    return out


def measure_checkpointed(name: str) -> dict:
    import torch

    from symbolic.measured import crosscheck as cc
    from symbolic.measured import measure

    model_name, dtype, attn, with_lora, sizes = CHECKPOINTED[name]
    target = cc.load_target(model_name, {**SIZES[model_name], **sizes}, "off")
    model = cc.build(target, LAYERS, dtype, attn)
    model.gradient_checkpointing_enable()
    parameters = sum(p.numel() for p in model.parameters())  # the base's (N), before adapters join
    if with_lora:
        model = _peft_model(model, {})
    inputs, loss_fn = cc.inputs_for(target, BATCH, SEQ, dtype)
    saved = measure.saved_tensors(model, inputs, loss_fn)
    peak = measure.step_peak(model, inputs, loss_fn,
                             optimizer=lambda ps: torch.optim.AdamW([p for p in ps if p.requires_grad], lr=1e-4))
    return {"saved": saved.total_bytes, "by_module": saved.by_module, "peak": peak.peak_bytes, "phase": peak.phase,
            "parameters": parameters}


def measure_all(names: list[str] | None = None) -> dict[str, dict]:
    """Every named case (default: all of ``CASES`` and ``CHECKPOINTED``), measured in this process."""
    import warnings

    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    names = names or [*CASES, *CHECKPOINTED]
    return {name: measure_case(name) if name in CASES else measure_checkpointed(name) for name in names}


def main() -> int:
    try:
        import bitsandbytes  # noqa: F401
        import peft  # noqa: F401
        import torch
        import transformers  # noqa: F401
    except ImportError:
        return SKIP
    sys.path.insert(0, str(ROOT))
    torch.set_num_threads(1)  # tiny models: extra threads only spin (CPU time, not speed, on a shared machine)
    json.dump(measure_all(sys.argv[1:]), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
