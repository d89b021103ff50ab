"""Cross-check against the real ``transformers`` library: our count equals the model's own, and our
KV cache bytes equal the cache object it returns.

Each case builds the model class a config names (or the family's default) on PyTorch's ``meta``
device — no weights, no memory, no download — and compares ``sum(p.numel() for p in
model.parameters())`` (tied tensors once) with ``ModelSpec.param_count()``. The models are built
by ``hf_reference.py``, and the cache cases (the section at the end) prefilled by
``hf_cache_reference.py``, in one child process (``hf_torch_references.py``), so torch is never
imported by the test process.
Skipped cleanly when torch or transformers is not installed; CI installs ``torch==2.13.0`` (CPU)
and transformers.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from helpers import run, torch_child

from symbolic import planning
from symbolic.networks.transformer import SUPPORTED, ModelSpecError, preset_config, preset_names, spec_from_config

pytestmark = pytest.mark.torch

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
    pytest.skip("torch and transformers are not installed", allow_module_level=True)

REFERENCE_SCRIPT = Path(__file__).with_name("hf_torch_references.py")
IGNORED = ("_source", "auto_map", "_name_or_path")

TINY = {"vocab_size": 101, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
DECODER = {**TINY, "intermediate_size": 96}

CASES: dict[str, dict] = {
    # GPT-2: learned positions, Conv1D biases, n_inner, untied, cross-attention, other heads
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 101, "n_positions": 40},
    "gpt2-n_inner-untied": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": 100,
                            "vocab_size": 101, "tie_word_embeddings": False},
    "gpt2-cross": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "add_cross_attention": True},
    "gpt2-base": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "architectures": ["GPT2Model"]},
    "gpt2-seqcls": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "num_labels": 3,
                    "architectures": ["GPT2ForSequenceClassification"]},
    # BERT: every head class decides what is counted
    **{f"bert-{cls}": {"model_type": "bert", **TINY, "intermediate_size": 96, "max_position_embeddings": 40,
                       "type_vocab_size": 3, "id2label": {str(i): f"L{i}" for i in range(5)},
                       "architectures": [f"Bert{cls}"]}
       for cls in ("Model", "ForMaskedLM", "ForPreTraining", "ForSequenceClassification", "ForTokenClassification",
                   "ForQuestionAnswering", "ForMultipleChoice", "ForNextSentencePrediction", "LMHeadModel")},
    "bert-mlm-untied": {"model_type": "bert", **TINY, "intermediate_size": 96, "tie_word_embeddings": False,
                        "architectures": ["BertForMaskedLM"]},
    "bert-cross": {"model_type": "bert", **TINY, "intermediate_size": 96, "is_decoder": True,
                   "add_cross_attention": True},
    # Llama: GQA, head_dim ≠ H/a, biases, tied, other heads
    "llama-gqa-headdim": {"model_type": "llama", **DECODER, "num_key_value_heads": 2, "head_dim": 24},
    "llama-biases-tied": {"model_type": "llama", **DECODER, "attention_bias": True, "mlp_bias": True,
                          "tie_word_embeddings": True},
    "llama-mqa": {"model_type": "llama", **DECODER, "num_key_value_heads": 1},
    "llama-base": {"model_type": "llama", **DECODER, "architectures": ["LlamaModel"]},
    "llama-seqcls": {"model_type": "llama", **DECODER, "num_labels": 7,
                     "architectures": ["LlamaForSequenceClassification"]},
    "mistral-gqa": {"model_type": "mistral", **DECODER, "num_key_value_heads": 2},
    "mistral-headdim-tied": {"model_type": "mistral", **DECODER, "head_dim": 8, "tie_word_embeddings": True},
    # Mixtral: experts and top-k
    "mixtral": {"model_type": "mixtral", **DECODER, "num_key_value_heads": 2, "num_local_experts": 4,
                "num_experts_per_tok": 2},
    "mixtral-top1-tied": {"model_type": "mixtral", **DECODER, "num_local_experts": 3, "num_experts_per_tok": 1,
                          "tie_word_embeddings": True, "head_dim": 32},
    # Qwen2: q/k/v biases, o without
    "qwen2": {"model_type": "qwen2", **DECODER, "num_key_value_heads": 2},
    "qwen2-tied-headdim": {"model_type": "qwen2", **DECODER, "tie_word_embeddings": True, "head_dim": 8,
                           "num_key_value_heads": 4},
    # Qwen2-MoE: shared expert and its gate
    "qwen2_moe": {"model_type": "qwen2_moe", **DECODER, "num_key_value_heads": 2, "num_experts": 4,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 48, "shared_expert_intermediate_size": 80},
    "qwen2_moe-nobias": {"model_type": "qwen2_moe", **DECODER, "num_experts": 6, "num_experts_per_tok": 3,
                         "qkv_bias": False, "tie_word_embeddings": True},
    # Gemma: head_dim 256 by default, tied by default, attention bias
    "gemma-default-headdim": {"model_type": "gemma", **DECODER, "num_key_value_heads": 1},
    "gemma-bias-untied": {"model_type": "gemma", **DECODER, "head_dim": 16, "attention_bias": True,
                          "tie_word_embeddings": False},
    # Phi: parallel block with one norm, lm_head bias, qk layernorm
    "phi": {"model_type": "phi", **DECODER},
    "phi-gqa-qknorm-tied": {"model_type": "phi", **DECODER, "num_key_value_heads": 2, "qk_layernorm": True,
                            "tie_word_embeddings": True},
    # OPT: position offset, project_in/out, post-LN without final norm, no biases, non-affine norms
    "opt": {"model_type": "opt", **TINY, "ffn_dim": 96, "max_position_embeddings": 30},
    "opt-proj": {"model_type": "opt", **TINY, "ffn_dim": 96, "word_embed_proj_dim": 32,
                 "do_layer_norm_before": False, "tie_word_embeddings": False},
    "opt-nobias-noaffine": {"model_type": "opt", **TINY, "ffn_dim": 96, "enable_bias": False,
                            "layer_norm_elementwise_affine": False},
    "opt-removed-final": {"model_type": "opt", **TINY, "ffn_dim": 96, "_remove_final_layer_norm": True},
    # Falcon: multi-query, multi-head, new decoder architecture (GQA), sequential block, biases
    "falcon-mq": {"model_type": "falcon", **TINY},
    "falcon-mha-bias": {"model_type": "falcon", **TINY, "multi_query": False, "bias": True},
    "falcon-new": {"model_type": "falcon", **TINY, "new_decoder_architecture": True, "num_kv_heads": 2,
                   "ffn_hidden_size": 100},
    "falcon-new-1ln": {"model_type": "falcon", **TINY, "new_decoder_architecture": True, "num_kv_heads": 2,
                       "num_ln_in_parallel_attn": 1},
    "falcon-sequential-untied": {"model_type": "falcon", **TINY, "parallel_attn": False,
                                 "tie_word_embeddings": False},
    # key aliases and other head classes
    "gpt2-aliases": {"model_type": "gpt2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "max_position_embeddings": 50},
    "falcon-n_embed": {"model_type": "falcon", "n_embed": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
    "falcon-base": {"model_type": "falcon", **TINY, "architectures": ["FalconModel"]},
    "opt-proj-seqcls": {"model_type": "opt", **TINY, "ffn_dim": 96, "word_embed_proj_dim": 32, "num_labels": 4,
                        "architectures": ["OPTForSequenceClassification"]},
    "opt-proj-base": {"model_type": "opt", **TINY, "ffn_dim": 96, "word_embed_proj_dim": 32,
                      "architectures": ["OPTModel"]},
    "qwen2-seqcls": {"model_type": "qwen2", **DECODER, "num_key_value_heads": 2,
                     "architectures": ["Qwen2ForSequenceClassification"]},
    "phi-seqcls": {"model_type": "phi", **DECODER, "id2label": {"0": "a", "1": "b", "2": "c"},
                   "architectures": ["PhiForSequenceClassification"]},
    "mixtral-base": {"model_type": "mixtral", **DECODER, "num_key_value_heads": 2, "architectures": ["MixtralModel"]},
    "gpt_neox-base": {"model_type": "gpt_neox", **DECODER, "architectures": ["GPTNeoXModel"]},
    # GPT-NeoX: untied by default, attention bias off, sequential residual, tied
    "gpt_neox": {"model_type": "gpt_neox", **DECODER},
    "gpt_neox-nobias-tied": {"model_type": "gpt_neox", **DECODER, "attention_bias": False,
                             "tie_word_embeddings": True, "use_parallel_residual": False},
    # --- issue 12: current families (small configs; each exercises what its table entry says) ----
    "qwen3": {"model_type": "qwen3", **DECODER, "num_key_value_heads": 2, "head_dim": 24},
    "qwen3-bias-tied": {"model_type": "qwen3", **DECODER, "attention_bias": True, "tie_word_embeddings": True,
                        "head_dim": 16},
    "qwen3_moe": {"model_type": "qwen3_moe", **DECODER, "num_hidden_layers": 4, "num_key_value_heads": 2,
                  "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48},
    "qwen3_moe-dense-layers": {"model_type": "qwen3_moe", **DECODER, "num_hidden_layers": 5, "num_experts": 4,
                               "num_experts_per_tok": 1, "moe_intermediate_size": 40, "mlp_only_layers": [0],
                               "decoder_sparse_step": 2},
    "qwen2_moe-dense-layers": {"model_type": "qwen2_moe", **DECODER, "num_hidden_layers": 3, "num_experts": 4,
                               "num_experts_per_tok": 2, "moe_intermediate_size": 48, "mlp_only_layers": [1]},
    "gemma2": {"model_type": "gemma2", **DECODER, "num_key_value_heads": 2, "head_dim": 32},
    "gemma3_text": {"model_type": "gemma3_text", **DECODER, "num_key_value_heads": 2, "head_dim": 32,
                    "architectures": ["Gemma3ForCausalLM"]},
    "phi3": {"model_type": "phi3", **DECODER, "num_key_value_heads": 2, "pad_token_id": 0},
    "phimoe": {"model_type": "phimoe", **DECODER, "num_key_value_heads": 2, "num_local_experts": 4,
               "num_experts_per_tok": 2},
    "phimoe-biases": {"model_type": "phimoe", **DECODER, "num_local_experts": 3, "num_experts_per_tok": 1,
                      "attention_bias": True, "lm_head_bias": True},
    "starcoder2": {"model_type": "starcoder2", **DECODER, "num_key_value_heads": 2},
    "starcoder2-nobias-untied": {"model_type": "starcoder2", **DECODER, "use_bias": False,
                                 "tie_word_embeddings": False},
    "deepseek_v2-lite": {"model_type": "deepseek_v2", **DECODER, "num_hidden_layers": 3, "q_lora_rank": None,
                         "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 12, "v_head_dim": 10,
                         "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 2,
                         "moe_intermediate_size": 24, "first_k_dense_replace": 1},
    "deepseek_v3": {"model_type": "deepseek_v3", **DECODER, "num_hidden_layers": 4, "q_lora_rank": 24,
                    "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 12, "v_head_dim": 10,
                    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
                    "moe_intermediate_size": 24, "first_k_dense_replace": 2, "n_group": 2, "topk_group": 1},
    "deepseek_v3-bias": {"model_type": "deepseek_v3", **DECODER, "num_hidden_layers": 2, "q_lora_rank": 24,
                         "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 12, "v_head_dim": 10,
                         "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
                         "moe_intermediate_size": 24, "first_k_dense_replace": 0, "attention_bias": True,
                         "n_group": 1, "topk_group": 1},
    "olmo2": {"model_type": "olmo2", **DECODER, "num_key_value_heads": 2},
    "olmoe": {"model_type": "olmoe", **DECODER, "num_key_value_heads": 2, "num_experts": 4,
              "num_experts_per_tok": 2},
    "gpt_oss": {"model_type": "gpt_oss", **DECODER, "num_key_value_heads": 2, "head_dim": 8,
                "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 8},
    "llama4_text": {"model_type": "llama4_text", **DECODER, "num_hidden_layers": 4, "num_key_value_heads": 2,
                    "head_dim": 16, "intermediate_size_mlp": 80, "num_local_experts": 4,
                    "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "attention_chunk_size": 8},
    "llama4_text-moe-layers": {"model_type": "llama4_text", **DECODER, "num_hidden_layers": 3,
                               "intermediate_size_mlp": 80, "num_local_experts": 2, "moe_layers": [2]},
    "cohere": {"model_type": "cohere", **DECODER, "num_key_value_heads": 2},
    "cohere-qknorm": {"model_type": "cohere", **DECODER, "num_key_value_heads": 2, "use_qk_norm": True},
    "cohere2": {"model_type": "cohere2", **DECODER, "num_hidden_layers": 4, "num_key_value_heads": 2,
                "sliding_window": 8},
    "granite": {"model_type": "granite", **DECODER, "num_key_value_heads": 2, "attention_bias": True},
    "granitemoe": {"model_type": "granitemoe", **DECODER, "num_key_value_heads": 2, "num_local_experts": 4,
                   "num_experts_per_tok": 2},
    "glm4": {"model_type": "glm4", **DECODER, "num_key_value_heads": 2, "head_dim": 16, "pad_token_id": 0},
    "smollm3": {"model_type": "smollm3", **DECODER, "num_hidden_layers": 4, "num_key_value_heads": 2,
                "use_sliding_window": True, "sliding_window": 8, "pad_token_id": 0},
    "ministral": {"model_type": "ministral", **DECODER, "num_key_value_heads": 2, "head_dim": 16},
    "gptj": {"model_type": "gptj", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 101, "rotary_dim": 8},
    "codegen": {"model_type": "codegen", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 101,
                "rotary_dim": 8, "n_inner": 100},
    "gpt_bigcode": {"model_type": "gpt_bigcode", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 101},
    "gpt_bigcode-mha": {"model_type": "gpt_bigcode", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 101,
                        "multi_query": False, "n_inner": 80},
    "bloom": {"model_type": "bloom", "hidden_size": 64, "n_layer": 2, "n_head": 4, "vocab_size": 101},
    "bloom-n_embed": {"model_type": "bloom", "n_embed": 32, "n_layer": 2, "n_head": 4, "vocab_size": 101},
    "mpt": {"model_type": "mpt", "d_model": 64, "n_heads": 4, "n_layers": 2, "vocab_size": 101},
    "stablelm": {"model_type": "stablelm", **DECODER, "num_key_value_heads": 2},
    "lfm2-hybrid": {"model_type": "lfm2", **DECODER, "num_hidden_layers": 4, "num_key_value_heads": 2,
                    "full_attn_idxs": [1, 3], "conv_L_cache": 4},
    "lfm2-published-keys": {"model_type": "lfm2", **DECODER, "num_hidden_layers": 3, "block_ff_dim": 600,
                            "block_ffn_dim_multiplier": 1.5, "block_multiple_of": 64, "tie_embedding": False,
                            "conv_bias": True, "layer_types": ["conv", "full_attention", "conv"]},
    "lfm2-no-adjust": {"model_type": "lfm2", **DECODER, "block_auto_adjust_ff_dim": False,
                       "full_attn_idxs": [0]},
    "stablelm-qkbias-qknorm-parallel": {"model_type": "stablelm", **DECODER, "num_key_value_heads": 2,
                                        "use_qkv_bias": True, "qk_layernorm": True, "use_parallel_residual": True},
}

# Default configs transformers 5.24 cannot build or route as they stand: DeepSeek-V2 leaves
# num_experts_per_tok None; Ministral leaves head_dim None (modeling_ministral.py computes head_dim**-0.5).
DEFAULT_EXTRA: dict[str, dict] = {"deepseek_v2": {"num_experts_per_tok": 6}, "ministral": {"head_dim": 128}}
# ... and as they stand: DeepSeek-V2's default routes to no given number of experts (its total is defined)
UNROUTED = ("deepseek_v2",)


def _configs() -> dict[str, dict]:
    configs = {f"case:{name}": config for name, config in CASES.items()}
    configs.update({f"default:{t}": {"model_type": t, **DEFAULT_EXTRA.get(t, {})} for t in SUPPORTED})
    configs.update({f"preset:{name}": preset_config(name) for name in preset_names()})
    return configs


@pytest.fixture(scope="module")
def references() -> dict[str, dict]:
    """Counts of every case, default config and preset, and the cache bytes of every cache case, from
    the real library: one child process (``hf_torch_references.py``) imports torch, transformers and
    each family's modeling code once for both."""
    request = {f"counts|{key}": {"kind": "counts", "config": config} for key, config in _configs().items()}
    request.update({f"cache|{name}": {"kind": "cache", "config": config, "batch": BATCH, "seq": SEQS}
                    for name, config in CACHE_CASES.items()})
    request.update({f"config|{t}": {"kind": "config", "model_type": t} for t in UNROUTED})
    request.update({f"counts|unrouted:{t}": {"kind": "counts", "config": {"model_type": t}} for t in UNROUTED})
    answer = torch_child(REFERENCE_SCRIPT.name, request, timeout=600)  # skipped on the script's SKIP
    found: dict[str, dict] = {"counts": {}, "cache": {}, "config": {}}
    for key, value in answer["results"].items():
        kind, name = key.split("|", 1)
        found[kind][name] = value
    return found


@pytest.fixture(scope="module")
def real(references: dict[str, dict]) -> dict[str, dict]:
    """Parameter counts from the real library, by case key."""
    return references["counts"]


def check(real: dict[str, dict], key: str, config: dict) -> None:
    ref = real[key]
    assert "error" not in ref, ref.get("error")
    spec = spec_from_config({k: v for k, v in config.items() if k not in IGNORED}, name=key)
    assert spec.param_count() == ref["total"], (key, spec.components())
    assert spec.active_param_count() == (ref["total"] if ref["active"] is None else ref["active"]), key
    if config.get("architectures"):
        assert ref["class"] == config["architectures"][0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_synthetic_config_matches_transformers(real: dict[str, dict], name: str) -> None:
    check(real, f"case:{name}", CASES[name])


def test_every_family_has_synthetic_cases() -> None:
    assert {c["model_type"] for c in CASES.values()} == set(SUPPORTED)


@pytest.mark.parametrize("model_type", SUPPORTED)
def test_empty_config_takes_transformers_defaults(real: dict[str, dict], model_type: str) -> None:
    """Only model_type given: every size is the library's default (full-size models, on meta)."""
    check(real, f"default:{model_type}", {"model_type": model_type, **DEFAULT_EXTRA.get(model_type, {})})


@pytest.mark.parametrize("name", preset_names())
def test_preset_matches_transformers(real: dict[str, dict], name: str) -> None:
    check(real, f"preset:{name}", preset_config(name))


@pytest.mark.parametrize("model_type", UNROUTED)
def test_default_config_without_top_k_has_a_total_and_no_active_count(references, real, model_type, capsys,
                                                                       tmp_path) -> None:
    """DeepseekV2Config().to_dict() has num_experts_per_tok null: the total is the real module's, the active
    count is undefined (and said so), and the planner, which needs the top-k, refuses in one line."""
    config = references["config"][model_type]  # transformers' own default config, to_dict()
    assert config["num_experts_per_tok"] is None
    ref = real[f"unrouted:{model_type}"]
    assert "error" not in ref and ref["active"] is None  # the reference cannot define it either
    spec = spec_from_config({k: v for k, v in config.items() if k not in IGNORED}, name=model_type)
    assert spec.param_count() == ref["total"] and spec.is_moe and not spec.active_defined
    with pytest.raises(ModelSpecError, match="num_experts_per_tok"):
        spec.active_param_count()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    code, out, err = run(capsys, "params", str(path), "--json")
    data = json.loads(out)
    assert code == 0 and err == "" and data["total"] == ref["total"] and data["active"] is None
    assert "num_experts_per_tok" in data["active_note"] and sum(data["components"].values()) == ref["total"]
    code, out, err = run(capsys, "params", str(path))
    assert code == 0 and "active per token undefined" in out and f"{ref['total']:,} parameters" in out
    for argv in (["memory"], ["memory", "--mode", "infer"], ["time", "--gpu", "h100-80gb", "--mfu", "0.4"]):
        code, out, err = run(capsys, argv[0], str(path), *argv[1:])
        assert code == 2 and out == "" and err.count("\n") == 1 and "num_experts_per_tok" in err, (argv, err)

# --- KV cache per layer kind against the cache object transformers returns (issue 12) -----------
# For every supported decoder family a small config is built on the CPU in bf16 and run on a B × S
# prefill (``hf_cache_reference.measure``, in the same child process as the counts); the bytes of
# every tensor the returned ``DynamicCache`` holds must equal the plan's ``cache_bytes`` at the same
# B, S and a bf16 cache. Each windowed family is run at an S inside the window and one beyond it, so
# the sliding layers' W − 1 bound is checked; DeepSeek's latent cache (r_kv + d_rope per token) likewise.
BATCH = 2
SEQS = [5, 13]  # inside and beyond every window below (W = 6 or 8)

D = {"vocab_size": 101, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
     "intermediate_size": 96, "num_key_value_heads": 2, "pad_token_id": 0}
MOE = {"num_experts_per_tok": 2}
MLA = {"num_key_value_heads": 4, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 12, "v_head_dim": 10, "n_routed_experts": 4,
       "num_experts_per_tok": 2, "n_shared_experts": 1, "moe_intermediate_size": 24, "first_k_dense_replace": 1,
       "n_group": 1, "topk_group": 1}
GPT = {"vocab_size": 101, "n_embd": 64, "n_layer": 2, "n_head": 4}

CACHE_CASES: dict[str, dict] = {
    "gpt2": {"model_type": "gpt2", **GPT},
    "llama": {"model_type": "llama", **D},
    "mistral-sliding": {"model_type": "mistral", **D, "sliding_window": 6},
    "mistral-full": {"model_type": "mistral", **D, "sliding_window": None},
    "mixtral-sliding": {"model_type": "mixtral", **D, **MOE, "num_local_experts": 3, "sliding_window": 6},
    "qwen2-window-from-layer-2": {"model_type": "qwen2", **D, "use_sliding_window": True, "sliding_window": 6,
                                  "max_window_layers": 2},
    "qwen2_moe": {"model_type": "qwen2_moe", **D, **MOE, "num_experts": 4, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 48},
    "qwen2_moe-sliding": {"model_type": "qwen2_moe", **D, **MOE, "num_experts": 4, "moe_intermediate_size": 32,
                          "shared_expert_intermediate_size": 48, "use_sliding_window": True, "sliding_window": 6,
                          "max_window_layers": 3},
    "gemma": {"model_type": "gemma", **D, "head_dim": 8},
    "phi": {"model_type": "phi", **D},
    "opt": {"model_type": "opt", "vocab_size": 101, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "ffn_dim": 96, "pad_token_id": 1},
    "falcon-mq": {"model_type": "falcon", "vocab_size": 101, "hidden_size": 64, "num_hidden_layers": 2,
                  "num_attention_heads": 4},
    "falcon-new": {"model_type": "falcon", "vocab_size": 101, "hidden_size": 64, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "new_decoder_architecture": True, "num_kv_heads": 2},
    "gpt_neox": {"model_type": "gpt_neox", **D},
    "qwen3": {"model_type": "qwen3", **D, "head_dim": 24},
    "qwen3_moe-sliding": {"model_type": "qwen3_moe", **D, **MOE, "num_experts": 4, "moe_intermediate_size": 32,
                          "use_sliding_window": True, "sliding_window": 6, "mlp_only_layers": [0]},
    "gemma2": {"model_type": "gemma2", **D, "head_dim": 32, "sliding_window": 6},
    "gemma3_text": {"model_type": "gemma3_text", **D, "num_hidden_layers": 7, "head_dim": 32, "sliding_window": 6},
    "phi3-sliding": {"model_type": "phi3", **D, "sliding_window": 6},
    "phimoe": {"model_type": "phimoe", **D, **MOE, "num_local_experts": 4},
    "starcoder2-sliding": {"model_type": "starcoder2", **D, "sliding_window": 8},
    "deepseek_v2-lite": {"model_type": "deepseek_v2", **D, **MLA, "q_lora_rank": None},
    "deepseek_v3": {"model_type": "deepseek_v3", **D, **MLA, "q_lora_rank": 24},
    "olmo2": {"model_type": "olmo2", **D},
    "olmoe": {"model_type": "olmoe", **D, **MOE, "num_experts": 4},
    "gpt_oss": {"model_type": "gpt_oss", **D, "head_dim": 8, "num_local_experts": 4, **MOE, "sliding_window": 6},
    "llama4_text-chunked": {"model_type": "llama4_text", **D, "head_dim": 16, "intermediate_size_mlp": 80,
                            "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
                            "attention_chunk_size": 8},
    "cohere": {"model_type": "cohere", **D},
    "cohere2": {"model_type": "cohere2", **D, "sliding_window": 6},
    "granite": {"model_type": "granite", **D},
    "granitemoe": {"model_type": "granitemoe", **D, **MOE, "num_local_experts": 4},
    "glm4": {"model_type": "glm4", **D, "head_dim": 16},
    "smollm3-sliding": {"model_type": "smollm3", **D, "use_sliding_window": True, "sliding_window": 6},
    "ministral": {"model_type": "ministral", **D, "head_dim": 16, "sliding_window": 6},
    "gptj": {"model_type": "gptj", **GPT, "rotary_dim": 8},
    "codegen": {"model_type": "codegen", **GPT, "rotary_dim": 8},
    "gpt_bigcode": {"model_type": "gpt_bigcode", **GPT},
    "bloom": {"model_type": "bloom", "vocab_size": 101, "hidden_size": 64, "n_layer": 2, "n_head": 4},
    "mpt": {"model_type": "mpt", "vocab_size": 101, "d_model": 64, "n_heads": 4, "n_layers": 2},
    "stablelm": {"model_type": "stablelm", **D},
    # a hybrid: attention layers grow with S, the short-convolution layers keep a fixed state
    "lfm2-hybrid": {"model_type": "lfm2", **D, "full_attn_idxs": [1, 3], "conv_L_cache": 3},
}


@pytest.fixture(scope="module")
def real_cache(references: dict[str, dict]) -> dict[str, dict]:
    """Cache bytes of every cache case at every S, from the real library (``hf_cache_reference.measure``)."""
    return references["cache"]


def ours(config: dict, seq: int) -> int:
    spec = spec_from_config(config, name=config["model_type"])
    return planning.plan(spec, mode="infer", batch=BATCH, seq=seq, kv_dtype="bf16").cache_bytes


@pytest.mark.parametrize("name", sorted(CACHE_CASES))
def test_cache_bytes_equal_the_real_cache(real_cache: dict[str, dict], name: str) -> None:
    ref = real_cache[name]
    assert "error" not in ref, ref.get("error")
    for seq in SEQS:
        assert ours(CACHE_CASES[name], seq) == ref[str(seq)]["bytes"], (name, seq, ref[str(seq)])


def test_every_decoder_family_has_a_cache_case() -> None:
    assert {c["model_type"] for c in CACHE_CASES.values()} == set(SUPPORTED) - {"bert"}


def test_the_hybrid_has_a_fixed_state(real_cache: dict[str, dict]) -> None:
    """LFM2's convolution layers: the same bytes at every S, H·k_conv per sequence and layer (bf16)."""
    grow = real_cache["lfm2-hybrid"][str(SEQS[-1])]["bytes"] - real_cache["lfm2-hybrid"][str(SEQS[0])]["bytes"]
    assert grow == 2 * 2 * BATCH * 2 * 16 * (SEQS[-1] - SEQS[0]) * 2  # only the 2 attention layers grow
    assert "LinearAttentionLayer" in real_cache["lfm2-hybrid"][str(SEQS[0])]["layers"]


def test_windowed_cases_really_slide(real_cache: dict[str, dict]) -> None:
    """The cases meant to pass the window do get sliding cache layers from transformers."""
    for name in ("mistral-sliding", "gemma2", "gpt_oss", "llama4_text-chunked", "cohere2", "smollm3-sliding"):
        assert "DynamicSlidingWindowLayer" in real_cache[name][str(SEQS[-1])]["layers"], name


def test_the_test_process_never_imports_torch() -> None:
    assert "torch" not in sys.modules and "transformers" not in sys.modules
