#!/usr/bin/env python3
"""Peak memory of real training steps on a CUDA GPU, against the formulas (one short run).

For each model and grid point it builds the model on the GPU with random weights, measures

- the bytes saved for backward (``symbolic.measured.measure.saved_tensors``),
- the peak of each phase (forward, backward, optimizer) of two whole training steps with the
  caching allocator's statistics (``torch.cuda.max_memory_allocated``, read and reset at each
  phase boundary: includes allocator rounding and workspaces), ``max_memory_reserved``, and the
  dispatch-mode tensor tracker (exact tensor bytes, the CPU method, on the same steps),

at bf16 mixed precision (``torch.autocast``) and pure bf16, eager and SDPA, and compares them
with ``pytorch.saved.*`` and ``peak_pytorch.step(...).phase_exprs()`` for ``device="cuda"``, whose
CUDA-specific terms (bool dropout masks, fp32 LayerNorm statistics, fused SDPA kernels even with
attention dropout, foreach AdamW) come from the ATen sources and have not been measured on a GPU
before this script. Results go to ``$OUT/gpu_measure.json`` (or ``--output``); a summary table
to stdout. Sized to finish in a few minutes on one GPU (``--quick``: under a minute).

    python benchmarks/gpu_measure.py                     # needs torch with CUDA, and transformers
    python benchmarks/gpu_measure.py --device cpu --quick # the same logic on the CPU (tests use it)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

# (name, config overrides, dropout, grid) — real GPT-2 and article A sizes; a shrunk Llama-3-8B
# (same 4:1 grouped-query ratio, head size 64) and Qwen2-0.5B's own config with fewer layers.
LLAMA_SHRUNK = {"hidden_size": 512, "intermediate_size": 1792, "num_attention_heads": 8, "num_key_value_heads": 2,
                "vocab_size": 32000}
FULL = [
    # name, overrides, dropout, grid, options (see symbolic.measured.crosscheck.run)
    ("mlp", {}, "config", {"batch": (1, 128, 512)}, {}),
    ("mlp-nobias", {}, "config", {"batch": (128,), "dtype": ("fp32", "bf16-mixed")}, {"optimizer": "sgd-momentum"}),
    ("gpt2", {}, "config", {"batch": (1, 4), "seq": (256, 1024), "layers": (1, 2), "dtype": ("bf16-mixed", "bf16")}, {}),
    ("gpt2", {}, "off", {"batch": (4,), "seq": (1024,), "layers": (2,), "dtype": ("bf16-mixed",)}, {"use_cache": False}),
    ("llama-3-8b", LLAMA_SHRUNK, "config", {"batch": (1, 4), "seq": (256, 1024), "layers": (1, 2),
                                            "dtype": ("bf16-mixed", "bf16")}, {}),
    ("qwen2-0.5b", {}, "config", {"batch": (2,), "seq": (512,), "layers": (1, 2), "dtype": ("bf16-mixed",)}, {}),
]
QUICK = [
    ("mlp", {"d_in": 64, "d_h": 128}, "config", {"batch": (4,), "dtype": ("fp32",)}, {}),
    ("gpt2", {"n_embd": 64, "n_head": 4, "vocab_size": 512}, "config",
     {"batch": (2,), "seq": (32,), "layers": (1,), "dtype": ("bf16-mixed",)}, {}),
    ("llama-3-8b", {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 176,
                    "vocab_size": 512}, "config", {"batch": (2,), "seq": (32,), "layers": (1,), "dtype": ("bf16",)}, {}),
]


def measure_all(device: str = "cuda", quick: bool = False) -> dict[str, Any]:
    """Every case on ``device``; plain data (see the module docstring)."""
    import torch

    from symbolic.measured import crosscheck as validate
    from symbolic.measured import measure

    started = time.perf_counter()
    info = validate.environment()
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = str(torch.version.cuda)
    results = []
    for name, overrides, dropout, grid, options in (QUICK if quick else FULL):
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        points = validate.run(name, validate.Grid(**grid), device=device, overrides=overrides, dropout=dropout,
                              **options)
        rows = [p.as_dict() for p in points]
        if device == "cuda":  # the same steps, counted as exact tensor bytes, and the allocator's reserve
            target = validate.load_target(name, overrides, dropout)
            for p, row in zip(points, rows):
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                model = validate.build(target, p.L or 1, p.dtype, p.attn or "sdpa", device, use_cache=p.use_cache)
                inputs, loss_fn = validate.inputs_for(target, p.B, p.S, p.dtype, device, p.loss)
                tensors = measure.step_peak(model, inputs, loss_fn, method="dispatch",
                                            optimizer=validate.optimizer_factory(p.optimizer, p.foreach),
                                            autocast=validate.autocast_dtype(p.dtype))
                row["peak_tensors"], row["phases_tensors"] = tensors.peak_bytes, tensors.phases
                row["max_memory_reserved"] = int(torch.cuda.max_memory_reserved())
                del model, inputs
        results.append({"model": name, "overrides": overrides, "dropout": dropout, "options": options,
                        "summary": validate.summarize(points), "points": rows})
    return {"device": device, "environment": info, "results": results,
            "seconds": round(time.perf_counter() - started, 1)}


def _print(data: dict[str, Any]) -> None:
    print(f"{data['device']}: {data['environment']}  ({data['seconds']} s)")
    for r in data["results"]:
        s = r["summary"]
        peak = s.get("peak", {})
        print(f"  {r['model']:12s} dropout {r['dropout']:6s} {s['points']:3d} points: saved ±{100 * s['saved']['max_abs']:.2f} %"
              f", peak ±{100 * peak.get('max_abs', float('nan')):.2f} %, within targets: {s['within_targets']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny models only (under a minute)")
    parser.add_argument("--output", type=Path, help="JSON file (default $OUT/gpu_measure.json, else stdout only)")
    args = parser.parse_args(argv)
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as err:
        print(f"gpu_measure: needs torch and transformers ({err})", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_measure: no CUDA device; use --device cpu to run the same logic on the CPU", file=sys.stderr)
        return 2
    data = measure_all(args.device, args.quick)
    _print(data)
    target = args.output or (Path(os.environ["OUT"]) / "gpu_measure.json" if os.environ.get("OUT") else None)
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
