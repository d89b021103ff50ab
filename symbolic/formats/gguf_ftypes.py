"""llama.cpp's file types (Q4_K_M, Q5_K_S, IQ4_XS, ...) and the ggml type ``llama-quantize`` gives each tensor.

A file type names a mixture, not one type: ``output.weight`` gets more bits, ``attn_v`` and ``ffn_down`` get more
bits on the "more bits" layers, and a row whose length is not a whole number of blocks falls back to a type with
smaller blocks. These rules decide a GGUF file's bytes.

Read from ggml-org/llama.cpp at commit 007dbbf3fd17eefe9b47fee45f48f7ba5e62b714, ``src/llama-quant.cpp``:
``llama_ftype_get_default_type`` (the default type per file type), ``tensor_allows_quantization`` (what stays as
it is), ``tensor_get_category`` (which rule a tensor name falls under), ``llama_tensor_get_type_impl`` (the
mixture) and ``tensor_type_fallback`` (rows not divisible by the block). The file type ids are ``enum
llama_ftype`` in ``include/llama.h`` (commit 0011438e931ec7fd258433f61d411301a759fae2). Checked against llama.cpp's
``tools/quantize/README.md`` table for Llama-3.1-8B (bits per weight to 4 decimals, every file type in it). Not modelled: the Falcon architecture's own branches, BailingMoE3's expert
test, and the user's overrides (``--tensor-type``, ``--output-tensor-type``, ``--token-embedding-type``,
``--pure``, ``--leave-output-tensor``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from math import prod

from ..core.errors import UserError
from .ggml import ggml_type, tensor_bytes

COMMIT = "007dbbf3fd17eefe9b47fee45f48f7ba5e62b714"
WHERE = f"https://github.com/ggml-org/llama.cpp/blob/{COMMIT}/src/llama-quant.cpp"


@dataclass(frozen=True)
class FileType:
    """One llama.cpp file type: its ``general.file_type`` id and the ggml type most tensors get."""

    name: str  # as llama-quantize spells it, LLAMA_FTYPE_MOSTLY_ dropped ("Q4_K_M")
    ftype_id: int  # enum llama_ftype
    default_type: str  # llama_ftype_get_default_type


_F = FileType
FILE_TYPES: dict[str, FileType] = {f.name: f for f in (
    _F("F32", 0, "F32"), _F("F16", 1, "F16"), _F("BF16", 32, "BF16"),
    _F("Q4_0", 2, "Q4_0"), _F("Q4_1", 3, "Q4_1"), _F("Q5_0", 8, "Q5_0"), _F("Q5_1", 9, "Q5_1"),
    _F("Q8_0", 7, "Q8_0"),
    _F("Q2_K", 10, "Q2_K"), _F("Q2_K_S", 21, "Q2_K"),
    _F("Q3_K_S", 11, "Q3_K"), _F("Q3_K_M", 12, "Q3_K"), _F("Q3_K_L", 13, "Q3_K"),
    _F("Q4_K_S", 14, "Q4_K"), _F("Q4_K_M", 15, "Q4_K"),
    _F("Q5_K_S", 16, "Q5_K"), _F("Q5_K_M", 17, "Q5_K"), _F("Q6_K", 18, "Q6_K"),
    _F("IQ1_S", 24, "IQ1_S"), _F("IQ1_M", 31, "IQ1_M"),
    _F("IQ2_XXS", 19, "IQ2_XXS"), _F("IQ2_XS", 20, "IQ2_XS"), _F("IQ2_S", 28, "IQ2_XS"), _F("IQ2_M", 29, "IQ2_S"),
    _F("IQ3_XXS", 23, "IQ3_XXS"), _F("IQ3_XS", 22, "IQ3_S"), _F("IQ3_S", 26, "IQ3_S"), _F("IQ3_M", 27, "IQ3_S"),
    _F("IQ4_NL", 25, "IQ4_NL"), _F("IQ4_XS", 30, "IQ4_XS"),
    _F("TQ1_0", 36, "TQ1_0"), _F("TQ2_0", 37, "TQ2_0"),
    _F("MXFP4_MOE", 38, "MXFP4"),
)}

_UNQUANTIZED = ("F32", "F16", "BF16")  # ggml_is_quantized is false: no mixture, no fallback
# tensor_type_fallback: a row that is not whole blocks of the target goes to a type with 32-number blocks
_FALLBACK = {
    **dict.fromkeys(("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS"), "IQ4_NL"),
    **dict.fromkeys(("Q2_K", "Q3_K", "TQ1_0", "TQ2_0"), "Q4_0"),
    "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0",
}
# tensor_allows_quantization: names that keep the input file's type
_KEPT_PARTS = ("_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
               "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
               "indexer.q_proj.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
               "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
               *(f"time_mix_{w}.weight" for w in ("first", "w0", "w1", "w2", "v0", "v1", "v2", "a0", "a1", "a2",
                                                  "g1", "g2", "decay_w1", "decay_w2", "lerp_fused")))
_KEPT_NAMES = ("position_embd.weight", "token_types.weight")  # LLM_TENSOR_POS_EMBD, LLM_TENSOR_TOKEN_TYPES
_LOW_IQ = ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M")  # the ftypes with their own attn/ffn branch
_LAYER = re.compile(r"blk\.(\d+)\.")


def file_type(name: str) -> FileType:
    """The llama.cpp file type called ``name`` (any case); a one-line error naming the choices."""
    found = FILE_TYPES.get(name.upper())
    if found is None:
        raise UserError(f"unknown llama.cpp file type {name!r}; choose from {', '.join(FILE_TYPES)}")
    return found


def use_more_bits(layer: int, n_layers: int) -> bool:
    """llama-quant.cpp's use_more_bits: the first and last eighth of the layers, and every third one between."""
    eighth = n_layers // 8
    return layer < eighth or layer >= 7 * n_layers // 8 or (layer - eighth) % 3 == 2


def is_quantized(name: str) -> bool:
    """Whether llama-quantize may change this tensor's type (tensor_allows_quantization, by name)."""
    return (name.endswith("weight") and name not in _KEPT_NAMES
            and not any(part in name for part in _KEPT_PARTS))


def category(name: str) -> str:
    """tensor_get_category: the rule a tensor name falls under (first match wins, as in the source)."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for part, cat in (("attn_qkv.weight", "attn_v"), ("attn_kv_b.weight", "attn_v"), ("attn_v.weight", "attn_v"),
                      ("attn_k.weight", "attn_k"), ("attn_q.weight", "attn_q"),
                      ("attn_output.weight", "attn_output"), ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"),
                      ("ffn_down", "ffn_down")):
        if part in name:  # attn_qkv and attn_kv_b share attn_v's rule (category_is_attn_v)
            return cat
    return "other"


def _output(ftype: str, new: str, ne0: int) -> str:
    """The output tensor (and tied token embedding) rule."""
    if ftype == "MXFP4_MOE" or ne0 % ggml_type(new).block_size:
        return "Q8_0"
    if ftype in _LOW_IQ or ftype == "IQ3_XXS":
        return "Q5_K"
    return new if new == "Q8_0" else "Q6_K"


def _token_embd(ftype: str, new: str) -> str:
    """The (untied) token embedding rule."""
    if ftype in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
        return "Q2_K"
    if ftype in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
        return "IQ3_S"
    return "Q4_K" if ftype in ("TQ1_0", "TQ2_0") else new


def _low_iq(ftype: str, cat: str, new: str, layer: int, n_layers: int, n_expert: int, n_gqa: int) -> str:
    """The IQ1/IQ2 file types' own branch."""
    iq2_sm = ftype in ("IQ2_S", "IQ2_M")
    if cat == "attn_v":
        return "Q4_K" if n_gqa >= 4 or n_expert >= 4 else ("IQ3_S" if iq2_sm else "Q2_K")
    if cat == "attn_k" and n_expert == 8:
        return "Q4_K"
    if cat == "ffn_down" and layer < n_layers // 8:
        return "IQ3_S" if iq2_sm else "Q2_K"
    if cat == "attn_output":
        if n_expert == 8:
            return "Q5_K"
        if ftype in ("IQ1_S", "IQ1_M"):
            return "IQ2_XXS"
        if iq2_sm:
            return "IQ3_S"
    return new


def _attn_v(ftype: str, new: str, layer: int, n_layers: int, n_expert: int, n_gqa: int, imatrix: bool,
            llama_70b: bool) -> str:
    """attn_v (and fused attn_qkv / attn_kv_b): more bits, most of all where heads share it (GQA, 70B, MoE)."""
    gqa4 = n_gqa >= 4
    if ftype == "Q2_K":
        new = "Q4_K" if gqa4 else "Q3_K"
    elif ftype == "Q2_K_S" and gqa4:
        new = "Q4_K"
    elif ftype == "IQ3_XXS":
        new = "Q4_K" if gqa4 else ("IQ3_XXS" if imatrix else "IQ3_S")
    elif ftype in ("IQ3_XS", "IQ3_S") and gqa4 or ftype == "IQ3_M":
        new = "Q4_K"
    elif ftype == "Q3_K_M":
        new = "Q5_K" if layer < 2 else "Q4_K"
    elif ftype == "Q3_K_L":
        new = "Q5_K"
    elif ftype in ("IQ4_NL", "IQ4_XS") and gqa4:
        new = "Q5_K"
    elif ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(layer, n_layers):
        new = "Q6_K"
    elif ftype == "Q4_K_S" and layer < 4:
        new = "Q5_K"
    if llama_70b and new in ("Q3_K", "Q4_K"):
        new = "Q5_K"
    return "Q8_0" if n_expert == 8 else new


def _ffn_down(ftype: str, new: str, layer: int, n_layers: int, n_expert: int, imatrix: bool) -> str:
    """ffn_down: more bits on the first layers, or on the use_more_bits layers for the _M mixtures."""
    first_eighth = layer < n_layers // 8
    if ftype == "Q2_K":
        return "Q3_K"
    if ftype == "Q2_K_S":
        return "Q4_K" if first_eighth else new
    if ftype == "IQ3_XXS" and not imatrix:
        return "Q4_K" if first_eighth else "Q3_K"
    if ftype == "Q3_K_M":
        return "Q5_K" if layer < n_layers // 16 else "Q4_K"
    if ftype == "IQ3_M" and (first_eighth or n_expert == 8 and use_more_bits(layer, n_layers)):
        return "Q4_K"
    if ftype == "Q3_K_L":
        return "Q5_K"
    if ftype == "Q4_K_M":
        return "Q6_K" if use_more_bits(layer, n_layers) else new
    if first_eighth and ftype in ("IQ4_NL", "IQ4_XS") and not imatrix:
        return "Q5_K"
    if ftype == "Q5_K_M" and use_more_bits(layer, n_layers):
        return "Q6_K"
    if ftype == "Q4_K_S" and first_eighth:
        return "Q5_K"
    if ftype in ("Q4_0", "Q5_0") and imatrix and first_eighth:
        return "Q4_1" if ftype == "Q4_0" else "Q5_1"
    return new


def _attn_output(ftype: str, new: str, n_expert: int) -> str:
    """attn_output: Q5_K for 8-expert models at most file types, one step up for the low-bit ones."""
    if n_expert == 8:
        eight = ("Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ3_S", "IQ3_M",
                 "IQ4_XS")
        return "Q5_K" if ftype in eight else new
    return {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K", "IQ3_M": "Q4_K"}.get(ftype, new)


def _mixture(ftype: str, cat: str, new: str, layer: int, n_layers: int, ne0: int, ne2: int, n_expert: int,
             n_gqa: int, imatrix: bool, llama_70b: bool, tied: bool) -> str:
    """llama_tensor_get_type_impl: the file type's choice for one tensor, before the row fallback."""
    if cat == "output" or tied and cat == "token_embd":
        return _output(ftype, new, ne0)
    if ftype == "MXFP4_MOE":
        return "MXFP4" if ne2 > 1 else "Q8_0"  # the experts' 3-D tensors, everything else Q8_0
    if cat == "token_embd":
        return _token_embd(ftype, new)
    if ftype in _LOW_IQ:
        return _low_iq(ftype, cat, new, layer, n_layers, n_expert, n_gqa)
    if cat == "attn_v":
        return _attn_v(ftype, new, layer, n_layers, n_expert, n_gqa, imatrix, llama_70b)
    if cat in ("attn_k", "attn_q"):
        if cat == "attn_k" and n_expert == 8:
            return "Q8_0"
        return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(ftype, new)
    if cat == "ffn_down":
        return _ffn_down(ftype, new, layer, n_layers, n_expert, imatrix)
    if cat == "attn_output":
        return _attn_output(ftype, new, n_expert)
    if cat in ("ffn_gate", "ffn_up") and ftype == "IQ3_XS" and n_layers // 8 <= layer < 7 * n_layers // 8:
        return "IQ3_XXS"
    return new


def row_fallback(type_name: str, ne0: int) -> str:
    """tensor_type_fallback: the type a row of ``ne0`` numbers gets when it is not whole blocks of ``type_name``."""
    if ne0 % ggml_type(type_name).block_size == 0:
        return type_name
    if type_name not in _FALLBACK:
        raise UserError(f"llama.cpp defines no fallback for ggml type {type_name}; a row of {ne0} numbers is not "
                        f"whole blocks of {ggml_type(type_name).block_size}")
    fallback = _FALLBACK[type_name]
    return fallback if ne0 % ggml_type(fallback).block_size == 0 else "F16"


def tensor_type(ftype: str, tensor_name: str, layer: int, n_layers: int, ne0: int, n_expert: int = 0,
                n_gqa: int = 1, *, ne2: int = 1, input_type: str = "F16", imatrix: bool = False,
                llama_70b: bool = False, tied_embeddings: bool = False) -> str:
    """The ggml type llama-quantize writes for one tensor of a model quantized to ``ftype`` (llama_tensor_get_type).

    ``layer`` is the tensor's block index (any value for tensors outside the blocks), ``ne0`` its row length,
    ``ne2`` its expert count for 3-D expert tensors; ``input_type`` is the type a tensor llama.cpp does not
    quantize keeps. ``llama_70b`` is llama.cpp's LLM_TYPE_70B (Llama 2/3 70B); ``tied_embeddings`` says the
    file has no ``output.weight``, so the token embedding takes the output's rule.
    """
    ft = file_type(ftype)
    if not is_quantized(tensor_name):
        return input_type
    if ft.default_type in _UNQUANTIZED:
        return ft.default_type
    new = _mixture(ft.name, category(tensor_name), ft.default_type, layer, n_layers, ne0, ne2, n_expert, n_gqa,
                   imatrix, llama_70b, tied_embeddings)
    return row_fallback(new, ne0)


def typed_tensors(ftype: str, tensors: Iterable[tuple[str, tuple[int, ...]]], n_expert: int = 0, n_gqa: int = 1,
                  **options: bool) -> list[tuple[str, tuple[int, ...], str, int]]:
    """Each tensor of a model quantized to ``ftype``: (GGUF name, shape with ne0 first, ggml type, bytes).

    1-D tensors and biases keep F32 and other unquantized tensors F16, as convert_hf_to_gguf writes an F16 input file.
    ``options`` are tensor_type's ``imatrix`` and ``llama_70b``.
    """
    tensors = list(tensors)
    file_type(ftype)
    layers = [int(m.group(1)) for name, _ in tensors if (m := _LAYER.match(name))]
    n_layers = max(layers) + 1 if layers else 0
    tied = not any(name == "output.weight" for name, _ in tensors)
    out = []
    for name, shape in tensors:
        m = _LAYER.match(name)
        if len(shape) < 2 or not name.endswith("weight"):
            # tensor_allows_quantization (llama-quant.cpp:287-297): only 2-D and 3-D tensors named *weight; gpt-oss's
            # 2-D expert biases keep the F32 they are written in (measured: tests/data/llamacpp_buffers.json)
            type_name = "F32"
        else:
            type_name = tensor_type(ftype, name, int(m.group(1)) if m else 0, n_layers, shape[0], n_expert, n_gqa,
                                    ne2=shape[2] if len(shape) > 2 else 1, tied_embeddings=tied, **options)
        out.append((name, tuple(shape), type_name, tensor_bytes(type_name, prod(shape))))
    return out


def model_bytes(ftype: str, tensors: Iterable[tuple[str, tuple[int, ...]]], n_expert: int = 0, n_gqa: int = 1,
                **options: bool) -> dict[str, int]:
    """Bytes by ggml type of a model quantized to ``ftype``; ``tensors`` are (GGUF name, shape with ne0 first)."""
    out: dict[str, int] = {}
    for _, _, type_name, nbytes in typed_tensors(ftype, tensors, n_expert, n_gqa, **options):
        out[type_name] = out.get(type_name, 0) + nbytes
    return out
