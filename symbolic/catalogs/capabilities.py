"""CUDA compute capability per catalogue GPU: what decides which attention kernels PyTorch runs there.

PyTorch's CUDA attention dispatcher (``networks.module.cuda_attention``) checks the GPU's
compute capability (flash attention needs sm80 or newer; on sm86 and sm89 its backward takes head
dims up to 192 only, so memory-efficient attention runs above). The values are NVIDIA's, from its
CUDA GPUs table (https://developer.nvidia.com/cuda-gpus) and the CUDA C++ Programming Guide's
"Compute Capabilities" appendix. AMD GPUs have none (ROCm names its targets gfx942 and so on).
"""

from __future__ import annotations

SOURCE = ("NVIDIA's CUDA GPUs table, https://developer.nvidia.com/cuda-gpus (compute capability per GPU; the "
          "CUDA C++ Programming Guide's Compute Capabilities appendix)")
NONE_AMD = "none: an AMD GPU (ROCm target gfx942), not CUDA; the module probe's CUDA attention assumes sm90 there"

# id -> (major, minor), as NVIDIA's table lists the GPU (Volta 7.0, Turing 7.5, Ampere 8.0/8.6,
# Ada 8.9, Hopper 9.0, Blackwell data centre 10.0)
CAPABILITIES: dict[str, tuple[int, int]] = {
    "v100-16gb": (7, 0), "v100-32gb": (7, 0), "t4": (7, 5), "a10g": (8, 6), "l4": (8, 9), "l40s": (8, 9),
    "rtx-3090": (8, 6), "rtx-4090": (8, 9), "a100-40gb": (8, 0), "a100-80gb": (8, 0), "h100-80gb": (9, 0),
    "h100-94gb": (9, 0), "h200-141gb": (9, 0), "b200": (10, 0),
}
NOT_CUDA = {"mi300x": NONE_AMD}


def capability_fields(name: str) -> dict[str, object]:
    """``compute_capability`` and ``capability_source`` for catalogue GPU ``name`` (the source says why when none)."""
    if name in CAPABILITIES:
        return {"compute_capability": CAPABILITIES[name], "capability_source": SOURCE}
    return {"capability_source": NOT_CUDA[name]} if name in NOT_CUDA else {}
