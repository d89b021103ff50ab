#!/usr/bin/env python3
"""Start-up time: ``import symbolic`` and CLI commands against ``import sympy``, in fresh interpreters.

Each candidate is a new ``python`` process (the interpreter this script runs under); every round
runs each candidate once, in turn, and the figures are medians over the rounds, so the ratios
come from one run on one machine. Also lists which heavy packages each candidate loads
(matplotlib, weasyprint, ziamath, torch, numpy, jinja2): there should be none.

Usage: ``python benchmarks/bench_startup.py [--repeat 15] [--profile] [--readme]``;
``--profile`` prints the twenty slowest imports of ``import symbolic`` (``-X importtime``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ROOT, markdown_table, publish, seconds  # noqa: E402

HEAVY = ("matplotlib", "weasyprint", "ziamath", "torch", "numpy", "jinja2")
PY = sys.executable
# Bytecode caching on, as for an installed package (SymPy's .pyc files are there already; a
# PYTHONDONTWRITEBYTECODE=1 shell would make only our modules recompile on every start).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
CACHE = tempfile.mkdtemp(prefix="symbolic-bench-")  # module probes, so that the cached candidates start warm
ENV["SYMBOLIC_CACHE"] = CACHE

# What each candidate runs; CLI commands are run as `python -m symbolic ...` (what the
# `symbolic` script does, without depending on where it is installed).
CANDIDATES: dict[str, list[str]] = {
    "python -c pass": [PY, "-c", "pass"],
    "import sympy": [PY, "-c", "import sympy"],
    "import sympy; x + y (SymPy's first sum)": [PY, "-c", "import sympy; x, y = sympy.symbols('x y'); x + y"],
    "import symbolic": [PY, "-c", "import symbolic"],
    "import symbolic; symbolic.formula(...)": [PY, "-c", "import symbolic; symbolic.formula('llm.peak')"],
    "symbolic list": [PY, "-m", "symbolic", "list"],
    "symbolic params gpt2": [PY, "-m", "symbolic", "params", "gpt2"],
    "symbolic sweep (192 points)": [PY, "-m", "symbolic", "sweep", "llm.peak", "--example", "--grid", "B=1..64",
                                    "--grid", "S=512,1024,2048", "--set", "D=1024"],
    # a torch module asked again: its probe read from the cache (CACHE, warmed by the first round), no torch
    "symbolic memory PATH.py:NAME (cached probe)": [PY, "-m", "symbolic", "memory",
                                                    str(ROOT / "tests" / "data" / "modules" / "cnn.py") + ":CNN",
                                                    "--input", "x=B,3,32,32", "--loss", "cross-entropy",
                                                    "--batch", "8"],
}

PROBE = """
import sys, contextlib, io
argv = sys.argv[1:]
if argv and argv[0] == "-c":
    exec(argv[1])
else:
    from symbolic.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        main(argv[2:])
print(",".join(sorted({m.split('.')[0] for m in sys.modules} & set(HEAVY))))
""".replace("HEAVY", repr(HEAVY))


def available(command: list[str]) -> bool:
    """Whether the command exists and succeeds here (e.g. ``params`` lands with another issue)."""
    result = subprocess.run(command, env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return result.returncode == 0


def heavy_modules(command: list[str]) -> str:
    """Which heavy packages the command has loaded when it finishes."""
    probe = [PY, "-c", PROBE, *command[1:]]
    out = subprocess.run(probe, env=ENV, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1] if out.strip() else ""


def measure(commands: dict[str, list[str]], repeat: int) -> dict[str, float]:
    """Median wall seconds of each command, interleaved."""
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeat):
        for name, command in commands.items():
            start = time.perf_counter()
            subprocess.run(command, env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            samples[name].append(time.perf_counter() - start)
    return {name: sorted(v)[len(v) // 2] for name, v in samples.items()}


def profile() -> None:
    """The slowest imports (self time) of ``import symbolic``."""
    result = subprocess.run([PY, "-X", "importtime", "-c", "import symbolic"], env=ENV, cwd=ROOT,
                            capture_output=True, text=True, check=True)
    rows = []
    for line in result.stderr.splitlines():
        fields = [part.strip() for part in line.removeprefix("import time:").split("|")]
        if len(fields) == 3 and fields[0].isdigit():
            rows.append((int(fields[0]), int(fields[1]), fields[2]))
    for self_us, cumulative_us, name in sorted(rows, reverse=True)[:20]:
        print(f"{self_us / 1e3:8.1f} ms self {cumulative_us / 1e3:8.1f} ms cumulative  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--repeat", type=int, default=15, help="rounds (median)")
    parser.add_argument("--profile", action="store_true", help="print the slowest imports of 'import symbolic'")
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    args = parser.parse_args()
    if args.profile:
        profile()
        return
    commands = {name: cmd for name, cmd in CANDIDATES.items() if available(cmd)}  # also a warm-up round
    times = measure(commands, args.repeat)
    base = times["import sympy"]
    targets = {"import symbolic": 1.3}
    rows = []
    for name, value in times.items():
        ratio = value / base
        target = f" (target ≤ {targets[name]}×)" if name in targets else ""
        ratio_text = f"**{ratio:.2f}×**{target}" if target else f"{ratio:.2f}×"
        rows.append((f"`{name}`", seconds(value), ratio_text, heavy_modules(commands[name]) or "none"))
    missing = [name for name in CANDIDATES if name not in commands]
    table = markdown_table(("command (fresh interpreter)", "median wall time", "vs `import sympy`",
                            "heavy packages loaded"), rows)
    note = (f"Measured by `benchmarks/bench_startup.py` (median of {args.repeat} interleaved rounds, "
            f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, bytecode caching on)."
            + (f" Not measured (command not available yet): {', '.join(missing)}." if missing else ""))
    publish("startup", table, note, args.readme)


if __name__ == "__main__":
    main()
