"""One Llama block under PyTorch's tensor + sequence parallelism (DTensor), two gloo ranks on the CPU, for
``test_dtensor_tp.py``: what it saves and what its checkpointed backward holds, per rank.

The plan is torchtitan's (9dec370 ``apply_tp``, the same at HEAD): ``SequenceParallel`` on both norms,
``PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None))`` on ``attention``
and on ``feed_forward``, ``ColwiseParallel`` wq, wk, wv, w1, w3 and ``RowwiseParallel(output_layouts=Shard(1))`` wo,
w2; the block's input and output are each rank's sequence shard (B, S/t, H), as the embeddings' ``Shard(1)`` output
hands it. The norm is ``eager_rebuild_child``'s (a fused kernel's saved set: the 16-bit input and the fp32 1/rms),
attention the CPU's flash kernel, rotary by ``rotate_half``; bf16, eager, one thread. Reported per rank, rank 0:

- ``saved``: every tensor autograd saves in the plain block's forward (``saved_tensors_hooks``; a DTensor by its
  local tensor), one entry per storage: bytes, dtype, shape;
- ``kept``: the live bytes the plain block's forward leaves (its output left out), and under full checkpointing
  (``checkpoint_wrapper(block, preserve_rng_state=False)``, ``apply_ac``) and under 9dec370's per-op policy (``ops``); ``backward``: the live peak of each
  backward over its start (``measure._LiveBytes``, each ATen output's storage, a DTensor's local one).

With ``{"what": "compiled"}`` on stdin the plain block is ``torch.compile``'d (inductor, ``fullgraph=True``, as
torchtitan's ``apply_compile``) and only ``saved`` is reported (a dispatch mode cannot run under compile, so no live
bytes): the partitioner's saved set, the collectives' outputs among it.

Writes one JSON object on stdout; exits with 77 when torch is missing (and, compiled, without a C++ compiler).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import child_main  # this folder: sys.path[0] of a child script

WIDTH = {"hidden": 64, "heads": 4, "ffn": 176}
POINTS = ((2, 64), (4, 64))  # (B, S): B·S ≥ 1.5·H, as eager_rebuild_child's checked points
RANKS = 2


def _block(torch: object) -> type:
    """torchtitan's block layout: ``attention`` and ``feed_forward`` submodules between the two norms."""
    from eager_rebuild_child import _modules

    nn, functional = torch.nn, torch.nn.functional
    norm_class, _ = _modules(torch)

    class Attention(nn.Module):
        def __init__(self, hidden: int, heads: int) -> None:
            super().__init__()
            self.dim = hidden // heads
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))

        def forward(self, x, rope):  # noqa: ANN001, ANN202
            b, s, _ = x.shape
            cos, sin = rope  # one tensor, as torchtitan's freqs_cis: the module takes (x, freqs_cis)
            q, k, v = (w(x).view(b, s, -1, self.dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
            half = self.dim // 2

            def rotate(z):  # noqa: ANN001, ANN202
                return torch.cat((-z[..., half:], z[..., :half]), -1)

            q, k = q * cos + rotate(q) * sin, k * cos + rotate(k) * sin
            o = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(o.transpose(1, 2).reshape(b, s, -1))

    class FeedForward(nn.Module):
        def __init__(self, hidden: int, ffn: int) -> None:
            super().__init__()
            self.w1, self.w3 = nn.Linear(hidden, ffn, bias=False), nn.Linear(hidden, ffn, bias=False)
            self.w2 = nn.Linear(ffn, hidden, bias=False)

        def forward(self, x):  # noqa: ANN001, ANN202
            return self.w2(functional.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self, hidden: int, heads: int, ffn: int) -> None:
            super().__init__()
            self.attention_norm, self.ffn_norm = norm_class(hidden), norm_class(hidden)
            self.attention, self.feed_forward = Attention(hidden, heads), FeedForward(hidden, ffn)

        def forward(self, x, rope):  # noqa: ANN001, ANN202
            h = x + self.attention(self.attention_norm(x), rope)
            return h + self.feed_forward(self.ffn_norm(h))

    return Block


def _plan() -> dict:
    """torchtitan 9dec370 ``apply_tp``'s ``layer_plan`` (bf16: the plain styles)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel

    return {"attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel()}


def _local(torch: object, t: object) -> object:
    from torch.distributed.tensor import DTensor

    return t._local_tensor if isinstance(t, DTensor) else t


def _measure(torch: object, block: object, how: str) -> list[dict]:
    from eager_rebuild_child import _tables, _wrap

    from symbolic.measured.measure import _LiveBytes, tracking_mode

    wrapped, rows = _wrap(torch, block, how), []
    heads = WIDTH["heads"]
    for batch, seq in POINTS:
        torch.manual_seed(1)
        x = torch.randn(batch, seq // RANKS, WIDTH["hidden"], dtype=torch.bfloat16, requires_grad=True)
        rope = torch.stack(_tables(torch, seq, WIDTH["hidden"] // heads))  # cos and sin, a model input
        grad = torch.randn_like(x)
        saved: dict[int, tuple[int, str, list[int]]] = {}
        params = [_local(torch, p) for p in block.parameters()]
        weights = {p.untyped_storage().data_ptr() for p in params}

        skip = weights | {rope.untyped_storage().data_ptr()}

        pack = _packer(torch, saved, skip)

        live = _LiveBytes()
        track = (lambda t, live=live: live.track(_local(torch, t)))  # noqa: E731
        for t in (x, rope, grad, *params):
            live.track(t)
        before = live.current
        with tracking_mode(track), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            h = x.clone()  # the block's own input, kept by the checkpoint only
            y = _local(torch, wrapped(h, rope))
            del h
            kept = live.current - before - y.untyped_storage().nbytes()
            start = live.current
            live.phase = "backward"
            y.backward(grad)
            del y
        assert x.grad is not None and bool(x.grad.float().abs().sum() > 0)
        rows.append({"batch": batch, "seq": seq, "kept": kept, "backward": live.phase_peaks["backward"] - start,
                     "saved": sorted(saved.values(), reverse=True) if how == "none" else []})
        x.grad = None
        block.zero_grad(set_to_none=True)
    return rows


def _packer(torch: object, saved: dict, skip: set) -> object:
    """A saved-tensors pack hook recording each saved storage once (bytes, dtype, shape), ``skip``'s storages left out."""
    def pack(t: object) -> object:
        local = _local(torch, t)
        storage = local.untyped_storage()
        if storage.data_ptr() not in skip:
            saved[storage.data_ptr()] = (storage.nbytes(), str(local.dtype).replace("torch.", ""), list(local.shape))
        return t
    return pack


def _saved_compiled(torch: object, block: object) -> list[dict]:
    """The compiled block's saved tensors at each point (one storage each; parameters and the rope table left out)."""
    from eager_rebuild_child import _tables

    compiled, rows = torch.compile(block, fullgraph=True), []
    params = {_local(torch, p).untyped_storage().data_ptr() for p in block.parameters()}
    for batch, seq in POINTS:
        torch.manual_seed(1)
        x = torch.randn(batch, seq // RANKS, WIDTH["hidden"], dtype=torch.bfloat16, requires_grad=True)
        rope = torch.stack(_tables(torch, seq, WIDTH["hidden"] // WIDTH["heads"]))
        skip, saved = params | {rope.untyped_storage().data_ptr()}, {}

        pack = _packer(torch, saved, skip)

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = _local(torch, compiled(x, rope))
        y.backward(torch.randn_like(y))
        assert x.grad is not None and bool(x.grad.float().abs().sum() > 0)
        rows.append({"batch": batch, "seq": seq, "saved": sorted(saved.values(), reverse=True)})
    return rows


def _worker(rank: int, init: str, out: str, what: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=RANKS)
    mesh = init_device_mesh("cpu", (RANKS,))
    torch.manual_seed(0)
    block = _block(torch)(WIDTH["hidden"], WIDTH["heads"], WIDTH["ffn"]).to(torch.bfloat16)
    parallelize_module(block, mesh, _plan())
    if what == "compiled":
        child_main.lean_inductor()
        result = {"compiled": _saved_compiled(torch, block)}
    else:
        result = {how: _measure(torch, block, how) for how in ("none", "full", "ops")}
    dist.barrier()
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"width": WIDTH, "ranks": RANKS, "rows": result}, f)
    dist.destroy_process_group()


def produce(what: str) -> dict:
    """Start the two ranks (fork) and return rank 0's report."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        init, out = "file://" + os.path.join(tmp, "store"), os.path.join(tmp, "out.json")
        mp.start_processes(_worker, args=(init, out, what), nprocs=RANKS, start_method="fork")
        with open(out) as f:
            return json.load(f)


if __name__ == "__main__":
    raw = sys.stdin.read().strip()
    what = json.loads(raw)["what"] if raw else "eager"
    if what == "compiled":
        child_main.inductor_modules("torch")
    child_main.run(lambda _: produce(what), threads=1)
