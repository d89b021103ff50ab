"""The GPU's fused attention on the meta device: what a CUDA step saves for SDPA (issue 29).

On the meta device ``F.scaled_dot_product_attention`` takes the reference path (the B·heads·L·S
scores are saved). On a CUDA GPU PyTorch's dispatcher (``select_sdp_backend`` in
aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, read at pytorch/pytorch@001f694) tries
flash attention, then memory-efficient attention, then the math (reference) path, and takes the
first whose checks pass. ``choose`` applies those checks to the meta tensors' sizes, dtypes,
strides and storage offsets; ``cuda_attention()`` then runs the chosen kernel's aten op as
``scaled_dot_product_attention`` in aten/src/ATen/native/transformers/attention.cpp does (flash:
head dims zero-padded to a multiple of 8; efficient: a boolean mask made additive and expanded to
B·heads·L·S), so that autograd saves what the CUDA backward saves: q, k, v, the output, its
logsumexp (B·heads·L fp32) and the philox seed and offset (flash: 16 + 8 bytes, its meta function in
torch/_meta_registrations.py; efficient: 8 + 8), and the mask for efficient attention. Two of the
efficient kernel's paddings are left out to keep the step's bytes a polynomial in the input sizes:
logsumexp's L rounded up to a multiple of 32 (at most 31 fp32 rows per head more) and the mask's S
rounded up to a multiple of 16 (``expanded_mask``).

Derived from the source, not measured (no GPU here). The GPU is assumed sm90 (H100/H200, ``SM90``);
``arch`` changes it: a plan with ``--gpu`` passes that GPU's compute capability (``catalogs.capabilities``). Not modelled: cuDNN attention, which torch tries first on sm90/sm100 when the
runtime cuDNN is newer than 9.15.0 (``check_prefer_cudnn_attention``): for mask-free attention its
meta function saves the same output, B·heads·L fp32 logsumexp and seeds as flash; with a mask it
keeps the mask as given. Grouped-query attention through efficient attention takes the reference
path here (flash takes it as given).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from .autocast import SDPA, cast_for

SM90 = (9, 0)  # the GPU assumed for --device cuda: H100 / H200 (compute capability 9.0)
FLASH_ARCH = ((8, 0), (12, 1))  # check_flash_attention_hardware_support: sm80..sm121
EFFICIENT_ARCH = ((5, 0), (12, 1))  # check_mem_efficient_hardware_support: sm50..sm121
FLASH_MAX_HEAD_DIM = 256  # check_head_dim_size_flash
FLASH_PAD = 8  # attention.cpp: pad_last_dim<8, false> before the flash kernel
SM86_89_120 = (((8, 6), (8, 9)), ((12, 0), (12, 1)))  # check_requires_grad_and_head_dim_gt192_constraints...


def _within(arch: tuple[int, int], bounds: tuple[tuple[int, int], tuple[int, int]]) -> bool:
    return bounds[0] <= arch <= bounds[1]


def _half(dtype: Any) -> bool:
    import torch

    return dtype in (torch.float16, torch.bfloat16)


def _requires_grad(a: dict[str, Any]) -> bool:
    """sdp_utils_cpp.h input_requires_grad: grad mode on and q, k or v requiring grad."""
    import torch

    return torch.is_grad_enabled() and any(a[n].requires_grad for n in ("query", "key", "value"))


def _dense(a: dict[str, Any], ignore_singleton: bool, gqa: bool) -> bool:
    """The checks both fused kernels share (sdp_utils_cpp.h): 4-d, nonzero lengths, batch and heads, last stride 1.

    ``gqa``: the kernel takes fewer key/value heads under ``enable_gqa`` (check_batch_size_and_num_heads_dense).
    """
    q, k, v = a["query"], a["key"], a["value"]
    if not (q.dim() == k.dim() == v.dim() == 4):
        return False
    if q.size(-2) == 0 or k.size(-2) == 0:
        return False
    if not (q.size(0) == k.size(0) == v.size(0)):
        return False
    if not all(t.stride(-1) == 1 or (ignore_singleton and t.size(-1) == 1) for t in (q, k, v)):
        return False
    return q.size(1) == k.size(1) == v.size(1) or (gqa and _gqa(a))


def _gqa(a: dict[str, Any]) -> bool:
    """check_grouped_query_attention: enable_gqa, k and v with the same heads, dividing the query's."""
    q, k, v = a["query"], a["key"], a["value"]
    return bool(a["enable_gqa"]) and k.size(1) == v.size(1) and q.size(1) % k.size(1) == 0


def can_flash(a: dict[str, Any], arch: tuple[int, int]) -> bool:
    """sdp_utils.cpp can_use_flash_attention (dense inputs, flash not runtime-disabled)."""
    q, k, v = a["query"], a["key"], a["value"]
    if a["attn_mask"] is not None:  # check_for_attn_mask
        return False
    d = q.size(-1)
    if not (d == k.size(-1) == v.size(-1) and d <= FLASH_MAX_HEAD_DIM):
        return False
    if not _within(arch, FLASH_ARCH):
        return False
    if _requires_grad(a) and any(_within(arch, r) for r in SM86_89_120):
        if not (d <= 192 or (a["dropout_p"] == 0.0 and d > 224)):
            return False
    if a["is_causal"] and q.size(-2) != k.size(-2):  # check_flash_causal_non_square_seqlens
        return False
    if not (_half(q.dtype) and arch >= (8, 0)):  # check_dtypes_flash_attention (FA3 off by default)
        return False
    return _dense(a, ignore_singleton=True, gqa=True)


def gemm_alignment(dtype: Any, arch: tuple[int, int]) -> int:
    """sdp_utils.cpp minimum_gemm_alignment: elements a row must be a multiple of for efficient attention."""
    half = _half(dtype)
    tensor_cores = arch[0] >= 8 or (arch[0] >= 7 and half)
    mn = 4 if arch[0] >= 8 else 1
    return max(mn, 128 // (16 if half else 32)) if tensor_cores else mn


def can_efficient(a: dict[str, Any], arch: tuple[int, int]) -> bool:
    """sdp_utils.cpp can_use_mem_efficient_attention (dense inputs); grouped-query heads not modelled."""
    import torch

    q, k, v = a["query"], a["key"], a["value"]
    if not _within(arch, EFFICIENT_ARCH):
        return False
    align = gemm_alignment(q.dtype, arch)
    dq, dv = q.size(-1), v.size(-1)
    if not (dq == k.size(-1) and dq > 0 and dv > 0 and dq % align == 0 and dv % align == 0):
        return False  # check_head_dim_size_mem_efficient
    if arch >= (8, 0) and any(t.storage_offset() % align for t in (q, k, v)):
        return False  # check_data_ptr_alignment_mem_efficient: storage offset · element size, aligned
    if not _dense(a, ignore_singleton=False, gqa=False):
        return False
    dtypes = (torch.float16, torch.float32, torch.bfloat16) if arch >= (8, 0) else (torch.float16, torch.float32)
    return q.dtype in dtypes


def rules(arch: tuple[int, int]) -> str:
    """What the dispatcher's checks do on ``arch`` that they do not on sm90, in a sentence (for a plan's note)."""
    if not _within(arch, EFFICIENT_ARCH):
        return "neither fused kernel runs there (flash needs sm80–sm121, memory-efficient sm50–sm121): the math path"
    if not _within(arch, FLASH_ARCH):
        return ("no flash attention (it needs sm80–sm121): memory-efficient attention where its checks pass "
                "(fp16 or fp32, no bf16 below sm80), else the math path")
    if any(_within(arch, r) for r in SM86_89_120):
        return ("memory-efficient attention where flash needs head dims > 192 with gradients (flash's backward there "
                "takes up to 192, or above 224 without dropout), else flash as on sm90")
    return "flash where its checks pass, else memory-efficient, as on sm90"


def choose(a: dict[str, Any], arch: tuple[int, int] = SM90) -> str:
    """select_sdp_backend's answer for these arguments: "flash", "efficient" or "math"."""
    if can_flash(a, arch):
        return "flash"
    if can_efficient(a, arch):
        return "efficient"
    return "math"


def _flash(a: dict[str, Any]) -> Any:
    """attention.cpp's flash branch: head dims padded to a multiple of 8, the scale from the original one."""
    import torch
    import torch.nn.functional as F

    q, k, v = a["query"], a["key"], a["value"]
    d = q.size(-1)
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(d)
    pad = -d % FLASH_PAD
    if pad:
        q, k, v = (F.pad(t, (0, pad)) for t in (q, k, v))
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, a["dropout_p"], a["is_causal"], False,
                                                            scale=scale)[0]
    return out[..., :d] if pad else out


def expanded_mask(mask: Any, query: Any, key: Any) -> Any:
    """attention.cpp preprocess_mask, S unpadded: the mask expanded to B·heads·L·S and materialised.

    The kernel pads S to a multiple of 16 (``pad_bias``) and keeps a broadcast mask unexpanded when S
    already is one; both would make the bytes step with S (not a polynomial), so the plan keeps
    B·heads·L·S: at most 15 columns fewer than the padded mask.
    """
    return mask.expand(query.size(0), query.size(1), query.size(2), key.size(2)).contiguous()


@functools.cache
def _efficient_function() -> Any:
    """An autograd function that saves what ``_scaled_dot_product_efficient_attention``'s backward reads.

    q, k, v, the mask, the output, logsumexp and the philox seed and offset, as derivatives.yaml
    gives them; the logsumexp kept B·heads·L (the meta function pads L to a multiple of 32, at most
    31 rows of fp32 more per head) so that the step's bytes stay a polynomial in the input sizes.
    The backward is the kernel's own meta function.
    """
    import torch

    class _Efficient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, mask, dropout_p, is_causal, scale):  # noqa: ANN001, ANN205
            out, lse, seed, offset = torch.ops.aten._scaled_dot_product_efficient_attention(
                q, k, v, mask, True, dropout_p, is_causal, scale=scale)
            lse = lse[..., :q.size(2)].contiguous()
            ctx.save_for_backward(q, k, v, mask, out, lse, seed, offset)
            ctx.options = (dropout_p, is_causal, scale)
            return out

        @staticmethod
        def backward(ctx, grad):  # noqa: ANN001, ANN205
            q, k, v, mask, out, lse, seed, offset = ctx.saved_tensors
            dropout_p, is_causal, scale = ctx.options
            wanted = [*ctx.needs_input_grad[:3], mask is not None and ctx.needs_input_grad[3]]
            grads = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
                grad, q, k, v, mask, out, lse, seed, offset, dropout_p, wanted, is_causal, scale=scale)
            return (*grads, None, None, None)

    return _Efficient


def _efficient(a: dict[str, Any]) -> Any:
    """attention.cpp's efficient branch: the mask made additive and expanded, logsumexp saved when grads flow."""
    import torch

    from .sdpa import additive_mask

    q, k, v = a["query"], a["key"], a["value"]
    mask = additive_mask(a["attn_mask"], q.dtype)
    if mask is not None:
        mask = expanded_mask(mask, q, k)
    if not _requires_grad(a):
        return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, mask, False, a["dropout_p"],
                                                                     a["is_causal"], scale=a["scale"])[0]
    return _efficient_function().apply(q, k, v, mask, a["dropout_p"], a["is_causal"], a["scale"])


def cuda_attention(arch: tuple[int, int] = SM90) -> Any:
    """A mode in which the meta device runs the kernel a CUDA GPU of ``arch`` would pick for each SDPA call."""
    import torch
    from torch.overrides import TorchFunctionMode

    from .mha import forward as mha_forward
    from .mha import through
    from .sdpa import sdpa_arguments

    sdpa = torch.nn.functional.scaled_dot_product_attention
    mha = mha_forward()

    class _CudaAttention(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            if func is mha:  # its SDPA call runs where this mode is popped: see mha.py
                return through(lambda a, k: self.__torch_function__(sdpa, types, a, k))(*args, **kwargs)
            if func is not sdpa:
                return func(*args, **kwargs)
            args, kwargs = cast_for(SDPA, args, kwargs)  # autocast casts before SDPA chooses
            a = sdpa_arguments(args, kwargs)
            if a["query"].device.type != "meta":
                return func(*args, **kwargs)
            backend = choose(a, arch)
            if backend == "flash":
                return _flash(a)
            if backend == "efficient":
                return _efficient(a)
            return func(*args, **kwargs)

    return _CudaAttention()
