"""``torch.autocast``'s cast policy on the meta device: what bf16-mixed and fp16-mixed steps run (issue 29).

Real autocast never reaches a meta tensor (its cast checks the tensor's device: CPU or CUDA), so
``autocast(dtype, policy)`` runs the same policy at the same place: as Python kernels at an autocast
dispatch key no backend of this process uses (``AutocastIPU``, ``AutocastHPU`` or
``AutocastPrivateUse1``), switched on for this thread only while the context is open. An autocast key
sits above autograd, as the real one does: the casts are recorded by autograd, so a matmul saves
its 16-bit copies exactly as under real autocast; every operator not in the lists falls through,
and an operator made of others (``cross_entropy_loss`` on CUDA) reaches the lists through its parts.

The policy (``CPU``, ``CUDA``) is PyTorch's own, op for op, as ``aten/src/ATen/autocast_mode.cpp``
and ``autocast_mode.h`` declare it: ``lower`` casts every floating argument to the 16-bit dtype,
``fp32`` to float32, ``set_dtype`` passes ``dtype=float32`` to a reduction or softmax given a
floating first argument and no dtype, ``append_dtype`` calls ``norm``'s dtype overload, ``promote``
casts to the widest floating type among the arguments, ``banned`` raises (CUDA's
``binary_cross_entropy``). Sources: the CPU lists from ``autocast_mode.cpp`` at pytorch/pytorch commit
008ec6b1840c94ff6d0f685bc10fbf585167c673 (``TORCH_LIBRARY_IMPL(aten, AutocastCPU, m)``), the CUDA lists
from ``AT_FORALL_LOWER_PRECISION_FP``, ``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``,
``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE`` and ``AT_FORALL_PROMOTE`` in torch 2.13.0's
``torch/include/ATen/autocast_mode.h`` (git cf30153c4c131c8164ee7798e5022d810682e2cb) plus the two
cuDNN convolutions of the .cpp; each list's operators are the ones torch 2.13.0 registers at
``AutocastCPU`` / ``AutocastCUDA`` (a test compares them). The weight cache is autocast's
``cached_cast``: a 16-bit cast of an fp32 leaf that requires grad and is not a view is made once per
region and held until the region ends.

The CPU policy is checked against real ``torch.autocast("cpu")`` steps; the CUDA policy is derived
from the source and not measured (this package's tests run on a CPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

LOWER, FP32, SET_DTYPE, APPEND_DTYPE, PROMOTE, BANNED = "lower", "fp32", "set_dtype", "append_dtype", "promote", "banned"
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}  # the 16-bit dtypes autocast computes in

CPU: dict[str, str] = {
    LOWER: "conv1d conv1d.padding conv2d conv2d.padding conv3d conv3d.padding bmm mm linalg_vecdot baddbmm addmm "
           "_addmm_activation addbmm linear _convolution.deprecated matmul conv_tbc mkldnn_rnn_layer conv_transpose1d "
           "conv_transpose2d.input conv_transpose3d.input prelu scaled_dot_product_attention "
           "_native_multi_head_attention",
    FP32: "avg_pool3d binary_cross_entropy grid_sampler polar prod prod.dim_int quantile quantile.scalar nanquantile "
          "nanquantile.scalar stft stft.center cdist grid_sampler_2d _grid_sampler_2d_cpu_fallback grid_sampler_3d "
          "trace view_as_complex cholesky cholesky_inverse cholesky_solve inverse lu_solve orgqr ormqr pinverse "
          "max_pool3d max_unpool2d max_unpool3d adaptive_avg_pool3d reflection_pad1d reflection_pad2d "
          "replication_pad1d replication_pad2d replication_pad3d mse_loss cosine_embedding_loss nll_loss nll_loss2d "
          "hinge_embedding_loss poisson_nll_loss smooth_l1_loss cross_entropy_loss l1_loss huber_loss "
          "margin_ranking_loss soft_margin_loss triplet_margin_loss multi_margin_loss ctc_loss.IntList "
          "ctc_loss.Tensor kl_div multilabel_margin_loss binary_cross_entropy_with_logits fft_fft fft_ifft fft_fft2 "
          "fft_ifft2 fft_fftn fft_ifftn fft_rfft fft_irfft fft_rfft2 fft_irfft2 fft_rfftn fft_irfftn fft_hfft "
          "fft_ihfft linalg_cond linalg_cond.p_str linalg_matrix_rank linalg_matrix_rank.tol_tensor "
          "linalg_matrix_rank.atol_rtol_tensor linalg_matrix_rank.atol_rtol_float linalg_solve linalg_cholesky "
          "linalg_svdvals linalg_eigvals linalg_eigvalsh linalg_inv linalg_householder_product linalg_tensorinv "
          "linalg_tensorsolve fake_quantize_per_tensor_affine geqrf _lu_with_info qr svd triangular_solve "
          "fractional_max_pool2d fractional_max_pool3d adaptive_max_pool3d multilabel_margin_loss_forward linalg_qr "
          "linalg_cholesky_ex linalg_svd linalg_eig linalg_eigh linalg_lstsq linalg_inv_ex",
    PROMOTE: "stack cat index_copy",
}

CUDA: dict[str, str] = {
    LOWER: "_convolution.deprecated _convolution conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d.input "
           "conv_transpose3d.input convolution prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear addbmm "
           "baddbmm bmm chain_matmul linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell "
           "rnn_tanh_cell rnn_relu_cell _scaled_dot_product_flash_attention scaled_dot_product_attention "
           "cudnn_convolution cudnn_convolution_transpose",
    FP32: "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow.Tensor_Scalar "
          "pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm rms_norm group_norm frobenius_norm.dim "
          "nuclear_norm nuclear_norm.dim cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d "
          "hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss "
          "multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss "
          "binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp upsample_nearest1d "
          "_upsample_nearest_exact1d upsample_nearest2d _upsample_nearest_exact2d upsample_nearest3d "
          "_upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa "
          "upsample_trilinear3d upsample_bicubic2d _upsample_bicubic2d_aa",
    SET_DTYPE: "prod prod.dim_int softmax.int log_softmax.int cumprod cumsum linalg_vector_norm linalg_matrix_norm "
               "linalg_matrix_norm.str_ord sum sum.dim_IntList",
    APPEND_DTYPE: "norm.Scalar norm.ScalarOpt_dim",
    PROMOTE: "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add",
    BANNED: "binary_cross_entropy",
}
APPENDED = {"norm.Scalar": "ScalarOpt_dtype", "norm.ScalarOpt_dim": "ScalarOpt_dim_dtype"}  # the dtype overloads
SDPA = "scaled_dot_product_attention"
KEYS = ("AutocastIPU", "AutocastHPU", "AutocastPrivateUse1")  # autocast keys this process may not use
BANNED_TEXT = ("binary_cross_entropy is unsafe to autocast (CUDA autocast refuses it): use "
               "binary_cross_entropy_with_logits")


def policy(device: str) -> dict[str, str]:
    """Operator ("name" or "name.overload") -> its cast policy on ``device`` ("cpu"; anything else: CUDA's)."""
    lists = CPU if device == "cpu" else CUDA
    return {op: how for how, ops in lists.items() for op in ops.split()}


class _Region:
    """The open region: its policy, its 16-bit dtype and the weight cache (``cached_cast``)."""

    def __init__(self) -> None:
        self.ops: dict[str, str] = {}
        self.lower: Any = None
        self.cache: dict[int, tuple[Any, Any]] = {}  # id(weight) -> (weight, its 16-bit copy)


_REGION = _Region()
_KEY: list[Any] = []  # the dispatch key the kernels are registered at, once per process
_LIBRARIES: list[Any] = []  # the registrations, kept alive


def _eligible(t: Any) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


def _cast(to: Any, t: Any) -> Any:
    """``cached_cast``: ``t`` in ``to`` where eligible; a weight's 16-bit copy made once per region."""
    import torch

    if isinstance(t, (list, tuple)):
        return type(t)(_cast(to, x) for x in t)
    if not _eligible(t) or t.dtype == to:
        return t
    cache = (to == _REGION.lower and t.dtype == torch.float32 and t.requires_grad and t.is_leaf
             and not t._is_view())
    if not cache:
        return t.to(to)
    if id(t) not in _REGION.cache:
        _REGION.cache[id(t)] = (t, t.to(to))
    return _REGION.cache[id(t)][1]


def _widest(args: Any) -> Any:
    """``promote_type``: float32 where any floating argument is, else the 16-bit dtype."""
    import torch

    flat = [x for a in args for x in (a if isinstance(a, (list, tuple)) else (a,))]
    return torch.float32 if any(_eligible(x) and x.dtype == torch.float32 for x in flat) else _REGION.lower


def _with_dtype(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``set_opt_dtype``: dtype=float32 where the call gives none."""
    import torch

    names = [a.name for a in op._schema.arguments]
    where = names.index("dtype")
    if where < len(args):
        if args[where] is None:
            args = (*args[:where], torch.float32, *args[where + 1:])
    elif kwargs.get("dtype") is None:
        kwargs = {**kwargs, "dtype": torch.float32}
    return args, kwargs


def apply(name: str, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``op`` (the operator ``name``) as autocast's wrapper for it runs, the region's policy applied."""
    import torch

    how = _REGION.ops.get(name)
    if how == LOWER or how == FP32 or how == PROMOTE:
        to = _REGION.lower if how == LOWER else torch.float32 if how == FP32 else _widest((*args, *kwargs.values()))
        args = tuple(_cast(to, a) for a in args)
        kwargs = {k: _cast(to, v) for k, v in kwargs.items()}
    elif how in (SET_DTYPE, APPEND_DTYPE) and args and _eligible(args[0]):
        if how == APPEND_DTYPE:
            op = getattr(torch.ops.aten.norm, APPENDED[name])
            return op(*args, **kwargs, dtype=torch.float32)
        args, kwargs = _with_dtype(op, args, kwargs)
    elif how == BANNED:
        raise RuntimeError(BANNED_TEXT)
    return op(*args, **kwargs)


def cast_for(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of a call of ``name`` as the open region casts them (unchanged outside a region).

    For a Python-level mode that runs before the dispatcher (``kernels.cpu_attention`` chooses SDPA's
    kernel from its inputs' dtype, which autocast has changed by then on a real device).
    """
    how = _REGION.ops.get(name)
    if how != LOWER:
        return args, kwargs
    with _excluded():
        return tuple(_cast(_REGION.lower, a) for a in args), {k: _cast(_REGION.lower, v) for k, v in kwargs.items()}


def _excluded() -> Any:
    import torch

    return torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY[0]))


def _kernel(name: str, op: Any) -> Any:
    def run(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if name not in _REGION.ops:  # the other device's operator: a fallthrough (its parts still reach the policy)
            return op.redispatch(keyset.remove(_KEY[0]), *args, **kwargs)
        with _excluded():
            return apply(name, op, args, kwargs)

    return run


def _free_key() -> Any:
    """An autocast dispatch key no backend here registers kernels at (the policy's kernels go there)."""
    import torch

    for name in KEYS:
        key = getattr(torch._C.DispatchKey, name, None)
        if key is not None and not any(torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", name)
                                       for op in ("linear", "mm", "softmax.int")):
            return key
    raise RuntimeError("every autocast dispatch key is in use in this process: mixed precision cannot be probed")


def _operator(name: str) -> Any:
    import torch

    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    return None if packet is None else getattr(packet, overload or "default", None)


def _register() -> Any:
    """The kernels of both policies at a free autocast key, registered once (a fallthrough for every other op)."""
    import torch
    from torch.library import Library, fallthrough_kernel

    if _KEY:
        return _KEY[0]
    key = _free_key()
    name = str(key).split(".")[-1]
    if not torch._C._dispatch_has_backend_fallback(key):
        fallback = Library("_", "IMPL")
        fallback.fallback(fallthrough_kernel, name)
        _LIBRARIES.append(fallback)
    _KEY.append(key)
    lib = Library("aten", "IMPL")
    for op_name in sorted(set(policy("cpu")) | set(policy("cuda"))):
        op = _operator(op_name)
        if op is not None:
            lib.impl(op_name, _kernel(op_name, op), name, with_keyset=True)
    _LIBRARIES.append(lib)
    return key


@contextlib.contextmanager
def autocast(dtype: str | None, device: str | None) -> Iterator[None]:
    """Within it, operators on meta tensors run ``torch.autocast``'s policy for ``device`` in ``dtype``.

    ``dtype``: "bfloat16" or "float16" (None: no autocast, nothing changes); ``device``: "cpu" for the
    CPU's policy, anything else (a CUDA GPU's kernels, or the default path) for CUDA's. The weight cache
    ends with the region, as real autocast's does when its outermost region exits.
    """
    import torch

    if dtype is None:
        yield
        return
    key = _register()
    _REGION.ops, _REGION.lower, _REGION.cache = policy(device or "cuda"), getattr(torch, dtype), {}
    excluded = torch._C._dispatch_tls_is_dispatch_key_excluded(key)
    torch._C._dispatch_tls_set_dispatch_key_excluded(key, False)
    try:
        with torch._C._IncludeDispatchKeyGuard(key):
            yield
    finally:
        torch._C._dispatch_tls_set_dispatch_key_excluded(key, excluded)
        _REGION.ops, _REGION.lower, _REGION.cache = {}, None, {}
