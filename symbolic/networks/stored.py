"""A network's weights as stored in a number format: bytes per stored type, every tensor counted.

``stored_weights(network, "mxfp4")`` gives ``{type: bytes}``, e.g. ``{"mxfp4": ..., "bf16": ...}``.
Which rule applies (one dispatch, ``stored_weights``):

- the network carries its file's own tensors (``stored_tensors``, a GGUF header) and ``fmt`` is its
  own ``quantization``: their bytes, summed by stored type;
- a shaped format (``Format.shaped``: fp8, fp8-block, mxfp4, nvfp4, gptq-*, awq-int4, bitsandbytes):
  every matrix of ``network.matrices`` (name, rows = inputs, columns = outputs, count) by the format's
  ``matrix_bytes(out, in)``, except the roles it keeps unquantised (``Format.kept_roles``, plus what
  the config's ``modules_to_not_convert`` names when ``fmt`` is the network's own format), which are
  stored in ``kept_in``; the 1-D rest (total − Σ matrices: norms, biases) is kept too;
- a per-number format (fp32, fp16, bf16, and the planner's int8/int4): the quantised tensors in the
  format (codes and scales together) and the embeddings and head (``Format.kept``) in ``kept_in``.

Engines, ``params --weights`` and reports read a model's weight bytes here and nowhere else.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from math import prod

import sympy

from .. import formats
from ..core.errors import UserError
from .quantization import matrix_role
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


# the parts of a network ``stored_parts`` splits its weights into (what the planner places apart)
PARTS = ("layers", "experts", "kept")


def stored_weights(network: ModelShape, fmt: str) -> dict[str, int]:
    """Bytes of every weight of ``network`` stored as ``fmt``, by stored type (codes and their scales together)."""
    tensors = getattr(network, "stored_tensors", ())
    if tensors and fmt == getattr(network, "quantization", None):
        return _file_tensors(tensors)
    f = formats.get(fmt, "weights", "weight format")
    if f.mixture:
        return _gguf_weights(network, f.mixture)
    if f.shaped:
        return _merge(parts.by_type for parts in stored_parts(network, fmt).values())
    total = network.total
    if not f.quantised:
        return {f.name: int(f.element_bytes * total)}
    kept = int(network.value(network.first_stage + network.head))
    out = {f.name: int(f.tensor_bytes(total - kept))}
    out[f.kept_in] = out.get(f.kept_in, 0) + int(formats.get(f.kept_in).element_bytes * kept)
    return out


def _gguf_weights(network: ModelShape, file_type: str) -> dict[str, int]:
    """A llama.cpp file type: every GGUF tensor's ggml type as llama-quantize picks it, bytes summed per type."""
    out: dict[str, int] = {}
    for _, _, kind, nbytes in _gguf_typed(network, file_type):
        out[kind] = out.get(kind, 0) + nbytes
    return out


def _gguf_typed(network: ModelShape, file_type: str) -> list[tuple[str, tuple[int, ...], str, int]]:
    """Each GGUF tensor of ``network`` in llama.cpp's file type: (name, shape, ggml type, bytes)."""
    from ..formats.gguf_ftypes import typed_tensors
    from .gguf_tensors import gguf_options, gguf_tensors

    opts = gguf_options(network)
    return typed_tensors(file_type, gguf_tensors(network), opts["n_expert"], opts["n_gqa"],
                         llama_70b=opts["llama_70b"])


# GGUF tensor names of the parts the planner places apart: the input embeddings and the output head, the experts
_GGUF_KEPT = ("token_embd.", "output.", "position_embd.", "token_types.")
_GGUF_EXPERTS = re.compile(r"\.ffn_[a-z_]*_exps\.")


def _tensor_parts(tensors: Iterable[tuple[str, int, str, int]]) -> dict[str, Part]:
    """Named tensors (GGUF names: name, elements, stored type, bytes) split into ``PARTS`` by their names."""
    params = {p: 0 for p in PARTS}
    stored: dict[str, dict[str, int]] = {p: {} for p in PARTS}
    for name, elements, kind, nbytes in tensors:
        part = ("kept" if name.startswith(_GGUF_KEPT) else "experts" if _GGUF_EXPERTS.search(name) else "layers")
        params[part] += elements
        stored[part][kind] = stored[part].get(kind, 0) + nbytes
    return {p: Part(params[p], {k: v for k, v in stored[p].items() if v}) for p in PARTS}


def weight_bytes(network: ModelShape, fmt: str) -> int:
    """Total bytes of ``network``'s weights stored as ``fmt``."""
    return sum(stored_weights(network, fmt).values())


@dataclass(frozen=True)
class Part:
    """One part of a network's weights as stored: its parameters and bytes by stored type."""

    params: int
    by_type: dict[str, int]

    @property
    def nbytes(self) -> int:
        return sum(self.by_type.values())


def stored_parts(network: ModelShape, fmt: str) -> dict[str, Part]:
    """A shaped format's bytes in ``PARTS``: the layers (1-D rest included), the routed experts, the embeddings and head.

    The planner divides them differently (experts over ep, embeddings and head on the first and last
    pipeline stages); their sum is ``stored_weights``.
    """
    f = formats.get(fmt, "weights", "weight format")
    tensors = getattr(network, "stored_tensors", ())
    if tensors and fmt == getattr(network, "quantization", None):
        return _tensor_parts((t.name, prod(t.shape), t.type, t.nbytes) for t in tensors)
    if f.mixture:
        return _tensor_parts((name, prod(shape), kind, nbytes) for name, shape, kind, nbytes in _gguf_typed(network,
                                                                                                          f.mixture))
    if not f.shaped:
        raise UserError(f"{fmt} stores weights at a rate per number, not by matrix shape")
    rules = getattr(network, "quantization_rules", None)
    own = rules is not None and not rules.error and fmt == getattr(network, "quantization", None)
    kept_roles = set(f.kept_roles) | (set(rules.kept) if own else set())
    group = rules.group if own else None
    kept_bytes = formats.get(f.kept_in).element_bytes
    params = {p: 0 for p in PARTS}
    stored: dict[str, dict[str, sympy.Expr]] = {p: {} for p in PARTS}
    for name, rows, cols, count in network.matrices:
        role = matrix_role(name, network.moe)
        part = "kept" if role in ("embedding", "lm_head") else "experts" if role == "experts" else "layers"
        n, r, c = (network.value(x) for x in (count, rows, cols))
        params[part] += int(n * r * c)
        if role in kept_roles:
            _add(stored[part], f.kept_in, n * r * c * kept_bytes)
        else:  # rows are the matrix's inputs, columns its outputs
            why = f.refusal(int(c), int(r), group) if n else ""
            if why:
                raise UserError(f"{network.name} cannot be stored as {fmt}: its {name} is {int(c)} × {int(r)} (out × "
                                f"in); {why}")
            _add(stored[part], f.name, n * f.matrix_bytes(c, r, group))
    rest = _rest(network, params)
    for part, extra in rest.items():
        params[part] += extra
        _add(stored[part], f.kept_in, extra * kept_bytes)
    return {p: Part(params[p], {k: int(sympy.ceiling(v)) for k, v in stored[p].items() if v}) for p in PARTS}


def _rest(network: ModelShape, matrices: dict[str, int]) -> dict[str, int]:
    """Parameters the matrices leave out (norms, biases), by part: what the format keeps unquantised."""
    kept = int(network.value(network.first_stage + network.head))
    experts = int(network.value(network.experts))
    out = {"kept": kept - matrices["kept"], "experts": experts - matrices["experts"] if experts else 0}
    out["layers"] = network.total - kept - (experts or matrices["experts"]) - matrices["layers"]
    if any(v < 0 for v in out.values()):
        raise UserError(f"{network.name}: its weight matrices add up to more than its parameter count; its stored "
                        "bytes cannot be said")
    return out


def _add(to: dict[str, sympy.Expr], key: str, value: sympy.Expr) -> None:
    to[key] = to.get(key, 0) + value


def _merge(parts: object) -> dict[str, int]:
    out: dict[str, int] = {}
    for by_type in parts:  # type: ignore[attr-defined]
        for key, value in by_type.items():
            out[key] = out.get(key, 0) + value
    return out


def _file_tensors(tensors: tuple[StoredTensor, ...]) -> dict[str, int]:
    """A file's own tensors, summed by stored type."""
    out: dict[str, int] = {}
    for t in tensors:
        out[t.type] = out.get(t.type, 0) + t.nbytes
    return out
