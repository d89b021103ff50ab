"""A torch module in bf16-mixed / fp16-mixed training: torch.autocast's policy on the meta device (issue 29).

torch runs in ``module_autocast_child.py`` (the test process never imports it). Every expected number or
dtype comes from real torch there: operators registered at torch 2.13.0's autocast keys, outputs of real
``torch.autocast("cpu", torch.bfloat16)``, and whole CPU training steps under it (``measure.saved_tensors``,
``measure.step_peak``); the CUDA policy's expectations come from the lists themselves (``autocast.CUDA``, read
from PyTorch's ``autocast_mode.h``/``.cpp``), since no GPU runs here.
"""

from __future__ import annotations

import json

import pytest
from helpers import torch_child

from symbolic.networks.module import autocast

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("module_autocast_child.py")


@pytest.mark.parametrize("device, key", [("cpu", "AutocastCPU"), ("cuda", "AutocastCUDA")])
def test_the_lists_are_the_operators_torch_registers_at_autocast(child: dict, device: str, key: str) -> None:
    assert sorted(autocast.policy(device)) == child["registered"][key]


def test_cpu_policy_gives_real_cpu_autocast_dtypes(child: dict) -> None:
    """linear, matmul, conv2d to bf16; layer_norm and softmax untouched on the CPU; losses fp32; cat promoted;
    einsum, not on the CPU's list, reaches it through its bmm."""
    for name, out in child["dtypes"].items():
        assert out["cpu"] == out["real_cpu"], name
    assert child["dtypes"]["linear"]["cpu"] == "torch.bfloat16" and child["dtypes"]["linear"]["outside"] == "torch.float32"


@pytest.mark.parametrize("name, op", [("layer_norm", "layer_norm"), ("softmax", "softmax.int"), ("sum", "sum"),
                                      ("mse_loss", "mse_loss")])
def test_cuda_policy_runs_in_fp32_what_its_lists_say(child: dict, name: str, op: str) -> None:
    assert autocast.policy("cuda")[op] in (autocast.FP32, autocast.SET_DTYPE)
    assert child["dtypes"][name]["cuda"] == "torch.float32"


def test_cuda_cross_entropy_is_fp32_through_its_parts(child: dict) -> None:
    """cross_entropy_loss is not on CUDA's list; its log_softmax (set_dtype) and nll_loss (fp32) are."""
    policy = autocast.policy("cuda")
    assert "cross_entropy_loss" not in policy and policy["log_softmax.int"] == autocast.SET_DTYPE
    assert child["dtypes"]["cross_entropy"]["cuda"] == "torch.float32"


def test_one_weight_used_twice_is_cast_and_saved_once(child: dict) -> None:
    assert child["cache"]["meta"] == child["cache"]["real_cpu"]
    assert child["cache"]["meta"]["weight_casts"] == 1 and child["cache"]["meta"]["saved_weight_copies"] == 1


def test_cuda_refuses_binary_cross_entropy(child: dict) -> None:
    assert "binary_cross_entropy_with_logits" in child["banned"]


@pytest.mark.parametrize("name", ["mlp", "cnn", "vit", "scaled_sdpa"])
def test_bf16_mixed_step_against_a_real_cpu_autocast_step(child: dict, name: str) -> None:
    """Parameters exact, saved bytes exact (within 1 % asked), the step's peak within 2 %, at sizes the fit did not use.

    scaled_sdpa's query is fp32 when SDPA is called: autocast casts it before the CPU chooses its kernel.
    """
    plan, measured = child["steps"][name]["plan"], child["steps"][name]["measured"]
    assert plan["params"] == measured["params"]
    assert plan["saved"] == measured["saved"]
    assert abs(plan["peak"] - measured["peak"]) <= 0.02 * measured["peak"]


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16"])
def test_normalizations_save_the_cpus_statistics(child: dict, precision: str) -> None:
    """Saved bytes exact against a real CPU step (measured in the child) with a GroupNorm and a LayerNorm: the CPU's
    mean and 1/std are fp32 where the weight is fp32 (the GroupNorm under autocast), bf16 in pure bf16, unlike the
    meta device's (``norm_stats.py``)."""
    plan, measured = child["steps"][f"norms_{precision}"]["plan"], child["steps"][f"norms_{precision}"]["measured"]
    assert plan["params"] == measured["params"]
    assert plan["saved"] == measured["saved"]
    assert abs(plan["peak"] - measured["peak"]) <= 0.02 * measured["peak"]


def test_the_mixed_fit_is_its_own_cache_entry(child: dict) -> None:
    """steps() fitted the MLP in bf16-mixed only: asked again it is read back; fp32 and pure bf16 probe anew."""
    assert child["cached"] == {"mixed": True, "fp32": False, "bf16": False}


def test_cli_mixed_precision_says_where_the_policy_comes_from(child: dict) -> None:
    cpu, cuda = child["cli"]["cpu"], child["cli"]["cuda"]
    assert cpu["code"] == 0 and "CPU policy" in cpu["out"] and "checked against real CPU autocast" in cpu["out"]
    assert cuda["code"] == 0 and "CUDA policy" in cuda["out"] and "not measured on a GPU" in cuda["out"]
    data = json.loads(child["cli"]["fp16"]["out"])
    assert child["cli"]["fp16"]["code"] == 0 and data["options"]["precision"] == "fp16-mixed"


def test_a_precision_a_module_cannot_take_is_one_line(child: dict) -> None:
    done = child["cli"]["fp8"]
    assert done["code"] == 2 and len(done["err"].strip().splitlines()) == 1 and "fp8" in done["err"]


def test_the_policy_table_reads_without_torch() -> None:
    """The lists are plain data: CPU's fp32 list has cross_entropy_loss, CUDA's layer_norm (autocast_mode.cpp/.h)."""
    assert autocast.policy("cpu")["cross_entropy_loss"] == autocast.FP32
    assert autocast.policy("cuda")["layer_norm"] == autocast.FP32 and "layer_norm" not in autocast.policy("cpu")
