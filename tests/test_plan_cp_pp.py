"""`symbolic plan` searches context parallelism within pipeline stages (issue 28: "plan searches over … --cp where
they matter"): cp > 1 with pp > 1 where pp is pinned, or where no context-parallel layout fits at pp 1.

Each such layout is the one `symbolic memory` / `symbolic time` plan with the same flags (byte for byte, 1e-9).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers import layout_flags, run
from test_pipeline import LLAMA3_405B

from symbolic import planning
from symbolic.catalogs import GPUS
from symbolic.core.errors import UserError
from symbolic.planning import search
from symbolic.planning import time as ptime

TOKENS = 10**9
# torchtitan's Table 6 mesh (benchmarks/llama3_h100_202412_torchtitan.md), as the last row ran it
TABLE6_FIXED = {"precision": "fp8", "fp8_all_gather": True, "compile": True, "compile_loss": False}
TABLE6 = {"seq": 262144, "gpus": 512, "global_batch": 8, "tp": 8, "pp": 8, "tokens": TOKENS, "mfu": 0.4, "top": None,
          **TABLE6_FIXED}


@pytest.fixture(scope="module")
def llama405(tmp_path_factory: pytest.TempPathFactory) -> str:
    config = tmp_path_factory.mktemp("plan_cp_pp") / "config.json"
    config.write_text(json.dumps(LLAMA3_405B))
    return str(config)


def _agrees(config: str, lay: dict, seq: int, gpu: str = "h100-80gb", **fixed: object) -> None:
    """The layout's memory is `memory`'s total to the byte and its step `time`'s, with the GPUs dp·tp·pp·cp."""
    flags = {**layout_flags(lay, seq), **fixed}
    assert lay["gpus"] == lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"]
    assert lay["memory_bytes"] == planning.plan(config, "train", **flags).total
    timed = ptime.train_time(config, gpu, tokens=TOKENS, mfu=0.4, **flags)
    assert lay["step_seconds"] == pytest.approx(timed.figures["step_seconds"], rel=1e-9)


def test_where_no_pp_1_layout_takes_cp_the_best_layout_has_cp_and_pp(llama405: str) -> None:
    """405B at 262,144 tokens on 768 H200s (96 nodes), 16 sequences a step: 768 = 3·256 leaves no pp-1 layout
    (dp divides 16, tp 8 heads' divisors, cp a power of two: 2·cp divides the sequence), so the cp pass searches
    cp with pp; the fastest layout takes both, several times faster than the one without cp. (On 80 GB H100s the
    FSDP2 layouts' blocks follow PyTorch's tensor parallelism, whose gathered norm outputs put the one cp layout
    that fitted there, dp 1 × cp 16 × pp 6, at 86.3 GB, over the card's 85.5: only the ZeRO-1 cp-1 layout fits.)"""
    res = search.search(llama405, "h200", seq=262144, gpus=768, global_batch=16, tokens=TOKENS, mfu=0.4,
                        top=None)
    best = res.layouts[0]
    assert best["cp"] > 1 and best["pp"] > 1 and best["fsdp"]
    assert any(note.startswith("no context-parallel layout fits at pp 1") for note in res.notes)
    assert {lay["cp"] > 1 for lay in res.layouts} == {True, False}  # the cp-1 layout is still ranked beside it
    for lay in [*res.layouts[:2], next(lay for lay in res.layouts if lay["cp"] == 1)]:
        _agrees(llama405, lay, 262144, "h200")


def test_a_pinned_pp_takes_cp_where_nothing_fits_without_it(llama405: str) -> None:
    """torchtitan's Table 6 mesh (benchmarks/llama3_h100_202412_torchtitan.md: TP 8, PP 8 on 512 H100s, FSDP's
    float8 all-gather): at 262,144 tokens nothing fits without cp, and pp 8 pinned used to leave cp unsearched
    (no layout); now dp 1 × cp 8 is found, as the table's last row runs it, compiled as it ran (eager the plan is
    79.8 GiB with FSDP2's side-stream pools, over the 80 GB card; the run itself reserved 84.9 GiB on 96 GB H100s)."""
    res = search.search(llama405, "h100-80gb", **TABLE6)
    assert res.layouts and all(lay["cp"] > 1 and lay["pp"] == 8 for lay in res.layouts)
    assert (res.layouts[0]["dp"], res.layouts[0]["cp"]) == (1, 8)
    # --fp8-all-gather pins FSDP2 (the planner refuses it without): no ZeRO layout is tried and skipped
    assert all(lay["fsdp"] for lay in res.layouts) and not any(n.startswith("skipped") for n in res.notes)
    for lay in res.layouts:
        _agrees(llama405, lay, 262144, **TABLE6_FIXED)


@pytest.fixture(scope="module")
def table6(llama405: str) -> dict[str, search.SearchResult | str]:
    """The Table 6 search on every catalogue card: its result, or the error that says why none can be planned."""
    out: dict[str, search.SearchResult | str] = {}
    for name in GPUS:
        try:
            out[name] = search.search(llama405, name, **TABLE6)
        except UserError as err:
            out[name] = str(err)
    return out


def _key(lay: dict) -> tuple[object, ...]:
    return tuple(lay[k] for k in search.LAYOUT_KEYS)


def test_a_larger_card_finds_every_layout_of_a_smaller_one_that_fits_it(table6: dict, llama405: str) -> None:
    """Over the catalogue's cards that can run the mesh, each layout a card finds is found on every card with more
    memory that it fits (the search's cp passes start where nothing fits without them: a larger card must not lose
    the layouts a smaller one found). The 80 GB H100 given each larger card's memory, its rates and 8-GPU nodes
    kept, finds its layouts all, each the same row: at the 94 GB card's size dp 1 × cp 8 and two more."""
    found = {name: res for name, res in table6.items() if isinstance(res, search.SearchResult) and res.considered}
    assert {"h100-80gb", "h200-141gb", "b200"} <= set(found)
    for small in found.values():
        for big in found.values():
            if small.gpu.bytes <= big.gpu.bytes:
                fits = {_key(lay) for lay in small.layouts if lay["memory_bytes"] <= big.limit.bytes}
                assert fits <= {_key(lay) for lay in big.layouts}, (small.gpu.name, big.gpu.name)
    h100 = found["h100-80gb"]
    larger = sorted({g.bytes for g in GPUS.values() if g.bytes > h100.gpu.bytes})
    assert len(larger) >= 5
    for size in larger:
        card = replace(h100.gpu, name=f"h100-80gb-as-{size}", bytes=size, cuda_bytes=None)
        res = search.search(llama405, card, **TABLE6)
        rows = {_key(lay): lay for lay in res.layouts}
        assert all(rows.get(_key(lay)) == lay for lay in h100.layouts), size
        if size == GPUS["h100-94gb"].bytes:
            assert len(res.layouts) == 3 and (res.layouts[0]["dp"], res.layouts[0]["cp"]) == (1, 8)


def test_a_card_without_the_mesh_says_why(table6: dict) -> None:
    """Each catalogue card that cannot run the mesh says the real reason, true of the card: the H100 NVL's NVLink
    pairs hold no tp 8 (no layout, and the note says so, not that nothing divides); the others lack a figure the
    step needs (fp8 peak, network bandwidth, FLOP rates), named alone (the refused ZeRO layouts no longer
    name fp8_all_gather first)."""
    nvl = table6["h100-94gb"]
    assert isinstance(nvl, search.SearchResult) and nvl.considered == 0
    assert nvl.notes == [nvl.notes[0]] and "tp 8 spans more GPUs than one NVLink domain" in nvl.notes[0]
    assert GPUS["h100-94gb"].gpus_per_node < 8 and f"{GPUS['h100-94gb'].gpus_per_node} GPUs" in nvl.notes[0]
    errors = {name: err for name, err in table6.items() if isinstance(err, str)}
    assert len(errors) >= 8
    for name, err in errors.items():
        gpu = GPUS[name]
        assert err.startswith("no layout can be planned: ") and "fp8_all_gather" not in err
        assert (("no fp8 peak" in err and "fp8" not in gpu.flops) or ("no FLOP rates" in err and not gpu.flops)
                or ("no network bandwidth" in err and gpu.network_bandwidth is None)), (name, err)


def test_plan_cli_names_why_there_is_no_layout(capsys, llama405: str) -> None:
    """`symbolic plan` on the H100 NVL prints the note (it printed "nothing fits: more GPUs …" and no note), and
    --quiet prints it as its line."""
    argv = ["plan", llama405, "--gpu", "h100-94gb", "--seq", "262144", "--gpus", "512", "--global-batch", "8",
            "--tp", "8", "--pp", "8", "--precision", "fp8", "--fp8-all-gather", "--compile", "--no-compile-loss",
            "--tokens", "1e9", "--mfu", "0.4"]
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "0 layouts" in out and "nothing fits" not in out
    assert "note: no layout: tp 8 spans more GPUs than one NVLink domain" in out
    code, out, _ = run(capsys, *argv, "-q")
    assert code == 0 and out.strip().endswith("(--gpu FILE.toml) sets another gpus_per_node and the bandwidth "
                                              "beyond it") and "no layout: tp 8" in out


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
