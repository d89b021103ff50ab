"""Library models by name and Hugging Face configs that are not causal LMs, planned as torch modules (issue 29).

torch runs in ``library_modules_child.py`` (the test process never imports it). Every expected
number comes from torch on the CPU there (``measure.step_peak`` with AdamW, ``measure.saved_tensors``,
``sum(p.numel())`` of torchvision's own model), at shapes other than those the fit used.
"""

from __future__ import annotations

import pytest
from helpers import torch_child

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("library_modules_child.py")


@pytest.mark.parametrize("name", ["resnet18", "resnet18_160x192", "vit", "vit_sdpa", "vit64", "bert", "t5", "whisper"])
def test_plan_against_a_cpu_step(child: dict, name: str) -> None:
    """Parameters exact, saved bytes within 1 %, the AdamW step's peak within 2 %."""
    case = child["cases"][name]
    assert "error" not in case, case.get("error")
    plan, measured = case["plan"], case["measured"]
    assert plan["params"] == measured["params"]
    assert abs(plan["saved"] - measured["saved"]) <= 0.01 * measured["saved"]
    assert abs(plan["peak"] - measured["peak"]) <= 0.02 * measured["peak"]


def test_config_task_classes(child: dict) -> None:
    assert child["cases"]["bert"]["task"] == "BertForSequenceClassification"  # --task sequence-classification
    assert child["cases"]["t5"]["task"] == "T5ForConditionalGeneration"  # not a causal LM: its architectures
    vit = child["cli"]["vit"]
    assert vit["code"] == 0 and "model class ViTForImageClassification" in vit["out"]


def test_torchvision_by_name_counts_its_own_model(child: dict) -> None:
    import json

    out = child["cli"]["resnet"]
    assert out["code"] == 0 and json.loads(out["out"])["total"] == child["cli"]["resnet_count"]


@pytest.mark.parametrize("case", ["vit_images", "gpt2_images", "fit_seq", "config_resnet", "missing",
                                  "resnet_stride"])
def test_refusals_are_one_line_exit_2(child: dict, case: str) -> None:
    out = child["cli"][case]
    assert out["code"] == 2 and out["out"] == ""
    assert out["err"].startswith("symbolic: error: ") and out["err"].count("\n") == 1


def test_sizes_off_the_stride_name_the_rule(child: dict) -> None:
    """ResNet at 100 x 100 (not a multiple of its total stride 32): its output sizes round, so no exact fit."""
    assert "multiples of its total stride" in child["cli"]["resnet_stride"]["err"]


def test_missing_package_is_named(child: dict) -> None:
    assert "needs the timm package" in child["cli"]["missing"]["err"]


def test_report_of_a_module_model_prints_the_planned_total(child: dict) -> None:
    """A report whose model is PATH.py:NAME (with --trust-code) shows the total `symbolic memory` computes.

    Exactly: the report counts whole bytes as the planner does, each term of a fit's fractions rounded up.
    """
    import json
    import re

    out = child["cli"]
    assert out["report"]["code"] == 0 and out["report_memory"]["code"] == 0
    data = json.loads(out["report_memory"]["out"])
    shown = {int(n.replace(",", "")) for n in re.findall(r"\d{1,3}(?:,\d{3}){2,}", out["report_tex"])}
    assert data["total_bytes"] in shown


def test_fit_for_seq_of_a_module_names_what_to_ask(child: dict) -> None:
    assert "--vary" in child["cli"]["fit_seq"]["err"]  # a ViT's sizes are H and W: not the planner's unknown 'S'


def test_a_vit_config_in_inference_is_checked_against_the_gpu(child: dict) -> None:
    out = child["cli"]["vit_infer"]
    assert out["code"] == 0 and "fits, headroom" in out["out"]
