"""Beam search and sampling in encoder-decoder generation (issue 29): T5 and Whisper against their own generate.

torch runs in ``generation_beams_child.py`` (the test process never imports it). Every expected
number comes from torch on the CPU there: each model's own ``generate(num_beams=3)`` and T5's
``generate(do_sample=True)``, with random weights, at a batch and sizes the fit did not use; the
caches' bytes summed over the tensors the loop's last decoder pass holds, each phase's peak counted
by ``measure.forward_peak``'s rule.
"""

from __future__ import annotations

import pytest
from helpers import torch_child

pytestmark = pytest.mark.torch

CASES = ("t5_beams", "whisper_beams", "t5_sample")


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("generation_beams_child.py")


@pytest.mark.parametrize("name", CASES)
def test_cache_bytes_exact(child: dict, name: str) -> None:
    """Both caches to the byte: with beams, B·N rows each (reordered in place of the old ones each step)."""
    case = child["cases"][name]
    assert case["plan_cache"] == {"self": case["cache"]["self"], "cross": case["cache"]["cross"]}
    assert case["cache"]["positions"] == case["T"]


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("phase", ["encoder", "prefill", "decode"])
def test_each_phase_within_one_percent(child: dict, name: str, phase: str) -> None:
    case = child["cases"][name]
    planned, measured = case["plan_phases"][phase], case["measured_phases"][phase]
    assert abs(planned - measured) <= 0.01 * measured


@pytest.mark.parametrize("name", CASES)
def test_the_plan_says_how_it_decodes(child: dict, name: str) -> None:
    said = "beam search with 3 beams" if "beams" in name else "sampling (do_sample=True"
    assert any(said in n for n in child["cases"][name]["notes"])


@pytest.mark.parametrize(("case", "said"), [("train", "beams applies to mode infer"),
                                            ("both", "beam sampling) is not modelled"),
                                            ("table", "beams 2: applies to an encoder-decoder's generation"),
                                            ("table_sample", "sample: applies to an encoder-decoder's generation")])
def test_refusals_are_one_line(child: dict, case: str, said: str) -> None:
    """--beams in training; beams with sample; --beams and --sample where no generate loop is planned."""
    out = child["cli"][case]
    assert out["code"] == 2 and out["out"] == ""
    assert out["err"].startswith("symbolic: error: ") and out["err"].count("\n") == 1 and said in out["err"]
