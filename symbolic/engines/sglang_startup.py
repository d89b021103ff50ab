"""What SGLang holds on each GPU before its pre-load snapshot at tp·pp > 1: NCCL and the custom all-reduce.

SGLang sizes its KV pool from two free-memory readings (``get_available_gpu_memory``, ``cudaMemGetInfo``):
``pre_model_load_memory`` P, taken after the parallel groups start, and the memory free after the weights,
A = P − W. Its pool is ``rest = A − P·(1 − f) = f·P − W`` (f: mem_fraction_static). Anything allocated
before the snapshot, S bytes, lowers P by S and A by S: ``rest = f·(G − C − S) − W``, so each byte
held at start-up costs f bytes of KV pool (∂rest/∂S = −f), not one: the slack P·(1 − f) shrinks with it.

Read from SGLang 0.5.23 (the PyPI wheel), paths under ``python/sglang/srt/``; with default flags, one
node, no attention DP, ``moe_ep_size`` 1:

- ``distributed/bootstrap.py``:90 ``init_parallel_runtime`` builds the groups before
  ``measure_pre_model_load_memory`` (:193, the snapshot at :207). torch's ``init_process_group``
  (``parallel_state.py``:2517) gets no ``device_id``, so ProcessGroupNCCL makes its communicators at
  their first collective, after the snapshot; ``_prewarm_nccl`` (bootstrap.py:161) runs only with
  ``--pre-warm-nccl`` (``arg_groups/fields/exec_.py``:744, default False on CUDA).
- ``GroupCoordinator`` (``parallel_state.py``:464) makes a PyNccl communicator for every group of more
  than one rank that asks for one: the TP group (:2686) and the PP group (:2962); the world group does
  not (``init_world_group``, use_pynccl=False); attention-TP and MoE-TP are the TP group itself (:2797,
  :2924), MoE-EP and MoE-DP groups have one rank each at ep 1 (``init_world_group`` :2137). ``PyNcclCommunicator``
  (``device_communicators/pynccl.py``:129-137) calls ``ncclCommInitRank`` and then all-reduces one
  float: NCCL's buffers are in place at the snapshot. ``entrypoints/engine.py``:1913 sets
  ``NCCL_NVLS_ENABLE=0`` unless ``--enable-nccl-nvls`` or ``--enable-symm-mem``: no NVLS buffers.
- The TP group's custom all-reduce (``parallel_state.py``:505, ``dispatch_custom_allreduce``: the JIT
  v2, ``SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2`` on by default, ``environ.py``:1532), on one node with full
  NVLink: ``custom_all_reduce_v2.py``:205-212 a graph pointer table of 131,072 × world_size uint64
  (through PyTorch's allocator), and :265-284 one symmetric workspace of 2·world_size push slots of
  ``max_push_size`` + one pull buffer of ``max_pull_size`` (+ 128 bytes of semaphore per pull block,
  under 20 KiB, left out), both capped at ``SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB`` = 16 MiB
  (``environ.py``:1535). The push size is the tuned table's largest one-shot push or two-shot-push slot
  (``configs/custom_all_reduce_v2.py``: Hopper :266, Blackwell B200 :142, others :316, 1 MiB); every table's
  pull size reaches the cap.

SGLang 0.4.9.post2 (PyPI, 2025-07-12; the release current when vllm-project/vllm#21348 was logged) holds the
same communicators at its snapshot (``model_executor/model_runner.py``:547, ``min_per_gpu_memory``, after
``init_distributed_environment`` :526, ``initialize_model_parallel`` :534 and ``initialize_dp_attention``
:538; ``profile_max_num_token`` :959, ``rest_memory = available − total · (1 − f)``): the TP group's PyNccl
communicator (``distributed/parallel_state.py``:269; ``pynccl.py``:109-116, the same warm-up), no torch
communicator (``init_process_group`` :1153 without ``device_id``), the attention-TP group without PyNccl
(``layers/dp_attention.py``:92-106, ``SYNC_TOKEN_IDS_ACROSS_TP`` off) and NVLS off (``entrypoints/engine.py``:624).
What changed since: its custom all-reduce was v1 (``custom_all_reduce.py``:148, :264-276: two ``cudaMalloc``,
``meta_size()`` + 8 MiB and 8 MiB, and an 8 MiB ``rank_data`` tensor: 38 MiB with cudaMalloc's 2 MiB
rounding, a signal block under 2 MiB and the allocator's 20 MiB segment, at world sizes 2, 4, 6, 8), now v2 on a symmetric
workspace sized by tuned per-architecture tables; the snapshot moved to ``distributed/bootstrap.py``; each
group now keeps an ``active_ranks`` tensor on the GPU; MoE, attention-CP and self-PP groups were added (at
the defaults the TP group itself or one rank); ``--pre-warm-nccl`` (off on CUDA) would warm torch's TP
communicator before the snapshot.

The NCCL communicator's bytes are the project's published measurement (``library.runtime.nccl_bytes``:
NVIDIA/nccl#964, 4 × A100 over NVLink), not an H100 figure; the custom all-reduce's are the source's.
Not modelled: the symmetric allocation's rounding to the CUDA VMM granularity, the 2 MiB small-pool
segment PyTorch opens for each group's ``active_ranks`` tensor, SGLang disabling the custom all-reduce on
more than two PCIe-only GPUs, ROCm's all-reduce, and the opt-in communicators (``--enable-symm-mem``, ``--enable-mscclpp``,
``--enable-torch-symm-mem``, ``--pre-warm-nccl``).
"""

from __future__ import annotations

import sympy

from ..core.term import Term
from ..library import runtime

KIB, MIB = 2**10, 2**20
GRAPH_INPUTS = 131072  # custom_all_reduce_v2.py _MAX_GRAPH_INPUTS: rows of world_size uint64 pointers
MAX_SIZE = 16 * 1024 * KIB  # environ.py SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB default, the cap of both planes
ALIGN = 1024  # custom_all_reduce_v2.py _ALIGN_BYTES
# configs/custom_all_reduce_v2.py: per world size, max(graph and eager one-shot push thresholds, the
# two-shot-push slot 32 · ⌈threshold / (16 · world_size)⌉); the pull plane reaches MAX_SIZE in every row
SM90_PUSH = {2: 32 * MIB, 3: 3 * MIB, 4: 896 * KIB, 5: 384 * KIB, 6: 192 * KIB, 7: 128 * KIB, 8: 128 * KIB}
SM100_PUSH = {2: 16 * MIB, 3: 8 * MIB, 4: 4 * MIB, 5: 2 * MIB, 6: 1280 * KIB, 7: 1 * MIB, 8: 2 * MIB,
              16: 256 * KIB}
DEFAULT_PUSH = {w: 1 * MIB for w in range(2, 17)}  # other architectures: the untuned 1 MB crossovers
PUSH_BY_MAJOR = {9: SM90_PUSH, 10: SM100_PUSH}
SOURCE = "sglang"


def communicators(tp: int, pp: int) -> list[tuple[str, int]]:
    """The PyNccl communicators a rank holds at the snapshot: (group, ranks) for TP and PP above one rank."""
    return [(name, n) for name, n in (("tp", tp), ("pp", pp)) if n > 1]


def push_table(gpu: object | None) -> dict[int, int]:
    """The tuned push-plane bytes per world size for ``gpu``'s architecture (others: the default table).

    ROCm runs another all-reduce (aiter's or the v1 one, ``dispatch_custom_allreduce``), not modelled: empty.
    """
    name = getattr(gpu, "name", None)
    if name in runtime.AMD_ARCH:
        return {}
    return PUSH_BY_MAJOR.get(runtime.COMPUTE_MAJOR.get(name), DEFAULT_PUSH)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def graph_table_bytes(world: int) -> int:
    """The graph pointer table as PyTorch's allocator reserves it: 1-10 MiB requests take a 20 MiB segment."""
    request = GRAPH_INPUTS * world * 8
    if runtime.SMALL_SIZE < request < runtime.MIN_LARGE_ALLOC:
        return runtime.LARGE_BUFFER
    return -(-request // runtime.ROUND_LARGE) * runtime.ROUND_LARGE


def custom_all_reduce_bytes(tp: int, gpu: object | None) -> int:
    """The TP group's custom all-reduce v2: its symmetric workspace and its graph pointer table (0 if unsupported)."""
    table = push_table(gpu)
    if tp < 2 or tp not in table:
        return 0
    push = _align(min(table[tp], MAX_SIZE))
    workspace = 2 * tp * push + _align(MAX_SIZE)
    return workspace + graph_table_bytes(tp)


def terms(tp: int, pp: int, gpu: object | None) -> list[Term]:
    """The start-up terms before SGLang's snapshot on one GPU (none at tp = pp = 1)."""
    out = []
    groups = communicators(tp, pp)
    if groups:
        total = sum(runtime.nccl_bytes(n) for _, n in groups)
        what = ", ".join(f"{g} ({n} ranks)" for g, n in groups)
        out.append(Term("nccl", f"PyNccl communicators, made and warmed before the snapshot: {what}",
                        sympy.Integer(total), "bytes", "nccl-memory", "published measurement",
                        "ncclCommInitRank and a one-float all-reduce (pynccl.py); measured on A100 over NVLink "
                        "(NVIDIA/nccl#964), so likely low on H100 (more channels)"))
    reduce_bytes = custom_all_reduce_bytes(tp, gpu)
    if reduce_bytes:
        out.append(Term("custom_all_reduce", f"custom all-reduce v2 of the TP group ({tp} ranks): symmetric "
                        "push/pull workspace and graph pointer table", sympy.Integer(reduce_bytes), "bytes",
                        SOURCE, note="custom_all_reduce_v2.py _init_workspace, graph_params; "
                        "configs/custom_all_reduce_v2.py"))
    return out


def startup_bytes(tp: int, pp: int, gpu: object | None) -> int:
    """Bytes SGLang holds beyond the CUDA context when it takes pre_model_load_memory."""
    return int(sum(t.expr for t in terms(tp, pp, gpu)))
