"""torchao float8 training measured on the CPU for ``test_float8.py`` (issue 28), run in a child process.

torchao 0.18.0 (``convert_to_float8_training``; its ``torchao/float8`` files are those of pytorch/ao
36027d8, from which ``library.fsdp``'s terms were derived) runs forward and backward on the CPU: torch
2.13's CPU ``torch._scaled_mm`` takes float8_e4m3fn/e5m2 with tensorwise and rowwise scales. Measured:

- ``linears``: one bf16 linear of the tiny Llama's MLP shapes (up 64→176, down 176→64) as torchao's
  ``Float8Linear`` and as ``nn.Linear``: the live peaks (``measure._LiveBytes``) of its forward and of its
  backward, at two token counts, each recipe;
- ``step``: the tiny two-layer Llama (``tiny_models.LLAMA``, bf16, sdpa), its linear layers converted with
  torchtitan's filter (9dec370 ``float8.py``: every ``nn.Linear`` but the output head; every dim here is
  a multiple of 16), against the same model in bf16: the bytes saved for backward and the phase peaks of
  two SGD steps (``measure.saved_tensors``, ``measure.step_peak``);
- ``ops``: torchtitan's per-op selective checkpointing with float8 (``--recompute ops``): one bf16 Llama layer
  converted (each recipe) under ``saved_for_backward_child``'s checkpointed measurement and policy, with
  torchtitan 9dec370's save list (``aten.abs`` on it, what the benchmark ran) and with 88247277c's (without):
  the bytes kept between forward and backward at two (B, S); and the two-layer model's SGD step with every
  decoder layer wrapped as torchtitan's ``apply_ac`` wraps it (``checkpoint_wrapper``, ``context_fn``, no RNG
  state), its phase peaks, in bf16 and with each recipe.

Writes one JSON object on stdout; exits with 77 when torch, transformers or torchao cannot be imported.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

SKIP = 77
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

from tiny_models import LLAMA  # noqa: E402

from symbolic.measured.measure import _LiveBytes, saved_tensors, step_peak, tracking_mode  # noqa: E402

RECIPES = ("tensorwise", "rowwise")
TOKENS = (64, 96)  # B·S of the single linears
STEP = (2, 32)  # B, S of the whole step


def _imports() -> tuple:
    """torch, transformers' Llama and torchao's float8 conversion (none is imported when the test is collected)."""
    try:
        import torch
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as err:  # pragma: no cover - depends on the environment
        print(err, file=sys.stderr)
        sys.exit(SKIP)
    return torch, Float8LinearConfig, convert_to_float8_training, LlamaConfig, LlamaForCausalLM


def _converted(module: object, recipe: str | None) -> object:
    """The module with every linear but the head (torchtitan's filter, fqn != output) as Float8Linear."""
    _, config, convert, *_ = _imports()
    if recipe is not None:
        convert(module, config=config.from_recipe_name(recipe), module_filter_fn=lambda _, fqn: fqn != "lm_head")
    return module


def _linear_peaks(k: int, n: int, tokens: int, recipe: str | None) -> dict[str, int]:
    """Forward and backward live peaks of one (tokens × k) @ (k × n) bf16 linear, over its input, weight and grad."""
    torch, *_ = _imports()
    torch.manual_seed(0)
    module = _converted(torch.nn.Sequential(torch.nn.Linear(k, n, bias=False)).to(torch.bfloat16), recipe)
    x = torch.randn(tokens, k, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(tokens, n, dtype=torch.bfloat16)
    live = _LiveBytes()
    for t in (x, grad, *module.parameters()):
        live.track(t)
    base = live.current
    with tracking_mode(live.track):
        live.phase = "forward"
        y = module(x)
        live.phase = "backward"
        y.backward(grad)
        del y
    return {phase: live.phase_peaks[phase] - base for phase in ("forward", "backward")}


def linears() -> list[dict]:
    """Each MLP shape, token count and recipe: the float8 linear's peaks and the bf16 linear's."""
    hidden, width = LLAMA["hidden_size"], LLAMA["intermediate_size"]
    out = []
    for k, n in ((hidden, width), (width, hidden)):
        for tokens in TOKENS:
            bf16 = _linear_peaks(k, n, tokens, None)
            for recipe in RECIPES:
                out.append({"k": k, "n": n, "tokens": tokens, "recipe": recipe, "bf16": bf16,
                            "fp8": _linear_peaks(k, n, tokens, recipe)})
    return out


def ops_wrapped(torch: object, model: object, abs_saved: bool = True) -> object:
    """Each decoder layer wrapped as torchtitan's ``apply_ac`` wraps it under ``selective_ac_option = 'op'``
    (9dec370: ``checkpoint_wrapper``, a fresh policy count per call, ``preserve_rng_state=False``)."""
    from saved_for_backward_child import _policy
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils import checkpoint

    def context() -> tuple:
        return checkpoint.create_selective_checkpoint_contexts(_policy(torch, defaultdict(int), abs_saved))

    layers = model.model.layers
    for index, layer in enumerate(layers):
        layers[index] = checkpoint_wrapper(layer, context_fn=context, preserve_rng_state=False)
    return model


def step(ops: bool = False) -> dict:
    """The tiny Llama's saved bytes and phase peaks in bf16 and with each recipe (``ops``: its layers under the
    per-op policy, 9dec370's list, and with each recipe 88247277c's too, ``<recipe>-no-abs``: phase peaks only)."""
    torch, _, _, config_class, model_class = _imports()
    batch, seq = STEP
    ids = torch.randint(0, LLAMA["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "labels": ids}
    out = {}
    runs = [(None, True), *((r, True) for r in RECIPES)] + ([(r, False) for r in RECIPES] if ops else [])
    for recipe, abs_saved in runs:
        torch.manual_seed(0)
        cfg = config_class(**LLAMA, num_hidden_layers=2, attn_implementation="sdpa", use_cache=False)
        model = _converted(model_class(cfg).to(torch.bfloat16).train(), recipe)
        converted = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
        row = {"converted": converted}
        if ops:
            model = ops_wrapped(torch, model, abs_saved)
        else:
            row["saved"] = saved_tensors(model, inputs, lambda o: o.loss).total_bytes
        peak = step_peak(model, inputs, lambda o: o.loss, optimizer=lambda p: torch.optim.SGD(p, lr=1e-3))
        out[(recipe or "bf16") + ("" if abs_saved else "-no-abs")] = {**row, "phases": peak.phases}
    return out


def ops() -> dict:
    """The per-op policy with float8: one layer's kept bytes (each recipe, each list) and the step's phases."""
    import saved_for_backward_child as sac_child

    layer = {"bf16": sac_child.sac()}
    for recipe in RECIPES:
        for abs_saved in (True, False):
            layer[recipe + ("" if abs_saved else "-no-abs")] = sac_child.sac(
                lambda module, recipe=recipe: _converted(module, recipe), abs_saved)
    return {"layer": layer, "step": step(ops=True)}


if __name__ == "__main__":
    _imports()[0].set_num_threads(1)
    print(json.dumps({"linears": linears(), "step": step(), "ops": ops(), "llama": LLAMA, "step_size": STEP}))
