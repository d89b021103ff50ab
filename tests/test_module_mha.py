"""nn.MultiheadAttention under ``--device cpu`` and ``--device cuda`` (issue 29): its inner SDPA call follows the kernels.

torch runs in ``module_mha_child.py`` (the test process never imports it). The expected numbers come from a real
CPU step there (``measure.saved_tensors``, ``measure.step_peak``) or a CPU forward (``measure.forward_peak``) at a
length the fit did not use, and the degree from the fitted formula itself.
"""

from __future__ import annotations

import pytest
from helpers import torch_child

pytestmark = pytest.mark.torch

CASES = ("weights", "no-weights", "no-weights-seq-first", "no-weights-dropout")


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("module_mha_child.py")


@pytest.mark.parametrize("case", CASES)
def test_the_plan_is_a_real_cpu_step(child: dict, case: str) -> None:
    plan, measured = child["train"][case]["plan"], child["train"][case]["measured"]
    assert plan["params"] == measured["params"]
    assert plan["saved"] == measured["saved"]  # need_weights=False: the CPU's flash kernel, no B·heads·S² scores
    assert abs(plan["peak"] - measured["peak"]) <= 0.02 * measured["peak"]


def test_a_cuda_gpu_keeps_the_scores_only_for_the_weights(child: dict) -> None:
    # need_weights=True: the explicit softmax path on every device (B·heads·S² saved); False: SDPA, whose
    # memory-efficient kernel (fp32 on sm90, cuda_attention.choose) saves a logsumexp linear in S
    assert child["train"]["weights"]["cuda_degree"] == 2
    assert [child["train"][c]["cuda_degree"] for c in CASES[1:]] == [1, 1, 1]


@pytest.mark.parametrize("case", ["weights", "no-weights", "weights-seq-first"])
def test_inference_is_a_real_cpu_forward(child: dict, case: str) -> None:
    # eval under no_grad, batch_first: the CPU runs the fused fast path (need_weights=True without the scores'
    # softmax copy); sequence-first: F's explicit path
    assert child["infer"][case]["plan"] == child["infer"][case]["measured"]
