"""Parameter terms of a real transformer, built from a ModelSpec as named SymPy expressions.

Every component (attention projections and their biases, the MLP or the experts, norms,
embeddings, heads) is a ``Term``; one layer's terms form ``layer_formula`` and the model's total
``params_formula`` is ``L`` times that layer plus the terms outside the layers. Formulas are
built on demand for one model (not added to the library's registry) and cached per spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import sympy

from ...core import sources
from ...core.symbols import (
    H,
    L,
    L_conv,
    L_dense,
    V,
    a,
    a_kv,
    d_emb,
    d_exp,
    d_ff,
    d_head,
    d_nope,
    d_rope,
    d_shared,
    d_v,
    k_conv,
    k_exp,
    n_cls,
    n_exp,
    n_pos,
    n_shared,
    n_type,
    r_kv,
    r_q,
)
from ...core.term import Term
from ...math.formula import Formula
from ...text import printing

if TYPE_CHECKING:
    from .spec import ModelSpec

SRC = "transformers"
if SRC not in sources.SOURCES:
    sources.register(SRC, "Hugging Face transformers 5.24.0: models/<model_type>/modeling_<model_type>.py "
                          "(nn.Linear, nn.Embedding and norm shapes)")

__all__ = ["Component", "Formula", "breakdown", "kind_formula", "kinds", "layer_formula", "mixed", "params_formula",
           "with_numbers"]


@dataclass(frozen=True)
class _Widths:
    """The symbolic sizes of one spec: standard relations where the spec leaves a size out."""

    head: sympy.Expr
    q: sympy.Expr
    kv: sympy.Expr
    ffn: sympy.Expr
    emb: sympy.Expr
    norm: sympy.Expr


def _widths(spec: ModelSpec) -> _Widths:
    head = H / a if spec.head_dim is None else d_head
    kv_heads = a if spec.kv_heads is None else a_kv
    unit = int(spec.norm_scale) + int(bool(spec.norm_bias))
    return _Widths(
        head=head, q=a * head, kv=kv_heads * head,
        ffn=4 * H if spec.ffn is None else d_ff,
        emb=H if spec.embed_dim is None else d_emb,
        norm=sympy.Integer(unit),
    )


def _term(key: str, title: str, expr: sympy.Expr, note: str = "") -> Term:
    return Term(key, title, expr, "params", SRC, note=note)


def _mlp(spec: ModelSpec, width: sympy.Expr) -> sympy.Expr:
    """One MLP (dense, one expert or one shared expert) of inner size ``width``."""
    matrices = 3 if spec.gated_mlp else 2
    bias = ((matrices - 1) * width + H) if spec.mlp_bias else 0
    return matrices * H * width + bias


def _latent_terms(spec: ModelSpec, w: _Widths) -> list[Term]:
    """DeepSeek multi-head latent attention: low-rank q, a shared compressed key/value latent, rope key."""
    qk = d_nope + d_rope
    bias = spec.qkv_bias  # attention_bias: on q_a, kv_a and o (modeling_deepseek_v3.py, DeepseekV3Attention)
    if spec.q_lora_rank is None:
        terms = [_term("attention.q", "query projection H → a·(d_nope + d_rope)", H * a * qk)]
    else:
        terms = [_term("attention.q_a", "query down-projection H → r_q", H * r_q + (r_q if bias else 0)),
                 _term("attention.q_norm", "RMSNorm of the query latent", r_q),
                 _term("attention.q_b", "query up-projection r_q → a·(d_nope + d_rope)", r_q * a * qk)]
    terms += [
        _term("attention.kv_a", "key/value down-projection H → r_kv + d_rope (latent and rope key)",
              H * (r_kv + d_rope) + ((r_kv + d_rope) if bias else 0)),
        _term("attention.kv_norm", "RMSNorm of the key/value latent", r_kv),
        _term("attention.kv_b", "key/value up-projection r_kv → a·(d_nope + d_v)", r_kv * a * (d_nope + d_v)),
        _term("attention.o", "output projection a·d_v → H", a * d_v * H + (H if bias else 0)),
    ]
    return terms


def _attention_terms(spec: ModelSpec, w: _Widths) -> list[Term]:
    if spec.is_latent:
        return _latent_terms(spec, w)
    terms = [
        _term("attention.q", "query projection H → a·d_head", H * w.q),
        _term("attention.k", "key projection H → a_kv·d_head", H * w.kv),
        _term("attention.v", "value projection H → a_kv·d_head", H * w.kv),
        _term("attention.o", "output projection a·d_head → H", w.q * H),
    ]
    if spec.qkv_bias:
        terms.append(_term("attention.qkv_bias", "query, key and value biases", w.q + 2 * w.kv))
    if spec.attn_out_bias:
        terms.append(_term("attention.o_bias", "output projection bias", H))
    qk_unit = int(spec.norm_scale) + int(bool(spec.qk_norm_bias))
    if spec.qk_norm and qk_unit:
        if spec.qk_norm_full:
            terms.append(_term("attention.qk_norm", "query and key norms over all heads (a·d_head and a_kv·d_head)",
                               qk_unit * (w.q + w.kv)))
        else:
            terms.append(_term("attention.qk_norm", "query and key norms over one head", 2 * qk_unit * w.head))
    if spec.attn_sinks:
        terms.append(_term("attention.sinks", "one learned attention-sink logit per head", a))
    if spec.cross_attention:
        cross = 2 * H * w.q + 2 * H * w.kv + (w.q + 2 * w.kv if spec.qkv_bias else 0) + (H if spec.attn_out_bias else 0)
        terms.append(_term("cross_attention", "cross-attention: q, k, v, o, their biases and its norm",
                           cross + w.norm * H))
    return terms


def _dense_terms(spec: ModelSpec, w: _Widths) -> list[Term]:
    terms = [_term("mlp.gate", "MLP gate projection H → d_ff", H * w.ffn)] if spec.gated_mlp else []
    terms += [_term("mlp.up", "MLP up projection H → d_ff", H * w.ffn),
              _term("mlp.down", "MLP down projection d_ff → H", w.ffn * H)]
    if spec.mlp_bias:
        terms.append(_term("mlp.bias", "MLP biases", (2 if spec.gated_mlp else 1) * w.ffn + H))
    return terms


def _moe_terms(spec: ModelSpec, w: _Widths, active: bool) -> list[Term]:
    expert_width = w.ffn if spec.expert_ffn is None else d_exp
    count, how = (k_exp, "top-k routed experts (active per token)") if active else (n_exp, "routed experts")
    terms = [_term("moe.router", "router H → n_exp", n_exp * H + (n_exp if spec.router_bias else 0)),
             _term("moe.experts", f"{how}: {'gated ' if spec.gated_mlp else ''}MLPs", count * _mlp(spec, expert_width))]
    if spec.shared_experts:
        shared_width = w.ffn if spec.shared_ffn is None else d_shared
        terms.append(_term("moe.shared", "shared experts (always active)", n_shared * _mlp(spec, shared_width)))
    if spec.shared_expert_gate:
        terms.append(_term("moe.shared_gate", "shared-expert gate H → 1", H))
    return terms


def _mlp_terms(spec: ModelSpec, w: _Widths, active: bool) -> list[Term]:
    return _moe_terms(spec, w, active) if spec.is_moe else _dense_terms(spec, w)


def _norm_terms(spec: ModelSpec) -> list[Term]:
    w = _widths(spec)
    if not (spec.norms_per_layer and w.norm):
        return []
    kind = "LayerNorm" if spec.norm == "layernorm" else "RMSNorm"
    return [_term("norms", f"{spec.norms_per_layer} × {kind} per layer", spec.norms_per_layer * w.norm * H)]


def _conv_terms(spec: ModelSpec) -> list[Term]:
    """LFM2's short convolution mixer: in_proj H → 3H, a depthwise conv of k_conv taps, out_proj H → H."""
    bias = spec.conv_bias
    return [
        _term("conv.in_proj", "convolution in-projection H → 3H (B, C, x)", 3 * H * H + (3 * H if bias else 0)),
        _term("conv.conv", "depthwise convolution: k_conv taps per channel", H * k_conv + (H if bias else 0)),
        _term("conv.out_proj", "convolution out-projection H → H", H * H + (H if bias else 0)),
    ]


def _common_terms(spec: ModelSpec) -> list[Term]:
    """What every layer has whatever its MLP kind: attention and norms."""
    return _attention_terms(spec, _widths(spec)) + _norm_terms(spec)


def _layer_terms(spec: ModelSpec, active: bool) -> list[Term]:
    return _attention_terms(spec, _widths(spec)) + _mlp_terms(spec, _widths(spec), active) + _norm_terms(spec)


def mixed(spec: ModelSpec) -> bool:
    """Whether the layers differ in their parameters (dense and MoE MLPs, or attention and convolution)."""
    return (spec.is_moe and spec.dense_layers > 0) or spec.conv_layers > 0


def kinds(spec: ModelSpec, active: bool = False) -> list[tuple[str, str, sympy.Expr, int, list[Term]]]:
    """(key, title, count, number, terms) per group of layers with the same parameters.

    One group (every layer alike) is ``("layers", ..., L, ...)``. Otherwise "layers" holds what all
    L layers have, and each kind its own part: with dense layers in a mixture of experts, the
    experts on L − L_dense and the dense MLP on L_dense; in a hybrid, attention on L − L_conv and
    the convolution mixer on L_conv.
    """
    if not mixed(spec):
        return [("layers", "L layers × per-layer parameters", L, spec.layers, _layer_terms(spec, active))]
    w = _widths(spec)
    hybrid = spec.conv_layers > 0
    moe_split = spec.is_moe and spec.dense_layers > 0
    shared = ([] if hybrid else _attention_terms(spec, w)) + ([] if moe_split else _mlp_terms(spec, w, active))
    what = " and ".join(filter(None, ("" if hybrid else "attention", "" if moe_split else "MLP", "norms")))
    out = [("layers", f"L layers × {what}", L, spec.layers, shared + _norm_terms(spec))]
    if hybrid:
        out += [("layers.attention", "L − L_conv attention layers × their attention", L - L_conv,
                 spec.layers - spec.conv_layers, _attention_terms(spec, w)),
                ("layers.conv", "L_conv convolution layers × their mixer", L_conv, spec.conv_layers, _conv_terms(spec))]
    if moe_split:
        out += [("layers.moe", "L − L_dense mixture-of-experts layers × their MLP", L - L_dense, spec.moe_layers,
                 _moe_terms(spec, w, active)),
                ("layers.dense", "L_dense dense layers × their MLP", L_dense, spec.dense_layers, _dense_terms(spec, w))]
    return out


def _outer_terms(spec: ModelSpec) -> list[Term]:
    """Terms outside the layers, in the order data flows through them."""
    w = _widths(spec)
    terms = [_term("embedding", "token embedding V × " + ("d_emb" if spec.embed_dim else "H"), V * w.emb)]
    if spec.positions:
        terms.append(_term("positions", "learned position embedding n_pos × H", n_pos * H))
    if spec.token_types:
        terms.append(_term("token_types", "token-type embedding n_type × H", n_type * H))
    if spec.embedding_norm and w.norm:
        terms.append(_term("embedding_norm", "embedding norm", w.norm * H))
    if spec.embed_dim is not None and spec.embed_dim != spec.hidden:
        terms.append(_term("projections", "project_in d_emb → H and project_out H → d_emb", 2 * w.emb * H))
    if spec.final_norm and w.norm:
        terms.append(_term("final_norm", "final norm", w.norm * H))
    if spec.mlm_transform:
        terms.append(_term("mlm_transform", "MLM head transform: dense H → H with bias, and its norm",
                           H * H + H + w.norm * H))
    if spec.lm_head and not spec.tied:
        terms.append(_term("lm_head", "output head (untied)", V * w.emb))
    if spec.lm_head and spec.lm_head_bias:
        if spec.mlm_transform and not spec.tied:
            terms.append(_term("lm_head_bias", "output head biases (decoder.bias and predictions.bias)", 2 * V,
                               "transformers 5 ties BERT's decoder bias to cls.predictions.bias only together with "
                               "the embeddings; untied, both count."))
        else:
            terms.append(_term("lm_head_bias", "output head bias", V))
    if spec.pooler:
        terms.append(_term("pooler", "pooler: dense H → H with bias", H * H + H))
    if spec.classifier:
        terms.append(_term("classifier", "classifier → n_cls", n_cls * w.emb + (n_cls if spec.classifier_bias else 0)))
    return terms


def _note(spec: ModelSpec) -> str:
    notes = []
    if spec.lm_head and spec.tied:
        notes.append("the output head shares the token embedding's tensor (counted once)")
    if spec.parallel_block:
        notes.append("attention and MLP run in parallel")
    if spec.is_moe:
        routed = f"top-{spec.top_k} per token" if spec.top_k else "top-k per token not given (num_experts_per_tok)"
        notes.append(f"{spec.experts} experts, {routed}")
    if spec.is_moe and spec.dense_layers:
        notes.append(f"{spec.moe_layers} mixture-of-experts layers and {spec.dense_layers} dense layers")
    if spec.conv_layers:
        notes.append(f"{spec.layers - spec.conv_layers} attention layers and {spec.conv_layers} convolution layers")
    if spec.is_latent:
        notes.append("multi-head latent attention (compressed key/value latent)")
    return "; ".join(notes)


@lru_cache(maxsize=256)
def layer_formula(spec: ModelSpec, active: bool = False) -> Formula:
    """Parameters of one layer of ``spec`` (with dense layers too: one MoE layer): one term per component."""
    values = spec.numbers()
    terms = _layer_terms(spec, active)
    f = Formula(f"{spec.name}.layer", f"Parameters of one {spec.name} layer", terms, source=SRC,
                name="N_layer", note=_note(spec))
    f.example = {s.name: values[s.name] for s in f.inputs}
    return f


@lru_cache(maxsize=256)
def kind_formula(spec: ModelSpec, key: str, active: bool = False) -> Formula:
    """Parameters of one layer of one group of ``kinds(spec)`` (key "layers", "layers.moe" or "layers.dense")."""
    values = spec.numbers()
    for k, title, _, _, terms in kinds(spec, active):
        if k == key:
            f = Formula(f"{spec.name}.{key}", f"Parameters per layer of {spec.name}: {title}", terms, source=SRC,
                        name="N_layer")
            f.example = {s.name: values[s.name] for s in f.inputs}
            return f
    raise KeyError(key)


@lru_cache(maxsize=256)
def params_formula(spec: ModelSpec, active: bool = False) -> Formula:
    """Total (or, with ``active``, per-token) parameters of ``spec``: each group of layers plus the rest."""
    groups = [_term(key, title, count * sympy.Add(*(t.expr for t in terms)))
              for key, title, count, _, terms in kinds(spec, active)]
    what = "Active parameters per token" if active else "Parameters"
    f = Formula(f"{spec.name}.{'active' if active else 'params'}", f"{what} of {spec.name} ({spec.model_type})",
                [*groups, *_outer_terms(spec)], source=SRC, name="N_active" if active else "N", note=_note(spec))
    values = spec.numbers()
    f.example = {s.name: values[s.name] for s in f.inputs}
    return f


@dataclass(frozen=True)
class Component:
    """One component's formula (per layer when ``per_layer`` is set, on ``layers`` layers) and exact counts."""

    key: str
    title: str
    expr: sympy.Expr
    per_layer: int | None
    total: int
    layers: int = 0


def breakdown(spec: ModelSpec, active: bool = False) -> list[Component]:
    """Every component of ``spec`` in formula order; per-layer ones times the layers that have them."""
    out: list[Component] = []
    for key, _, _, number, _ in kinds(spec, active):
        f = kind_formula(spec, key, active)
        out += [Component(t.key, t.title, t.expr, int(v), int(v) * number, number)
                for t, v in f.evaluate(f.example).terms]
    group_keys = {k for k, *_ in kinds(spec, active)}
    model = params_formula(spec, active).evaluate(params_formula(spec, active).example)
    out += [Component(t.key, t.title, t.expr, None, int(v)) for t, v in model.terms if t.key not in group_keys]
    return out


def with_numbers(formula: Formula, values: dict[str, int]) -> str:
    """The formula's terms, in order, with every symbol replaced by its number (unevaluated)."""
    return " + ".join(printing.text_with_numbers(t.expr, values) for t in formula.terms)
