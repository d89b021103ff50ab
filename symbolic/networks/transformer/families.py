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
# Layer patterns read the raw config (through ``Read``, which checks each value) and the layer count.
Read = Callable[[str, Any], Any]
LayerTypes = Callable[[Read, int], list[str]]
DenseLayers = Callable[[Read, int], list[int]]  # the dense layers of a mixture of experts, 0-based


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
    layer_types: LayerTypes | None = None  # attention kind of each layer when the config has no layer_types
    window: tuple[str, int | None] = ("sliding_window", None)  # key and default of the sliding window
    dense_layers: DenseLayers | None = None  # which layers of a mixture of experts have a dense MLP
    conv: tuple[str, int] | None = None  # hybrids: the kernel-length key and default of "conv" layers (LFM2)


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
    if new:  # num_kv_heads as read (absent: as many as the attention heads)
        out["cache_all_heads"] = True  # modeling_falcon.py caches k, v reshaped to num_heads
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


# --- layer patterns (each from the family's configuration_<type>.py in transformers 5.24.0) ------
SLIDING, FULL, CHUNKED = "sliding_attention", "full_attention", "chunked_attention"


def _int(read: Read, key: str, default: int | None, minimum: int = 0) -> int | None:
    value = read(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{key} must be an integer ≥ {minimum}, got {value!r}")
    return value


def _bool(read: Read, key: str, default: bool) -> bool:
    value = read(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false, got {value!r}")
    return value


def _ints(read: Read, key: str) -> list[int]:
    value = read(key, None)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{key} must be a list of integers")
    return value


def window_everywhere(gate: str | None = None, default: int | None = None) -> LayerTypes:
    """Every layer sliding when the config has a sliding window (Mistral, Phi-3, Starcoder2 ...).

    transformers' cache (cache_utils.get_layer_types_and_kwargs) makes a layer sliding when its
    config's ``sliding_window`` is not None; ``gate`` names a flag that nulls the window when false
    (Qwen's ``use_sliding_window``).
    """
    def types(read: Read, layers: int) -> list[str]:
        on = read("sliding_window", default) is not None and (gate is None or _bool(read, gate, False))
        return [SLIDING if on else FULL] * layers
    return types


def every(n_default: int, key: str | None = None) -> LayerTypes:
    """Sliding except every n-th layer (Gemma-2: 2, Gemma-3: 6, Cohere-2: 4, gpt-oss: 2)."""
    def types(read: Read, layers: int) -> list[str]:
        n = _int(read, key, n_default, 1) if key else n_default
        return [SLIDING if (i + 1) % n else FULL for i in range(layers)]
    return types


def _qwen(read: Read, layers: int) -> list[str]:
    """Qwen2/Qwen3: sliding from layer max_window_layers on, when use_sliding_window."""
    on = _bool(read, "use_sliding_window", False) and read("sliding_window", 4096) is not None
    start = _int(read, "max_window_layers", 28)
    return [SLIDING if on and i >= start else FULL for i in range(layers)]


def _qwen2_moe_types(read: Read, layers: int) -> list[str]:
    """Qwen2-MoE: every other layer below max_window_layers, when use_sliding_window."""
    on = _bool(read, "use_sliding_window", False)
    start = _int(read, "max_window_layers", 28)
    return [SLIDING if on and (i + 1) % 2 and i < start else FULL for i in range(layers)]


def _no_rope(read: Read, layers: int) -> list[int]:
    flags = _ints(read, "no_rope_layers")
    if flags:
        return flags
    interval = _int(read, "no_rope_layer_interval", 4, 1)
    return [int((i + 1) % interval != 0) for i in range(layers)]


def _llama4_types(read: Read, layers: int) -> list[str]:
    """Llama-4: chunked attention on the rope layers (no_rope_layers[i] = 1), when attention_chunk_size."""
    chunk = read("attention_chunk_size", 8192)
    return [CHUNKED if rope and chunk is not None else FULL for rope in _no_rope(read, layers)][:layers]


def _smollm3_types(read: Read, layers: int) -> list[str]:
    """SmolLM3: sliding on the no-rope layers, when use_sliding_window and a window."""
    on = _bool(read, "use_sliding_window", False) and read("sliding_window", None) is not None
    return [SLIDING if on and not rope else FULL for rope in _no_rope(read, layers)][:layers]


def _sparse_step(read: Read, layers: int) -> list[int]:
    """Qwen-MoE: a layer is dense if listed in mlp_only_layers or (i + 1) is not a multiple of decoder_sparse_step."""
    step = _int(read, "decoder_sparse_step", 1, 1)
    dense = set(_ints(read, "mlp_only_layers"))
    return [i for i in range(layers) if i in dense or (i + 1) % step]


def first_k_dense(default: int) -> DenseLayers:
    """DeepSeek-V2/V3: the first first_k_dense_replace layers are dense (default 0 for V2, 3 for V3).

    modeling_deepseek_v3.py decides by ``layer_idx >= config.first_k_dense_replace`` alone;
    transformers 5.24 does not read ``moe_layer_freq`` (1 in every published config).
    """
    def dense(read: Read, layers: int) -> list[int]:
        return list(range(min(_int(read, "first_k_dense_replace", default) or 0, layers)))
    return dense


def _llama4_dense(read: Read, layers: int) -> list[int]:
    """Llama-4: MoE on moe_layers, else every interleave_moe_layer_step-th layer (configuration_llama4.py)."""
    moe = _ints(read, "moe_layers")
    if read("moe_layers", None) is None:
        step = _int(read, "interleave_moe_layer_step", 1, 1)
        moe = list(range(step - 1, layers, step))
    moe_at = {i for i in moe if 0 <= i < layers}
    return [i for i in range(layers) if i not in moe_at]


def _deepseek(cfg: Mapping[str, Any], out: dict[str, Any]) -> None:
    """DeepSeek: shared experts are n_shared_experts MLPs of the routed width; MLA replaces q/k/v."""
    if out.get("shared_experts"):
        out["shared_ffn"] = out["expert_ffn"]
    if "q_lora_rank" in cfg["_null"]:  # an explicit null: a full q_proj (DeepSeek-V2-Lite)
        out["q_lora_rank"] = None
    out["kv_heads"] = None
    out["head_dim"] = None
    if out.get("top_k") is None:  # transformers' default: the total is defined, the active count is not
        out["top_k"] = 0
    if cfg.get("mlp_bias"):
        raise ValueError("mlp_bias = true is not covered by the deepseek table entry")


def _bigcode(cfg: Mapping[str, Any], out: dict[str, Any]) -> None:
    """GPT-BigCode: multi-query attention (one key/value head) unless multi_query is false."""
    out["kv_heads"] = 1 if cfg["multi_query"] else None


def _lfm2_types(read: Read, layers: int) -> list[str]:
    """LFM2: attention on full_attn_idxs (default: every layer), short convolution elsewhere."""
    full = set(_ints(read, "full_attn_idxs")) if read("full_attn_idxs", None) is not None else set(range(layers))
    return [FULL if i in full else "conv" for i in range(layers)]


def _lfm2(cfg: Mapping[str, Any], out: dict[str, Any]) -> None:
    """LFM2: tie_embedding and block_ff_dim win over their usual names; the MLP width is adjusted.

    configuration_lfm2.py pops ``tie_embedding`` and ``block_ff_dim``; Lfm2MLP takes 2/3 of the
    width, times block_ffn_dim_multiplier, rounded up to block_multiple_of, when
    block_auto_adjust_ff_dim (the multiplier and rounding only with a multiplier).
    """
    if cfg.get("tie_embedding") is not None:
        if not isinstance(cfg["tie_embedding"], bool):
            raise ValueError(f"tie_embedding must be true or false, got {cfg['tie_embedding']!r}")
        out["tied"] = cfg["tie_embedding"]
    width = out["ffn"] if cfg.get("block_ff_dim") is None else cfg["block_ff_dim"]
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"block_ff_dim must be a positive integer, got {width!r}")
    auto = True if cfg.get("block_auto_adjust_ff_dim") is None else cfg["block_auto_adjust_ff_dim"]
    if not isinstance(auto, bool):
        raise ValueError(f"block_auto_adjust_ff_dim must be true or false, got {auto!r}")
    multiplier = 1.0 if "block_ffn_dim_multiplier" not in cfg["_present"] | cfg["_null"] else \
        cfg.get("block_ffn_dim_multiplier")
    multiple = 256 if cfg.get("block_multiple_of") is None else cfg["block_multiple_of"]
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise ValueError(f"block_multiple_of must be a positive integer, got {multiple!r}")
    if auto:
        width = int(2 * width / 3)
        if multiplier is not None:
            if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) \
                    or not 0 < multiplier < float("inf"):
                raise ValueError(f"block_ffn_dim_multiplier must be a positive finite number, got {multiplier!r}")
            width = multiple * ((int(multiplier * width) + multiple - 1) // multiple)
    if width < 1:
        raise ValueError("the adjusted feed-forward width is 0")
    out["ffn"] = width
    if cfg.get("conv_bias") is not None:
        if not isinstance(cfg["conv_bias"], bool):
            raise ValueError(f"conv_bias must be true or false, got {cfg['conv_bias']!r}")
        out["conv_bias"] = cfg["conv_bias"]


def _stablelm(cfg: Mapping[str, Any], out: dict[str, Any]) -> None:
    """StableLM: the parallel residual drops post_attention_layernorm (one norm per layer)."""
    out["norms_per_layer"] = 1 if out.get("parallel_block") else 2


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
        layer_types=window_everywhere(default=4096), window=("sliding_window", 4096),
    ),
    Family(
        "mixtral", "Mixtral",
        sizes={**_decoder_sizes(32000, 4096, 14336, 32, 32, 8),
               "experts": _s("num_local_experts", "num_experts", default=8),
               "top_k": _s("num_experts_per_tok", default=2)},
        flags=TIE_FALSE, fixed=LLAMA_LIKE, heads=DECODER_HEADS, default_class="MixtralForCausalLM",
        layer_types=window_everywhere(),
    ),
    Family(
        "qwen2", "Qwen2",
        sizes=_decoder_sizes(151936, 4096, 22016, 32, 32, 32),
        flags=TIE_FALSE, fixed={**LLAMA_LIKE, "qkv_bias": True},
        heads=DECODER_HEADS, default_class="Qwen2ForCausalLM", layer_types=_qwen, window=("sliding_window", 4096),
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
        layer_types=_qwen2_moe_types, dense_layers=_sparse_step,
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
    # --- issue 12: current families --------------------------------------------------------------
    Family(
        "qwen3", "Qwen3",
        sizes={**_decoder_sizes(151936, 4096, 22016, 32, 32, 32), "head_dim": _s("head_dim", default=128)},
        flags={**TIE_FALSE, **ATTN_BIAS_OFF}, fixed={**LLAMA_LIKE, "qk_norm": True},
        heads=DECODER_HEADS, default_class="Qwen3ForCausalLM", layer_types=_qwen, window=("sliding_window", 4096),
    ),
    Family(
        "qwen3_moe", "Qwen3Moe",
        sizes={**_decoder_sizes(151936, 2048, 6144, 24, 32, 4),
               "experts": _s("num_experts", "num_local_experts", default=128),
               "top_k": _s("num_experts_per_tok", default=8),
               "expert_ffn": _s("moe_intermediate_size", default=768)},
        flags={**TIE_FALSE, **ATTN_BIAS_OFF}, fixed={**LLAMA_LIKE, "qk_norm": True},
        heads=DECODER_HEADS, default_class="Qwen3MoeForCausalLM",
        layer_types=window_everywhere("use_sliding_window", 4096), window=("sliding_window", 4096),
        dense_layers=_sparse_step,
    ),
    Family(
        "gemma2", "Gemma2",
        sizes={**_decoder_sizes(256000, 2304, 9216, 26, 8, 4), "head_dim": _s("head_dim", default=256)},
        flags={**TIE_TRUE, **ATTN_BIAS_OFF}, fixed={**LLAMA_LIKE, "norms_per_layer": 4},
        heads=DECODER_HEADS, default_class="Gemma2ForCausalLM", layer_types=every(2),
        window=("sliding_window", 4096),
    ),
    Family(
        "gemma3_text", "Gemma3",
        sizes={**_decoder_sizes(262208, 2304, 9216, 26, 8, 4), "head_dim": _s("head_dim", default=256)},
        flags={**TIE_TRUE, **ATTN_BIAS_OFF}, fixed={**LLAMA_LIKE, "norms_per_layer": 4, "qk_norm": True},
        heads=DECODER_HEADS, default_class="Gemma3ForCausalLM", layer_types=every(6, "sliding_window_pattern"),
        window=("sliding_window", 4096),
    ),
    Family(
        "phi3", "Phi3",
        sizes=_decoder_sizes(32064, 3072, 8192, 32, 32, None),
        flags=TIE_FALSE, fixed=LLAMA_LIKE, heads=DECODER_HEADS, default_class="Phi3ForCausalLM",
        layer_types=window_everywhere(),
    ),
    Family(
        "phimoe", "Phimoe",
        sizes={**_decoder_sizes(32064, 4096, 6400, 32, 32, 8),
               "experts": _s("num_local_experts", "num_experts", default=16),
               "top_k": _s("num_experts_per_tok", default=2)},
        flags={**TIE_FALSE, **ATTN_BIAS_OFF, "lm_head_bias": Flag(False, ("lm_head_bias",))},
        fixed={**LLAMA_LIKE, "norm": "layernorm"}, heads=DECODER_HEADS, default_class="PhimoeForCausalLM",
        layer_types=window_everywhere(),
    ),
    Family(
        "starcoder2", "Starcoder2",
        sizes=_decoder_sizes(49152, 3072, 12288, 30, 24, 2),
        flags={**TIE_TRUE, "use_bias": Flag(True, ("qkv_bias", "attn_out_bias", "mlp_bias"))},
        fixed={"norm": "layernorm"}, heads=DECODER_HEADS, default_class="Starcoder2ForCausalLM",
        layer_types=window_everywhere(),
    ),
    *(Family(
        model_type, prefix,
        sizes={**_decoder_sizes(*shape),
               "experts": _s("n_routed_experts", default=experts),
               "top_k": _s("num_experts_per_tok", default=top_k),
               "expert_ffn": _s("moe_intermediate_size", default=expert_ffn),
               "shared_experts": _s("n_shared_experts", default=shared, minimum=0),
               "q_lora_rank": _s("q_lora_rank", default=1536),
               "kv_lora_rank": _s("kv_lora_rank", default=512),
               "qk_rope_dim": _s("qk_rope_head_dim", default=64),
               "qk_nope_dim": _s("qk_nope_head_dim", default=128),
               "v_head_dim": _s("v_head_dim", default=128)},
        flags={**TIE_FALSE, "attention_bias": Flag(False, ("qkv_bias",)), "mlp_bias": Flag(False)},
        fixed=LLAMA_LIKE, heads=DECODER_HEADS, default_class=f"{prefix}ForCausalLM", rule=_deepseek,
        dense_layers=first_k_dense(dense),
    ) for model_type, prefix, shape, experts, top_k, expert_ffn, shared, dense in (
        ("deepseek_v2", "DeepseekV2", (102400, 4096, 11008, 32, 32, None), 64, None, 1407, 2, 0),
        ("deepseek_v3", "DeepseekV3", (129280, 7168, 18432, 61, 128, None), 256, 8, 2048, 1, 3),
    )),
    Family(
        "olmo2", "Olmo2",
        sizes=_decoder_sizes(50304, 4096, 11008, 32, 32, None),
        flags={**TIE_FALSE, **ATTN_BIAS_OFF}, fixed={**LLAMA_LIKE, "qk_norm": True, "qk_norm_full": True},
        heads=DECODER_HEADS, default_class="Olmo2ForCausalLM",
    ),
    Family(
        "olmoe", "Olmoe",
        sizes={**_decoder_sizes(50304, 2048, 2048, 16, 16, None),
               "experts": _s("num_experts", "num_local_experts", default=64),
               "top_k": _s("num_experts_per_tok", default=8)},
        flags={**TIE_FALSE, **ATTN_BIAS_OFF}, fixed={**LLAMA_LIKE, "qk_norm": True, "qk_norm_full": True},
        heads=DECODER_HEADS, default_class="OlmoeForCausalLM",
    ),
    Family(
        "gpt_oss", "GptOss",
        sizes={**_decoder_sizes(201088, 2880, 2880, 36, 64, 8), "head_dim": _s("head_dim", default=64),
               "experts": _s("num_local_experts", "num_experts", default=128),
               "top_k": _s("num_experts_per_tok", default=4)},
        flags={**TIE_FALSE, "attention_bias": Flag(True, ("qkv_bias", "attn_out_bias"))},
        fixed={**LLAMA_LIKE, "mlp_bias": True, "router_bias": True, "attn_sinks": True},
        heads=DECODER_HEADS, default_class="GptOssForCausalLM", layer_types=every(2), window=("sliding_window", 128),
    ),
    Family(
        "llama4_text", "Llama4",
        sizes={**_decoder_sizes(202048, 5120, 16384, 48, 40, 8),
               "ffn": _s("intermediate_size_mlp", default=16384),
               "head_dim": _s("head_dim", default=128),
               "experts": _s("num_local_experts", default=16),
               "top_k": _s("num_experts_per_tok", default=1),
               "expert_ffn": _s("intermediate_size", default=8192),
               "shared_ffn": _s("intermediate_size", default=8192)},
        flags={**TIE_FALSE, **ATTN_BIAS_OFF}, fixed={**LLAMA_LIKE, "shared_experts": 1},
        heads=DECODER_HEADS, default_class="Llama4ForCausalLM", layer_types=_llama4_types,
        window=("attention_chunk_size", 8192), dense_layers=_llama4_dense,
    ),
    *(Family(
        model_type, prefix,
        sizes=_decoder_sizes(256000, 8192, 22528, 40, 64, None),
        flags={**TIE_TRUE, **ATTN_BIAS_OFF, **qk},
        fixed={**LLAMA_LIKE, "norm": "layernorm", "norm_bias": False, "norms_per_layer": 1, "parallel_block": True,
               "qk_norm_full": True},
        heads=DECODER_HEADS, default_class=f"{prefix}ForCausalLM", layer_types=types, window=("sliding_window", 4096),
    ) for model_type, prefix, qk, types in (
        ("cohere", "Cohere", {"use_qk_norm": Flag(False, ("qk_norm",))}, None),
        ("cohere2", "Cohere2", {}, every(4, "sliding_window_pattern")),
    )),
    Family(
        "granite", "Granite",
        sizes=_decoder_sizes(32000, 4096, 11008, 32, 32, None),
        flags={**TIE_FALSE, **ATTN_BIAS_OFF, "mlp_bias": Flag(False, ("mlp_bias",))},
        fixed=LLAMA_LIKE, heads=DECODER_HEADS, default_class="GraniteForCausalLM",
    ),
    Family(
        "granitemoe", "GraniteMoe",
        sizes={**_decoder_sizes(32000, 4096, 11008, 32, 32, None),
               "experts": _s("num_local_experts", default=8),
               "top_k": _s("num_experts_per_tok", default=2)},
        flags={**TIE_FALSE, **ATTN_BIAS_OFF}, fixed=LLAMA_LIKE, heads=DECODER_HEADS,
        default_class="GraniteMoeForCausalLM",
    ),
    Family(
        "glm4", "Glm4",
        sizes={**_decoder_sizes(151552, 4096, 13696, 40, 32, 2), "head_dim": _s("head_dim", default=128)},
        flags={**TIE_FALSE, "attention_bias": Flag(True, ("qkv_bias",))},
        fixed={**LLAMA_LIKE, "norms_per_layer": 4}, heads=DECODER_HEADS, default_class="Glm4ForCausalLM",
    ),
    Family(
        "smollm3", "SmolLM3",
        sizes=_decoder_sizes(128256, 2048, 11008, 36, 16, 4),
        flags={**TIE_TRUE, **ATTN_BIAS_OFF, "mlp_bias": Flag(False, ("mlp_bias",))},
        fixed=LLAMA_LIKE, heads=DECODER_HEADS, default_class="SmolLM3ForCausalLM", layer_types=_smollm3_types,
    ),
    Family(
        "ministral", "Ministral",
        sizes=_decoder_sizes(32000, 4096, 14336, 32, 32, 8),
        flags=TIE_FALSE, fixed=LLAMA_LIKE, heads=DECODER_HEADS, default_class="MinistralForCausalLM",
        layer_types=window_everywhere(default=4096), window=("sliding_window", 4096),
    ),
    # --- issue 12: older families users still meet -------------------------------------------------
    *(Family(
        model_type, prefix,
        sizes={
            "vocab": _s("vocab_size", default=50400),
            "hidden": _s("n_embd", "hidden_size", default=4096),
            "layers": _s("n_layer", "num_hidden_layers", default=28),
            "heads": _s("n_head", "num_attention_heads", default=16),
            "ffn": _s("n_inner", default=None),
        },
        flags=TIE_FALSE,
        fixed={"mlp_bias": True, "lm_head_bias": True, "norm": "layernorm", "norms_per_layer": 1,
               "parallel_block": True},
        heads=DECODER_HEADS, default_class=f"{prefix}ForCausalLM",
    ) for model_type, prefix in (("gptj", "GPTJ"), ("codegen", "CodeGen"))),
    Family(
        "gpt_bigcode", "GPTBigCode",
        sizes={
            "vocab": _s("vocab_size", default=50257),
            "hidden": _s("n_embd", "hidden_size", default=768),
            "layers": _s("n_layer", "num_hidden_layers", default=12),
            "heads": _s("n_head", "num_attention_heads", default=12),
            "ffn": _s("n_inner", default=None),
            "positions": _s("n_positions", "max_position_embeddings", default=1024),
        },
        flags={**TIE_TRUE, "multi_query": Flag(True)},
        fixed={"qkv_bias": True, "attn_out_bias": True, "mlp_bias": True, "norm": "layernorm"},
        heads=DECODER_HEADS, default_class="GPTBigCodeForCausalLM", rule=_bigcode,
    ),
    Family(
        "bloom", "Bloom",
        sizes={
            "vocab": _s("vocab_size", default=250880),
            "hidden": _s("n_embed", "hidden_size", default=64),
            "layers": _s("n_layer", "num_hidden_layers", default=2),
            "heads": _s("n_head", "num_attention_heads", default=8),
        },
        flags=TIE_TRUE,
        fixed={"qkv_bias": True, "attn_out_bias": True, "mlp_bias": True, "norm": "layernorm", "embedding_norm": True},
        heads=DECODER_HEADS, default_class="BloomForCausalLM",
    ),
    Family(
        "mpt", "Mpt",
        sizes={
            "vocab": _s("vocab_size", default=50368),
            "hidden": _s("d_model", "hidden_size", default=2048),
            "layers": _s("n_layers", "num_hidden_layers", default=24),
            "heads": _s("n_heads", "num_attention_heads", default=16),
        },
        flags=TIE_TRUE, fixed={"norm": "layernorm", "norm_bias": False},
        heads=DECODER_HEADS, default_class="MptForCausalLM",
    ),
    # --- issue 12: a hybrid (attention and short-convolution layers) ---------------------------------
    Family(
        "lfm2", "Lfm2",
        sizes=_decoder_sizes(65536, 2560, 12288, 32, 32, 8),
        flags={**TIE_TRUE}, fixed={**LLAMA_LIKE, "qk_norm": True},
        heads=DECODER_HEADS, default_class="Lfm2ForCausalLM", rule=_lfm2,
        extra=("tie_embedding", "block_ff_dim", "block_auto_adjust_ff_dim", "block_ffn_dim_multiplier",
               "block_multiple_of", "conv_bias"),
        layer_types=_lfm2_types, conv=("conv_L_cache", 3),
    ),
    Family(
        "stablelm", "StableLm",
        sizes=_decoder_sizes(50304, 2560, 6912, 32, 32, None),
        flags={**TIE_FALSE, "use_qkv_bias": Flag(False, ("qkv_bias",)), "qk_layernorm": Flag(False, ("qk_norm",)),
               "use_parallel_residual": Flag(False, ("parallel_block",))},
        fixed={"gated_mlp": True, "norm": "layernorm", "qk_norm_full": True, "qk_norm_bias": False},
        heads=DECODER_HEADS, default_class="StableLmForCausalLM", rule=_stablelm,
    ),
)}

SUPPORTED = tuple(FAMILIES)

# Model types spelled like a supported one but with another layout: no "did you mean" for them
# (a suggestion only names a type whose parameters are laid out the same way).
OTHER_LAYOUTS = frozenset({
    "qwen3_next", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen2_audio", "qwen3_omni_moe",
    "gemma3n", "gemma3n_text", "gemma4", "paligemma", "olmo", "olmo3", "glm4_moe", "glm4v", "glm4v_moe", "glm",
    "granitemoehybrid", "granitemoeshared", "cohere2_vision", "mistral3", "phi4_multimodal", "phi3_v",
    "deepseek_vl", "deepseek_vl_hybrid", "deepseek_v32", "gpt_neo", "gpt_neox_japanese", "falcon_h1", "falcon_mamba",
    "bloom_vision", "mpt_vision", "llava", "starcoder", "stablelm_epoch", "codegen2", "jamba", "bamba", "zamba2",
})
# Multimodal wrappers whose text_config is a supported type: the suggestion names that type.
TEXT_PART = {"gemma3": "gemma3_text", "llama4": "llama4_text"}

# Families whose model cards count active parameters without the input embedding: gpt-oss's card
# (5.1B active of 117B for gpt-oss-120b) and DeepSeek's (37B of 671B for V3); ``params`` shows both.
CARD_ACTIVE_WITHOUT_EMBEDDING = frozenset({"gpt_oss", "deepseek_v2", "deepseek_v3"})


def card_counts_active_without_embedding(model_type: str) -> bool:
    """Whether the model card of this family quotes active parameters without the input embedding."""
    return model_type in CARD_ACTIVE_WITHOUT_EMBEDDING
