"""torch.distributed.pipelining's stage bookkeeping on the CPU (two gloo ranks, Schedule1F1B): what it holds.

Run as a script by ``test_pipeline.py``; prints one JSON object on stdout. Two stages of one linear layer each,
m micro-batches; a forward hook on each stage's module reads, at every forward, what the stage keeps beside the
layer's own activations: stage outputs in ``fwd_cache`` (the current forward's not yet among them), the
activation receive buffers, those an earlier micro-batch in ``fwd_cache`` still holds, those whose ``.grad`` (a
finished backward's input gradient) is set, the gradient receive buffers, and the last stage's ``output_chunks``. A second step is recorded (the first sets the stage up).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

M, WIDTH, BATCH = 4, 8, 8


def _worker(rank: int, init: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    torch.manual_seed(0)
    module = torch.nn.Linear(WIDTH, WIDTH)
    stage = PipelineStage(module, rank, 2, torch.device("cpu"))
    schedule = Schedule1F1B(stage, M, loss_fn=lambda out, target: ((out - target) ** 2).mean())
    seen: list[dict[str, int]] = []

    def hook(*_: object) -> None:
        recv = [info.buffer for infos in stage.args_recv_info.values() for info in infos
                if getattr(info, "buffer", None) is not None]
        grad_recv = [info.buffer for infos in stage.grad_recv_info.values() for info in infos
                     if getattr(info, "buffer", None) is not None]
        cached = {id(t) for _, inputs in stage.fwd_cache.values() for t in inputs}
        seen.append({"outputs": len(stage.fwd_cache), "recv": len(recv),
                     "recv_in_flight": sum(id(b) in cached for b in recv),
                     "input_grads": sum(b.grad is not None for b in recv), "grad_recv": len(grad_recv),
                     "output_chunks": len(stage.output_chunks)})

    module.register_forward_hook(hook)
    data, target = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
    for _ in range(2):
        seen.clear()
        if rank == 0:
            schedule.step(data)
        else:
            schedule.step(target=target)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(seen, f)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        init, out = "file://" + os.path.join(tmp, "store"), os.path.join(tmp, "out")
        mp.start_processes(_worker, args=(init, out), nprocs=2, start_method="fork")
        result = {}
        for rank in range(2):
            with open(f"{out}.{rank}") as f:
                result[rank] = json.load(f)
        print(json.dumps(result))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
