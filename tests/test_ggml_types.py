"""The ggml tensor types (symbolic.formats.ggml): block sizes and bytes as ggml stores them (issue 27)."""

from __future__ import annotations

import importlib.util

import pytest
import sympy

from symbolic.core import sources
from symbolic.core.errors import UnknownNameError, UserError
from symbolic.formats.ggml import GGML_TYPES, QK_K, ggml_type, row_bytes, tensor_bytes

HALF = 2  # ggml_half (fp16)

# (elements per block, bytes per block), each summed field by field from the block struct in ggml-common.h.
FROM_STRUCTS = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "F64": (1, 8),
    "I8": (1, 1), "I16": (1, 2), "I32": (1, 4), "I64": (1, 8),
    "Q4_0": (32, HALF + 32 // 2),  # d; qs[QK4_0/2] nibbles: 18 B per 32 = 4.5 bits
    "Q4_1": (32, 2 * HALF + 32 // 2),  # d, m; qs[QK4_1/2]
    "Q5_0": (32, HALF + 4 + 32 // 2),  # d; qh[4] fifth bits; qs[QK5_0/2]
    "Q5_1": (32, 2 * HALF + 4 + 32 // 2),  # d, m; qh[4]; qs[QK5_1/2]
    "Q8_0": (32, HALF + 32),  # d; int8 qs[QK8_0]: 34 B per 32
    "Q8_1": (32, 2 * HALF + 32),  # d, s; int8 qs[QK8_1]
    "Q2_K": (QK_K, QK_K // 16 + QK_K // 4 + 2 * HALF),  # scales[QK_K/16]; qs[QK_K/4]; d, dmin
    "Q3_K": (QK_K, QK_K // 8 + QK_K // 4 + 12 + HALF),  # hmask[QK_K/8]; qs[QK_K/4]; scales[12]; d
    "Q4_K": (QK_K, 2 * HALF + 12 + QK_K // 2),  # d, dmin; scales[K_SCALE_SIZE=12]; qs[QK_K/2]: 144 B per 256
    "Q5_K": (QK_K, 2 * HALF + 12 + QK_K // 8 + QK_K // 2),  # d, dmin; scales[12]; qh[QK_K/8]; qs[QK_K/2]
    "Q6_K": (QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + HALF),  # ql; qh; int8 scales[QK_K/16]; d: 210 per 256
    "Q8_K": (QK_K, 4 + QK_K + 2 * (QK_K // 16)),  # float d; int8 qs[QK_K]; int16 bsums[QK_K/16]
    "IQ2_XXS": (QK_K, HALF + 2 * (QK_K // 8)),  # d; uint16 qs[QK_K/8]
    "IQ2_XS": (QK_K, HALF + 2 * (QK_K // 8) + QK_K // 32),  # d; uint16 qs[QK_K/8]; scales[QK_K/32]
    "IQ2_S": (QK_K, HALF + QK_K // 4 + QK_K // 32 + QK_K // 32),  # d; qs[QK_K/4]; qh[QK_K/32]; scales[QK_K/32]
    "IQ3_XXS": (QK_K, HALF + 3 * QK_K // 8),  # d; qs[3*QK_K/8]
    "IQ3_S": (QK_K, HALF + QK_K // 4 + QK_K // 32 + QK_K // 8 + QK_K // 64),  # d; qs; qh; signs; scales[QK_K/64]
    "IQ1_S": (QK_K, HALF + QK_K // 8 + 2 * (QK_K // 32)),  # d; qs[QK_K/8]; uint16 qh[QK_K/32]
    "IQ1_M": (QK_K, QK_K // 8 + QK_K // 16 + QK_K // 32),  # qs[QK_K/8]; qh[QK_K/16]; scales[QK_K/32]; no d
    "IQ4_NL": (32, HALF + 32 // 2),  # d; qs[QK4_NL/2]
    "IQ4_XS": (QK_K, HALF + 2 + QK_K // 64 + QK_K // 2),  # d; uint16 scales_h; scales_l[QK_K/64]; qs[QK_K/2]
    "TQ1_0": (QK_K, (QK_K - 4 * QK_K // 64) // 5 + QK_K // 64 + HALF),  # qs: 5 trits a byte; qh[QK_K/64]; d
    "TQ2_0": (QK_K, QK_K // 4 + HALF),  # qs[QK_K/4]; d
    "MXFP4": (32, 1 + 32 // 2),  # e8m0 e; qs[QK_MXFP4/2]
    "NVFP4": (64, 64 // 16 + 64 // 2),  # ue4m3 d[QK_NVFP4/QK_NVFP4_SUB]; qs[QK_NVFP4/2]
    "Q1_0": (128, HALF + 128 // 8),  # d; qs[QK1_0/8]
    "Q2_0": (64, HALF + 64 // 4),  # d; qs[QK2_0/4]
}

# Bits per weight as the comments beside the structs in ggml-common.h state them ("Effectively 4.5 bits per
# weight", "2.0625 bpw", ...): a second, independent statement of the same figures.
STATED_BITS = {
    "Q2_K": "2.625", "Q3_K": "3.4375", "Q4_K": "4.5", "Q5_K": "5.5", "Q6_K": "6.5625",
    "TQ1_0": "1.6875", "TQ2_0": "2.0625", "IQ2_XXS": "2.0625", "IQ2_XS": "2.3125", "IQ2_S": "2.5625",
    "IQ3_XXS": "3.0625", "IQ3_S": "3.4375", "IQ1_S": "1.5625", "IQ1_M": "1.75",
}

# The types issue 27 names, and ggml's enum ggml_type ids (include/ggml.h) for a few of them.
NAMED = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
         "Q6_K", "Q8_K", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS",
         "TQ1_0", "TQ2_0", "MXFP4", "I8", "I16", "I32", "I64", "F64")
ENUM_IDS = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "Q4_K": 12, "Q6_K": 14, "BF16": 30, "TQ2_0": 35, "MXFP4": 39}


def test_every_named_type_is_in_the_table():
    assert set(NAMED) <= set(GGML_TYPES)
    assert set(GGML_TYPES) == set(FROM_STRUCTS)


@pytest.mark.parametrize("name", sorted(FROM_STRUCTS))
def test_block_size_and_bytes_match_the_struct(name):
    t = GGML_TYPES[name]
    assert (t.block_size, t.type_size) == FROM_STRUCTS[name]
    assert t.bytes_per_weight == sympy.Rational(t.type_size, t.block_size)
    assert isinstance(t.bytes_per_weight, sympy.Rational)


@pytest.mark.parametrize("name", sorted(STATED_BITS))
def test_bits_per_weight_as_ggml_common_states_them(name):
    assert GGML_TYPES[name].bits_per_weight == sympy.Rational(STATED_BITS[name])


def test_published_headline_figures():
    # Q4_0 4.5 bits, Q8_0 8.5 bits (34 B / 32), Q4_K 4.5 bits (144 B / 256), Q6_K 6.5625 bits (210 B / 256).
    assert GGML_TYPES["Q4_0"].bits_per_weight == sympy.Rational(18 * 8, 32)
    assert GGML_TYPES["Q8_0"].bytes_per_weight == sympy.Rational(34, 32)
    assert GGML_TYPES["Q4_K"].bytes_per_weight == sympy.Rational(144, 256)
    assert GGML_TYPES["Q6_K"].bits_per_weight == sympy.Rational(65625, 10000)


def test_type_ids_are_ggmls_and_unique():
    assert {n: GGML_TYPES[n].type_id for n in ENUM_IDS} == ENUM_IDS
    ids = [t.type_id for t in GGML_TYPES.values()]
    assert len(ids) == len(set(ids))
    assert not {4, 5, 31, 32, 33, 36, 37, 38} & set(ids)  # ids ggml removed (type_traits blck_size 0)


def test_each_entry_cites_a_registered_source():
    for t in GGML_TYPES.values():
        assert t.source in sources.SOURCES
        assert f"GGML_TYPE_{t.name}" in t.where


@pytest.mark.skipif(importlib.util.find_spec("gguf") is None,
                    reason="the gguf package (llama.cpp's gguf-py) is not installed in this environment")
def test_agrees_with_gguf_py_quant_sizes():
    import gguf

    shared = {q.name: (q.value, sizes) for q, sizes in gguf.GGML_QUANT_SIZES.items() if q.name in GGML_TYPES}
    assert {"F32", "F16", "Q4_0", "Q8_0", "Q4_K", "Q6_K"} <= set(shared)  # in every gguf-py release
    for name, (type_id, (block_size, type_size)) in shared.items():
        t = GGML_TYPES[name]
        assert (t.type_id, t.block_size, t.type_size) == (type_id, block_size, type_size), name


def test_row_and_tensor_bytes_are_whole_blocks():
    # A 4096-wide Q4_K row: 16 super-blocks of 144 B; a 4096 x 4096 tensor is 4096 such rows.
    assert row_bytes("Q4_K", 4096) == (4096 // 256) * 144
    assert tensor_bytes("Q4_K", 4096 * 4096) == 4096 * row_bytes("Q4_K", 4096)
    assert tensor_bytes("f32", 10) == 40
    assert row_bytes("q8_0", 64) == 2 * 34  # ggml's own spelling, any case


@pytest.mark.parametrize("fn", [tensor_bytes, row_bytes])
@pytest.mark.parametrize("name, n", [("Q4_K", 4096 + 32), ("Q8_0", 100), ("IQ4_NL", -32)])
def test_a_partial_block_is_a_one_line_error(fn, name, n):
    with pytest.raises(UserError) as err:
        fn(name, n)
    message = str(err.value)
    assert "\n" not in message
    assert name in message and str(GGML_TYPES[name].block_size) in message


def test_an_unknown_type_names_the_choices():
    with pytest.raises(UnknownNameError, match="unknown ggml type 'Q4_K_M'.*Q4_K"):
        ggml_type("Q4_K_M")
