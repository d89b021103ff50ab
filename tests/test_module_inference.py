"""Inference memory and fit of an input size for torch modules (issue 29).

torch runs in ``module_infer_child.py`` (the test process never imports it). Every expected number
comes from torch there: a real forward under ``torch.no_grad()`` on the CPU (``measure.forward_peak``)
at a batch and input sizes the fit did not use, ``sum(p.numel())`` of the built module, and for
``fit`` the plan of a network probed afresh (training) or one meta-device forward traced (inference)
at the answer's sizes and one step further.
"""

from __future__ import annotations

import pytest
from helpers import torch_child

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("module_infer_child.py")


@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet18", "vit"])
def test_inference_peak_against_a_cpu_forward(child: dict, name: str) -> None:
    """Parameters exact; the forward's peak (weights, buffers, inputs, live intermediates) within 0.1 %."""
    case = child["cases"][name]
    assert case["params"] == case["measured_params"]
    assert abs(case["plan"] - case["measured"]) <= 0.001 * case["measured"]
    assert {"weights", "inputs", "forward_live"} <= set(case["terms"])


def test_a_second_ask_reads_the_cache(child: dict) -> None:
    assert child["cached"] == {"first": False, "again": True}


def test_batch_norm_buffers_are_resident(child: dict) -> None:
    assert "buffers" in child["cases"]["cnn"]["terms"] and "buffers" in child["cases"]["resnet18"]["terms"]


def test_each_size_steps_on_the_network_stride(child: dict) -> None:
    """ResNet's total stride is 32 (five halvings), the CNN's 2 (one stride-2 conv), the ViT's its patch, 8."""
    cases = child["cases"]
    assert cases["resnet18"]["steps"] == {"H": 32, "W": 32}
    assert cases["cnn"]["steps"] == {"H": 2, "W": 2}
    assert cases["vit"]["steps"] == {"H": 8, "W": 8}
    assert cases["mlp"]["steps"] == {}


@pytest.mark.parametrize("name", ["cnn_infer", "cnn_train", "attention_seq", "resnet_infer"])
def test_fit_answer_fits_and_one_step_more_does_not(child: dict, name: str) -> None:
    out = child["fits"][name]
    assert out["status"] == "ok"
    assert out["at"] <= out["budget"] < out["next"]


def test_fit_keeps_the_ratio_on_the_stride(child: dict) -> None:
    fits = child["fits"]
    cnn = fits["cnn_infer"]["sizes"]
    assert cnn["H"] * 24 == cnn["W"] * 16  # asked at 16 x 24
    assert all(v % 2 == 0 for v in cnn.values())  # the CNN's stride
    assert all(v % 32 == 0 for v in fits["resnet_infer"]["sizes"].values())
    assert "steps of 32×32" in fits["resnet_infer"]["message"]
    assert "multiple of the network's total stride" in fits["resnet_infer"]["message"]


def test_cli_memory_infer_and_fit(child: dict) -> None:
    out = child["cli"]
    assert out["memory"]["code"] == 0 and "fits, headroom" in out["memory"]["out"]
    assert "no generation loop or KV cache" in out["memory"]["out"]  # what inference models, said
    assert out["fit"]["code"] == 0 and "largest H×W that fits 64MiB" in out["fit"]["out"]


@pytest.mark.parametrize("name", ["vary", "vary_batch", "weights", "tp", "no_sizes", "seq_of_image"])
def test_bad_input_is_one_line_exit_2(child: dict, name: str) -> None:
    done = child["cli"]["bad"][name]
    assert done["code"] == 2 and done["out"] == ""
    assert done["err"].startswith("symbolic: error: ") and done["err"].count("\n") == 1


def test_image_size_of_a_table_model_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from symbolic.cli import main

    assert main(["fit", "gpt2", "--gpu", "h100-80gb", "--for", "image-size"]) == 2
    err = capsys.readouterr().err
    assert "no input sizes to grow" in err and err.count("\n") == 1
