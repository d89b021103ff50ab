"""LoRA fine-tuning of torch modules: peft's adapters injected on the meta device, beside real peft steps (issue 29).

torch runs in ``module_lora_child.py`` (the test process never imports it). Every expected number there
comes from a real CPU training step of the module with peft's own ``inject_adapter_in_model``: the bytes
saved for backward (``measure.saved_tensors``), the step's peak with AdamW over the adapters
(``measure.step_peak``) and the parameters peft leaves trainable, at sizes and batches the fit did not use.
"""

from __future__ import annotations

import json

import pytest
from helpers import torch_child

from symbolic.networks.module import lora

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("module_lora_child.py")


@pytest.mark.parametrize("name", ["vit", "cnn", "vit_mixed", "hf_vit", "unet"])
def test_lora_step_against_a_real_peft_step(child: dict, name: str) -> None:
    """Parameters (trainable and all) exact, saved bytes exact (within 1 % asked), the step's peak within 2 %.

    vit: the attention's qkv and proj; cnn: Conv2d targets; vit_mixed: all-linear with lora_dropout 0.1 under
    bf16-mixed; hf_vit: a transformers ViTForImageClassification's q_proj, v_proj; unet: a diffusers
    UNet2DConditionModel's to_q, to_k, to_v, to_out.0 (Stable Diffusion's LoRA).
    """
    plan, measured = child["steps"][name]["plan"], child["steps"][name]["measured"]
    assert plan["trainable"] == measured["trainable"] and plan["params"] == measured["params"]
    assert plan["frozen_bytes"] == 4 * plan["base"]  # the frozen base in fp32, no gradient or optimizer state
    assert plan["saved"] == measured["saved"]
    assert abs(plan["peak"] - measured["peak"]) <= 0.02 * measured["peak"]


def test_fp32_adapters_on_a_bf16_base(child: dict) -> None:
    """Pure bf16 with fp32 adapters (peft's cast_adapter_dtype): saved bytes exact, the peak within 2 %.

    Exact since the probe gives layer_norm's mean and rstd the CPU's bf16 (the meta kernel's are fp32: norm_stats.py).
    """
    plan, measured = child["steps"]["vit_bf16"]["plan"], child["steps"]["vit_bf16"]["measured"]
    assert plan["trainable"] == measured["trainable"] and plan["params"] == measured["params"]
    assert plan["frozen_bytes"] == 2 * plan["base"]  # the frozen base in bf16
    assert plan["saved"] == measured["saved"]
    assert abs(plan["peak"] - measured["peak"]) <= 0.02 * measured["peak"]


def test_many_wrapped_modules_are_counted_in_the_note(child: dict) -> None:
    """The UNet's four target names wrap every attention's projections: the note counts them (peft's count)."""
    unet = child["steps"]["unet"]
    wrapped = unet["measured"]["wrapped"]
    assert wrapped > 8 and any(f"LoRA: rank 8 on {wrapped} modules (" in n for n in unet["plan"]["notes"])


def test_cli_says_trainable_and_frozen(child: dict) -> None:
    done = child["cli"]["json"]
    data = json.loads(done["out"])
    assert done["code"] == 0 and {"weights", "frozen_weights"} <= set(data["resident_terms"])
    # MLP(d_in=64, d_h=32): gat 64 -> 32 and up 32 -> 32 with rank 4 adapters, r · (in + out) each
    assert data["terms"]["weights"] == 4 * 4 * ((64 + 32) + (32 + 32))
    assert any("trainable parameters" in n and "frozen" in n for n in data["notes"])


def test_params_counts_trainable_adapters_and_the_frozen_module(child: dict) -> None:
    done = child["cli"]["params"]
    data = json.loads(done["out"])
    # rank 4 on gat (64 -> 32) and up (32 -> 32): r · (in + out) each; the module's own parameters frozen
    assert done["code"] == 0 and data["lora"]["trainable"] == 4 * ((64 + 32) + (32 + 32))
    assert data["lora"]["frozen"] == data["total"] and data["lora"]["modules"] == ["gat", "up"]


@pytest.mark.parametrize("case, words", [("unmatched", ["'nope'", "gat, up, down, out"]),
                                         ("none", ["--lora-targets"]), ("params_alone", ["--lora-targets"])])
def test_lora_mistakes_are_one_line(child: dict, case: str, words: list[str]) -> None:
    """A target that matches nothing (peft ignores it beside one that matches), no targets: one line each (QLoRA is
    planned: test_module_qlora.py)."""
    done = child["cli"][case]
    assert done["code"] == 2 and len(done["err"].strip().splitlines()) == 1
    assert all(w in done["err"] for w in words) and "Traceback" not in done["err"]


def test_the_settings_key_the_cache() -> None:
    """Another rank, target list, dropout or adapter dtype is another cached probe."""
    keys = {repr(s.key()) for s in (lora.Spec(8, ("q",)), lora.Spec(4, ("q",)), lora.Spec(8, ("q", "v")),
                                   lora.Spec(8, ("q",), 0.1), lora.Spec(8, ("q",), 0.0, "bf16"))}
    assert len(keys) == 5
