"""Torch modules under autocast (bf16-mixed), probed and measured for ``test_module_autocast.py`` (issue 29).

torch is imported here, not in the test process. Three kinds of answer, each beside what real torch
does on the CPU: the operators torch 2.13.0 registers at ``AutocastCPU``/``AutocastCUDA``; single
operators' output dtypes under real ``torch.autocast("cpu", torch.bfloat16)`` and under the probe's
region on the meta device (``networks.module.autocast``), and the weight cache's copies; whole
training steps (forward, backward, AdamW) under real CPU autocast (``measured.measure``) beside the
plan of ``--precision bf16-mixed --device cpu``, fitted at other sizes and batches than asked.
"""

from __future__ import annotations

from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script
from modules_child import _cli  # this folder: sys.path[0] of a child script

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "modules"


def registered():
    """The aten operators with a kernel at each autocast key in the installed torch."""
    import torch

    names = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")]
    return {key: sorted(n.removeprefix("aten::") for n in names if torch._C._dispatch_has_kernel_for_dispatch_key(n, key))
            for key in ("AutocastCPU", "AutocastCUDA")}


OPS = {  # name -> (inputs as (shape, dtype name, requires grad), what runs on them)
    "linear": (((4, 8), "float32"), ((3, 8), "float32")),
    "matmul": (((4, 8), "float32"), ((8, 3), "float32")),
    "einsum": (((4, 8), "float32"), ((8, 3), "float32")),  # not on the CPU's list: its bmm is
    "conv2d": (((1, 2, 6, 6), "float32"), ((3, 2, 3, 3), "float32")),
    "layer_norm": (((4, 8), "bfloat16"),),
    "softmax": (((4, 8), "bfloat16"),),
    "sum": (((4, 8), "bfloat16"),),
    "mse_loss": (((4, 8), "bfloat16"), ((4, 8), "bfloat16")),
    "cross_entropy": (((4, 8), "bfloat16"),),
    "cat": (((4, 8), "float32"), ((4, 8), "bfloat16")),
    "relu": (((4, 8), "float32"),),
}


def _run(name, tensors):
    import torch
    import torch.nn.functional as F

    a = tensors
    if name == "cross_entropy":
        return F.cross_entropy(a[0], torch.zeros(a[0].shape[0], dtype=torch.long, device=a[0].device))
    return {"linear": lambda: F.linear(a[0], a[1]), "matmul": lambda: a[0] @ a[1],
            "einsum": lambda: torch.einsum("ij,jk->ik", a[0], a[1]), "conv2d": lambda: F.conv2d(a[0], a[1]),
            "layer_norm": lambda: F.layer_norm(a[0], a[0].shape[-1:]), "softmax": lambda: a[0].softmax(-1),
            "sum": lambda: a[0].sum(), "mse_loss": lambda: F.mse_loss(a[0], a[1]), "cat": lambda: torch.cat(a),
            "relu": lambda: torch.relu(a[0])}[name]()


def dtypes():
    """Each operator's output dtype: real CPU autocast, the probe's CPU and CUDA policies on meta, and no region."""
    import torch

    from symbolic.networks.module.autocast import autocast

    def made(device, name):
        return [torch.ones(shape, dtype=getattr(torch, dt), device=device) for shape, dt in OPS[name]]

    out = {}
    for name in OPS:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            real = _run(name, made("cpu", name)).dtype
        probed = {}
        for policy in ("cpu", "cuda"):
            with autocast("bfloat16", policy):
                probed[policy] = str(_run(name, made("meta", name)).dtype)
        out[name] = {"real_cpu": str(real), **probed, "outside": str(_run(name, made("meta", name)).dtype)}
    return out


def _copies(device, region):
    """One weight used by two linears in one region: its 16-bit copies made, and the saved storages."""
    import torch
    import torch.nn.functional as F

    w = torch.ones(16, 8, device=device, requires_grad=True)
    x = torch.ones(4, 8, device=device, requires_grad=True)  # so that each linear saves the weight's copy
    saved = {}

    def pack(t):
        saved[id(t.untyped_storage())] = (t.dtype, t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), region():
        y = F.linear(x, w) + F.linear(2 * x, w)
    casts, stack = 0, [y.grad_fn]
    seen = set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        casts += type(node).__name__ == "ToCopyBackward0" and any(
            getattr(nxt, "variable", None) is w for nxt, _ in node.next_functions)  # a cast of w itself
        stack.extend(n for n, _ in node.next_functions)
    weights = sum(1 for dtype, nbytes in saved.values() if dtype == torch.bfloat16 and nbytes == 16 * 8 * 2)
    return {"weight_casts": casts, "saved_weight_copies": weights, "dtype": str(y.dtype)}


def cache():
    import torch

    from symbolic.networks.module.autocast import autocast

    return {"real_cpu": _copies("cpu", lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
            "meta": _copies("meta", lambda: autocast("bfloat16", "cpu"))}


def banned():
    """CUDA's policy refuses binary_cross_entropy, as CUDA autocast does."""
    import torch

    from symbolic.networks.module.autocast import autocast

    x = torch.ones(4, device="meta")
    try:
        with autocast("bfloat16", "cuda"):
            torch.nn.functional.binary_cross_entropy(x, x)
    except RuntimeError as err:
        return str(err)
    return ""


def _measured(source, batch, pure=False):
    """A real CPU step under torch.autocast(bf16) (``pure``: all in bf16, no autocast): saved bytes, the step's
    peak (AdamW), the parameter count."""
    import torch

    from symbolic.measured import measure
    from symbolic.networks.module.source import loss_of, make_inputs

    torch.manual_seed(0)
    dtype, autocast = (torch.bfloat16, None) if pure else (torch.float32, "bf16")
    module = source.build(source.arguments).train().to(dtype)
    x = make_inputs(source, batch, device="cpu", float_dtype=dtype)

    def loss(out):
        return loss_of(out, source.loss)

    return {"saved": measure.saved_tensors(module, x, loss, autocast=autocast).total_bytes,
            "peak": measure.step_peak(module, x, loss, autocast=autocast).peak_bytes,
            "params": sum(p.numel() for p in module.parameters())}


def _case(source, fit, batch, sizes, precision="bf16-mixed"):
    """The ``precision`` plan of ``source`` fitted at the sizes ``fit``, asked at ``sizes`` and ``batch``, and a CPU
    step."""
    import dataclasses

    from symbolic import planning
    from symbolic.networks.module import resolve

    fitted = resolve.module_network(resolve.with_sizes(source, fit))
    asked = resolve.with_sizes(source, sizes)
    net = dataclasses.replace(fitted, module_source=asked)  # the fit's polynomials evaluated at ``sizes``
    plan = planning.plan(net, "train", batch=batch, precision=precision, device="cpu")
    return {"plan": {"saved": plan.activation_bytes, "peak": plan.total, "params": net.total},
            "measured": _measured(asked, batch, pure=precision == "bf16")}


def _file(spec, args, inputs, loss):
    from symbolic.networks.module import files

    return files.file_source(str(DATA / spec), args, files.parse_inputs(inputs), loss)


def steps():
    """Four small networks (torchvision's ResNet-18 agrees as well, by docs/accuracy.md's command: 11 s, left out)."""
    return {"mlp": _case(_file("mlp.py:MLP", {"d_in": 64, "d_h": 32, "n_out": 10}, ["x=B,64"], "cross-entropy"),
                         {}, 7, {}),
            "cnn": _case(_file("cnn.py:CNN", {"channels": 8}, ["x=B,3,H,W"], "cross-entropy"),
                         {"H": 16, "W": 16}, 7, {"H": 40, "W": 24}),
            "vit": _case(_file("nets.py:TinyViT", {"dim": 32}, ["x=B,3,H,W"], "cross-entropy"),
                         {"H": 16, "W": 16}, 3, {"H": 24, "W": 40}),
            "scaled_sdpa": _case(_file("nets.py:ScaledSdpa", {"dim": 32}, ["x=B,S,32"], "mean"), {"S": 8}, 3, {"S": 21}),
            **{f"norms_{p}": _case(_file("nets.py:Norms", {}, ["x=B,3,H,W"], "mean"), {"H": 8, "W": 8}, 3,
                                   {"H": 12, "W": 20}, p) for p in ("bf16-mixed", "bf16")}}


def cached():
    """Asked again, the bf16-mixed fit comes from the cache; the pure precisions' are other entries."""
    from symbolic.networks.module import resolve

    source = _file("mlp.py:MLP", {"d_in": 64, "d_h": 32, "n_out": 10}, ["x=B,64"], "cross-entropy")
    again = resolve.module_network(source)
    return {"mixed": again.step_fit("float32", "cpu", None, "bfloat16")[2], "fp32": again.step_fit("float32", "cpu")[2],
            "bf16": again.step_fit("bfloat16", "cpu")[2]}


def cli():
    spec = [f"{DATA}/cnn.py:CNN", "--arg", "channels=4", "--input", "x=B,3,8,8", "--loss", "mean", "--batch", "3"]
    return {"cpu": _cli("memory", *spec, "--precision", "bf16-mixed", "--device", "cpu"),
            "cuda": _cli("memory", *spec, "--precision", "bf16-mixed"),
            "fp16": _cli("memory", *spec, "--precision", "fp16-mixed", "--device", "cpu", "--json"),
            "fp8": _cli("memory", *spec, "--precision", "fp8")}


def main() -> None:
    child_main.run(lambda tmp: {name: fn() for name, fn in (
        ("registered", registered), ("dtypes", dtypes), ("cache", cache), ("banned", banned), ("steps", steps),
        ("cached", cached), ("cli", cli))}, threads=1)


if __name__ == "__main__":
    main()
