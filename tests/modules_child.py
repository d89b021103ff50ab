"""Torch modules probed and measured for ``test_modules.py``, run in a child process (issue 29).

torch is imported here, not in the test process. Each case is a user file of ``tests/data/modules``
planned through the module path (``networks.module``) and measured on the CPU as a real step
(``measured.measure``: the bytes saved for backward, the step's peak, the parameter count), at
shapes the fit did not use; the command line runs in this process too. Writes one JSON object on
stdout; exits with ``SKIP`` (77) when torch is missing.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "modules"
WIDTHS = {"d_in": 512, "d_h": 256, "n_out": 10}


def _net(spec, args, inputs, loss, sizes=None):
    from symbolic.networks.module import files, resolve

    source = files.file_source(str(DATA / spec), args, files.parse_inputs(inputs), loss, sizes)
    return source, resolve.module_network(source)


def _measured(source, batch, optimizer=None):
    """A real step on the CPU: saved bytes, the step's peak, the parameter count."""
    import torch

    from symbolic.measured import measure
    from symbolic.networks.module.source import loss_of, make_inputs

    torch.manual_seed(0)
    module = source.build(source.arguments).train()
    x = make_inputs(source, batch, device="cpu")

    def loss(out):
        return loss_of(out, source.loss)

    return {"saved": measure.saved_tensors(module, x, loss).total_bytes,
            "peak": measure.step_peak(module, x, loss, optimizer=optimizer).peak_bytes,
            "params": sum(p.numel() for p in module.parameters())}


def _plan(net, batch, **options):
    from symbolic import planning

    plan = planning.plan(net, "train", batch=batch, precision="fp32", device="cpu", **options)
    return {"saved": plan.activation_bytes, "peak": plan.total, "params": net.total, "terms": sorted(plan.terms())}


def _cli(*argv):
    from symbolic.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def article_a():
    from symbolic import planning
    from symbolic.networks.shape import article_a_shape

    _, net = _net("mlp.py:MLP", WIDTHS, ["x=B,512"], "cross-entropy")
    shape = article_a_shape("mlp", WIDTHS)
    out = {"same_params": net.params.expr == shape.params.expr}
    for batch in (5, 17):
        mine = planning.plan(net, "train", batch=batch, precision="fp32", device="cpu")
        article = planning.plan(shape, "train", batch=batch, precision="fp32", device="cpu")
        out[str(batch)] = {"module": [mine.activation_bytes, mine.total],
                           "article": [article.activation_bytes, article.total]}
    return out


def cnn():
    source, net = _net("cnn.py:CNN", {"channels": 8}, ["x=B,3,H,W"], "cross-entropy", {"H": 16, "W": 16})
    asked, at = _net("cnn.py:CNN", {"channels": 8}, ["x=B,3,H,W"], "cross-entropy", {"H": 40, "W": 24})
    return {"plan": _plan(at, 7), "measured": _measured(asked, 7),
            "symbols": sorted(s.name for s in net.saved_formula().free_symbols)}


def dropout():
    import torch

    source, net = _net("nets.py:make_mlp", {"width": 24}, ["x=B,24"], "mean")
    return {"plan": _plan(net, 9), "measured": _measured(source, 9),
            "sgd": _plan(net, 9, optimizer="sgd"),
            "sgd_measured": _measured(source, 9, optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1))}


def attention():
    import sympy

    _, net = _net("nets.py:Attention", {"dim": 32}, ["ids=B,S:int64"], "cross-entropy", {"S": 8})
    expr = sympy.expand(net.saved_formula())
    s = next(x for x in expr.free_symbols if x.name == "S")
    asked, at = _net("nets.py:Attention", {"dim": 32}, ["ids=B,S:int64"], "cross-entropy", {"S": 21})
    return {"degree_s": int(sympy.degree(expr, s)), "plan": _plan(at, 3), "measured": _measured(asked, 3)}


def cached():
    source, _ = _net("mlp.py:MLP", WIDTHS, ["x=B,512"], "cross-entropy")
    from symbolic.networks.module import resolve

    again = resolve.module_network(source)
    again.step_fit("float32", "cpu")  # as the plans above asked it (--device cpu)
    return {"params": again.from_cache, "step": again.step_fit("float32", "cpu")[2]}


def refusals():
    from symbolic import planning

    _, net = _net("mlp.py:MLP", WIDTHS, ["x=B,512"], "cross-entropy")
    out = {}
    for name, options in {"tp": {"tp": 2}, "lora": {"precision": "fp32", "lora_rank": 8}}.items():
        try:
            planning.plan(net, "train", batch=2, **options)
            out[name] = ""
        except ValueError as err:
            out[name] = str(err)
    return out


BAD = {
    "no-file": ("params", "nope.py:X", "--input", "x=B,4"),
    "no-name": ("params", f"{DATA}/nets.py:Missing", "--input", "x=B,4"),
    "not-module": ("params", f"{DATA}/nets.py:NOT_A_MODULE", "--input", "x=B,4"),
    "raises": ("params", f"{DATA}/nets.py:Raises", "--input", "x=B,4"),
    "shape": ("memory", f"{DATA}/nets.py:make_mlp", "--input", "x=B,7", "--loss", "mean", "--precision", "fp32"),
    "data": ("memory", f"{DATA}/nets.py:DataDependent", "--input", "x=B,4", "--loss", "mean", "--precision", "fp32"),
    "no-loss": ("memory", f"{DATA}/nets.py:make_mlp", "--input", "x=B,16", "--precision", "fp32"),
    "dimension": ("params", f"{DATA}/nets.py:make_mlp", "--input", "x=B,Q!"),
    "not-a-module-model": ("memory", "gpt2", "--arg", "d=1"),
}


def cli():
    import torch

    from symbolic import planning
    from symbolic.networks.module import files
    from symbolic.networks.shape import article_a_shape

    spec = f"{DATA}/cnn.py:CNN"
    module = files.file_source(spec, {"channels": 4}, files.parse_inputs(["x=B,3,8,8"]), "mean").build({"channels": 4})
    assert isinstance(module, torch.nn.Module)
    return {"bad": {name: _cli(*argv) for name, argv in BAD.items()},
            "params": _cli("params", spec, "--arg", "channels=4", "--input", "x=B,3,8,8", "--loss", "mean"),
            "params_count": sum(p.numel() for p in module.parameters()),
            "mlp": _cli("memory", "mlp", "--arg", "d_in=512", "--precision", "fp32", "-q"),
            "memory": _cli("memory", spec, "--arg", "channels=4", "--input", "x=B,3,8,8", "--loss", "mean"),
            "memory_json": _cli("memory", spec, "--arg", "channels=4", "--input", "x=B,3,8,8", "--loss", "mean",
                                "--json"),
            "mlp_total": planning.plan(article_a_shape("mlp", {"d_in": 512}), "train", precision="fp32").total}


def main() -> None:
    child_main.run(lambda tmp: {name: fn() for name, fn in (
        ("article_a", article_a), ("cnn", cnn), ("dropout", dropout), ("attention", attention), ("cached", cached),
        ("refusals", refusals), ("cli", cli))}, threads=1)


if __name__ == "__main__":
    main()
