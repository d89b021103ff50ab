"""``symbolic time`` for torch modules: FLOPs per module counted on the meta device and fitted (issue 29).

torch runs in ``flops_child.py`` (the test process never imports it). Every expected number comes
from ``torch.utils.flop_counter.FlopCounterMode`` around a real CPU step there (forward and backward
each under its own counter) at a shape the fit did not use, from torchvision's own weights metadata
(``_ops``), or from the definition of a Linear layer (2 FLOPs per multiply-add).
"""

from __future__ import annotations

import json

import pytest
from helpers import torch_child

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("flops_child.py")


def _inclusive(own: dict[str, int], name: str) -> int:
    """A module's FLOPs with its submodules' (what FlopCounterMode reports per module) from each module's own."""
    if name == "":  # the root: everything but the loss outside it
        return sum(v for m, v in own.items() if m != "loss")
    return sum(v for m, v in own.items() if m == name or m.startswith(name + "."))


@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet18", "vit"])
def test_fitted_flops_equal_flopcountermode_on_a_cpu_step(child: dict, name: str) -> None:
    """Forward and backward exact at a shape outside the fit's grid, and every module's forward exact."""
    fitted, real = child["cases"][name]["fitted"], child["cases"][name]["real"]
    assert (fitted["forward"], fitted["backward"]) == (real["forward"], real["backward"])
    assert real["forward_modules"]  # FlopCounterMode's own per-module counts (its module tracker)
    own = {("" if m == "(module)" else m): v for m, v in fitted["forward_modules"].items()}
    assert {m: _inclusive(own, m) for m in real["forward_modules"]} == real["forward_modules"]


@pytest.mark.parametrize("name, first", [("resnet18", "conv1"), ("vit", "vit.embeddings.patch_embeddings.projection")])
def test_backward_is_charged_to_the_module_whose_forward_made_it(child: dict, name: str, first: str) -> None:
    """Each matmul or convolution's backward runs two of its forward's size (input and weight gradients): 2 × its
    forward per module, branches (ResNet's downsample) and attention included; the first layer's input needs no
    gradient, so its backward is its forward. (FlopCounterMode's own module tracker keeps a module active across
    other modules' backward, so its per-module backward is no reference; the totals are, above.)"""
    fitted = child["cases"][name]["fitted"]
    forward, backward = fitted["forward_modules"], fitted["backward_modules"]
    assert set(backward) == set(forward) and backward[first] == forward[first]
    assert {m: v for m, v in backward.items() if m != first} == {m: 2 * v for m, v in forward.items() if m != first}


def test_lora_step_counted_as_peft_runs_it(child: dict) -> None:
    """``time`` with --lora-rank on a torch module counts the step with peft's adapters (rank 4 on up and out of
    article A's MLP, 64 → 48 → 48 → 64 → 10, batch 7): equal to FlopCounterMode over a real peft step on the CPU.
    Frozen gat, whose input needs no gradient, runs no backward at all, and neither does frozen up (its input, gat's
    output, needs none) nor up's lora_A beyond its weight gradient; down and out, after up's adapter, only their
    input gradient, 1 × forward (Narayanan et al. 2021 §5.1); the adapters add 2·r·(in + out) per sample forward and
    their weight gradients, lora_B its input gradient."""
    case = child["cases"]["mlp_lora"]
    fitted, real, full = case["fitted"], case["real"], case["full"]
    assert (fitted["forward"], fitted["backward"]) == (real["forward"], real["backward"])
    adapters = 7 * 2 * 4 * ((48 + 48) + (64 + 10))
    assert fitted["forward"] - full["forward"] == adapters
    gat, up, down, out = (7 * 2 * i * o for i, o in ((64, 48), (48, 48), (48, 64), (64, 10)))
    assert full["backward"] == gat + 2 * (up + down + out)  # full training: gat's input needs no gradient either
    assert fitted["backward"] == down + out + 7 * 2 * 4 * ((48 + 2 * 48) + (2 * 64 + 2 * 10))
    assert fitted["backward_modules"].get("gat", 0) == fitted["backward_modules"].get("up.base_layer", 0) == 0


def test_grouped_convolution_weight_gradient_counted_once(child: dict) -> None:
    """torch 2.13's conv_backward_flop ignores groups in the weight gradient; the probe counts it once.

    A depthwise convolution's input gradient and weight gradient each run the forward's multiply-adds
    (every output element times every tap, once): its backward is 2 × its forward (the formula
    itself). FlopCounterMode's stock count of the weight gradient is ``groups`` (8) times that.
    """
    fitted, real = child["cases"]["depthwise"]["fitted"], child["cases"]["depthwise"]["real"]
    dw = fitted["forward_modules"]["dw"]
    assert fitted["backward_modules"]["dw"] == 2 * dw
    assert fitted["forward"] == real["forward"]
    assert real["backward"] - fitted["backward"] == (8 - 1) * dw  # the stock count's surplus: groups − 1 times


def test_image_sizes_are_fitted_as_polynomials(child: dict) -> None:
    """Convolutions and attention need the input sizes: fitted at the sources' sizes, not the asked ones."""
    for name in ("cnn", "resnet18", "vit", "depthwise"):
        assert child["cases"][name]["fitted"]["names"] == ["H", "W"]
    assert child["cases"]["resnet18"]["fitted"]["fit_sizes"] == {"H": 32, "W": 32}


# torchvision's ``_ops`` (GFLOPS in its docs) is computed by its test/common_extended_utils.py (pytorch/vision at
# 3bc462f): a dispatch mode counting ONE per multiply-add ("only multiplication is counted": conv batch·prod(w)·
# prod(out), addmm batch·in·out, bmm, matmul) over an eval forward of batch 1 on the weights' 224 × 224 crop,
# stored as round(count / 1e9, 3). FlopCounterMode counts 2 per multiply-add: the fitted forward per image at
# 224 × 224, halved, must round to the same three decimals (ResNet-18's fit is at 32-96 px, evaluated at 224).
@pytest.mark.parametrize("name", ["resnet18", "vit_b_16"])
def test_forward_matches_torchvisions_published_ops(child: dict, name: str) -> None:
    row = child["published"][name]
    assert round(row["forward"] / 2 / 1e9, 3) == row["ops"]


def test_time_of_a_file_module(child: dict) -> None:
    out = child["cli"]
    assert out["time"]["code"] == 0, out["time"]["err"]
    text = out["time"]["out"]
    assert "FLOPs per micro-batch of 8 by module" in text and "step_seconds" in text
    data = json.loads(out["json"]["out"])
    rows = {row["module"]: row for row in data["flops_by_module"]}
    assert set(rows) == {"gat", "up", "down", "out"}
    batch, d_in, d_h = 8, 64, 48  # the command's --batch and --arg values
    # a Linear's forward is 2·in·out FLOPs per sample; the first one computes no input gradient (x needs none)
    assert rows["gat"]["forward"] == rows["gat"]["backward"] == 2 * d_in * d_h * batch
    assert rows["up"]["backward"] == 2 * rows["up"]["forward"] == 2 * 2 * d_h * d_h * batch
    assert data["tokens_per_step"] == batch  # no token sequence: a token is one sample
    step = sum(row["forward"] + row["backward"] for row in rows.values())
    assert data["flops_per_step"] == step == data["flops_per_token"] * batch


def test_time_of_a_lora_step_counts_the_adapters(child: dict) -> None:
    """``time --lora-rank 4 --lora-targets up,out``: the step's FLOPs are the LoRA step's (``flop_fit`` with peft's
    adapters, checked against a real peft step in ``test_lora_step_counted_as_peft_runs_it``), per module."""
    done = child["cli"]["lora"]
    assert done["code"] == 0, done["err"]
    data = json.loads(done["out"])
    rows = {row["module"]: row for row in data["flops_by_module"]}
    assert {"up.lora_A.default", "out.lora_B.default"} <= set(rows) and rows["gat"]["backward"] == 0
    full = json.loads(child["cli"]["json"]["out"])
    assert data["flops_per_step"] < full["flops_per_step"] and not any("full-training" in n for n in data["notes"])


def test_time_asked_again_reads_the_cache(child: dict) -> None:
    again = child["cli"]["again"]  # flops.fit replaced by None in the child: only the cache can answer
    assert again["code"] == 0, again["err"]
    assert json.loads(again["out"]) == json.loads(child["cli"]["json"]["out"])


@pytest.mark.parametrize("name, needle", [("infer", "takes none"), ("missing", "does not define"),
                                          ("shape", "raised")])
def test_time_bad_input_is_one_line_exit_2(child: dict, name: str, needle: str) -> None:
    done = child["cli"][name]
    lines = done["err"].strip().splitlines()
    assert done["code"] == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in done["err"]
