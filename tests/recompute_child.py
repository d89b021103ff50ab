"""Torch modules under ``--recompute full`` and ``--fsdp``, probed and measured for ``test_module_recompute.py``.

Each case is a module with a repeated stack, planned with its blocks checkpointed (the probe wraps them in
``torch.utils.checkpoint(use_reentrant=False)`` on the meta device) and measured on the CPU as a real step of
the module checkpointing its own blocks in its forward (``tests/data/modules/blocks.py``; timm's
``set_grad_checkpointing``), at shapes the fit did not use. ``fsdp``: a Llama-shaped module under FSDP2 beside
the table family's plan of the same matrices (whose FSDP2 terms ``test_fsdp.py`` checks against two gloo ranks).
Writes one JSON object on stdout; exits with ``SKIP`` (77) when torch is missing.
"""

from __future__ import annotations

import child_main  # this folder: sys.path[0] of a child script
from modules_child import DATA, _cli, _plan  # this folder: sys.path[0] of a child script

ASKED = {"H": 24, "W": 24}  # the fit used 16, 32, 48 (and 80 to check): 24 is none of them
VIT = ("blocks.py:ViT", {"dim": 32}, ["x=B,3,H,W"], "cross-entropy")
LORA = ("mlp.0", "mlp.2")  # each block's MLP adapted, with the blocks checkpointed


def _source(spec, args, inputs, loss, sizes):
    from symbolic.networks.module import files, resolve

    source = files.file_source(str(DATA / spec), args, files.parse_inputs(inputs), loss, sizes)
    return source, resolve.module_network(source)


def _real(source, batch, every=1, library=False, autocast=None, lora=None):
    """A real step on the CPU with the module checkpointing its own blocks: saved bytes, peak, parameters."""
    import torch

    from symbolic.measured import measure
    from symbolic.networks.module.source import loss_of, make_inputs

    torch.manual_seed(0)
    module = source.build(source.arguments).train()
    if library:
        module.set_grad_checkpointing(True)  # timm's own switch
    else:
        module.grad_checkpointing, module.every = True, every
    if lora:  # peft's own adapters on the named modules, the base frozen (what --lora-rank 4 --lora-targets plans)
        from peft import LoraConfig, inject_adapter_in_model

        module = inject_adapter_in_model(LoraConfig(r=4, target_modules=list(lora)), module)
    x = make_inputs(source, batch, device="cpu")

    def loss(out):
        return loss_of(out, source.loss)

    return {"saved": measure.saved_tensors(module, x, loss, autocast=autocast).total_bytes,
            "peak": measure.step_peak(module, x, loss, autocast=autocast).peak_bytes,
            "params": sum(p.numel() for n, p in module.named_parameters() if "lora_" not in n)}  # the base


def vit():
    _, net = _source(*VIT, ASKED)
    source = net.module_source
    return {"blocks": list(net.checkpoint_blocks),
            "full": {"plan": _plan(net, 7, recompute="full"), "measured": _real(source, 7)},
            "every2": {"plan": _plan(net, 5, recompute="full", recompute_every=2), "measured": _real(source, 5, 2)},
            "mixed": {"plan": _mixed_plan(net, 6), "measured": _real(source, 6, autocast="bf16")},
            "lora": {"plan": _plan(net, 7, recompute="full", lora_rank=4, lora_targets=list(LORA)),
                     "measured": _real(source, 7, lora=LORA)}}


def _mixed_plan(net, batch):
    """bf16-mixed with the blocks checkpointed: the recompute in backward runs under autocast again (as
    ``torch.utils.checkpoint`` re-enters it), so its casts are the forward's."""
    from symbolic import planning

    plan = planning.plan(net, "train", batch=batch, precision="bf16-mixed", device="cpu", recompute="full")
    return {"saved": plan.activation_bytes, "peak": plan.total, "params": net.total}


def rescnn():
    _, net = _source("blocks.py:ResCNN", {"channels": 8}, ["x=B,3,H,W"], "cross-entropy", {"H": 40, "W": 24})
    return {"blocks": list(net.checkpoint_blocks),
            "full": {"plan": _plan(net, 5, recompute="full"), "measured": _real(net.module_source, 5)}}


def timm_vit():
    import importlib.util

    if importlib.util.find_spec("timm") is None:
        return {}
    from symbolic.networks.module import resolve

    options = resolve.ModuleOptions(arguments={"depth": 3, "embed_dim": 32, "num_heads": 2})
    net = resolve.module_network("timm:vit_tiny_patch16_224", options)
    return {"blocks": list(net.checkpoint_blocks),
            "full": {"plan": _plan(net, 7, recompute="full"), "measured": _real(net.module_source, 7, library=True)}}


def flops():
    """The training FLOPs with and without the checkpointed blocks, and each module's forward FLOPs."""
    _, net = _source(*VIT, ASKED)
    full, none = net.own_flops(4, "fp32", 1), net.own_flops(4, "fp32")
    return {"full": int(full.train.evaluate(full.train.restrict(full.values)).total * 4),
            "none": int(none.train.evaluate(none.train.restrict(none.values)).total * 4),
            "forward": {row["module"]: row["forward"] for row in none.modules}}


def search():
    from symbolic.catalogs import gpus
    from symbolic.planning import search as planner

    _, net = _source(*VIT, ASKED)
    _, plain = _source("blocks.py:Plain", {"width": 8}, ["x=B,8"], "mean", {})
    gpu = gpus.get("h100-80gb")

    def recomputes(model):
        layouts = planner.enumerate_layouts(model, gpu, counts=[1], global_batch=4, measured=True)
        return sorted({str(lay["recompute"]) for lay in layouts})

    return {"vit": recomputes(net), "plain": recomputes(plain)}


def searched():
    """``plan --json`` over a small search of the ViT (FSDP2 among the layouts), and ``memory --json`` per layout."""
    import json

    from module_plan_child import _flags  # this folder: sys.path[0] of a child script

    model = [f"{DATA}/blocks.py:ViT", "--arg", "dim=32", "--input", "x=B,3,H,W", "--set", "H=24", "--set", "W=24",
             "--loss", "cross-entropy", "--device", "cpu", "--precision", "fp32"]  # fits vit(), flops() ask (cached)
    plan = _cli("plan", *model, "--gpu", "h100-80gb", "--mfu", "0.4", "--gpus", "2", "--global-batch", "4", "--batch",
                "2", "--top", "100", "--json")
    if plan["code"]:
        return {"error": plan["err"]}
    layouts = json.loads(plan["out"])["layouts"]
    return {"layouts": layouts, "memory": [json.loads(_cli("memory", *model, *_flags(lay), "--gpu", "h100-80gb",
                                                           "--json")["out"])["total_bytes"] for lay in layouts]}


def freed():
    """The step with each gradient dropped as it accumulates (what FSDP2's terms are added to), against a real CPU
    step whose plain SGD runs in backward (``measure.step_peak(in_backward=True)``: each gradient stepped and freed,
    no optimizer state): backward's peak, counted from zero, with and without the blocks checkpointed."""
    import torch

    from symbolic.measured import measure
    from symbolic.networks.module.source import loss_of, make_inputs

    _, net = _source(*VIT, ASKED)
    source, out = net.module_source, {}
    for recompute in (0, 1):
        torch.manual_seed(0)
        module = source.build(source.arguments).train()
        module.grad_checkpointing = bool(recompute)
        x = make_inputs(source, 7, device="cpu")
        peak = measure.step_peak(module, x, lambda o: loss_of(o, source.loss), in_backward=True,
                                 optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1))
        fit, buffers, _ = net.step_fit("float32", "cpu", None, recompute=recompute, sharded=True)
        point = (7, *(ASKED[n] for n in fit.names))
        planned = fit.peak("backward", point) + fit.inputs.at(point) + 4 * net.total + buffers
        out[str(recompute)] = {"measured": peak.phases["backward"], "planned": int(planned)}
    return out


def refusals():
    vit_args = (f"{DATA}/blocks.py:ViT", "--arg", "dim=32", "--input", "x=B,3,H,W", "--set", "H=24", "--set", "W=24",
                "--loss", "cross-entropy", "--precision", "fp32")
    mixed = (*vit_args[:-1], "bf16-mixed", "--fsdp", "--dp", "4")  # the command, which failed
    return {"plain": _cli("memory", f"{DATA}/blocks.py:Plain", "--input", "x=B,8", "--loss", "mean", "--recompute",
                          "full", "--precision", "fp32"),
            "every": _cli("memory", *vit_args, "--recompute", "full", "--recompute-every", "5"),
            "selective": _cli("memory", *vit_args, "--recompute", "selective"),
            "ops": _cli("memory", *vit_args, "--recompute", "ops"),
            "fsdp": _cli("memory", *vit_args, "--fsdp", "--dp", "2", "--fsdp-param-dtype", "bf16"),
            "memory": _cli("memory", *vit_args, "--recompute", "full", "--device", "cpu"),
            "named": _cli("memory", *vit_args, "--recompute", "full", "--device", "cpu", "--batch", "5", "--json",
                          "--checkpoint-modules", "blocks.1", "--checkpoint-modules", "blocks.3"),
            "unknown": _cli("memory", *vit_args, "--recompute", "full", "--checkpoint-modules", "Nope"),
            "lone": _cli("memory", *vit_args, "--checkpoint-modules", "blocks.1"),
            "fp16_units": _cli("memory", *mixed, "--fsdp-param-dtype", "fp16"),
            "mixed_fsdp": _cli("memory", *mixed, "--device", "cpu"),
            "mixed_plan": _cli("plan", *mixed[:-2], "--recompute", "none", "--device", "cpu", "--gpu", "h100-80gb",
                               "--mfu", "0.4", "--gpus", "2", "--global-batch", "4")}  # mixed_fsdp's probe


LLAMA = {"hidden": 64, "ffn": 192, "layers": 3, "vocab": 128}  # tests/data/modules/llama_blocks.py's defaults


def fsdp():
    """The module under FSDP2 (dp 4, fp32) and, without torch, the table family's plan of the same matrices."""
    import json
    import tempfile
    from pathlib import Path

    from symbolic import planning

    _, net = _source("llama_blocks.py:Llama", dict(LLAMA), ["ids=B,S:int64"], "cross-entropy", {"S": 8})
    options = {"dp": 4, "fsdp": True, "batch": 1, "runtime": False, "precision": "fp32"}
    config = {"model_type": "llama", "hidden_size": LLAMA["hidden"], "intermediate_size": LLAMA["ffn"],
              "num_hidden_layers": LLAMA["layers"], "num_attention_heads": 4, "num_key_value_heads": 4,
              "vocab_size": LLAMA["vocab"], "tie_word_embeddings": False, "max_position_embeddings": 64}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(config))
        table = planning.plan(str(path), seq=8, fsdp_param_dtype="fp32", **options)
    module = planning.plan(net, "train", **options)
    kept = planning.plan(net, "train", **options, reshard_after_forward=False)
    return {"module": module.terms(), "table": table.terms(), "kept": kept.terms(), "units": list(net.fsdp_units),
            "params": net.total, "notes": module.notes}


def fsdp_mixed():
    """bf16-mixed under FSDP2 both ways (param_dtype bf16 without autocast, the default; fp32 with autocast): the
    module's terms, the table family's of the same matrices, and the module's pure bf16 plan under FSDP2 and
    bf16-mixed plan without it (whose saved tensors each way's step is)."""
    import json
    import tempfile
    from pathlib import Path

    from symbolic import planning

    _, net = _source("llama_blocks.py:Llama", dict(LLAMA), ["ids=B,S:int64"], "cross-entropy", {"S": 8})
    options = {"dp": 4, "fsdp": True, "batch": 1, "runtime": False, "precision": "bf16-mixed"}
    config = {"model_type": "llama", "hidden_size": LLAMA["hidden"], "intermediate_size": LLAMA["ffn"],
              "num_hidden_layers": LLAMA["layers"], "num_attention_heads": 4, "num_key_value_heads": 4,
              "vocab_size": LLAMA["vocab"], "tie_word_embeddings": False, "max_position_embeddings": 64}
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(config))
        for dtype in ("bf16", "fp32"):
            table = planning.plan(str(path), seq=8, fsdp_param_dtype=dtype, **options)
            asked = {} if dtype == "bf16" else {"fsdp_param_dtype": dtype}  # bf16: the default
            module = planning.plan(net, "train", **options, **asked)
            out[dtype] = {"module": module.terms(), "table": table.terms(), "saved": module.activation_bytes,
                          "notes": module.notes}
    out["bf16-pure"] = planning.plan(net, "train", **{**options, "precision": "bf16"}).activation_bytes
    out["bf16-mixed-plain"] = planning.plan(net, "train", batch=1, runtime=False,
                                            precision="bf16-mixed").activation_bytes
    return out


def freed_bf16():
    """The pure bf16 step FSDP2's default bf16-mixed setup plans, gradients dropped, against a real CPU bf16 step
    (the module and its inputs in bf16, plain SGD in backward): backward's peak, as ``freed`` does for fp32."""
    import torch

    from symbolic.measured import measure
    from symbolic.networks.module.source import loss_of, make_inputs

    _, net = _source(*VIT, ASKED)
    source = net.module_source
    torch.manual_seed(0)
    module = source.build(source.arguments).train().to(torch.bfloat16)
    x = make_inputs(source, 7, device="cpu", float_dtype=torch.bfloat16)
    peak = measure.step_peak(module, x, lambda o: loss_of(o, source.loss), in_backward=True,
                             optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1))
    fit, buffers, _ = net.step_fit("bfloat16", "cpu", None, sharded=True)
    point = (7, *(ASKED[n] for n in fit.names))
    planned = fit.peak("backward", point) + fit.inputs.at(point) + 2 * net.total + buffers
    return {"measured": peak.phases["backward"], "planned": int(planned)}


def report_blocks():
    """The blocks a report's ``[module]`` table names (``checkpoint_modules``), as the report plans the module."""
    from symbolic.report import module_model
    from symbolic.report.spec import ModelRef

    ref = ModelRef("ViT", module=f"{DATA}/blocks.py:ViT", arguments=(("dim", 32),), inputs=("x=B,3,H,W",),
                   loss="cross-entropy", sizes=(("H", 24), ("W", 24)), checkpoint=("blocks.1", "blocks.3"))
    return list(module_model.network(ref).checkpoint_blocks)


def main() -> None:
    child_main.run(lambda tmp: {name: fn() for name, fn in (
        ("vit", vit), ("rescnn", rescnn), ("timm", timm_vit), ("flops", flops), ("search", search),
        ("refusals", refusals), ("fsdp", fsdp), ("searched", searched), ("freed", freed),
        ("fsdp_mixed", fsdp_mixed), ("freed_bf16", freed_bf16), ("report_blocks", report_blocks))}, threads=1)


if __name__ == "__main__":
    main()
