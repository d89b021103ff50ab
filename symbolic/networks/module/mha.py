"""``nn.MultiheadAttention`` under a kernel mode: its inner SDPA call seen by the mode (issue 29).

A ``TorchFunctionMode`` is popped while its handler runs, so a function it passes through runs
its body without it. ``F.multi_head_attention_forward`` is such a function (it calls
``handle_torch_function`` whenever a mode is active), and with ``need_weights=False`` its body
calls ``scaled_dot_product_attention``: the kernel modes (``kernels.cpu_attention``,
``cuda_attention.cuda_attention``) never saw that call, and the meta device saved the reference
path's B·heads·L·S scores where the CPU's flash kernel saves B·heads·L logsumexp (a tiny ViT of
``nn.MultiheadAttention`` blocks: 25 % more saved bytes than a real CPU step). ``through`` runs a
copy of that function whose SDPA is the mode's own handling; the rest of its body is torch's.

``nn.MultiheadAttention``'s fused fast path (``torch._native_multi_head_attention``) needs
inference (no grad, not training, see ``MultiheadAttention.forward`` in torch 2.13.0), so a
training step always runs ``F.multi_head_attention_forward``, on the CPU and on a CUDA GPU alike;
``need_weights=True`` (the default) takes its explicit bmm and softmax path there, the same on
every device.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

Handler = Callable[[tuple[Any, ...], dict[str, Any]], Any]  # SDPA's (args, kwargs) -> its output


def forward() -> Any:
    """``torch.nn.functional.multi_head_attention_forward``: the function a mode intercepts."""
    import torch

    return torch.nn.functional.multi_head_attention_forward


def through(sdpa: Handler) -> Callable[..., Any]:
    """A copy of ``F.multi_head_attention_forward`` whose every SDPA call goes to ``sdpa``."""
    original = forward()
    names = {**original.__globals__, "scaled_dot_product_attention": lambda *a, **k: sdpa(a, k)}
    copy = types.FunctionType(original.__code__, names, original.__name__, original.__defaults__,
                              original.__closure__)
    copy.__kwdefaults__ = original.__kwdefaults__
    return copy
