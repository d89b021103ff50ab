"""`symbolic plan`: the compiled layout search agrees with `symbolic memory` and `symbolic time`, layout by layout."""

from __future__ import annotations

import json
import random
import re

import pytest
from helpers import layout_flags, run

from symbolic import planning
from symbolic.core.errors import UserError
from symbolic.planning import search
from symbolic.planning import time as ptime

KW = {"seq": 2048, "global_batch": 64, "tokens": 10**10, "mfu": 0.4, "price": 2.0}


@pytest.fixture(scope="module")
def result() -> search.SearchResult:
    return search.search("llama-3-8b", "h100-80gb", gpus=16, top=None, **KW)


def _flags(lay: dict) -> dict:
    return layout_flags(lay, KW["seq"])


def test_every_layout_fits_and_is_ranked_by_time(result) -> None:
    assert result.considered > 100 and 0 < result.fitting <= result.considered
    times = [lay["train_seconds"] for lay in result.layouts]
    assert times == sorted(times)
    assert all(lay["memory_bytes"] <= result.gpu.bytes for lay in result.layouts)
    for lay in result.layouts:
        assert lay["dp"] * lay["tp"] * lay["pp"] == 16
        assert lay["dp"] * lay["micro_batch"] * lay["grad_accum"] == 64


def test_layout_memory_equals_symbolic_memory(result) -> None:
    rng = random.Random(15)
    for lay in rng.sample(result.layouts, 12) + result.layouts[:2]:
        plan = planning.plan("llama-3-8b", "train", **_flags(lay))
        assert lay["memory_bytes"] == plan.total, lay


def test_layout_time_equals_symbolic_time(result) -> None:
    rng = random.Random(7)
    for lay in rng.sample(result.layouts, 6) + result.layouts[:1]:
        one = ptime.train_time("llama-3-8b", "h100-80gb", tokens=KW["tokens"], mfu=KW["mfu"], price=KW["price"],
                               **_flags(lay))
        assert lay["step_seconds"] == pytest.approx(one.figures["step_seconds"], rel=1e-9), lay
        assert lay["cost"] == pytest.approx(one.figures["cost"], rel=1e-9)


def test_layouts_that_do_not_fit_are_left_out() -> None:
    # the largest micro-batch without recompute on one GPU does not fit an 80 GB card
    res = search.search("llama-3-8b", "h100-80gb", gpus=1, top=None, **KW)
    assert res.fitting < res.considered
    every = search.enumerate_layouts("llama-3-8b", res.gpu, counts=[1], global_batch=64)
    fitting = {(lay["micro_batch"], lay["recompute"]) for lay in res.layouts}
    for lay in every:
        plan = planning.plan("llama-3-8b", "train", **_flags(lay))
        assert ((lay["micro_batch"], lay["recompute"]) in fitting) == (plan.total <= res.gpu.bytes)


def test_pins_and_cost_objective() -> None:
    res = search.search("llama-3-8b", "h100-80gb", max_gpus=32, objective="cost", tp=2, top=5, **KW)
    assert res.layouts and all(lay["tp"] == 2 for lay in res.layouts)
    costs = [lay["cost"] for lay in res.layouts]
    assert costs == sorted(costs)
    assert {lay["gpus"] for lay in res.layouts} <= {2, 4, 8, 16, 32}


def test_frontier() -> None:
    rows = [{"train_seconds": 1, "cost": 5}, {"train_seconds": 2, "cost": 3}, {"train_seconds": 3, "cost": 4},
            {"train_seconds": 4, "cost": 1}]
    assert search.frontier(rows) == [0, 1, 3]


def test_plan_cli_json(capsys) -> None:
    code, out, err = run(capsys, "plan", "llama-3-8b", "--gpu", "h100-80gb", "--gpus", "16", "--seq", "2048",
                         "--global-batch", "64", "--tokens", "1e10", "--mfu", "0.4", "--price", "2", "--top", "3",
                         "--json")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["layouts"]) == 3
    for key in ("dp", "tp", "pp", "zero", "recompute", "micro_batch", "grad_accum", "memory_bytes", "step_seconds",
                "train_seconds", "cost"):
        assert key in data["layouts"][0], key
    code, out, _ = run(capsys, "plan", "llama-3-8b", "--gpu", "h100-80gb", "--gpus", "16", "--seq", "2048",
                       "--global-batch", "64", "--mfu", "0.4")
    assert code == 0 and "layouts" in out and "recompute" in out


@pytest.mark.parametrize(("argv", "message"), [
    (("--gpus", "8", "--seq", "2048", "--global-batch", "64", "--mfu", "0.4", "--objective", "cost"), "price"),
    (("--gpus", "8", "--global-batch", "64", "--mfu", "0.4"), "needs --seq"),
    (("--gpus", "8", "--seq", "2048", "--global-batch", "64", "--mfu", "0.4", "--mode", "infer"), "training"),
])
def test_plan_bad_input(capsys, argv, message) -> None:
    code, _, err = run(capsys, "plan", "llama-3-8b", "--gpu", "h100-80gb", *argv)
    assert code == 2 and message in err


def test_offload_only_where_nothing_fits_without_it() -> None:
    """Mixtral-8x7B's model states do not fit 8 × 80 GB without ZeRO-Offload; with it they do."""
    res = search.search("mixtral-8x7b", "a100-80gb", gpus=8, seq=1024, global_batch=64, mfu=0.4, top=3)
    assert res.layouts and all(lay["offload"] for lay in res.layouts)
    assert "nothing fits without offload" in res.notes[0]
    for lay in res.layouts:
        plan = planning.plan("mixtral-8x7b", "train", batch=lay["micro_batch"], seq=1024, dp=lay["dp"], tp=lay["tp"],
                             pp=lay["pp"], zero=lay["zero"], recompute=lay["recompute"],
                             microbatches=lay["grad_accum"], sequence_parallel=lay["sequence_parallel"] or None,
                             offload=True)
        assert lay["memory_bytes"] == plan.total
    # with room to spare, no offload is searched
    assert not any(lay["offload"] for lay in search.search("gpt2", "a100-80gb", gpus=8, seq=1024, global_batch=64,
                                                           mfu=0.4, top=3).layouts)


def test_fsdp_is_searched_beside_the_zero_stages(result) -> None:
    """FSDP2 is a sharding choice where dp > 1; each such layout's memory is `memory --fsdp`'s total."""
    sharded = [lay for lay in result.layouts if lay["fsdp"]]
    assert sharded and all(lay["dp"] > 1 and lay["zero"] == 0 for lay in sharded)
    for lay in random.Random(28).sample(sharded, 3):
        assert lay["memory_bytes"] == planning.plan("llama-3-8b", "train", **_flags(lay)).total


def test_fsdp_with_tp_and_pp_is_searched_and_agrees_with_the_planner(result) -> None:
    """FSDP2 over tensor-parallel shards and within pipeline stages (torchtitan's 2D/3D layouts), planner's totals."""
    for kind in (lambda lay: lay["tp"] > 1 and lay["pp"] == 1, lambda lay: lay["pp"] > 1):
        found = [lay for lay in result.layouts if lay["fsdp"] and kind(lay)]
        assert found
        for lay in random.Random(29).sample(found, 2):
            assert lay["memory_bytes"] == planning.plan("llama-3-8b", "train", **_flags(lay)).total


def test_fsdp_pinned_and_refused() -> None:
    """--fsdp pins FSDP2; a pinned ZeRO stage rules it out (the planner refuses the two together)."""
    pinned = search.search("llama-3-8b", "h100-80gb", gpus=16, top=None, fsdp=True, **KW)
    assert pinned.layouts and all(lay["fsdp"] for lay in pinned.layouts)
    staged = search.search("llama-3-8b", "h100-80gb", gpus=16, top=None, zero=1, **KW)
    assert not any(lay["fsdp"] for lay in staged.layouts)


LONG = {"seq": 131072, "global_batch": 8, "tokens": 10**9, "mfu": 0.4}  # Llama 3 8B's architecture = Llama 3.1 8B's


def test_cp_only_where_nothing_fits_without_it_and_agrees_with_the_planner() -> None:
    """Llama 3(.1) 8B at 131,072 tokens on up to 8 H100s without tp or pp: only context-parallel layouts fit; the
    best one's memory is `memory --cp --fsdp`'s total and its step `time`'s, with the GPUs dp·tp·pp·cp."""
    res = search.search("llama-3-8b", "h100-80gb", max_gpus=8, tp=1, pp=1, top=None, **LONG)
    assert res.layouts and all(lay["cp"] > 1 and lay["fsdp"] for lay in res.layouts)
    assert res.notes[0].startswith("nothing fits without context parallelism")
    for lay in res.layouts:
        assert lay["gpus"] == lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"]
    for lay in res.layouts[:2]:
        flags = {"batch": lay["micro_batch"], "seq": LONG["seq"], "dp": lay["dp"], "cp": lay["cp"], "fsdp": True,
                 "recompute": lay["recompute"], "microbatches": lay["grad_accum"]}
        assert lay["memory_bytes"] == planning.plan("llama-3-8b", "train", **flags).total
        one = ptime.train_time("llama-3-8b", "h100-80gb", tokens=LONG["tokens"], mfu=LONG["mfu"], **flags)
        assert lay["step_seconds"] == pytest.approx(one.figures["step_seconds"], rel=1e-9)


def test_cp_is_not_searched_for_short_sequences(result) -> None:
    """At 2,048 tokens layouts fit without recompute: no cp is searched, every layout is cp 1 as before."""
    assert all(lay["cp"] == 1 for lay in result.layouts)
    assert not any("context parallelism" in note for note in result.notes)


def _one_device(lay: dict) -> dict:
    """The planner's flags of a layout of a network without a token sequence (no seq: a token is a sample)."""
    return {"batch": lay["micro_batch"], "dp": lay["dp"], "zero": lay["zero"], "microbatches": lay["grad_accum"]}


@pytest.mark.parametrize("widths", [None, {"d_in": 512, "d_h": 256}])
def test_a_network_without_a_sequence_is_searched_on_one_device_and_agrees_with_memory_and_time(widths) -> None:
    """Article A's network (and at other widths: a network object, not a name) needs no seq; tp, pp, cp, FSDP2 and
    recompute are what the planner refuses for it (activations pytorch), so the search is dp × ZeRO × micro-batch ×
    accumulation, and each layout's memory and step time are `memory`'s and `time`'s for the same flags."""
    from symbolic.networks.shape import article_a_shape

    model = "mlp" if widths is None else article_a_shape("mlp", widths)
    res = search.search(model, "h100-80gb", max_gpus=4, global_batch=8, tokens=10**9, mfu=0.4, top=None)
    # the search space from its definition: counts 1, 2, 4; dp = gpus dividing the batch; ZeRO > 0 only with dp > 1
    space = {(dp, zero, mb, 8 // dp // mb) for dp in (1, 2, 4) for zero in ((0,) if dp == 1 else (0, 1, 2, 3))
             for mb in range(1, 8 // dp + 1) if (8 // dp) % mb == 0}
    assert res.considered == len(space) == res.fitting
    assert {(lay["dp"], lay["zero"], lay["micro_batch"], lay["grad_accum"]) for lay in res.layouts} == space
    assert all((lay["tp"], lay["pp"], lay["cp"], lay["recompute"], lay["fsdp"]) == (1, 1, 1, "none", False)
               for lay in res.layouts)
    for lay in res.layouts:
        plan = planning.plan(model, "train", **_one_device(lay))
        one = ptime.train_time(model, "h100-80gb", tokens=10**9, mfu=0.4, **_one_device(lay))
        assert lay["memory_bytes"] == plan.total == one.memory.total, lay
        assert lay["step_seconds"] == pytest.approx(one.figures["step_seconds"], rel=1e-9), lay
        assert lay["tokens_per_second"] == pytest.approx(8 / lay["step_seconds"], rel=1e-12)  # a token is a sample


@pytest.mark.parametrize(("options", "message"), [({"seq": 128}, "takes none"), ({"tp": 2}, "tp 2"),
                                                  ({"cp": 2}, "cp 2")])
def test_a_network_without_a_sequence_refuses_seq_and_splits(options, message) -> None:
    with pytest.raises(ValueError, match=message):
        search.search("mlp", "h100-80gb", gpus=4, global_batch=8, mfu=0.4, **options)


def test_plan_cli_of_a_network_without_a_sequence(capsys) -> None:
    code, out, err = run(capsys, "plan", "mlp", "--arg", "d_in=512", "--gpu", "h100-80gb", "--gpus", "2",
                         "--global-batch", "8", "--mfu", "0.4", "--json")
    assert code == 0, err
    assert json.loads(out)["layouts"][0]["dp"] == 2
    code, _, err = run(capsys, "plan", "mlp", "--gpu", "h100-80gb", "--gpus", "2", "--global-batch", "8", "--mfu",
                       "0.4", "--seq", "128")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--seq applies to a network that takes" in err


def test_achieved_tflops_search_agrees_with_time() -> None:
    """With an achieved rate the step is FLOPs / (GPUs · X): no P_gpu in its formula, only F_tok kept."""
    kw = {**KW, "mfu": None, "achieved_tflops": 400e12}
    res = search.search("llama-3-8b", "h100-80gb", gpus=8, top=3, **kw)
    assert res.layouts
    for lay in res.layouts:
        one = ptime.train_time("llama-3-8b", "h100-80gb", **{k: v for k, v in kw.items() if k not in ("seq",
                               "global_batch")}, **_flags(lay))
        assert lay["step_seconds"] == pytest.approx(one.figures["step_seconds"], rel=1e-9), lay


@pytest.mark.parametrize(("gpu", "options", "reason"), [
    ("h100-80gb", {"gpus": 7}, "no dp × tp × pp × cp makes 7 GPUs with dp dividing the global batch of 64 sequences, "
                               "tp 1, 2, 4, 8 (dividing the heads, within a node of 8), pp 1, 2, 4, 8, 16, 32 and cp 1"),
    ("h100-80gb", {"gpus": 8, "tp": 3}, "tp 3 does not divide llama-3-8b's 32 attention heads and 8 key/value heads"),
    ("h100-94gb", {"gpus": 8, "tp": 4}, "tp 4 spans more GPUs than one NVLink domain of the NVIDIA H100 NVL "
                                        "(h100-94gb: 2 GPUs, its gpus_per_node)"),
    ("h100-80gb", {"gpus": 8, "dp": 3}, "dp 3 does not divide the global batch of 64 sequences"),
    ("h100-80gb", {"gpus": 8, "pp": 33}, "pp 33 does not divide llama-3-8b's 32 layers, nor leaves each stage a layer"),
    ("h100-80gb", {"gpus": 8, "tp": 8, "fsdp": True}, "tp 8 and --fsdp do not combine on 8 GPUs (without any one of "
                                                      "them layouts exist): FSDP2 needs dp > 1"),
    ("h100-80gb", {"gpus": 8, "zero": 3, "pp": 2}, "pp 2 and zero 3 do not combine on 8 GPUs (without any one of "
                                                   "them layouts exist): a ZeRO stage needs dp > 1, and stages 2 and 3 "
                                                   "pp 1"),
    ("h100-80gb", {"gpus": 8, "batch": 3}, "batch 3 rules out every layout of 8 GPUs that the other options allow: "
                                           "the micro-batch must divide"),
    ("h100-80gb", {"gpus": 8, "recompute": "selective"}, "recompute selective rules out every layout of 8 GPUs that "
                                                         "the other options allow: the recompute values searched with "
                                                         "these options are none, ops, full"),
    ("h100-80gb", {"gpus": 8, "dp": 8, "tp": 8}, "dp 8 and tp 8 do not combine on 8 GPUs (without any one of them "
                                                 "layouts exist): dp × tp × pp × cp must make 8 GPUs"),
])
def test_no_layout_names_its_reason(gpu: str, options: dict, reason: str) -> None:
    """Each way a search can consider no layout has a note of its own: it said "no layout divides the global batch
    and the model's heads and layers" for every one, also where the mesh divides (a pinned tp over the H100 NVL's
    NVLink pairs: `gpus_per_node` 2, rates.py)."""
    res = search.search("llama-3-8b", gpu, seq=2048, global_batch=64, mfu=0.4, **options)
    assert (res.considered, res.layouts, len(res.notes)) == (0, [], 1)
    assert res.notes[0].startswith(f"no layout: {reason}"), res.notes[0]


def test_nothing_fits_says_what_else_was_searched(capsys) -> None:
    """Llama 3 8B at 131,072 tokens on 8 A100 40GB: nothing fits, and the notes say that cp (at pp 1 and under
    pipelines) and offload were searched too and fit nothing either, which is so; the command line then suggests
    more GPUs or a shorter sequence, not --offload."""
    kw = {"gpus": 8, "tp": 1, "seq": 131072, "global_batch": 8, "tokens": 10**9, "mfu": 0.4}
    res = search.search("llama-3-8b", "a100-40gb", **kw)
    assert res.considered and not res.layouts
    assert "cp 2, 4, 8 were searched too: none of those layouts fits either" in res.notes
    assert any(note.startswith("offload was searched too (") and note.endswith("layouts): none fits either")
               for note in res.notes)
    assert search.search("llama-3-8b", "a100-40gb", _cps=(1, 2, 4, 8), _cp_pp=True, **kw).fitting == 0
    assert search.search("llama-3-8b", "a100-40gb", offload=True, **kw).fitting == 0
    code, out, _ = run(capsys, "plan", "llama-3-8b", "--gpu", "a100-40gb", "--gpus", "8", "--tp", "1", "--seq",
                       "131072", "--global-batch", "8", "--tokens", "1e9", "--mfu", "0.4")
    assert code == 0 and "  nothing fits: more GPUs, a smaller micro-batch or sequence\n" in out
    assert "note: cp 2, 4, 8 were searched too" in out


def test_a_refusal_names_every_reason_most_layouts_first() -> None:
    """Where the planner refuses every layout the error gives each reason with its layouts, most first (it gave the
    first structure's alone: for the Table 6 mesh on an A100, "fp8_all_gather needs --fsdp", not the missing fp8
    peak). The L4 has no network figure (rates.py): 16 GPUs need it for the pipeline or the data-parallel group."""
    with pytest.raises(UserError) as err:
        search.search("llama-3-8b", "l4", gpus=16, seq=2048, global_batch=64, mfu=0.4)
    text = str(err.value)
    assert text.startswith("no layout can be planned: l4 has no network bandwidth in the catalogue")
    found = re.findall(r"which the (pipeline|data-parallel) group of 16 GPUs needs; give a custom GPU file "
                       r"\(--gpu FILE.toml\) \((\d+) layouts\)", text)
    assert {what for what, _ in found} == {"pipeline", "data-parallel"} and len(found) == 2
    assert int(found[0][1]) >= int(found[1][1])


def test_no_layout_of_a_network_without_a_sequence() -> None:
    """A network without a token sequence (one device's measured activations, no heads) gets its reason too."""
    res = search.search("mlp", "h100-80gb", gpus=3, global_batch=8, mfu=0.4)
    assert res.considered == 0 and res.notes == ["no layout: no dp × tp × pp × cp makes 3 GPUs with dp dividing the "
                                                 "global batch of 8 samples, tp 1 (measured on one device, within a "
                                                 "node of 8), pp 1 and cp 1"]
    res = search.search("mlp", "h100-80gb", gpus=1, global_batch=8, mfu=0.4, fsdp=True)
    assert res.notes == ["no layout: --fsdp rules out every layout of 1 GPU that the other options allow: FSDP2 "
                         "needs dp > 1 (or cp > 1)"]


def test_grad_accum_and_recompute_every_pin_the_layouts() -> None:
    """`grad_accum` is microbatches' other name: a pinned layout choice (every layout accumulates 2, pipelines and
    single stages alike, each the plan's own memory), not a planner option every other layout is refused for (a
    report's [regime] passes it so); `recompute_every` pins full recompute on one stage; the two counts must agree."""
    kw = {"seq": 4096, "global_batch": 64, "max_gpus": 8, "mfu": 0.4, "top": None}
    res = search.search("llama-3-8b", "h100-80gb", grad_accum=2, **kw)
    assert res.layouts and {lay["grad_accum"] for lay in res.layouts} == {2}
    assert 1 in {lay["pp"] for lay in res.layouts}  # single stages too (they were all refused)
    for lay in res.layouts[:4]:
        assert lay["memory_bytes"] == planning.plan("llama-3-8b", "train", **layout_flags(lay, 4096)).total
    every = search.search("llama-3-8b", "h100-80gb", recompute_every=2, **kw)
    assert every.layouts and all(lay["recompute"] == "full" and lay["pp"] == 1 for lay in every.layouts)
    with pytest.raises(UserError, match="one count"):
        search.search("llama-3-8b", "h100-80gb", grad_accum=2, microbatches=4, **kw)
