"""Every number format the project knows, once: its bytes per element or storage rule, its compute
dtype and the GPU rate it runs at, with the source of each figure.

An element type (fp32, bf16, fp8, ...) stores ``element_bytes`` per number. A quantised weight
format stores ``element_bytes`` of codes per number plus, per ``group`` consecutive numbers, a
scale of ``scale_bytes`` and a zero point of ``zero_bytes``; with double quantization
(``nested``) one more scale of ``nested_scale_bytes`` per ``nested`` groups; and per tensor
``tensor_constant`` bytes of code tables. What stays unquantised (``kept``) is stored in the
``kept_in`` format. The matmuls of a format run in its ``compute`` format at the GPU rate
``rate`` (a key of ``catalogs.rates``' flops), or at any rate of ``runs_at`` when one is asked for.

A weight format whose bytes need the matrix's shape (``rule``: one scale per tensor, per output row,
per 2-D block, per group of inputs of each output row, or blocks over the flattened tensor, with
GPTQ's ``g_idx`` per input column) gives them with ``matrix_bytes(rows_out, cols_in)``, exactly as
its library stores an ``out × in`` weight; ``networks.stored`` sums them over a network's matrices.
``kept_roles`` says which matrices such a format leaves unquantised (norms and biases always are).
A KV-cache element type may store ``layer_bytes`` per layer besides its elements (fp8's k/v scales).

``roles`` says where the planner accepts a format: ``compute`` (a rate of the GPU catalogue),
``weights`` (serving weights), ``kv`` (the KV cache), ``adapter`` (LoRA adapters), ``frozen_base``
(QLoRA's 4-bit base). A new format is one entry of ``FORMATS`` (and its test): every caller reads
its bytes, scales, compute dtype and rate from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..core import sources
from ..core.errors import UnknownNameError
from . import ggml

# The GPU rate keys, in the order the catalogue lists them (catalogs/rates.py, a custom GPU's [flops]).
RATE_KEYS = ("fp32", "tf32", "bf16", "fp16", "fp8")
ROLES = ("compute", "weights", "kv", "adapter", "frozen_base")
# how a shaped weight format stores an out × in matrix (Format.rule; "" : per element count, tensor_bytes)
RULES = ("", "flat", "tensor", "row", "block", "groups")
# the matrices a network names, by role (networks.stored): what a format may leave unquantised
MATRIX_ROLES = ("embedding", "lm_head", "router", "attention", "experts", "shared", "mlp", "other")
_KEEP = ("embedding", "lm_head", "router")  # what every quantised checkpoint format here keeps (routers: tiny)

for _id, _citation, _url in (
    ("autogptq", "AutoGPTQ 0.7.1 auto_gptq/nn_modules/qlinear/qlinear_cuda.py QuantLinear (gptqmodel's "
     "TorchQuantLinear the same): qweight int32 [in·b/32, out], qzeros int32 [⌈in/g⌉, out·b/32], scales fp16 "
     "[⌈in/g⌉, out], g_idx int32 [in]", "https://github.com/AutoGPTQ/AutoGPTQ"),
    ("autoawq", "AutoAWQ 0.2 awq/modules/linear/gemm.py WQLinear_GEMM: qweight int32 [in, out·b/32], qzeros int32 "
     "[in/g, out·b/32], scales fp16 [in/g, out]; no g_idx", "https://github.com/casper-hansen/AutoAWQ"),
    ("bitsandbytes", "bitsandbytes 0.45 bitsandbytes/nn/modules.py Params4bit / Int8Params and functional.py "
     "quantize_4bit (blocksize 64, fp32 absmax, 16-value code; compress_statistics: absmax as uint8 in blocks of "
     "256 with an fp32 absmax each, a 256-value code and an fp32 offset), int8_vectorwise_quant (fp32 SCB per row)",
     "https://github.com/bitsandbytes-foundation/bitsandbytes"),
    ("deepseek-v3-fp8", "DeepSeek-V3 README_WEIGHTS.md, FP8 weights: e4m3, weight_block_size [128, 128], one float32 "
     "weight_scale_inv per 128×128 block", "https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md"),
    ("ocp-mx", "OCP Microscaling Formats (MX) v1.0: MXFP4 = 32 E2M1 elements sharing one E8M0 scale; gpt-oss stores "
     "experts as *_blocks uint8 [.., out, in/32, 16] and *_scales uint8 [.., out, in/32] (OpenAI, gpt-oss model "
     "card arXiv 2508.10925)", "https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf"),
    ("nvfp4", "NVIDIA TensorRT Model Optimizer NVFP4 export: weight uint8 [out, in/2] (E2M1), weight_scale "
     "float8_e4m3fn [out, in/16], weight_scale_2 float32 and input_scale float32 per tensor",
     "https://github.com/NVIDIA/TensorRT-Model-Optimizer"),
    ("compressed-tensors", "compressed-tensors / vLLM fp8 checkpoints: float8_e4m3fn weight, float32 weight_scale "
     "per tensor (strategy tensor) or per output row (strategy channel); an fp8 KV cache adds float32 k_scale and "
     "v_scale to each attention layer", "https://github.com/neuralmagic/compressed-tensors"),
):
    if _id not in sources.SOURCES:
        sources.register(_id, _citation, _url)


@dataclass(frozen=True)
class Format:
    """One number format: how a number is stored, what its matmuls compute in and at which GPU rate."""

    name: str
    title: str
    element_bytes: sympy.Rational  # bytes per number (the codes, for a quantised format)
    compute: str  # the format its matmuls run in (itself for a float type)
    rate: str  # the GPU rate key (RATE_KEYS) its matmuls run at by default
    roles: tuple[str, ...]
    source: str  # a core.sources id (or the library that defines the format)
    where: str  # where in the source the figures are
    runs_at: tuple[str, ...] = RATE_KEYS  # rate keys its matmuls can run at when one is asked for
    group: int = 0  # numbers per quantisation group or block (0: not quantised)
    scale_bytes: sympy.Rational = sympy.Integer(0)  # per group
    scale_name: str = ""  # what the scale is, for titles ("fp16")
    zero_bytes: sympy.Rational = sympy.Integer(0)  # zero point per group (0: symmetric)
    nested: int = 0  # double quantization: groups per nested scale (0: none)
    nested_scale_bytes: sympy.Rational = sympy.Integer(0)
    tensor_constant: sympy.Rational = sympy.Integer(0)  # bytes per tensor (code tables, offsets)
    kept: str = ""  # what a quantised model keeps unquantised
    kept_in: str = ""  # the format it keeps them in
    torch: str = ""  # the torch dtype's attribute name ("" when torch has none)
    note: str = ""
    rule: str = ""  # how an out × in matrix is stored (RULES); "": per element count (tensor_bytes)
    block: int = 0  # rule "block": the side of the square blocks that share one scale
    index_bytes: sympy.Rational = sympy.Integer(0)  # per input column (GPTQ's g_idx)
    kept_roles: tuple[str, ...] = ()  # the matrix roles (MATRIX_ROLES) a shaped format leaves unquantised
    layer_bytes: sympy.Rational = sympy.Integer(0)  # as a KV-cache element: bytes per layer (fp8's k/v scales)
    multiple: tuple[int, int] = (1, 1)  # what out and in must be multiples of (0: the group size), as the library asks
    mixture: str = ""  # a llama.cpp file type ("Q4_K_M"): bytes per tensor from formats.gguf_ftypes

    @property
    def quantised(self) -> bool:
        """Whether numbers are stored as codes with scales (group-wise, per row, per block or per tensor)."""
        return self.group > 0 or bool(self.rule)

    @property
    def shaped(self) -> bool:
        """Whether a weight's bytes follow this format's matrix rule (``matrix_bytes``), not a per-number rate."""
        return bool(self.rule)

    @property
    def bits(self) -> sympy.Rational:
        """Bits per number (the codes)."""
        return 8 * self.element_bytes

    @property
    def kept_bytes(self) -> sympy.Rational:
        """Bytes per number of what stays unquantised (``kept``): the ``kept_in`` format's, else this one's."""
        return FORMATS[self.kept_in].element_bytes if self.quantised else self.element_bytes

    def tensor_bytes(self, elements: sympy.Expr) -> sympy.Expr:
        """Bytes of one tensor of ``elements`` numbers: codes, scales per (partial) group, nested scales, constants."""
        if not self.quantised:
            return self.element_bytes * elements
        groups = sympy.ceiling(elements / self.group)
        out = self.element_bytes * elements + (self.scale_bytes + self.zero_bytes) * groups + self.tensor_constant
        if self.nested:
            out += self.nested_scale_bytes * sympy.ceiling(groups / self.nested)
        return out

    def refusal(self, rows_out: int, cols_in: int, group: int | None = None) -> str:
        """Why the format's library cannot store an ``rows_out × cols_in`` weight ("" when it can)."""
        need = tuple(m or (group if group and group > 0 else self.group) for m in self.multiple)
        if rows_out % need[0] or cols_in % need[1]:
            return (f"{self.name} stores a weight whose outputs are a multiple of {need[0]} and inputs a multiple of "
                    f"{need[1]} ({self.where})")
        return ""

    def matrix_bytes(self, rows_out: sympy.Expr, cols_in: sympy.Expr, group: int | None = None) -> sympy.Expr:
        """Bytes of one ``rows_out × cols_in`` weight as the format stores it (``group`` overrides the group size)."""
        o, i = sympy.sympify(rows_out), sympy.sympify(cols_in)
        codes = self.element_bytes * o * i
        if self.rule in ("", "flat"):  # blocks over the flattened tensor (bitsandbytes), or a per-number rate
            return self.tensor_bytes(o * i)
        if self.rule == "tensor":
            return codes + self.scale_bytes + self.tensor_constant
        if self.rule == "row":
            return codes + self.scale_bytes * o + self.tensor_constant
        if self.rule == "block":  # ``group``: the config's block side (weight_block_size)
            side = group or self.block
            blocks = sympy.ceiling(o / side) * sympy.ceiling(i / side)
            return codes + self.scale_bytes * blocks + self.tensor_constant
        # "groups": along the input of each output row (group -1: one group per row, GPTQ's group_size -1)
        groups = 1 if group == -1 else sympy.ceiling(i / (group or self.group))
        return codes + (self.scale_bytes + self.zero_bytes) * o * groups + self.index_bytes * i + self.tensor_constant


_R = sympy.Rational
_FLOAT_NOTE = "Stored as is; the matmuls run at this type's peak unless another is asked for."
_WEIGHT_ONLY = ("bf16", "fp16")  # GPTQ/AWQ kernels dequantise to the 16-bit activations' type before the matmul

_KEPT_TEXT = "embeddings, LM head, norms, biases and MoE routers"
_FP8_NOTE = ("W8A8: the activations stay bf16 (compute) and are cast per matmul, which runs at the fp8 rate "
             "(activation_scheme dynamic: scales computed per token; static: a stored fp32 input_scale per layer).")


def _bnb4(quant: str, dq: bool) -> Format:
    """bitsandbytes 4-bit (load_in_4bit): ``quant`` codes in blocks of 64 with fp32 absmax, or double-quantized."""
    name = quant + ("-dq" if dq else "")
    code = {"nf4": "NormalFloat", "fp4": "FP4 (E2M1)"}[quant]
    common = dict(runs_at=("bf16",), group=64, kept="embeddings, norms and the LM head", kept_in="bf16", rule="flat",
                  kept_roles=_KEEP)
    if dq:
        return Format(name, f"4-bit {code}, blockwise absmax, double quantization (bitsandbytes)", _R(1, 2), "bf16",
                      "bf16", ("weights",), "bitsandbytes", f"Linear4bit, quant_type {quant}, blocksize 64, "
                      "bnb_4bit_use_double_quant", scale_bytes=_R(1), scale_name="uint8 absmax", nested=256,
                      nested_scale_bytes=_R(4), tensor_constant=_R(64 + 4 + 1024),
                      note="As nf4-dq, with the FP4 code.", **common)
    return Format(name, f"4-bit {code}, one fp32 absmax per block of 64 (bitsandbytes)", _R(1, 2), "bf16", "bf16",
                  ("weights",), "bitsandbytes", f"Linear4bit, quant_type {quant}, blocksize 64", scale_bytes=_R(4),
                  scale_name="fp32 absmax", tensor_constant=_R(64),
                  note="Per block of 64 numbers of the flattened weight: one fp32 absmax; per tensor the 16-value "
                       "code (64 bytes). The serialized quant_state's JSON bytes are not counted.", **common)


def _gptq(bits: int) -> Format:
    """GPTQ at ``bits`` bits, group 128 (AutoGPTQ's QuantLinear): packed codes, zero points, scales and g_idx."""
    return Format(f"gptq-int{bits}", f"GPTQ {bits}-bit: packed int32 codes and zero points, fp16 scales per group of "
                  "128, int32 g_idx", _R(bits, 8), "bf16", "bf16", ("weights",), "autogptq",
                  f"QuantLinear, bits {bits}, group_size 128", runs_at=_WEIGHT_ONLY, rule="groups", group=128,
                  scale_bytes=_R(2), scale_name="fp16", zero_bytes=_R(bits, 8), index_bytes=_R(4), kept=_KEPT_TEXT,
                  multiple=(32, 32),
                  kept_in="fp16", kept_roles=_KEEP,
                  note="Per group of inputs of each output row: one fp16 scale and one packed zero point; one int32 "
                       "g_idx per input column (stored whatever desc_act says; desc_act only orders the groups).")


def _ggml_kv(name: str) -> Format:
    """A llama.cpp KV-cache block type (--cache-type-k/-v): bytes per number = block bytes / block size."""
    t = ggml.ggml_type(name)
    return Format(name, f"llama.cpp KV cache {name}: {t.type_size} bytes per block of {t.block_size} ({t.layout})",
                  t.bytes_per_weight, "fp16", "fp16", ("kv",), ggml.SOURCE, t.where,
                  note="A KV-cache element of llama.cpp (a quantized V cache needs flash attention).")


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("fp32", "IEEE single precision", _R(4), "fp32", "fp32", ("compute", "weights", "kv", "adapter"),
           "pytorch", "torch.float32", torch="float32", note=_FLOAT_NOTE),
    Format("tf32", "TensorFloat-32: fp32 storage, 10-bit-mantissa tensor-core matmuls", _R(4), "tf32", "tf32",
           ("compute",), "pytorch", "torch.backends.cuda.matmul.allow_tf32 (fp32 tensors)",
           note="A compute mode of fp32 tensors (A100 and later), not a storage type."),
    Format("fp16", "IEEE half precision", _R(2), "fp16", "fp16", ("compute", "weights", "kv"),
           "pytorch", "torch.float16", torch="float16", note=_FLOAT_NOTE),
    Format("bf16", "bfloat16", _R(2), "bf16", "bf16", ("compute", "weights", "kv", "adapter"),
           "pytorch", "torch.bfloat16", torch="bfloat16", note=_FLOAT_NOTE),
    Format("fp8", "8-bit float (E4M3 or E5M2); as weights, one fp32 scale per tensor", _R(1), "bf16", "fp8",
           ("compute", "weights", "kv"), "pytorch", "torch.float8_e4m3fn; weights: compressed-tensors strategy "
           "tensor (weight_scale float32 [1])", torch="float8_e4m3fn", rule="tensor", scale_bytes=_R(4),
           scale_name="fp32", kept=_KEPT_TEXT, kept_in="bf16", kept_roles=_KEEP, layer_bytes=_R(8),
           note="As weights (W8A8, activation_scheme dynamic or static): the activations stay bf16 (compute) and "
                "are cast per matmul, which runs at the fp8 rate. As a KV-cache element: 1 byte per number plus "
                "k_scale and v_scale, one float32 each per attention layer (layer_bytes)."),
    Format("int8", "8-bit integer codes, group-wise fp16 scales (GPTQ/AWQ)", _R(1), "bf16", "bf16",
           ("weights", "kv"), "frantar2022", "group size 128 (GPTQ's and AWQ's default)", runs_at=_WEIGHT_ONLY,
           group=128, scale_bytes=_R(2), scale_name="fp16", kept="token embeddings and LM head", kept_in="fp16",
           torch="int8",
           note="Weight-only: dequantised to 16 bits before each matmul, so the matmuls run at the bf16 "
                "(or fp16) peak. As a KV-cache element, its scales are not counted. LLM.int8's per-row fp32 "
                "scales are not modelled."),
    Format("int4", "4-bit integer codes, group-wise fp16 scales and 4-bit zero points (GPTQ/AWQ)", _R(1, 2),
           "bf16", "bf16", ("weights", "kv"), "frantar2022", "group size 128 (GPTQ's and AWQ's default)",
           runs_at=_WEIGHT_ONLY, group=128, scale_bytes=_R(2), scale_name="fp16", zero_bytes=_R(1, 2),
           kept="token embeddings and LM head", kept_in="fp16",
           note="Weight-only: dequantised to 16 bits before each matmul, so the matmuls run at the bf16 "
                "(or fp16) peak. As a KV-cache element, its scales are not counted."),
    _bnb4("nf4", False),
    Format("nf4-dq", "4-bit NormalFloat, blockwise absmax, double quantization (bitsandbytes)", _R(1, 2), "bf16",
           "bf16", ("weights", "frozen_base"), "bitsandbytes",
           "Linear4bit, quant_type nf4, blocksize 64, bnb_4bit_use_double_quant (measured: library/lora.py)",
           runs_at=("bf16",), group=64, scale_bytes=_R(1), scale_name="uint8 absmax", nested=256,
           nested_scale_bytes=_R(4), tensor_constant=_R(64 + 4 + 1024),
           kept="embeddings, norms and the LM head", kept_in="bf16", rule="flat", kept_roles=_KEEP,
           note="Per tensor: the 16-value NF4 code (64 bytes), the fp32 offset (4) and the 256-value dynamic code "
                "of the nested quantization (1024); the matmuls compute in bnb_4bit_compute_dtype (bf16). QLoRA's "
                "frozen base. The serialized quant_state's JSON bytes are not counted."),
    _bnb4("fp4", False),
    _bnb4("fp4", True),
    Format("bnb-int8", "LLM.int8(): int8 weights, one fp32 scale per output row (bitsandbytes)", _R(1), "bf16", "bf16",
           ("weights",), "bitsandbytes", "Int8Params: CB int8 [out, in], SCB float32 [out]", runs_at=_WEIGHT_ONLY,
           rule="row", scale_bytes=_R(4), scale_name="fp32", kept=_KEPT_TEXT, kept_in="bf16", kept_roles=_KEEP,
           note="load_in_8bit: row-wise absmax int8 with outlier columns computed in 16 bits (llm_int8_threshold); "
                "the outliers are not stored apart, so the file holds int8 codes and one fp32 scale per row."),
    Format("fp8-channel", "8-bit float weights, one fp32 scale per output row", _R(1), "bf16", "fp8",
           ("weights",), "compressed-tensors", "strategy channel: weight_scale float32 [out, 1]",
           runs_at=("fp8", "bf16", "fp16"), rule="row", scale_bytes=_R(4), scale_name="fp32", kept=_KEPT_TEXT,
           kept_in="bf16", kept_roles=_KEEP, note=_FP8_NOTE),
    Format("fp8-block", "8-bit float weights, one fp32 scale per 128×128 block (DeepSeek-V3)", _R(1), "bf16", "fp8",
           ("weights",), "deepseek-v3-fp8", "quantization_config weight_block_size [128, 128]; weight_scale_inv",
           runs_at=("fp8", "bf16", "fp16"), rule="block", block=128, scale_bytes=_R(4), scale_name="fp32",
           kept="embeddings, LM head, norms and the MoE router (gate)", kept_in="bf16", kept_roles=_KEEP,
           note=_FP8_NOTE + " DeepSeek-V3's checkpoint keeps its embeddings, head, norms and router gate in bf16."),
    Format("mxfp4", "OCP MXFP4: 32 E2M1 codes sharing one E8M0 scale", _R(1, 2), "bf16", "bf16", ("weights",),
           "ocp-mx", "MXFP4: block 32, E8M0 scale (8 bits); gpt-oss *_blocks / *_scales", runs_at=("bf16", "fp16"),
           rule="groups", group=32, scale_bytes=_R(1), scale_name="e8m0", kept=_KEPT_TEXT, kept_in="bf16", multiple=(1, 32),
           kept_roles=_KEEP,
           note="17 bytes per 32 weights (4.25 bits). gpt-oss quantises only its MoE experts: its "
                "quantization_config's modules_to_not_convert keeps attention, router, embeddings and LM head."),
    Format("nvfp4", "NVIDIA NVFP4: 16 E2M1 codes sharing one FP8 E4M3 scale, one fp32 scale per tensor", _R(1, 2),
           "bf16", "fp8", ("weights",), "nvfp4", "NVFP4: block 16, E4M3 scale; weight_scale_2 and input_scale fp32",
           runs_at=("fp8", "bf16", "fp16"), rule="groups", group=16, scale_bytes=_R(1), scale_name="fp8 e4m3",
           multiple=(1, 16),
           tensor_constant=_R(8), kept=_KEPT_TEXT, kept_in="bf16", kept_roles=_KEEP,
           note="9 bytes per 16 weights (4.5 bits) plus, per tensor, the fp32 global weight scale and the fp32 input "
                "scale. The 4-bit matmul rate is not in the GPU catalogue: time counts it at the fp8 rate."),
    *(_gptq(bits) for bits in (2, 3, 4, 8)),
    Format("awq-int4", "AWQ 4-bit: packed int32 codes and zero points, fp16 scales per group of 128", _R(1, 2), "bf16",
           "bf16", ("weights",), "autoawq", "WQLinear_GEMM, w_bit 4, q_group_size 128", runs_at=_WEIGHT_ONLY,
           rule="groups", group=128, scale_bytes=_R(2), scale_name="fp16", zero_bytes=_R(1, 2), kept=_KEPT_TEXT,
           multiple=(8, 0),
           kept_in="fp16", kept_roles=_KEEP,
           note="Per group of 128 inputs of each output row: one fp16 scale and one packed 4-bit zero point; "
                "no g_idx (AWQ keeps the input order)."),
    *(_ggml_kv(name) for name in ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")),
)}


def names(role: str) -> tuple[str, ...]:
    """The formats that play ``role``, in table order."""
    if role not in ROLES:
        raise ValueError(f"unknown format role {role!r}; roles are {', '.join(ROLES)}")
    return tuple(f.name for f in FORMATS.values() if role in f.roles)


def get(name: str, role: str = "", what: str = "number format") -> Format:
    """The format called ``name`` (one that plays ``role`` when given); a one-line error naming the choices."""
    fmt = FORMATS.get(name)
    if fmt is None or (role and role not in fmt.roles):
        choices = names(role) if role else tuple(FORMATS)
        raise UnknownNameError(f"unknown {what} {name!r}; choose from {', '.join(_short(choices))}")
    return fmt


def _short(choices: tuple[str, ...]) -> tuple[str, ...]:
    """The choices with llama.cpp's file types as one entry, ``gguf:<FILETYPE>`` (they are 33)."""
    plain = tuple(c for c in choices if not c.startswith("gguf:"))
    return plain + (("gguf:<FILETYPE> (llama.cpp's file types: gguf:Q4_K_M, ...)",) if len(plain) < len(choices)
                    else ())


def nbytes(name: str) -> sympy.Rational:
    """Bytes per number of the format called ``name``."""
    return get(name).element_bytes


def torch_dtype(torch: object, name: str) -> object:
    """The torch dtype of the format called ``name`` (``torch`` is the imported module)."""
    fmt = get(name)
    if not fmt.torch:
        raise UnknownNameError(f"{name} has no torch dtype")
    return getattr(torch, fmt.torch)


# --- llama.cpp file types as weight formats: "gguf:Q4_K_M" (issue 27) -----------------------------------------
# One entry per FILE_TYPES name. A file type is a mixture of ggml types (formats.gguf_ftypes decides each
# tensor's); element_bytes is the default type's bytes per weight, a first estimate for callers that scale a
# parameter count, while networks.stored.stored_weights sums every tensor's exact bytes.
GGUF_PREFIX = "gguf:"


def _gguf_formats() -> dict[str, Format]:
    from .ggml import ggml_type
    from .gguf_ftypes import COMMIT, FILE_TYPES

    out = {}
    for ft in FILE_TYPES.values():
        name = GGUF_PREFIX + ft.name
        out[name] = Format(name, f"llama.cpp file type {ft.name} (most tensors {ft.default_type})",
                           ggml_type(ft.default_type).bytes_per_weight, "bf16", "bf16", ("weights",), "ggml",
                           f"llama.cpp src/llama-quant.cpp (commit {COMMIT[:12]}): llama_tensor_get_type",
                           runs_at=("bf16", "fp16"), mixture=ft.name,
                           note="A mixture: each tensor's ggml type follows llama-quantize's rules; norms stay F32.")
    return out


FORMATS.update(_gguf_formats())
