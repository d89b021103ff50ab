"""KV cache per layer kind against the cache object transformers itself returns (issue 12).

For every supported decoder family a small config is built on the meta device in bf16 and run on
a B × S prefill (``hf_cache_reference.py``, one child process); the bytes of every tensor the
returned ``DynamicCache`` holds must equal the plan's ``cache_bytes`` at the same B, S and a bf16
cache. Each windowed family is run at an S inside the window and one beyond it, so the sliding
layers' W − 1 bound is checked; DeepSeek's latent cache (r_kv + d_rope per token) likewise.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from symbolic import planning
from symbolic.architectures import SUPPORTED, spec_from_config

pytestmark = pytest.mark.torch

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
    pytest.skip("torch and transformers are not installed", allow_module_level=True)

SCRIPT = Path(__file__).with_name("hf_cache_reference.py")
SKIP = 77
BATCH = 2
SEQS = [5, 13]  # inside and beyond every window below (W = 6 or 8)

D = {"vocab_size": 101, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
     "intermediate_size": 96, "num_key_value_heads": 2, "pad_token_id": 0}
MOE = {"num_experts_per_tok": 2}
MLA = {"num_key_value_heads": 4, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 12, "v_head_dim": 10, "n_routed_experts": 4,
       "num_experts_per_tok": 2, "n_shared_experts": 1, "moe_intermediate_size": 24, "first_k_dense_replace": 1,
       "n_group": 1, "topk_group": 1}
GPT = {"vocab_size": 101, "n_embd": 64, "n_layer": 2, "n_head": 4}

CASES: dict[str, dict] = {
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
def real() -> dict[str, dict]:
    """Cache bytes of every case at every S, from the real library (one child process)."""
    cases = {name: {"config": config, "batch": BATCH, "seq": SEQS} for name, config in CASES.items()}
    proc = subprocess.run([sys.executable, str(SCRIPT)], input=json.dumps(cases), capture_output=True, text=True,
                          timeout=600)
    if proc.returncode == SKIP:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)["cache"]


def ours(config: dict, seq: int) -> int:
    spec = spec_from_config(config, name=config["model_type"])
    return planning.plan(spec, mode="infer", batch=BATCH, seq=seq, kv_dtype="bf16").cache_bytes


@pytest.mark.parametrize("name", sorted(CASES))
def test_cache_bytes_equal_the_real_cache(real: dict[str, dict], name: str) -> None:
    ref = real[name]
    assert "error" not in ref, ref.get("error")
    for seq in SEQS:
        assert ours(CASES[name], seq) == ref[str(seq)]["bytes"], (name, seq, ref[str(seq)])


def test_every_decoder_family_has_a_cache_case() -> None:
    assert {c["model_type"] for c in CASES.values()} == set(SUPPORTED) - {"bert"}


def test_the_hybrid_has_a_fixed_state(real: dict[str, dict]) -> None:
    """LFM2's convolution layers: the same bytes at every S, H·k_conv per sequence and layer (bf16)."""
    grow = real["lfm2-hybrid"][str(SEQS[-1])]["bytes"] - real["lfm2-hybrid"][str(SEQS[0])]["bytes"]
    assert grow == 2 * 2 * BATCH * 2 * 16 * (SEQS[-1] - SEQS[0]) * 2  # only the 2 attention layers grow
    assert "LinearAttentionLayer" in real["lfm2-hybrid"][str(SEQS[0])]["layers"]


def test_windowed_cases_really_slide(real: dict[str, dict]) -> None:
    """The cases meant to pass the window do get sliding cache layers from transformers."""
    for name in ("mistral-sliding", "gemma2", "gpt_oss", "llama4_text-chunked", "cohere2", "smollm3-sliding"):
        assert "DynamicSlidingWindowLayer" in real[name][str(SEQS[-1])]["layers"], name
