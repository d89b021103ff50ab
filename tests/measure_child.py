"""Torch measurements for ``test_measure.py`` (its ``measured_steps`` tests), run in a child process.

torch and transformers are imported here, not in the test process (their objects would slow
every later test's garbage collection). The tests get these measurements through
``plan_phases_child.py`` (``collect``, under ``"measure"``), in one process with the planner and
fine-tuning cases. Run alone, it writes one JSON object on stdout; exits with ``SKIP`` when torch
or transformers cannot be imported.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

from tiny_models import GPT2, LLAMA  # this folder: sys.path[0] of a child script and of the tests

from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

SKIP = 77
ROOT = Path(__file__).resolve().parent.parent

# the tiny models (tiny_models.py), one or two layers: seconds on a CPU
MLP = {"d_in": 64, "d_h": 128, "n_out": 10}
CASES = [
    # name, overrides, dropout, grid, options (optimizer, foreach, use_cache, masks, loss)
    ("mlp", MLP, "config", {"batch": (1, 64), "dtype": ("fp32", "bf16")}, {}),
    ("mlp", MLP, "config", {"batch": (64,), "dtype": ("fp32", "bf16-mixed")}, {"optimizer": "sgd-momentum"}),
    ("mlp-nobias", MLP, "config", {"batch": (16,), "dtype": ("fp32",)}, {}),
    ("mlp-nobias", MLP, "config", {"batch": (64,), "dtype": ("fp32",)}, {"optimizer": "sgd"}),
    ("mlp", MLP, "config", {"batch": (16,), "dtype": ("fp32",)}, {"loss": "mse"}),
    ("gpt2", GPT2, "config", {"batch": (2,), "seq": (32,), "layers": (2,)}, {"use_cache": False}),
    ("gpt2", GPT2, "config", {"batch": (1, 2), "seq": (48,), "layers": (2,), "dtype": ("bf16-mixed",)}, {}),
    ("gpt2", GPT2, "off", {"batch": (1, 2), "seq": (32,), "layers": (1,), "dtype": ("fp32",)}, {"use_cache": True}),
    ("gpt2", GPT2, "config", {"batch": (2,), "seq": (32,), "layers": (1,), "dtype": ("bf16",), "attn": ("eager",)},
     {"masks": "bool", "use_cache": False}),
    ("llama-3-8b", LLAMA, "config", {"batch": (1, 2), "seq": (32,), "layers": (2,)}, {}),
    ("llama-3-8b", LLAMA, "config", {"batch": (2,), "seq": (48,), "layers": (1,), "dtype": ("bf16-mixed",)},
     {"optimizer": "sgd-momentum"}),
    ("llama-3-8b", LLAMA, "config", {"batch": (2,), "seq": (32,), "layers": (1,), "dtype": ("fp32",), "attn": ("sdpa",)},
     {"foreach": True, "use_cache": False}),
]


def unit_checks() -> dict:
    """Checks of ``symbolic.measured.measure`` on hand-made modules."""
    import torch

    from symbolic.measured import crosscheck as validate
    from symbolic.measured import measure

    out: dict = {}
    with torch.device("meta"):
        net = validate.article_a_class()
        out["params_bias"] = measure.count_parameters(net(bias=True))
        out["params_nobias"] = measure.count_parameters(net(bias=False))

    class Views(torch.nn.Module):
        """Saves three views of one (B, 3·n) tensor and its own weight: one storage counts."""

        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8, 24))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x @ self.w  # mm saves x (and the parameter, excluded)
            q, k, v = y.split(8, dim=1)
            return (q * k * v).sum()  # the muls save views of y

    x = torch.randn(5, 8)
    saved = measure.saved_tensors(Views(), x, lambda out: out)
    out["views_saved"] = saved.total_bytes
    out["views_expected"] = 5 * 8 * 4 + 5 * 24 * 4 + 5 * 8 * 4  # x, y (once), q·k (a new tensor)
    model = validate.build(validate.load_target("gpt2", GPT2), 1, "fp32", "eager")
    inputs, loss_fn = validate.inputs_for(validate.load_target("gpt2", GPT2), 2, 32, "fp32")
    dispatch = measure.step_peak(model, inputs, loss_fn, method="dispatch")
    profiler = measure.step_peak(model, inputs, loss_fn, method="profiler")
    out["peak_dispatch"] = dispatch.peak_bytes
    out["peak_profiler"] = profiler.peak_bytes
    out["peak_phase"] = dispatch.phase
    return out


def validation() -> list[dict]:
    from symbolic.measured import crosscheck as validate

    results = []
    for name, overrides, dropout, grid, options in CASES:
        points = validate.run(name, validate.Grid(**grid), overrides=overrides, dropout=dropout, **options)
        results.append({"model": name, "dropout": dropout, "options": options, "summary": validate.summarize(points),
                        "points": [p.as_dict() for p in points]})
    return results


def gpu_script() -> dict:
    """benchmarks/gpu_measure.py's logic on the CPU (the GPU itself is not needed to exercise it)."""
    spec = importlib.util.spec_from_file_location("gpu_measure", ROOT / "benchmarks" / "gpu_measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.measure_all(device="cpu", quick=True)


def main() -> int:
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        return SKIP
    sys.path.insert(0, str(ROOT))
    torch.set_num_threads(1)  # tiny models: extra threads only spin (CPU time, not speed, on a shared machine)
    json.dump(collect(), sys.stdout)
    return 0


def collect() -> dict:
    """Everything the tests read: unit checks, the validation grid, the GPU script's logic, and the seconds taken."""
    start = time.perf_counter()
    data = {"unit": unit_checks(), "validation": validation(), "gpu_script": gpu_script()}
    data["seconds"] = time.perf_counter() - start
    return data


if __name__ == "__main__":
    sys.exit(main())
