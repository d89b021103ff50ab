#!/usr/bin/env python3
"""The README's "Measured accuracy" tables, from ``symbolic validate --json`` results.

    python benchmarks/accuracy_table.py --run [--out DIR]          # the README grid (CPU, long), then print
    python benchmarks/accuracy_table.py --run --quick [--out DIR]  # the same kinds of case, small models (minutes)
    python benchmarks/accuracy_table.py DIR/*.json                  # print the tables from saved results

The grid (``RUNS``) is the one the README reports: article A's network at its own sizes (AdamW
and SGD with momentum, cross-entropy and MSE), real GPT-2 (its config's dropout with the
default and with bool masks, dropout off with the KV cache on and off), Llama-3-8B's config
shrunk to hidden 512 (same 4:1 grouped-query ratio) and Qwen2-0.5B's own config, one and two
layers, eager and SDPA, fp32, bf16 and bf16 autocast. ``QUICK`` shrinks the models (hidden 64 to
256) so that the whole table runs in minutes on two CPU cores; it covers the same options.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLAMA = ["--set", "hidden_size=512", "--set", "intermediate_size=1792", "--set", "num_attention_heads=8",
         "--set", "num_key_value_heads=2", "--set", "vocab_size=32000"]
PRECISIONS = ["--precision", "fp32,bf16,bf16-mixed"]
RUNS: dict[str, list[str]] = {
    "mlp": ["mlp", "--batch", "1,32,128,512", *PRECISIONS],
    "mlp-sgd": ["mlp", "--batch", "1,128", "--optimizer", "sgd-momentum"],
    "mlp-mse": ["mlp", "--batch", "128", "--loss", "mse"],
    "mlp-nobias": ["mlp-nobias", "--batch", "1,32,128,512"],
    "gpt2": ["gpt2", "--batch", "1,2", "--seq", "128,256", "--layers", "1,2", *PRECISIONS],
    "gpt2-bool": ["gpt2", "--batch", "1,2", "--seq", "128", "--layers", "2", "--dropout-masks", "bool"],
    "gpt2-nodrop": ["gpt2", "--dropout", "off", "--batch", "1,2", "--seq", "128,256", "--layers", "1,2", *PRECISIONS],
    "gpt2-nocache": ["gpt2", "--dropout", "off", "--no-use-cache", "--batch", "1,2", "--seq", "128", "--layers", "2"],
    "gpt2-sgd": ["gpt2", "--batch", "2", "--seq", "128", "--layers", "2", "--optimizer", "sgd-momentum"],
    "llama": ["llama-3-8b", *LLAMA, "--batch", "1,2", "--seq", "128,256", "--layers", "1,2", *PRECISIONS],
    "llama-sgd": ["llama-3-8b", *LLAMA, "--batch", "2", "--seq", "128", "--layers", "2", "--optimizer", "sgd-momentum"],
    "qwen2": ["qwen2-0.5b", "--batch", "1", "--seq", "128", "--layers", "1,2"],
}
TINY_MLP = ["--set", "d_in=256", "--set", "d_h=512"]
TINY_GPT2 = ["--set", "n_embd=128", "--set", "n_head=4", "--set", "vocab_size=2048", "--set", "n_positions=256"]
TINY_LLAMA = ["--set", "hidden_size=128", "--set", "intermediate_size=352", "--set", "num_attention_heads=4",
              "--set", "num_key_value_heads=2", "--set", "vocab_size=2048"]
QUICK: dict[str, list[str]] = {
    "mlp": ["mlp", *TINY_MLP, "--batch", "1,32,128", *PRECISIONS],
    "mlp-sgd": ["mlp", *TINY_MLP, "--batch", "1,128", "--precision", "fp32,bf16-mixed", "--optimizer", "sgd-momentum"],
    "mlp-mse": ["mlp", *TINY_MLP, "--batch", "128", "--loss", "mse"],
    "mlp-nobias": ["mlp-nobias", *TINY_MLP, "--batch", "1,128"],
    "gpt2": ["gpt2", *TINY_GPT2, "--batch", "1,2", "--seq", "64", "--layers", "2", *PRECISIONS],
    "gpt2-bool": ["gpt2", *TINY_GPT2, "--batch", "1,2", "--seq", "64", "--layers", "2", "--dropout-masks", "bool"],
    "gpt2-nodrop": ["gpt2", *TINY_GPT2, "--dropout", "off", "--batch", "1,2", "--seq", "64", "--layers", "2",
                    *PRECISIONS],
    "gpt2-nocache": ["gpt2", *TINY_GPT2, "--dropout", "off", "--no-use-cache", "--batch", "1,2", "--seq", "64",
                     "--layers", "2"],
    "gpt2-sgd": ["gpt2", *TINY_GPT2, "--batch", "2", "--seq", "64", "--layers", "2", "--optimizer", "sgd-momentum"],
    "llama": ["llama-3-8b", *TINY_LLAMA, "--batch", "1,2", "--seq", "64", "--layers", "2", *PRECISIONS],
    "llama-sgd": ["llama-3-8b", *TINY_LLAMA, "--batch", "2", "--seq", "64", "--layers", "2", "--optimizer",
                  "sgd-momentum", "--precision", "fp32,bf16-mixed"],
}
LABELS = {
    "mlp": "article A's network (biases)", "mlp-sgd": "article A's network, SGD with momentum",
    "mlp-mse": "article A's network, MSE loss", "mlp-nobias": "article A's network (no biases)",
    "gpt2": "GPT-2 (config dropout 0.1, KV cache on)", "gpt2-bool": "GPT-2, bool dropout masks",
    "gpt2-nodrop": "GPT-2 (dropout off, KV cache on)", "gpt2-nocache": "GPT-2 (dropout off, KV cache off)",
    "gpt2-sgd": "GPT-2, SGD with momentum",
    "llama": "Llama-3-8B config, hidden 512, vocab 32000", "llama-sgd": "Llama-3-8B config, SGD with momentum",
    "qwen2": "Qwen2-0.5B",
}
_SMALL = {"mlp": "d_in 256, d_h 512", "gpt2": "hidden 128, vocab 2048", "llama": "hidden 128, 4 heads, 2 KV heads, "
          "vocab 2048"}
LABELS.update({f"quick-{k}": LABELS[k].replace("hidden 512, vocab 32000", "").rstrip(", ") + " — "
               + _SMALL[k.split("-")[0]] for k in QUICK})


def run(out: Path, quick: bool = False) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, args in (QUICK if quick else RUNS).items():
        path = out / f"{'quick-' if quick else ''}{name}.json"
        with path.open("w") as f:
            subprocess.run([sys.executable, "-m", "symbolic", "validate", *args, "--json"], stdout=f, check=True,
                           cwd=ROOT)
        paths.append(path)
    return paths


def pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def span(s: dict | None) -> str:
    if not s:
        return "–"
    low, high = round(100 * s["min"]), round(100 * s["max"])
    return f"{low:+d} %" if low == high else f"{low:+d} … {high:+d} %"


def worst(s: dict | None) -> str:
    return "–" if not s else f"{100 * s['max_abs']:.2f} %"


def tables(results: dict[str, dict]) -> str:
    env = next(iter(results.values()))["environment"]
    lines = [f"Measured on the CPU with torch {env['torch']} and transformers {env.get('transformers', '-')}.", "",
             "| model | points | saved: ours (max \\|error\\|) | saved: article A/B | saved: Korthikanti | "
             "step peak: ours (max \\|error\\|) | peak: article A/B | phases: forward / backward / optimizer "
             "(max \\|error\\|) | peak phase agrees |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, data in results.items():
        s = data["summary"]
        seed = "article A" if "article A" in s else "article B"
        phases = s.get("phases", {})
        per_phase = " / ".join(worst(phases.get(k)) for k in ("forward", "backward", "optimizer"))
        lines.append(f"| {LABELS.get(name, name)} | {s['points']} | {worst(s['saved'])} | "
                     f"{seed[-1]}: {span(s.get(seed))} | {span(s.get('Korthikanti'))} | "
                     f"{worst(s.get('peak'))} | {seed[-1]}: {span(s.get('peak ' + seed))} | {per_phase} | "
                     f"{s.get('peak_phase_agrees', '–')} of {s['points']} |")
    lines += ["", "One point per model (the largest of its grid, preferring bf16 autocast and SDPA): bytes and "
              "error against the measurement.", "",
              "| model | B, S, L, precision | quantity | measured | ours | article A/B | Korthikanti |",
              "|---|---|---|---:|---:|---:|---:|"]
    for name, data in results.items():
        order = {"bf16-mixed": 0, "bf16": 1, "fp32": 2}
        p = max(data["points"], key=lambda q: (-order.get(q["dtype"], 3), q["attn"] in ("sdpa", ""),
                                              q["B"] * max(q["S"], 1) * max(q["L"], 1), q["B"]))
        seed = next(iter(p["seeds"]))
        shape = f"{p['B']}, {p['S'] or '–'}, {p['L'] or '–'}, {p['dtype']}"
        kor = p["seeds"].get("Korthikanti")
        lines.append(f"| {LABELS.get(name, name)} | {shape} | saved | {p['saved_measured']:,} | "
                     f"{p['saved_predicted']:,} ({pct(p['saved_error'])}) | {p['seeds'][seed]:,} "
                     f"({pct(p['seed_errors'][seed])}) | "
                     + (f"{kor:,} ({pct(p['seed_errors']['Korthikanti'])}) |" if kor else "– |"))
        ps = p["peak_seeds"][seed]
        lines.append(f"| | | step peak ({p['peak_phase']}) | {p['peak_measured']:,} | {p['peak_predicted']:,} "
                     f"({pct(p['peak_error'])}) | {ps:,} ({pct(p['peak_seed_errors'][seed])}) | – |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="*", type=Path, help="JSON files written by symbolic validate --json")
    parser.add_argument("--run", action="store_true", help="run the README grid first")
    parser.add_argument("--quick", action="store_true", help="with --run: the small models of QUICK (minutes)")
    parser.add_argument("--out", type=Path, default=Path("accuracy-results"), help="where --run writes its JSON")
    args = parser.parse_args(argv)
    paths = run(args.out, args.quick) if args.run else args.results
    if not paths:
        parser.error("give result files or --run")
    results = {Path(p).stem: json.loads(Path(p).read_text()) for p in paths}
    print(tables(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
