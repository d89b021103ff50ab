"""GPU catalogue: memory capacity in bytes, which number that is, and where it comes from.

Vendors write "GB" on memory that is often sized in GiB: an "80GB" A100 reports 81,920 MiB,
exactly 80 GiB (85.9 × 10⁹ bytes), while an "80GB" H100 reports 81,559 MiB (79.6 GiB) and a
"141GB" H200 143,771 MiB (140.4 GiB, 150.8 × 10⁹ bytes). So the catalogue stores bytes, not the
label, and says which number it stores (``basis``):

- ``nvidia-smi``: the ``memory.total`` nvidia-smi prints (MiB × 2²⁰), copied from the output
  quoted in the source. This is the board's memory as the driver reports it. CUDA's own total
  (``cudaMemGetInfo`` / ``torch.cuda.get_device_properties().total_memory``) is a little lower
  (A100-40GB: 42,298,834,944 bytes against nvidia-smi's 42,949,672,960, 1.5 % less), and the CUDA
  context and allocator take a few hundred MiB more, so the headroom a plan reports is an upper
  bound on what a job can use.
- ``rocm-smi``: AMD's ``VRAM Total Memory (B)``, in bytes (``torch.cuda.mem_get_info`` on ROCm
  reports the same number in the source).
- ``vendor``: no device report was found; the vendor's figure, taken as decimal gigabytes.

Beside it, ``cuda_bytes``: CUDA's own total where readings are published (``cuda_totals``), the
number serving engines read (vLLM's budget, SGLang's free memory, llama.cpp's buffers), chosen from
the readings by a stated rule. Training plans keep ``bytes`` (see ``catalogs.budget``). And
``compute_capability``: NVIDIA's (``capabilities``), which decides the attention kernels a torch
module's planned step runs on the GPU.

Nothing here is measured by this project; every entry names its source.
"""

from __future__ import annotations

from dataclasses import replace

from ..core.errors import UnknownNameError, quote
from ..core.symbols import suggest
from .gpu import GIVEN, GPU

MIB = 2**20
MODAL = "https://github.com/modal-labs/modal-client/pull/2797 (nvidia-smi memory.total of Modal's GPUs)"


def _smi(name: str, title: str, label: str, mib: int, source: str, note: str = "") -> GPU:
    return GPU(name, title, label, mib * MIB, "nvidia-smi", source, f"nvidia-smi memory.total {mib:,} MiB. {note}".strip())


_ENTRIES = (
    _smi("v100-16gb", "NVIDIA Tesla V100 16GB (SXM2 or PCIe)", "16GB HBM2", 16160,
         "nvidia-smi outputs quoted in public repositories (Tesla V100-SXM2/PCIE, 16160MiB)"),
    _smi("v100-32gb", "NVIDIA Tesla V100 32GB (SXM2 or PCIe)", "32GB HBM2", 32510,
         "nvidia-smi outputs quoted in public repositories (Tesla V100-SXM2/PCIE, 32510MiB)"),
    _smi("t4", "NVIDIA T4", "16GB GDDR6", 15360, MODAL),
    _smi("a10g", "NVIDIA A10G (AWS g5; Modal lists it as A10)", "24GB GDDR6", 23028, MODAL),
    _smi("l4", "NVIDIA L4", "24GB GDDR6", 23034, MODAL),
    _smi("l40s", "NVIDIA L40S", "48GB GDDR6", 46068, MODAL),
    _smi("rtx-3090", "NVIDIA GeForce RTX 3090", "24GB GDDR6X", 24576,
         "https://github.com/noonghunna/club-3090/issues/1128 (nvidia-smi: 24576MiB)"),
    _smi("rtx-4090", "NVIDIA GeForce RTX 4090", "24GB GDDR6X", 24564,
         "https://github.com/RLinf/RLinf/issues/255 (nvidia-smi: 24564MiB)"),
    _smi("a100-40gb", "NVIDIA A100 40GB (SXM4)", "40GB HBM2", 40960, MODAL,
         "CUDA's deviceQuery reports 42,298,834,944 bytes (bottlerocket-os/bottlerocket PR #3873)."),
    _smi("a100-80gb", "NVIDIA A100 80GB (SXM4)", "80GB HBM2e", 81920, MODAL, "Exactly 80 GiB."),
    _smi("h100-80gb", "NVIDIA H100 80GB HBM3 (SXM5)", "80GB HBM3", 81559,
         MODAL + "; https://github.com/NVIDIA/nccl/issues/1264", "79.6 GiB: less than the A100's 80 GiB."),
    _smi("h100-94gb", "NVIDIA H100 NVL", "94GB HBM3", 95830,
         "https://github.com/NVIDIA/gpu-admin-tools/issues/4 (nvidia-smi: NVIDIA H100 NVL, 95830MiB)",
         "93.6 GiB = 100.5 × 10⁹ bytes: the vendor's \"94 GB\" is about 94 GiB."),
    _smi("h200-141gb", "NVIDIA H200 (SXM)", "141GB HBM3e", 143771,
         "nvidia-smi outputs quoted in public repositories (NVIDIA H200, 143771MiB)", "140.4 GiB = 150.8 × 10⁹ bytes."),
    _smi("b200", "NVIDIA B200 (HGX)", "180GB HBM3e (192 GB marketed)", 183359,
         "nvidia-smi outputs quoted in public repositories (NVIDIA B200, 183359MiB)", "179.1 GiB = 192.3 × 10⁹ bytes."),
    GPU("mi300x", "AMD Instinct MI300X", "192GB HBM3", 205_822_885_888, "rocm-smi",
        "rocm-smi --showmeminfo vram and torch.cuda.mem_get_info outputs quoted in public repositories "
        "(VRAM Total Memory (B): 205822885888)", "191.7 GiB = 205.8 × 10⁹ bytes.",
        cuda_bytes=205_822_885_888, cuda_source="torch.cuda.mem_get_info on ROCm reports rocm-smi's VRAM total "
        "(205822885888) in the same source"),
)

from .capabilities import capability_fields  # noqa: E402  (the compute capability: which attention kernels run)
from .cuda_totals import cuda_fields  # noqa: E402  (CUDA's total, which serving engines read)
from .rates import RATES  # noqa: E402  (the time half: one table beside the memory one)

GPUS: dict[str, GPU] = {g.name: replace(g, **RATES.get(g.name, {}), **cuda_fields(g.name), **capability_fields(g.name))
                        for g in _ENTRIES}
# Names people also say, where they name one entry. "h100" is not one of them: it names the
# 80 GB SXM5 and the 94 GB NVL, and a lookup that picked one would plan against the wrong size.
ALIASES = {"h100-sxm": "h100-80gb", "h100-nvl": "h100-94gb", "h200": "h200-141gb", "4090": "rtx-4090",
           "3090": "rtx-3090", "a10": "a10g"}


def names() -> list[str]:
    """Every GPU id, in catalogue order (roughly by generation)."""
    return list(GPUS)


def family(key: str) -> list[str]:
    """The catalogue ids that ``key`` abbreviates (``h100``: h100-80gb and h100-94gb)."""
    return [name for name in GPUS if name.startswith(key + "-")] if key else []


def capacity(text: str, source: str = "a capacity given on the command line or in Python") -> GPU:
    """A GPU known only by its memory ("80GiB", "141 GB"): no FLOP or bandwidth rates.

    The text needs a unit: a bare "80" is refused (80 bytes is never meant). A size that is not a
    whole number of bytes ("20.24GiB", as tools print it) is rounded down, and the note says so.
    """
    from ..core.units import floor_size, format_bytes

    size, rounded = floor_size(text.strip(), flag="GPU")
    shown = format_bytes(size)
    name = "".join(text.split())  # "80 GiB" and "80\nGiB" (a size allows any blank) are "80GiB"
    note = "; ".join(n for n in ("capacity only: no FLOP or bandwidth rates", rounded) if n)
    return GPU(name, f"a GPU with {shown} of memory", " ".join(text.split()), size, GIVEN, source, note)


def get(name: str) -> GPU:
    """The GPU called ``name`` (case-insensitive), a capacity ("80GiB") or a custom GPU file.

    An abbreviation that names one entry is taken; one that names several (``h100``) is a
    one-line error listing them with their sizes, never a silent choice.
    """
    from ..core.units import is_size

    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    if key.endswith(".toml"):
        from .gpu_files import load_gpu

        return load_gpu(name.strip())
    if key[:1].isdigit() and is_size(key):
        return capacity(name)
    matches = family(key)
    if len(matches) == 1:
        return GPUS[matches[0]]
    if matches:
        choices = "; ".join(f"{m} ({GPUS[m].title}, {GPUS[m].gib:.1f} GiB)" for m in matches)
        raise UnknownNameError(f"GPU {quote(name)} is ambiguous: {choices}. Name one, or give a capacity "
                               "such as 80GiB")
    raise UnknownNameError(f"unknown GPU {quote(name)}{suggest(key, GPUS)}; 'symbolic gpus' lists them; a capacity "
                           "(80GiB) or a path to a .toml file gives a custom GPU")
