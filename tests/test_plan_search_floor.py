"""`symbolic plan`'s faster search keeps its answers: the floor it skips structures by is under every layout's
memory, a search that skips equals one that builds every structure, and the pipeline's slowest rank in the step
time comes from the same stage split as memory's."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import layout_flags
from test_plan_uneven import SMALL

from symbolic import planning
from symbolic.core.errors import UserError
from symbolic.planning import search
from symbolic.planning import time as ptime
from symbolic.planning.build import end_ranks, pipeline_stage, train_layout

SMALL_KW = {"seq": 1024, "global_batch": 16, "mfu": 0.4}
TIGHT = ("llama-3-8b", "a100-40gb", {"gpus": 4, "seq": 4096, "global_batch": 16, "mfu": 0.4})  # most cannot fit


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("floor") / "config.json"
    path.write_text(json.dumps(SMALL))
    return str(path)


def _floors(loaded: object, gpu: object, layouts: list[dict], seq: int,
            fixed: dict | None = None) -> tuple[np.ndarray, int]:
    """Per layout, the search's floor (its structure's resident terms plus the largest phase; -1 where it has none),
    and how many structures have one."""
    groups: dict[tuple, list[int]] = {}
    shape = loaded[0] if isinstance(loaded, tuple) else loaded
    for i, lay in enumerate(layouts):
        groups.setdefault(search._structure(lay, search._layers(shape), bool((fixed or {}).get("pp_schedule"))),
                          []).append(i)
    out = np.full(len(layouts), -1, dtype=object)
    known = 0
    for structure, rows in groups.items():
        parts = search._floor(loaded, gpu, seq, fixed or {}, ("mfu", 0.4, None), structure, layouts[rows[0]])
        if parts is None:
            continue
        known += 1
        columns = {"B": "micro_batch", "t": "tp", "p": "pp", "n_d": "dp", "n_mb": "grad_accum"}
        values = [np.broadcast_to(part({k: np.array([layouts[i][columns[k]] for i in rows]) for k in part.inputs}),
                                  (len(rows),)) for part in parts]
        out[rows] = values[0] + np.maximum.reduce(np.array(values[1:], dtype=object))
    return out, known


def test_the_floor_is_under_every_layouts_memory(small: str) -> None:
    """Every layout of 4 GPUs, 4 sequences a step (ZeRO stages, FSDP2, cp 2, uneven pipelines, each recompute): floor ≤ memory's total,
    the total here being the search's exact bytes with nothing skipped (equal to `symbolic memory`'s,
    tests/test_plan_uneven.py), so the floor is a true one on the plans themselves."""
    shape = search.load_shape(small)
    gpu = ptime.to_budget("h100-80gb").gpu
    layouts = search.enumerate_layouts(shape, gpu, counts=[4], global_batch=4, ops=True, fsdp=None, cps=(1, 2),
                                       uneven=True)
    loaded = search._loaded(small, shape)
    memory, _, skipped = search.evaluate(loaded, gpu, layouts, seq=1024, fixed={}, how="mfu", rate=0.4, compute=None)
    floors, known = _floors(loaded, gpu, layouts, 1024)
    assert not skipped and known > 10
    assert 4 in {lay["pp"] for lay in layouts} and any(lay["fsdp"] for lay in layouts)  # pp 4 splits 10 layers
    for lay, low, total in zip(layouts, floors, memory):
        assert low <= total, lay
    assert sum(low > 0 for low in floors) > len(layouts) // 2


@pytest.mark.parametrize("fixed", [{"interleave": 2}, {"pp_schedule": "zbv"}])
def test_the_floor_is_under_memory_when_the_plan_stages_an_even_pipeline(small: str, fixed: dict) -> None:
    """pp 2 divides the 10 layers, but interleaving 2 (4 stages) or a schedule given stages them as torchtitan
    does: the plan is then the busier end rank's, and the floor is rank 0's."""
    shape = search.load_shape(small)
    gpu = ptime.to_budget("h100-80gb").gpu
    layouts = search.enumerate_layouts(shape, gpu, counts=[2], global_batch=4, pins={"pp": 2}, fsdp=None)
    loaded = search._loaded(small, shape)
    memory, _, skipped = search.evaluate(loaded, gpu, layouts, seq=1024, fixed=fixed, how="mfu", rate=0.4,
                                         compute=None)
    floors, known = _floors(loaded, gpu, layouts, 1024, fixed)
    assert known and not skipped
    for lay, low, total in zip(layouts, floors, memory):
        assert 0 < low <= total, lay


def test_a_search_that_skips_structures_equals_one_that_builds_them_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama-3-8B on 4 A100-40GB at 4,096 tokens: most structures cannot fit and are not built; the answer (every
    layout that fits, its bytes, step time and rank, the counts and notes) is the same as building every one."""
    model, gpu, kw = TIGHT
    calls: list[tuple] = []
    real = search._parts
    monkeypatch.setattr(search, "_parts", lambda *a: (calls.append(a[7]), real(*a))[1])
    fast = search.search(model, gpu, top=None, **kw)
    skipping = len(calls)
    calls.clear()
    monkeypatch.setattr(search, "_over", lambda *a: set())
    full = search.search(model, gpu, top=None, **kw)
    assert fast.as_dict() == full.as_dict()
    assert 0 < fast.fitting < fast.considered
    assert skipping < len(calls) // 2  # the floor skips more than half of the structures


def test_a_refusal_is_reported_as_without_skipping() -> None:
    """A GPU given as a capacity has no FLOP rates: every structure is refused (the error names the first), also
    those whose floor is over the capacity."""
    with pytest.raises(UserError, match="no layout can be planned.*capacity only"):
        search.search("llama-3-8b", "30GiB", gpus=8, seq=4096, global_batch=32, mfu=0.4)


@pytest.mark.parametrize("options", [{"zero": 1, "dp": 2}, {"zero": 3, "dp": 2, "tp": 2}, {"fsdp": True, "dp": 4},
                                     {"offload": True, "zero": 2, "dp": 2}, {"recompute": "full", "tp": 2, "pp": 2},
                                     {"activations": "article-b"}, {"fsdp": True, "dp": 2, "cp": 2}])
def test_train_layout_is_the_plans_own(options: dict) -> None:
    """The floor's terms are the plan's: its resident terms (before the runtime's) and its phases, unchanged."""
    plan = planning.plan("llama-3-8b", "train", batch=2, seq=4096, **options)
    layout, _, _ = train_layout(plan.model, plan.regime)
    assert plan.layout.resident[:len(layout.resident)] == layout.resident
    runtime = ["cuda_context", "cublas_workspace", "allocator", "nccl", *(["fsdp_stream_pools"] if plan.layout.pools
                                                                           else [])]
    assert [t.key for t in plan.layout.resident[len(layout.resident):]] == runtime[:len(
        plan.layout.resident) - len(layout.resident)]
    assert plan.layout.phases == layout.phases


def test_train_layout_of_a_split_pipelines_first_rank(small: str) -> None:
    """10 layers over 4 stages (torchtitan's split): the first rank's resident terms and phases."""
    plan = planning.plan(small, "train", batch=1, seq=1024, pp=4, microbatches=4, recompute="full")
    first, _ = end_ranks(plan.model, plan.regime)
    layout, _, _ = train_layout(plan.model, plan.regime, pipeline_stage(plan.model, plan.regime, 0))
    assert first.layout.resident[:len(layout.resident)] == layout.resident
    assert first.layout.phases == layout.phases


@pytest.mark.parametrize(("pp", "v", "schedule"), [(4, 1, "1f1b"), (3, 1, "gpipe"), (2, 2, "interleaved"),
                                                   (2, 2, "zbv")])
def test_rank_layers_is_memorys_stage_split(small: str, pp: int, v: int, schedule: str) -> None:
    """The step time's per-rank layers and head (no schedule simulated) are ``build.pipeline_stage``'s."""
    shape = search.load_shape(small)
    regime = planning.resolve(shape, "train", batch=1, seq=1024, pp=pp, interleave=v, microbatches=8,
                              pp_schedule=schedule)
    stages = [pipeline_stage(shape, regime, rank) for rank in range(pp)]
    assert ptime.rank_layers(shape.layers, pp, v, schedule) == tuple((s.own_layers, s.head) for s in stages)


def test_recompute_ops_is_searched_under_pipelines_and_agrees_with_memory_and_time(small: str) -> None:
    """torchtitan's per-op recompute at pp > 1 too (pp 2, and pp 4 split unevenly over 10 layers): each such layout
    has `symbolic memory`'s bytes and `symbolic time`'s step."""
    found = search.search(small, "h100-80gb", gpus=4, top=None, **SMALL_KW)
    ops = [lay for lay in found.layouts if lay["recompute"] == "ops" and lay["pp"] > 1]
    assert {lay["pp"] for lay in ops} == {2, 4}
    for lay in ops[:2] + [lay for lay in ops if lay["pp"] == 4][:2]:
        flags = layout_flags(lay, SMALL_KW["seq"])
        assert lay["memory_bytes"] == planning.plan(small, "train", **flags).total, lay
        one = ptime.train_time(small, "h100-80gb", mfu=SMALL_KW["mfu"], **flags)
        assert lay["step_seconds"] == pytest.approx(one.figures["step_seconds"], rel=1e-9), lay


def test_one_note_per_refusal(small: str) -> None:
    """A reason that refuses many structures is one note, its count every layout it refused: the notes' counts add
    up to the layouts without memory, and no two notes give the same reason (they were one per structure, up to
    three, the same words repeated with a structure's count each)."""
    shape = search.load_shape(small)
    gpu = ptime.to_budget("h100-80gb").gpu
    layouts = search.enumerate_layouts(shape, gpu, counts=[4], global_batch=4, ops=True, fsdp=None)
    loaded = search._loaded(small, shape)
    memory, _, skipped = search.evaluate(loaded, gpu, layouts, seq=1024, fixed={"layer_impl": "torchtune"},
                                         how="mfu", rate=0.4, compute=None)
    reasons = [note.split(": ", 1)[1] for note in skipped]
    assert skipped and len(set(reasons)) == len(reasons)
    assert sum(int(note.split()[0]) for note in skipped) == sum(m is None for m in memory)
