"""A torch module's inference follows ``--device``'s attention kernels, as its training step does (issue 29).

torch runs in ``module_infer_kernels_child.py`` (the test process never imports it). The expected numbers come
from a real CPU forward under ``torch.no_grad()`` measured there (``measure.forward_peak``) and, for the
reference path's scores, from the attention's own sizes (below).
"""

from __future__ import annotations

import json

import pytest
from helpers import torch_child

pytestmark = pytest.mark.torch

HEADS = 2  # the child's SdpaAttention(heads=2), fp32
FP32 = 4  # bytes


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("module_infer_kernels_child.py")


def test_cpu_inference_equals_a_real_cpu_forward(child: dict) -> None:
    """--device cpu: the CPU's flash kernel on the meta device; the plan (fitted at S 24) is the CPU's peak at S 40."""
    out = child["planned"]
    assert out["plans"]["cpu"] == out["measured"]


def test_the_reference_path_keeps_the_scores_the_fused_kernels_do_not(child: dict) -> None:
    """The reference path (the old cache key's meaning) holds the B·heads·L·S scores and their softmax at once.

    By hand: the math path's ``q @ kᵀ`` is B·heads·S·S fp32 and softmax writes another while it is alive, so its
    peak grows by 2·heads·4 bytes per B·S²; flash (cpu, cuda) allocates no such tensor: no B·S² term.
    """
    scores = child["planned"]["scores"]
    assert scores["None"] == 2 * HEADS * FP32
    assert scores["cpu"] == scores["cuda"] == 0


def test_the_cli_takes_device_in_inference_for_a_module_only(child: dict) -> None:
    """--device cpu lists it and equals the default cuda here (both flash, no scores); a formula's plan refuses it."""
    cli = child["cli"]
    assert cli["cpu"]["code"] == 0 and cli["default"]["code"] == 0, (cli["cpu"]["err"], cli["default"]["err"])
    cpu, default = json.loads(cli["cpu"]["out"]), json.loads(cli["default"]["out"])
    assert cpu["options"]["device"] == "cpu" and default["options"]["device"] == "cuda"
    assert cpu["total_bytes"] == default["total_bytes"]
    assert cli["formula"]["code"] == 2 and cli["formula"]["err"].count("\n") == 1
    assert "device applies in mode infer to a torch module's forward" in cli["formula"]["err"]
