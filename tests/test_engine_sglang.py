"""SGLang's memory rules (symbolic.engines.sglang): the default fraction, the cell, the token pool and the
log lines as SGLang 0.5.23's source has them (python/sglang/srt/arg_groups/memory_hook.py,
model_executor/pool_configurator.py, mem_cache/kv_cache_configurator.py, mem_cache/memory_pool.py), and
published SGLang startup logs, each cited where it is used."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import run

from symbolic.catalogs import GPUS
from symbolic.core.errors import UserError
from symbolic.engines import serve
from symbolic.engines import sglang as engine
from symbolic.engines import sglang_startup as startup
from symbolic.library import runtime
from symbolic.library.runtime import CONTEXT_BYTES
from symbolic.networks.network import load
from symbolic.networks.stored import stored_weights

GIB = 2**30
DATA = Path(__file__).parent / "data"
MIB = 2**20


def _reserved(chunked, decode_bs, prefill_sizes, tp=1, pp=1):
    # memory_hook.py: 512 + 1.5 · max(chunked, 2048) + tp·pp/8 · 1024 + 2 · decode max_bs + 8 · prefill sizes
    return 512 + 1.5 * max(chunked, 2048) + tp * pp / 8 * 1024 + 2 * decode_bs + 8 * prefill_sizes


@pytest.mark.parametrize("gpu_mib, tp, chunked, decode_bs, sizes", [
    (81559, 1, 8192, 256, 58),  # H100 80GB: 8k chunks, bs 256; 58 prefill capture sizes up to 8192
    (143771, 1, 8192, 256, 58),  # H200
    (23034, 1, 4096, 48, 50),  # L4: < 35 GiB, 4k chunks, bs 48; 50 sizes up to 4096
    (81559, 8, 8192, 512, 58),  # H100 at tp 8: bs 512
    (183359, 1, 16384, 512, 74),  # B200: ≥ 160 GiB, 16k chunks
])
def test_default_mem_fraction_static_follows_the_source(gpu_mib, tp, chunked, decode_bs, sizes):
    assert engine.capacity_defaults(gpu_mib, tp) == (chunked, decode_bs)
    assert len(engine.prefill_graph_sizes(chunked)) == sizes
    reserved = _reserved(chunked, decode_bs, sizes, tp)
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)  # the 10 GiB floor on GPUs above 60 GiB
    assert engine.default_fraction(gpu_mib, chunked, decode_bs, tp) == round((gpu_mib - reserved) / gpu_mib, 3)


def test_default_fraction_on_h100_is_0_83():
    # the rule's arithmetic for nvidia-smi's 81,559 MiB: (81559 − 13904) / 81559 = 0.8295… → 0.83
    plan = serve("llama-3-8b", engine="sglang", gpu="h100-80gb")
    assert plan.figures["mem_fraction_static"] == 0.83
    assert plan.figures["reserved_mib"] == 13904


def test_mla_reserves_one_and_a_half_gib_for_prefill_graphs():
    # memory_hook.py reserve_for_graph_mb: MLA's prefill graphs 1.5 GiB instead of 8 MiB per size
    assert engine.graph_reserve_mib(256, 8192, mla=True) == 256 * 2 + 1536


def test_mi355x_log_default_fraction():
    # sgl-project/sglang#18263 (MI355X, Qwen3-30B-A3B-Instruct-2507-FP8, tp 1, defaults) prints
    # mem_fraction_static 0.911; 287.18 GB free before loading bounds the total from below. On ROCm the
    # prefill graphs are off (cuda_graph_config.py default_prefill_backend): 16k chunks, decode bs 512.
    for gpu_mib in (287.18 * 1024, 288 * 1024):
        chunked, decode_bs = engine.capacity_defaults(gpu_mib, 1)
        assert engine.default_fraction(gpu_mib, chunked, decode_bs, prefill_graphs=False) == 0.911


def test_kv_budget_against_a_published_log():
    # sgl-project/sglang#18263: "Load weight end. … avail mem=230.20 GB, mem usage=56.98 GB", fraction 0.911,
    # "initial available_bytes 219721119039 / 204.63 GB": free after weights − pre · (1 − fraction), with pre
    # the free memory before loading (230.20 + 56.98). Within 0.02 GiB: the log's inputs are rounded to 0.01.
    pre, weights = int((230.20 + 56.98) * GIB), int(56.98 * GIB)
    assert engine.kv_budget(pre, weights, 0.911) / GIB == pytest.approx(219721119039 / GIB, abs=0.02)


def test_the_pool_is_the_budget_over_the_cell_in_whole_pages():
    # pool_configurator.py: cell = kv_heads/tp · (head_dim + v_head_dim) · layers · bytes; tokens = available //
    # cell, rounded down to the page size
    plan = serve("llama-3-8b", engine="sglang", gpu="h100-80gb", page_size=16)
    cell = 8 * (128 + 128) * 32 * 2
    assert plan.figures["cell_bytes"] == cell
    assert plan.kv_cache_tokens == plan.figures["available_kv_cache_bytes"] // cell // 16 * 16
    pre = GPUS["h100-80gb"].cuda_bytes - CONTEXT_BYTES  # CUDA's free memory before loading: from CUDA's total
    weights = sum(stored_weights(load("llama-3-8b"), "bf16").values())
    assert plan.figures["available_kv_cache_bytes"] == int((pre - weights) - pre * (1 - 0.83))


def test_tensor_parallel_splits_kv_heads_but_not_below_one():
    net = load("llama-3-8b")  # 8 KV heads
    assert engine.token_bytes(net, 2, 2) == 4 * 2 * 128 * 2
    assert engine.token_bytes(net, 16, 2) == 1 * 2 * 128 * 2


def test_mla_cell_is_latent_plus_rope_every_layer_unsplit():
    net = load("deepseek-v3")
    assert engine.cell_bytes(net, 8, 1, 2) == (512 + 64) * 61 * 2


def test_hybrid_sliding_window_pool_splits_full_and_swa():
    # pool_configurator.py HybridSWAPoolConfigurator: cell = full layers + 0.8 · SWA layers; SWA tokens = 0.8 · full
    net = load("gpt-oss-20b")  # 12 full and 12 sliding layers, 8 KV heads of 64
    per_layer = 8 * 2 * 64 * 2
    assert engine.cell_bytes(net, 1, 1, 2) == pytest.approx(12 * per_layer + 0.8 * 12 * per_layer)
    plan = serve("gpt-oss-20b", engine="sglang", gpu="h200")
    assert plan.figures["swa_max_total_num_tokens"] == int(plan.kv_cache_tokens * 0.8)


def test_max_running_requests_rule():
    # kv_cache_configurator.py resolve_max_num_reqs
    assert engine.max_running_requests(416_000, 8192, None) == 4096  # 26,000 clamped to 4096
    assert engine.max_running_requests(1_000_000, 131072, None) == 3906  # ⌊1e6 / 131072 · 512⌋, inside the clamp
    assert engine.max_running_requests(400_000, 131072, None) == 2048  # 1,562 raised to 2048
    assert engine.max_running_requests(1321, 8192, None) == 660  # tokens // 2
    assert engine.max_running_requests(416_000, 8192, 100) == 100


def test_concurrency_is_tokens_over_seq_capped_by_running_requests():
    plan = serve("llama-3-8b", engine="sglang", gpu="h100-80gb", seq=4096)
    assert plan.max_concurrency == min(plan.kv_cache_tokens // 4096, plan.figures["max_running_requests"])
    few = serve("llama-3-8b", engine="sglang", gpu="h100-80gb", seq=16, max_running_requests=64)
    assert few.max_concurrency == 64


def test_kv_log_line_k_size_against_published_logs():
    # sgl-project/sglang#18262 (a 5-layer Qwen3-30B-A3B, 4 KV heads of 128, bf16, tp 1):
    # "KV Cache is allocated. #tokens: 21985288, K size: 104.83 GB, V size: 104.83 GB"
    line = engine.kv_log_line("torch.bfloat16", 21985288, 1, 4 * 2 * 128 * 2, 5, mla=False)
    assert line.endswith("#tokens: 21985288, K size: 104.83 GB, V size: 104.83 GB")
    # vllm-project/vllm#21348 (Qwen3-235B-A22B-FP8, 94 layers, 4 KV heads of 128, tp 4, bf16 cache):
    # "KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB"
    line = engine.kv_log_line("torch.bfloat16", 367404, 1, 1 * 2 * 128 * 2, 94, mla=False)
    assert line.endswith("#tokens: 367404, K size: 8.23 GB, V size: 8.23 GB")


def test_plan_log_lines_and_json_figures():
    plan = serve("llama-3-8b", engine="sglang", gpu="h100-80gb")
    tokens = plan.kv_cache_tokens
    assert plan.log_lines[0].startswith(f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {tokens}, K size: ")
    assert plan.log_lines[1].startswith(f"max_total_num_tokens={tokens}, chunked_prefill_size=8192, ")
    data = plan.as_dict()
    for key in ("mem_fraction_static", "max_total_num_tokens", "chunked_prefill_size", "max_running_requests",
                "weights_bytes", "kv_cache_bytes", "kv_cache_tokens", "max_concurrency", "budget_bytes"):
        assert key in data
    assert data["kv_cache_bytes"] == (tokens + 1) * 131072  # (tokens + page_size) rows of K and V


@pytest.mark.parametrize("bad", [0, 1.5, -0.1])
def test_fraction_outside_zero_one_is_refused(bad):
    with pytest.raises(UserError, match="mem-fraction-static"):
        serve("llama-3-8b", engine="sglang", gpu="h100-80gb", mem_fraction_static=bad)


def test_a_fraction_that_leaves_no_room_for_the_weights_is_refused():
    # 0.15 of 79.3 GiB is 11.9 GiB, below Llama-3-8B's 15 GiB of bf16 weights
    with pytest.raises(UserError, match="leave no GPU memory for the KV cache under --mem-fraction-static=0.15; "
                                        "raise it above"):
        serve("llama-3-8b", engine="sglang", gpu="h100-80gb", mem_fraction_static=0.15)


def test_a_flag_of_another_engine_is_refused():
    with pytest.raises(UserError, match="gpu-memory-utilization is a flag of vllm"):
        serve("llama-3-8b", engine="sglang", gpu_memory_utilization=0.9)


def test_a_vllm_kv_dtype_is_refused():
    with pytest.raises(UserError, match="fp8_ds_mla is not SGLang's"):
        serve("llama-3-8b", engine="sglang", kv_cache_dtype="fp8_ds_mla")


def test_cli_refuses_a_bad_fraction_in_one_line(capsys):
    code, out, err = run(capsys, "serve", "llama-3-8b", "--engine", "sglang", "--mem-fraction-static", "0.1")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "mem-fraction-static" in err


def test_fp8_cache_halves_the_cell():
    plan = serve("llama-3-8b", engine="sglang", gpu="h100-80gb", kv_cache_dtype="fp8_e4m3")
    assert plan.figures["cell_bytes"] == 8 * 256 * 32
    assert plan.log_lines[0].startswith("KV Cache is allocated. dtype: torch.float8_e4m3fn")
    assert math.isclose(plan.kv_cache_tokens / serve("llama-3-8b", engine="sglang", gpu="h100-80gb").kv_cache_tokens,
                        2, rel_tol=1e-5)


def test_end_to_end_against_a_published_startup_on_four_h100s():
    # vllm-project/vllm#21348 (2025-07-22): SGLang serving Qwen3-235B-A22B-FP8 with --tp 4 --mem-fraction-static 0.93
    # on 4 × H100 logs "KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB" (the line's
    # format, without "dtype:", is 0.4.9's; 0.4.9.post2 was the release of that day). End to end (weights as
    # stored, pre-load memory, the fraction, the cell) the plan says more tokens. The tp-4 start-up before the
    # snapshot (the TP group's PyNccl communicator and custom all-reduce, symbolic.engines.sglang_startup; 0.4.9
    # holds the same communicator and a 38 MiB v1 all-reduce) took +13.3 % to +9.3 %; starting from CUDA's total
    # (the catalogue's cuda_bytes, 79.18 GiB, the median of published readings) instead of nvidia-smi's 81,559 MiB
    # took it to +6.6 %. The rest, 1.1 GiB of KV pool per GPU, is not fitted: NCCL's communicator is the A100
    # figure (688 MiB), and SGLang's own start-up logs on Hopper are larger (docs/serving.md); the weights are the
    # stored bytes only.
    plan = serve(str(DATA / "qwen3-235b-a22b-fp8.json"), engine="sglang", gpu="h100-80gb", tp=4,
                 mem_fraction_static=0.93)
    published = 367404
    error = plan.kv_cache_tokens / published - 1
    assert plan.figures["cell_bytes"] == 1 * 2 * 128 * 94 * 2  # 4 KV heads over tp 4, K and V, 94 layers, bf16
    assert 0.05 < error < 0.08, f"{error:+.1%}"  # +6.6 % at this commit
    missing = (plan.kv_cache_tokens - published) * plan.figures["cell_bytes"]
    assert 0.9 * GIB < missing < 1.3 * GIB  # what SGLang had less free than the plan assumes, per GPU
    assert plan.figures["gpu_total_bytes"] == GPUS["h100-80gb"].cuda_bytes


def test_no_startup_terms_on_one_gpu():
    plan = serve("llama-3-8b", engine="sglang", gpu="h100-80gb")
    assert plan.figures["startup_bytes"] == 0
    assert {t.key for t in plan.terms}.isdisjoint({"nccl", "custom_all_reduce"})
    assert "less what SGLang starts" not in plan.notes[0]


def test_startup_at_tp_4_on_hopper_is_one_communicator_and_the_custom_all_reduce():
    plan = serve("llama-3-8b", engine="sglang", gpu="h100-80gb", tp=4)
    terms = {t.key: int(t.expr) for t in plan.terms}
    assert terms["nccl"] == runtime.nccl_bytes(4) == 688 * MIB  # NVIDIA/nccl#964, one PyNccl communicator (TP)
    # SGLang 0.5.23 custom_all_reduce_v2.py: 2 · world_size push slots of 896 KiB (configs/custom_all_reduce_v2.py,
    # SM90 world 4: eager 1shot_push 896 KB) + a 16 MiB pull plane (SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB), and
    # the 131,072 × 4 uint64 graph table (4 MiB), which PyTorch's allocator serves from a 20 MiB segment
    assert terms["custom_all_reduce"] == 2 * 4 * 896 * 1024 + 16 * MIB + 20 * MIB
    assert plan.figures["startup_bytes"] == terms["nccl"] + terms["custom_all_reduce"]
    one_gpu = serve("llama-3-8b", engine="sglang", gpu="h100-80gb")
    startup = plan.figures["startup_bytes"]
    assert plan.figures["pre_model_load_bytes"] == one_gpu.figures["pre_model_load_bytes"] - startup
    assert {"nccl", "custom_all_reduce"} <= set(plan.outside)  # held before the snapshot, outside the fraction


def test_each_startup_byte_costs_the_fraction_of_a_byte_of_pool():
    # rest = (P − S − W) − (P − S)(1 − f) = f·(P − S) − W: the start-up lowers both readings, so the pool loses f·S
    plan = serve("llama-3-8b", engine="sglang", gpu="h100-80gb", tp=4, mem_fraction_static=0.9)
    f, startup = 0.9, plan.figures["startup_bytes"]
    pre_without = plan.figures["pre_model_load_bytes"] + startup
    weights = plan.weights_bytes
    without = int((pre_without - weights) - pre_without * (1 - f))
    assert abs(plan.figures["available_kv_cache_bytes"] - (without - f * startup)) <= 1


def test_pipeline_ranks_add_their_own_communicator():
    plan = serve("llama-3-8b", engine="sglang", gpu="h100-80gb", tp=2, pp=2)
    terms = {t.key: int(t.expr) for t in plan.terms}
    assert terms["nccl"] == 2 * runtime.nccl_bytes(2)  # the TP group's and the PP group's PyNccl communicators
    # SM90 world 2: the eager one-shot push (32 MB) capped at 16 MiB: 4 slots of 16 MiB, the pull plane, 2 MiB table
    assert terms["custom_all_reduce"] == 4 * 16 * MIB + 16 * MIB + 20 * MIB


@pytest.mark.parametrize("gpu, tp, push", [
    ("a100-80gb", 8, 1 * MIB),  # no tuned table before Hopper: 1 MB one-shot crossovers
    ("b200", 4, 4 * MIB),  # SM100 world 4: the 8 MB two-shot push needs 32 · ⌈8 MiB / 64⌉ = 4 MiB slots
])
def test_custom_all_reduce_follows_the_architecture_table(gpu, tp, push):
    graph_table = 20 * MIB  # 131,072 × tp × 8 bytes is 4-8 MiB: one 20 MiB segment of PyTorch's allocator
    assert startup.custom_all_reduce_bytes(tp, GPUS[gpu]) == 2 * tp * push + 16 * MIB + graph_table


def test_no_custom_all_reduce_at_a_world_size_sglang_does_not_support():
    assert startup.custom_all_reduce_bytes(16, GPUS["h100-80gb"]) == 0  # SM90's table stops at 8
    assert startup.custom_all_reduce_bytes(8, GPUS["mi300x"]) == 0  # ROCm: another all-reduce, not modelled


def test_cli_text_and_json_carry_the_startup(capsys):
    args = ("serve", "llama-3-8b", "--engine", "sglang", "--gpu", "h100-80gb", "--tp", "4")
    code, out, _ = run(capsys, *args, "--json")
    data = json.loads(out)
    terms = {t["key"]: t for t in data["terms"]}
    assert code == 0 and data["startup_bytes"] == terms["nccl"]["bytes"] + terms["custom_all_reduce"]["bytes"]
    assert not terms["nccl"]["in_budget"] and not terms["custom_all_reduce"]["in_budget"]
    code, out, _ = run(capsys, *args)
    assert code == 0 and f"{terms['nccl']['bytes']:,}" in out and "custom_all_reduce" in out


def test_the_default_fraction_reads_nvidia_smi_and_the_pool_reads_cuda():
    # memory_hook.py sizes the defaults from nvidia-smi's total (get_nvgpu_memory_capacity); the pool from CUDA's free
    # memory. A size given as CUDA's total gives that size to both: its fraction differs, its pre-load memory does not
    gpu = GPUS["h100-80gb"]
    named = serve("llama-3-8b", engine="sglang", gpu="h100-80gb")
    given = serve("llama-3-8b", engine="sglang", gpu=f"{gpu.cuda_bytes}B")
    assert named.figures["mem_fraction_static"] == engine.default_fraction(gpu.bytes / MIB, 8192, 256, 1, 1, False)
    assert given.figures["mem_fraction_static"] == engine.default_fraction(gpu.cuda_bytes / MIB, 8192, 256, 1, 1, False)
    assert named.figures["pre_model_load_bytes"] == given.figures["pre_model_load_bytes"] == gpu.cuda_bytes - CONTEXT_BYTES


def test_a_gpu_without_a_published_cuda_total_is_said(monkeypatch):
    # a catalogue entry without a CUDA reading (every entry has one today: the H100 NVL's taken away here)
    monkeypatch.setitem(GPUS, "h100-94gb", replace(GPUS["h100-94gb"], cuda_bytes=None, cuda_source=None))
    plan = serve("gpt-oss-20b", engine="sglang", gpu="h100-nvl")
    assert plan.figures["pre_model_load_bytes"] == GPUS["h100-94gb"].bytes - CONTEXT_BYTES
    assert any("no published CUDA total" in note for note in plan.notes)
