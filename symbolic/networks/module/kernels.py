"""The CPU's fused attention on the meta device: what ``--device cpu`` saves for SDPA (issue 29).

On the meta device ``F.scaled_dot_product_attention`` takes the reference path (matmul, softmax,
matmul: the scores are saved, B·heads·L·S of them). On the CPU it asks ``torch._fused_sdp_choice``
and, where that answers flash attention (no dropout, 4-d inputs, equal head sizes...), runs
``aten._scaled_dot_product_flash_attention_for_cpu``, which saves the output and its logsumexp
(B·heads·L fp32) beside q, k, v and the mask: 15-27 % fewer saved bytes in a tiny ViT or Whisper.
``cpu_attention()`` makes the meta device do the same: it asks the CPU's own choice function (on
CPU tensors of the same sizes, dtypes and last-dimension strides, expanded from one row, so
nothing of the real size is allocated) and, where it answers flash, runs that kernel's meta
function, which autograd records with its own backward. A boolean mask is first turned into an
additive one in the query's dtype, as SDPA does before choosing. The same mode gives a reduced
``mse_loss`` the CPU's storage: the elementwise losses, alive as long as the loss (a diffusion
model's loss: B·C·h·w·4 bytes through backward, about 2 % of a tiny DiT's peak). ``following("cuda")``
runs a CUDA GPU's choice instead (``cuda_attention.py``; the default device).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from .autocast import SDPA, cast_for
from .cuda_attention import SM90, cuda_attention
from .mha import fast_path, running, through
from .mha import forward as mha_forward
from .norm_stats import cpu_norms
from .sdpa import additive_mask, sdpa_arguments

FLASH = 1  # torch's SDPBackend.flash_attention, what torch._fused_sdp_choice returns for it
KERNELS = ("cpu", "cuda")  # the devices whose kernels a probe can follow besides the reference path


def cuda_kernels(arch: tuple[int, int] | None) -> str:
    """The kernels of a CUDA GPU of compute capability ``arch``: "cuda" for sm90 (and None), else "cuda-sm89"."""
    return "cuda" if arch is None or tuple(arch) == SM90 else f"cuda-sm{arch[0]}{arch[1]}"


def cuda_arch(kernels: str) -> tuple[int, int]:
    """The compute capability ``cuda_kernels`` wrote into ``kernels`` (sm90 for plain "cuda")."""
    digits = kernels.removeprefix("cuda-sm")
    return SM90 if kernels == "cuda" else (int(digits[:-1]), int(digits[-1]))


@contextlib.contextmanager
def following(kernels: str | None) -> Iterator[None]:
    """Within it, the meta device runs ``kernels``' attention ("cpu"; "cuda", "cuda-sm89": ``cuda_attention`` on that
    compute capability); None: the reference path."""
    if kernels is None:
        yield
        return
    if kernels == "cpu":
        with running() as modules, cpu_attention(modules), cpu_norms():
            yield
        return
    with cuda_attention(cuda_arch(kernels)):
        yield


def _proxy(t: Any) -> Any:
    """A CPU tensor with ``t``'s sizes, dtype and last-dimension stride, one row of real storage."""
    import torch

    if t.dim() == 0:
        return torch.empty((), dtype=t.dtype)
    step = int(t.stride(-1)) if t.size(-1) > 1 else 1
    row = torch.empty(int(t.size(-1)) * max(step, 1), dtype=t.dtype)[:: max(step, 1)]
    return row.expand(t.shape)


def _flash(a: dict[str, Any]) -> bool:
    """Whether the CPU's own choice function picks flash attention for tensors like these."""
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), torch.no_grad():  # the probe's trackers must not see the proxies
        mask = a["attn_mask"]
        choice = torch._fused_sdp_choice(_proxy(a["query"]), _proxy(a["key"]), _proxy(a["value"]),
                                         attn_mask=None if mask is None else _proxy(mask),
                                         dropout_p=a["dropout_p"], is_causal=a["is_causal"], scale=a["scale"],
                                         enable_gqa=a["enable_gqa"])
    return int(choice) == FLASH


def _mse_storage(loss: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The CPU's ``mse_loss``: a reduced loss lives in the storage of the elementwise losses (one per element).

    Measured: ``F.mse_loss(x, y).untyped_storage().nbytes()`` is ``x.numel()`` · 4 on the CPU
    (torch 2.13.0, mean and sum), 4 on the meta device; the storage lives until the loss is freed.
    """
    import torch

    if loss.device.type != "meta" or loss.dim() != 0:
        return loss
    shapes = [a.shape for a in (*args[:2], kwargs.get("input"), kwargs.get("target")) if isinstance(a, torch.Tensor)]
    full = torch.empty(torch.broadcast_shapes(*shapes).numel(), dtype=loss.dtype, device="meta")
    with torch.no_grad():
        loss.set_(full.untyped_storage(), 0, (), ())
    return loss


def cpu_attention(modules: Sequence[Any] = ()) -> Any:
    """A mode in which the meta device runs the CPU's flash attention wherever the CPU would, and its mse_loss.

    ``modules``: the ``nn.MultiheadAttention`` modules running (``mha.running``), whose fused fast path the CPU takes
    in inference where its conditions hold (``mha.fast_path``).
    """
    import torch
    from torch.overrides import TorchFunctionMode

    sdpa = torch.nn.functional.scaled_dot_product_attention
    mse = torch.nn.functional.mse_loss
    mha = mha_forward()

    class _CpuAttention(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            if func is mse:
                return _mse_storage(func(*args, **kwargs), args, kwargs)
            if func is mha:  # its SDPA call runs where this mode is popped: see mha.py
                fused = fast_path(modules[-1] if modules else None, args, kwargs)
                if fused is not None:
                    return fused
                return through(lambda a, k: self.__torch_function__(sdpa, types, a, k))(*args, **kwargs)
            if func is not sdpa:
                return func(*args, **kwargs)
            args, kwargs = cast_for(SDPA, args, kwargs)  # autocast casts before SDPA chooses
            a = sdpa_arguments(args, kwargs)
            query = a["query"]
            if query.device.type != "meta":
                return func(*args, **kwargs)
            a["attn_mask"] = additive_mask(a["attn_mask"], query.dtype)
            if not _flash(a):
                return func(*args, **kwargs)
            return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                query, a["key"], a["value"], a["dropout_p"], a["is_causal"], attn_mask=a["attn_mask"],
                scale=a["scale"])[0]

    return _CpuAttention()
