"""The CUDA runtime's terms (library/runtime.py) and the caching-allocator replay they are checked with."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import sympy

from symbolic.catalogs import gpus
from symbolic.core import sources
from symbolic.core.errors import UserError
from symbolic.library import runtime
from symbolic.library.caching_allocator import (
    CachingAllocator,
    OutOfMemory,
    allocation_size,
    min_capacity,
    replay,
    round_size,
)

MIB = 2**20


# --- constants against the installed torch's own headers -------------------------------------------

def _torch_include() -> Path:
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "include"


@pytest.mark.torch
def test_allocator_constants_are_torchs() -> None:
    text = (_torch_include() / "c10" / "core" / "AllocatorConfig.h").read_text()
    found = {name: int(value) for name, value in re.findall(r"constexpr size_t (k\w+) = (\d+);", text)}
    assert found["kMinBlockSize"] == runtime.MIN_BLOCK
    assert found["kSmallSize"] == runtime.SMALL_SIZE
    assert found["kSmallBuffer"] == runtime.SMALL_BUFFER
    assert found["kMinLargeAlloc"] == runtime.MIN_LARGE_ALLOC
    assert found["kRoundLarge"] == runtime.ROUND_LARGE
    assert int(re.search(r"large_segment_size_\{(\d+)\}", text).group(1)) == runtime.LARGE_BUFFER


@pytest.mark.torch
def test_torch_declares_the_workspace_functions_the_rule_comes_from() -> None:
    text = (_torch_include() / "ATen" / "cuda" / "CUDAContextLight.h").read_text()
    for name in ("getChosenWorkspaceSize", "getCUDABlasLtWorkspaceSize", "cublas_handle_stream_to_workspace"):
        assert name in text
    engine = (_torch_include() / "torch" / "csrc" / "autograd" / "engine.h").read_text()
    assert "start device threads (CUDA" in engine  # backward runs on its own thread: a second handle


def _parse_workspace_config(config: str) -> int:
    """PyTorch's parseChosenWorkspaceSize: the sum of SIZE KiB × COUNT over ':SIZE:COUNT' pairs."""
    return sum(int(size) * 1024 * int(count) for size, count in re.findall(r":([0-9]+):([0-9]+)", config))


def test_workspace_sizes_follow_pytorchs_rule() -> None:
    assert runtime.WORKSPACE_DEFAULT == _parse_workspace_config(":4096:2:16:8") == 8_519_680
    assert runtime.WORKSPACE_32MIB == _parse_workspace_config(":4096:8") == 32 * MIB
    assert runtime.workspace_bytes(gpus.get("a100-80gb")) == 8_519_680
    assert runtime.workspace_bytes(gpus.get("rtx-4090")) == 8_519_680
    for name in ("h100-80gb", "h200-141gb", "b200"):
        assert runtime.workspace_bytes(gpus.get(name)) == 32 * MIB
    assert runtime.workspace_bytes(None) == 32 * MIB  # unknown: the larger
    assert runtime.workspace_bytes(gpus.get("mi300x")) == (128 + 76) * MIB
    assert set(runtime.COMPUTE_MAJOR) | set(runtime.AMD_ARCH) == set(gpus.names())


# --- the terms ------------------------------------------------------------------------------------

def test_single_gpu_training_terms() -> None:
    T = sympy.Symbol("T", positive=True)
    found = runtime.terms(gpus_in_job=1, tensors=T, gpu=gpus.get("h100-80gb"))
    assert [t.key for t in found] == ["cuda_context", "cublas_workspace", "allocator"]
    assert all(t.unit == "bytes" and t.source in sources.SOURCES for t in found)
    by = {t.key: t.expr for t in found}
    assert by["cuda_context"] == 400 * MIB
    assert by["cublas_workspace"] == 2 * 32 * MIB  # main thread + autograd thread
    assert sympy.expand(by["allocator"] - (22 * MIB + sympy.Rational(6, 100) * T)) == 0
    assert runtime.total(found).subs(T, 10**9) == 400 * MIB + 64 * MIB + 22 * MIB + 60_000_000


def test_serving_uses_one_workspace_and_no_tensors_keeps_the_pools() -> None:
    found = {t.key: t.expr for t in runtime.terms(gpus_in_job=1, gpu=gpus.get("a100-80gb"), mode="serve")}
    assert found["cublas_workspace"] == 8_519_680
    assert found["allocator"] == 22 * MIB
    assert runtime.terms(gpus_in_job=1, tensors=1000)[2].expr == 22 * MIB + 60


def test_nccl_communicators_per_parallel_group() -> None:
    assert runtime.communicators(1) == []
    assert runtime.communicators(8, dp=8) == [("dp", 8)]  # the world group is the dp group
    assert runtime.communicators(8, dp=4, tp=2) == [("dp", 4), ("tp", 2), ("world", 8)]
    assert runtime.communicators(4, pp=4) == [("pp", 4)]
    nccl = {t.key: t.expr for t in runtime.terms(gpus_in_job=8, dp=4, tp=2)}["nccl"]
    assert nccl == 688 * MIB + 544 * MIB + 688 * MIB
    assert "nccl" not in {t.key for t in runtime.terms(gpus_in_job=1)}


def test_expert_parallel_all_to_all_is_the_published_8_rank_figure_scaled_by_peers() -> None:
    assert runtime.communicators(8, dp=8, ep=8) == [("dp", 8), ("ep", 8)]
    assert runtime.nccl_bytes(8, all_to_all=True) == 688 * MIB + (4_340_000_000 - 1_060_000_000)
    assert runtime.nccl_bytes(4, all_to_all=True) == 688 * MIB + (4_340_000_000 - 1_060_000_000) * 3 // 7
    with pytest.raises(UserError, match="ep"):
        runtime.terms(gpus_in_job=8, dp=2, tp=2, pp=2, ep=8)


@pytest.mark.parametrize("kwargs", [dict(gpus_in_job=0), dict(gpus_in_job=2, dp=4), dict(gpus_in_job=2, tp=1.5),
                                    dict(gpus_in_job=True)])
def test_bad_degrees_are_user_errors(kwargs: dict) -> None:
    with pytest.raises(UserError):
        runtime.terms(**kwargs)


def test_bad_mode_and_tensors() -> None:
    with pytest.raises(UserError, match="mode"):
        runtime.terms(gpus_in_job=1, mode="inference")
    with pytest.raises(TypeError):
        runtime.terms(gpus_in_job=1, tensors="10")  # strings never become expressions


# --- the allocator replay, hand-checked -----------------------------------------------------------

def test_rounding_and_segment_sizes() -> None:
    assert [round_size(n) for n in (1, 512, 513, 1000)] == [512, 512, 1024, 1024]
    assert allocation_size(MIB) == 2 * MIB  # small pool
    assert allocation_size(MIB + 512) == 20 * MIB  # 1-10 MiB: a 20 MiB segment
    assert allocation_size(10 * MIB) == 10 * MIB
    assert allocation_size(11 * MIB + 1) == 12 * MIB


def test_small_requests_share_a_segment_and_blocks_merge() -> None:
    a = CachingAllocator()
    a.malloc("x", 600 * 1024)
    a.malloc("y", 600 * 1024)
    assert (a.reserved, a.segments, a.allocated) == (2 * MIB, 1, 1_228_800)
    a.free("x")
    a.free("y")
    a.malloc("z", 1200 * 1024)  # > 1 MiB: the large pool, a new 20 MiB segment
    assert (a.reserved, a.segments) == (22 * MIB, 2)
    a.malloc("w", 2 * MIB)  # the merged small segment cannot serve a large request
    assert a.reserved == 22 * MIB  # it comes from the rest of the 20 MiB segment


def test_a_hole_too_small_is_not_used() -> None:
    a = CachingAllocator()
    for key in "ab":
        a.malloc(key, 6 * MIB)  # both in one 20 MiB segment; 8 MiB left after them
    a.free("a")  # a 6 MiB hole
    a.malloc("c", 7 * MIB)  # best fit: the 8 MiB rest, not the 6 MiB hole
    assert a.segments == 1
    a.malloc("d", 7 * MIB)  # neither free block (6 MiB, 1 MiB) fits
    assert (a.segments, a.reserved) == (2, 40 * MIB)


def test_an_unsplit_rest_is_handed_out_and_counted() -> None:
    a = CachingAllocator()
    a.malloc("x", 19 * MIB + 512)  # segment 20 MiB; the rest (1 MiB - 512) is not split off
    assert a.allocated == 20 * MIB and a.requested == 19 * MIB + 512


def test_out_of_memory_releases_free_segments_and_retries() -> None:
    events = [("alloc", 1, 12 * MIB), ("free", 1, 0), ("alloc", 2, 14 * MIB)]
    assert replay(events).reserved == 26 * MIB  # with room: the 12 MiB segment stays cached
    assert replay(events, capacity=14 * MIB).reserved == 14 * MIB  # under pressure it is released
    with pytest.raises(OutOfMemory):
        replay(events, capacity=13 * MIB)
    assert min_capacity(events) == 14 * MIB
    # 6 + 6 MiB in one 20 MiB segment; freeing one leaves the segment partly used: nothing to release
    split = [("alloc", 1, 6 * MIB), ("alloc", 2, 6 * MIB), ("free", 1, 0), ("alloc", 3, 14 * MIB)]
    assert min_capacity(split) == 20 * MIB + 14 * MIB


def test_a_block_freed_by_one_stream_serves_only_its_own_stream() -> None:
    """CUDACachingAllocator.cpp: free blocks ordered by stream first, get_free_block refuses another stream's."""
    a = CachingAllocator()
    a.malloc("grad", 40 * MIB, stream="rs")  # the reduce-scatter stream's output
    a.free("grad")  # freed (zero_grad runs on the compute stream): back to the reduce-scatter stream's blocks
    a.malloc("act", 40 * MIB)  # the compute stream cannot take it: a new segment
    assert (a.reserved, a.segments) == (80 * MIB, 2)
    assert a.stream_reserved == {"rs": 40 * MIB, 0: 40 * MIB}
    a.malloc("grad2", 30 * MIB, stream="rs")  # the reduce-scatter stream reuses its own (best fit, split)
    assert a.reserved == 80 * MIB


def test_one_stream_replays_as_before_and_streams_add_their_pools() -> None:
    """A trace without streams replays unchanged; the same trace on two streams reserves both streams' peaks."""
    one = [("alloc", 1, 64 * MIB), ("free", 1, 0), ("alloc", 2, 64 * MIB), ("free", 2, 0)]
    assert replay(one).reserved == 64 * MIB
    two = [("alloc", 1, 64 * MIB, "rs"), ("free", 1, 0), ("alloc", 2, 64 * MIB, 0), ("free", 2, 0)]
    assert replay(two).reserved == 128 * MIB
    # under pressure the wholly free segment of the other stream is released and the request retried
    assert replay(two, capacity=64 * MIB).reserved == 64 * MIB
    assert min_capacity(two) == 64 * MIB


# --- the fragmentation allowance against replays of real steps ----------------------------------

def _trace(model, vocab: int, batch: int, seq: int, optimizer=None):
    import torch

    from symbolic.measured.allocator_trace import training_trace

    ids = torch.randint(0, vocab, (batch, seq), device=model.device)
    return training_trace(model, ids, lambda m, x: m(input_ids=x, labels=x).loss, steps=3, optimizer=optimizer)


def _gpt2(device: str, layers: int, hidden: int, vocab: int = 50257):
    import torch
    import transformers

    config = transformers.GPT2Config(n_layer=layers, n_embd=hidden, n_head=hidden // 64, vocab_size=vocab,
                                     n_positions=1024, attn_implementation="eager")
    torch.set_num_threads(1)  # a tiny CPU model: more threads only spin (CPU time) on a shared machine
    torch.manual_seed(0)
    with torch.device(device):
        return transformers.GPT2LMHeadModel(config)


def test_runtime_note_is_one_line_naming_the_switch() -> None:
    assert "\n" not in runtime.RUNTIME_NOTE and "--no-runtime" in runtime.RUNTIME_NOTE


@pytest.mark.torch
@pytest.mark.slow
def test_meta_device_trace_is_the_cpu_trace() -> None:
    import torch

    sgd = lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)  # noqa: E731  (AdamW's step counters stay on the CPU)
    cpu = _trace(_gpt2("cpu", 1, 128, 512), 512, 2, 64, sgd)
    meta = _trace(_gpt2("meta", 1, 128, 512), 512, 2, 64, sgd)
    assert sum(kind == "alloc" for kind, _, _ in cpu) > 300
    assert [(kind, n) for kind, _, n in cpu] == [(kind, n) for kind, _, n in meta]


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("layers,hidden,batch,seq,dtype,sgd", [
    (12, 768, 1, 1024, "fp32", False),  # GPT-2 124M
    (12, 768, 4, 1024, "bf16", True),
])
def test_allowance_covers_the_allocators_overhead_on_real_steps(layers, hidden, batch, seq, dtype, sgd) -> None:
    import torch

    model = _gpt2("meta", layers, hidden)
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    opt = (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)) if sgd else None
    events = _trace(model, 50257, batch, seq, opt)
    live = replay(events).requested
    needed = min_capacity(events)
    allowance = runtime.terms(gpus_in_job=1, tensors=live)[2].expr
    assert live < needed <= live + allowance  # overhead exists, and the allowance covers it
    assert needed - live > allowance / 3  # and is not many times too large


def test_gpu_script_turns_a_cuda_snapshot_into_replay_events() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from gpu_runtime import snapshot_events

    snapshot = {"device_traces": [[
        {"action": "segment_alloc", "addr": 0, "size": 20 * MIB},
        {"action": "alloc", "addr": 0, "size": 6 * MIB},
        {"action": "alloc", "addr": 6 * MIB, "size": 6 * MIB},
        {"action": "free_requested", "addr": 0, "size": 6 * MIB},
        {"action": "free_completed", "addr": 0, "size": 6 * MIB},
        {"action": "alloc", "addr": 0, "size": 5 * MIB},  # the address is reused
    ]]}
    events = snapshot_events(snapshot)
    assert [(kind, n) for kind, _, n in events] == [("alloc", 6 * MIB), ("alloc", 6 * MIB), ("free", 0),
                                                     ("alloc", 5 * MIB)]
    assert replay(events).reserved == 20 * MIB


# --- as a user sees it: symbolic memory ---------------------------------------------------------

def _memory_json(capsys, *extra: str) -> dict:
    import json

    from helpers import run

    code, out, err = run(capsys, "memory", "gpt2", "--mode", "train", "--batch", "4", "--seq", "1024", "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def test_memory_counts_the_runtime_terms_and_no_runtime_drops_them(capsys) -> None:
    on = _memory_json(capsys, "--dp", "2")
    terms = on["terms"]
    assert terms["cuda_context"] == runtime.CONTEXT_BYTES
    assert terms["cublas_workspace"] == 2 * runtime.workspace_bytes(None)  # training: two handles
    assert terms["nccl"] == runtime.nccl_bytes(2)
    own = sum(terms[k] for k in ("cuda_context", "cublas_workspace", "allocator", "nccl"))
    tensors = on["total_bytes"] - own  # the allowance is a fraction of everything else
    assert terms["allocator"] == pytest.approx(22 * MIB + float(runtime.FRAGMENTATION) * tensors, abs=1)
    off = _memory_json(capsys, "--dp", "2", "--no-runtime")
    assert not {"cuda_context", "cublas_workspace", "allocator", "nccl"} & set(off["terms"])
    assert off["total_bytes"] == on["total_bytes"] - own
    single = _memory_json(capsys)
    assert "nccl" not in single["terms"] and "cuda_context" in single["terms"]
