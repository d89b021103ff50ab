"""Issue 28: `time` and `plan` with torchtitan's per-op recompute (`--recompute ops`): the matmuls it runs again."""

from __future__ import annotations

import pytest
from helpers import layout_flags, run

from symbolic import planning
from symbolic.core.errors import UserError
from symbolic.networks.network import load
from symbolic.planning import search
from symbolic.planning import time as ptime


def _numbers(model: str) -> dict[str, int]:
    return dict(load(model).numbers)


def test_ops_recomputes_wk_wo_w3_of_llamas_gated_layer() -> None:
    # torchtitan parallelize_llama.py at 9dec370, _custom_policy: "to_save = func in _save_list and not (func ==
    # torch.ops.aten.mm.default and meta[mm_count_key] % 2 == 0)": of wq, wk, wv, wo, w1, w3, w2 the 2nd, 4th, 6th
    # run again (w2, 7th, is saved); SDPA is on the save list: the attention core is not run again.
    n = _numbers("llama-3-8b")
    H, a, a_kv, d_ff, L = n["H"], n["a"], n["a_kv"], n["d_ff"], n["L"]
    d_head = n["d_head"]
    per_layer = 2 * (H * a_kv * d_head + a * d_head * H + H * d_ff)
    terms = {t.key: t for t in ptime.flops("llama-3-8b", seq=8192, recompute="ops").train.terms}
    assert terms["recompute"].expr.subs({s: n[s.name] for s in terms["recompute"].expr.free_symbols}) == L * per_layer


def test_a_gelu_layer_runs_its_last_matmul_again_without_early_stop() -> None:
    # wq, wk, wv, wo, fc1, fc2: fc2 is even-counted. torchtitan's SelectiveAC checkpoints with early_stop=False (b5bcd76
    # activation_checkpoint.py, since 25413d2), so eager fc2 runs again: the default count. With torch's early stop
    # (9dec370) the checkpoint stops before it (its output only enters the residual sum), and compiled the partitioner
    # recomputes only what backward reads: not it. Both measured in test_saved_for_backward.py (eager).
    n = _numbers("gpt2")
    attention = n["L"] * 2 * (n["H"] * n["a_kv"] * n["d_head"] + n["a"] * n["d_head"] * n["H"])
    fc2 = n["L"] * 2 * n["d_ff"] * n["H"]
    for early_stop, expected in ((False, attention + fc2), (True, attention)):
        expr = ptime.flops("gpt2", seq=1024, recompute="ops", early_stop=early_stop).train.terms[-1].expr
        assert expr.subs({s: n[s.name] for s in expr.free_symbols}) == expected
    none = ptime.flops("gpt2", seq=1024).exact()
    for compile_, expected in ((False, attention + fc2), (True, attention)):  # the plan: eager, or compiled
        plan = ptime.train_time("gpt2", "h100-80gb", batch=1, seq=1024, mfu=0.4, recompute="ops", compile=compile_,
                                 dropout=False)
        assert plan.evaluate("flops_per_token") - none == expected, compile_


def test_a_gated_layer_reruns_the_same_matmuls_with_or_without_early_stop() -> None:
    # w2 is the 7th mm, odd-counted: saved, so early stop changes nothing (torchtitan's published rows are gated)
    for model in ("llama-3-8b", "qwen2-0.5b"):
        assert ptime.flops(model, seq=4096, recompute="ops").exact() == \
            ptime.flops(model, seq=4096, recompute="ops", early_stop=True).exact()


def test_time_ops_lies_between_none_and_full() -> None:
    out = {r: ptime.train_time("llama-3-8b", "h100-80gb", batch=1, seq=8192, mfu=0.4, recompute=r, tp=2,
                               sequence_parallel=True, dp=1).figures for r in ("none", "ops", "full")}
    assert out["none"]["flops_per_token"] < out["ops"]["flops_per_token"] < out["full"]["flops_per_token"]
    assert out["none"]["step_seconds"] < out["ops"]["step_seconds"] < out["full"]["step_seconds"]
    ops = ptime.flops("llama-3-8b", seq=8192, recompute="ops")
    none = ptime.flops("llama-3-8b", seq=8192)
    term = next(t.expr for t in ops.train.terms if t.key == "recompute")
    recompute = term.subs({s: ops.values[s.name] for s in term.free_symbols})
    assert ops.exact() - none.exact() == recompute


def test_ops_runs_one_more_tensor_parallel_collective_per_layer() -> None:
    # Megatron's 4 all-reduces of B·S·H per layer (library.timing); ops reruns the all-gathers before wk and w3 (each
    # (t − 1)/t: one all-reduce's volume), its save list keeping the reduce-scatters: 5, full recompute 6
    comm = {}
    for r in ("none", "ops", "full"):
        one = ptime.train_time("llama-3-8b", "h100-80gb", batch=1, seq=8192, mfu=0.4, recompute=r, tp=2, dp=1,
                               sequence_parallel=True)
        step = one.formulas["step_seconds"]
        comm[r] = dict((t.key, float(v)) for t, v in step.evaluate(step.restrict(one.values)).terms)["tp_comm"]
    assert comm["ops"] / comm["none"] == pytest.approx(5 / 4) and comm["full"] / comm["none"] == pytest.approx(6 / 4)


def test_time_cli_accepts_recompute_ops(capsys) -> None:
    code, out, err = run(capsys, "time", "llama-3-8b", "--recompute", "ops", "--gpu", "h100-80gb", "--mfu", "0.4")
    assert code == 0 and "step_seconds" in out, err


def test_ops_is_refused_for_experts_in_time_as_in_memory() -> None:
    with pytest.raises(UserError, match="dense model"):
        ptime.flops("mixtral-8x7b", seq=4096, recompute="ops")
    with pytest.raises(UserError, match="dense model"):
        ptime.train_time("mixtral-8x7b", "h100-80gb", seq=4096, mfu=0.4, recompute="ops")


# --- plan ---------------------------------------------------------------------------------------
KW = {"seq": 8192, "global_batch": 8, "tokens": 10**10, "mfu": 0.4}


@pytest.fixture(scope="module")
def result() -> search.SearchResult:
    return search.search("llama-3-8b", "h100-80gb", gpus=4, tp=1, top=None, **KW)


def test_plan_searches_ops_at_every_pp(result) -> None:
    """Per-op recompute under every pipeline degree the search tries, as full recompute (was pp 1 unless pinned)."""
    ops = [lay for lay in result.layouts if lay["recompute"] == "ops"]
    assert {lay["pp"] for lay in ops} > {1}
    every = search.enumerate_layouts("llama-3-8b", result.gpu, counts=[4], global_batch=8, ops=True)
    pps = {lay["pp"] for lay in every if lay["recompute"] == "full"}
    assert {lay["pp"] for lay in every if lay["recompute"] == "ops"} == pps and pps > {1}


def test_plan_ops_layouts_equal_memory_and_time(result) -> None:
    ops = [lay for lay in result.layouts if lay["recompute"] == "ops"]
    assert len(ops) >= 3
    for lay in ops[:2] + ops[-1:]:
        flags = layout_flags(lay, KW["seq"])
        assert lay["memory_bytes"] == planning.plan("llama-3-8b", "train", **flags).total, lay
        one = ptime.train_time("llama-3-8b", "h100-80gb", tokens=KW["tokens"], mfu=KW["mfu"], **flags)
        assert lay["step_seconds"] == pytest.approx(one.figures["step_seconds"], rel=1e-9), lay


# --- torchtitan's Table 1 and 3 rows (per-op SAC), timed -----------------------------------------
# torchtitan benchmarks/llama3_h100_202412_torchtitan.md (b5bcd76): Llama 3.1 8B, FSDP, local batch 2, seq 8192,
# selective_ac_option 'op'; TPS/GPU 5,762 (8 GPUs) and 5,605 (128). Their MFU (33-39 %) is not --mfu's quantity:
# train.py at 9dec370 counts get_num_flop_per_token = 6·N + 12·l·h·q·t with N without the token embedding, "but
# recomputation should not be counted in calculating MFU" (utils.py), and its peak is the SXM H100's while the GPUs
# ran at 500 W (the file's footnote 2). So the step time is not compared at the published MFU; what is like for like
# is the FLOP count: time's FLOPs without recompute are torchtitan's model FLOPs (less the norms' 6·(2L + 1)·H).
@pytest.mark.parametrize("compile_", [False, True])  # the rows "FSDP" and "FSDP + torch.compile"
@pytest.mark.parametrize("gpus", [8, 128])
def test_torchtitan_rows_with_per_op_sac_can_be_timed(gpus, compile_) -> None:
    # compiled, the block drops the last matmul's saved output (w2: backward never reads it), which is not run
    # again either: the FLOPs are the eager policy's
    tp = ptime.train_time("llama-3-8b", "h100-80gb", batch=2, seq=8192, dp=gpus, fsdp=True, recompute="ops",
                          mfu=0.4, compile=compile_)
    assert tp.figures["flops_per_token"] == ptime.flops("llama-3-8b", seq=8192, recompute="ops").per_token()
    assert tp.figures["step_seconds"] > 0 and tp.memory.regime.recompute == "ops" and tp.memory.regime.compile == compile_


def test_time_counts_torchtitans_model_flops_without_recompute() -> None:
    n = _numbers("llama-3-8b")
    shape = load("llama-3-8b")
    total = int(shape.params.expr.subs({s: n[s.name] for s in shape.params.expr.free_symbols}))
    N = total - n["V"] * n["H"]  # torchtitan: get_num_params(model, exclude_embedding=True)
    torchtitan = 6 * N + 12 * n["L"] * n["a"] * n["d_head"] * 8192
    norms = 6 * (2 * n["L"] + 1) * n["H"]
    assert ptime.flops("llama-3-8b", seq=8192).exact() == torchtitan - norms
