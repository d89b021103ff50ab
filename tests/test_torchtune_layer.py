"""torchtune's layer compiled and under full checkpointing (issue 28): ``--layer-impl torchtune[-packed] --compile``
and ``--recompute full``.

Measured on the CPU with inductor (``torchtune_layer_child.py``): the decoder of ``torchtune_loss_child.py`` with each
layer compiled as ``training.compile_model`` does and, for checkpointing, wrapped after (torchtune 1814feb
``full_finetune_single_device._setup_model``: ``compile_model`` then ``set_activation_checkpointing``, so the
checkpoint is outside each compiled call and rebuilds what the compiled forward saves). What one layer saves, at two
(B, S), and each step's forward and backward peaks against the plan, within 1 %.
"""

from __future__ import annotations

import pytest
from helpers import torch_child
from test_torchtune_loss import _tiny

from symbolic import planning
from symbolic.core.symbols import B, H, S, a, a_kv, d_ff, d_head
from symbolic.library import activations as acts


@pytest.fixture(scope="module")
def measured() -> dict:
    return torch_child("torchtune_layer_child.py")


def _variant(packed: bool, compiled: bool = True) -> acts.LayerVariant:
    return acts.LayerVariant(flash=True, gated=True, dropout=False, compiled=compiled,
                             impl="torchtune-packed" if packed else "torchtune")


def _values(measured: dict, batch: int, seq: int) -> dict:
    return {B: batch, S: seq, H: measured["hidden"], a: measured["heads"], a_kv: measured["kv_heads"],
            d_head: measured["hidden"] // measured["heads"], d_ff: measured["mlp"]}


def test_compiled_torchtune_layer_is_the_compiled_layer_with_k_and_v_expanded():
    """The partitioner keeps what it keeps of Korthikanti's layer, K and V a·d_head wide; no fp32 norm copies and no
    RoPE rows (recomputed from the 16-bit input, 1/rms and input_pos): packed or not, the same bytes."""
    korthikanti = acts.per_layer(acts.LayerVariant(flash=True, gated=True, dropout=False, compiled=True))
    for packed in (False, True):
        tune = acts.per_layer(_variant(packed))
        assert (tune - korthikanti).expand() == (2 * 2 * S * B * d_head * (a - a_kv)).expand()
    eager = {part.key for part in acts.layer_parts(_variant(True, compiled=False))}
    compiled = {part.key for part in acts.layer_parts(_variant(True))}
    assert {"sa_norm_fp32", "mlp_norm_fp32", "rope_rows"} <= eager - compiled


@pytest.mark.torch
def test_compiled_torchtune_layer_saves_what_the_variant_counts(measured):
    """One compiled layer's saved bytes (two layers' less one's), packed or not, at two (B, S): the formula, to the
    byte; the eager layer's formula is more by its fp32 norm copies (and RoPE rows)."""
    for point in measured["layers"]:
        values = _values(measured, point["batch"], point["seq"])
        assert int(acts.per_layer(_variant(point["packed"])).subs(values)) == point["two"] - point["one"], point
        eager = int(acts.per_layer(_variant(point["packed"], compiled=False)).subs(values))
        assert eager > 1.2 * (point["two"] - point["one"]), point


@pytest.mark.torch
def test_steps_by_phase_within_one_percent(measured, tmp_path):
    """Each measured step (two layers, the eager loss over fp32 logits, AdamW) against the plan with --logits-upcast
    model --no-compile-loss --layer-impl torchtune[-packed], --compile or not, --recompute full or none: forward and
    backward within 1 %. Left out of the measured bytes: the RoPE cache buffer (the plan does not hold it) and, per
    checkpointed layer, the CPU generator's state the checkpoint keeps (not a size the plan has: on a GPU,
    host memory)."""
    config = _tiny(measured, tmp_path)
    for step in measured["steps"]:
        options = {"layer_impl": "torchtune-packed" if step["packed"] else "torchtune", "logits_upcast": "model",
                   "recompute": "full" if step["checkpointed"] else "none"}
        if step["compiled"]:
            options.update(compile=True, compile_loss=False)
        planned = planning.plan(config, "train", batch=step["batch"], seq=step["seq"], precision="bf16",
                                runtime=False, **options).phase_bytes()
        rng = 2 * measured["rng_state"] if step["checkpointed"] else 0
        for phase in ("forward", "backward"):
            real = step["phases"][phase] - step["buffers"] - rng
            assert abs(planned[phase] / real - 1) < 0.01, (step, phase, planned[phase], real)


def test_full_recompute_rebuilds_the_layer_as_it_saves(tmp_path):
    """Under --recompute full the backward rebuilds one layer as its variant saves it (eager: the fp32 norm copies and,
    packed, the RoPE rows; compiled: the compiled layer's tensors), once the loss and head freed what they saved: a
    narrow vocabulary, where that moment leads the loss's."""
    sizes = {"hidden": 256, "mlp": 768, "heads": 8, "kv_heads": 2, "vocab": 32}
    config = _tiny(sizes, tmp_path)
    values = _values(sizes, 2, 512)
    for compiled in (False, True):
        for packed in (False, True):
            options = {"compile": True, "compile_loss": False} if compiled else {}
            terms = planning.plan(config, "train", batch=2, seq=512, precision="bf16", runtime=False, recompute="full",
                                  logits_upcast="model", layer_impl="torchtune-packed" if packed else "torchtune",
                                  **options).as_dict()["terms"]
            rebuilt = int(acts.per_layer(_variant(packed, compiled)).subs(values))
            assert "recompute_buffer" not in terms and terms["loss_gradients"] == rebuilt - terms["logits"], terms
