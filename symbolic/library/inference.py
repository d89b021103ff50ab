"""Inference memory: weights at 16, 8 or 4 bits with group-wise scales, and the KV cache.

Weights (``WEIGHT_DTYPES``). fp16/bf16 store 2 bytes per parameter. The quantised formats store
their codes plus, for every group of g_q = 128 consecutive weights of a row, one fp16 scale
(b_s = 2 bytes) and, for int4, one 4-bit zero point — the group-wise scheme of GPTQ (Frantar et
al. 2022) and AWQ, whose default group size is 128. So int8 costs 1 + 2/128 bytes per
parameter and int4 1/2 + (2 + 1/2)/128. Both keep the token embeddings and the LM head in
16-bit (the planner treats them apart); norms and biases, a tiny fraction, are counted as
quantised. LLM.int8() (Dettmers et al. 2022) uses one fp32 scale per row instead (4/H bytes per
parameter); that variant is not modelled. Every figure here (bytes, group size, scales, what stays
16-bit) is the format's entry in ``symbolic.formats``.

KV cache (Shazeer 2019; GQA: Ainslie et al. 2023): every layer keeps a key and a value vector of
a_kv·d_head numbers per token, so 2·L·a_kv·d_head·S·B·b_kv bytes for B sequences of S tokens.
Under tensor parallelism each rank holds max(a_kv/t, 1) key/value heads: the heads are split
while there are enough, and replicated once t exceeds a_kv. The cache's scales for fp8/int8/int4
KV (per tensor or per head) are ignored. d_head is the config's head dimension (H/a unless the
config says otherwise, e.g. Gemma-7B).

Per layer kind (issue 12; checked against the cache object transformers 5.24 returns after a
prefill, ``cache_utils.DynamicCache``): full-attention layers keep S tokens; sliding-window (and
Llama-4's chunked) layers keep at most W − 1 tokens (``DynamicSlidingWindowLayer`` stores "the
last sliding_window − 1 tokens"), so min(S, W − 1); DeepSeek's multi-head latent attention
caches one compressed latent of r_kv numbers and one shared rope key of d_rope numbers per token
and layer, not per head (``DeepseekV3Attention.forward`` updates the cache "while latent KV is
still compressed"); it is the same on every tensor-parallel rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .. import formats
from ..core import sources
from ..core.symbols import (
    B,
    C_p,
    H,
    L,
    L_conv,
    L_swa,
    N,
    S,
    V,
    W,
    a,
    a_kv,
    b,
    b_kv,
    b_s,
    d_head,
    d_rope,
    g_q,
    k_conv,
    k_exp,
    r_kv,
    t,
)
from ..core.term import Term
from ..math.formula import Formula
from .registry import register

if "transformers" not in sources.SOURCES:
    sources.register("transformers", "Hugging Face transformers 5.24.0: models/<model_type>/modeling_<model_type>.py "
                                     "(nn.Linear, nn.Embedding and norm shapes)")

# The formats the planner accepts for serving weights and the KV cache (bytes and rules: symbolic.formats).
WEIGHT_DTYPES: tuple[str, ...] = formats.names("weights")
KV_DTYPES: tuple[str, ...] = formats.names("kv")


def weight_dtype(key: str) -> formats.Format:
    """The weight format called ``key``; a one-line error naming the choices otherwise."""
    return formats.get(key, "weights", "weight dtype")


def kv_bytes(key: str) -> sympy.Rational:
    """Bytes per KV-cache element for a dtype name."""
    return formats.get(key, "kv", "KV-cache dtype").element_bytes


def weight_terms(dtype: str, quantised_params: sympy.Expr, kept_params: sympy.Expr | int = 0) -> list[Term]:
    """Weights for inference: ``quantised_params`` in ``dtype`` (with scales), ``kept_params`` unquantised."""
    w = weight_dtype(dtype)
    terms = [Term("weights", f"{dtype} weights" + (" (transformer layers)" if w.quantised else ""),
                  w.element_bytes * quantised_params, "bytes", w.source, "",
                  f"{w.element_bytes} bytes per parameter.")]
    if w.quantised:
        terms.append(Term("weight_scales", f"group-wise scales: one {w.scale_name} scale per {w.group} weights"
                          + (f", plus a {8 * w.zero_bytes}-bit zero point" if w.zero_bytes else ""),
                          (w.scale_bytes + w.zero_bytes) * quantised_params / w.group, "bytes", w.source,
                          f"group size {w.group}",
                          "GPTQ/AWQ-style group-wise quantisation; LLM.int8's per-row fp32 scales are not modelled."))
    if kept_params != 0:
        terms.append(Term("embeddings", "token embeddings and LM head"
                          + (f" kept in {8 * w.kept_bytes}-bit" if w.quantised else ""),
                          w.kept_bytes * kept_params, "bytes", w.source, "",
                          "GPTQ/AWQ leave the embeddings and the output head unquantised."))
    return terms


def stored_weight_terms(dtype: str, layers: sympy.Expr, kept: sympy.Expr, by_type: str) -> list[Term]:
    """Weights of a format whose bytes follow each matrix's shape (``formats.Format.shaped``), as stored.

    ``layers`` and ``kept`` are bytes: each part's parameters (as the planner places them) times that
    part's exact bytes per parameter from ``networks.stored.stored_parts`` (codes, scales, g_idx, and
    what the format keeps unquantised), so they are exact at the model's own sizes.
    """
    w = weight_dtype(dtype)
    terms = [Term("weights", f"{dtype} weights as stored (transformer layers; the whole model: {by_type})", layers, "bytes", w.source,
                  w.where, f"Every matrix by the format's storage rule; {w.kept} stay {w.kept_in}. {w.note}".strip())]
    if kept != 0:
        terms.append(Term("embeddings", f"token embeddings and LM head kept in {w.kept_in}", kept, "bytes", w.source,
                          "", f"{dtype} leaves the embeddings and the output head unquantised."))
    return terms


def kv_cache_expr(tp: sympy.Expr | int = 1, layers: sympy.Expr = L, element: sympy.Expr = b_kv) -> sympy.Expr:
    """2·layers·heads_per_rank·d_head·S·B·element, heads_per_rank = max(a_kv/t, 1) when ``tp`` is not 1."""
    heads = a_kv if tp == 1 else sympy.Max(a_kv / tp, 1)
    return 2 * layers * heads * d_head * S * B * element


def kv_cache_term(tp: sympy.Expr | int = 1, layers: sympy.Expr = L, element: sympy.Expr = b_kv,
                  dtype: str = "") -> Term:
    """The KV cache as a named term."""
    where = f" ({dtype})" if dtype else ""
    note = "Keys and values of every layer for B sequences of S tokens."
    if tp != 1:
        note += " Each tensor-parallel rank holds max(a_kv/t, 1) KV heads (replicated once t > a_kv)."
    return Term("kv_cache", f"KV cache{where}", kv_cache_expr(tp, layers, element), "bytes", "shazeer2019",
                "§2 incremental decoding; GQA: ainslie2023", note)


# Keys of the cache terms of a plan, one per attention kind (report and JSON sum these).
CACHE_KEYS = ("kv_cache", "kv_cache.sliding", "kv_cache.latent", "state.conv")


@dataclass(frozen=True)
class CacheKind:
    """One kind of attention layer as the cache sees it: ``count`` layers of ``kind``."""

    kind: str  # "full", "sliding", "latent" or "conv" (a hybrid's fixed convolution state)
    count: sympy.Expr
    heads: sympy.Expr = a_kv  # key/value heads the cache holds (Falcon's new architecture: all a)


def cache_kind_term(kind: CacheKind, tp: sympy.Expr | int = 1, element: sympy.Expr = b_kv,
                    dtype: str = "", pp: sympy.Expr | int = 1) -> Term:
    """The cache of one attention kind as a named term (layers divided by ``pp`` per pipeline stage)."""
    where = f" ({dtype})" if dtype else ""
    layers = kind.count / pp
    if kind.kind == "full":
        term = kv_cache_term(tp, layers, element, dtype)
        return term.replace(title=f"KV cache{where}" + (": full-attention layers" if kind.count != L else ""),
                            expr=term.expr.xreplace({a_kv: kind.heads}))
    if kind.kind == "sliding":
        heads = kind.heads if tp == 1 else sympy.Max(kind.heads / tp, 1)
        expr = 2 * layers * heads * d_head * sympy.Min(S, W - 1) * B * element
        return Term("kv_cache.sliding", f"KV cache{where}: sliding-window layers, at most W − 1 tokens", expr,
                    "bytes", "transformers", "cache_utils.DynamicSlidingWindowLayer",
                    "Each sliding-window (or chunked) layer keeps the keys and values of the last W − 1 tokens "
                    "(all S while S < W); the cache stops growing with the context.")
    if kind.kind == "latent":
        expr = layers * (r_kv + d_rope) * S * B * element
        return Term("kv_cache.latent", f"latent KV cache{where}: compressed latent and rope key", expr, "bytes",
                    "transformers", "deepseek_v3 DeepseekV3Attention",
                    "Multi-head latent attention caches r_kv + d_rope numbers per token and layer, shared by "
                    "all heads (so every tensor-parallel rank holds all of it), not 2·a·d_head.")
    if kind.kind == "conv":
        expr = layers * H * k_conv * B * element
        return Term("state.conv", f"convolution state{where}: k_conv taps of H channels per layer", expr, "bytes",
                    "transformers", "cache_utils.LinearAttentionLayer (conv_states)",
                    "A short-convolution layer (LFM2) keeps the last k_conv inputs of its H channels per sequence: "
                    "a fixed state that does not grow with the context.")
    raise ValueError(f"unknown attention kind {kind.kind!r}")


def cache_terms(kinds: tuple[CacheKind, ...], tp: sympy.Expr | int = 1, element: sympy.Expr = b_kv,
                dtype: str = "", pp: sympy.Expr | int = 1) -> list[Term]:
    """One cache term per attention kind of the model, and the cache type's per-layer scales (fp8's k/v scales)."""
    out = [cache_kind_term(k, tp, element, dtype, pp) for k in kinds]
    fmt = formats.FORMATS.get(dtype)
    if fmt is not None and fmt.layer_bytes:
        layers = sum((k.count for k in kinds if k.kind != "conv"), sympy.Integer(0)) / pp
        out.append(Term("kv_scales", f"KV-cache scales ({dtype}): k_scale and v_scale per attention layer",
                        layers * fmt.layer_bytes, "bytes", "vllm",
                        "model_executor/layers/attention/attention.py (the layer's k/v scales)",
                        "An fp8 cache stores each layer's keys and values with one fp32 scale each (per tensor); "
                        "they belong to the layer, not to a sequence."))
    return out


def default_kinds(sliding: bool = False, latent: bool = False, all_sliding: bool = False,
                  heads: sympy.Expr = a_kv, conv: bool = False) -> tuple[CacheKind, ...]:
    """The kinds of a model with L layers: all full, all latent, all sliding, or L_swa of them sliding;
    a hybrid's L_conv convolution layers keep a fixed state instead."""
    if latent:
        return (CacheKind("latent", L),)
    if all_sliding:
        return (CacheKind("sliding", L, heads),)
    attention = L - L_conv if conv else L
    out = (CacheKind("full", attention - L_swa, heads), CacheKind("sliding", L_swa, heads)) if sliding else \
        (CacheKind("full", attention, heads),)
    return out + ((CacheKind("conv", L_conv),) if conv else ())


# --- registered formulas ------------------------------------------------------------------------
_LLAMA3_8B_KV = {"L": 32, "a_kv": 8, "d_head": 128, "S": 8192, "B": 1, "b_kv": 2}

register(Formula("infer.kv_cache", "KV cache: 2·L·a_kv·d_head·S·B·b_kv", (kv_cache_term(),), source="shazeer2019",
                 name="M_kv", example=_LLAMA3_8B_KV,
                 note="Llama-3-8B at S = 8192, B = 1, 16-bit: exactly 1 GiB."))
register(Formula("infer.kv_cache.tp", "KV cache per tensor-parallel rank: 2·L·max(a_kv/t, 1)·d_head·S·B·b_kv",
                 (kv_cache_term(t),), source="shazeer2019", name="M_kv", example={**_LLAMA3_8B_KV, "t": 2}))
register(Formula("infer.kv_cache.sliding", "KV cache with sliding-window layers: full layers keep S tokens, "
                 "sliding ones min(S, W − 1)", tuple(cache_terms(default_kinds(sliding=True))),
                 source="transformers", name="M_kv",
                 example={"L": 26, "L_swa": 13, "W": 4096, "a_kv": 4, "d_head": 256, "S": 8192, "B": 1, "b_kv": 2},
                 note="Gemma-2-2B's pattern: every other layer slides over 4096 tokens."))
register(Formula("infer.kv_cache.latent", "Latent KV cache (multi-head latent attention): L·(r_kv + d_rope)·S·B·b_kv",
                 tuple(cache_terms(default_kinds(latent=True))), source="transformers", name="M_kv",
                 example={"L": 61, "r_kv": 512, "d_rope": 64, "S": 8192, "B": 1, "b_kv": 2},
                 note="DeepSeek-V3: 576 numbers per token and layer."))
_INT4 = formats.get("int4")
register(Formula(
    "infer.weights.quantised", "Quantised weights with group-wise scales: N·b + N·b_s/g_q",
    (Term("weights", "weight codes", N * b, "bytes", _INT4.source),
     Term("weight_scales", "one scale per group of g_q weights", N * b_s / g_q, "bytes", _INT4.source,
          f"group size {_INT4.group}, {_INT4.scale_name} scales in the planner")),
    source=_INT4.source, name="M_w",
    example={"N": 7_000_000_000, "b": str(_INT4.element_bytes), "b_s": int(_INT4.scale_bytes), "g_q": _INT4.group}))
for _key in WEIGHT_DTYPES:
    _w = weight_dtype(_key)
    if _w.shaped:  # bytes by matrix shape: a model's own matrices give them (networks.stored)
        continue
    register(Formula(f"infer.weights.{_key}", f"Inference weights, {_key}" +
                     (f" with group-wise {_w.scale_name} scales (group {_w.group})" if _w.quantised else ""),
                     weight_terms(_key, N), source=_w.source, name="M_w",
                     example={"N": 7_000_000_000}))
register(Formula("infer.rule.eleuther", "Rule of thumb: inference memory ≈ 1.2 × weights (EleutherAI)",
                 (Term("rule", "1.2 × N·b", sympy.Rational(6, 5) * N * b, "bytes", "eleuther2023", "inference",
                       "Second-hand; a 20 % allowance for everything but the weights, with no batch or context."),),
                 source="eleuther2023", name="M_infer", example={"N": 7_000_000_000, "b": 2}))


# --- working sets of a serving step (the planner's prefill and decode phases) -------------------
def mlp_width(ffn: sympy.Expr, gated: bool, moe: bool, tp: sympy.Expr | int = 1) -> sympy.Expr:
    """The MLP intermediates one token of one layer holds on one GPU: ``ffn`` wide, gated three matrices'
    worth, a mixture of experts k_exp experts per token."""
    return (3 if gated else 2) * ffn * (k_exp if moe else 1) / tp


def working_set_terms(ffn: sympy.Expr, gated: bool, moe: bool, act_bytes: int, flash: bool,
                      tp: sympy.Expr | int = 1) -> tuple[Term, Term]:
    """The prefill and decode working sets of one layer on one GPU (``act_bytes`` per activation element).

    Residual stream, norm output and MLP intermediates (``mlp_width``) of one layer; without a fused
    (flash) attention kernel the B·a·S² scores too. Layers run one after another, so one layer's
    tensors are alive at a time.
    """
    return working_sets(mlp_width(ffn, gated, moe, tp), act_bytes, flash, tp)


def working_sets(mlp: sympy.Expr, act_bytes: int, flash: bool, tp: sympy.Expr | int = 1,
                 chunked: bool = False) -> tuple[Term, Term]:
    """``working_set_terms`` for a layer whose per-token intermediates beyond the residual stream are ``mlp``
    elements on one GPU (a network gives it: ``Network.serving_width``); ``chunked``: the prefill is
    ``chunk_working_set``'s (C_p tokens a step), not the whole prompts'."""
    step = act_bytes * B * (2 * H + mlp)
    if not flash:
        step += act_bytes * a * S * B / tp
    decode = Term("decode_activations", "decode working set of one layer: one token per sequence"
                  + ("" if flash else " (with its 1×S scores)"), step, "bytes", "project", "",
                  "The prefill working set with one token per sequence instead of S.")
    if chunked:
        return chunk_working_set(mlp, act_bytes, flash, tp), decode
    work = act_bytes * S * B * (2 * H + mlp)
    if not flash:
        work += act_bytes * a * S**2 * B / tp
    prefill = Term("activations", "prefill working set of one layer" + ("" if flash else " (with s² scores)"),
                   work, "bytes", "project", "",
                   "Residual stream, norm output and MLP intermediates of one layer for the B×S tokens of the "
                   "largest prompt chunk (the whole prompt); layers run one after another, so only one layer's "
                   "tensors are alive. An estimate, not from a paper.")
    return prefill, decode


def chunk_tokens() -> sympy.Expr:
    """Tokens one chunked-prefill step runs: at most C_p, and no more than the B·S of every prompt together."""
    return sympy.Min(C_p, B * S)


def chunk_working_set(mlp: sympy.Expr, act_bytes: int, flash: bool, tp: sympy.Expr | int = 1) -> Term:
    """The prefill working set of one layer when a step prefills at most C_p tokens (chunked prefill).

    The chunk's tokens (of one sequence or several) go through the layer as the whole prompt's
    did, so the residual stream, norm output and MLP intermediates are those of min(C_p, B·S)
    tokens; each chunk token attends to at most S cached tokens, so without a fused attention
    kernel the scores are a·min(C_p, B·S)·S (with flash attention none are kept).
    """
    tokens = chunk_tokens()
    work = act_bytes * tokens * (2 * H + mlp)
    if not flash:
        work += act_bytes * a * tokens * S / tp
    return Term("activations", "prefill working set of one layer: a chunk of C_p tokens"
                + ("" if flash else " (with its C_p×S scores)"), work, "bytes", "project", "",
                "Chunked prefill (vLLM's max_num_batched_tokens, SGLang's chunked_prefill_size): one step "
                "prefills at most C_p tokens of one or several prompts while the cache holds B·S tokens; "
                "the working set is that of min(C_p, B·S) tokens. An estimate, not from a paper.")


def chunk_logits_term(tp: sympy.Expr | int = 1) -> Term:
    """The fp32 logits a chunked-prefill step keeps: the last token of each prompt it finishes, min(B, C_p) at most."""
    return Term("prefill_logits", "fp32 logits of the chunk's last tokens", 4 * sympy.Min(B, C_p) * V / tp,
                "bytes", "huggingface", "",
                "A step samples only from the last token of each prompt it completes: at most one per sequence, "
                "and no more than the chunk's tokens.")


def prefill_text(chunk: int | None) -> str:
    """Which prefill a serving plan assumed, in the words every output uses."""
    return f"chunks of {chunk:,} tokens" if chunk else "whole prompts at once: B·S tokens"


def last_logits_term(tp: sympy.Expr | int = 1) -> Term:
    """The fp32 logits of the last position that generation keeps, on one GPU (vocabulary split over ``tp``)."""
    return Term("logits", "fp32 logits of the last position", 4 * B * V / tp, "bytes", "huggingface", "",
                "Generation keeps the logits of the last position only.")
