"""Every number format the project knows, once: its bytes per element or storage rule, its compute
dtype and the GPU rate it runs at, with the source of each figure.

An element type (fp32, bf16, fp8, ...) stores ``element_bytes`` per number. A quantised weight
format stores ``element_bytes`` of codes per number plus, per ``group`` consecutive numbers, a
scale of ``scale_bytes`` and a zero point of ``zero_bytes``; with double quantization
(``nested``) one more scale of ``nested_scale_bytes`` per ``nested`` groups; and per tensor
``tensor_constant`` bytes of code tables. What stays unquantised (``kept``) is stored in the
``kept_in`` format. The matmuls of a format run in its ``compute`` format at the GPU rate
``rate`` (a key of ``catalogs.rates``' flops), or at any rate of ``runs_at`` when one is asked for.

``roles`` says where the planner accepts a format: ``compute`` (a rate of the GPU catalogue),
``weights`` (serving weights), ``kv`` (the KV cache), ``adapter`` (LoRA adapters), ``frozen_base``
(QLoRA's 4-bit base). A new format is one entry of ``FORMATS`` (and its test): every caller reads
its bytes, scales, compute dtype and rate from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..core.errors import UnknownNameError

# The GPU rate keys, in the order the catalogue lists them (catalogs/rates.py, a custom GPU's [flops]).
RATE_KEYS = ("fp32", "tf32", "bf16", "fp16", "fp8")
ROLES = ("compute", "weights", "kv", "adapter", "frozen_base")


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
    mixture: str = ""  # a llama.cpp file type ("Q4_K_M"): bytes per tensor from formats.gguf_ftypes

    @property
    def quantised(self) -> bool:
        """Whether numbers are stored as codes with group-wise scales."""
        return self.group > 0

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


_R = sympy.Rational
_FLOAT_NOTE = "Stored as is; the matmuls run at this type's peak unless another is asked for."
_WEIGHT_ONLY = ("bf16", "fp16")  # GPTQ/AWQ kernels dequantise to the 16-bit activations' type before the matmul

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
    Format("fp8", "8-bit float (E4M3 or E5M2)", _R(1), "fp8", "fp8", ("compute", "kv"),
           "pytorch", "torch.float8_e4m3fn", torch="float8_e4m3fn",
           note="A KV-cache element here; the per-tensor or per-head scales of an fp8 cache are not counted."),
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
    Format("nf4", "4-bit NormalFloat, blockwise absmax, double quantization (bitsandbytes)", _R(1, 2), "bf16",
           "bf16", ("frozen_base",), "bitsandbytes",
           "Linear4bit, quant_type nf4, blocksize 64, bnb_4bit_use_double_quant (measured: library/lora.py)",
           runs_at=("bf16",), group=64, scale_bytes=_R(1), scale_name="uint8 absmax", nested=256,
           nested_scale_bytes=_R(4), tensor_constant=_R(64 + 4 + 1024),
           kept="embeddings, norms and the LM head", kept_in="bf16",
           note="Per tensor: the 16-value NF4 code (64 bytes), the fp32 offset (4) and the 256-value dynamic code "
                "of the nested quantization (1024); the matmuls compute in bnb_4bit_compute_dtype (bf16)."),
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
