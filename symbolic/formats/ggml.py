"""The ggml tensor types llama.cpp stores in GGUF files: type id, elements per block and bytes per block.

ggml stores a tensor row by row; a row of ``ne0`` numbers is ``ne0 / blck_size`` blocks of ``type_size``
bytes each (``ggml_row_size``), so a type's bytes per weight is exactly ``type_size / blck_size``.

Read from ggml at commit d99724f2b141fed9e1a9f402213506c081433465 of ggml-org/ggml (the repository
llama.cpp's ``ggml/`` directory is synced with): ``include/ggml.h`` (``enum ggml_type``: the ids),
``src/ggml.c`` (``type_traits``: ``blck_size``, ``type_size = sizeof(block_...)``) and
``src/ggml-common.h`` (the ``block_*`` structs, ``QK_K = 256``, ``K_SCALE_SIZE = 12``), the sizes checked
by compiling the structs. llama.cpp's own ``ggml/src/ggml.c`` (commit 00bdaa105cb0) and
``ggml/src/ggml-common.h`` (commit 01243c587fec) give the same figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..core import sources
from ..core.errors import UnknownNameError, UserError

SOURCE = "ggml"
COMMIT = "d99724f2b141fed9e1a9f402213506c081433465"
if SOURCE not in sources.SOURCES:
    sources.register(SOURCE, f"ggml (ggml-org/ggml at {COMMIT}, as in llama.cpp's ggml/): include/ggml.h "
                             "enum ggml_type, src/ggml.c type_traits, src/ggml-common.h block structs",
                     f"https://github.com/ggml-org/ggml/blob/{COMMIT}/src/ggml-common.h")

QK_K = 256  # ggml-common.h: elements of a k-quant / i-quant super-block


@dataclass(frozen=True)
class GgmlType:
    """One ggml tensor type: its id in GGUF files, elements per block and bytes per block."""

    name: str  # as in enum ggml_type, without GGML_TYPE_ ("Q4_K")
    type_id: int
    block_size: int  # type_traits[].blck_size
    type_size: int  # type_traits[].type_size, bytes per block
    layout: str  # the block struct's fields, whose sizes add up to type_size
    note: str = ""

    @property
    def bytes_per_weight(self) -> sympy.Rational:
        """Exact bytes per stored number."""
        return sympy.Rational(self.type_size, self.block_size)

    @property
    def bits_per_weight(self) -> sympy.Rational:
        """Exact bits per stored number."""
        return 8 * self.bytes_per_weight

    @property
    def source(self) -> str:
        """The core.sources id of these figures."""
        return SOURCE

    @property
    def where(self) -> str:
        """Where in the source the figures are."""
        traits = f"src/ggml.c type_traits[GGML_TYPE_{self.name}]"
        if self.block_size == 1:
            return f"{traits}: sizeof({self.layout}) (commit {COMMIT[:12]})"
        struct = f"block_{self.name.lower()}".replace("_k", "_K")
        return f"{traits}; src/ggml-common.h {struct} (commit {COMMIT[:12]})"


_T = GgmlType
_INTERMEDIATE = "Only for intermediate quantization in dot products; llama.cpp does not store it in files."

GGML_TYPES: dict[str, GgmlType] = {t.name: t for t in (
    _T("F32", 0, 1, 4, "float"),
    _T("F16", 1, 1, 2, "ggml_fp16_t"),
    _T("Q4_0", 2, 32, 18, "fp16 d; 16 B of 4-bit quants"),
    _T("Q4_1", 3, 32, 20, "fp16 d, fp16 m; 16 B of 4-bit quants"),
    _T("Q5_0", 6, 32, 22, "fp16 d; 4 B of 5th bits; 16 B of low nibbles"),
    _T("Q5_1", 7, 32, 24, "fp16 d, fp16 m; 4 B of 5th bits; 16 B of low nibbles"),
    _T("Q8_0", 8, 32, 34, "fp16 d; 32 int8 quants"),
    _T("Q8_1", 9, 32, 36, "fp16 d, fp16 s; 32 int8 quants", note=_INTERMEDIATE),
    _T("Q2_K", 10, QK_K, 84, "16 B of 4-bit scales and mins; 64 B of 2-bit quants; fp16 d, fp16 dmin"),
    _T("Q3_K", 11, QK_K, 110, "32 B of high bits; 64 B of low 2 bits; 12 B of 6-bit scales; fp16 d"),
    _T("Q4_K", 12, QK_K, 144, "fp16 d, fp16 dmin; 12 B of 6-bit scales and mins; 128 B of 4-bit quants"),
    _T("Q5_K", 13, QK_K, 176, "fp16 d, fp16 dmin; 12 B of scales and mins; 32 B of high bits; 128 B of low nibbles"),
    _T("Q6_K", 14, QK_K, 210, "128 B of low nibbles; 64 B of upper 2 bits; 16 int8 scales; fp16 d"),
    _T("Q8_K", 15, QK_K, 292, "fp32 d; 256 int8 quants; 16 int16 block sums", note=_INTERMEDIATE),
    _T("IQ2_XXS", 16, QK_K, 66, "fp16 d; 32 uint16 grid indices and signs"),
    _T("IQ2_XS", 17, QK_K, 74, "fp16 d; 32 uint16 grid indices and signs; 8 B of scales"),
    _T("IQ3_XXS", 18, QK_K, 98, "fp16 d; 96 B of grid indices, signs and scales"),
    _T("IQ1_S", 19, QK_K, 50, "fp16 d; 32 B of grid indices; 8 uint16 of high bits and scales"),
    _T("IQ4_NL", 20, 32, 18, "fp16 d; 16 B of 4-bit non-linear codes"),
    _T("IQ3_S", 21, QK_K, 110, "fp16 d; 64 B of grid indices; 8 B of high bits; 32 B of signs; 4 B of scales"),
    _T("IQ2_S", 22, QK_K, 82, "fp16 d; 64 B of grid indices; 8 B of high bits; 8 B of scales"),
    _T("IQ4_XS", 23, QK_K, 136, "fp16 d; uint16 high scale bits; 4 B of low scale bits; 128 B of 4-bit codes"),
    _T("I8", 24, 1, 1, "int8_t"),
    _T("I16", 25, 1, 2, "int16_t"),
    _T("I32", 26, 1, 4, "int32_t"),
    _T("I64", 27, 1, 8, "int64_t"),
    _T("F64", 28, 1, 8, "double"),
    _T("IQ1_M", 29, QK_K, 56, "32 B of grid indices; 16 B of high bits and shifts; 8 B of 3-bit scales "
                               "(the fp16 super-block scale packed in their top bits)"),
    _T("BF16", 30, 1, 2, "ggml_bf16_t"),
    _T("TQ1_0", 34, QK_K, 54, "48 B of base-3 quants (5 per byte); 4 B of 4 per byte; fp16 d"),
    _T("TQ2_0", 35, QK_K, 66, "64 B of 2-bit quants; fp16 d"),
    _T("MXFP4", 39, 32, 17, "e8m0 scale; 16 B of 4-bit e2m1 codes"),
    _T("NVFP4", 40, 64, 36, "4 ue4m3 scales (one per 16); 32 B of 4-bit e2m1 codes"),
    _T("Q1_0", 41, 128, 18, "fp16 d; 16 B of 1-bit quants"),
    _T("Q2_0", 42, 64, 18, "fp16 d; 16 B of 2-bit quants"),
)}


def ggml_type(name: str) -> GgmlType:
    """The ggml type called ``name`` (any case, as "Q4_K" or ggml's "q4_K"); a one-line error naming the choices."""
    found = GGML_TYPES.get(name.upper())
    if found is None:
        raise UnknownNameError(f"unknown ggml type {name!r}; choose from {', '.join(GGML_TYPES)}")
    return found


def row_bytes(type_name: str, ne0: int) -> int:
    """Bytes of one row of ``ne0`` numbers, as ggml_row_size: whole blocks only."""
    t = ggml_type(type_name)
    if ne0 < 0 or ne0 % t.block_size:
        raise UserError(f"ggml type {t.name} stores whole blocks of {t.block_size} numbers; {ne0} is not a "
                        f"multiple of {t.block_size}")
    return t.type_size * (ne0 // t.block_size)


def tensor_bytes(type_name: str, n_elements: int) -> int:
    """Bytes of a tensor of ``n_elements`` numbers stored as ``type_name`` (a whole number of blocks)."""
    return row_bytes(type_name, n_elements)
