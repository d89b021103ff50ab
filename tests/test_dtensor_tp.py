"""PyTorch's tensor parallelism (DTensor, torchtitan's plan) against Megatron's: ``--tp-impl``.

Under sequence parallelism Megatron saves each norm's output sequence-split (Korthikanti et al. 2022 §4.2.2) and
all-gathers it again in backward; torchtitan's ``apply_tp`` (9dec370 and HEAD) all-gathers it to ``Replicate`` in
``PrepareModuleInput`` before attention and before the MLP, and the ``ColwiseParallel`` linears save the gathered
B·S·H tensor. Measured on the CPU over two gloo ranks (``dtensor_tp_block_child.py``), one Llama block, bf16, eager.
"""

from __future__ import annotations

import pytest
import sympy
from helpers import torch_child

from symbolic import planning
from symbolic.core.symbols import B, H, S, a, a_kv, d_ff, d_head
from symbolic.library import activations as acts
from symbolic.library import compiled_recompute, eager_recompute
from symbolic.options.table import PlanOptionError

DTENSOR = acts.LayerVariant(flash=True, gated=True, dropout=False, tp_impl="dtensor")
MEGATRON = acts.LayerVariant(flash=True, gated=True, dropout=False)


@pytest.fixture(scope="module")
def measured() -> dict:
    return torch_child("dtensor_tp_block_child.py")


def _values(w: dict, batch: int, seq: int) -> dict:
    return {B: batch, S: seq, H: w["hidden"], a: w["heads"], a_kv: w["heads"], d_head: w["hidden"] // w["heads"],
            d_ff: w["ffn"]}


def test_the_gathered_inputs_are_whole_on_every_rank() -> None:
    """Without checkpointing the two norms' outputs are B·S·H each under dtensor, B·S·H/t under Megatron's sequence
    parallelism; without sequence parallelism the two agree (both keep the whole input)."""
    b, t = 2, 8
    gap = acts.per_layer(DTENSOR, "none", t, True) - acts.per_layer(MEGATRON, "none", t, True)
    assert (gap - 2 * b * S * B * H * (1 - sympy.Rational(1, t))).expand() == 0
    assert acts.per_layer(DTENSOR, "none", t, False) == acts.per_layer(MEGATRON, "none", t, False)
    assert acts.per_layer(DTENSOR, "ops", t, True) == acts.per_layer(MEGATRON, "ops", t, True)  # gathers recomputed
    assert acts.per_layer(DTENSOR, "full", t, True) == acts.per_layer(MEGATRON, "full", t, True)


def test_the_compiled_float8_layer_keeps_its_gathered_e4m3_inputs() -> None:
    """The compiled tensorwise float8 layer recomputes the norms' outputs under Megatron's layout (pointwise of saved
    tensors) but not under dtensor, where each is an all-gather's output (force_save_collectives), gathered in
    float8 (PrepareFloat8ModuleInput): one byte an element, whole; the rebuilt block holds them too."""
    f8 = {"compiled": True, "float8": "tensorwise"}
    dt, mg = (acts.LayerVariant(flash=True, gated=True, dropout=False, tp_impl=i, **f8) for i in ("dtensor", "megatron"))
    assert (acts.per_layer(dt, "none", 8, True) - acts.per_layer(mg, "none", 8, True) - 2 * S * B * H).expand() == 0
    gap = sum(p.expr / 8 if p.shard != "whole" else p.expr for p in compiled_recompute.float8_parts(dt)) - \
        sum(p.expr / 8 if p.shard != "whole" else p.expr for p in compiled_recompute.float8_parts(mg))
    assert (gap - (2 * S * B * H - 2 * S * B * H / 8)).expand() == 0  # two e4m3 in place of the bf16 MLP shard
    with pytest.raises(Exception, match="tensorwise"):
        compiled_recompute.rowwise_parts(acts.LayerVariant(flash=True, gated=True, dropout=False, tp_impl="dtensor",
                                                           compiled=True, float8="rowwise"))


def test_tp_impl_follows_fsdp_unless_given() -> None:
    """FSDP2 composes only with PyTorch's tensor parallelism: dtensor by default with --fsdp, megatron without."""
    assert planning.plan("llama-3-8b", "train", tp=2, dp=2, fsdp=True).regime.tp_impl == "dtensor"
    assert planning.plan("llama-3-8b", "train", tp=2).regime.tp_impl == "megatron"
    assert planning.plan("llama-3-8b", "train", tp=2, tp_impl="dtensor").regime.tp_impl == "dtensor"
    sp = {"tp": 2, "sequence_parallel": True, "batch": 1, "seq": 1024}
    gap = planning.plan("llama-3-8b", "train", tp_impl="dtensor", **sp).terms()["activations"] - \
        planning.plan("llama-3-8b", "train", **sp).terms()["activations"]
    values = planning.plan("llama-3-8b").values
    assert gap == 2 * 2 * 1024 * values["H"] * values["L"] // 2  # two gathered inputs a layer, over the t = 2 share
    with pytest.raises(PlanOptionError, match="tensorwise"):
        planning.plan("llama-3-8b", "train", tp=2, dp=2, fsdp=True, precision="fp8", fp8_recipe="rowwise",
                      compile=True, sequence_parallel=True)


@pytest.mark.torch
def test_the_block_saves_the_gathered_inputs(measured) -> None:
    """Each rank's plain block saves both norms' outputs all-gathered (B·S·H bf16, two storages of the gathered
    width), the rest as the Megatron layer under sequence parallelism; the forward leaves the dtensor variant's
    saved set and the norms' fp32 1/rms (8 bytes a token of the shard), exact; Megatron's layout is 2·2·B·S·H/t
    under. Full checkpointing keeps the input shard, the per-op policy its saved set (the gathers recomputed)."""
    w, t = measured["width"], measured["ranks"]
    for row in measured["rows"]["none"]:
        values, tokens = _values(w, row["batch"], row["seq"]), row["batch"] * row["seq"]
        gathered = [s for s in row["saved"] if s[1] == "bfloat16" and s[2] == [tokens, w["hidden"]]]
        assert len(gathered) == 2 and all(s[0] == 2 * tokens * w["hidden"] for s in gathered)
        assert row["kept"] == acts.per_layer(DTENSOR, "none", t, True).subs(values) + 8 * tokens // t
        megatron = acts.per_layer(MEGATRON, "none", t, True).subs(values) + 8 * tokens // t
        assert row["kept"] - megatron == 2 * 2 * tokens * w["hidden"] // t
    for how in ("full", "ops"):
        for row in measured["rows"][how]:
            assert row["kept"] == acts.per_layer(DTENSOR, how, t, True).subs(_values(w, row["batch"], row["seq"]))


@pytest.mark.torch
def test_the_rebuilt_blocks_backward_holds_the_gathered_inputs(measured) -> None:
    """Full checkpointing: the backward's peak over its start, less the down projection's weight gradient (its
    shard) and the rebuilt norms' 1/rms, is the eager buffer of the dtensor variant less the output's gradient (its
    shard, held before), to the byte (``test_eager_rebuild``'s rule); Megatron's buffer is 2·2·B·S·H/t under."""
    w, t = measured["width"], measured["ranks"]
    for row in measured["rows"]["full"]:
        values, tokens = _values(w, row["batch"], row["seq"]), row["batch"] * row["seq"]
        real = row["backward"] - 2 * w["hidden"] * w["ffn"] // t - 8 * tokens // t
        output_grad = 2 * tokens * w["hidden"] // t
        assert eager_recompute.buffer(DTENSOR, "full", t, True).subs(values) - output_grad == real, row
        megatron = eager_recompute.buffer(MEGATRON, "full", t, True).subs(values) - output_grad
        assert real - megatron == 2 * 2 * tokens * w["hidden"] // t


@pytest.mark.torch
def test_the_compiled_block_saves_the_gathered_inputs() -> None:
    """torch.compile'd (inductor, fullgraph): the partitioner keeps both all-gathers' outputs (force_save_collectives:
    a collective is never recomputed outside a checkpointed region), B·S·H bf16 each; the saved set is the compiled
    dtensor variant's (``compiled_parts``: the norms' 1/rms, the attention projection's output, SiLU recomputed), to
    the byte."""
    measured = torch_child("dtensor_tp_block_child.py", {"what": "compiled"})
    w, t = measured["width"], measured["ranks"]
    compiled = acts.LayerVariant(flash=True, gated=True, dropout=False, compiled=True, tp_impl="dtensor")
    for row in measured["rows"]["compiled"]:
        values, tokens = _values(w, row["batch"], row["seq"]), row["batch"] * row["seq"]
        gathered = [s for s in row["saved"] if s[1] == "bfloat16" and s[2] == [tokens, w["hidden"]]]
        assert len(gathered) == 2 and all(s[0] == 2 * tokens * w["hidden"] for s in gathered)
        assert sum(s[0] for s in row["saved"]) == acts.per_layer(compiled, "none", t, True).subs(values)
