"""A GGUF file's header as the Hugging Face-style config a family table reads (``transformer.configs``).

``config(path)`` turns the header's ``{arch}.*`` keys into config.json fields, so that a GGUF file is
counted, planned and served as the equivalent config is (``presets.resolve`` and ``load`` call it;
``networks.gguf`` adds the file's tensors). The tensor data is never read (``formats.gguf_file``).

Key names are llama.cpp's (``src/llama-arch.cpp`` ``LLM_KV_NAMES`` and ``LLM_ARCH_NAMES`` at commit
3679b65db16ebaabba95a893c62eb6c4840e832c of ggml-org/llama.cpp; ``gpt-oss`` is ``LLM_ARCH_OPENAI_MOE``'s
name in later commits); how each Hugging Face field becomes one is ``convert_hf_to_gguf.py``'s
``set_gguf_parameters``. What GGUF does not store is read from the tensors: the vocabulary from
``token_embd.weight``'s rows, tied embeddings from the absence of ``output.weight``, attention biases
from ``blk.0.attn_q.bias``, DeepSeek-V3's router bias (``exp_probs_b``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import single_line
from ..core.memo import BoundedMemo
from ..formats.gguf_file import GgufError, GgufHeader, SkippedArray, read_header
from ..formats.gguf_ftypes import FILE_TYPES

SUFFIX = ".gguf"
_FTYPE_NAMES = {f.ftype_id: f.name for f in FILE_TYPES.values()}
_HEADERS: BoundedMemo[tuple[str, int, int, int], GgufHeader] = BoundedMemo(8)


def is_gguf(reference: object) -> bool:
    """Whether a model reference names a GGUF file (by its ``.gguf`` suffix, any case)."""
    return isinstance(reference, (str, os.PathLike)) and os.fspath(reference).lower().endswith(SUFFIX)


def header(path: str | os.PathLike[str]) -> GgufHeader:
    """The file's header, read once per file version (a command asks for it more than once)."""
    p = Path(path).expanduser()
    try:
        st = os.stat(p)
        key = (os.path.realpath(p), st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        return read_header(p)  # the reader says why in one line
    if key not in _HEADERS:
        _HEADERS[key] = read_header(p)
    return _HEADERS[key]


class _Keys:
    """The header's ``{arch}.*`` values, checked as whole numbers; per-layer arrays only when uniform."""

    def __init__(self, head: GgufHeader, arch: str) -> None:
        self.head, self.arch = head, arch

    def get(self, key: str, default: int | None = None) -> int | None:
        full = f"{self.arch}.{key}"
        value = self.head.metadata.get(full)
        if value is None:
            return default
        if isinstance(value, list) and value and len(set(value)) == 1:
            value = value[0]  # a per-layer array with one value throughout
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            shown = f"{len(value)} per-layer values" if isinstance(value, (list, SkippedArray)) else repr(value)
            raise GgufError(f"{self.head.path}: {full} is {shown}; a whole number is read")
        return int(value)

    def need(self, key: str) -> int:
        value = self.get(key)
        if value is None:
            raise GgufError(f"{self.head.path}: the header has no {self.arch}.{key}; it is needed to count the model")
        return value


def _base(keys: _Keys, head: GgufHeader, names: set[str]) -> dict[str, Any]:
    """The fields every decoder table reads: sizes, tied embeddings, context, window, biases."""
    heads = keys.need("attention.head_count")
    out: dict[str, Any] = {
        "vocab_size": _vocab(keys, head), "hidden_size": keys.need("embedding_length"),
        "num_hidden_layers": keys.need("block_count"), "num_attention_heads": heads,
        "num_key_value_heads": keys.get("attention.head_count_kv", heads),
        "intermediate_size": keys.get("feed_forward_length"),
        "max_position_embeddings": keys.get("context_length"),
        "tie_word_embeddings": "output.weight" not in names,
        "sliding_window": keys.get("attention.sliding_window"),
    }
    if names & {"blk.0.attn_q.weight", "blk.0.attn_qkv.weight"}:  # biases where the file lists layer 0's tensors
        out["attention_bias"] = bool(names & {"blk.0.attn_q.bias", "blk.0.attn_qkv.bias"})
    head_dim = keys.get("attention.key_length")
    if head_dim is not None:
        out["head_dim"] = head_dim
    eps = head.metadata.get(f"{keys.arch}.attention.layer_norm_rms_epsilon")
    if isinstance(eps, float):
        out["rms_norm_eps"] = eps
    return out


def _vocab(keys: _Keys, head: GgufHeader) -> int:
    """The embedding's rows (what the bytes are), else {arch}.vocab_size, else the token list's length."""
    for t in head.tensors:
        if t.name == "token_embd.weight" and len(t.shape) == 2:
            return t.shape[1]
    tokens = head.metadata.get("tokenizer.ggml.tokens")
    length = tokens.length if isinstance(tokens, SkippedArray) else len(tokens) if isinstance(tokens, list) else None
    return keys.get("vocab_size", length) or keys.need("vocab_size")


def _experts(keys: _Keys, count_key: str, ffn_key: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {count_key: keys.need("expert_count"), "num_experts_per_tok": keys.get("expert_used_count")}
    if ffn_key:
        out[ffn_key] = keys.need("expert_feed_forward_length")
    return out


def _llama(keys: _Keys, names: set[str]) -> dict[str, Any]:
    """llama (and Mistral's files, written as llama): Mixtral when it has experts."""
    if keys.get("expert_count"):
        ffn = keys.get("expert_feed_forward_length") or keys.need("feed_forward_length")
        return {"model_type": "mixtral", **_experts(keys, "num_local_experts", None), "intermediate_size": ffn}
    return {"model_type": "llama", "mlp_bias": "blk.0.ffn_up.bias" in names if "blk.0.ffn_up.weight" in names else None}


def _qwen2moe(keys: _Keys, names: set[str]) -> dict[str, Any]:
    return {"model_type": "qwen2_moe", **_experts(keys, "num_experts", "moe_intermediate_size"),
            "shared_expert_intermediate_size": keys.get("expert_shared_feed_forward_length"),
            "decoder_sparse_step": 1, "mlp_only_layers": []}


def _qwen3moe(keys: _Keys, names: set[str]) -> dict[str, Any]:
    return {"model_type": "qwen3_moe", **_experts(keys, "num_experts", "moe_intermediate_size"),
            "decoder_sparse_step": 1, "mlp_only_layers": [], "use_sliding_window": False}


def _gpt_oss(keys: _Keys, names: set[str]) -> dict[str, Any]:
    return {"model_type": "gpt_oss", **_experts(keys, "num_local_experts", "intermediate_size")}


def _deepseek2(keys: _Keys, names: set[str]) -> dict[str, Any]:
    """deepseek2 holds V2 and V3; V3's router has a bias (exp_probs_b). MLA sizes: the *_mla keys where written."""
    rope = keys.need("rope.dimension_count")
    qk = keys.get("attention.key_length_mla") or keys.need("attention.key_length")
    v = keys.get("attention.value_length_mla") or keys.need("attention.value_length")
    v3 = any("exp_probs_b" in n for n in names)
    return {"model_type": "deepseek_v3" if v3 else "deepseek_v2",
            **_experts(keys, "n_routed_experts", "moe_intermediate_size"),
            "n_shared_experts": keys.get("expert_shared_count", 0),
            "first_k_dense_replace": keys.get("leading_dense_block_count", 0),
            "q_lora_rank": keys.get("attention.q_lora_rank") or None, "kv_lora_rank": keys.need("attention.kv_lora_rank"),
            "qk_rope_head_dim": rope, "qk_nope_head_dim": qk - rope, "v_head_dim": v, "head_dim": None,
            "num_key_value_heads": None}


def _plain(model_type: str, **fixed: Any) -> Callable[[_Keys, set[str]], dict[str, Any]]:
    return lambda keys, names: {"model_type": model_type, **fixed}


# general.architecture -> the config fields beyond _base (model_type first)
ARCHITECTURES: dict[str, Callable[[_Keys, set[str]], dict[str, Any]]] = {
    "llama": _llama, "mistral3": _llama,
    "qwen2": _plain("qwen2", use_sliding_window=False), "qwen2moe": _qwen2moe,
    "qwen3": _plain("qwen3", use_sliding_window=False), "qwen3moe": _qwen3moe,
    "gemma": _plain("gemma"), "gemma2": _plain("gemma2"), "gemma3": _plain("gemma3_text"),
    "phi3": _plain("phi3"), "gpt-oss": _gpt_oss, "deepseek2": _deepseek2,
    "starcoder2": _plain("starcoder2"), "olmo2": _plain("olmo2"),
}


def architecture(head: GgufHeader) -> str:
    """general.architecture, checked to be one this module reads."""
    arch = head.metadata.get("general.architecture")
    if not isinstance(arch, str):
        raise GgufError(f"{head.path}: the header has no general.architecture string; it says what the model is")
    if arch not in ARCHITECTURES:
        raise GgufError(f"{head.path}: architecture {single_line(arch)[:60]!r} is not read from GGUF files here; "
                        f"read are: {', '.join(ARCHITECTURES)}")
    return arch


def config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The Hugging Face-style config.json equivalent of a GGUF file's header."""
    head = header(path)
    arch = architecture(head)
    keys = _Keys(head, arch)
    names = {t.name for t in head.tensors}
    out = _base(keys, head, names)
    out.update(ARCHITECTURES[arch](keys, names))
    if out.get("intermediate_size") is None:
        keys.need("feed_forward_length")
    return {k: v for k, v in out.items() if v is not None or k == "q_lora_rank"}  # null q_lora_rank: a full q_proj


def source(head: GgufHeader) -> str:
    """Where a GGUF network's figures come from, in one line."""
    return (f"GGUF header of {head.path} (general.architecture {head.metadata.get('general.architecture')}, "
            f"version {head.version}, {len(head.tensors):,} tensors)")


def file_type(head: GgufHeader) -> str:
    """llama.cpp's file type name from general.file_type; else the ggml type holding the most numbers."""
    value = head.metadata.get("general.file_type")
    found = _FTYPE_NAMES.get(value) if isinstance(value, int) and not isinstance(value, bool) else None
    if found:
        return found
    counts: dict[str, int] = {}
    for t in head.tensors:
        counts[t.type] = counts.get(t.type, 0) + t.elements
    return max(counts, key=counts.__getitem__) if counts else "F32"
