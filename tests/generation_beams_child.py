"""Beam search and sampling in encoder-decoder generation, planned and measured for ``test_generation_beams.py``.

torch is imported here, not in the test process. T5 and Whisper (tiny configurations with the
real structure, as ``generation_child.py``) are planned through the module path in ``--mode infer``
with ``beams``, and T5 with ``sample`` (its top-k processor's copies; one model, to keep the child
short), probed on the meta device at one set of sizes and asked at a batch and sizes the fit did not
use, beside the model's own ``generate(num_beams=N)`` and ``generate(do_sample=True)`` on the CPU with random weights: each phase's peak counted by
``generation_child._phase_peaks`` (``measure.forward_peak``'s rule), the caches' bytes read from the
cache the loop's last decoder pass holds (Whisper's generate returns a per-sample copy, not the
loop's). Writes one JSON object on stdout; exits 77 when torch is missing.
"""

from __future__ import annotations

import contextlib

import child_main  # this folder: sys.path[0] of a child script
from generation_child import EAGER, _cache_bytes, _phase_peaks
from library_modules_child import T5, WHISPER, _config
from modules_child import _cli

BEAMS = 3


def _generator(model, steps, beams, sample):
    """A module whose forward is the model's own ``generate`` of ``steps`` tokens (no end-of-sequence stop)."""
    import torch

    class Generate(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, **inputs):
            return model.generate(**inputs, max_new_tokens=steps, do_sample=sample, num_beams=beams, eos_token_id=None)

    return Generate().eval()


@contextlib.contextmanager
def _loop_cache(model, seen):
    """The caches' bytes after the loop's last decoder pass, into ``seen`` (a forward hook on the model)."""

    def hook(_module, _args, kwargs, out):
        seen.update(_cache_bytes(kwargs.get("cache") or out.past_key_values))

    handle = model.register_forward_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def _case(source, fit, batch, sizes, beams, sample):
    """The plan of ``source`` (probed at ``fit``'s sizes) at other sizes and batch, beside a CPU generation."""
    import dataclasses

    import torch

    from symbolic import planning
    from symbolic.networks.module import generation, resolve
    from symbolic.networks.module.source import make_inputs

    fitted = resolve.module_network(resolve.with_sizes(source, fit))
    fitted.generate_fit("float32", "cpu", beams, sample)  # probed at points from ``fit``
    asked = resolve.with_sizes(source, sizes)
    net = dataclasses.replace(fitted, module_source=asked)
    options = {"beams": beams} if beams > 1 else {"sample": True}
    plan = planning.plan(net, "infer", batch=batch, weights="fp32", runtime=False, device="cpu", **options)
    torch.manual_seed(0)
    model = asked.build(asked.arguments).eval()
    made = make_inputs(asked, batch, dict(asked.sizes), device="cpu", float_dtype=torch.float32)
    inputs = {k: v for k, v in made.items() if k not in generation.DECODER}
    generator = _generator(model, asked.sizes["T"], beams, sample)
    terms, cache = plan.terms(), {}
    with _loop_cache(model, cache):
        measured = _phase_peaks(generator, model, inputs)
    return {"plan_phases": plan.phase_bytes(), "measured_phases": measured, "cache": cache,
            "plan_cache": {"self": terms["self_cache"], "cross": terms["cross_cache"]}, "T": asked.sizes["T"],
            "notes": list(plan.notes)}


def cases():
    t5, whisper = _config({**T5, **EAGER}), _config({**WHISPER, **EAGER})
    return {"t5_beams": _case(t5, {"S": 16, "T": 8}, 3, {"S": 20, "T": 12}, BEAMS, False),
            "whisper_beams": _case(whisper, {"T": 8}, 3, {"T": 12}, BEAMS, False),
            "t5_sample": _case(t5, {"S": 16, "T": 8}, 3, {"S": 20, "T": 12}, 1, True)}


def cli(tmp):
    """The refusals on the command line: --beams in training, beam sampling, --beams on a table family."""
    import json
    from pathlib import Path

    config = Path(tmp) / "t5.json"
    config.write_text(json.dumps({**T5, **EAGER}))
    common = (str(config), "--set", "S=16", "--set", "T=8", "--no-runtime")
    return {"train": _cli("memory", *common, "--beams", "2"),
            "both": _cli("memory", *common, "--mode", "infer", "--beams", "2", "--sample"),
            "table": _cli("memory", "llama-3-8b", "--mode", "infer", "--beams", "2"),
            "table_sample": _cli("memory", "llama-3-8b", "--mode", "infer", "--sample")}


def main() -> None:
    child_main.run(lambda tmp: {"cases": cases(), "cli": cli(tmp)}, threads=1)


if __name__ == "__main__":
    main()
