"""A tiny GGUF writer for the tests: the layout of ggml's include/gguf.h, written independently of the reader.

Checked once, byte for byte, against the ``gguf`` package (0.19.0, ``GGUFWriter``, run outside the
project's environment; the tests never import it): the same metadata and tensors gave the same file.
Block sizes and bytes here are ggml's ``block_*`` structs (src/ggml-common.h at ggml-org/ggml
d99724f2b141): Q4_K = 2 fp16 + 12 B of scales + 128 B of nibbles = 144 per 256; Q6_K = 128 + 64 + 16 +
2 = 210 per 256; Q8_0 = 2 + 32 = 34 per 32; F16 2 and F32 4 per number.
"""

from __future__ import annotations

import struct
from math import prod
from pathlib import Path
from typing import Any

# enum gguf_type (gguf.h)
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<b", U64: "<Q",
        I64: "<q", F64: "<d"}
# enum ggml_type ids (ggml.h) and (block size, bytes per block) from the block structs
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q6_K": (14, 256, 210)}


def tensor_nbytes(shape: tuple[int, ...], type_name: str) -> int:
    """Bytes of a tensor as ggml stores it: whole blocks of the row."""
    _, block, size = GGML[type_name]
    return prod(shape) // block * size


def _string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _value(kind: int, value: Any) -> bytes:
    if kind == STR:
        return _string(value)
    return struct.pack(_FMT[kind], value)


def kv(key: str, kind: int, value: Any, element: int | None = None) -> bytes:
    """One key/value pair; ``kind`` ARR with ``element`` the elements' type."""
    out = _string(key) + struct.pack("<i", kind)
    if kind == ARR:
        assert element is not None
        out += struct.pack("<iQ", element, len(value)) + b"".join(_value(element, v) for v in value)
    else:
        out += _value(kind, value)
    return out


def infer_kind(value: Any) -> tuple[int, int | None]:
    """The gguf_type convert_hf_to_gguf.py writes such a value as (u32 counts, f32 floats, str, arrays)."""
    if isinstance(value, bool):
        return BOOL, None
    if isinstance(value, int):
        return U32, None
    if isinstance(value, float):
        return F32, None
    if isinstance(value, str):
        return STR, None
    first = value[0] if value else ""
    return ARR, infer_kind(first)[0]


def _typed(value: Any) -> tuple[int, Any, int | None]:
    kind, element = infer_kind(value)
    return kind, value, element


def gguf_bytes(metadata: dict[str, Any], tensors: list[tuple[str, tuple[int, ...], str]], *, data: bool = False,
               alignment: int = 32, version: int = 3, magic: bytes = b"GGUF") -> bytes:
    """A whole GGUF file (``data``: zero-filled tensor data, padded) or only its header."""
    out = bytearray(magic + struct.pack("<Iqq", version, len(tensors), len(metadata)))
    for key, value in metadata.items():  # bytes: a value written as given (type id included), for bad files
        out += _string(key) + value if isinstance(value, bytes) else kv(key, *_typed(value))
    offset = 0
    sizes = []
    for name, shape, type_name in tensors:
        out += _string(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<q", n) for n in shape)
        out += struct.pack("<iQ", GGML[type_name][0], offset)
        n = tensor_nbytes(shape, type_name)
        sizes.append(n)
        offset += -(-n // alignment) * alignment
    if data:
        out += bytes(-len(out) % alignment)
        for n in sizes:
            out += bytes(n) + bytes(-n % alignment)
    return bytes(out)


def write(path: Path, metadata: dict[str, Any], tensors: list[tuple[str, tuple[int, ...], str]], **options: Any) -> Path:
    """Write ``gguf_bytes(...)`` to ``path``."""
    path.write_bytes(gguf_bytes(metadata, tensors, **options))
    return path


def decoder_tensors(*, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, ffn: int, vocab: int,
                    tied: bool = False, qk_norm: bool = False, experts: int = 0, expert_ffn: int = 0,
                    matrix: str = "Q4_K", down: str = "Q6_K", embed: str = "Q4_K", output: str = "Q6_K",
                    norms: tuple[str, ...] = ()) -> list[tuple[str, tuple[int, ...], str]]:
    """llama.cpp's tensor names and shapes (ne0 first) for a llama-like decoder, optionally with experts."""
    out = [("token_embd.weight", (hidden, vocab), embed), ("output_norm.weight", (hidden,), "F32")]
    if not tied:
        out.append(("output.weight", (hidden, vocab), output))
    q, k = heads * head_dim, kv_heads * head_dim
    for i in range(layers):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (hidden,), "F32"), (b + "attn_q.weight", (hidden, q), matrix),
                (b + "attn_k.weight", (hidden, k), matrix), (b + "attn_v.weight", (hidden, k), matrix),
                (b + "attn_output.weight", (q, hidden), matrix), (b + "ffn_norm.weight", (hidden,), "F32")]
        out += [(b + f"{norm}.weight", (hidden,), "F32") for norm in norms]
        if qk_norm:
            out += [(b + "attn_q_norm.weight", (head_dim,), "F32"), (b + "attn_k_norm.weight", (head_dim,), "F32")]
        if experts:
            out += [(b + "ffn_gate_inp.weight", (hidden, experts), "F32"),
                    (b + "ffn_gate_exps.weight", (hidden, expert_ffn, experts), matrix),
                    (b + "ffn_up_exps.weight", (hidden, expert_ffn, experts), matrix),
                    (b + "ffn_down_exps.weight", (expert_ffn, hidden, experts), down)]
        else:
            out += [(b + "ffn_gate.weight", (hidden, ffn), matrix), (b + "ffn_up.weight", (hidden, ffn), matrix),
                    (b + "ffn_down.weight", (ffn, hidden), down)]
    return out
