#!/usr/bin/env python3
"""The README's "Measured accuracy" tables, from ``symbolic validate --json`` results.

    python benchmarks/accuracy_table.py --run [--out DIR]   # run the README grid (CPU, ~20 min), then print
    python benchmarks/accuracy_table.py DIR/*.json           # print the tables from saved results

The grid (``RUNS``) is the one the README reports: article A's network at its own sizes, real
GPT-2 (with its config's dropout, and with dropout off), Llama-3-8B's config shrunk to hidden
512 (same 4:1 grouped-query ratio) and Qwen2-0.5B's own config, one and two layers.
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
RUNS: dict[str, list[str]] = {
    "mlp": ["mlp", "--batch", "1,32,128,512"],
    "mlp-nobias": ["mlp-nobias", "--batch", "1,32,128,512"],
    "gpt2": ["gpt2", "--batch", "1,2", "--seq", "128,256", "--layers", "1,2"],
    "gpt2-nodrop": ["gpt2", "--dropout", "off", "--batch", "2", "--seq", "128,256", "--layers", "1,2"],
    "llama": ["llama-3-8b", *LLAMA, "--batch", "1,2", "--seq", "128,256", "--layers", "1,2"],
    "qwen2": ["qwen2-0.5b", "--batch", "1", "--seq", "128", "--layers", "1,2"],
}
LABELS = {
    "mlp": "article A's network (biases)", "mlp-nobias": "article A's network (no biases)",
    "gpt2": "GPT-2 (config dropout 0.1)", "gpt2-nodrop": "GPT-2 (dropout off)",
    "llama": "Llama-3-8B config, hidden 512, vocab 32000", "qwen2": "Qwen2-0.5B",
}


def run(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, args in RUNS.items():
        path = out / f"{name}.json"
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


def tables(results: dict[str, dict]) -> str:
    env = next(iter(results.values()))["environment"]
    lines = [f"Measured on the CPU with torch {env['torch']} and transformers {env.get('transformers', '-')}.", "",
             "| model | points | saved: ours (max \\|error\\|) | saved: article A/B | saved: Korthikanti | "
             "peak: ours (max \\|error\\|) | peak: article A/B |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, data in results.items():
        s = data["summary"]
        seed = "article A" if "article A" in s else "article B"
        lines.append(f"| {LABELS.get(name, name)} | {s['points']} | {100 * s['saved']['max_abs']:.2f} % | "
                     f"{seed[-1]}: {span(s.get(seed))} | {span(s.get('Korthikanti'))} | "
                     f"{100 * s['peak']['max_abs']:.2f} % | {seed[-1]}: {span(s.get('peak ' + seed))} |")
    lines += ["", "One point per model (the largest of its grid in bf16, SDPA): bytes and error against the "
              "measurement.", "",
              "| model | B, S, L | quantity | measured | ours | article A/B | Korthikanti |",
              "|---|---|---|---:|---:|---:|---:|"]
    for name, data in results.items():
        points = [p for p in data["points"] if p["dtype"] == "bf16" and p["attn"] in ("sdpa", "")]
        p = max(points, key=lambda q: (q["B"] * max(q["S"], 1) * max(q["L"], 1), q["B"]))
        seed = next(iter(p["seeds"]))
        shape = f"{p['B']}, {p['S'] or '–'}, {p['L'] or '–'}"
        kor = p["seeds"].get("Korthikanti")
        lines.append(f"| {LABELS.get(name, name)} | {shape} | saved | {p['saved_measured']:,} | "
                     f"{p['saved_predicted']:,} ({pct(p['saved_error'])}) | {p['seeds'][seed]:,} "
                     f"({pct(p['seed_errors'][seed])}) | "
                     + (f"{kor:,} ({pct(p['seed_errors']['Korthikanti'])}) |" if kor else "– |"))
        ps = p["peak_seeds"][seed]
        lines.append(f"| | | peak | {p['peak_measured']:,} | {p['peak_predicted']:,} ({pct(p['peak_error'])}) | "
                     f"{ps:,} ({pct(p['peak_seed_errors'][seed])}) | – |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="*", type=Path, help="JSON files written by symbolic validate --json")
    parser.add_argument("--run", action="store_true", help="run the README grid first")
    parser.add_argument("--out", type=Path, default=Path("accuracy-results"), help="where --run writes its JSON")
    args = parser.parse_args(argv)
    paths = run(args.out) if args.run else args.results
    if not paths:
        parser.error("give result files or --run")
    results = {Path(p).stem: json.loads(Path(p).read_text()) for p in paths}
    print(tables(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
