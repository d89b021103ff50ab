"""What each supported Hugging Face ``model_type`` means for the parameter count: a table.

For every model type: which ``config.json`` keys hold each size (aliases in priority order) and
the default ``transformers`` uses when the key is missing; which boolean flags exist and which
spec fields they set; the structure every model of the type has; and which head each model
class adds. The few rules a table cannot say (Falcon's attention variants, OPT's position offset
and projections, Qwen2-MoE's uniform-layers condition) are small functions. Read from the
transformers 5.24.0 sources; see ``symbolic/presets/REFERENCE.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Size:
    """A size read from one of ``keys``; ``default`` None means "by the standard relation"."""

    keys: tuple[str, ...]
    default: int | None
    minimum: int = 1


@dataclass(frozen=True)
class Flag:
    """A boolean config key, its default, and the spec fields it sets."""

    default: bool
    sets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Head:
    """What a model class puts after the layers. ``classifier``: outputs, or "labels"."""

    lm_head: bool = False
    mlm: bool = False
    pooler: bool = False
    classifier: int | str = 0
    classifier_bias: bool = False


Rule = Callable[[Mapping[str, Any], dict[str, Any]], None]


@dataclass(frozen=True)
class Family:
    """One model_type: the table the config reader follows."""

    model_type: str
    prefix: str
    sizes: Mapping[str, Size]
    flags: Mapping[str, Flag]
    fixed: Mapping[str, object]
    heads: Mapping[str, Head]
    default_class: str
    rule: Rule | None = None
    extra: tuple[str, ...] = field(default=())  # other config keys the rule reads


def _s(*keys: str, default: int | None, minimum: int = 1) -> Size:
    return Size(keys, default, minimum)


CAUSAL = Head(lm_head=True)
BASE = Head()
SEQUENCE = Head(classifier="labels")
DECODER_HEADS = {"ForCausalLM": CAUSAL, "Model": BASE, "ForSequenceClassification": SEQUENCE}

BERT_HEADS = {
    "Model": Head(pooler=True),
    "ForMaskedLM": Head(lm_head=True, mlm=True),
    "LMHeadModel": Head(lm_head=True, mlm=True),
    "ForPreTraining": Head(lm_head=True, mlm=True, pooler=True, classifier=2, classifier_bias=True),
    "ForNextSentencePrediction": Head(pooler=True, classifier=2, classifier_bias=True),
    "ForSequenceClassification": Head(pooler=True, classifier="labels", classifier_bias=True),
    "ForMultipleChoice": Head(pooler=True, classifier=1, classifier_bias=True),
    "ForTokenClassification": Head(classifier="labels", classifier_bias=True),
    "ForQuestionAnswering": Head(classifier="labels", classifier_bias=True),
}

TIE_TRUE = {"tie_word_embeddings": Flag(True, ("tied",))}
TIE_FALSE = {"tie_word_embeddings": Flag(False, ("tied",))}
ATTN_BIAS_OFF = {"attention_bias": Flag(False, ("qkv_bias", "attn_out_bias"))}
LLAMA_LIKE = {"gated_mlp": True, "norm": "rmsnorm", "norms_per_layer": 2, "final_norm": True}


def _decoder_sizes(vocab: int, hidden: int, ffn: int, layers: int, heads: int, kv: int | None) -> dict[str, Size]:
    return {
        "vocab": _s("vocab_size", default=vocab),
        "hidden": _s("hidden_size", default=hidden),
        "ffn": _s("intermediate_size", default=ffn),
        "layers": _s("num_hidden_layers", default=layers),
        "heads": _s("num_attention_heads", default=heads),
        "kv_heads": _s("num_key_value_heads", default=kv),
        "head_dim": _s("head_dim", default=None),
    }


def _falcon(cfg: Mapping[str, Any], out: dict[str, Any]) -> None:
    """Falcon: multi-query, grouped (new decoder architecture) or multi-head; 1 or 2 norms."""
    new = cfg["new_decoder_architecture"]
    if new:
        pass  # num_kv_heads as read (absent: as many as the attention heads)
    elif cfg["multi_query"]:
        out["kv_heads"] = 1
    else:
        out["kv_heads"] = None  # 3·H fused q, k, v whatever num_kv_heads says
    n_ln = cfg.get("num_ln_in_parallel_attn")
    if n_ln is not None and (isinstance(n_ln, bool) or not isinstance(n_ln, int)):
        raise ValueError(f"num_ln_in_parallel_attn must be an integer or null, got {n_ln!r}")
    if n_ln is None and new:
        n_ln = 2
    parallel = cfg["parallel_attn"]
    out["parallel_block"] = parallel
    out["norms_per_layer"] = 2 if (not parallel or n_ln == 2) else 1


def _opt(cfg: Mapping[str, Any], out: dict[str, Any]) -> None:
    """OPT: positions table has 2 extra rows; project_in/out when the embedding is narrower."""
    out["positions"] = out["positions"] + 2
    if out.get("embed_dim") == out["hidden"]:
        out["embed_dim"] = None
    out["final_norm"] = cfg["do_layer_norm_before"] and not cfg["_remove_final_layer_norm"]
    affine = cfg["layer_norm_elementwise_affine"]
    out["norm_scale"] = out["norm_bias"] = affine


def _qwen2_moe(cfg: Mapping[str, Any], out: dict[str, Any]) -> None:
    """Qwen2-MoE: only configs whose every layer is a mixture of experts."""
    step = 1 if cfg.get("decoder_sparse_step") is None else cfg["decoder_sparse_step"]
    dense = cfg.get("mlp_only_layers") or []
    if step != 1 or dense:
        raise ValueError("qwen2_moe with dense layers (decoder_sparse_step ≠ 1 or mlp_only_layers) is not supported")


FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    Family(
        "gpt2", "GPT2",
        sizes={
            "vocab": _s("vocab_size", default=50257),
            "hidden": _s("n_embd", "hidden_size", default=768),
            "layers": _s("n_layer", "num_hidden_layers", default=12),
            "heads": _s("n_head", "num_attention_heads", default=12),
            "ffn": _s("n_inner", default=None),
            "positions": _s("n_positions", "max_position_embeddings", default=1024),
        },
        flags={**TIE_TRUE, "add_cross_attention": Flag(False, ("cross_attention",))},
        fixed={"qkv_bias": True, "attn_out_bias": True, "mlp_bias": True, "norm": "layernorm"},
        heads={"LMHeadModel": CAUSAL, "Model": BASE, "ForSequenceClassification": SEQUENCE},
        default_class="GPT2LMHeadModel",
    ),
    Family(
        "bert", "Bert",
        sizes={
            "vocab": _s("vocab_size", default=30522),
            "hidden": _s("hidden_size", default=768),
            "layers": _s("num_hidden_layers", default=12),
            "heads": _s("num_attention_heads", default=12),
            "ffn": _s("intermediate_size", default=3072),
            "positions": _s("max_position_embeddings", default=512),
            "token_types": _s("type_vocab_size", default=2, minimum=0),
        },
        flags={**TIE_TRUE, "add_cross_attention": Flag(False, ("cross_attention",))},
        fixed={"qkv_bias": True, "attn_out_bias": True, "mlp_bias": True, "norm": "layernorm",
               "final_norm": False, "embedding_norm": True},
        heads=BERT_HEADS,
        default_class="BertModel",
    ),
    Family(
        "llama", "Llama",
        sizes=_decoder_sizes(32000, 4096, 11008, 32, 32, None),
        flags={**TIE_FALSE, **ATTN_BIAS_OFF, "mlp_bias": Flag(False, ("mlp_bias",))},
        fixed=LLAMA_LIKE, heads=DECODER_HEADS, default_class="LlamaForCausalLM",
    ),
    Family(
        "mistral", "Mistral",
        sizes=_decoder_sizes(32000, 4096, 14336, 32, 32, 8),
        flags=TIE_FALSE, fixed=LLAMA_LIKE, heads=DECODER_HEADS, default_class="MistralForCausalLM",
    ),
    Family(
        "mixtral", "Mixtral",
        sizes={**_decoder_sizes(32000, 4096, 14336, 32, 32, 8),
               "experts": _s("num_local_experts", "num_experts", default=8),
               "top_k": _s("num_experts_per_tok", default=2)},
        flags=TIE_FALSE, fixed=LLAMA_LIKE, heads=DECODER_HEADS, default_class="MixtralForCausalLM",
    ),
    Family(
        "qwen2", "Qwen2",
        sizes=_decoder_sizes(151936, 4096, 22016, 32, 32, 32),
        flags=TIE_FALSE, fixed={**LLAMA_LIKE, "qkv_bias": True},
        heads=DECODER_HEADS, default_class="Qwen2ForCausalLM",
    ),
    Family(
        "qwen2_moe", "Qwen2Moe",
        sizes={**_decoder_sizes(151936, 2048, 5632, 24, 16, 16),
               "experts": _s("num_experts", default=60),
               "top_k": _s("num_experts_per_tok", default=4),
               "expert_ffn": _s("moe_intermediate_size", default=1408),
               "shared_ffn": _s("shared_expert_intermediate_size", default=5632)},
        flags={**TIE_FALSE, "qkv_bias": Flag(True, ("qkv_bias",))},
        fixed={**LLAMA_LIKE, "shared_experts": 1, "shared_expert_gate": True},
        heads=DECODER_HEADS, default_class="Qwen2MoeForCausalLM",
        rule=_qwen2_moe, extra=("decoder_sparse_step", "mlp_only_layers"),
    ),
    Family(
        "gemma", "Gemma",
        sizes={**_decoder_sizes(256000, 3072, 24576, 28, 16, 16), "head_dim": _s("head_dim", default=256)},
        flags={**TIE_TRUE, **ATTN_BIAS_OFF}, fixed=LLAMA_LIKE, heads=DECODER_HEADS,
        default_class="GemmaForCausalLM",
    ),
    Family(
        "phi", "Phi",
        sizes=_decoder_sizes(51200, 2048, 8192, 24, 32, None),
        flags={**TIE_FALSE, "qk_layernorm": Flag(False, ("qk_norm",))},
        fixed={"qkv_bias": True, "attn_out_bias": True, "mlp_bias": True, "lm_head_bias": True, "norm": "layernorm",
               "norms_per_layer": 1, "parallel_block": True},
        heads=DECODER_HEADS, default_class="PhiForCausalLM",
    ),
    Family(
        "opt", "OPT",
        sizes={
            "vocab": _s("vocab_size", default=50272),
            "hidden": _s("hidden_size", default=768),
            "ffn": _s("ffn_dim", default=3072),
            "layers": _s("num_hidden_layers", default=12),
            "heads": _s("num_attention_heads", default=12),
            "positions": _s("max_position_embeddings", default=2048),
            "embed_dim": _s("word_embed_proj_dim", default=None),
        },
        flags={**TIE_TRUE, "enable_bias": Flag(True, ("qkv_bias", "attn_out_bias", "mlp_bias")),
               "do_layer_norm_before": Flag(True), "_remove_final_layer_norm": Flag(False),
               "layer_norm_elementwise_affine": Flag(True)},
        fixed={"norm": "layernorm"}, heads=DECODER_HEADS, default_class="OPTForCausalLM", rule=_opt,
    ),
    Family(
        "falcon", "Falcon",
        sizes={
            "vocab": _s("vocab_size", default=65024),
            "hidden": _s("n_embed", "hidden_size", default=4544),
            "layers": _s("num_hidden_layers", default=32),
            "heads": _s("num_attention_heads", default=71),
            "ffn": _s("ffn_hidden_size", default=None),
            "kv_heads": _s("num_kv_heads", default=None),
        },
        flags={**TIE_TRUE, "bias": Flag(False, ("qkv_bias", "attn_out_bias", "mlp_bias")),
               "new_decoder_architecture": Flag(False), "multi_query": Flag(True), "parallel_attn": Flag(True)},
        fixed={"norm": "layernorm"}, heads=DECODER_HEADS, default_class="FalconForCausalLM", rule=_falcon,
        extra=("num_ln_in_parallel_attn",),
    ),
    Family(
        "gpt_neox", "GPTNeoX",
        sizes={
            "vocab": _s("vocab_size", default=50432),
            "hidden": _s("hidden_size", default=6144),
            "layers": _s("num_hidden_layers", default=44),
            "heads": _s("num_attention_heads", default=64),
            "ffn": _s("intermediate_size", default=24576),
        },
        flags={**TIE_FALSE, "attention_bias": Flag(True, ("qkv_bias", "attn_out_bias")),
               "use_parallel_residual": Flag(True, ("parallel_block",))},
        fixed={"mlp_bias": True, "norm": "layernorm"}, heads=DECODER_HEADS, default_class="GPTNeoXForCausalLM",
    ),
)}

SUPPORTED = tuple(FAMILIES)
