"""One accelerator: its memory in bytes, which number that is, its rates and their sources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..core.errors import UserError
from .rates import WITHOUT_RATES

GIVEN = "given"  # the basis of a GPU named by its capacity ("80GiB"): memory only, no rates


@dataclass(frozen=True)
class GPU:
    """One accelerator model and its memory."""

    name: str  # short id used on the command line
    title: str
    vendor_label: str  # what the vendor's name says
    bytes: int
    basis: str  # "nvidia-smi", "rocm-smi" or "vendor"
    source: str
    note: str = ""
    # rates (issue 15), per GPU: peak dense FLOP/s by dtype, bytes/s per direction; see rates.py
    flops: Mapping[str, float] = field(default_factory=dict, compare=False)
    hbm_bandwidth: float | None = None
    nvlink_bandwidth: float | None = None
    network_bandwidth: float | None = None
    gpus_per_node: int = 8
    rates_source: str = ""
    # CUDA's total (cudaMemGetInfo), what serving engines budget from; None where no reading is published
    cuda_bytes: int | None = None
    cuda_source: str = ""
    # CUDA compute capability (major, minor), which decides the attention kernels PyTorch runs; None: not CUDA
    compute_capability: tuple[int, int] | None = None
    capability_source: str = ""

    @property
    def gib(self) -> float:
        """Capacity in GiB (2³⁰ bytes)."""
        return self.bytes / 2**30

    @property
    def gb(self) -> float:
        """Capacity in decimal GB (10⁹ bytes)."""
        return self.bytes / 10**9

    @property
    def cuda_total(self) -> int:
        """CUDA's total memory where the catalogue has it, else ``bytes`` (nvidia-smi's, the vendor's or given)."""
        return self.bytes if self.cuda_bytes is None else self.cuda_bytes

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {"name": self.name, "title": self.title, "vendor_label": self.vendor_label, "bytes": self.bytes,
                "gib": round(self.gib, 3), "gb": round(self.gb, 3), "basis": self.basis, "source": self.source,
                "note": self.note, "flops": dict(self.flops), "hbm_bandwidth": self.hbm_bandwidth,
                "nvlink_bandwidth": self.nvlink_bandwidth, "network_bandwidth": self.network_bandwidth,
                "gpus_per_node": self.gpus_per_node, "rates_source": self.rates_source,
                "cuda_bytes": self.cuda_bytes,
                "cuda_gib": None if self.cuda_bytes is None else round(self.cuda_bytes / 2**30, 3),
                "cuda_source": self.cuda_source, "compute_capability": self.capability,
                "capability_source": self.capability_source}

    @property
    def capability(self) -> str | None:
        """The compute capability as NVIDIA writes it ("8.9"), None where the GPU has none."""
        cc = self.compute_capability
        return None if cc is None else f"{cc[0]}.{cc[1]}"

    def peak_flops(self, dtype: str) -> float:
        """Peak dense FLOP/s in ``dtype``; a one-line error when the datasheet gives none."""
        if not self.flops and self.basis == GIVEN:
            raise UserError(f"--gpu {self.name} gives a capacity only, with no FLOP rates, which time and layout "
                            "search need: name a catalogue GPU ('symbolic gpus') or a custom GPU .toml file")
        if not self.flops and not self.rates_source and self.name in WITHOUT_RATES:
            raise UserError(f"{self.name} has no FLOP rates: {WITHOUT_RATES[self.name]}; give a custom GPU file "
                            "(--gpu FILE.toml) with its rates")
        if dtype not in self.flops:
            have = ", ".join(self.flops) or "none"
            raise UserError(f"{self.name} has no {dtype} peak in the catalogue (it has: {have}); choose another "
                            "--compute-dtype or give a custom GPU file")
        return self.flops[dtype]
