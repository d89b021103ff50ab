"""A custom GPU from a TOML file: memory, rates and the source the user vouches for.

Example (``--gpu my-gpu.toml``)::

    name = "my-h100"
    memory_bytes = 85_520_809_984          # or memory_gib = 79.6, or memory_gb = 80
    source = "our cluster's nvidia-smi and the H100 SXM5 datasheet"
    hbm_bandwidth = 3.35e12                # bytes/s
    nvlink_bandwidth = 4.5e11              # bytes/s per direction (half the datasheet's total)
    network_bandwidth = 5e10               # bytes/s per GPU and direction
    gpus_per_node = 8
    cuda_memory = "79.18GiB"               # CUDA's total (cudaMemGetInfo), what serving engines budget from
    compute_capability = "9.0"             # NVIDIA's, which decides the attention kernels PyTorch runs
    [flops]                                # peak dense FLOP/s per dtype
    bf16 = 9.895e14
    fp8 = 1.979e15

Unknown keys, missing fields and numbers out of range are one-line errors; nothing is evaluated.
Memory, however given, must come to 1 byte to 2**80 bytes (1 YiB, the range of every size the
project reads, ``units.MAX_BYTES``) after conversion, a fraction of a byte dropped; every rate
(FLOP/s, bytes/s) must be from 1 to 1e30 per second (``values.MAX_VALUE``, the largest value any
formula takes). ``cuda_memory`` is a size with its unit, read by the project's size parser
(``units.floor_size``: a fraction of a byte dropped), at most the memory given; ``compute_capability``
is "MAJOR.MINOR" as NVIDIA writes it (https://developer.nvidia.com/cuda-gpus).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import tomllib

from .. import formats
from ..core.errors import InputFileError, single_line
from ..core.units import MAX_BYTES, SizeError, floor_size
from ..core.userfiles import parse_toml, read_user_file
from ..core.values import LIMIT_TEXT, MAX_VALUE
from .gpu import GPU

DTYPES = formats.RATE_KEYS  # the [flops] keys a custom GPU may give
MAX_FILE = 64 * 1024  # bytes of a GPU description: a few lines of TOML
_KEYS = {"name", "title", "memory_bytes", "memory_gib", "memory_gb", "source", "note", "hbm_bandwidth",
         "nvlink_bandwidth", "network_bandwidth", "gpus_per_node", "flops", "cuda_memory", "compute_capability"}


SCALES = {"memory_bytes": 1, "memory_gib": 2**30, "memory_gb": 10**9}  # bytes per unit of each memory key
MEMORY_RANGE = "1 byte to 2**80 bytes (1 YiB)"


def _rate(where: str, key: str, value: object) -> float:
    """A rate per second (FLOP/s, bytes/s) from 1 to MAX_VALUE."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= MAX_VALUE:
        raise InputFileError(f"{where}: {key} must be a number from 1 to {LIMIT_TEXT} (per second), got {value!r}")
    return float(value)


def _memory(where: str, key: str, value: object) -> int:
    """Bytes of memory given in ``key``'s unit: 1 to MAX_BYTES after conversion (a fraction of a byte dropped)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputFileError(f"{where}: {key} must be a number, got {value!r}")
    scaled = value * SCALES[key] if isinstance(value, int) else float(value) * SCALES[key]  # ints stay exact
    if not 1 <= scaled <= MAX_BYTES:  # NaN fails too; inf and 1e300 fail before int() would overflow
        raise InputFileError(f"{where}: {key} = {value!r} is out of range: memory must be {MEMORY_RANGE}")
    return int(scaled)


def _cuda_memory(where: str, value: object, size: int) -> dict[str, object]:
    """``cuda_bytes`` from ``cuda_memory`` ("79.18GiB", a unit needed), at most the GPU's memory; {} when not given."""
    if value is None:
        return {}
    if not isinstance(value, str):
        raise InputFileError(f"{where}: cuda_memory must be a size with its unit in quotes, such as \"79.18GiB\", "
                             f"got {value!r}")
    try:
        cuda, _ = floor_size(value.strip(), flag="cuda_memory")
    except SizeError as err:
        said = str(err) if str(err).startswith("cuda_memory") else f"cuda_memory: {err}"
        raise InputFileError(f"{where}: {said}") from None
    if cuda > size:
        raise InputFileError(f"{where}: cuda_memory ({cuda:,} bytes) is more than the GPU's memory ({size:,} bytes); "
                             "CUDA's total is at most the board's")
    return {"cuda_bytes": cuda, "cuda_source": "cuda_memory in the custom GPU file"}


def _capability(where: str, value: object) -> dict[str, object]:
    """``compute_capability`` from "MAJOR.MINOR" ("9.0"); {} when not given."""
    if value is None:
        return {}
    match = re.fullmatch(r"(\d{1,2})\.(\d)", value.strip()) if isinstance(value, str) else None
    if match is None or int(match.group(1)) < 1:
        raise InputFileError(f"{where}: compute_capability must be \"MAJOR.MINOR\" in quotes as NVIDIA writes it "
                             f"(\"8.9\", \"9.0\"), got {value!r}")
    return {"compute_capability": (int(match.group(1)), int(match.group(2))),
            "capability_source": "compute_capability in the custom GPU file"}


def _prose(text: object) -> str:
    """A free-text field (title, source, note) on one line: line breaks and tabs become spaces."""
    return single_line(" ".join(str(text).split()))


def from_mapping(data: Mapping[str, object], where: str = "custom GPU") -> GPU:
    """A GPU from plain data (a parsed TOML table or a report spec's table)."""
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise InputFileError(f"{where}: unknown key {unknown[0]!r}; keys are {', '.join(sorted(_KEYS))}")
    sizes = [k for k in SCALES if k in data]
    if len(sizes) != 1:
        raise InputFileError(f"{where}: give exactly one of memory_bytes, memory_gib, memory_gb")
    size = _memory(where, sizes[0], data[sizes[0]])
    name = data.get("name", "custom")
    source = data.get("source")
    if not isinstance(name, str) or not name.strip():
        raise InputFileError(f"{where}: name must be a non-empty string")
    if not isinstance(source, str) or not source.strip():
        raise InputFileError(f"{where}: source must say where the figures come from (a non-empty string)")
    flops = data.get("flops", {})
    if not isinstance(flops, Mapping):
        raise InputFileError(f"{where}: [flops] must be a table of dtype = FLOP/s")
    for dtype in flops:
        if dtype not in DTYPES:
            raise InputFileError(f"{where}: unknown dtype {dtype!r} in [flops]; dtypes are {', '.join(DTYPES)}")
    rates = {k: _rate(where, k, data[k]) for k in ("hbm_bandwidth", "nvlink_bandwidth", "network_bandwidth")
             if k in data}
    per_node = data.get("gpus_per_node", 8)
    if isinstance(per_node, bool) or not isinstance(per_node, int) or per_node < 1:
        raise InputFileError(f"{where}: gpus_per_node must be a whole number ≥ 1, got {per_node!r}")
    name, source = single_line(name.strip()), _prose(source)
    return GPU(name, _prose(data.get("title", name)), f"{size:,} bytes (custom)", size, "custom", source,
               _prose(data.get("note", "")), flops={k: _rate(where, f"flops.{k}", v) for k, v in flops.items()},
               gpus_per_node=per_node, rates_source=source, **rates,
               **_cuda_memory(where, data.get("cuda_memory"), size), **_capability(where, data.get("compute_capability")))


def load_gpu(path: str) -> GPU:
    """The custom GPU described by a TOML file."""
    file = Path(path).expanduser()
    raw = read_user_file(file, limit=MAX_FILE, what="a GPU description (.toml)")  # regular files only, bounded
    try:
        data = parse_toml(raw.decode("utf-8"), path)
    except tomllib.TOMLDecodeError as err:
        raise InputFileError(f"{path}: not valid TOML ({err})") from None
    except UnicodeDecodeError:
        raise InputFileError(f"{path}: not a UTF-8 text file") from None
    return from_mapping(data, path)
