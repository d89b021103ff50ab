"""Per-GPU plans of real models: hand-checked terms, parallelism, inference, fit questions, errors."""

import pytest
import sympy

from symbolic import planning
from symbolic.catalogs import GPUS
from symbolic.core import symbols
from symbolic.library import activations as acts
from symbolic.math.formula import Formula

N8 = 8_030_261_248  # Llama-3-8B parameters
H, L, A, KV, FF, V = 4096, 32, 32, 8, 14336, 128256
HV = H * V


@pytest.fixture(scope="module")
def llama() -> planning.ModelShape:
    return planning.load("llama-3-8b")


def test_default_training_plan_by_hand(llama) -> None:
    plan = planning.plan(llama, runtime=False)
    assert isinstance(plan.formula, Formula)
    layer = 4096 * (12 * H + 4 * H * KV // A + 4 * A + 8 * FF)  # norms, Q, K, V, out, LSE, gated MLP
    saved_logits = 2 * 4096 * H + 4 * 4096 * V  # LM head input (bf16), fp32 log-softmax
    assert plan.terms() == {
        "weights": 2 * N8, "master_weights": 4 * N8, "optimizer_states": 8 * N8,
        "activations": L * layer, "inputs": 8 * 4096, "logits": saved_logits,
        "logits_forward": (2 + 4) * 4096 * V,  # bf16 logits and their fp32 upcast while the loss runs
        "loss_gradients": 8 * 4096 * V,  # fp32 gradients of nll_loss and log_softmax
        "gradients": 4 * N8, "optimizer_temporaries": 4 * N8,  # foreach AdamW: one fp32 temporary per parameter
    }
    saved = L * layer + 8 * 4096 + saved_logits
    assert plan.phase_bytes() == {"forward": 14 * N8 + saved + 6 * 4096 * V, "backward": 14 * N8 + saved + 8 * 4096 * V,
                                  "optimizer": 22 * N8}
    assert plan.total == 22 * N8 == 176_665_747_456 and plan.peak_phase == "optimizer"
    assert plan.peak_lead == 8 * N8 - saved - 8 * 4096 * V
    assert plan.resident_keys == ["weights", "master_weights", "optimizer_states"]
    assert set(plan.regime.defaulted) >= {"batch", "seq", "precision", "optimizer", "zero"}


def test_plan_formula_is_an_ordinary_formula(llama) -> None:
    plan = planning.plan(llama, seq=2048)
    f = plan.formula
    exact = f.evaluate(plan.values).total
    assert 0 <= plan.total - exact < len(f.terms)  # each term rounded up to a whole byte
    assert plan.total == max(plan.phase_bytes().values())
    assert symbols.S in f.diff("B").free_symbols  # through N's definition, like any Formula
    assert "M_{\\mathrm{gpu}}" in f.latex(equation=True) and "\\max" in f.latex(equation=True)
    budget = 200 * 2**30
    solution = plan.solve("B", budget)
    assert solution.status == "ok"
    assert planning.plan(llama, seq=2048, batch=solution.value).total <= budget
    assert planning.plan(llama, seq=2048, batch=solution.value + 1).total > budget


def test_gpt2_without_flash_is_korthikanti_exactly() -> None:
    plan = planning.plan("gpt2", flash=False)  # dropout defaults on for gpt2 (its config uses 0.1)
    assert plan.regime.dropout and plan.regime.seq == 1024
    assert plan.terms()["activations"] == 12 * 1024 * 768 * (34 + 5 * 12 * 1024 // 768) == 1_075_838_976


def test_tensor_and_pipeline_parallel_model_states(llama) -> None:
    assert planning.plan(llama, tp=2, dp=2).terms()["weights"] == N8  # 2·N/2: the untied head splits too
    staged = planning.plan(llama, pp=4)
    per_gpu = (N8 - 2 * HV) // 4 + HV  # L/p layers + the embedding on the first stage
    assert staged.terms()["weights"] == 2 * per_gpu == 4_540_467_200
    assert staged.evaluate().derived  # N_gpu derived from the model's own formula
    assert "logits" not in staged.terms()  # the last stage holds them


def test_pipeline_micro_batches_in_flight(llama) -> None:
    full = planning.plan(llama).terms()["activations"]
    assert planning.plan(llama, pp=4).terms()["activations"] == full  # 1F1B: L layers' worth
    assert planning.plan(llama, pp=4, microbatches=2).terms()["activations"] == full // 2
    inter = planning.plan(llama, pp=4, microbatches=8, interleave=2).terms()["activations"]
    assert inter == full * 11 // 8  # 1 + (p − 1)/(p·v) = 1 + 3/8


def test_tensor_and_sequence_parallel_activations(llama) -> None:
    plain = planning.plan(llama, tp=8).terms()["activations"]
    with_sp = planning.plan(llama, tp=8, sequence_parallel=True).terms()["activations"]
    assert with_sp < plain
    layer = 4096 * (12 * H + 4 * H * KV // A + 4 * A + 8 * FF)
    assert with_sp == L * layer // 8  # everything split over t


def test_zero3_dp8(llama) -> None:
    terms = planning.plan(llama, zero=3, dp=8).terms()
    assert terms["weights"] == 2 * N8 // 8
    assert terms["optimizer_states"] == N8
    assert terms["zero3_gathered"] == 6 * HV  # largest module: the embedding, bf16 weights + fp32 grads


def test_offload_moves_states_to_host(llama) -> None:
    plan = planning.plan(llama, zero=1, dp=4, offload=True)
    assert "master_weights" not in plan.terms() and "optimizer_states" not in plan.terms()
    host = plan.host_terms()
    assert host["master_weights"] == N8 and host["optimizer_states"] == 2 * N8
    assert host["host_buffers"] == 3 * N8 // 2
    assert plan.as_dict()["host_bytes"] == plan.host_total


def test_adafactor_uses_the_real_matrices(llama) -> None:
    assert planning.plan(llama, optimizer="adafactor").terms()["optimizer_states"] == 4 * 2_886_144


def test_article_b_activation_model_is_selectable() -> None:
    plan = planning.plan("gpt2", activations="article-b")
    assert plan.terms()["activations"] == 12 * (14 * 1024 * 768 + 4 * 1024**2)
    assert plan.terms()["logits"] == 6 * 1024 * 50257 and plan.terms()["logits_grad"] == 4 * 1024 * 50257


def test_full_recompute_keeps_layer_inputs_and_one_layer(llama) -> None:
    """The rebuilt layer's backward (``eager_recompute``: the layer less its input and the product, three d_ff
    gradients and the output's) comes after the loss's moment: the larger of the two, less the saved logits."""
    terms = planning.plan(llama, recompute="full").terms()
    assert terms["activations"] == L * 2 * 4096 * H
    rebuilt = 4096 * (12 * H + 4 * H * KV // A + 4 * A + 12 * FF)
    assert "recompute_buffer" not in terms
    assert terms["loss_gradients"] == max(8 * 4096 * V, rebuilt - terms["logits"]) == 8 * 4096 * V


def test_mixture_of_experts_routes_k_experts() -> None:
    plan = planning.plan("mixtral-8x7b", recompute="selective", flash=False)
    per_token = sympy.diff(plan.formula.expr, symbols.k_exp)
    assert per_token != 0 and plan.values["k_exp"] == 2
    assert plan.terms()["weights"] == 2 * 46_702_792_704


def test_inference_bf16_by_hand(llama) -> None:
    plan = planning.plan(llama, mode="infer", seq=8192)
    terms = plan.terms()
    assert terms["weights"] + terms["embeddings"] == 2 * N8
    assert terms["kv_cache"] == 2**30
    assert terms["activations"] == 2 * 8192 * (2 * H + 3 * FF)
    assert terms["logits"] == 4 * V


def test_inference_int4_and_tensor_parallel(llama) -> None:
    terms = planning.plan(llama, mode="infer", weights="int4").terms()
    assert terms["weights"] == (N8 - 2 * HV) // 2 == 3_489_794_048
    assert terms["weight_scales"] == (N8 - 2 * HV) * 5 // 256 == 136_320_080
    assert terms["embeddings"] == 2 * 2 * HV
    kv16 = planning.plan(llama, mode="infer", tp=16).terms()["kv_cache"]
    kv8 = planning.plan(llama, mode="infer", tp=8).terms()["kv_cache"]
    assert kv16 == kv8 == 2 * L * 1 * 128 * 4096 * 2  # one KV head per rank, replicated beyond 8


def test_fit_batch_is_the_boundary(llama) -> None:
    answer = planning.fit_batch(llama, "h200-141gb", zero=3, dp=8)
    assert answer.status == "ok" and answer.value >= 1
    gpu = GPUS["h200-141gb"]
    assert answer.plan.total <= gpu.bytes
    assert planning.plan(llama, zero=3, dp=8, batch=answer.value + 1).total > gpu.bytes


def test_fit_seq_capped_by_learned_positions() -> None:
    answer = planning.fit_seq("gpt2", "t4")
    assert answer.value == 1024 and "learned positions" in answer.message


def test_fit_gpus_over_dp_and_tp() -> None:
    answer = planning.fit_gpus("llama-3-70b", "h100-80gb", recompute="full")
    gpu = GPUS["h100-80gb"]
    assert answer.over == "dp" and answer.plan.regime.zero == 3
    assert answer.plan.total <= gpu.bytes
    assert planning.plan("llama-3-70b", recompute="full", zero=3, dp=answer.value - 1).total > gpu.bytes
    served = planning.fit_gpus("llama-3-70b", "h100-80gb", mode="infer")
    assert served.over == "tp" and served.value == 2 and served.gpus == 2
    nothing = planning.fit_gpus("llama-3-70b", "h100-80gb")  # no recompute: activations alone exceed 80 GiB
    assert nothing.status == "none"


def test_notes_for_choices_that_change_nothing(llama) -> None:
    plan = planning.plan(llama, zero=2)
    assert any("dp 1" in note for note in plan.notes)
    assert planning.plan(llama, zero=2).terms() == planning.plan(llama).terms()


@pytest.mark.parametrize(("options", "message"), [
    ({"tp": 3}, "must divide the 32 attention heads"),
    ({"tp": 16, "mode": "infer"}, None),  # serving: 16 divides 32 heads; the 8 KV heads are replicated
    ({"tp": 16, "mode": "train"}, "not modelled"),  # training: Megatron needs the 8 KV heads to divide by tp
    ({"zero": 3, "pp": 2}, "pipeline"),
    ({"offload": True}, "ZeRO stage"),
    ({"mode": "infer", "optimizer": "adamw"}, "applies to mode train"),
    ({"weights": "int4"}, "applies to mode infer"),
    ({"interleave": 2}, "needs pp > 1"),
    ({"pp": 3, "mode": "infer"}, "must divide the 32 layers"),  # serving; training splits as torchtitan (issue 28)
    ({"pp": 3, "mode": "train"}, None),
    ({"precision": "int8"}, "choose from"),  # fp8 is torchao float8 training (issue 28)
    ({"colour": "red"}, "unknown option"),
    ({"batch": 0}, "between 1"),
])
def test_invalid_combinations(llama, options, message) -> None:
    if message is None:
        planning.plan(llama, **options)
        return
    with pytest.raises(ValueError, match=message):
        planning.plan(llama, **options)


def test_gpt2_learned_positions_limit() -> None:
    with pytest.raises(ValueError, match="1024 learned positions"):
        planning.plan("gpt2", seq=2048)


def test_gpu_catalogue() -> None:
    required = {"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "l4", "rtx-4090", "mi300x", "v100-16gb",
                "v100-32gb", "a10g", "rtx-3090", "l40s", "h100-94gb", "b200"}
    assert required <= set(GPUS)
    assert GPUS["a100-80gb"].bytes == 80 * 2**30  # "80GB" is 80 GiB
    assert GPUS["h100-80gb"].bytes == 81_559 * 2**20 == 85_520_809_984
    assert GPUS["mi300x"].bytes == 205_822_885_888
    assert all(g.basis in {"nvidia-smi", "rocm-smi", "vendor"} and g.source for g in GPUS.values())
    assert planning.gpu("h100-80gb") is GPUS["h100-80gb"]
    with pytest.raises(ValueError, match="symbolic gpus"):
        planning.gpu("h300")


def test_plan_as_dict_for_reports(llama) -> None:
    data = planning.plan(llama).as_dict(planning.gpu("h200-141gb"), formulas=True)
    assert isinstance(data["total_bytes"], int) and data["fits"] is False
    assert data["headroom_bytes"] == GPUS["h200-141gb"].bytes - data["total_bytes"]
    assert set(data["terms"]) >= {"weights", "activations"} and "N" in data["formula"]["definitions"]


def test_fit_seq_stops_at_the_planners_bound() -> None:
    """A capacity that would hold more than options.table.MAX_SEQ tokens answers the bound, as learned positions cap."""
    from symbolic.options.table import MAX_SEQ

    answer = planning.fit_seq("qwen2-0.5b", "4PiB", mode="infer")
    assert answer.status == "ok" and answer.value == MAX_SEQ and answer.plan.regime.seq == MAX_SEQ
    assert "would fit; the planner's bound of 134,217,728 tokens is the limit" in answer.message


def test_korthikanti_variant_names() -> None:
    assert acts.LayerVariant(flash=True, gated=True).name == "flash.gated"


def test_fit_seq_warns_past_the_trained_context() -> None:
    # Llama-3-8B's config says max_position_embeddings = 8192 (preset llama-3-8b.json); rotary
    # attention runs past it, so the answer is not capped, but it says so
    long = planning.fit_seq("llama-3-8b", "h100-80gb", mode="infer")
    assert long.status == "ok" and long.value > 8192
    assert "beyond the 8,192 positions llama-3-8b was trained for" in long.message
    short = planning.fit_seq("llama-3-8b", "l4", mode="infer", batch=64)
    assert short.status == "ok" and short.value <= 8192 and "trained for" not in short.message
