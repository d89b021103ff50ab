"""ResNet-50, MobileNetV3, ConvNeXt, a diffusers UNet and DiT, and LLaVA planned as torch modules (issue 29).

torch runs in ``networks_child.py`` (two children, one per group, the test process never imports
it). Every expected number comes from torch on the CPU there (``measure.step_peak`` with AdamW,
``measure.saved_tensors``, ``sum(p.numel())``), at input sizes other than those the fit used,
with ``--device cpu`` (SDPA as the CPU's flash kernel runs it).
"""

from __future__ import annotations

import pytest
from helpers import torch_child

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def vision() -> dict:
    return torch_child("networks_child.py", {"group": "vision"})


@pytest.fixture(scope="module")
def generative() -> dict:
    return torch_child("networks_child.py", {"group": "generative"})


def _close(case: dict) -> None:
    """Parameters exact, saved bytes within 1 %, the AdamW step's peak within 2 %."""
    assert "error" not in case, case.get("error")
    plan, measured = case["plan"], case["measured"]
    assert plan["params"] == measured["params"]
    assert abs(plan["saved"] - measured["saved"]) <= 0.01 * measured["saved"]
    assert abs(plan["peak"] - measured["peak"]) <= 0.02 * measured["peak"]


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v3_small", "convnext"])
def test_vision_against_a_cpu_step(vision: dict, name: str) -> None:
    _close(vision[name])


@pytest.mark.parametrize("name", ["unet", "dit", "llava"])
def test_generative_against_a_cpu_step(generative: dict, name: str) -> None:
    """UNet and DiT run diffusers' SDPA processors, LLaVA transformers' SDPA: the CPU's flash kernel."""
    _close(generative[name])


def test_dit_takes_square_latents(generative: dict) -> None:
    """DiT unpatchifies with height = width = sqrt(tokens): one size name for both sides of its latent."""
    dims = dict((name, dims) for name, dims in generative["dit_inputs"])["hidden_states"]
    assert dims[2] == dims[3] == "h"


def test_cpu_mse_loss_keeps_the_elementwise_storage(generative: dict) -> None:
    """The CPU's mse_loss returns its mean in a B·C·h·w storage alive through backward (kernels._mse_storage).

    Without it DiT's peak is 1.9 % low (its loss's storage is a large part of a tiny DiT's step).
    """
    plan, measured = generative["dit"]["plan"], generative["dit"]["measured"]
    assert abs(plan["peak"] - measured["peak"]) <= 0.002 * measured["peak"]
