"""Issue 28, ``--compile``: what torch.compile's min-cut partitioner saves, measured with inductor on the
CPU (``compile_child.py``: each block compiled as torchtitan compiles them, the loss compiled as torchtune
does), and the option through the planner.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers import run, torch_child

from symbolic import planning
from symbolic.core.symbols import B, H, L, S, V, a, a_kv, d_ff, d_head
from symbolic.library import activations as acts
from symbolic.library import activations_pytorch as pyacts
from symbolic.library import compiled_step

GATED = acts.LayerVariant(flash=True, gated=True, dropout=False)


def _term(plan: planning.Plan, key: str) -> int:
    return plan.as_dict()["terms"][key]


@pytest.fixture(scope="module")
def measured() -> dict:
    return torch_child("compile_child.py")


def _values(measured: dict, family: str, batch: int, seq: int) -> dict:
    if family == "llama":
        c = measured["llama"]
        heads, kv, width, ff = c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"], \
            c["intermediate_size"]
    else:
        c = measured["gpt2"]
        heads, width = c["n_head"], c["n_embd"]
        kv, ff = heads, 4 * width
    return {L: measured["layers"], B: batch, S: seq, H: width, a: heads, a_kv: kv, d_head: width // heads,
            d_ff: ff, V: c["vocab_size"]}


@pytest.mark.torch
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_compiled_blocks_and_loss_save_what_the_formula_says(measured, family):
    """Fit at the first two (B, S) points, checked at the third (independent) one: within 1 %."""
    model = pyacts.saved(family, pyacts.Setup(precision="bf16", device="cpu", attn="sdpa", compile=True))
    for point in measured["models"][family]:
        values = _values(measured, family, point["batch"], point["seq"])
        predicted = int(model.formula.expr.subs(values))
        assert abs(predicted / point["saved"] - 1) < 0.01, (family, point, predicted)


def test_compiled_llama_layer_drops_the_fp32_norm_copies_and_the_silu_output():
    eager = pyacts.saved("llama", pyacts.Setup(precision="bf16", device="cpu", attn="sdpa"))
    compiled = pyacts.saved("llama", pyacts.Setup(precision="bf16", device="cpu", attn="sdpa", compile=True))
    keys = {t.key for t in compiled.formula.terms}
    assert "input_norm.fp32_input" in {t.key for t in eager.formula.terms} and "input_norm.fp32_input" not in keys
    assert "loss.log_softmax" not in keys and "loss.logits" in keys


def test_compile_refuses_what_was_not_measured():
    with pytest.raises(pyacts.UnknownNameError):
        pyacts.saved("gpt2", pyacts.Setup(precision="bf16", device="cpu", attn="sdpa", compile=True,
                                          dropout=frozenset({"attn"})))
    with pytest.raises(pyacts.UnknownNameError):
        pyacts.saved("mlp", pyacts.Setup(precision="fp32", device="cpu", compile=True))


# --- the korthikanti layer under compile ---------------------------------------------------------------
def test_compiled_korthikanti_layer_is_eager_less_the_activation_output_plus_norm_stats():
    eager = acts.per_layer(GATED, "none")
    compiled = acts.per_layer(GATED.__class__(flash=True, gated=True, dropout=False, compiled=True), "none")
    assert (eager - compiled).expand() == (2 * S * B * d_ff - 8 * S * B).expand()


def test_compile_in_memory_changes_activations_and_logits():
    eager = planning.plan("llama-3-8b", "train", batch=1, seq=4096)
    compiled = planning.plan("llama-3-8b", "train", batch=1, seq=4096, compile=True)
    sb, v = 4096, 128256
    assert _term(eager, "activations") - _term(compiled, "activations") == 32 * (2 * sb * 14336 - 8 * sb)
    assert _term(compiled, "logits") == 2 * sb * 4096 + 2 * sb * v + 8 * sb  # head input, bf16 logits, stats
    assert "logits_forward" not in compiled.as_dict()["terms"]
    # B·S = 4096 < H·V/(V − H): the LM head's moment leads (compiled_step.head_moment, measured with inductor)
    assert _term(compiled, "loss_gradients") == 2 * (v * 4096 + sb * 4096) - 8 * sb


# the default (Korthikanti) plan's backward under --compile is the measured step's rule (library.compiled_step):
# everything saved (the forward phase: the compiled step keeps no forward transients) plus the larger of the loss's
# and the trained head's moment. llama-3-8b: H = 4096, V = 128256, so H·V/(V − H) = 4231.1 tokens.
@pytest.mark.parametrize(("batch", "leader"), [(1, "head"), (2, "loss")])
def test_default_plan_backward_under_compile_is_the_measured_rule(batch: int, leader: str) -> None:
    phases = planning.plan("llama-3-8b", "train", batch=batch, seq=4096, compile=True).as_dict()["phases"]
    point = {B: batch, S: 4096, H: 4096, V: 128256}
    moments = {"loss": compiled_step.loss_moment(2).subs(point), "head": compiled_step.head_moment(2).subs(point)}
    assert max(moments, key=moments.get) == leader
    assert phases["backward"] == phases["forward"] + max(moments.values())


def test_frozen_head_under_compile_has_only_the_loss_moment() -> None:
    phases = planning.plan("llama-3-8b", "train", batch=1, seq=4096, compile=True, lora_rank=8).as_dict()["phases"]
    point = {B: 1, S: 4096, H: 4096, V: 128256}
    assert phases["backward"] - phases["forward"] == compiled_step.loss_moment(2).subs(point)


def test_compile_with_ops_and_full_keeps_what_backward_reads_of_what_the_policy_keeps():
    """torchtitan wraps each block in its checkpoint first, then compiles it: the policy's MUST_SAVE outputs are
    kept where the backward graph reads them, so the last matmul's (w2, into the residual sum only) is dropped."""
    eager = planning.plan("llama-3-8b", "train", batch=1, seq=4096, recompute="ops")
    compiled = planning.plan("llama-3-8b", "train", batch=1, seq=4096, recompute="ops", compile=True)
    assert _term(eager, "activations") - _term(compiled, "activations") == 32 * 2 * 4096 * 4096
    eager = planning.plan("llama-3-8b", "train", batch=1, seq=4096, recompute="full")
    compiled = planning.plan("llama-3-8b", "train", batch=1, seq=4096, recompute="full", compile=True)
    assert _term(eager, "activations") == _term(compiled, "activations")


@pytest.mark.torch
@pytest.mark.parametrize("recompute", ["ops", "full"])
def test_compiled_checkpointed_block_saves_what_the_formula_says(measured, recompute):
    """One Llama block under checkpoint, compiled after (apply_ac, then apply_compile), within 1 %. Full
    checkpointing also keeps the CPU generator's state (5,056 bytes a layer, not a size the plan has: on a GPU
    the generator's seed and offset): it is taken off."""
    variant = GATED.__class__(flash=True, gated=True, dropout=False, compiled=True)
    extra = measured["checkpointed"]["rng_state"] if recompute == "full" else 0
    for point in measured["checkpointed"][recompute]:
        values = _values(measured, "llama", point["batch"], point["seq"])
        predicted = int(acts.per_layer(variant, recompute).subs(values))
        assert abs(predicted / (point["saved"] - extra) - 1) < 0.01, (recompute, point, predicted)


@pytest.mark.torch
def test_compiled_chunked_loss_saves_the_logits_in_their_dtype(measured):
    """torchtune's chunked loss with compute_cross_entropy compiled: the head's input, every chunk's bf16 logits,
    two fp32 numbers per token and nll's int64 targets; no fp32 log-softmax (within 1 %)."""
    for point in measured["chunked"]:
        values = _values(measured, "llama", point["batch"], point["seq"])
        saved = sum(t.expr for t in acts.logits_terms("chunked", compiled=True)) + 8 * S * B
        assert abs(int(saved.subs(values)) / point["saved"] - 1) < 0.01, point
        eager = sum(t.expr for t in acts.logits_terms("chunked")) + 8 * S * B
        assert int(eager.subs(values)) > 1.5 * point["saved"]  # the eager loss keeps the fp32 log-softmax


@pytest.mark.parametrize("args", [["--compile", "--no-flash"], ["--compile", "--dropout"],
                                  ["--compile", "--logits", "megatron"], ["--compile", "--activations", "article-b"]])
def test_compile_refuses_in_one_line(capfd, args):
    """In-process, captured at the file descriptors (what a fresh interpreter's stderr would show): the refusal
    is the planner's, and a fresh interpreter per case cost 1.5 CPU-s (test_cli.py runs the real process)."""
    code, out, err = run(capfd, "memory", "llama-3-8b", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err


MEASURED_PYTORCH = ["gpt2", "--activations", "pytorch", "--device", "cpu", "--precision", "bf16", "--attn", "sdpa",
                    "--no-dropout", "--no-use-cache", "--compile"]


@pytest.mark.parametrize("args", [["--recompute", "full"], ["--lora-rank", "8"], ["--freeze-embeddings"]])
def test_compile_with_activations_pytorch_refuses_what_was_not_measured(capsys, args):
    """compile with activations pytorch holds for full training without recompute (test_compile_step.py); with
    checkpointing or adapters the eager adjustments miss the compiled backward (docs/accuracy.md): one line."""
    code, out, err = run(capsys, "memory", *MEASURED_PYTORCH, "--batch", "2", "--seq", "64", *args)
    assert code == 2 and not out and err.count("\n") == 1 and "measured for full training without recompute" in err
    assert run(capsys, "memory", *MEASURED_PYTORCH, "--batch", "2", "--seq", "64")[0] == 0  # plain full training


def test_plan_with_compile_and_activations_pytorch_searches_no_recompute(capsys):
    """plan searches recompute none only there (full would be refused), with no layout skipped."""
    code, out, err = run(capsys, "plan", *MEASURED_PYTORCH, "--seq", "64", "--gpu", "h100-80gb", "--mfu", "0.4",
                         "--gpus", "1", "--global-batch", "4", "--json")
    found = json.loads(out)
    assert code == 0 and found["layouts"] and {lay["recompute"] for lay in found["layouts"]} == {"none"}
    assert not any("skipped" in note for note in found["notes"])


def test_compile_is_listed_in_the_regime_only_when_on():
    assert "compile" not in planning.plan("llama-3-8b", "train").regime.options()
    assert planning.plan("llama-3-8b", "train", compile=True).regime.options()["compile"] is True


# --- published GPU rows ------------------------------------------------------------------------------
# torchtitan benchmarks/llama3_h100_202412_torchtitan.md (b5bcd76), Tables 1 and 3, row "FSDP + torch.compile":
# Llama 3.1 8B, local batch 2 × 8192, selective op AC, bf16; max reserved (GiB). At 9dec370 torchtitan compiles
# each TransformerBlock but not the loss (train.py: "compiling loss function causes CUDA errors, turning off"):
# --compile --no-compile-loss, as it ran; the compiled checkpointed blocks keep what the measured ones keep.
# -9.7, -5.8 % without fsdp_stream_pools; -0.3, +0.1 % with them and FSDP2's buffers beside the loss; -7.8, -3.4 % with
# neither.
TORCHTITAN_COMPILE_ROWS = [(8, 77.0, -0.017), (128, 62.0, -0.016)]


def _reserved(gpus: int, **options: object) -> float:
    """The plan of torchtitan's row less the CUDA context and NCCL (max reserved holds neither), GiB."""
    plan = planning.plan("llama-3-8b", "train", batch=2, seq=8192, dp=gpus, fsdp=True, recompute="ops", **options)
    terms = plan.as_dict()["terms"]
    return (plan.as_dict()["total_bytes"] - terms["cuda_context"] - terms["nccl"]) / 2**30


@pytest.mark.parametrize(("gpus", "published", "stated"), TORCHTITAN_COMPILE_ROWS)
def test_torchtitan_compile_rows(gpus, published, stated):
    error = _reserved(gpus, compile=True, compile_loss=False) / published - 1
    assert abs(error - stated) < 0.005 and abs(error) < 0.10, error


# The same tables' row "FSDP + torch.compile + Float8": torchao float8 training (tensorwise scaling, the float8
# all-gather at its default, off), --precision fp8 on the compile row's options. Under torchtitan's per-op policy
# (9dec370's save list, abs on it) the compiled tensorwise layer saves the compiled bf16 layer's tensors, and its
# backward holds more than the bf16 layer's, not less (both measured with inductor, test_float8_compile.py): the
# plan is the compile row's (that excess, the backward's casts, compiled_recompute.ops_float8_backward_parts, stays
# under the loss's transients, 0.8 GiB a layer here). Planned with the compiled float8
# layer's smaller recompute buffer (not measured under ops), the rows were -8.5 and -4.3 %. Measured, the row is
# 0.2 GiB under the compile row.
# -9.4, -5.5 % without fsdp_stream_pools; -0.0, +0.4 % with them and FSDP2's buffers beside the loss; -7.6, -3.1 % with
# neither.
TORCHTITAN_FLOAT8_ROWS = [(8, 76.8, -0.014), (128, 61.8, -0.013)]


@pytest.mark.parametrize(("gpus", "published", "stated"), TORCHTITAN_FLOAT8_ROWS)
def test_torchtitan_float8_rows(gpus, published, stated):
    error = _reserved(gpus, compile=True, compile_loss=False, precision="fp8") / published - 1
    assert abs(error - stated) < 0.005 and abs(error) < 0.10, error


def test_the_compiled_loss_drops_the_eager_losss_fp32_tensors():
    """The same row with the loss compiled too (torchtune's compile_loss): the fp32 B·S·V tensors gone."""
    eager_loss, compiled_loss = _reserved(8, compile=True, compile_loss=False), _reserved(8, compile=True)
    assert eager_loss - compiled_loss > 4 * 2 * 8192 * 128256 / 2**30  # at least the fp32 logits


def test_no_compile_loss_keeps_the_eager_loss_terms():
    eager = planning.plan("llama-3-8b", "train", batch=1, seq=4096)
    blocks = planning.plan("llama-3-8b", "train", batch=1, seq=4096, compile=True, compile_loss=False)
    for key in ("logits", "logits_forward", "loss_gradients"):
        assert _term(eager, key) == _term(blocks, key), key
    assert blocks.regime.options()["compile_loss"] is False
    assert "compile_loss" not in planning.plan("llama-3-8b", "train", compile=True).regime.options()


def test_compiled_blocks_with_an_eager_loss_keep_the_eager_losss_tensors():
    setup = pyacts.Setup(precision="bf16", device="cpu", attn="sdpa")
    blocks = pyacts.saved("llama", replace(setup, compile=True, compile_loss=False))
    eager = pyacts.saved("llama", setup)
    loss = {t.key: t.expr for t in eager.formula.terms if t.key.startswith("loss.")}
    assert {t.key: t.expr for t in blocks.formula.terms if t.key.startswith("loss.")} == loss
    assert replace(setup, compile=True, compile_loss=False).label("llama").endswith(", compiled blocks")


def test_compile_loss_without_compile_is_refused_in_one_line(capfd):
    code, out, err = run(capfd, "memory", "llama-3-8b", "--no-compile-loss")  # in-process, as above
    assert code == 2 and out == "" and err.count("\n") == 1 and "compile" in err, err


# torchtune README (bd2a0fc) "Optimization flags", Llama 3.2 3B, batch 2 packed to 4096, bf16, one A100, peak
# memory active (the plan's tensors, --no-runtime): every row from "+ Compile" on runs torchtune's compiled layers
# over packed data (--layer-impl torchtune-packed: K and V expanded, the final norm's fp32 copy; test_torchtune_layer.py);
# from
# "+ Chunked Cross Entropy" on the compiled chunked loss. "+ Compile" ran its plain cross-entropy eager:
# full_finetune_single_device calls training.compile_loss(self._loss_fn) and discards the result (1814feb line 292,
# bd2a0fc line 281), and torch.compile(module) returns a wrapper, leaving the module as it was; the loss takes the
# fp32 logits torchtune's decoder returns (TransformerDecoder.unembed: self.output(h).float()): --no-compile-loss
# --logits-upcast model. (row, published GiB, options, the stated error) -- the checkpointing row peaks in the
# optimizer step, where the planner counts AdamW's foreach temporaries (6.0 GiB); docs/accuracy.md says why.
TORCHTUNE_COMPILE_ROWS = [
    ("+ Compile", 51.0, {"compile_loss": False, "logits_upcast": "model"}, -0.002),
    ("+ Chunked Cross Entropy", 42.9, {"logits": "chunked"}, -0.002),
    ("+ Activation Checkpointing", 24.9, {"logits": "chunked", "recompute": "full"}, 0.202),
    ("+ Fuse optimizer step into backward", 23.1, {"logits": "chunked", "recompute": "full",
                                                    "optimizer_in_backward": True}, 0.001),
    ("+ Activation Offloading", 21.8, {"logits": "chunked", "recompute": "full", "optimizer_in_backward": True,
                                       "offload_activations": True}, 0.000),
]


@pytest.mark.parametrize(("row", "published", "options", "stated"), TORCHTUNE_COMPILE_ROWS)
def test_torchtune_compile_rows(tmp_path, row, published, options, stated):
    from test_step_lifetimes import LLAMA_32_3B

    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_32_3B))
    plan = planning.plan(str(config), "train", batch=2, seq=4096, precision="bf16", runtime=False, compile=True,
                         layer_impl="torchtune-packed", **options)
    error = plan.as_dict()["total_bytes"] / 2**30 / published - 1
    assert abs(error - stated) < 0.005, (row, error)
    assert abs(error) < 0.10 or abs(stated) > 0.10, (row, error)
