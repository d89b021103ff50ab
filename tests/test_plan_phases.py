"""A plan is phases: the total is the peak of a step, by hand, in JSON and text, with the runtime's share.

Real PyTorch steps on the CPU against ``symbolic memory ... --json`` for the same models
(``plan_phases_child.py``) are checked in ``test_measure.py``, whose one child process measures
the other torch cases too.
"""

import json
import math

import pytest
import sympy
from helpers import run

from symbolic import planning
from symbolic.library import activations_pytorch as pyacts
from symbolic.library import runtime
from symbolic.planning import phases

N8 = 8_030_261_248  # Llama-3-8B parameters
H, L, A, KV, FF, V = 4096, 32, 32, 8, 14336, 128256
MIB = 2**20
# article A's network (2048/4096/10): parameters with and without the nn.Linear biases
N_MLP, N_MLP_NOBIAS = 33_585_162, 33_574_912
X_128 = 4 * 128 * 2048 + 8 * 128  # the step's inputs at B = 128, fp32: x and the int64 targets


# --- the structure -----------------------------------------------------------------------------
def test_every_phase_is_a_formula_and_the_peak_is_their_maximum() -> None:
    plan = planning.plan("llama-3-8b", seq=2048, runtime=False)
    assert list(plan.phases) == list(phases.TRAIN_PHASES)
    found = plan.phase_bytes()
    for name, formula in plan.phases.items():
        assert formula.name == f"M_{name}" and math.ceil(formula.evaluate(formula.restrict(plan.values)).total) == found[name]
    assert plan.total == max(found.values()) and plan.peak_phase == max(found, key=found.get)
    ranked = sorted(found.values())
    assert plan.peak_lead == ranked[-1] - ranked[-2]
    peak = plan.formula.term(phases.PEAK_KEY)
    assert isinstance(peak.expr, sympy.Max) or peak.expr == plan.layout.extra(plan.peak_phase)
    assert [t.key for t in plan.formula.terms] == [*plan.resident_keys, "peak"]


def test_gradients_appear_in_the_optimizer_phase_and_loss_transients_are_not_saved() -> None:
    plan = planning.plan("gpt2", runtime=False)  # bf16-mixed, korthikanti, hf logits; S = 1024
    where = plan.layout.where()
    assert where["gradients"] == ("optimizer",) and where["master_weights"] == ("resident",)
    assert where["activations"] == ("forward", "backward") and where["loss_gradients"] == ("backward",)
    terms = plan.terms()
    assert terms["logits"] == 2 * 1024 * 768 + 4 * 1024 * 50257  # saved: LM head input, fp32 log-softmax
    assert terms["logits_forward"] == (2 + 4) * 1024 * 50257  # bf16 logits + fp32 upcast while the loss runs
    assert terms["loss_gradients"] == 8 * 1024 * 50257  # fp32 nll_loss and log_softmax gradients
    megatron = planning.plan("gpt2", logits="megatron", runtime=False).terms()
    assert megatron["logits"] == 4 * 1024 * 768 + 4 * 1024 * 50257 and "loss_gradients" not in megatron


def test_serving_is_prefill_and_decode_by_hand() -> None:
    plan = planning.plan("llama-3-8b", mode="infer", seq=8192, runtime=False)
    work = 2 * (2 * H + 3 * FF)  # bf16 residual, norm output and gated MLP, per token
    resident = 2 * N8 + 2**30  # weights and embeddings, KV cache
    assert plan.phase_bytes() == {"prefill": resident + 8192 * work + 4 * V, "decode": resident + work + 4 * V}
    assert plan.peak_phase == "prefill" and plan.peak_lead == 8191 * work
    assert plan.total == resident + 8192 * work + 4 * V


def test_zero_fit_solves_against_the_peak() -> None:
    answer = planning.fit_gpus("llama-3-70b", "h100-80gb", recompute="full")
    assert answer.status == "ok" and answer.plan.total <= answer.gpu.bytes
    smaller = planning.plan("llama-3-70b", recompute="full", zero=3, dp=answer.value - 1)
    assert smaller.total > answer.gpu.bytes  # the peak phase decides, not the sum of all terms
    batch = planning.fit_batch("llama-3-8b", "h200-141gb", zero=3, dp=8)
    nxt = planning.plan("llama-3-8b", zero=3, dp=8, batch=batch.value + 1)
    assert batch.plan.total <= batch.gpu.bytes < nxt.total


# --- the runtime's share -----------------------------------------------------------------------
def test_runtime_terms_join_cuda_plans_as_resident_terms() -> None:
    plan = planning.plan("llama-3-8b")
    terms = plan.terms()
    bare = planning.plan("llama-3-8b", runtime=False)
    assert terms["cuda_context"] == runtime.CONTEXT_BYTES
    assert terms["cublas_workspace"] == 2 * runtime.workspace_bytes(None)  # training: two cuBLAS handles
    # the allocator's two pool segments and its fragmentation allowance of the tensor bytes (the peak)
    assert terms["allocator"] == math.ceil(2 * MIB + 20 * MIB + runtime.FRAGMENTATION * bare.total)
    assert plan.total - bare.total == plan.runtime_bytes == sum(terms[k] for k in ("cuda_context",
                                                                                   "cublas_workspace", "allocator"))
    assert "nccl" not in terms and "nccl" in planning.plan("llama-3-8b", dp=2, zero=1).terms()
    assert any("--no-runtime" in n for n in plan.notes) and any("--no-runtime" in n for n in bare.notes)
    serving = planning.plan("llama-3-8b", mode="infer").terms()
    assert serving["cublas_workspace"] == runtime.workspace_bytes(None)  # one handle serving


def test_no_runtime_on_the_cpu() -> None:
    plan = planning.plan("gpt2", activations="pytorch", device="cpu", batch=2, seq=128)
    assert plan.runtime_bytes == 0 and not set(plan.terms()) & {"cuda_context", "allocator"}
    assert any("device cpu" in n for n in plan.notes)


# --- article A's network -------------------------------------------------------------------------
def test_mlp_adamw_by_hand() -> None:
    plan = planning.plan("mlp", batch=128, precision="fp32", optimizer="adamw", activations="pytorch", device="cpu")
    assert plan.as_dict()["derived"]["N"] == N_MLP
    # single-tensor AdamW: previous denominator + 2 × current; largest at (gat.bias, up.weight)
    temporaries = 4 * (4096 + 2 * 4096 * 4096)
    assert plan.terms()["optimizer_temporaries"] == temporaries == 134_234_112
    # AdamW's 8 step counters, 4 bytes each on the CPU: the measured step's 672,646,336 bytes (plan_phases_child.py)
    assert plan.terms()["optimizer_steps"] == 4 * 8
    assert plan.total == 16 * N_MLP + temporaries + X_128 + 4 * 8 == 672_646_336
    assert plan.peak_phase == "optimizer" and plan.runtime_bytes == 0
    assert set(plan.regime.options()) >= {"loss", "batch"} and "seq" not in plan.regime.options()


def test_mlp_nobias_adamw_temporaries_follow_the_weights_only() -> None:
    plan = planning.plan("mlp-nobias", batch=128, precision="fp32", device="cpu")
    assert plan.regime.activations == "pytorch" and plan.as_dict()["derived"]["N"] == N_MLP_NOBIAS
    temporaries = 4 * (2048 * 4096 + 2 * 4096 * 4096)  # (gat.weight, up.weight): no biases in between
    assert plan.terms()["optimizer_temporaries"] == temporaries
    assert plan.total == 16 * N_MLP_NOBIAS + temporaries + X_128 + 4 * 4 == 706_020_368  # 4 step counters


def test_mlp_sgd_momentum_and_mse() -> None:
    plan = planning.plan("mlp", batch=128, precision="fp32", optimizer="sgd-momentum", loss="mse", device="cpu")
    terms = plan.terms()
    assert terms["weights"] == terms["optimizer_states"] == terms["gradients"] == 4 * N_MLP
    assert terms["optimizer_temporaries"] == 0  # momentum updated in place
    assert terms["logits"] == 4 * 128 * 10  # mse keeps the one-hot targets in the dtype
    assert plan.phase_bytes()["optimizer"] == 12 * N_MLP + X_128 and plan.regime.options()["loss"] == "mse"
    assert plan.total == max(plan.phase_bytes().values())  # the end of backward can lead


@pytest.mark.parametrize("options, message", [
    ({"activations": "korthikanti"}, "activations pytorch only"),
    ({"mode": "infer"}, "training only"),
    ({"use_cache": True}, "no KV cache"),
])
def test_mlp_errors(options, message) -> None:
    mode = options.pop("mode", "train")
    with pytest.raises(ValueError, match=message):
        planning.plan("mlp", mode, **options)


def test_mse_loss_is_for_the_mlp_only() -> None:
    with pytest.raises(ValueError, match="applies to article A's network"):
        planning.plan("gpt2", activations="pytorch", loss="mse")


# --- options of the PyTorch step -----------------------------------------------------------------
def test_mixed_precision_and_sgd_with_the_pytorch_step() -> None:
    plan = planning.plan("gpt2", activations="pytorch", precision="bf16-mixed", batch=2, seq=128, runtime=False)
    n = plan.as_dict()["derived"]["N"]
    terms = plan.terms()
    assert terms["weights"] == 4 * n and terms["optimizer_states"] == 8 * n and terms["gradients"] == 4 * n
    assert plan.saved.setup.precision == "bf16-mixed" and plan.saved.setup.b == 2
    sgd = planning.plan("gpt2", activations="pytorch", optimizer="sgd-momentum", batch=2, seq=128, runtime=False)
    assert sgd.terms()["optimizer_states"] == 2 * n  # pure bf16 momentum buffers


def test_use_cache_and_dropout_masks_reach_the_setup() -> None:
    plan = planning.plan("gpt2", activations="pytorch", batch=2, seq=128)
    assert plan.regime.use_cache is True and "use_cache" in plan.regime.defaulted  # gpt2's config: use_cache true
    assert plan.saved.setup.use_cache is True and plan.saved.setup.masks == "bool"  # cuda: bool masks
    off = planning.plan("gpt2", activations="pytorch", batch=2, seq=128, use_cache=False, dropout_masks="dtype")
    assert off.saved.setup.use_cache is False and off.saved.setup.masks == "dtype"
    for p in (plan, off):  # the plan's saved bytes are the library's formula at the model's widths
        model = pyacts.saved("gpt2", p.saved.setup).formula
        assert p.activation_bytes == model.evaluate(model.restrict({**p.values, "d_ff": 3072})).total
    assert planning.plan("gpt2", activations="pytorch", recompute="none").regime.use_cache is True
    assert "use_cache" not in planning.plan("gpt2").regime.options()  # korthikanti: does not apply


# --- the command line ----------------------------------------------------------------------------
def test_memory_text_names_the_peak_phase_and_formula_shows_the_phases(capsys) -> None:
    code, out, _ = run(capsys, "memory", "llama-3-8b", "--formula")
    plan = planning.plan("llama-3-8b")
    assert code == 0 and f"total (peak: {plan.peak_phase})" in out
    assert f"peak: the optimizer phase sets it, {planning_format(plan.peak_lead)} ({plan.peak_lead:,} bytes) " \
           "more than backward" in out
    assert "forward: M_forward = " in out and "backward: M_backward = " in out and "optimizer: M_optimizer = " in out
    assert "runtime: " in out and "Max(" in out


def planning_format(n: int) -> str:
    from symbolic.core.units import format_bytes

    return format_bytes(n)


def test_memory_json_phases(capsys) -> None:
    code, out, _ = run(capsys, "memory", "mlp", "--batch", "128", "--precision", "fp32", "--optimizer",
                       "sgd-momentum", "--device", "cpu", "--json", "--formula")
    data = json.loads(out)
    assert code == 0 and data["phases"]["optimizer"] == 12 * N_MLP + X_128
    assert data["total_bytes"] == max(data["phases"].values()) == data["phases"][data["peak_phase"]]
    assert data["activation_bytes"] == data["activations_pytorch"]["activation_bytes"]
    assert set(data["phases"]) == {"forward", "backward", "optimizer"} == set(data["formula"]["phases"])
    assert data["phase_terms"]["optimizer"] == ["gradients", "optimizer_temporaries", "step_inputs"]


def test_check_exit_codes(capsys) -> None:
    code, _, _ = run(capsys, "memory", "llama-3-8b", "--gpu", "h100-80gb", "--check")
    assert code == 3
    code, _, _ = run(capsys, "memory", "llama-3-8b", "--gpu", "h100-80gb", "--zero", "3", "--dp", "8", "--check")
    assert code == 0
    code, out, _ = run(capsys, "memory", "llama-3-8b", "--gpu", "h100-80gb", "--check", "--json")
    assert code == 3 and json.loads(out)["fits"] is False
    code, _, err = run(capsys, "memory", "llama-3-8b", "--check")
    assert code == 2 and "--check needs --gpu" in err and len(err.strip().splitlines()) == 1
    code, _, _ = run(capsys, "fit", "llama-3-70b", "--gpu", "l4", "--for", "batch", "--check")
    assert code == 3
    code, _, _ = run(capsys, "fit", "gpt2", "--gpu", "l4", "--for", "batch", "--check")
    assert code == 0
    code, out, _ = run(capsys, "fit", "gpt2", "--gpu", "l4", "--for", "batch", "--json")
    data = json.loads(out)
    assert data["total_bytes"] == max(data["phases"].values()) == data["phases"][data["peak_phase"]]


# --- fine-tuning and gradient checkpointing (contract F) -----------------------------------------
def test_lora_plan_keeps_the_base_resident_and_adapter_gradients_in_the_optimizer_phase() -> None:
    from symbolic.planning import finetune

    plan = planning.plan("llama-3-8b", lora_rank=8, seq=512, runtime=False)
    where = plan.layout.where()
    assert where["weights"] == where["adapter_weights"] == ("resident",) and where["gradients"] == ("optimizer",)
    states = {t.key: t for t in finetune.state_terms(plan.model, plan.regime, sympy.Symbol("N", positive=True,
                                                                                          integer=True))}
    terms = plan.terms()
    assert terms["optimizer_temporaries"] == terms["gradients"]  # foreach AdamW over the adapters only
    assert set(states) <= set(terms) and plan.total == max(plan.phase_bytes().values())


def test_pytorch_checkpointing_is_a_phase_of_its_own() -> None:
    from symbolic.planning import finetune
    from symbolic.planning.pytorch import plain_saved

    plan = planning.plan("gpt2", activations="pytorch", recompute="full", batch=2, seq=128, device="cpu")
    assert "recompute" in plan.phases and plan.regime.use_cache is False  # transformers turns the cache off
    checkpointed = finetune.saved_model(plan.model, plan.regime, plain_saved(plan.model, plan.regime)).formula
    assert plan.activation_bytes == math.ceil(checkpointed.evaluate(checkpointed.restrict(
        {**plan.values, "d_ff": 3072})).total)
    assert plan.activation_bytes < planning.plan("gpt2", activations="pytorch", batch=2, seq=128,
                                                 device="cpu").activation_bytes
