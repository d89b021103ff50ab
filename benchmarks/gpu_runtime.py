#!/usr/bin/env python3
"""The CUDA runtime's own memory, measured on one GPU, against ``symbolic.library.runtime`` (one short run).

Measures, each in a fresh child process (a CUDA context is per process):

- ``cuda_context``: device memory in use (``torch.cuda.mem_get_info``: total − free) minus what
  was in use before the child started (``nvidia-smi``) minus PyTorch's ``memory_reserved``, right
  after ``torch.cuda.init()`` (the bare context) and again after two training steps of a small
  GPT-2 (the context with the kernels a step loads);
- ``cublas_workspace``: the growth of ``memory_allocated`` at the first matmul into a preallocated
  output (the main thread's workspace) and at the first backward pass (the autograd thread's);
  PyTorch's ``torch.cuda.get_device_capability`` says which size rule applies;
- ``allocator``: ``memory_reserved`` peak against ``requested_bytes`` peak and
  ``max_memory_allocated`` over two AdamW steps of GPT-2 and a small Llama (bf16 autocast), one
  process per grid point, and the same allocation trace (``torch.cuda.memory._record_memory_history``
  from the process's first allocation) replayed through ``symbolic.library.caching_allocator``:
  does the replay reserve what the real allocator did, and what is the least memory it needs?
- ``nccl``: device memory before and after the first all-reduce of a one-process NCCL group.

Results go to ``$OUT/gpu_runtime.json`` (or ``--output``) with the formula's figures beside them;
a summary to stdout. A few minutes on one GPU.

    python benchmarks/gpu_runtime.py            # needs torch with CUDA, and transformers
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

MIB = 2**20


def smi_used_bytes(index: int = 0) -> int | None:
    """Device memory in use now, by nvidia-smi (MiB × 2²⁰), or None without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i",
                              str(index)], capture_output=True, text=True, timeout=30, check=True).stdout
        return int(out.strip().splitlines()[0]) * MIB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def snapshot_events(snapshot: dict[str, Any], device: int = 0) -> list[tuple[str, object, int]]:
    """Alloc and free events of a ``torch.cuda.memory._snapshot()`` trace, for ``caching_allocator.replay``.

    A free counts when the allocator got the block back (``free_completed``); blocks alive before
    recording started are allocated first, from the snapshot's segments (``active_allocated``).
    """
    events: list[tuple[str, object, int]] = []
    traces = snapshot.get("device_traces", [])
    trace = traces[device] if device < len(traces) else []
    seen_alloc: set[int] = set()
    for entry in trace:
        if entry.get("action") == "alloc":
            seen_alloc.add(entry["addr"])
    live: dict[int, int] = {}
    for entry in trace:
        action, addr, size = entry.get("action"), entry.get("addr"), entry.get("size", 0)
        if action == "alloc":
            key = (addr, len(events))
            live[addr] = len(events)
            events.append(("alloc", key, size))
        elif action == "free_completed" and addr in live:
            start = live.pop(addr)
            events.append(("free", events[start][1], 0))
    return events


CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["SYMBOLIC_ROOT"])
import torch
what = sys.argv[1]
out = {}
dev = torch.device("cuda", 0)
def used():
    free, total = torch.cuda.mem_get_info(dev)
    return total - free
if what == "context":
    torch.cuda.init(); torch.zeros(1, device=dev); torch.cuda.synchronize()
    out["used_bare"] = used(); out["reserved_bare"] = torch.cuda.memory_reserved(dev)
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = transformers.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=8192, n_positions=512)
    model = transformers.GPT2LMHeadModel(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 8192, (2, 256), device=dev)
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward(); opt.step()
    torch.cuda.synchronize()
    out["used_step"] = used(); out["reserved_step"] = torch.cuda.memory_reserved(dev)
elif what == "workspace":
    out["capability"] = list(torch.cuda.get_device_capability(dev))
    a = torch.randn(256, 256, device=dev); b = torch.randn(256, 256, device=dev); c = torch.empty(256, 256, device=dev)
    torch.cuda.synchronize(); before = torch.cuda.memory_allocated(dev)
    torch.matmul(a, b, out=c); torch.cuda.synchronize()
    out["main_thread"] = torch.cuda.memory_allocated(dev) - before
    x = torch.randn(256, 256, device=dev, requires_grad=True); w = torch.randn(256, 256, device=dev, requires_grad=True)
    y = (x @ w).sum(); torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(dev)
    y.backward(); torch.cuda.synchronize()
    grads = sum((t.grad.untyped_storage().nbytes() + 511) // 512 * 512 for t in (x, w))
    out["autograd_thread"] = torch.cuda.memory_allocated(dev) - before - grads
elif what == "allocator":
    import transformers
    from symbolic.library.caching_allocator import min_capacity, replay
    sys.path.insert(0, os.path.join(os.environ["SYMBOLIC_ROOT"], "benchmarks"))
    from gpu_runtime import snapshot_events
    transformers.logging.set_verbosity_error()
    name, B, S = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    torch.cuda.memory._record_memory_history(max_entries=2_000_000)  # before the first allocation
    with torch.device(dev):
        if name == "gpt2-124M":
            model, vocab = transformers.GPT2LMHeadModel(transformers.GPT2Config()), 50257
        else:
            model, vocab = transformers.LlamaForCausalLM(transformers.LlamaConfig(
                num_hidden_layers=4, hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
                num_key_value_heads=4, vocab_size=32000)), 32000
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, vocab, (B, S), device=dev)
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward(); opt.step(); del loss
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    stats = torch.cuda.memory_stats(dev)
    events = snapshot_events(snap)
    sim = replay(events)
    out.update({"model": name, "batch": B, "seq": S, "events": len(events),
                "requested_peak": stats.get("requested_bytes.all.peak"),
                "allocated_peak": stats["allocated_bytes.all.peak"],
                "reserved_peak": stats["reserved_bytes.all.peak"],
                "replay_requested_peak": sim.requested, "replay_allocated_peak": sim.allocated,
                "replay_reserved_peak": sim.reserved, "replay_min_capacity": min_capacity(events)})
elif what == "nccl":
    import torch.distributed as dist
    torch.zeros(1, device=dev); torch.cuda.synchronize()
    before = used(); res_before = torch.cuda.memory_reserved(dev)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=0, world_size=1)
    x = torch.ones(1 << 20, device=dev); dist.all_reduce(x); torch.cuda.synchronize()
    out["nccl_one_rank"] = used() - before - (torch.cuda.memory_reserved(dev) - res_before)
    out["nccl_version"] = str(torch.cuda.nccl.version())
    dist.destroy_process_group()
print("RESULT " + json.dumps(out))
"""


ALLOCATOR_GRID = (("gpt2-124M", 1, 1024), ("gpt2-124M", 8, 1024), ("llama-shrunk", 1, 2048), ("llama-shrunk", 4, 2048))


def child(what: str, *args: object) -> dict[str, Any]:
    """Run one measurement in a fresh process; its JSON result (or the error)."""
    env = {**os.environ, "SYMBOLIC_ROOT": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", CHILD, what, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": (proc.stderr or proc.stdout)[-2000:]}


def main(argv: list[str] | None = None) -> int:
    """Measure everything, print a summary, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path(os.environ.get("OUT", ".")) / "gpu_runtime.json")
    parser.add_argument("--only", choices=("context", "workspace", "allocator", "nccl"), action="append")
    args = parser.parse_args(argv)
    from symbolic.library import runtime

    result: dict[str, Any] = {"formula": {"cuda_context": runtime.CONTEXT_BYTES,
                                          "cublas_workspace_one": {"default": runtime.WORKSPACE_DEFAULT,
                                                                   "cc9_10_12": runtime.WORKSPACE_32MIB},
                                          "fragmentation": float(runtime.FRAGMENTATION),
                                          "pools": runtime.SMALL_BUFFER + runtime.LARGE_BUFFER,
                                          "nccl": {str(k): v for k, v in runtime.NCCL_BYTES.items()}}}
    for what in args.only or ("context", "workspace", "allocator", "nccl"):
        if what == "allocator":
            result[what] = [child(what, *point) for point in ALLOCATOR_GRID]
            for found in result[what]:
                print(what, json.dumps(found)[:1500], flush=True)
            continue
        before = smi_used_bytes()
        found = child(what)
        if what == "context" and before is not None and "used_bare" in found:
            found["context_bare"] = found["used_bare"] - before - found["reserved_bare"]
            found["context_after_step"] = found["used_step"] - before - found["reserved_step"]
        found["smi_used_before"] = before
        result[what] = found
        print(what, json.dumps(found)[:1500], flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
