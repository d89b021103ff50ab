"""FSDP2's whole step on the CPU (gloo, two ranks), live bytes by phase, for ``test_fsdp_step.py`` (issue 28).

``fsdp_child.py``'s set-up (its Llama-shaped module, torchtitan's grouping: each block a ``fully_shard``
unit, the last one not resharded after forward, then the root; ``MixedPrecisionPolicy(bf16, fp32)``; AdamW), with and without resharding after
forward. A first step creates AdamW's states; three more are measured on each rank with ``fsdp_live`` (the local
shards, FSDP2's in-place storage resizes, each operator's output), phase by phase, each phase's least reading
(``fsdp_live.least_peaks``: gloo's thread releases a collective's tensors late at times, never early). At each
phase's peak it also reads the sharded gradients alive then (``fsdp_live.sharded_grad_bytes``). The backward is
read in two parts: ``backward`` (the loss's and the head's backward) until the gradient of the final norm's output is
made, ``backward_blocks`` from then on (the norm's and every block's backward). Sizes: ``fsdp_child``'s, or a JSON
object of them as the one argument (``H``, ``d_ff``, ``L``, ``V``, ``batch``, ``seq``). Prints one JSON object on stdout
(each rank's measurements, in rank order).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fsdp_child  # noqa: E402
import fsdp_live  # noqa: E402

SIZES = {"H": "H", "d_ff": "D_FF", "L": "LAYERS", "V": "VOCAB", "batch": "BATCH", "seq": "SEQ"}


def _sized(sizes: dict) -> None:
    """``fsdp_child``'s module and batch at ``sizes`` (its names as in the printed JSON)."""
    for name, value in sizes.items():
        setattr(fsdp_child, SIZES[name], value)


def _run(reshard: bool) -> dict:
    """The measured steps of the sharded Llama-shaped module: each phase's least peak and the grads then."""
    import torch
    from torch import nn
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model = fsdp_child._llama()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for i, layer in enumerate(model.layers):  # torchtitan's apply_fsdp (9dec370): the last block is not resharded
        fully_shard(layer, mp_policy=policy, reshard_after_forward=reshard and i < len(model.layers) - 1)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    ids = torch.randint(0, fsdp_child.VOCAB, (fsdp_child.BATCH, fsdp_child.SEQ))
    groups = [m._get_fsdp_state()._fsdp_param_group for m in (*model.layers, model)]

    def snapshot() -> dict:
        return {"sharded_grads": fsdp_live.sharded_grad_bytes(groups),
                "blocks_with_sharded_grads": sum(fsdp_live.sharded_grad_bytes([g]) > 0 for g in groups[:-1])}

    def step(enter: Any) -> None:
        enter("zero_grad")
        optimizer.zero_grad(set_to_none=True)
        enter("forward")

        def split(_module: Any, _inputs: Any, out: Any) -> None:
            out.register_hook(lambda _grad: enter("backward_blocks"))

        hook = model.norm.register_forward_hook(split)
        pred = model(ids)  # torchtitan's train step: the logits kept through the loss, deleted before backward
        loss = nn.functional.cross_entropy(pred.flatten(0, 1).float(), ids.flatten())
        hook.remove()
        del pred
        enter("backward")
        loss.backward()
        del loss
        enter("optimizer")
        optimizer.step()

    step(lambda _: None)
    peaks, at_peak, start = fsdp_live.least_peaks(step, model, optimizer, (ids,), snapshot)
    block = sum(p.numel() for p in fsdp_child._llama().layers[0].parameters())
    return {"start": start, "phases": peaks, "at_peak": at_peak, "block_params": block}


def _worker(rank: int, world: int, port: int, queue: Any, sizes: dict) -> None:
    import torch
    import torch.distributed as dist

    _sized(sizes)
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    found = {"reshard": _run(True), "keep": _run(False)}
    dist.destroy_process_group()
    queue.put((rank, found))


def main() -> None:
    import torch.multiprocessing as mp

    sizes = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    _sized(sizes)
    queue = mp.get_context("spawn").Queue()
    port = 31611 + os.getpid() % 2000
    mp.start_processes(_worker, args=(fsdp_child.WORLD, port, queue, sizes), nprocs=fsdp_child.WORLD,
                       start_method="spawn")
    json.dump({"H": fsdp_child.H, "d_ff": fsdp_child.D_FF, "L": fsdp_child.LAYERS, "V": fsdp_child.VOCAB,
               "world": fsdp_child.WORLD, "batch": fsdp_child.BATCH, "seq": fsdp_child.SEQ,
               "ranks": [found for _, found in sorted(queue.get() for _ in range(fsdp_child.WORLD))]}, sys.stdout)


if __name__ == "__main__":
    main()
