"""The 8-bit AdamW step's temporaries by implementation (issue 28, torchtune's "+ 8-bit AdamW" row).

torchao's ``AdamW8bit`` steps each parameter in a compiled function: measured on the CPU with inductor
(``adam_8bit_step_child.py``, one child for the module) at two sizes, its steady step holds 8 + 1/32 bytes per
element of the parameter (``adam_8bit_step``); bitsandbytes' CUDA kernel updates in place (none). The plan
counts the largest weight's step; ``--optimizer-impl`` chooses.
"""

from __future__ import annotations

import json

import pytest
from helpers import run, torch_child

from symbolic import planning
from symbolic.library import adam_8bit_step

H, V = 4096, 128256  # Llama-3-8B: its largest weight is the V × H embedding (untied: the head is as large)


def _plan(**options: object) -> planning.Plan:
    return planning.plan("llama-3-8b", seq=2048, runtime=False, precision="bf16", optimizer="adam-8bit", **options)


@pytest.fixture(scope="module")
def measured() -> dict:
    return torch_child("adam_8bit_step_child.py")


@pytest.mark.torch
def test_torchao_step_holds_two_fp32_states_and_their_scales(measured):
    """Each steady step (after the first, which creates the states and compiles) peaks at the formula's bytes for
    its parameter, at both sizes: no constant beside the per-element count."""
    per_element = adam_8bit_step.temporaries_per_element("torchao")
    for point in measured["points"]:
        assert point["block"] == 256 and point["codes_dtype"] == "torch.uint8", point  # the states are quantized
        predicted = int(per_element * point["rows"] * point["cols"])
        for extra in point["extras"][1:]:
            assert abs(extra / predicted - 1) < 0.001, (point, predicted)


def test_the_step_counts_the_largest_weight() -> None:
    """Without the optimizer in backward the step phase holds every gradient and the largest weight's step."""
    plain = _plan().phase_bytes()["optimizer"]
    torchao = _plan(optimizer_impl="torchao")
    assert torchao.phase_bytes()["optimizer"] - plain == adam_8bit_step.temporaries_per_element("torchao") * V * H
    assert _plan(optimizer_impl="bitsandbytes").phase_bytes() == _plan().phase_bytes()  # in place: the default
    assert torchao.regime.options()["optimizer_impl"] == "torchao" and "optimizer_impl" not in _plan().regime.options()


def test_in_backward_the_step_holds_one_gradient_and_its_temporaries() -> None:
    """torchtune's optimizer in backward: the step moment is the largest weight's gradient and its step."""
    plain = _plan(optimizer_in_backward=True).phase_bytes()["optimizer"]
    torchao = _plan(optimizer_in_backward=True, optimizer_impl="torchao").phase_bytes()["optimizer"]
    assert torchao - plain == adam_8bit_step.temporaries_per_element("torchao") * V * H


@pytest.mark.parametrize(("options", "words"), [
    ({"optimizer": "adamw", "optimizer_impl": "torchao"}, "optimizer_impl chooses whose 8-bit AdamW"),
    ({"optimizer": "adam-8bit", "optimizer_impl": "torchao", "lora_rank": 8}, "modelled for full training"),
])
def test_refusals(options, words) -> None:
    with pytest.raises(planning.PlanOptionError, match=words):
        planning.plan("llama-3-8b", seq=2048, runtime=False, **options)


def test_cli_flag(capsys) -> None:
    """One line on stderr, exit 2, for a choice it does not know; the flag reaches the plan."""
    code, _, err = run(capsys, "memory", "llama-3-8b", "--optimizer", "adam-8bit", "--optimizer-impl", "apex")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    code, out, err = run(capsys, "memory", "llama-3-8b", "--optimizer", "adam-8bit", "--optimizer-impl", "torchao",
                         "--json")
    assert code == 0 and json.loads(out)["options"]["optimizer_impl"] == "torchao", err
