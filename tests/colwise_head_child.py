"""PyTorch's column-parallel output head under sequence parallelism on the CPU (two gloo ranks): what it saves.

Run as a script by ``test_loss_parallel.py``; prints one JSON object on stdout. The head is torchtitan's
(9dec370 ``apply_tp``): ``ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
use_local_output=False)`` on a bias-free ``nn.Linear``, fed each rank's sequence shard of the final norm's output.
``saved_tensors_hooks`` see every tensor autograd saves in the forward; the bytes of those that hold hidden states
(last dimension H, bf16) are reported, per rank, with the shard's own size.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

B, S, H, V = 2, 64, 32, 256


def _worker(rank: int, init: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    head = parallelize_module(torch.nn.Linear(H, V, bias=False, dtype=torch.bfloat16), mesh,
                              ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                              use_local_output=False))
    shard = torch.randn(B, S // 2, H, dtype=torch.bfloat16, requires_grad=True)
    weight = head.weight.to_local().untyped_storage().data_ptr()
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        local = t.to_local() if isinstance(t, DTensor) else t
        storage = local.untyped_storage()
        if local.shape[-1] == H and storage.data_ptr() != weight:  # hidden states, not the weight's shard
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        head(shard).to_local().float().sum().backward()
    assert shard.grad is not None and bool(shard.grad.float().abs().sum() > 0)  # waits for the reduce-scatter
    dist.barrier()
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"saved_hidden": sum(saved.values()), "shard": shard.numel() * 2, "full": B * S * H * 2}, f)
    dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        init, out = "file://" + os.path.join(tmp, "store"), os.path.join(tmp, "out.json")
        mp.start_processes(_worker, args=(init, out), nprocs=2, start_method="fork")
        with open(out) as f:
            print(f.read())


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
