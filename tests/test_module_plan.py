"""``symbolic plan`` of a torch module (issue 29): the searched layouts equal ``memory`` and ``time``, layout by layout.

torch runs in ``module_plan_child.py`` (the test process never imports it). The expected numbers come from the
commands themselves run there: ``memory --json`` and ``time --json`` with each searched layout's flags (the
search compiles the same plan's formulas once per structure and evaluates every layout as arrays).
"""

from __future__ import annotations

import json

import pytest
from helpers import torch_child

pytestmark = pytest.mark.torch

GLOBAL_BATCH, MAX_GPUS = 8, 4  # the child's --global-batch and --max-gpus


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("module_plan_child.py")


@pytest.mark.parametrize("name", ["mlp", "factored", "attention"])
def test_every_layout_equals_memory_and_time(child: dict, name: str) -> None:
    """Bytes exact, step time to 1e-9 (factored: FLOPs per sample that differ between micro-batches; attention: an
    input size given with --set S=24)."""
    out = child[name]
    layouts = out["plan"]["layouts"]
    assert layouts and len(layouts) == len(out["same"])
    for lay, same in zip(layouts, out["same"]):
        assert lay["memory_bytes"] == same["memory"] == same["time"]["memory_bytes"], lay
        assert lay["step_seconds"] == pytest.approx(same["time"]["step_seconds"], rel=1e-9), lay


@pytest.mark.parametrize("name", ["mlp", "factored", "attention"])
def test_the_search_is_data_parallel_zero_and_accumulation_on_one_device(child: dict, name: str) -> None:
    """What applies to a module: dp × ZeRO stage × micro-batch × accumulation; tp, pp, cp, FSDP2 and recompute are
    refused by the planner for it, so not searched. Ranked by step time; a token of the figures is one sample."""
    plan = child[name]["plan"]
    counts = [n for n in range(1, MAX_GPUS + 1) if n & (n - 1) == 0]  # --max-gpus: powers of two up to it
    space = {(dp, zero, mb, GLOBAL_BATCH // dp // mb) for dp in counts if GLOBAL_BATCH % dp == 0
             for zero in ((0,) if dp == 1 else (0, 1, 2, 3)) for mb in range(1, GLOBAL_BATCH // dp + 1)
             if (GLOBAL_BATCH // dp) % mb == 0}
    got = [(lay["dp"], lay["zero"], lay["micro_batch"], lay["grad_accum"]) for lay in plan["layouts"]]
    assert plan["considered"] == len(space) and set(got) == space and len(got) == len(space)
    assert all((lay["gpus"], lay["tp"], lay["pp"], lay["cp"], lay["recompute"], lay["fsdp"])
               == (lay["dp"], 1, 1, 1, "none", False) for lay in plan["layouts"])
    times = [lay["step_seconds"] for lay in plan["layouts"]]
    assert times == sorted(times)
    for lay in plan["layouts"]:
        assert lay["tokens_per_second"] == pytest.approx(GLOBAL_BATCH / lay["step_seconds"], rel=1e-12)


def test_plan_table_of_a_module(child: dict) -> None:
    text = child["mlp"]["text"]
    assert text["code"] == 0, text["err"]
    assert text["out"].startswith(f"mlp.py:MLP on h100-80gb: {child['mlp']['plan']['considered']} layouts")
    assert "zero" in text["out"] and "accum" in text["out"]
    assert json.dumps(child["mlp"]["plan"])  # the --json answer is plain data


@pytest.mark.parametrize("name, needle", [("seq", "--seq applies to a network that takes a token sequence"),
                                          ("tp", "no tensor, pipeline or context parallelism"),
                                          ("missing", "does not define"), ("fp8", "not fp8"),
                                          ("set", "--set H=4: not an input size of mlp.py:MLP")])
def test_plan_bad_input_is_one_line_exit_2(child: dict, name: str, needle: str) -> None:
    done = child["bad"][name]
    lines = done["err"].strip().splitlines()
    assert done["code"] == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in done["err"]


def test_plan_of_a_module_in_bf16_mixed(child: dict) -> None:
    """torch.autocast over fp32 weights (networks/module/autocast.py): planned, not refused."""
    done = child["mixed"]
    assert done["code"] == 0, done["err"]  # refused in one line before
    assert done["out"].startswith("mlp.py:MLP on h100-80gb: ") and " fit; " in done["out"]
