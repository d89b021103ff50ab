"""Which blocks of a torch module ``--recompute full`` checkpoints, and the checkpoint itself (issue 29).

timm's ``set_grad_checkpointing``, diffusers' ``enable_gradient_checkpointing`` and transformers'
``gradient_checkpointing_enable`` each wrap every block of the network's repeated stack in
``torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)``. The blocks here are found on
the meta-built module by one rule: among the items of every ``nn.ModuleList`` / ``nn.Sequential``
whose two or more children share one class, the class whose such items hold the most parameters
(a ViT's ``blocks``, a ResNet's bottlenecks across its four stages, a transformers encoder's
layers); every item of that class in such a container is a block, outermost only. ``named``: the
modules a user names instead (``--checkpoint-modules``, qualified names or class names). ``every`` N:
the blocks whose position (from 1) is a multiple of N, as torchtitan counts.

``checkpointed`` wraps the blocks' ``forward`` for the probe's trace, so the tensors saved and the
backward's recompute are what PyTorch does (the block's inputs saved through the autograd hooks of
non-reentrant checkpointing; its inner tensors rebuilt during backward).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any


def repeated(module: Any) -> tuple[str, ...]:
    """The qualified names of the module's repeated blocks (see the module docstring); () when it has none."""
    import torch

    held: dict[type, int] = {}
    items: dict[type, list[str]] = {}
    for name, sub in module.named_modules():
        if not isinstance(sub, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        children = list(sub.named_children())
        kinds = {type(child) for _, child in children}
        if len(children) < 2 or len(kinds) != 1:
            continue
        kind = kinds.pop()
        held[kind] = held.get(kind, 0) + sum(p.numel() for _, c in children for p in c.parameters())
        items.setdefault(kind, []).extend(f"{name}.{child}" if name else child for child, _ in children)
    if not held:
        return ()
    kind = max(held, key=lambda k: (held[k], len(items[k])))
    names = items[kind]
    return tuple(n for n in names if not any(n.startswith(f"{other}.") for other in names))


def named(module: Any, names: Sequence[str]) -> tuple[str, ...]:
    """The modules whose qualified name or class name is one of ``names`` (outermost only); a one-line error
    naming what matched nothing."""
    from .source import ModuleError

    found = [n for n, sub in module.named_modules() if n and (n in names or type(sub).__name__ in names)]
    missing = [name for name in names if not any(n == name or type(module.get_submodule(n)).__name__ == name
                                                 for n in found)]
    if missing:
        raise ModuleError(f"--checkpoint-modules {', '.join(missing)}: no submodule of that name or class (the "
                          f"repeated blocks found without it: {', '.join(repeated(module)[:4]) or 'none'})")
    return tuple(n for n in found if not any(n.startswith(f"{other}.") for other in found))


def every(blocks: Sequence[str], n: int) -> tuple[str, ...]:
    """The blocks checkpointed with ``--recompute-every n``: positions n, 2n, ... (from 1)."""
    return tuple(b for i, b in enumerate(blocks, 1) if i % n == 0)


def units(module: Any, blocks: Sequence[str]) -> tuple[int, ...]:
    """The parameters of each block (FSDP2's ``fully_shard`` units; the root holds the rest)."""
    return tuple(sum(int(p.numel()) for p in module.get_submodule(b).parameters()) for b in blocks)


def root_last(module: Any, blocks: Sequence[str]) -> int:
    """The elements of the last parameter outside ``blocks`` (FSDP2's root group: ``_get_managed_states`` order)."""
    inside = {id(p) for b in blocks for p in module.get_submodule(b).parameters()}
    rest = [int(p.numel()) for p in module.parameters() if id(p) not in inside]
    return rest[-1] if rest else 0


@contextlib.contextmanager
def gradients_freed(module: Any, on: bool | Sequence[str]) -> Iterator[None]:
    """While inside (``on``), each parameter's gradient is dropped once accumulated: the step's backward without
    the whole model's gradients (FSDP2 reduce-scatters each block's and keeps a shard, counted on its own); ``on``
    the names of submodules: only theirs (FSDP2's root keeps its unsharded gradients to the end of backward)."""
    def drop(param: Any) -> None:
        param.grad = None

    params = (() if not on else module.parameters() if on is True
              else [p for name in on for p in module.get_submodule(name).parameters()])
    handles = [p.register_post_accumulate_grad_hook(drop) for p in params if p.requires_grad]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def checkpointed(module: Any, blocks: Sequence[str],
                 again: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext) -> Iterator[None]:
    """The named blocks' forwards run under ``checkpoint(..., use_reentrant=False)`` while inside.

    ``again``: a context the recompute in backward runs in (the probe's torch-function mode for the device's
    attention kernels: autograd's engine does not carry function modes into backward, dispatch modes it does).
    """
    from torch.utils.checkpoint import checkpoint

    def contexts() -> tuple[Any, Any]:
        return contextlib.nullcontext(), again()

    wrapped = [module.get_submodule(name) for name in blocks]
    before = [block.__dict__.get("forward") for block in wrapped]  # an instance's own forward (a library's hook)
    for block in wrapped:
        inner = block.forward

        def forward(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            return checkpoint(_inner, *args, use_reentrant=False, context_fn=contexts, **kwargs)

        block.forward = forward
    try:
        yield
    finally:
        for block, own in zip(wrapped, before):
            if own is None:
                del block.forward  # the instance attribute: the class's forward again
            else:
                block.forward = own
