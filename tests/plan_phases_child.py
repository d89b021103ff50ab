"""Measured whole-step peaks against ``symbolic memory --json`` (the planner's total), run in a child process.

``test_measure.py`` runs it once for all its tests (``collect``): the measurements of
``measure_child.py``, these planner cases and, with peft and bitsandbytes installed, every
measurement of ``finetune_child.py``.

For each case it measures two AdamW or SGD steps with real PyTorch on the CPU
(``crosscheck.measure_point``: ``measure.step_peak`` with the phases marked) and runs the
command a user would run, ``symbolic memory CONFIG --activations pytorch --device cpu ... --json``,
on the same config written to a file (article A's network: ``symbolic memory mlp``). The
planner knows nothing measured: N comes from the architecture's own parameter formula. Writes
one JSON object on stdout; exits with ``SKIP`` when torch or transformers cannot be imported.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

from tiny_models import GPT2, LLAMA  # this folder: sys.path[0] of a child script and of the tests

from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

SKIP = 77
ROOT = Path(__file__).resolve().parent.parent

# the tiny models (tiny_models.py), two layers: seconds on a CPU
# name, overrides, batch, seq, precision, attn, optimizer, dropout masks ("" = the device's), loss
CASES = [
    ("gpt2", GPT2, 2, 32, "fp32", "eager", "adamw", "", "cross-entropy"),
    ("gpt2", GPT2, 1, 32, "fp32", "sdpa", "sgd-momentum", "", "cross-entropy"),
    ("gpt2", GPT2, 2, 32, "bf16", "sdpa", "adamw", "bool", "cross-entropy"),
    ("gpt2", GPT2, 2, 32, "bf16-mixed", "eager", "adamw", "", "cross-entropy"),
    ("llama-3-8b", LLAMA, 2, 32, "fp32", "sdpa", "adamw", "", "cross-entropy"),
    ("llama-3-8b", LLAMA, 1, 32, "bf16", "eager", "sgd-momentum", "", "cross-entropy"),
    ("llama-3-8b", LLAMA, 2, 32, "bf16-mixed", "sdpa", "adamw", "", "cross-entropy"),
    ("mlp", {}, 128, 0, "fp32", "", "adamw", "", "cross-entropy"),  # article A's sizes, 2048/4096/10
    # bf16 matmuls have no fast CPU kernel (50 s at B = 128); the formulas are exact at any B
    ("mlp-nobias", {}, 8, 0, "bf16", "", "sgd-momentum", "", "mse"),
]
LAYERS = 2
# LoRA and QLoRA, measured with peft (and bitsandbytes) by ``finetune_child.measure_case``: its case names
LORA_CASES = ("llama-bf16-sdpa", "gpt2-fp32-eager", "llama-qlora")


def planner(model: str, batch: int, seq: int, precision: str, attn: str, optimizer: str, masks: str,
            loss: str, extra: tuple[str, ...] = ()) -> dict:
    """What ``symbolic memory ... --json`` prints for the case (the CLI, in this process)."""
    from helpers import cli_json

    argv = ["memory", model, "--mode", "train", "--activations", "pytorch", "--device", "cpu", "--batch",
            str(batch), "--precision", precision, "--optimizer", optimizer, "--json", *extra]
    if seq:
        argv += ["--seq", str(seq), "--attn", attn]
    if masks:
        argv += ["--dropout-masks", masks]
    if loss != "cross-entropy":
        argv += ["--loss", loss]
    return cli_json(argv)


def cases(folder: Path) -> list[dict]:
    from symbolic.measured import crosscheck

    results = []
    for name, overrides, batch, seq, precision, attn, optimizer, masks, loss in CASES:
        target = crosscheck.load_target(name, overrides)
        point = crosscheck.measure_point(target, batch, seq or 1, LAYERS, precision, attn or "sdpa",
                                         optimizer=optimizer, masks=masks, loss=loss)
        model = name
        if not target.is_mlp:
            config = crosscheck._with_layers(target.config, LAYERS)  # noqa: SLF001 (the measured model's config)
            path = folder / f"{len(results)}" / "config.json"
            path.parent.mkdir()
            path.write_text(json.dumps(config))
            model = str(path)
        data = planner(model, batch, seq, precision, attn, optimizer, masks, loss)
        results.append({
            "case": [name, batch, seq, precision, attn, optimizer, masks, loss],
            "measured_peak": point.peak_measured, "measured_phases": point.phases_measured,
            "measured_phase": point.peak_phase, "measured_saved": point.saved_measured,
            "measured_params": point.params,
            "total_bytes": data["total_bytes"], "phases": data["phases"], "peak_phase": data["peak_phase"],
            "peak_lead_bytes": data["peak_lead_bytes"], "activation_bytes": data["activation_bytes"],
            "values": data["values"], "derived": data["derived"], "terms": data["terms"],
        })
    return results


def _child(name: str):  # noqa: ANN202
    """``tests/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / f"{name}.py")
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    return child


def finetune_child():  # noqa: ANN201
    """``tests/finetune_child.py`` as a module (its cases, sizes and measurements)."""
    return _child("finetune_child")


def lora_cases(folder: Path, finetune: dict[str, dict]) -> list[dict]:
    """peft's LoRA/QLoRA steps (``finetune_child``'s measurements, ``finetune``) against the planner
    with the same options."""
    child = finetune_child()
    from symbolic.measured import crosscheck

    results = []
    for name in LORA_CASES:
        model_name, dtype, attn, dropout, options = child.CASES[name]
        target = crosscheck.load_target(model_name, child.SIZES[model_name], dropout)
        path = folder / f"lora-{name}" / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(crosscheck._with_layers(target.config, child.LAYERS)))  # noqa: SLF001
        measured = finetune[name]
        extra = ["--no-use-cache", "--lora-rank", str(child.RANK)]  # crosscheck.build turns the cache off
        for key, value in options.items():
            flag = "--" + key.replace("_", "-")
            extra += [flag] if value is True else [flag, str(value)]
        data = planner(str(path), child.BATCH, child.SEQ, dtype, attn, "adamw", "", "cross-entropy", tuple(extra))
        # measure.step_peak tracks parameters and buffers, not bitsandbytes' quant_state tensors (absmax,
        # nested absmax, code): alive all step, so they are added to what it measured
        peak = measured["peak"] + measured.get("quant_state_bytes", 0)
        results.append({"case": ["lora", name], "measured_peak": peak, "measured_phase": measured["phase"],
                        "measured_saved": measured["saved"], "measured_params": measured["parameters"],
                        "total_bytes": data["total_bytes"], "phases": data["phases"], "peak_phase": data["peak_phase"],
                        "peak_lead_bytes": data["peak_lead_bytes"], "activation_bytes": data["activation_bytes"],
                        "values": data["values"], "derived": data["derived"], "terms": data["terms"]})
    return results


def _importable(*names: str) -> bool:
    """Whether every module imports (installed and not broken: a failing bitsandbytes skips, as before)."""
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - any failure to import means: not available here
            return False
    return True


def collect() -> dict:
    """``{"measure": ..., "cases": [...]}``: ``measure_child``'s measurements and this file's planner
    cases; with peft and bitsandbytes also ``"finetune"``: every case of ``finetune_child``
    (``measure_all``), three of which join ``"cases"`` as LoRA planner cases. One process for all
    three sets: torch, transformers and peft are imported once."""
    data: dict = {"measure": _child("measure_child").collect()}
    with tempfile.TemporaryDirectory() as folder:
        found = cases(Path(folder))
        data["cases"] = found
        if _importable("peft", "bitsandbytes"):  # else the fine-tuning tests skip, the rest still run
            data["finetune"] = finetune_child().measure_all()
            found += lora_cases(Path(folder), data["finetune"])
    return data


def main() -> int:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return SKIP
    sys.path.insert(0, str(ROOT))
    torch.set_num_threads(1)
    start = time.perf_counter()
    data = collect()
    data["seconds"] = time.perf_counter() - start
    json.dump(data, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
