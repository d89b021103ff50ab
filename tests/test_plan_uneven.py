"""`symbolic plan` searches pipeline degrees that do not divide the layers (torchtitan's split), issue 28.

Each such layout is planned as `symbolic memory` plans it: the stages split as torchtitan splits them
(``library.pipeline.stage_layers``), the busiest rank deciding.
"""

from __future__ import annotations

import json
import random

import pytest
from helpers import layout_flags

from symbolic import planning
from symbolic.catalogs import gpus
from symbolic.library import pipeline as pl
from symbolic.planning import search
from symbolic.planning import time as ptime
from symbolic.planning.build import _build, pipeline_stage, rank_plans

# a small Llama of 10 layers: pp 4 does not divide them (stages of 2/3/3/2, the embeddings and head one layer
# each); a small vocabulary
SMALL = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 10, "num_attention_heads": 4,
         "num_key_value_heads": 4, "intermediate_size": 688, "vocab_size": 1000, "tie_word_embeddings": False,
         "max_position_embeddings": 4096}
KW = {"seq": 1024, "global_batch": 16, "mfu": 0.4}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("uneven") / "config.json"
    path.write_text(json.dumps(SMALL))
    return str(path)


@pytest.fixture(scope="module")
def found(small: str) -> search.SearchResult:
    """Every layout of 4 GPUs, none pinned."""
    return search.search(small, "h100-80gb", gpus=4, top=None, **KW)


def _flags(lay: dict) -> dict:
    return layout_flags(lay, KW["seq"])


def _uneven(result: search.SearchResult) -> list[dict]:
    return [lay for lay in result.layouts if lay["pp"] == 4]


def test_a_pp_that_does_not_divide_the_layers_is_searched(found) -> None:
    assert pl.stage_layers(10, 4) == (2, 3, 3, 2)
    assert _uneven(found) and {lay["pp"] for lay in found.layouts} == {1, 2, 4}


def test_uneven_layouts_are_planned_as_memory_plans_them(small, found) -> None:
    """Memory to the byte and the step time of `symbolic memory` / `symbolic time` with the same flags."""
    for lay in _uneven(found)[:2] + random.Random(3).sample(_uneven(found)[2:], 6):
        plan = planning.plan(small, "train", **_flags(lay))
        assert lay["memory_bytes"] == plan.total
        assert any("2/3/3/2" in note for note in plan.notes)  # torchtitan's split, the busier end rank
        timed = ptime.train_time(small, "h100-80gb", tokens=10**9, mfu=KW["mfu"], **_flags(lay))
        assert lay["step_seconds"] == pytest.approx(timed.figures["step_seconds"], rel=1e-9)


def test_each_layout_takes_its_busiest_rank(small, found) -> None:
    """Each layout's total is its busiest rank's, the same as the largest of the four ranks built one by one: rank 1
    (3 layers, 3 micro-batches in flight: 9 layer-micro-batches against the first rank's 2 × 4) or the last (the
    logits, m of them kept by its stage); before every rank was looked at, the first rank stood in for rank 1."""
    busiest = set()
    for lay in _uneven(found):
        model = planning.plan(small, "train", **_flags(lay))
        totals = [plan.total for plan in rank_plans(model.model, model.regime)]
        every = [_build(model.model, model.regime, pipeline_stage(model.model, model.regime, rank)).total
                 for rank in range(4)]
        assert lay["memory_bytes"] == max(totals) == max(every) == model.total
        busiest.add(every.index(max(every)))
    assert busiest == {1, 3}


def test_a_pinned_pp_is_searched_too() -> None:
    """pp 3 is no power of two and does not divide Llama 3 8B's 32 layers: searched when pinned (11/11/10)."""
    result = search.search("llama-3-8b", "h100-80gb", gpus=3, pp=3, recompute="full", seq=2048, global_batch=3,
                           mfu=0.4, top=None)
    assert result.layouts and {lay["pp"] for lay in result.layouts} == {3}
    lay = result.layouts[0]
    assert lay["memory_bytes"] == planning.plan("llama-3-8b", "train", **{**_flags(lay), "seq": 2048}).total


def test_uneven_degrees_only_where_the_planner_splits_stages(small) -> None:
    shape = search.load_shape(small)
    gpu = gpus.get("h100-80gb")
    kw = {"counts": [8], "global_batch": 8}
    split = {lay["pp"] for lay in search.enumerate_layouts(shape, gpu, uneven=True, **kw)}
    divided = {lay["pp"] for lay in search.enumerate_layouts(shape, gpu, **kw)}
    assert pl.stage_layers(10, 8)[-1] == 0  # 8 stages of 12 layer-equivalents: the last one only the head
    assert divided == {1, 2} and split == {1, 2, 4}
    assert not search._uneven_apply(shape, {"activations": "pytorch"})
    assert search._uneven_apply(shape, {})
