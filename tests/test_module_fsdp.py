"""``memory PATH.py:NAME --fsdp --dp 2`` against FSDP2 of the module measured end to end on two gloo ranks (issue 29).

``module_fsdp_child.py`` shards a ViT and a residual CNN (``tests/data/modules/blocks.py``) as the plan assumes
(each block a ``fully_shard`` unit, then the root), runs AdamW steps on two CPU ranks and counts each rank's live
bytes by phase (``fsdp_live.py``: local shards, each storage once). Every expected number is that measurement.
Three children (about 15 s each, mostly the probes behind the plans), one per group of cases: the third's root (a
head of many classes) outweighs a block, so the root's reduce-scatter at the end of backward leads there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.torch, pytest.mark.slow]
PHASES = ("forward", "backward", "optimizer")


@pytest.fixture(scope="module", params=["vit", "mixed", "root"])
def group(request: pytest.FixtureRequest) -> list[dict]:
    """One child's cases: each with the plan of ``memory --fsdp --dp 2`` and each rank's measured phases."""
    done = subprocess.run([sys.executable, str(HERE / "module_fsdp_child.py"), request.param], capture_output=True,
                          text=True, timeout=600, check=False)
    if done.returncode == 77:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)["cases"]


def test_each_phase_within_one_percent(group: list[dict]) -> None:
    """Phase by phase on each rank, within 1 % (the issue's bound for saved bytes; 2 % for a step's peak): fp32 with
    and without resharding, bf16-mixed gathered in bf16 (torchtitan's way), fp32 units under autocast, whose
    backward peak lies inside a block's backward (``fsdp.block_moments``); a ViT and a residual CNN."""
    for case in group:
        planned = case["plan"]["phases"]
        for rank in case["ranks"]:
            assert "error" not in rank, (case["case"], rank)
            found = rank["phases"]
            for phase in PHASES:
                error = planned[phase] / found[phase] - 1
                assert abs(error) < 0.01, (case["case"], phase, error)


def test_the_units_are_the_repeated_blocks(group: list[dict]) -> None:
    for case in group:
        blocks = case["plan"]["blocks"]
        assert blocks and all(name.startswith(("blocks.", "stage.")) for name in blocks)
        assert "fsdp_backward_grads" in case["plan"]["terms"]


def test_the_root_end_leads_where_the_root_is_large(group: list[dict]) -> None:
    """A head of many classes under bf16-mixed (bf16 gradients, fp32 reduce-scatter input): the root's end of backward
    (``fsdp.root_end_moment``) is the backward's peak, measured, and the plan without it falls short of the measured
    phase; where the blocks or the head's own backward lead it changes nothing."""
    for case in group:
        model, precision = case["case"][:2]
        planned, without = case["plan"]["phases"]["backward"], case["plan"]["backward_without_root_end"]
        if model.startswith("vit-head") and precision == "bf16-mixed":
            assert without / case["ranks"][0]["phases"]["backward"] - 1 < -0.05, (case["case"], without, planned)
        else:
            assert without == planned, case["case"]


def test_cuda_plans_hold_the_side_streams_pools() -> None:
    """``fsdp_stream_pools`` (FSDP2's side streams' cached blocks, ``own_fsdp.sharded``'s pools) on a module's CUDA
    plan with ``--fsdp``, at most the copy-in stream's most and the sharded gradients; none with ``--no-runtime``, on
    the CPU or without FSDP2."""
    from module_fsdp_child import BATCH, WORLD, _source

    from symbolic import planning
    from symbolic.networks.module import resolve

    net = resolve.module_network(_source("vit"))

    def plan(device: str, runtime: bool = True, fsdp: bool = True) -> dict:
        return planning.plan(net, "train", batch=BATCH, precision="bf16-mixed", device=device, dp=WORLD, fsdp=fsdp,
                             runtime=runtime).terms()

    pools = plan("cuda").get("fsdp_stream_pools")
    block, root = 2 * max(net.fsdp_units), 2 * (net.total - sum(net.fsdp_units))  # gathered in bf16
    assert pools is not None and 0 < pools <= max(2.5 * block, root + 1.5 * block, 1.5 * root) + 4 * net.total / WORLD
    assert all("fsdp_stream_pools" not in plan(*a) for a in (("cuda", False), ("cpu",), ("cuda", True, False)))
