"""The CUDA runtime's own memory on one GPU, as named terms: context, cuBLAS workspaces, allocator, NCCL.

A plan's tensors are not all a GPU holds. Before the first tensor, and beside every tensor,
a PyTorch process on a CUDA device also holds:

``cuda_context``
    The CUDA context with the kernels the process has loaded (driver state, PyTorch's and
    cuBLAS's kernels). Outside PyTorch's allocator: ``nvidia-smi`` and ``torch.cuda.mem_get_info``
    see it, ``torch.cuda.memory_reserved`` does not. Since CUDA 11.7 modules load lazily
    (PyTorch sets ``CUDA_MODULE_LOADING=LAZY`` when unset, pytorch/pytorch#86509), so the
    context grows with the kernels a step uses. A published measurement, not a formula: see
    ``CONTEXT_BYTES``.
``cublas_workspace``
    PyTorch gives every (cuBLAS handle, stream) pair one workspace, allocated through the
    caching allocator (so ``memory_allocated`` includes it) and kept for the life of the process;
    cuBLASLt shares it (``TORCH_CUBLASLT_UNIFIED_WORKSPACE``, on by default). Its size is
    PyTorch's own rule (``CublasHandlePool.cpp``, ``parseChosenWorkspaceSize``): 32 MiB on compute
    capability 9.x, 10.x and 12.x (Hopper, Blackwell), else ``:4096:2:16:8`` = 2 × 4096 KiB +
    8 × 16 KiB = 8,519,680 bytes. Handles are per thread, and the autograd engine runs the backward
    pass of CUDA tensors on its own device thread, so a training process holds two (forward and
    optimizer on the main thread, backward on the autograd thread) and a serving process one.
    ROCm: hipBLAS 128 MiB on gfx942/gfx950 plus a separate 76 MiB hipBLASLt workspace.
``allocator``
    The caching allocator rounds every block up to 512 bytes, packs requests of at most 1 MiB
    into 2 MiB segments, serves 1–10 MiB requests from 20 MiB segments and rounds larger ones up
    to 2 MiB (``c10/core/AllocatorConfig.h``: kMinBlockSize, kSmallSize, kSmallBuffer,
    kMinLargeAlloc, kRoundLarge, large_segment_size; checked against the installed torch
    headers in the tests). Freed blocks stay cached, and a block split inside a segment can only
    merge with its free neighbours, so what the allocator reserves at a step's peak exceeds the
    live tensor bytes. The term is one segment of each pool plus ``FRAGMENTATION`` × the tensor
    bytes the caller passes as ``tensors`` (a model checked against a replay of the allocator's
    rules on real steps' allocation sequences: ``caching_allocator``; see ``FRAGMENTATION``).
``nccl``
    Each NCCL communicator a rank joins allocates its own channel buffers on the GPU (outside
    PyTorch's allocator) when the group's first collective runs. One communicator per
    parallel group with more than one rank (data, tensor, pipeline, and the expert-parallel
    all-to-all), plus the default (world) group when it differs from all of them. Published
    measurements: see ``NCCL_BYTES`` and ``ALL_TO_ALL_BYTES``.

``terms(...)`` returns these for one GPU; the planner adds them as resident terms when the
device is CUDA and ``--runtime`` is on (the default). The figures are for one process per GPU.
``benchmarks/gpu_runtime.py`` measures each of them on a CUDA machine so that the published
figures can be replaced by measured ones.
"""

from __future__ import annotations

import sympy

from ..core import sources
from ..core.errors import UserError
from ..core.term import Term

MIB = 2**20
KIB = 2**10

for _id, _citation, _url in (
    ("pytorch-allocator", "PyTorch 2.13.0, c10/core/AllocatorConfig.h and c10/cuda/CUDACachingAllocator.cpp: "
     "kMinBlockSize 512, kSmallSize 1 MiB, kSmallBuffer 2 MiB, kMinLargeAlloc 10 MiB, kRoundLarge 2 MiB, "
     "large_segment_size 20 MiB", "https://github.com/pytorch/pytorch/blob/main/c10/core/AllocatorConfig.h"),
    ("pytorch-cublas", "PyTorch 2.13.0, aten/src/ATen/cuda/CublasHandlePool.cpp: parseChosenWorkspaceSize "
     "(:4096:2:16:8 default, 32 MiB for compute capability 9, 10, 12), unified cuBLASLt workspace, one "
     "workspace per (handle, stream); torch/csrc/autograd/engine.h: the engine starts its own device threads "
     "(CUDA) for the backward pass",
     "https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/cuda/CublasHandlePool.cpp"),
    ("pytorch-context", "CUDA context size with lazy module loading: pytorch/pytorch#86509 (287,047,680 bytes "
     "used after one small tensor, 666,632,192 with eager loading) and ptrblck in pytorch/pytorch#109888 "
     "(\"around 400MB if CUDA >= 11.7 is used and lazy module loading enabled\")",
     "https://github.com/pytorch/pytorch/issues/109888"),
    ("nccl-memory", "NCCL communicator memory measured with PyTorch on 4 × A100 (NVLink) after a 4 MB "
     "all-reduce: 544 MB for a 2-rank group, 688 MB for a larger one (NVIDIA/nccl#964); all-to-all on 8 × H100: "
     "1.06 GB before and 4.34 GB after the first all_to_all_single, 32 channels per pair of GPUs "
     "(NVIDIA/nccl#1685); NCCL keeps buffers per channel and per peer (NVIDIA/nccl#986, #1450, #2294)",
     "https://github.com/NVIDIA/nccl/issues/964"),
):
    if _id not in sources.SOURCES:
        sources.register(_id, _citation, _url)

# --- the caching allocator's constants (c10/core/AllocatorConfig.h, torch 2.13.0) ---------------
MIN_BLOCK = 512  # kMinBlockSize: every block is a multiple of 512 bytes
SMALL_SIZE = 1 * MIB  # kSmallSize: the largest request served by the small pool
SMALL_BUFFER = 2 * MIB  # kSmallBuffer: segment size of the small pool
MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc: from here a request gets a segment of its own size
ROUND_LARGE = 2 * MIB  # kRoundLarge: such segments are rounded up to 2 MiB
LARGE_BUFFER = 20 * MIB  # large_segment_size: segment size for 1-10 MiB requests

# --- cuBLAS workspace (CublasHandlePool.cpp, torch 2.13.0) ----------------------------------------
WORKSPACE_DEFAULT = 4096 * KIB * 2 + 16 * KIB * 8  # ":4096:2:16:8" = 8,519,680 bytes
WORKSPACE_32MIB = 4096 * KIB * 8  # 33,554,432 bytes on compute capability 9.x, 10.x, 12.x
WORKSPACE_32MIB_MAJORS = (9, 10, 12)
ROCM_WORKSPACE = {"gfx942": 128 * MIB, "gfx950": 128 * MIB}  # hipBLAS; 32 MiB on other AMD GPUs
ROCM_WORKSPACE_OTHER = 32 * MIB
ROCM_LT_WORKSPACE = 76 * MIB  # hipBLASLt's own workspace (not unified on ROCm)

# Compute capability (major) of the catalogue's NVIDIA GPUs, and AMD architectures (NVIDIA CUDA
# GPUs page; AMD ROCm hardware specifications).
COMPUTE_MAJOR = {"v100-16gb": 7, "v100-32gb": 7, "t4": 7, "a10g": 8, "l4": 8, "l40s": 8, "rtx-3090": 8,
                 "rtx-4090": 8, "a100-40gb": 8, "a100-80gb": 8, "h100-80gb": 9, "h100-94gb": 9,
                 "h200-141gb": 9, "b200": 10}
AMD_ARCH = {"mi300x": "gfx942"}

# --- published measurements ---------------------------------------------------------------------
CONTEXT_BYTES = 400 * MIB
"""CUDA context with lazily loaded kernels: ptrblck's "around 400MB" (pytorch#109888), taken as MiB.

Checked against pytorch#86509's measurement of a bare context plus one 6.4 MB tensor (287,047,680
bytes of ``cudaMemGetInfo`` used, of which 20 MiB is the allocator's segment: 254 MiB of context
before any kernel of a training step is loaded) and vLLM's reported ``non_torch_memory`` of
0.33 GiB on an RTX 5090 (vllm-project/vllm#14452). Kernels loaded later (cuBLAS, attention,
optimizer) add to the bare context, so the larger published figure is used. Reported non-PyTorch
memory per process goes higher where libraries add their own buffers (vLLM on an H100 with
Llama-3-8B: 1.79 GiB, vllm-project/vllm#10511, including its communication buffers); the figure
is for a plain PyTorch training or serving process.
"""

EAGER_CONTEXT_BYTES = 1000 * MIB
"""CUDA context with every kernel loaded at start-up (``CUDA_MODULE_LOADING=EAGER``, the default before
CUDA 11.7 and PyTorch 1.13): ptrblck's "took >1000MB" (pytorch/pytorch#107667), taken as MiB, a lower
bound. Checked against pytorch#86509, whose same command used 666,632,192 bytes eagerly and
287,047,680 lazily: eager loading added 379,584,512 bytes (362 MiB) before cuBLAS or any kernel of a
step had loaded, and the lazy figure (``CONTEXT_BYTES``) plus that difference is already 762 MiB.
The issue's 1.3 GiB on a V100 was not found in a public source; it is above this bound."""

CONTEXT_BY_LOADING = {"lazy": CONTEXT_BYTES, "eager": EAGER_CONTEXT_BYTES}
"""The CUDA context by ``CUDA_MODULE_LOADING`` (NVIDIA's Lazy Loading guide: LAZY or EAGER)."""

NCCL_BYTES = {2: 544 * MIB, 3: 688 * MIB}
"""GPU memory of one NCCL communicator after its first all-reduce (NVIDIA/nccl#964, 4 × A100 over
NVLink, PyTorch): 544 MB for 2 ranks, 688 MB for 3 or more (read as MiB, nvidia-smi's unit).
NCCL's buffers scale with the channel count (NVIDIA/nccl#986: more channels on H100 to reach its
NVLink bandwidth), so Hopper figures are likely higher; all-to-all (expert parallelism) connects
every peer and takes several times more: see ``ALL_TO_ALL_BYTES``."""

ALL_TO_ALL_BYTES = (434 - 106) * 10**7
"""What the first all-to-all of an 8-rank group adds on each GPU (NVIDIA/nccl#1685, 8 × H100: 1.06 GB
before, 4.34 GB after, as reported, read as 10⁹ bytes): NCCL connects every peer, over 32
channels per pair. For ``ep`` ranks it is scaled by the peers, (ep − 1)/7: NCCL's P2P buffers
are one per channel per peer (NVIDIA/nccl#2294). A model beyond 8 ranks and off H100."""

FRAGMENTATION = sympy.Rational(6, 100)
"""Allowance for the caching allocator's rounding and fragmentation, as a fraction of the tensor bytes.

A model, checked against ``caching_allocator.min_capacity``: the least memory with which the
allocator's own rules (replayed) serve the allocation sequence of three real training steps
(recorded with ``allocator_trace`` on the meta device: GPT-2 124M and 355M, TinyLlama-1.1B's
shape, fp32 and bf16, AdamW and SGD with momentum, B·S from 1·1024 to 8·1024), beyond the live
tensor bytes: 2.5 % to 5.3 % (benchmarks/allocator_overhead.py --full; tests/test_runtime.py
reproduces two rows). Small models with a large vocabulary
exceed it (GPT-2 with H = 512 and V = 50257: 20 % to 28 %), because their largest tensors are
vocabulary-sized and of several sizes, and a freed block can only serve a request it fits.
"""

RUNTIME_NOTE = ("GPU plans include the CUDA runtime's own memory on each GPU (CUDA context and kernels, cuBLAS "
                "workspaces, caching-allocator rounding and fragmentation, NCCL buffers when dp, tp, pp or ep > 1); "
                "--no-runtime leaves it out")

MODES = ("train", "serve")


def _major(gpu: object | None) -> int | None:
    """Compute capability major of a catalogue GPU, or None when unknown."""
    name = getattr(gpu, "name", None)
    return COMPUTE_MAJOR.get(name) if name is not None else None


def workspace_bytes(gpu: object | None = None) -> int:
    """Bytes of one cuBLAS workspace (cuBLASLt shares it) on ``gpu``, by PyTorch's own rule.

    An unknown GPU (a custom one, or none given) gets the larger 32 MiB, so that a fit is not
    promised on the strength of a smaller workspace. AMD GPUs: hipBLAS plus hipBLASLt.
    """
    name = getattr(gpu, "name", None)
    if name in AMD_ARCH:
        return ROCM_WORKSPACE.get(AMD_ARCH[name], ROCM_WORKSPACE_OTHER) + ROCM_LT_WORKSPACE
    major = _major(gpu)
    if major is None or major in WORKSPACE_32MIB_MAJORS:
        return WORKSPACE_32MIB
    return WORKSPACE_DEFAULT


def handles(mode: str) -> int:
    """cuBLAS handles a process uses: the main thread, and in training the autograd device thread."""
    if mode not in MODES:
        raise UserError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    return 2 if mode == "train" else 1


def communicators(gpus_in_job: int, dp: int = 1, tp: int = 1, pp: int = 1, ep: int = 1) -> list[tuple[str, int]]:
    """The NCCL communicators one rank joins: (group, ranks) for every group with more than one rank.

    ``ep``: the expert-parallel group (its ranks are among the dp·tp ones), whose all-to-all
    connects every peer.
    """
    for name, value in (("gpus_in_job", gpus_in_job), ("dp", dp), ("tp", tp), ("pp", pp), ("ep", ep)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"{name} must be a whole number of at least 1, not {value!r}")
    if dp * tp * pp > gpus_in_job:
        raise UserError(f"dp·tp·pp = {dp * tp * pp} GPUs do not fit in a job of {gpus_in_job}")
    if ep > dp * tp:
        raise UserError(f"ep = {ep} is more than the dp·tp = {dp * tp} GPUs it splits the experts over")
    groups = [(name, n) for name, n in (("dp", dp), ("tp", tp), ("pp", pp)) if n > 1]
    if gpus_in_job > 1 and all(n != gpus_in_job for _, n in groups):
        groups.append(("world", gpus_in_job))
    if ep > 1:
        groups.append(("ep", ep))
    return groups


def nccl_bytes(ranks: int, all_to_all: bool = False) -> int:
    """GPU bytes of one NCCL communicator of ``ranks`` ranks (the published measurements)."""
    if ranks < 2:
        return 0
    ring = NCCL_BYTES[2] if ranks == 2 else NCCL_BYTES[3]
    return ring + (ALL_TO_ALL_BYTES * (ranks - 1) // 7 if all_to_all else 0)


def terms(*, gpus_in_job: int, dp: int = 1, tp: int = 1, pp: int = 1, tensors: sympy.Expr | None = None,
          gpu: object | None = None, mode: str = "train", ep: int = 1, loading: str = "lazy") -> list[Term]:
    """The CUDA runtime's memory on one GPU of a job, as named terms (bytes).

    ``tensors``: the tensor bytes of the plan (its peak), for the fragmentation allowance; None
    leaves the allowance out and keeps the pools' minimum. ``gpu``: a catalogue GPU, for the
    cuBLAS workspace size (None: the larger, 32 MiB). ``mode``: "train" (two cuBLAS handles) or
    "serve" (one). ``ep``: expert-parallel degree (an all-to-all communicator when > 1).
    ``loading``: CUDA_MODULE_LOADING, lazy (the default) or eager (``CONTEXT_BY_LOADING``).
    """
    if loading not in CONTEXT_BY_LOADING:
        raise UserError(f"CUDA module loading must be one of {', '.join(CONTEXT_BY_LOADING)}, not {loading!r}")
    n_handles = handles(mode)
    ws = workspace_bytes(gpu)
    out = [_context_term(loading),
        Term("cublas_workspace", f"cuBLAS/cuBLASLt workspaces ({n_handles} × {ws / MIB:g} MiB)",
             sympy.Integer(n_handles * ws), "bytes", "pytorch-cublas", "parseChosenWorkspaceSize",
             "One workspace per (cuBLAS handle, stream), shared with cuBLASLt, allocated through the caching "
             "allocator and kept: " + ("the main thread and the autograd engine's backward thread." if mode == "train"
                                       else "one thread serving.")
             + ("" if _major(gpu) is not None or getattr(gpu, "name", None) in AMD_ARCH
                else " GPU architecture unknown: the 32 MiB size is assumed.")),
    ]
    pools = sympy.Integer(SMALL_BUFFER + LARGE_BUFFER)
    if isinstance(tensors, bool) or not isinstance(tensors, (int, sympy.Expr, type(None))):
        raise TypeError(f"tensors must be a SymPy expression or an int, not {type(tensors).__name__}")
    if isinstance(tensors, int):
        tensors = sympy.Integer(tensors)
    alloc = pools if tensors is None else pools + FRAGMENTATION * tensors
    out.append(Term("allocator", "caching allocator: pool segments and fragmentation allowance"
                    + ("" if tensors is None else f" ({float(FRAGMENTATION) * 100:g} % of tensor bytes)"),
                    alloc, "bytes", "pytorch-allocator", "CUDACachingAllocator",
                    "One 2 MiB small-pool and one 20 MiB large-pool segment, plus an allowance for blocks the "
                    "allocator keeps reserved but cannot hand out at the peak (512-byte rounding, 2 MiB segment "
                    "rounding, split blocks): a model, checked against a replay of the allocator's rules on "
                    "real training steps (2.5-5.3 % there; small models with a large vocabulary need more)."))
    groups = communicators(gpus_in_job, dp, tp, pp, ep)
    if groups:
        total = sum(nccl_bytes(n, all_to_all=g == "ep") for g, n in groups)
        what = ", ".join(f"{g} ({n} ranks)" for g, n in groups)
        out.append(Term("nccl", f"NCCL communicator buffers: {what}", sympy.Integer(total), "bytes", "nccl-memory",
                        "published measurement",
                        "Per communicator, allocated at its first collective, outside PyTorch's allocator; measured "
                        "on A100 over NVLink (more channels, so more memory, on H100 and across nodes); the "
                        "expert-parallel all-to-all from a measurement on 8 × H100, scaled by the peers."))
    return out


def _context_term(loading: str) -> Term:
    """The CUDA context: lazy module loading (the published 400 MB) or eager (more than 1000 MB)."""
    if loading == "lazy":
        return Term("cuda_context", "CUDA context and loaded kernels", sympy.Integer(CONTEXT_BYTES), "bytes",
                    "pytorch-context", "published measurement",
                    "Outside PyTorch's allocator (nvidia-smi and mem_get_info see it, memory_reserved does not); "
                    "lazy module loading. A published figure (≈ 400 MB), not measured here; "
                    "benchmarks/gpu_runtime.py measures it.")
    return Term("cuda_context", "CUDA context with every kernel loaded (CUDA_MODULE_LOADING=EAGER)",
                sympy.Integer(EAGER_CONTEXT_BYTES), "bytes", "cuda-lazy-loading", "published measurement",
                "Outside PyTorch's allocator; eager loading puts every kernel of every loaded CUDA library in the "
                "context at start-up: more than 1000 MB (ptrblck, pytorch#107667), a lower bound.")


def total(found: list[Term]) -> sympy.Expr:
    """The sum of runtime terms."""
    return sympy.Add(*(term.expr for term in found))
