"""The CPU's dtypes for a normalization's saved statistics on the meta device (``--device cpu``).

Measured on torch's CPU kernels (``aten.native_layer_norm``, ``native_group_norm``,
``native_batch_norm`` with bf16/fp16 inputs): the mean and 1/std come back in fp32 where the input
is fp32 or the weight is fp32 (a "mixed type" call: bf16-mixed), else in the input's dtype (pure bf16,
fp16; no weight). The meta device (like CUDA) returns layer_norm's and batch_norm's always in fp32 and
group_norm's always in the input's dtype, so a pure-bf16 plan counted 4·B·T bytes too many per LayerNorm
and a bf16-mixed one too few per GroupNorm. ``cpu_norms()`` makes the meta device return the CPU's:
it runs the op out of sight of the modes below it and allocates the outputs afresh in the CPU's dtypes
(where they differ), so a live-bytes tracker below sees what the CPU allocates and nothing else.
"""

from __future__ import annotations

from typing import Any

WEIGHT = {"native_layer_norm": 2, "native_group_norm": 1, "native_batch_norm": 1,
          "_native_batch_norm_legit": 1}  # the index of each op's weight argument


def cpu_stats_dtype(x: Any, weight: Any) -> Any:
    """The dtype of the CPU's saved mean and 1/std for input ``x`` and ``weight`` (None: no affine)."""
    import torch

    mixed = weight is not None and weight.dtype == torch.float32
    return torch.float32 if mixed else x.dtype


def cpu_norms() -> Any:
    """A dispatch mode (below autograd: what it returns is what autograd saves) giving the CPU's statistics dtypes."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

    ops = {getattr(torch.ops.aten, name).default: index for name, index in WEIGHT.items()}

    class _CpuNorms(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            if func not in ops or args[0].device.type != "meta":
                return func(*args, **kwargs)
            weight = args[ops[func]] if len(args) > ops[func] else None
            dtype = cpu_stats_dtype(args[0], weight)
            with _disable_current_modes():
                out = func(*args, **kwargs)
            if all(t.dtype == dtype for t in out[1:]):
                return func(*args, **kwargs)
            return (_fresh(out[0], out[0].dtype), *(_fresh(t, dtype) for t in out[1:]))

    return _CpuNorms()


def _fresh(t: Any, dtype: Any) -> Any:
    """A new meta tensor of ``t``'s sizes and strides in ``dtype``: allocated where the modes below see it."""
    import torch

    return torch.empty_strided(t.size(), t.stride(), dtype=dtype, device=t.device)
