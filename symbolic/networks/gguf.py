"""A GGUF file as a model: the family table's network of its header, carrying the file's tensors and format.

``load_network(path)`` is the network of ``gguf_config.config(path)`` (the header as a config.json)
with the file's tensors (``stored_tensors``, each with ggml's exact bytes) and its format
(``quantization``: ``"gguf:Q4_K_M"``, from ``general.file_type``). Where the table's count and the
tensors' differ, a note says so, and the bytes are the file's (``networks.stored``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from ..formats.gguf_file import GgufHeader
from .gguf_config import config, file_type, header
from .shape import ModelShape
from .stored import StoredTensor
from .transformer import load
from .transformer.spec import ModelSpec

# tensors a GGUF file stores that are no parameter of the model (llama.cpp's precomputed RoPE factors)
NOT_PARAMETERS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


def stored_tensors(head: GgufHeader) -> tuple[StoredTensor, ...]:
    """Every tensor of the file as ``networks.stored`` records it."""
    return tuple(StoredTensor(t.name, t.shape, t.type, t.nbytes) for t in head.tensors)


@dataclass(frozen=True)
class GgufNetwork(ModelShape):
    """A family table's network read from a GGUF file: the table's formulas, the file's tensors and format."""

    stored_tensors: tuple[StoredTensor, ...] = field(default=(), compare=False, repr=False)
    quantization: str | None = field(default=None, compare=False)  # "gguf:Q4_K_M": the file's own format
    notes: tuple[str, ...] = field(default=(), compare=False)  # what the file and the table disagree on


def load_network(path: str | os.PathLike[str]) -> GgufNetwork:
    """The network of a GGUF file, carrying its tensors as stored and its format ("gguf:<file type>")."""
    head = header(path)
    cfg = config(path)
    model = load(path)  # the header as a config, through its family table (named after the file)
    base = GgufNetwork.from_spec(model, cfg)
    return replace(base, stored_tensors=stored_tensors(head), quantization=f"gguf:{file_type(head)}",
                   notes=tuple(_notes(head, model)),
                   label=f"{model.model_type} read from a GGUF header ({len(head.tensors):,} tensors)")


def _notes(head: GgufHeader, model: ModelSpec) -> list[str]:
    """Where the file's tensors and the table's count disagree, and a file without its tensor data."""
    out = []
    held = sum(t.elements for t in head.tensors if t.name not in NOT_PARAMETERS)
    counted = model.param_count()
    if held != counted:
        more = "more" if held > counted else "fewer"
        out.append(f"the file's tensors hold {held:,} numbers, the {model.model_type} table counts {counted:,} "
                   f"({abs(held - counted):,} {more} in the file: a layout the table does not know); "
                   "weight bytes are the file's")
    if not head.complete:
        out.append(f"the file ends at byte {head.file_bytes:,}, before its tensor data does "
                   f"({head.data_offset + head.data_bytes:,}): a header-only or cut-off file; the header gives "
                   "every figure")
    return out


def weight_summary(network: ModelShape) -> dict[str, object]:
    """``weight_bytes`` (every tensor, as stored) and ``weight_bytes_by_type`` ({ggml type: bytes}) of a GGUF network."""
    by_type: dict[str, int] = {}
    for t in getattr(network, "stored_tensors", ()):
        by_type[t.type] = by_type.get(t.type, 0) + t.nbytes
    by_type = dict(sorted(by_type.items(), key=lambda kv: -kv[1]))
    return {"weight_format": getattr(network, "quantization", None), "weight_format_from": "file",
            "weight_bytes": sum(by_type.values()),
            "weight_bytes_by_type": by_type}

