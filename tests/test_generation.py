"""Encoder-decoder generation with a KV cache (issue 29): T5, BART, Whisper against a real greedy generation.

torch runs in ``generation_child.py`` (the test process never imports it). Every expected number
comes from torch on the CPU there: each model's own ``generate`` (Whisper's is its own mixin's,
which copies the input window), with random weights, at a batch and sizes the fit did not use; the
caches' bytes summed over their tensors, each phase's peak counted by ``measure.forward_peak``'s rule.
"""

from __future__ import annotations

import json

import pytest
from helpers import torch_child

pytestmark = pytest.mark.torch

CASES = ("t5", "bart", "whisper", "vision")


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("generation_child.py")


@pytest.mark.parametrize("name", CASES)
def test_cache_bytes_exact(child: dict, name: str) -> None:
    """The cross-attention and self-attention caches to the byte; the self-attention cache holds T positions."""
    case = child["cases"][name]
    assert case["plan_cache"] == {"self": case["cache"]["self"], "cross": case["cache"]["cross"]}
    assert case["cache"]["positions"] == case["T"]  # generate(max_new_tokens=T) from the one-token prompt


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("phase", ["encoder", "prefill", "decode"])
def test_each_phase_within_two_percent(child: dict, name: str, phase: str) -> None:
    case = child["cases"][name]
    planned, measured = case["plan_phases"][phase], case["measured_phases"][phase]
    assert abs(planned - measured) <= 0.02 * measured


def test_buffers_are_resident(child: dict) -> None:
    """BART's final_logits_bias is a buffer, not a parameter: a resident term of its bytes."""
    planned, measured = child["cases"]["bart"]["buffers"]
    assert measured > 0 and planned == measured


@pytest.mark.parametrize("name", CASES)
def test_peak_within_two_percent(child: dict, name: str) -> None:
    case = child["cases"][name]
    assert case["measured"] == case["measured_phases"]["peak"]  # the two counts of one run agree
    assert abs(case["plan"] - case["measured"]) <= 0.02 * case["measured"]


def test_memory_names_the_phases(child: dict) -> None:
    out = child["cli"]["memory"]
    assert out["code"] == 0, out["err"]
    data = json.loads(out["out"])
    assert data["phase_terms"]["decode"] == ["inputs", "encoder_output", "cross_cache", "self_cache",
                                             "decode_transient"]
    assert set(data["phase_terms"]) == {"encoder", "prefill", "decode"}


def test_fit_of_the_generated_length(child: dict) -> None:
    """fit --vary T: the generation traced at the answer fits 1 MiB, one token more does not."""
    cli = child["cli"]
    assert cli["fit"]["code"] == 0, cli["fit"]["err"]
    assert cli["traced_0"] <= 2**20 < cli["traced_1"]
    assert json.loads(cli["fit"]["out"])["total_bytes"] == cli["traced_0"]


@pytest.mark.parametrize(("case", "said"), [("short", "T ≥ 2"), ("kv", "keeps K and V in the weights' dtype"),
                                            ("positions", "decoder has 128 learned positions"),
                                            ("fit_positions", "every T up to 128 fits")])
def test_refusals_are_one_line(child: dict, case: str, said: str) -> None:
    """T = 1 (no decode step); --kv-dtype other than the weights' (transformers' cache keeps theirs); T beyond
    Whisper's learned decoder positions (its config's max_target_positions), also where fit --vary T would go past them."""
    out = child["cli"][case]
    assert out["code"] == 2 and out["out"] == ""
    assert out["err"].startswith("symbolic: error: ") and out["err"].count("\n") == 1 and said in out["err"]
