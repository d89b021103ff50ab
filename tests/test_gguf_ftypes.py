"""llama.cpp's file types and the ggml type llama-quantize gives each tensor (symbolic.formats.gguf_ftypes, issue 27)."""

from __future__ import annotations

from math import prod

import pytest

from symbolic.core.errors import UserError
from symbolic.formats.ggml import ggml_type
from symbolic.formats.gguf_ftypes import FILE_TYPES, model_bytes, tensor_type, use_more_bits

# use_more_bits for n = 32: n/8 = 4, 7n/8 = 28, so layers 0-3 and 28-31, and between them every i with
# (i - 4) % 3 == 2: 6, 9, 12, 15, 18, 21, 24, 27.
MORE_BITS_32 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}


def test_use_more_bits_layers_for_32():
    assert {i for i in range(32) if use_more_bits(i, 32)} == MORE_BITS_32


@pytest.mark.parametrize("name", ["attn_v", "ffn_down"])
def test_q4_k_m_gives_more_bits_layers_q6_k(name):
    got = {i: tensor_type("Q4_K_M", f"blk.{i}.{name}.weight", i, 32, 4096) for i in range(32)}
    assert got == {i: "Q6_K" if i in MORE_BITS_32 else "Q4_K" for i in range(32)}


def test_q4_k_m_output_q6_k_and_other_tensors_q4_k():
    assert tensor_type("Q4_K_M", "output.weight", 0, 32, 4096) == "Q6_K"
    assert tensor_type("Q4_K_M", "blk.5.attn_q.weight", 5, 32, 4096) == "Q4_K"
    assert tensor_type("Q4_K_M", "token_embd.weight", 0, 32, 4096) == "Q4_K"
    assert tensor_type("Q4_K_M", "token_embd.weight", 0, 32, 4096, tied_embeddings=True) == "Q6_K"


def test_norms_and_router_keep_their_type():
    assert tensor_type("Q4_K_M", "blk.0.attn_norm.weight", 0, 32, 4096, input_type="F32") == "F32"
    assert tensor_type("Q4_K_M", "blk.0.ffn_gate_inp.weight", 0, 32, 4096) == "F16"


def test_row_not_whole_super_blocks_falls_back():
    # tensor_type_fallback: Q4_K -> Q5_0, Q6_K -> Q8_0 (32-number blocks); 4160 = 16.25 * 256 = 130 * 32.
    ne0 = 4160
    assert ne0 % ggml_type("Q4_K").block_size and ne0 % 32 == 0
    assert tensor_type("Q4_K_M", "blk.5.attn_q.weight", 5, 32, ne0) == "Q5_0"
    assert tensor_type("Q4_K_M", "blk.0.attn_v.weight", 0, 32, ne0) == "Q8_0"
    assert tensor_type("IQ4_XS", "blk.5.attn_q.weight", 5, 32, ne0) == "IQ4_NL"
    # the output takes Q8_0 itself when its row is not whole blocks of the default type
    assert tensor_type("Q4_K_M", "output.weight", 0, 32, ne0) == "Q8_0"
    # not even whole 32-blocks: F16
    assert tensor_type("Q4_K_M", "blk.5.attn_q.weight", 5, 32, 4100) == "F16"


def test_gqa_moe_and_70b_rules():
    assert tensor_type("Q2_K", "blk.9.attn_v.weight", 9, 32, 4096, n_gqa=4) == "Q4_K"
    assert tensor_type("Q2_K", "blk.9.attn_v.weight", 9, 32, 4096, n_gqa=1) == "Q3_K"
    # layer 11 of 80 is not a more-bits layer (80/8 = 10, (11 - 10) % 3 = 1): Q4_K, which 70B raises to Q5_K
    assert tensor_type("Q4_K_M", "blk.11.attn_v.weight", 11, 80, 8192) == "Q4_K"
    assert tensor_type("Q4_K_M", "blk.11.attn_v.weight", 11, 80, 8192, llama_70b=True) == "Q5_K"
    assert tensor_type("Q4_K_M", "blk.4.attn_v.weight", 4, 32, 4096, n_expert=8) == "Q8_0"
    assert tensor_type("MXFP4_MOE", "blk.0.ffn_up_exps.weight", 0, 36, 2880, ne2=128) == "MXFP4"
    assert tensor_type("MXFP4_MOE", "blk.0.attn_q.weight", 0, 36, 2880) == "Q8_0"


def test_unknown_file_type_is_one_line_user_error():
    with pytest.raises(UserError) as err:
        tensor_type("Q4_K_X", "output.weight", 0, 32, 4096)
    assert "\n" not in str(err.value) and "Q4_K_M" in str(err.value)


def _llama_31_8b() -> list[tuple[str, tuple[int, ...]]]:
    """Llama-3.1-8B's GGUF tensors (shape ne0 first) from its config: V 128256, H 4096, 32 layers,
    8 KV heads of 128 (1024), d_ff 14336, untied output, and the F32 rope_freqs (head_dim/2 = 64) Llama 3.1 adds."""
    v, h, kv, ff = 128256, 4096, 1024, 14336
    tensors = [("token_embd.weight", (h, v)), ("output.weight", (h, v)), ("output_norm.weight", (h,)),
               ("rope_freqs.weight", (64,))]
    for i in range(32):
        tensors += [(f"blk.{i}.{n}.weight", s) for n, s in (
            ("attn_q", (h, h)), ("attn_k", (h, kv)), ("attn_v", (h, kv)), ("attn_output", (h, h)),
            ("ffn_gate", (h, ff)), ("ffn_up", (h, ff)), ("ffn_down", (ff, h)), ("attn_norm", (h,)), ("ffn_norm", (h,)))]
    return tensors


# llama.cpp tools/quantize/README.md (commit 311c2c9f0ebd6e08f5b20e8827c654cebb7a41d6), the table for
# meta-llama/Llama-3.1-8B: bits/weight as llama-bench prints it, i.e. the tensors' bytes * 8 / parameters
# (llama_model_size sums ggml_nbytes of the tensors: the GGUF header, metadata and alignment padding are not in
# it). Given to 4 decimals, so the tolerance is half a unit of the last place.
README_BPW = {"Q2_K_S": 2.9697, "Q2_K": 3.1593, "Q3_K_S": 3.6429, "Q3_K_L": 4.2979, "Q4_K_S": 4.6672,
              "Q4_K_M": 4.8944, "Q5_K_S": 5.5704, "Q5_K_M": 5.7036, "Q6_K": 6.5633, "Q8_0": 8.5008, "F16": 16.0005,
              "IQ4_XS": 4.4597, "IQ4_NL": 4.6818, "IQ3_M": 3.7628, "IQ3_S": 3.6606, "IQ3_XS": 3.4977, "IQ2_M": 2.9294,
              "IQ2_S": 2.7403, "IQ2_XS": 2.5882, "IQ2_XXS": 2.3824, "IQ1_M": 2.1460, "IQ1_S": 2.0042}


@pytest.mark.parametrize("ftype", sorted(README_BPW))
def test_llama_31_8b_bits_per_weight_match_llama_cpp_readme(ftype):
    tensors = _llama_31_8b()
    n_params = sum(prod(shape) for _, shape in tensors)
    by_type = model_bytes(ftype, tensors, n_gqa=32 // 8)  # 32 query heads over 8 KV heads
    assert sum(by_type.values()) * 8 / n_params == pytest.approx(README_BPW[ftype], abs=0.00005)


def test_llama_31_8b_iq3_xxs_with_its_required_imatrix():
    # IQ3_XXS tensors need an importance matrix (tensor_requires_imatrix), and with one attn_v stays IQ3_XXS
    # (without, IQ3_S) and ffn_down keeps the default: the README's 3.2548 is that file.
    tensors = _llama_31_8b()
    n_params = sum(prod(shape) for _, shape in tensors)
    by_type = model_bytes("IQ3_XXS", tensors, n_gqa=4, imatrix=True)
    assert sum(by_type.values()) * 8 / n_params == pytest.approx(3.2548, abs=0.00005)


def test_llama_31_8b_q4_k_m_size_in_gib():
    # the same table's "size (GiB)" for Q4_K_M: 4.58, to 2 decimals
    assert sum(model_bytes("Q4_K_M", _llama_31_8b(), n_gqa=4).values()) / 2**30 == pytest.approx(4.58, abs=0.005)


def test_every_file_type_default_is_a_ggml_type():
    assert all(ggml_type(f.default_type) for f in FILE_TYPES.values())
