"""FSDP2 on the CPU (gloo, two processes): what ``fully_shard`` holds sharded and unsharded, by phase.

Run as a script by ``test_fsdp.py``; prints one JSON object on stdout. A Llama-shaped module (the
family table's matrices: q, k, v, o, gate, up, down, two norms per block, final norm, untied head)
is sharded as torchtitan's ``apply_fsdp`` does (each block a ``fully_shard`` group, then the
root; ``MixedPrecisionPolicy(bf16, fp32)``) over two gloo ranks, and two AdamW steps run. Hooks
before each block's forward and backward (and the head's forward) read FSDP2's own state: the
bytes of every parameter now unsharded, plus the all-gather output of a group whose prefetched
all-gather has not been copied out yet. The sharded parameters and gradients are the local shards.
With torchao installed, once more with torchao's float8 linear layers (every linear but the head, as
torchtitan converts) and ``enable_fsdp_float8_all_gather``: the linear weights are gathered as float8
data (``_data``) with an fp32 scale each (``_scale``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from typing import Any

H, D_FF, LAYERS, VOCAB, BATCH, SEQ, WORLD = 256, 768, 4, 512, 1, 8, 2


def _llama() -> Any:
    """A Llama-shaped module (torch is imported here: the tests import this folder's files without it)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        """The parameters of a Llama block (the forward uses each once; only the parameters matter here)."""

        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(H, H, bias=False) for _ in range(4))
            self.gate, self.up = nn.Linear(H, D_FF, bias=False), nn.Linear(H, D_FF, bias=False)
            self.down = nn.Linear(D_FF, H, bias=False)
            self.norm1, self.norm2 = nn.RMSNorm(H), nn.RMSNorm(H)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.norm1(x)
            x = x + self.o(self.q(h) + self.k(h) + self.v(h))
            h = self.norm2(x)
            return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))

    class Llama(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, H)
            self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
            self.norm = nn.RMSNorm(H)
            self.head = nn.Linear(H, VOCAB, bias=False)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x))

    return Llama()


def _unsharded_bytes(groups: list) -> int:
    """Bytes FSDP2 holds unsharded now: unsharded parameters, and all-gather outputs not yet copied out."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState  # noqa: F401
    from torch.distributed.fsdp._fully_shard._fsdp_param import ShardedState

    total = 0
    for group in groups:
        for fp in group.fsdp_params:
            if fp.sharded_state == ShardedState.UNSHARDED:
                param = fp.unsharded_param
                parts = (param._data, param._scale) if hasattr(param, "_data") else (param,)  # float8: its data
                total += sum(part.untyped_storage().nbytes() for part in parts)
        result = group._all_gather_result
        if result is not None:
            total += result.all_gather_output.untyped_storage().nbytes()
    return total


def _run(reshard: bool, fp8: bool = False) -> dict:
    """Two AdamW steps of the sharded model (``fp8``: torchao's float8 linears, gathered in float8); what FSDP2
    held, by phase."""
    import torch
    from torch import nn
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model = _llama()
    if fp8:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        convert_to_float8_training(model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=True),
                                   module_filter_fn=lambda _, fqn: fqn != "head")
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mp_policy=policy, reshard_after_forward=reshard)
    fully_shard(model, mp_policy=policy)
    groups = [m._get_fsdp_state()._fsdp_param_group for m in (*model.layers, model)]
    seen = {"forward": 0, "backward": 0}

    def probe(phase: str):  # noqa: ANN202
        def hook(*_: object) -> None:
            seen[phase] = max(seen[phase], _unsharded_bytes(groups))
        return hook

    for layer in model.layers:
        layer.register_forward_pre_hook(probe("forward"))
        layer.register_forward_hook(probe("forward"))
        layer.register_full_backward_pre_hook(probe("backward"))
        layer.register_full_backward_hook(probe("backward"))
    model.head.register_forward_hook(probe("forward"))
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    for _ in range(2):
        logits = model(ids)
        nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.flatten()).backward()
        grads = sum(p.grad.to_local().numel() * p.grad.element_size() for p in model.parameters())
        optimizer.step()
        optimizer.zero_grad()
    sharded = sum(p.to_local().numel() * p.to_local().element_size() for p in model.parameters())
    return {"sharded": sharded, "grads": grads, "params": sum(p.numel() for p in model.parameters()), **seen}


def _worker(rank: int, world: int, port: int, queue: object) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    found = {"reshard": _run(True), "keep": _run(False)}
    if importlib.util.find_spec("torchao") is not None:
        found["fp8_all_gather"] = _run(True, fp8=True)
    dist.destroy_process_group()
    if rank == 0:
        queue.put(found)  # type: ignore[attr-defined]


def main() -> None:
    import torch.multiprocessing as mp

    queue = mp.get_context("spawn").Queue()
    port = 29611 + os.getpid() % 2000
    mp.start_processes(_worker, args=(WORLD, port, queue), nprocs=WORLD, start_method="spawn")
    json.dump({"H": H, "d_ff": D_FF, "L": LAYERS, "V": VOCAB, "world": WORLD, **queue.get()}, sys.stdout)


if __name__ == "__main__":
    main()
