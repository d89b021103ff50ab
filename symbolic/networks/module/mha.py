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
every device. In inference the meta device never takes the fast path (its device is neither cpu
nor cuda); ``fast_path`` runs it where the CPU would (``running`` says which module is calling:
``batch_first`` is not among F's arguments). Not modelled: the CUDA fast path (a GPU's inference
of such a module keeps F's path with the GPU's SDPA choice), and the fast path of a masked call.
"""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def running() -> Iterator[list[Any]]:
    """The ``nn.MultiheadAttention`` modules running now, innermost last (F's arguments do not say ``batch_first``)."""
    import torch

    stack: list[Any] = []

    def push(module: Any, _: Any) -> None:
        if isinstance(module, torch.nn.MultiheadAttention):
            stack.append(module)

    def pop(module: Any, *_: Any) -> None:
        if stack and stack[-1] is module:
            stack.pop()

    handles = (torch.nn.modules.module.register_module_forward_pre_hook(push),
               torch.nn.modules.module.register_module_forward_hook(pop, always_call=True))
    try:
        yield stack
    finally:
        for h in handles:
            h.remove()


def fast_path(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What the CPU returns where ``MultiheadAttention.forward`` takes its fused fast path, as F would; else None.

    The meta device never takes it (its device is neither cpu nor cuda, and a mode is active): the conditions are
    torch 2.13.0's (``MultiheadAttention.forward``), masks left out (a masked call keeps F's path here). The meta
    function of ``torch._native_multi_head_attention`` allocates what the CPU's kernel does (measured: the live
    bytes of one call on the meta device equal a CPU forward's, need_weights True and False).
    """
    import torch

    a = inspect.signature(forward()).bind(*args, **kwargs)
    a.apply_defaults()
    f = a.arguments
    q, weight, bias = f["query"], f["in_proj_weight"], f["in_proj_bias"]
    blocked = (module is None or not module.batch_first or not torch.backends.mha.get_fastpath_enabled()
               or q.dim() != 3 or q is not f["key"] or q is not f["value"] or weight is None or bias is None
               or f["use_separate_proj_weight"] or q.dtype != weight.dtype or q.dtype != bias.dtype or f["training"]
               or f["num_heads"] % 2 or f["bias_k"] is not None or f["bias_v"] is not None or f["add_zero_attn"]
               or f["attn_mask"] is not None or f["key_padding_mask"] is not None or f["is_causal"]
               or torch.is_autocast_enabled())
    tensors = (q, weight, bias, f["out_proj_weight"], f["out_proj_bias"])
    if blocked or (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)):
        return None
    x = q.transpose(0, 1)  # the batch-first tensor MultiheadAttention.forward was given
    out, weights = torch._native_multi_head_attention(x, x, x, f["embed_dim_to_check"], f["num_heads"], weight, bias,
                                                       f["out_proj_weight"], f["out_proj_bias"], None,
                                                       f["need_weights"], f["average_attn_weights"], None)
    return out.transpose(0, 1), weights
