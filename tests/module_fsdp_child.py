"""Torch modules under FSDP2, measured end to end on two gloo ranks, for ``test_module_fsdp.py`` (issue 29).

The ViT and the residual CNN of ``tests/data/modules/blocks.py``, each block of its repeated stack
(``Network.checkpoint_blocks``) a ``fully_shard`` unit and then the root, as the plan assumes; AdamW
(the CPU's default, one parameter at a time, as ``--device cpu`` plans it), one warm step, then three measured
ones on each rank (each phase's least reading: ``fsdp_live.least_peaks``) with ``fsdp_live`` (the local shards,
FSDP2's in-place storage resizes, every operator's output), phase by phase. Cases: fp32, reshard
after forward on and off; bf16-mixed as torchtitan runs it (``MixedPrecisionPolicy(bf16, fp32)``, no
autocast; the default ``--fsdp-param-dtype``) and with ``--fsdp-param-dtype fp32`` (fp32 units, the forward
under CPU autocast). The "root" group: ViTs of many classes, whose root (the head) outweighs a block: under
bf16-mixed (bf16 gradients, an fp32 reduce-scatter input) the root's reduce-scatter at the end of backward leads
(each plan also without it: ``backward_without_root_end``), in fp32 the head's own backward does. Beside each, ``memory``'s plan of the same module (``planning.plan``, ``--device cpu``).
Writes one JSON object on stdout (each rank's measurements); exits with ``SKIP`` (77) when torch is missing.
"""

from __future__ import annotations

import os
from typing import Any

import child_main  # this folder: sys.path[0] of a child script
from modules_child import DATA

BATCH, SIZES, WORLD = 3, {"H": 16, "W": 16}, 2
MODELS = {"vit": ("blocks.py:ViT", {"dim": 32}), "rescnn": ("blocks.py:ResCNN", {"channels": 16}),
          "vit-head": ("blocks.py:ViT", {"dim": 32, "classes": 8000}),  # a root larger than the blocks: its end leads
          "vit-head-wide": ("blocks.py:ViT", {"dim": 48, "classes": 6000})}
# (model, precision, reshard, fsdp_param_dtype or None for the default), in two groups of about 15 s each (the
# probes behind the plans take most of it): the group is the script's argument
GROUPS = {"vit": [("vit", "fp32", True, None), ("vit", "fp32", False, None), ("vit", "bf16-mixed", True, None)],
          "mixed": [("vit", "bf16-mixed", True, "fp32"), ("rescnn", "fp32", True, None),
                    ("rescnn", "fp32", False, None)],
          "root": [("vit-head", "bf16-mixed", True, None), ("vit-head-wide", "bf16-mixed", False, None),
                   ("vit-head-wide", "fp32", True, None)]}


def _source(model: str) -> Any:
    from symbolic.networks.module import files

    spec, args = MODELS[model]
    return files.file_source(str(DATA / spec), dict(args), files.parse_inputs(["x=B,3,H,W"]), "cross-entropy",
                             dict(SIZES))


def _plan(model: str, precision: str, reshard: bool, dtype: str | None) -> dict:
    from unittest import mock

    from symbolic import planning
    from symbolic.networks.module import resolve
    from symbolic.planning import own_fsdp

    net = resolve.module_network(_source(model))
    asked = {"fsdp_param_dtype": dtype} if dtype else {}
    def planned() -> Any:
        return planning.plan(net, "train", batch=BATCH, precision=precision, device="cpu", dp=WORLD, fsdp=True,
                             runtime=False, reshard_after_forward=reshard, **asked)

    plan = planned()
    with mock.patch.object(own_fsdp.fsdp, "root_end_moment", lambda *_, **__: 0):  # the root's end left out
        without = planned().as_dict()["phases"]["backward"]
    return {"phases": plan.as_dict()["phases"], "total": plan.total, "blocks": list(net.checkpoint_blocks),
            "terms": plan.terms(), "params": net.total, "backward_without_root_end": without}


def _measure(model: str, precision: str, reshard: bool, dtype: str | None, blocks: list[str]) -> dict:
    """The measured steps of the sharded module on this rank: each phase's least peak (``fsdp_live``)."""
    import contextlib

    import fsdp_live
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from symbolic.measured.measure import _call
    from symbolic.networks.module.source import loss_of, make_inputs

    source = _source(model)
    torch.manual_seed(0)
    module = source.build(source.arguments).train()
    mixed = precision == "bf16-mixed"
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if mixed and dtype != "fp32" else None,
                                  reduce_dtype=torch.float32)
    for name in blocks:
        fully_shard(module.get_submodule(name), mp_policy=policy, reshard_after_forward=reshard)
    fully_shard(module, mp_policy=policy)
    autocast = mixed and dtype == "fp32"
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4)  # the CPU's default: one tensor at a time
    sixteen = mixed and dtype != "fp32"  # floating inputs in the compute precision, as the plan's pure bf16 step has
    x = make_inputs(source, BATCH, device="cpu", float_dtype=torch.bfloat16 if sixteen else None)

    def step(enter: Any) -> None:
        enter("zero_grad")
        optimizer.zero_grad(set_to_none=True)
        enter("forward")
        with torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
            loss = loss_of(_call(module, x), source.loss)
        enter("backward")
        loss.backward()
        del loss
        enter("optimizer")
        optimizer.step()

    step(lambda _: None)
    return fsdp_live.least_peaks(step, module, optimizer, x.values())[0]


def _worker(rank: int, world: int, port: int, cases: list, queue: Any) -> None:
    import sys

    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(child_main.ROOT))
    sys.path.insert(0, str(child_main.ROOT / "tests"))
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    found = []
    for case, blocks in cases:
        try:
            found.append({"phases": _measure(*case, blocks)})
        except Exception as err:  # noqa: BLE001 - reported to the test, which names the case
            found.append({"error": f"{type(err).__name__}: {err}"})
    dist.destroy_process_group()
    queue.put((rank, found))


def produce(_: str) -> dict:
    import sys

    import torch.multiprocessing as mp

    cases = GROUPS[sys.argv[1]]
    plans = [_plan(*case) for case in cases]
    queue = mp.get_context("spawn").Queue()
    port = 33611 + os.getpid() % 2000
    asked = [(case, plan["blocks"]) for case, plan in zip(cases, plans)]
    mp.start_processes(_worker, args=(WORLD, port, asked, queue), nprocs=WORLD, start_method="spawn")
    ranks = dict(queue.get() for _ in range(WORLD))
    return {"cases": [{"case": list(case), "plan": plan, "ranks": [ranks[r][i] for r in range(WORLD)]}
                      for i, (case, plan) in enumerate(zip(cases, plans))]}


if __name__ == "__main__":
    child_main.run(produce, threads=1)
