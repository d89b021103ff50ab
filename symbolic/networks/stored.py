"""A network's weights as stored in a number format: bytes per stored type, every tensor counted.

``stored_weights(network, "int4")`` gives ``{type: bytes}``, e.g. ``{"int4": ..., "fp16": ...}``:
the quantised tensors in the format (codes and scales together) and what the format keeps
unquantised (``Format.kept``) in its ``kept_in`` type. Engines, ``params --weights`` and reports
read a model's weight bytes here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import formats
from .shape import ModelShape


@dataclass(frozen=True)
class StoredTensor:
    """One tensor as a file stores it: its name (as the file names it), shape, stored type and bytes.

    A network read from a file that says its tensors' types (a GGUF header) carries them as
    ``network.stored_tensors``; a network from a config has none, and its bytes follow from a
    format's rules (``stored_weights``).
    """

    name: str
    shape: tuple[int, ...]  # as the file lists it (GGUF: ne0 first, the row length)
    type: str  # the stored type's name ("Q4_K", "F32", "mxfp4", ...)
    nbytes: int


def stored_weights(network: ModelShape, fmt: str) -> dict[str, int]:
    """Bytes of every weight of ``network`` stored as ``fmt``, by stored type (codes and their scales together)."""
    f = formats.get(fmt, "weights", "weight format")
    if f.mixture:
        return _gguf_weights(network, f.mixture)
    total = network.total
    if not f.quantised:
        return {f.name: int(f.element_bytes * total)}
    kept = int(network.value(network.first_stage + network.head))
    out = {f.name: int(f.tensor_bytes(total - kept))}
    out[f.kept_in] = out.get(f.kept_in, 0) + int(formats.get(f.kept_in).element_bytes * kept)
    return out


def _gguf_weights(network: ModelShape, file_type: str) -> dict[str, int]:
    """A llama.cpp file type: every GGUF tensor's ggml type as llama-quantize picks it, bytes summed per type."""
    from ..formats.gguf_ftypes import model_bytes
    from .gguf_tensors import gguf_options, gguf_tensors

    opts = gguf_options(network)
    return model_bytes(file_type, gguf_tensors(network), opts["n_expert"], opts["n_gqa"],
                       llama_70b=opts["llama_70b"])


def weight_bytes(network: ModelShape, fmt: str) -> int:
    """Total bytes of ``network``'s weights stored as ``fmt``."""
    return sum(stored_weights(network, fmt).values())
