"""Torch measurements for ``test_torchtune_layer.py`` (issue 28): torchtune's layer compiled, with and without checkpoints.

The decoder of ``torchtune_loss_child.py`` (torchtune 1814feb's ``TransformerSelfAttentionLayer``: fp32 RMSNorm, K and
V expanded before SDPA, RoPE gathering its cache rows by ``input_pos``), each layer compiled as the recipes do
(``training.compile_model``: ``m.compile(backend="inductor")`` per layer, then ``set_activation_checkpointing`` wraps
the compiled layers: the checkpoint outside each compiled call), inductor on the CPU, bf16, one thread; the loss
eager over the model's fp32 logits (the table's "+ Compile" row: ``compile_loss``'s return value discarded).
``dynamic=True`` and no size of 1: one compilation per graph serves both points.

- ``layers``: the bytes one compiled layer saves (two layers' less one's, the same compiled modules), with and
  without packed positions, at two (B, S);
- ``steps``: a step of two compiled layers (AdamW), packed or not, with and without full checkpointing, and of two
  eager layers with full checkpointing: its peaks by phase (``measure.step_peak``, profiler events, ATen scratch left out), the buffers (the RoPE cache) and the
  labels and positions the plan does not hold, and the CPU generator's state that each checkpoint keeps.

Writes one JSON object on stdout; exits with 77 when torch cannot be imported or inductor finds no C++ compiler.
"""

from __future__ import annotations

import json

import child_main  # this folder: sys.path[0] of a child script
import torchtune_loss_child as tt

POINTS = ((2, 96), (3, 80))


def _model(torch: object, packed: bool, compiled: bool = True, vocab: int = tt.VOCAB) -> object:
    """Two torchtune layers, each compiled in place (``nn.Module.compile``, inductor) unless ``compiled`` is off."""
    model = tt._decoder(torch, upcast=True, layers=2, vocab=vocab)
    for layer in model.layers if compiled else ():
        layer.compile(backend="inductor", dynamic=True)
    model.packed, model.compiled, model.vocab = packed, compiled, vocab
    return model


def _inputs(torch: object, model: object, batch: int, seq: int) -> dict:
    torch.manual_seed(1)
    inputs = {"tokens": torch.randint(0, model.vocab, (batch, seq))}
    if model.packed:
        inputs["input_pos"] = tt._positions(torch, batch, seq)
    return inputs


def _saved_per_layer(torch: object, model: object, batch: int, seq: int, plain: object) -> dict:
    from symbolic.measured import measure

    inputs = _inputs(torch, model, batch, seq)
    loss_fn = tt._loss_fn(torch, "model", torch.randint(0, model.vocab, (batch, seq)), plain)
    both = measure.saved_tensors(model, inputs, loss_fn).total_bytes
    layers = model.layers
    model.layers = torch.nn.ModuleList([layers[0]])
    one = measure.saved_tensors(model, inputs, loss_fn).total_bytes
    model.layers = layers
    return {"batch": batch, "seq": seq, "packed": model.packed, "one": one, "two": both}


def _step(torch: object, model: object, batch: int, seq: int, plain: object, checkpointed: bool) -> dict:
    from symbolic.measured import measure

    model.checkpointed = checkpointed
    inputs = _inputs(torch, model, batch, seq)
    loss_fn = tt._loss_fn(torch, "model", torch.randint(0, model.vocab, (batch, seq)), plain)
    loss_fn.held = (*loss_fn.held, *inputs.values())
    loss_fn(model(**inputs)).backward()  # compiled for these sizes before the profiled steps
    model.zero_grad(set_to_none=True)
    peak = measure.step_peak(model, inputs, loss_fn, method="profiler", steps=2)
    model.checkpointed = False
    unsaved = sum(t.untyped_storage().nbytes() for t in (loss_fn.held[0], *inputs.values()))
    return {"batch": batch, "seq": seq, "packed": model.packed, "checkpointed": checkpointed, "compiled": model.compiled,
            "vocab": model.vocab,
            "phases": peak.tensor_phases, "buffers": sum(b.untyped_storage().nbytes() for b in model.buffers()),
            "unsaved_inputs": unsaved}


def main() -> None:
    torch = child_main.inductor_modules("torch")[0]
    child_main.lean_inductor()
    torch.set_num_threads(1)
    plain = torch.nn.CrossEntropyLoss(ignore_index=tt.IGNORE)
    layers, steps = [], []
    for packed in (False, True):
        model = _model(torch, packed)
        for batch, seq in POINTS:
            layers.append(_saved_per_layer(torch, model, batch, seq, plain))
            steps += [_step(torch, model, batch, seq, plain, checkpointed) for checkpointed in (False, True)]
        eager = _model(torch, packed, compiled=False)  # the eager layer under checkpoints: its rebuilt buffer
        steps += [_step(torch, eager, batch, seq, plain, True) for batch, seq in POINTS]
    config = {"hidden": tt.HIDDEN, "heads": tt.HEADS, "kv_heads": tt.KV_HEADS, "mlp": tt.MLP, "vocab": tt.VOCAB}
    print(json.dumps({"layers": layers, "steps": steps, "rng_state": int(torch.get_rng_state().numel()), **config,
                      "element_bytes": 2}))


if __name__ == "__main__":
    main()
