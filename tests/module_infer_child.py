"""Inference memory and fit of an input size for torch modules, for ``test_module_inference.py`` (issue 29).

torch is imported here, not in the test process. Each case is planned through the module path in
inference (one forward under ``torch.no_grad()`` probed on the meta device) and measured on the CPU
as a real forward (``measured.measure.forward_peak``: parameters, buffers, inputs and every
operator output while alive) at a batch and input sizes the fit did not use. ``fit`` answers are
re-planned by a network probed afresh at the answer's sizes and at one step further. Writes one
JSON object on stdout; exits 77 when torch is missing.
"""

from __future__ import annotations

from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script
from library_modules_child import VIT, _config  # this folder: sys.path[0] of a child script
from modules_child import _cli

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "modules"
CNN = f"{DATA}/cnn.py:CNN"


def _file(spec, args, inputs, loss, sizes=None):
    from symbolic.networks.module import files

    return files.file_source(str(DATA / spec), args, files.parse_inputs(inputs), loss, sizes)


def _case(source, fit, batch, sizes):
    """The inference plan of ``source`` (probed at the sizes ``fit``) at other sizes and batch, beside a CPU forward."""
    import dataclasses

    import torch

    from symbolic import planning
    from symbolic.measured import measure
    from symbolic.networks.module import inference, resolve

    fitted = resolve.module_network(resolve.with_sizes(source, fit))
    probe_fit = fitted.infer_fit("float32")[0]
    asked = resolve.with_sizes(source, sizes)
    net = dataclasses.replace(fitted, module_source=asked)  # the fit at ``fit``'s sizes, evaluated at ``sizes``
    plan = planning.plan(net, "infer", batch=batch, weights="fp32", runtime=False)
    torch.manual_seed(0)
    module = asked.build(asked.arguments).eval()
    x = inference.forward_inputs(asked, batch, dict(asked.sizes), "cpu", torch.float32)
    return {"plan": plan.total, "measured": measure.forward_peak(module, x),
            "params": net.total, "measured_params": sum(p.numel() for p in module.parameters()),
            "steps": dict(zip(probe_fit.names, probe_fit.steps)), "terms": sorted(plan.terms())}


def cached():
    """A second ask of the same forward reads the cache (a fresh network, the same source)."""
    from symbolic.networks.module import resolve

    source = _file("mlp.py:MLP", {"d_in": 48, "d_h": 32, "n_out": 10}, ["x=B,48"], "cross-entropy")
    first = resolve.module_network(source).infer_fit("float32")[2]
    return {"first": first, "again": resolve.module_network(source).infer_fit("float32")[2]}


def cases():
    from symbolic.networks.module import resolve

    eager = {"attn_implementation": "eager"}
    return {"mlp": _case(_file("mlp.py:MLP", {"d_in": 64, "d_h": 32, "n_out": 10}, ["x=B,64"], "cross-entropy"),
                         {}, 7, {}),
            "cnn": _case(_file("cnn.py:CNN", {"channels": 8}, ["x=B,3,H,W"], "cross-entropy", {"H": 16, "W": 16}),
                         {"H": 16, "W": 16}, 7, {"H": 40, "W": 24}),
            "resnet18": _case(resolve.module_source("torchvision:resnet18"), {"H": 64, "W": 64}, 3,
                              {"H": 96, "W": 160}),  # multiples of 32, the total stride
            "vit": _case(_config({**VIT, **eager}), {"H": 48, "W": 48}, 3, {"H": 40, "W": 56})}


def _fit_check(source, names, mode, budget, **options):
    """fit's answer, and the plans of networks probed afresh at the answer's sizes and one step further."""
    from symbolic import planning
    from symbolic.networks.module import resolve

    net = resolve.module_network(source)
    answer = planning.fit_size(net, budget, names, mode, "size", **options)
    grown, _, units = net.varying(names, planning.resolve(net, mode, **options))
    k = answer.value // units[names[0]]
    totals = []
    for step in (k, k + 1):
        sizes = {n: units[n] * step for n in names}
        if mode == "infer":  # one forward traced at the sizes themselves: no fit
            totals.append(_forward_total(resolve.with_sizes(source, sizes), options["batch"], options["weights"]))
            continue
        again = resolve.module_network(resolve.with_sizes(source, sizes))
        totals.append(planning.plan(again, mode, **options).total)
    return {"status": answer.status, "sizes": answer.as_dict()["sizes"], "units": units,
            "budget": answer.limit.bytes, "at": totals[0],
            "next": totals[1], "message": answer.message}


def _forward_total(source, batch, weights):
    """Weights, buffers, inputs and the forward's peak live bytes of one meta-device forward (no polynomial)."""
    from symbolic.networks.module import inference, probe

    dtype = probe.DTYPES[weights]
    module = inference.build(source, dtype)
    traced = inference.trace(source, batch, dict(source.sizes), dtype, module)
    state = sum(int(t.untyped_storage().nbytes()) for t in (*module.parameters(), *module.buffers()))
    return state + traced.inputs + max(traced.forward)


def fits():
    from symbolic.networks.module import resolve

    cnn = _file("cnn.py:CNN", {"channels": 8}, ["x=B,3,H,W"], "cross-entropy", {"H": 16, "W": 24})
    attention = _file("nets.py:Attention", {"dim": 32}, ["ids=B,S:int64"], "cross-entropy", {"S": 8})
    resnet = resolve.with_sizes(resolve.module_source("torchvision:resnet18"), {"H": 64, "W": 64})
    out = {"cnn_infer": _fit_check(cnn, ("H", "W"), "infer", "64MiB", batch=8, weights="fp32", runtime=False),
           "cnn_train": _fit_check(cnn, ("H", "W"), "train", "64MiB", batch=8, precision="fp32", runtime=False),
           "attention_seq": _fit_check(attention, ("S",), "train", "16MiB", batch=4, precision="fp32", runtime=False),
           "resnet_infer": _fit_check(resnet, ("H", "W"), "infer", "1GiB", batch=4, weights="bf16", runtime=False)}
    return out


def cli():
    base = ("--arg", "channels=8", "--input", "x=B,3,H,W", "--set", "H=16", "--set", "W=24", "--loss", "mean")
    return {"memory": _cli("memory", CNN, *base, "--mode", "infer", "--batch", "8", "--gpu", "h100-80gb"),
            "fit": _cli("fit", CNN, *base, "--gpu", "64MiB", "--for", "image-size", "--mode", "infer", "--batch", "8",
                        "--no-runtime", "-q"),
            "bad": {"vary": _cli("fit", CNN, *base, "--gpu", "64MiB", "--for", "image-size", "--vary", "Q"),
                    "vary_batch": _cli("fit", CNN, *base, "--gpu", "64MiB", "--for", "batch", "--vary", "H"),
                    "weights": _cli("memory", CNN, *base, "--mode", "infer", "--weights", "int8"),
                    "tp": _cli("memory", CNN, *base, "--mode", "infer", "--tp", "2"),
                    "no_sizes": _cli("fit", f"{DATA}/mlp.py:MLP", "--input", "x=B,2048", "--gpu", "1GiB", "--for",
                                     "seq"),
                    "seq_of_image": _cli("fit", CNN, *base, "--gpu", "64MiB", "--for", "seq")}}


def main() -> None:
    child_main.run(lambda tmp: {"cases": cases(), "cached": cached(), "fits": fits(), "cli": cli()}, threads=1)


if __name__ == "__main__":
    main()
