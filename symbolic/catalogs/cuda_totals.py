"""CUDA's total memory per catalogue GPU: the number serving engines read, from published readings.

nvidia-smi's ``memory.total`` (the catalogue's ``bytes``) is the board's memory as the driver
reports it; CUDA's total (``cudaMemGetInfo``, ``torch.cuda.mem_get_info()[1]``,
``torch.cuda.get_device_properties().total_memory``) leaves out what the driver keeps for itself and is
a few hundred MiB lower. vLLM's budget is ``gpu_memory_utilization`` × CUDA's total, SGLang measures
CUDA's free memory, llama.cpp sizes its buffers against the free memory CUDA reports: so an engine's
answer on a catalogue GPU starts from this number, not nvidia-smi's.

Readings are quoted from public sources: PyTorch's out-of-memory message ("GPU 0 has a total capacity
of X GiB"), vLLM's start-up log ("total_gpu_memory (X GiB)"), CUDA's deviceQuery (bytes). They
differ by up to ~0.2 GiB for one GPU: the driver release and the ECC setting move the figure (a T4
read 14.76 GiB in 2021 and 14.56 GiB in 2025). The rule: the median of the readings, the lower of
the middle two for an even count (a mean is a number no device printed; the lower claims nothing a
reported device lacked). A reading printed in GiB with two decimals is known to ±0.005 GiB
(±5 MiB); it is taken as printed and floored to whole bytes. Readings on Windows are left out:
there the driver (WDDM) reports the board's whole memory (sdbds/TRELLIS-for-windows#7: an RTX 3090
at 24.00 GiB, nvidia-smi's own total), not what CUDA gives a process on Linux, where the engines
run. Volta keeps almost nothing back (a V100 32GB: 31.74 GiB of nvidia-smi's 31.75).

GPUs absent here have no published reading in our sources: engines then use nvidia-smi's total
(slightly high) and say so.
"""

from __future__ import annotations

from decimal import Decimal

GIB = 2**30
# prime-rl's benchmark page (its failed runs quote PyTorch's out-of-memory message), as a fork's branch keeps it
PRIME_RL = ("https://github.com/Jackmin801/prime-rl-hardfork/blob/6af40cec1c5df5215b90fafb70f137ea997d2caf/"
            "benchmarks/results/BENCHMARKS.md")

# id -> readings: (GiB as printed, or whole bytes as an int; where it was printed and what it says)
READINGS: dict[str, tuple[tuple[str | int, str], ...]] = {
    "v100-16gb": (
        ("15.78", "https://github.com/kchengiva/Shift-GCN/issues/34 (16G V100, 2021: '15.78 GiB total capacity')"),
    ),
    "v100-32gb": (
        ("31.74", "https://github.com/liucongg/ChatGLM-Finetuning/issues/73 (V100 32GB, 2023: '31.74 GiB total "
                  "capacity')"),
    ),
    "t4": (
        ("14.56", "https://github.com/Zheng-Chong/CatVTON/issues/133 (Tesla T4 on GCP, 2025: 'GPU 0 has a total "
                  "capacity of 14.56 GiB')"),
        ("14.56", "https://github.com/AlphaGPU/leetgpu-challenges/issues/52 (Tesla T4, 2025: 'total capacity of "
                  "14.56 GiB')"),
        ("14.57", "https://github.com/QwenLM/Qwen3-VL/issues/1046 (4 × T4, 2025: 'total capacity of 14.57 GiB')"),
        ("14.76", "https://github.com/xinge008/Cylinder3D/issues/109 (Tesla T4, 2021: '14.76 GiB total capacity')"),
    ),
    "a10g": (
        ("21.99", "https://github.com/zai-org/CogVLM/issues/236 (an A10 on Lambda, the catalogue's 'a10', 2023: 'GPU 0 "
                  "has a total capacty of 21.99 GiB')"),
    ),
    "l4": (
        ("22.03", "https://github.com/ArcInstitute/evo2/issues/190 (an L4, 2025: 'GPU 0 has a total capacity of "
                  "22.03 GiB')"),
    ),
    "rtx-3090": (
        ("23.70", "https://github.com/GaoLii/DSP/issues/10 (two 3090s: '23.70 GiB total capacity')"),
        ("23.70", "https://github.com/xiaoxiangAQ/GAS-Net/issues/7 (3090: '23.70 GiB total capacity')"),
    ),
    "rtx-4090": (
        ("23.52", "https://github.com/Soul-AILab/SoulX-FlashTalk/issues/5 (4090 24G, 2026: 'total capacity of "
                  "23.52 GiB')"),
        ("23.64", "https://github.com/3DTopia/Phidias-Diffusion/issues/8 (4090, 2025: 'total capacty of 23.64 GiB')"),
        ("23.65", "https://github.com/TRI-ML/packnet-sfm/issues/250 (RTX 4090, 2023: '23.65 GiB')"),
        ("23.68", "https://github.com/zai-org/CogVideo/issues/36 (4090, 2023: '23.68 GiB total capacity')"),
    ),
    "l40s": (
        ("44.42", "https://github.com/stepfun-ai/Step-Video-T2V/issues/8 (8 × L40S, 2025: 'total capacity of "
                  "44.42 GiB')"),
    ),
    "a100-40gb": (
        (42_298_834_944, "https://github.com/bottlerocket-os/bottlerocket/pull/3873 (deviceQuery, NVIDIA "
                         "A100-SXM4-40GB: 'Total amount of global memory: 40339 MBytes (42298834944 bytes)')"),
        ("39.50", "https://github.com/TianheWu/CoSeR/issues/10 (one A100, 2025: 'total capacity of 39.50 GiB')"),
    ),
    "a100-80gb": (
        ("79.14", "https://github.com/lianqi1008/Control-GIC/issues/6 (A100 80GB, 2025: 'total capacity of "
                  "79.14 GiB')"),
        ("79.25", "https://github.com/levihsu/OOTDiffusion/issues/235 (an A100, 2025: '79.25 GiB total capacity')"),
        ("79.35", "https://github.com/Instruction-Tuning-with-GPT-4/GPT-4-LLM/issues/16 (2 × A100 80G, 2023: "
                  "'79.35 GiB total capacity')"),
    ),
    "h100-80gb": (
        ("79.11", "https://github.com/vllm-project/vllm/issues/27508 (H100, 2025: 'GPU 0 has a total capacity of "
                  "79.11 GiB')"),
        ("79.18", "llm-d-benchmark config_explorer/empirical-vllm-memory-results.md (H100 vLLM logs: 79.18 GiB "
                  "CUDA total; source id llm-d-vllm-memory)"),
        ("79.22", "https://github.com/vllm-project/vllm/pull/10511 (H100, 2024: 'total_gpu_memory 79.22GiB'; the "
                  "vLLM tests cite its weights lines)"),
        ("79.22", "https://github.com/vllm-project/vllm/pull/12126 (H100-80G, 2025: 'total_gpu_memory (79.22GiB)')"),
    ),
    "h100-94gb": (
        ("93.00", "https://github.com/ali-vilab/VACE/issues/56 (an H100 NVL 94GB on RunPod, 2025: 'GPU 0 has a total "
                  "capacity of 93.00 GiB')"),
    ),
    "h200-141gb": (
        ("139.80", PRIME_RL + " (prime-rl's automated benchmarks, 8xH200, 2026-01-13: 'GPU 5 has a total "
                   "capacity of 139.80 GiB', six runs)"),
    ),
    "b200": (
        ("178.36", PRIME_RL + " (the same page, 8xB200: 'GPU 2 has a total capacity of 178.36 GiB', five runs)"),
    ),
}


def reading_bytes(value: str | int) -> int:
    """One reading in whole bytes: an int is bytes already, a text is GiB as printed (floored)."""
    return value if isinstance(value, int) else int(Decimal(value) * GIB)


def chosen(readings: tuple[tuple[str | int, str], ...]) -> int:
    """The catalogue's CUDA total from ``readings``: the median, the lower middle one for an even count."""
    values = sorted(reading_bytes(v) for v, _ in readings)
    return values[(len(values) - 1) // 2]


def describe(readings: tuple[tuple[str | int, str], ...]) -> str:
    """Where the chosen total comes from: the rule, then every reading and its source."""
    values = [reading_bytes(v) for v, _ in readings]
    spread = f"readings {min(values) / GIB:.2f}–{max(values) / GIB:.2f} GiB; " if len(set(values)) > 1 else ""
    rule = "the only reading" if len(values) == 1 else "median of the readings (lower middle for an even count)"
    return f"CUDA total: {spread}{rule}. " + "; ".join(source for _, source in readings)


def cuda_fields(name: str) -> dict[str, object]:
    """``cuda_bytes`` and ``cuda_source`` for catalogue GPU ``name``; empty where nothing was published."""
    readings = READINGS.get(name)
    if not readings:
        return {}
    return {"cuda_bytes": chosen(readings), "cuda_source": describe(readings)}
