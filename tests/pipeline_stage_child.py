"""torch.distributed.pipelining's stage bookkeeping and live bytes on the CPU (two gloo ranks): what a rank holds.

Run as a script by ``test_pipeline.py``; prints one JSON object on stdout, per schedule (Schedule1F1B,
ScheduleGPipe; ScheduleInterleaved1F1B and ScheduleZBVZeroBubble with two stages per rank) and rank. Each stage is
one layer (Linear, Tanh, Linear: one saved activation a micro-batch beside its input), m micro-batches. Under the
single-stage schedules a forward hook on each stage's module reads, at every forward, what the stage keeps beside
the layer's own activations: stage outputs in ``fwd_cache`` (the current forward's not yet among them), the
activation receive buffers, those an earlier micro-batch in ``fwd_cache`` still holds, those whose ``.grad`` (a
finished backward's input gradient) is set, the gradient receive buffers, and the last stage's ``output_chunks``.
Every storage an operator makes is tracked through the step (``fsdp_live.Live`` and ``measure.tracking_mode``:
each storage once, from its operator to its release), beside what is alive when the step starts (parameters, the
batch and targets, the stages' receive buffers); the live bytes are read after each ``forward_one_chunk`` ("F")
and before each ``backward_one_chunk`` ("B": a full backward, or ZBV's input-gradient step) of each of the rank's
stages, and the step's own peak is kept too. Gradients are set to None before the step, as
``optimizer.zero_grad()`` does. A second step is recorded (the first sets the stages up).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable

M, WIDTH, HIDDEN, BATCH = 4, 64, 256, 16
SCHEDULES = {"1f1b": "Schedule1F1B", "gpipe": "ScheduleGPipe", "interleaved": "ScheduleInterleaved1F1B",
             "zbv": "ScheduleZBVZeroBubble"}
STAGES_PER_RANK = {"interleaved": 2, "zbv": 2}  # loop layout: rank r holds r and r + 2; V: r and 3 − r


def _worker(rank: int, init: str, out: str, name: str) -> None:
    import torch
    import torch.distributed as dist
    from fsdp_live import Live
    from torch.distributed import pipelining

    from symbolic.measured.measure import tracking_mode

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    torch.manual_seed(0)
    v = STAGES_PER_RANK.get(name, 1)
    modules = [torch.nn.Sequential(torch.nn.Linear(WIDTH, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, WIDTH))
               for _ in range(v)]
    indices = (rank, 3 - rank) if name == "zbv" else tuple(rank + 2 * k for k in range(v))
    stages = [pipelining.PipelineStage(module, index, 2 * v, torch.device("cpu"))
              for index, module in zip(indices, modules, strict=True)]
    stage, module = stages[0], modules[0]
    schedule = getattr(pipelining, SCHEDULES[name])(stages if v > 1 else stage, M,
                                                    loss_fn=lambda out, target: (out * target).mean())
    seen: list[dict[str, int]] = []
    live = Live()
    moments: list[tuple[str, int]] = []

    def hook(*_: object) -> None:
        recv = _buffers(stage.args_recv_info)
        grad_recv = _buffers(stage.grad_recv_info)
        cached = {id(t) for _, inputs in stage.fwd_cache.values() for t in inputs}
        seen.append({"outputs": len(stage.fwd_cache), "recv": len(recv),
                     "recv_in_flight": sum(id(b) in cached for b in recv),
                     "input_grads": sum(b.grad is not None for b in recv), "grad_recv": len(grad_recv),
                     "output_chunks": len(stage.output_chunks)})

    def forward_read(forward: Callable[..., object]) -> Callable[..., object]:
        def read(*args: object, **kwargs: object) -> object:
            result = forward(*args, **kwargs)
            moments.append(("F", live.current))
            return result
        return read

    def backward_read(backward: Callable[..., object]) -> Callable[..., object]:
        def read(*args: object, **kwargs: object) -> object:
            moments.append(("B", live.current))
            return backward(*args, **kwargs)
        return read

    if v == 1:
        module.register_forward_hook(hook)
    data, target = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
    for step in range(2):
        seen.clear()
        for each in modules:
            each.zero_grad(set_to_none=True)
        if step == 1:  # measured: what is alive now, then every operator's output
            for each in stages:
                each.forward_one_chunk = forward_read(each.forward_one_chunk)
                each.backward_one_chunk = backward_read(each.backward_one_chunk)
                for t in (*each.submod.parameters(), *_buffers(each.args_recv_info), *_buffers(each.grad_recv_info)):
                    live.track(t)
            live.track(data)
            live.track(target)
            start = live.current
            with tracking_mode(live.track):
                _step(schedule, indices, 2 * v, data, target)
        else:
            _step(schedule, indices, 2 * v, data, target)
    sizes = {"params": sum(p.numel() * p.element_size() for p in module.parameters()), "start": start, "stages": v,
             "data": data.numel() * data.element_size()}
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"hooks": seen, "moments": moments, "peak": live.peaks["setup"], "sizes": sizes}, f)
    dist.barrier()
    dist.destroy_process_group()


def _buffers(infos: dict) -> list:
    return [info.buffer for chunk in infos.values() for info in chunk if getattr(info, "buffer", None) is not None]


def _step(schedule: object, indices: tuple[int, ...], stages: int, data: object, target: object) -> None:
    """One step: the batch to the rank holding stage 0, the targets to the one holding the last stage."""
    args = (data,) if 0 in indices else ()
    schedule.step(*args, **({"target": target} if stages - 1 in indices else {}))


def main() -> None:
    import torch.multiprocessing as mp

    result = {}
    for name in SCHEDULES:
        with tempfile.TemporaryDirectory() as tmp:
            init, out = "file://" + os.path.join(tmp, "store"), os.path.join(tmp, "out")
            mp.start_processes(_worker, args=(init, out, name), nprocs=2, start_method="fork")
            result[name] = {}
            for rank in range(2):
                with open(f"{out}.{rank}") as f:
                    result[name][rank] = json.load(f)
    result["shape"] = {"m": M, "width": WIDTH, "hidden": HIDDEN, "batch": BATCH}
    print(json.dumps(result))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
