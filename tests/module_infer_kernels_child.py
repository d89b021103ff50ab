"""Inference of a torch module under the planned device's attention kernels, for ``test_module_infer_kernels.py``.

torch is imported here, not in the test process. A tiny self-attention block through
``F.scaled_dot_product_attention`` (``tests/data/modules/nets.py:SdpaAttention``) is planned in ``--mode
infer`` with ``--device cpu`` and ``cuda`` (fitted at S 24, asked at another batch and S) and measured on the
CPU as a real forward under ``torch.no_grad()`` (``measure.forward_peak``); each forward's fitted moments are
given by their B·S² coefficient, the bytes that grow with the B·heads·L·S scores. Writes one JSON object on
stdout; exits 77 when torch is missing.
"""

from __future__ import annotations

from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script
from modules_child import _cli  # this folder: sys.path[0] of a child script

ROOT = Path(__file__).resolve().parent.parent
MODEL = f"{ROOT}/tests/data/modules/nets.py:SdpaAttention"
DIM, HEADS, FIT_S, BATCH, ASKED_S = 32, 2, 24, 3, 40
FLAGS = ["--arg", f"dim={DIM}", "--arg", f"heads={HEADS}", "--input", f"x=B,S,{DIM}", "--set", f"S={FIT_S}",
         "--loss", "mean", "--mode", "infer", "--weights", "fp32", "--no-runtime", "--json"]


def _score_bytes(fit):
    """The largest B·S² coefficient among the forward's fitted moments (bytes per batch row and query-key pair)."""
    import sympy

    b, s = sympy.symbols("B S")
    return max(int(sympy.Poly(sympy.expand(p.expr([b, s])), b, s).coeff_monomial(b * s**2)) for p in fit.forward)


def planned():
    """The plans under each device's kernels at (BATCH, ASKED_S), the real CPU forward there, each fit's scores."""
    import dataclasses

    import torch

    from symbolic import planning
    from symbolic.measured import measure
    from symbolic.networks.module import files, inference, resolve

    source = files.file_source(MODEL.split(":")[0] + ":SdpaAttention", {"dim": DIM, "heads": HEADS},
                               files.parse_inputs([f"x=B,S,{DIM}"]), "mean", {"S": FIT_S})
    fitted = resolve.module_network(source)
    asked = resolve.with_sizes(source, {"S": ASKED_S})
    net = dataclasses.replace(fitted, module_source=asked)  # the fit at S 24, evaluated at S 40
    plans = {device: planning.plan(net, "infer", batch=BATCH, weights="fp32", runtime=False, device=device).total
             for device in ("cpu", "cuda")}
    torch.manual_seed(0)
    module = asked.build(asked.arguments).eval()
    x = inference.forward_inputs(asked, BATCH, {"S": ASKED_S}, "cpu", torch.float32)
    scores = {str(device): _score_bytes(fitted.infer_fit("float32", device)[0]) for device in (None, "cpu", "cuda")}
    return {"plans": plans, "measured": measure.forward_peak(module, x), "scores": scores}


def cli():
    return {"cpu": _cli("memory", MODEL, *FLAGS, "--device", "cpu"), "default": _cli("memory", MODEL, *FLAGS),
            "formula": _cli("memory", "llama-2-7b", "--mode", "infer", "--device", "cpu")}


def main() -> None:
    child_main.run(lambda tmp: {"planned": planned(), "cli": cli()}, threads=1)


if __name__ == "__main__":
    main()
