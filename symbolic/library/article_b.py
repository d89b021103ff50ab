"""Article B: parameter counts and training memory of transformer LLMs.

Its parameter formulas use d for the hidden size and n for layers; the symbol table writes
them H and L (one symbol per quantity across the library). Memory terms are in bytes with the
article's fixed element sizes (fp32 weights, int64 inputs).
"""

from __future__ import annotations

import sympy

from ..core.symbols import B, D, E, H, L, N, S, V, b, d_ff
from ..core.term import Term
from ..math.formula import Formula
from .registry import register

SRC = "article-B"
GPT2_LIKE = {"H": 768, "L": 12, "V": 50000, "d_ff": 3072}


def _t(key: str, title: str, expr: sympy.Expr, unit: str, where: str, note: str = "") -> Term:
    return Term(key, title, sympy.sympify(expr) if isinstance(expr, int) else expr, unit, SRC, where, note)


# --- parameters ------------------------------------------------------------------------
EMBEDDING = _t("embedding", "token embedding V × d", V * H, "params", "parameters: embedding")
ATTENTION = _t("attention", "multi-head attention: Q, K, V and output projections", 4 * H**2, "params",
               "parameters: attention", "No biases (erratum 2).")
FFN = _t("ffn", "feed-forward: two matrices and their biases", 2 * H * d_ff + H + d_ff, "params",
         "parameters: feed-forward", "The article's worked value 4,719,616 is wrong: 4,722,432 (erratum 1).")
LAYERNORM = _t("layernorm", "layer norm: scale and bias", 2 * H, "params", "parameters: layer norm")

embedding = register(Formula("llm.params.embedding", "Embedding parameters", (EMBEDDING,), source=SRC,
                             name="N_emb", example=GPT2_LIKE))
attention = register(Formula("llm.params.attention", "Attention parameters per layer", (ATTENTION,),
                             source=SRC, name="N_attn", example=GPT2_LIKE))
ffn = register(Formula("llm.params.ffn", "Feed-forward parameters per layer", (FFN,), source=SRC,
                       name="N_ffn", example=GPT2_LIKE))
layernorm = register(Formula("llm.params.layernorm", "Parameters of one layer norm", (LAYERNORM,), source=SRC,
                             name="N_ln", example=GPT2_LIKE))

LAYER_TERMS = (ATTENTION, FFN, LAYERNORM.replace(key="layernorm_1", title="first layer norm"),
               LAYERNORM.replace(key="layernorm_2", title="second layer norm"))
layer = register(Formula("llm.params.layer", "Parameters per transformer layer", LAYER_TERMS, source=SRC,
                         where="parameters: per layer", name="N_layer", example=GPT2_LIKE))

params = register(Formula(
    "llm.params", "Parameters of the transformer (article B)",
    (
        _t("layers", "n layers × per-layer parameters", L * layer.expr, "params", "parameters: model"),
        EMBEDDING,
        _t("output", "output projection (tied to the embedding: counted as 0)", sympy.Integer(0), "params",
           "parameters: model", "The article counts the output head as zero without saying why (erratum 2)."),
    ),
    source=SRC, where="parameters: model", name="N", example=GPT2_LIKE,
    note="Leaves out position embeddings, attention biases and the final layer norm (erratum 2)."))

_DEFS_N = {N: params}

weights = register(Formula(
    "llm.weights", "Model memory: parameters × bytes per parameter",
    (_t("weights", "model weights", N * b, "bytes", "model memory"),),
    source=SRC, where="model memory", name="M_model", definitions=_DEFS_N, example={**GPT2_LIKE, "b": 4}))
rule_inference = register(Formula(
    "llm.rule.inference", "Rule of thumb: inference working memory ≈ 2 × model memory",
    (_t("rule", "2 × model memory", 2 * N * b, "bytes", "working memory",
        "A rule of thumb; it disagrees with the article's own formulas (erratum 4)."),),
    source=SRC, where="working memory", name="M_infer", definitions=_DEFS_N, example={**GPT2_LIKE, "b": 4}))
rule_training = register(Formula(
    "llm.rule.training", "Rule of thumb: training memory ≈ 4 × model memory",
    (_t("rule", "4 × model memory", 4 * N * b, "bytes", "working memory",
        "With fp32 weights this is 16N bytes, equal to M_steady's parameter part but without inputs or "
        "activations (erratum 4)."),),
    source=SRC, where="working memory", name="M_train", definitions=_DEFS_N, example={**GPT2_LIKE, "b": 4}))

# --- training memory -------------------------------------------------------------------
tokens_hidden = register(Formula(
    "llm.E", "E = B·S·H: elements of one layer's output",
    (_t("E", "batch × sequence × hidden", B * S * H, "elements", "peak memory"),),
    source=SRC, where="peak memory", name="E", example=GPT2_LIKE))

STEADY = (
    _t("weights", "fp32 weights", 4 * N, "bytes", "steady memory 1"),
    _t("adam", "Adam states (two per parameter, fp32)", 8 * N, "bytes", "steady memory 2"),
    _t("gradients", "fp32 gradients", 4 * N, "bytes", "steady memory 3"),
    _t("inputs", "int64 input data", 8 * B * D, "bytes", "steady memory 4"),
)
steady = register(Formula("llm.steady", "Steady training memory M_steady = 16N + 8BD", STEADY, source=SRC,
                          where="steady memory", name="M_steady", definitions=_DEFS_N, example=GPT2_LIKE))

ACTIVATIONS = (
    _t("layers", "L layers × (14E + 4BSS)", L * (14 * E + 4 * B * S * S), "bytes", "peak memory",
       "14E is the article's figure; its listed components add up to 20E or 24E (erratum 5). "
       "4BSS has no head count (erratum 3)."),
    _t("logits", "cross-entropy logits", 6 * B * S * V, "bytes", "peak memory 4"),
)
_DEFS_E = {E: tokens_hidden}
activations = register(Formula("llm.activations", "Activation memory M_act = L(14E + 4BSS) + 6BSV", ACTIVATIONS,
                               source=SRC, where="peak memory", name="M_act", definitions=_DEFS_E,
                               example=GPT2_LIKE))

LISTED = (
    _t("layernorm", "layer norm", 4 * E, "bytes", "peak memory 1", "The article lists one layer norm per layer."),
    _t("qkv", "attention: QKV", 2 * E, "bytes", "peak memory 2"),
    _t("scores", "attention matrix", 4 * B * S * S, "bytes", "peak memory 2", "No head count (erratum 3)."),
    _t("attn_out", "attention output", 2 * E, "bytes", "peak memory 2"),
    _t("ffn_in", "feed-forward: first linear", 2 * E, "bytes", "peak memory 3"),
    _t("gelu", "feed-forward: GELU", 8 * E, "bytes", "peak memory 3"),
    _t("ffn_out", "feed-forward: second linear", 2 * E, "bytes", "peak memory 3"),
)
listed = register(Formula(
    "llm.activations.listed", "Per-layer activations as the article lists them (sum 20E + 4BSS, not 14E)", LISTED,
    source=SRC, where="peak memory", name="M_layer", definitions=_DEFS_E, example=GPT2_LIKE,
    note="Erratum 5: these add up to 20E + 4BSS per layer, while M_act uses 14E + 4BSS."))

BACKWARD_EXTRA = _t("backward_extra", "extra allocation at the start of backward", 4 * B * S * V, "bytes",
                    "peak memory total")
peak = register(Formula(
    "llm.peak", "Peak training memory M_peak = M_steady + M_act + 4BSV", STEADY + ACTIVATIONS + (BACKWARD_EXTRA,),
    source=SRC, where="peak memory total", name="M_peak", definitions={**_DEFS_N, **_DEFS_E}, example=GPT2_LIKE))
