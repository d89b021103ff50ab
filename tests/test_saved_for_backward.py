"""Issue 28, what is saved for backward: --recompute ops, --recompute-every, full recompute under
sequence parallelism, --logits chunked; measured on the CPU (``saved_for_backward_child.py``) and
against the GPU rows torchtitan and torchtune published.
"""

from __future__ import annotations

import json

import pytest
import sympy
from helpers import run, torch_child

from symbolic import planning
from symbolic.core.symbols import B, H, L, S, V, a, a_kv, d_ff, d_head
from symbolic.library import activations as acts
from symbolic.library import peak_pytorch as pypeak

GIB = 2**30
GATED = acts.LayerVariant(flash=True, gated=True, dropout=False)


def _term(plan: planning.Plan, key: str) -> int:
    return plan.as_dict()["terms"][key]


# --- the per-op policy: torchtitan's alternation over the layer's matmuls -------------------------
def test_ops_keeps_every_other_matmul_output_of_torchtitans_layer():
    """wq, wk, wv, wo, w1, w3, w2: the 1st, 3rd, 5th and 7th are saved (meta[mm_count] % 2 == 0 recomputed)."""
    order = [key for key, *_ in acts.layer_matmuls(GATED)]
    assert order == ["wq", "wk", "wv", "wo", "w1", "w3", "w2"]
    keys = [p.key for p in acts.ops_parts(GATED)]
    assert keys == ["layer_input", "wq_output", "wv_output", "w1_output", "w2_output", "attn_output", "softmax_stats"]
    gelu = [p.key for p in acts.ops_parts(acts.LayerVariant(flash=True, gated=False, dropout=False))]
    assert [k for k in gelu if k.endswith("_output")] == ["wq_output", "wv_output", "fc1_output", "attn_output"]


def test_ops_under_sequence_parallelism_keeps_the_reduce_scatter_outputs():
    t = sympy.Symbol("t", positive=True)
    expr = acts.per_layer(GATED, "ops", t, True)
    b = 2
    expected = (b * S * B * H / t + b * S * B * (a * d_head + a_kv * d_head + d_ff) / t + b * S * B * H
                + b * S * B * a * d_head / t + 4 * a * S * B / t + 2 * b * S * B * H / t)
    assert sympy.simplify(expr - expected) == 0


def test_ops_cuts_llama_8b_activations_to_the_saved_list():
    none = planning.plan("llama-3-8b", "train", batch=1, seq=4096)
    ops = planning.plan("llama-3-8b", "train", batch=1, seq=4096, recompute="ops")
    # per layer: input 4096, wq 4096, wv 1024, w1 14336, w2 4096, attention output 4096 wide (2 bytes), lse 4·32
    per_layer = 2 * 4096 * (4096 + 4096 + 1024 + 14336 + 4096 + 4096) + 4 * 32 * 4096
    assert _term(ops, "activations") == 32 * per_layer
    assert _term(ops, "activations") < _term(none, "activations") / 2


@pytest.mark.parametrize("args", [["--recompute", "ops", "--no-flash"], ["--recompute-every", "2"],
                                  ["--logit-chunks", "4"], ["--recompute", "ops", "--activations", "pytorch"]])
def test_the_new_options_refuse_what_they_do_not_model_in_one_line(capfd, args):
    """In-process, captured at the file descriptors, as test_compile.py's refusals (a fresh interpreter: 1.5 CPU-s)."""
    code, out, err = run(capfd, "memory", "llama-3-8b", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err


# --- every N-th layer and the sequence-split input --------------------------------------------------
def test_recompute_every_checkpoints_layers_n_2n_and_keeps_the_rest_whole():
    full = planning.plan("llama-3-8b", "train", recompute="full")
    none = planning.plan("llama-3-8b", "train")
    every = planning.plan("llama-3-8b", "train", recompute="full", recompute_every=3)
    per_full, per_none = _term(full, "activations") // 32, _term(none, "activations") // 32
    assert _term(every, "activations") == 10 * per_full + 22 * per_none  # layers 3, 6, ..., 30 of 32


def test_full_recompute_input_is_split_over_tp_with_sequence_parallelism_only():
    one = planning.plan("llama-3-70b", "train", recompute="full")
    sp = planning.plan("llama-3-70b", "train", recompute="full", tp=8, sequence_parallel=True)
    tp = planning.plan("llama-3-70b", "train", recompute="full", tp=8)
    assert _term(one, "activations") == 80 * 2 * 4096 * 8192  # L · 2sbh: 5 GiB at seq 4096
    assert _term(sp, "activations") == _term(one, "activations") // 8
    assert _term(tp, "activations") == _term(one, "activations")  # replicated on every tp rank (no sp)


def test_recompute_every_formula_uses_floor_of_l_over_n():
    every = planning.plan("llama-3-8b", "train", recompute="full", recompute_every=2)
    assert sympy.floor(L / 2) in every.formula.expr.atoms(sympy.floor)


# --- chunked cross-entropy ---------------------------------------------------------------------------
def test_chunked_loss_upcasts_one_chunk_at_a_time():
    hf = planning.plan("llama-3-8b", "train", batch=2, seq=8192)
    ch = planning.plan("llama-3-8b", "train", batch=2, seq=8192, logits="chunked", logit_chunks=8)
    sbv = 2 * 8192 * 128256
    assert _term(ch, "logits") == _term(hf, "logits")  # log_softmax still saves every chunk's fp32 output
    assert _term(hf, "logits_forward") - _term(ch, "logits_forward") == 4 * sbv - 4 * sbv // 8
    assert _term(ch, "loss_gradients") == 8 * sbv // 8


# --- measured on the CPU -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def measured() -> dict:
    return torch_child("saved_for_backward_child.py")


def _tiny(values: dict, batch: int, seq: int) -> dict:
    heads = values["num_attention_heads"]
    return {S: seq, B: batch, H: values["hidden_size"], a: heads, a_kv: values["num_key_value_heads"],
            d_head: values["hidden_size"] // heads, d_ff: values["intermediate_size"], V: values["vocab_size"]}


@pytest.mark.torch
def test_ops_saved_bytes_are_the_measured_checkpointed_layer(measured):
    for point in measured["sac"]:
        predicted = acts.per_layer(GATED, "ops").subs(_tiny(measured["llama"], point["batch"], point["seq"]))
        assert abs(int(predicted) / point["saved"] - 1) < 0.01, point


@pytest.mark.torch
def test_chunked_loss_saved_bytes_and_peaks_are_measured(measured):
    for point in measured["chunked"]:
        values = _tiny(measured["llama"], point["batch"], point["seq"])
        saved = sum(t.expr for t in acts.logits_terms("chunked")) + 8 * S * B  # + nll_loss's int64 targets
        forward = saved + pypeak.chunked_logits_forward_term(2, point["chunks"]).expr
        backward = saved + pypeak.chunked_loss_gradients_term(point["chunks"]).expr
        for name, expr in (("saved", saved), ("forward", forward), ("backward", backward)):
            assert abs(int(expr.subs(values)) / point[name] - 1) < 0.01, (name, point)


# --- published GPU rows ------------------------------------------------------------------------------
# torchtitan benchmarks/llama3_h100_202412_torchtitan.md (b5bcd76), Tables 1 and 3, row "FSDP": Llama 3.1 8B, local
# batch 2, seq 8192 (train_configs/llama3_8b.toml at 9dec370: selective_ac_option 'op'), bf16, FSDP2 (--fsdp); memory
# = max reserved. Llama 3.1 8B has Llama 3 8B's shapes. Max reserved holds tensors, allocator slack and the cuBLAS
# workspace, not the CUDA context or NCCL's buffers. (gpus, published GiB, the plan's error as docs/accuracy.md states
# it). The loss's moment leads (the loss's fp32 gradients, the last block gathered, no head gradient yet:
# fsdp.LOSS_APART, measured in test_fsdp_step.py), and FSDP2's side streams keep their blocks reserved beside it
# (fsdp_stream_pools: the sharded gradients, 4 N/d, on the reduce-scatter stream; the root's and a block's flat
# all-gather outputs on the copy-in stream, none of them live at the loss's moment): 6.15 GiB at d = 8, 2.60 at
# d = 128. The eager layer's recompute buffer is its measured rebuild (test_eager_rebuild.py), after the loss's
# moment, not beside it (-2.6 and -2.1 % with it beside the loss). Without the pools -12.1 and -8.5 %.
TORCHTITAN_ROWS = [(8, 82.4, -0.046), (128, 67.0, -0.047)]


@pytest.mark.parametrize(("gpus", "published", "stated"), TORCHTITAN_ROWS)
def test_torchtitan_selective_op_rows(gpus, published, stated):
    plan = planning.plan("llama-3-8b", "train", batch=2, seq=8192, dp=gpus, fsdp=True, recompute="ops")
    terms = plan.as_dict()["terms"]
    assert "recompute_buffer" not in terms  # the loss's moment leads the rebuild
    error = (plan.as_dict()["total_bytes"] - terms["cuda_context"] - terms["nccl"]) / GIB / published - 1
    assert abs(error) < 0.11 and abs(error - stated) < 0.005, error


# torchtune README (bd2a0fc) "Optimization flags": Llama 3.2 3B, full_finetune_single_device, batch 2, packed
# to 4096 tokens, bf16 (weights, gradients, AdamW states), A100; peak memory active. Shapes: torchtune's
# llama3_2_3b builder (28 layers, 3072 wide, 24 heads, 8 KV heads, d_ff 8192, vocabulary 128,256, tied).
LLAMA_32_3B = {"model_type": "llama", "hidden_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 24,
               "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256, "tie_word_embeddings": True,
               "max_position_embeddings": 131072}
# (row, published GiB, options, the plan's error): the chunked loss's eager terms alone. Both rows ran under
# torch.compile as well; as they ran (--compile: -4.6 % and +20.2 %) they are test_compile.py's TORCHTUNE_COMPILE_ROWS,
# the table docs/accuracy.md shows. Eager, the first row keeps the eager chunked loss's forward (+9.9 %); the second
# peaks in the optimizer step either way, where the planner counts AdamW's foreach temporaries (one bf16 copy of the
# 3.2B parameters, 6.0 GiB; test_torchtune_rows.py, docs/accuracy.md).
TORCHTUNE_ROWS = [("+ Chunked Cross Entropy", 42.9, {"logits": "chunked"}, 0.099),
                  ("+ Activation Checkpointing", 24.9, {"logits": "chunked", "recompute": "full"}, 0.202)]


@pytest.mark.parametrize(("row", "published", "options", "stated"), TORCHTUNE_ROWS)
def test_torchtune_rows(tmp_path, row, published, options, stated):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_32_3B))
    plan = planning.plan(str(config), "train", batch=2, seq=4096, precision="bf16", runtime=False, **options)
    error = plan.as_dict()["total_bytes"] / GIB / published - 1
    assert abs(error - stated) < 0.005, (row, error)


@pytest.mark.torch
def test_ops_recomputed_flops_are_the_measured_backward_matmuls(measured):
    """The mm FLOPs the per-op policy adds to one layer's backward, measured (gated Llama layer and a GeLU block):
    ``library.flops.ops_recompute`` per layer per token × the tokens, from the memory model's matmul order. With torch's
    early stop (9dec370) the GeLU block's fc2 (6th, even-counted) is not run again; with early_stop=False (torchtitan's
    SelectiveAC since 25413d2, the default count) it is, 2·d_ff·H per token more; the gated w2 is saved either way."""
    from symbolic.library import flops

    point = measured["recomputed"]
    values = {**_tiny(measured["llama"], point["batch"], point["seq"]), L: 1}
    tokens = point["batch"] * point["seq"]
    gelu = {**values, a_kv: values[a]}  # the GeLU block's wk is H → H (multi-head)
    for name, gated, sizes in (("gated", True, values), ("gelu", False, gelu)):
        assert int(flops.ops_recompute(gated, early_stop=True).subs(sizes)) * tokens == point[name], name
        assert int(flops.ops_recompute(gated).subs(sizes)) * tokens == point[f"{name}_no_early_stop"], name
    fc2 = 2 * values[d_ff] * values[H] * tokens
    assert point["gelu_no_early_stop"] - point["gelu"] == fc2 and point["gated_no_early_stop"] == point["gated"]
