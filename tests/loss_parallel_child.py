"""PyTorch's loss_parallel on the CPU (one gloo rank): the loss's peak bytes per logit of the shard, by phase.

Run as a script by ``test_loss_parallel.py``; prints one JSON object on stdout. The logits are a bf16 DTensor
sharded on the vocabulary (``Shard(-1)``, torchtitan's output head under loss parallel); the loss is
torchtitan's ``cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))`` inside ``loss_parallel()``, the
logits dropped before backward (``del pred``, train.py). PyTorch's profiler counts every CPU allocation, the
temporaries inside loss.py's handlers too; the forward alone, then the whole step, each from a clean start.
"""

from __future__ import annotations

import json

B, S, V = 2, 64, 4096


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    torch.manual_seed(0)
    head = distribute_tensor(torch.randn(B, S, V, dtype=torch.bfloat16), mesh, [Shard(-1)]).requires_grad_()
    labels = torch.randint(0, V, (B, S))

    def step(backward: bool) -> None:
        with loss_parallel():
            pred = head * 1  # the head's output: bf16 logits, sharded on the vocabulary
            loss = torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
            del pred
            if backward:
                loss.backward()

    step(True)  # warm-up: the profiler then sees the steady step
    out = {"forward": _peak(torch, step, head, False) / (B * S * V), "step": _peak(torch, step, head, True) / (B * S * V)}
    dist.destroy_process_group()
    print(json.dumps(out))


def _peak(torch: object, step: object, head: object, backward: bool) -> int:
    """The most bytes allocated at once during one call of ``step`` (from zero: what existed before is left out)."""
    from torch.profiler import ProfilerActivity, profile

    head.grad = None  # type: ignore[attr-defined]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(backward)  # type: ignore[operator]
    events = sorted((e.start_ns(), i, e.nbytes()) for i, e in enumerate(prof.profiler.kineto_results.events())
                    if e.name() == "[memory]")
    current = top = 0
    for _, _, delta in events:
        current += delta
        top = max(top, current)
    return top


if __name__ == "__main__":
    main()
