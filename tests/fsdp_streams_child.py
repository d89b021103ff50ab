"""FSDP2's allocation sequence on the CPU (gloo, two ranks), each allocation tagged with the stream FSDP2 runs it on.

For ``test_fsdp_streams.py`` (issue 28). ``fsdp_child.py``'s Llama-shaped module, made large enough that every
FSDP2 buffer is a large-pool block of its own (H 1024, d_ff 2816, 4 blocks, vocabulary 32,768), sharded as
torchtitan does (each block a ``fully_shard`` group, then the root; ``MixedPrecisionPolicy(bf16, fp32)``), AdamW;
three steps (zero_grad, forward, loss, backward, optimizer step); with an argument K, K micro-batches a step (gradient
accumulation as torchtitan runs it: every micro-batch's backward reduce-scatters, no ``no_sync``). Every operator's
output and FSDP2's in-place storage resizes (``fsdp_live.counting``) become alloc and free events; each alloc is
tagged with the stream current when it is made: FSDP2 enters its streams with ``device_handle.stream(...)``, and on
the CPU ``torch.cpu.stream`` sets ``torch.cpu.current_stream()`` exactly as ``torch.cuda.stream`` would on a GPU, so
the tags are the streams the CUDA caching allocator would see. Prints one JSON object: rank 0's events, the stream
names, the sizes.
"""

from __future__ import annotations

import json
import os
import sys
import weakref
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fsdp_child  # noqa: E402
import fsdp_live  # noqa: E402

H, D_FF, LAYERS, VOCAB, SEQ, STEPS = 1024, 2816, 4, 32768, 64, 3


class Trace:
    """Alloc and free events of storages, each alloc with the current stream's id (``fsdp_live.counting``'s
    interface: ``track``, ``resized``, ``paused``)."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.events: list[list] = []
        self.paused = False
        self._keys: dict[int, tuple[weakref.ref, int]] = {}
        self._next = 0

    def _alloc(self, st: Any, nbytes: int) -> None:
        key, self._next = self._next, self._next + 1
        ident = id(st)

        def release(_: weakref.ref, ident: int = ident, key: int = key) -> None:
            if self._keys.get(ident, (None, -1))[1] == key:
                del self._keys[ident]
            self.events.append(["free", key, 0])

        self._keys[ident] = (weakref.ref(st, release), key)
        self.events.append(["alloc", key, nbytes, id(self.torch.cpu.current_stream())])

    def track(self, t: Any) -> None:
        t = getattr(t, "_local_tensor", t)
        if self.paused or t.device.type == "meta":
            return
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        known = self._keys.get(id(st))
        if (known is not None and known[0]() is st) or st.nbytes() == 0:
            return
        self._alloc(st, st.nbytes())

    def resized(self, t: Any) -> None:
        """A storage resized in place (FSDP2's unsharded parameters): on a GPU a new block, the old one freed."""
        st = t.untyped_storage()
        known = self._keys.pop(id(st), None)
        if known is not None and known[0]() is st:
            self.events.append(["free", known[1], 0])
        if st.nbytes() > 0:
            self._alloc(st, st.nbytes())


def _run(micro: int) -> dict:
    import torch
    from torch import nn
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    fsdp_child.H, fsdp_child.D_FF, fsdp_child.LAYERS, fsdp_child.VOCAB = H, D_FF, LAYERS, VOCAB
    torch.manual_seed(0)
    model = fsdp_child._llama()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    ids = torch.randint(0, VOCAB, (1, SEQ))
    trace = Trace()
    for t in fsdp_live.state(model, optimizer, (ids,)):
        trace.track(t)
    with fsdp_live.counting(trace):
        for _ in range(STEPS):
            optimizer.zero_grad(set_to_none=True)
            for _ in range(micro):
                loss = nn.functional.cross_entropy(model(ids).float().flatten(0, 1), ids.flatten())
                loss.backward()
                del loss
            optimizer.step()
    ctx = model._get_fsdp_state()._comm_ctx
    names = {str(id(torch.cpu.current_stream())): "compute"}
    for name in ("all_gather_copy_in_stream", "all_gather_stream", "reduce_scatter_stream", "all_reduce_stream"):
        names[str(id(getattr(ctx, name)))] = name
    return {"events": trace.events, "streams": names}


def _worker(rank: int, world: int, port: int, out: str, micro: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    found = _run(micro)
    dist.destroy_process_group()
    if rank == 0:  # a file, not a queue: the events outgrow a pipe's buffer while the parent joins
        Path(out).write_text(json.dumps(found))


def main() -> None:
    import tempfile

    import torch.multiprocessing as mp

    micro = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    port = 33611 + os.getpid() % 2000
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "rank0.json")
        mp.start_processes(_worker, args=(fsdp_child.WORLD, port, out, micro), nprocs=fsdp_child.WORLD,
                           start_method="spawn")
        found = json.loads(Path(out).read_text())
    json.dump({"H": H, "d_ff": D_FF, "L": LAYERS, "V": VOCAB, "seq": SEQ, "world": fsdp_child.WORLD, "micro": micro,
               **found},
              sys.stdout)


if __name__ == "__main__":
    main()
