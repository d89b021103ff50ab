"""FSDP2 inside pipeline stages on the CPU (gloo, 4 ranks: pp 2 × dp 2): the stream each allocation is made on.

For ``test_pipeline.py`` (``fsdp.PIPELINE_NOTE``). Each stage is two linear blocks, each its own ``fully_shard`` group
over the data-parallel ranks, and a norm in the stage's root group, sharded as torchtitan shards a pipeline stage
(``MixedPrecisionPolicy(bf16, fp32)``, ``reshard_after_forward=False``). ``ScheduleInterleaved1F1B`` runs four stages,
two per rank; ``Schedule1F1B`` two, one per rank; two steps, four micro-batches each. The allocations are tagged
with the current stream as ``fsdp_streams_child.Trace`` does, and every ``foreach_all_gather`` call is logged with
the copy-in stream FSDP2 hands it (``get_all_gather_streams``). Blocks of 4096 × 4096, so that every FSDP2 buffer
is a large-pool block of its own. Prints one JSON object: per pipeline rank 0 and 1 (data-parallel rank 0), the
alloc and free events (each alloc with its stream's name: ``compute``, or FSDP2's with the rank's stage, 0 or 1),
where each step's events start, and the copy-in stream of each all-gather.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fsdp_live  # noqa: E402
from fsdp_streams_child import Trace  # noqa: E402

WIDTH, BATCH, MICRO, PP, DP, STEPS = 4096, 8, 4, 2, 2, 2


def _stage(torch: Any) -> Any:
    """Two linear blocks and a norm: the blocks its fully_shard groups, the norm the stage root's."""
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Linear(WIDTH, WIDTH),
                               torch.nn.LayerNorm(WIDTH))


def _worker(rank: int, init: str, out: str, schedule_name: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=PP * DP)
    mesh = init_device_mesh("cpu", (PP, DP), mesh_dim_names=("pp", "dp"))
    pp_rank, per_rank = mesh["pp"].get_local_rank(), 2 if schedule_name == "interleaved" else 1
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    torch.manual_seed(0)
    stages, modules = [], []
    for index in (pp_rank + PP * k for k in range(per_rank)):  # the loop layout: stages rank, rank + pp
        module = _stage(torch)
        for block in module[:2]:
            fully_shard(block, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=False)
        fully_shard(module, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=False)
        modules.append(module)
        stages.append(PipelineStage(module, index, PP * per_rank, torch.device("cpu"), group=mesh["pp"].get_group()))
    loss = lambda out, target: ((out.float() - target) ** 2).mean()  # noqa: E731
    schedule = (ScheduleInterleaved1F1B(stages, MICRO, loss_fn=loss) if schedule_name == "interleaved"
                else Schedule1F1B(stages[0], MICRO, loss_fn=loss))
    optimizer = torch.optim.AdamW([p for m in modules for p in m.parameters()], foreach=True)
    data, target = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
    gathers: list[int] = []
    steps: list[int] = []  # where each step's events start
    gather = _fsdp_param_group.foreach_all_gather

    def logged(params: Any, group: Any, async_op: bool, copy_in: Any, *rest: Any) -> Any:
        gathers.append(id(copy_in))
        return gather(params, group, async_op, copy_in, *rest)

    _fsdp_param_group.foreach_all_gather = logged
    trace = Trace()
    with fsdp_live.counting(trace):
        for _ in range(STEPS):
            steps.append(len(trace.events))
            optimizer.zero_grad(set_to_none=True)
            if pp_rank == 0:
                schedule.step(data)
            else:
                schedule.step(target=target)
            optimizer.step()
    _fsdp_param_group.foreach_all_gather = gather
    names = {id(torch.cpu.current_stream()): "compute"}
    for k, module in enumerate(modules):  # each stage a fully_shard root: its own FSDPCommContext and streams
        ctx = module._get_fsdp_state()._comm_ctx
        for name in ("all_gather_copy_in_stream", "all_gather_stream", "reduce_scatter_stream", "all_reduce_stream"):
            names[id(getattr(ctx, name))] = f"{name}.{k}"
    events = [[*e[:3], names.get(e[3], "other")] if e[0] == "alloc" else e for e in trace.events]
    found = {"events": events, "gathers": [names.get(g, "other") for g in gathers], "steps": steps}
    if mesh["dp"].get_local_rank() == 0:
        Path(f"{out}.{pp_rank}").write_text(json.dumps(found))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    schedule_name = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        init, out = "file://" + os.path.join(tmp, "store"), os.path.join(tmp, "out")
        mp.start_processes(_worker, args=(init, out, schedule_name), nprocs=PP * DP, start_method="spawn")
        print(json.dumps({rank: json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(PP)}))


if __name__ == "__main__":
    main()
