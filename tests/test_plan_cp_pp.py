"""`symbolic plan` searches context parallelism within pipeline stages (issue 28: "plan searches over … --cp where
they matter"): cp > 1 with pp > 1 where pp is pinned, or where no context-parallel layout fits at pp 1.

Each such layout is the one `symbolic memory` / `symbolic time` plan with the same flags (byte for byte, 1e-9).
"""

from __future__ import annotations

import json

import pytest
from helpers import layout_flags
from test_pipeline import LLAMA3_405B

from symbolic import planning
from symbolic.planning import search
from symbolic.planning import time as ptime

TOKENS = 10**9


@pytest.fixture(scope="module")
def llama405(tmp_path_factory: pytest.TempPathFactory) -> str:
    config = tmp_path_factory.mktemp("plan_cp_pp") / "config.json"
    config.write_text(json.dumps(LLAMA3_405B))
    return str(config)


def _agrees(config: str, lay: dict, seq: int, **fixed: object) -> None:
    """The layout's memory is `memory`'s total to the byte and its step `time`'s, with the GPUs dp·tp·pp·cp."""
    flags = {**layout_flags(lay, seq), **fixed}
    assert lay["gpus"] == lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"]
    assert lay["memory_bytes"] == planning.plan(config, "train", **flags).total
    timed = ptime.train_time(config, "h100-80gb", tokens=TOKENS, mfu=0.4, **flags)
    assert lay["step_seconds"] == pytest.approx(timed.figures["step_seconds"], rel=1e-9)


def test_where_no_pp_1_layout_takes_cp_the_best_layout_has_cp_and_pp(llama405: str) -> None:
    """405B at 262,144 tokens on 768 H100s (96 nodes), 16 sequences a step: 768 = 3·256 leaves no pp-1 layout
    (dp divides 16, tp 8 heads' divisors, cp a power of two: 2·cp divides the sequence), so the cp pass searches
    cp with pp; the fastest layout takes both, several times faster than the one without cp."""
    res = search.search(llama405, "h100-80gb", seq=262144, gpus=768, global_batch=16, tokens=TOKENS, mfu=0.4,
                        top=None)
    best = res.layouts[0]
    assert best["cp"] > 1 and best["pp"] > 1 and best["fsdp"]
    assert any(note.startswith("no context-parallel layout fits at pp 1") for note in res.notes)
    assert {lay["cp"] > 1 for lay in res.layouts} == {True, False}  # the cp-1 layout is still ranked beside it
    for lay in res.layouts:
        _agrees(llama405, lay, 262144)


def test_a_pinned_pp_takes_cp_where_nothing_fits_without_it(llama405: str) -> None:
    """torchtitan's Table 6 mesh (benchmarks/llama3_h100_202412_torchtitan.md: TP 8, PP 8 on 512 H100s, FSDP's
    float8 all-gather): at 262,144 tokens nothing fits without cp, and pp 8 pinned used to leave cp unsearched
    (no layout); now dp 1 × cp 8 is found, as the table's last row runs it, compiled as it ran (eager the plan is
    79.8 GiB with FSDP2's side-stream pools, over the 80 GB card; the run itself reserved 84.9 GiB on 96 GB H100s)."""
    fixed = {"precision": "fp8", "fp8_all_gather": True, "compile": True, "compile_loss": False}
    res = search.search(llama405, "h100-80gb", seq=262144, gpus=512, global_batch=8, tp=8, pp=8, tokens=TOKENS,
                        mfu=0.4, top=None, **fixed)
    assert res.layouts and all(lay["cp"] > 1 and lay["pp"] == 8 for lay in res.layouts)
    assert (res.layouts[0]["dp"], res.layouts[0]["cp"]) == (1, 8)
    for lay in res.layouts:
        _agrees(llama405, lay, 262144, **fixed)


def test_cp_stays_at_pp_1_where_a_pp_1_layout_fits() -> None:
    """Llama 3 8B at 131,072 tokens on 8 H100s (tp 1): cp 8 at pp 1 fits, so cp is not searched under a pipeline.
    Those layouts would fit too (the third pass, forced), but none beats the best pp-1 layout: the fewer ranks left
    for cp after the stages hold longer shards, and the pipeline's bubble adds to the step."""
    kw = {"seq": 131072, "gpus": 8, "global_batch": 8, "tp": 1, "tokens": TOKENS, "mfu": 0.4, "top": None}
    res = search.search("llama-3-8b", "h100-80gb", **kw)
    assert any(lay["cp"] > 1 for lay in res.layouts)
    assert not any(lay["cp"] > 1 and lay["pp"] > 1 for lay in res.layouts)
    every = search.search("llama-3-8b", "h100-80gb", _cps=(1, 2, 4, 8), _cp_pp=True, **kw)
    assert any(lay["cp"] > 1 and lay["pp"] > 1 for lay in every.layouts)
    assert every.layouts[0] == res.layouts[0]
