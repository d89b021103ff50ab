"""LoRA, QLoRA and frozen embeddings against real peft and bitsandbytes (needs torch, peft, bitsandbytes).

One child process (``finetune_child.py``) wraps tiny GPT-2 and Llama models on the CPU as a user
would and measures the bytes saved for backward and the peak of two AdamW steps. Here the same
cases go through the planner's own path (``regime.resolve`` → ``finetune.step_arguments`` →
``peak_pytorch.step``), and the formulas must reproduce the measurements: saved bytes to the byte,
trainable parameters exactly, step peaks within 1 %.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sympy

from symbolic import crosscheck as cc
from symbolic.library import lora
from symbolic.library import peak_pytorch as pypeak
from symbolic.planning import finetune, regime
from symbolic.planning import model as planmodel
from symbolic.planning.build import build

pytestmark = pytest.mark.torch

if any(importlib.util.find_spec(name) is None for name in ("torch", "transformers", "peft", "bitsandbytes")):
    pytest.skip("torch, transformers, peft and bitsandbytes are not all installed (make setup-torch)",
                allow_module_level=True)

CHILD = Path(__file__).with_name("finetune_child.py")
spec = importlib.util.spec_from_file_location("finetune_child", CHILD)
child = importlib.util.module_from_spec(spec)
spec.loader.exec_module(child)
NAMES = list(child.CASES)


@pytest.fixture(scope="module")
def measured() -> dict:
    proc = subprocess.run([sys.executable, str(CHILD)], capture_output=True, text=True, timeout=900)
    if proc.returncode == child.SKIP:
        pytest.skip("torch, transformers, peft or bitsandbytes cannot be imported")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def _plan_inputs(name: str, tmp: Path) -> tuple[planmodel.ModelShape, regime.Regime]:
    """The case as a user plans it: the tiny config as a config.json and the CLI's options."""
    model_name, dtype, attn, dropout, options = child.CASES[name]
    target = cc.load_target(model_name, child.SIZES[model_name], dropout)
    config = cc._with_layers(target.config, child.LAYERS)
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    shape = planmodel.load(str(path))
    lora_options = dict(options)
    if options != {"freeze_embeddings": True}:
        lora_options["lora_rank"] = child.RANK
    r = regime.resolve(shape, "train", batch=child.BATCH, seq=child.SEQ, activations="pytorch", device="cpu",
                       attn=attn, precision=dtype, dropout=dropout == "config", use_cache=False, **lora_options)
    return shape, r


def _values(shape: planmodel.ModelShape, **extra: int) -> dict[str, int]:
    return {**shape.numbers, "B": child.BATCH, "S": child.SEQ, **extra}


@pytest.mark.parametrize("name", NAMES)
def test_saved_bytes_reproduce_peft(measured, name, tmp_path):
    shape, r = _plan_inputs(name, tmp_path)
    saved = finetune.step_arguments(shape, r)["saved_override"]
    predicted = saved.formula.evaluate(saved.formula.restrict(_values(shape))).total
    assert predicted == measured[name]["saved"], (name, measured[name]["by_module"], saved.by_module(_values(shape)))
    plan = build(shape, r)
    assert plan.activation_bytes == measured[name]["saved"]


@pytest.mark.parametrize("name", [n for n in NAMES if n != "gpt2-fp32-frozen-embeddings"
                                  and n != "llama-bf16-frozen-embeddings"])
def test_trainable_parameters_are_peft_s(measured, name, tmp_path):
    shape, r = _plan_inputs(name, tmp_path)
    assert shape.value(finetune.adapters(shape, r).params()) == measured[name]["trainable"]


@pytest.mark.parametrize("name", ["gpt2-fp32-frozen-embeddings", "llama-bf16-frozen-embeddings"])
def test_frozen_embeddings_train_everything_else(measured, name, tmp_path):
    shape, r = _plan_inputs(name, tmp_path)
    count = finetune.step_arguments(shape, r)["trainable_count"]
    n = measured[name]["parameters"]
    assert sympy.Integer(count.xreplace({pypeak.N: n}).xreplace(
        {s: shape.numbers[s.name] for s in count.free_symbols if s.name in shape.numbers})) == measured[name]["trainable"]


def test_qlora_storage_is_bitsandbytes(measured, tmp_path):
    """Every storage of the 4-bit model: packed codes, absmax, nested absmax and codes, 16-bit rest."""
    shape, r = _plan_inputs("llama-qlora", tmp_path)
    base = finetune.frozen_base_bytes(shape, r, pypeak.N)
    n = measured["llama-qlora"]["parameters"]
    at = {s: shape.numbers[s.name] for s in base.free_symbols if s.name in shape.numbers}
    assert sympy.Integer(base.xreplace({pypeak.N: n}).xreplace(at)) == measured["llama-qlora"]["storage_bytes"]


@pytest.mark.parametrize("name", NAMES)
def test_step_peak_within_one_percent(measured, name, tmp_path):
    shape, r = _plan_inputs(name, tmp_path)
    kwargs = finetune.step_arguments(shape, r)
    saved = kwargs["saved_override"]
    step = pypeak.step(saved.family, saved.setup, **kwargs)
    values = _values(shape, N=measured[name]["parameters"])
    expr = step.peak()
    predicted = expr.xreplace({s: values[s.name] for s in expr.free_symbols})
    truth = measured[name]["peak"] + measured[name].get("quant_state_bytes", 0)  # quant states exist before the step
    assert abs(predicted - truth) <= 0.01 * truth, (name, int(predicted), truth, measured[name]["phase"])
    total = build(shape, r).total  # what `symbolic memory ... --json` prints as total_bytes
    assert abs(total - truth) <= 0.01 * truth, (name, total, truth)


def test_nf4_tensor_bytes_by_hand():
    # a 128 × 64 weight as bitsandbytes 0.50.2 stored it (measured): 4096 packed + 128 absmax + 4 nested absmax
    # + 64 NF4 code + 4 offset + 1024 nested code
    assert lora.nf4_bytes(sympy.Integer(128 * 64)) == 4096 + 128 + 4 + 64 + 4 + 1024


def _checkpointed(name: str, tmp: Path) -> tuple[planmodel.ModelShape, regime.Regime]:
    model_name, dtype, attn, with_lora, sizes = child.CHECKPOINTED[name]
    target = cc.load_target(model_name, {**child.SIZES[model_name], **sizes}, "off")
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(cc._with_layers(target.config, child.LAYERS)), encoding="utf-8")
    shape = planmodel.load(str(path))
    options = {"lora_rank": child.RANK} if with_lora else {}
    r = regime.resolve(shape, "train", batch=child.BATCH, seq=child.SEQ, activations="pytorch", device="cpu",
                       attn=attn, precision=dtype, dropout=False, use_cache=False, **options)
    # recompute full is what gradient checkpointing is; the regime itself still refuses it with activations pytorch
    return shape, r.replace(recompute="full")


@pytest.mark.parametrize("name", list(child.CHECKPOINTED))
def test_checkpointed_saved_bytes_reproduce_transformers(measured, name, tmp_path):
    """``model.gradient_checkpointing_enable()``: layer inputs plus what lies outside the layers."""
    shape, r = _checkpointed(name, tmp_path)
    saved = finetune.saved_model(shape, r)
    assert saved.formula.evaluate(saved.formula.restrict(_values(shape))).total == measured[name]["saved"]


@pytest.mark.parametrize("name", [n for n, case in child.CHECKPOINTED.items() if case[3]])
def test_checkpointed_lora_step_peak_within_one_percent(measured, name, tmp_path):
    """The step's phases plus the recompute phase (``finetune.extra_phases``) against the measured peak."""
    shape, r = _checkpointed(name, tmp_path)
    kwargs = finetune.step_arguments(shape, r)
    saved = kwargs["saved_override"]
    step = pypeak.step(saved.family, saved.setup, **kwargs)
    values = _values(shape, N=measured[name]["parameters"])
    extra = finetune.extra_phases(shape, r, step)
    assert "recompute" in extra
    merged = dataclasses.replace(step, phases={**step.phases, **extra})
    phases = merged.phase_exprs()
    predicted = max(e.xreplace({s: values[s.name] for s in e.free_symbols}) for e in phases.values())
    truth = measured[name]["peak"]
    assert abs(predicted - truth) <= 0.01 * truth, (name, int(predicted), truth)


@pytest.mark.parametrize("name", [n for n, case in child.CHECKPOINTED.items() if not case[3]])
def test_checkpointed_full_training_step_peak_within_one_percent(measured, name, tmp_path):
    """Full training under checkpointing: the step's phases plus the recompute phase with the parameter
    gradients that exist by then (``finetune.full_gradients``) against the measured peak."""
    shape, r = _checkpointed(name, tmp_path)
    saved = finetune.saved_model(shape, r)
    tied = saved.family == "gpt2" or bool(shape.config.get("tie_word_embeddings", False))
    step = pypeak.step(saved.family, saved.setup, saved_override=saved, tied=tied)
    merged = dataclasses.replace(step, phases={**step.phases, **finetune.extra_phases(shape, r, step)})
    values = _values(shape, N=measured[name]["parameters"])
    phases = {k: e.xreplace({s: values[s.name] for s in e.free_symbols}) for k, e in merged.phase_exprs().items()}
    truth = measured[name]["peak"]
    assert abs(max(phases.values()) - truth) <= 0.01 * truth, (name, phases, truth, measured[name]["phase"])
    assert phases["recompute"] <= 1.01 * truth, (name, int(phases["recompute"]), truth)
