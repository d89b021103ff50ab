"""nn.MultiheadAttention probed and measured for ``test_module_mha.py``, run in a child process (issue 29).

Each case is ``tests/data/modules/mha.py:Block`` planned with ``--device cpu`` (fitted at S = 8) and measured on
the CPU as a real step (``measure.saved_tensors``, ``measure.step_peak`` with AdamW) at S = 21, batch 7; the
saved bytes' degree in S fitted with the CUDA GPU's kernels (``--device cuda``); and the inference plan beside a
CPU forward under ``torch.no_grad()`` (eval: the fused fast path where its conditions hold). Writes one JSON object on stdout;
exits with ``SKIP`` (77) when torch is missing.
"""

from __future__ import annotations

from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script
from modules_child import _measured, _plan

SPEC = str(Path(__file__).resolve().parent / "data" / "modules" / "mha.py") + ":Block"
CASES = {"weights": {"weights": 1}, "no-weights": {"weights": 0}, "no-weights-seq-first": {"weights": 0, "batch_first": 0},
         "no-weights-dropout": {"weights": 0, "dropout": 1}}
INFER = {"weights": {"weights": 1}, "no-weights": {"weights": 0}, "weights-seq-first": {"weights": 1, "batch_first": 0}}


def _source(args, length):
    from symbolic.networks.module import files

    return files.file_source(SPEC, args, files.parse_inputs(["x=B,S,32"]), "cross-entropy", {"S": length})


def _case(args):
    from symbolic.networks.module import resolve

    asked = _source(args, 21)
    fitted = resolve.module_network(_source(args, 8))
    return {"plan": _plan(resolve.module_network(asked), 7), "measured": _measured(asked, 7),
            "cuda_degree": max(e[1] for e, _ in fitted.step_fit("float32", "cuda")[0].saved_total().coefs)}


def _infer(args):
    """The inference plan (``--mode infer --device cpu``, fitted at S = 8) beside a CPU forward under no_grad at S = 160."""
    import dataclasses

    import torch

    from symbolic import planning
    from symbolic.measured import measure
    from symbolic.networks.module import inference, resolve

    asked = _source(args, 160)
    net = dataclasses.replace(resolve.module_network(_source(args, 8)), module_source=asked)
    plan = planning.plan(net, "infer", batch=7, weights="fp32", runtime=False, device="cpu")
    torch.manual_seed(0)
    module = asked.build(asked.arguments).eval()
    return {"plan": plan.total, "measured": measure.forward_peak(module, inference.forward_inputs(
        asked, 7, dict(asked.sizes), "cpu", torch.float32))}


def main() -> None:
    child_main.run(lambda tmp: {"train": {name: _case(args) for name, args in CASES.items()},
                                "infer": {name: _infer(args) for name, args in INFER.items()}}, threads=1)


if __name__ == "__main__":
    main()
