"""Layers that differ (issue 12): dense and MoE layers, sliding and full attention, latent attention,
the KV cache per layer kind, expert parallelism, and the current families' presets.

No torch here: ``test_architectures_torch.py`` compares the same counts and cache bytes with the
real ``transformers`` models. The numbers below are either
worked by hand from the formula (shown in the comment) or the published figures the presets'
``_source`` names (rounded as published).
"""

from __future__ import annotations

import json

import pytest
from helpers import run

from symbolic import planning
from symbolic.library import registry
from symbolic.networks.transformer import ConfigError, load, spec_from_config


def spec(config: dict):  # noqa: ANN201 - a ModelSpec
    return spec_from_config(config, name=config["model_type"])


# --- layer patterns the configs decide --------------------------------------------------------
@pytest.mark.parametrize("config,kinds", [
    # Gemma-3: one full layer in six ((i + 1) % 6 == 0): i = 5, 11, 17, 23 of 26
    ({"model_type": "gemma3_text"}, {"dense": 26, "full": 4, "sliding": 22}),
    # Gemma-2 and gpt-oss: every other layer slides
    ({"model_type": "gemma2"}, {"dense": 26, "full": 13, "sliding": 13}),
    ({"model_type": "gpt_oss", "num_hidden_layers": 24}, {"moe": 24, "full": 12, "sliding": 12}),
    # Cohere-2: three sliding layers, then one full
    ({"model_type": "cohere2"}, {"dense": 40, "full": 10, "sliding": 30}),
    # an explicit layer_types wins over the family's pattern
    ({"model_type": "gemma2", "num_hidden_layers": 3,
      "layer_types": ["full_attention", "full_attention", "sliding_attention"]}, {"dense": 3, "full": 2, "sliding": 1}),
    # Mistral: a sliding_window makes every layer slide; null makes them full
    ({"model_type": "mistral"}, {"dense": 32, "sliding": 32}),
    ({"model_type": "mistral", "sliding_window": None}, {"dense": 32, "full": 32}),
    # Qwen: sliding only with use_sliding_window, from layer max_window_layers on
    ({"model_type": "qwen3"}, {"dense": 32, "full": 32}),
    ({"model_type": "qwen3", "use_sliding_window": True, "max_window_layers": 20}, {"dense": 32, "full": 20, "sliding": 12}),
    # DeepSeek-V3: the first 3 layers are dense; all 61 use latent attention
    ({"model_type": "deepseek_v3"}, {"moe": 58, "dense": 3, "latent": 61}),
    # Qwen3-MoE: listed layers and layers off the sparse step are dense: of 8 layers with step 2 and
    # layer 1 listed, MoE are i = 3, 5, 7
    ({"model_type": "qwen3_moe", "num_hidden_layers": 8, "decoder_sparse_step": 2, "mlp_only_layers": [1]},
     {"moe": 3, "dense": 5, "full": 8}),
    # Llama-4: MoE every interleave_moe_layer_step-th layer (i = 1, 3 of 4); chunked attention on the rope layers
    ({"model_type": "llama4_text", "num_hidden_layers": 4, "interleave_moe_layer_step": 2},
     {"moe": 2, "dense": 2, "full": 1, "sliding": 3}),
    ({"model_type": "llama4_text", "num_hidden_layers": 4, "moe_layers": [0]}, {"moe": 1, "dense": 3, "full": 1,
                                                                             "sliding": 3}),
])
def test_layer_kinds_follow_the_config(config: dict, kinds: dict) -> None:
    assert spec(config).layer_kinds() == kinds


def test_llama4_chunked_layers_take_the_chunk_as_window() -> None:
    assert spec({"model_type": "llama4_text"}).window == 8192


def test_mixed_layers_sum_over_kinds() -> None:
    s = spec({"model_type": "deepseek_v3"})
    f = s.params_formula()
    assert [t.key for t in f.terms][:3] == ["layers", "layers.moe", "layers.dense"]
    assert f.evaluate(s.values()).total == s.param_count() == sum(s.components().values())
    # the dense layers' MLP: 3 layers × 3·H·d_ff = 3 · 3 · 7168 · 18432
    assert s.components()["mlp.up"] * 3 == 3 * 3 * 7168 * 18432


# --- the cache of each attention kind, worked by hand --------------------------------------------
def test_sliding_cache_formula_example_by_hand() -> None:
    """Gemma-2-2B at 8192 tokens: 13 full layers keep 8192, 13 sliding ones 4095 (W − 1)."""
    f = registry.get("infer.kv_cache.sliding")
    assert f.evaluate(f.example).total == 2 * 13 * 4 * 256 * (8192 + 4095) * 2 == 654_258_176


def test_latent_cache_formula_example_by_hand() -> None:
    """DeepSeek-V3: (r_kv + d_rope) = 576 numbers per token and layer, not 2·a·d_head."""
    f = registry.get("infer.kv_cache.latent")
    assert f.evaluate(f.example).total == 61 * (512 + 64) * 8192 * 2 == 575_668_224


@pytest.mark.parametrize("seq,expected", [
    # gpt-oss-20b: 12 full layers × 2·8·64 per token; 12 sliding layers keep min(S, 127)
    (8192, 2 * 12 * 8 * 64 * 8192 * 2 + 2 * 12 * 8 * 64 * 127 * 2),
    (100, 2 * 24 * 8 * 64 * 100 * 2),
])
def test_cache_bytes_in_memory_json(capsys, seq: int, expected: int) -> None:
    code, out, _ = run(capsys, "memory", "gpt-oss-20b", "--mode", "infer", "--seq", str(seq), "--json")
    data = json.loads(out)
    assert code == 0 and data["cache_bytes"] == expected
    assert set(data["cache_terms"]) == {"kv_cache", "kv_cache.sliding"}
    assert data["cache_bytes"] == sum(data["cache_terms"].values())


def test_latent_cache_of_the_deepseek_preset() -> None:
    plan = planning.plan("deepseek-v3", mode="infer", seq=4096, batch=2)
    assert plan.cache_bytes == 61 * (512 + 64) * 4096 * 2 * 2


def test_mistral_sliding_window_bounds_its_cache() -> None:
    """Mistral-7B's config has sliding_window 4096: every layer keeps at most 4095 tokens."""
    short = planning.plan("mistral-7b", mode="infer", seq=2048).cache_bytes
    long = planning.plan("mistral-7b", mode="infer", seq=32768).cache_bytes
    assert short == 2 * 32 * 8 * 128 * 2048 * 2
    assert long == 2 * 32 * 8 * 128 * 4095 * 2


# --- expert parallelism ------------------------------------------------------------------------------
def test_ep_splits_only_the_routed_experts() -> None:
    """Mixtral, bf16: (N − E − embedding − head + E/8)·2 + (embedding + head)·2, E = 32·8·3·4096·14336."""
    experts = 32 * 8 * 3 * 4096 * 14336
    embedding = head = 32000 * 4096
    n = 46_702_792_704
    plan = planning.plan("mixtral-8x7b", mode="infer", ep=8, dp=8)
    terms = plan.terms()
    assert terms["weights"] == (n - experts - embedding - head + experts // 8) * 2
    assert terms["embeddings"] == (embedding + head) * 2
    without = planning.plan("mixtral-8x7b", mode="infer", dp=8).terms()
    assert without["weights"] - terms["weights"] == experts * 7 // 8 * 2


def test_ep_in_training_shards_the_expert_states() -> None:
    plan = planning.plan("mixtral-8x7b", mode="train", ep=4, dp=4, seq=1024)
    experts = 32 * 8 * 3 * 4096 * 14336
    n = 46_702_792_704
    assert plan.evaluate().derived  # N_gpu is a definition of the plan
    assert plan.terms()["weights"] == (n - experts + experts // 4) * 2


@pytest.mark.parametrize("argv,fragment", [
    (["memory", "llama-3-8b", "--ep", "2", "--dp", "2"], "has no mixture-of-experts layers"),
    (["memory", "mixtral-8x7b", "--ep", "3", "--dp", "3"], "ep 3 must divide the 8 experts"),
    (["memory", "mixtral-8x7b", "--ep", "4", "--dp", "2"], "ep 4 must divide dp·tp = 2"),
])
def test_ep_errors_are_one_line(capsys, argv: list[str], fragment: str) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2 and fragment in err and err.count("\n") == 1


# --- presets of current models and their published figures ---------------------------------------
@pytest.mark.parametrize("name,total_b,active_b", [
    ("gpt-oss-120b", "116.83", "5.13"),  # OpenAI: 116.83B total, 5.13B active (without the embedding)
    ("gpt-oss-20b", "20.91", "3.61"),  # OpenAI: 20.91B total, 3.61B active
    ("deepseek-v3", "671.03", "36.63"),  # DeepSeek README_WEIGHTS: 671B, 36.6B activated (with the 0.9B head)
])
def test_card_active_counts_leave_the_embedding_out(name: str, total_b: str, active_b: str) -> None:
    s = load(name)
    without = s.active_param_count() - s.components()["embedding"]
    assert f"{s.param_count() / 1e9:.2f}" == total_b and f"{without / 1e9:.2f}" == active_b


def test_params_json_shows_both_active_counts(capsys) -> None:
    code, out, _ = run(capsys, "params", "gpt-oss-120b", "--json")
    data = json.loads(out)
    assert code == 0 and data["active"] - data["active_without_embedding"] == 201088 * 2880
    code, out, _ = run(capsys, "params", "gpt-oss-120b")
    assert "without the input embedding, as the gpt_oss model card counts: 5,132,849,472" in out


def test_params_json_formula_values_give_the_total(capsys) -> None:
    code, out, _ = run(capsys, "params", "deepseek-v3", "--json")
    data = json.loads(out)
    s = load("deepseek-v3")
    values = {k: v for k, v in data["values"].items() if k in {x.name for x in s.params_formula().inputs}}
    assert code == 0 and s.params_formula().evaluate(values).total == data["total"]
    assert [k["layers"] for k in data["layer_kinds"]["params"]] == [61, 58, 3]


def test_table_shows_the_layers_of_each_kind(capsys) -> None:
    code, out, _ = run(capsys, "params", "deepseek-v3")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line and not line.startswith(" ")}
    assert code == 0 and rows["mlp.up"][-3] == "3" and rows["moe.experts"][-3] == "58"


# --- suggestions name only types of the same layout -------------------------------------------------
@pytest.mark.parametrize("model_type,fragment,absent", [
    ("qwen3_next", "its layout differs", "did you mean"),
    ("gemma3", "did you mean 'gemma3_text'?", ""),
])
def test_did_you_mean_only_same_layout(model_type: str, fragment: str, absent: str) -> None:
    with pytest.raises(ConfigError) as err:
        spec_from_config({"model_type": model_type}, name="x")
    assert fragment in str(err.value) and (not absent or absent not in str(err.value))


def test_fit_seq_solves_through_the_sliding_window_bound(capsys) -> None:
    """min(S, W − 1) in the total: the solver still finds the largest S, and S + 1 does not fit."""
    code, out, _ = run(capsys, "fit", "gpt-oss-20b", "--mode", "infer", "--gpu", "h100-80gb", "--for", "seq", "--json")
    data = json.loads(out)
    assert code == 0
    seq = data["value"]
    budget = 85_520_809_984
    assert planning.plan("gpt-oss-20b", mode="infer", seq=seq).total <= budget
    assert planning.plan("gpt-oss-20b", mode="infer", seq=seq + 1).total > budget


# --- a hybrid: attention and short-convolution layers (LFM2) -------------------------------------------
LFM2 = {"model_type": "lfm2", "num_hidden_layers": 6, "full_attn_idxs": [2, 5]}


def test_hybrid_layer_kinds_and_mlp_width() -> None:
    s = spec(LFM2)
    assert s.layer_kinds() == {"dense": 6, "full": 2, "conv": 4}
    assert s.ffn == 8192  # int(2 · 12288 / 3) = 8192, × 1.0, rounded up to a multiple of 256
    f = s.params_formula()
    assert [t.key for t in f.terms][:3] == ["layers", "layers.attention", "layers.conv"]
    # the convolution mixer: 3H² + H·k_conv + H² per layer, on 4 layers
    conv = sum(v for k, v in s.components().items() if k.startswith("conv."))
    assert conv == 4 * (3 * 2560**2 + 2560 * 3 + 2560**2)


def test_hybrid_cache_has_a_fixed_state() -> None:
    s = spec(LFM2)
    at = {seq: planning.plan(s, mode="infer", seq=seq, batch=2).terms() for seq in (1000, 2000)}
    assert at[1000]["state.conv"] == at[2000]["state.conv"] == 4 * 2560 * 3 * 2 * 2
    assert at[2000]["kv_cache"] == 2 * at[1000]["kv_cache"] == 2 * (2 * 2 * 8 * 80 * 1000 * 2 * 2)
