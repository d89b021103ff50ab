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

from .. import printing, sources
from ..formula import Formula
from ..symbols import (
    H,
    L,
    V,
    a,
    a_kv,
    d_emb,
    d_exp,
    d_ff,
    d_head,
    d_shared,
    k_exp,
    n_cls,
    n_exp,
    n_pos,
    n_shared,
    n_type,
)
from ..term import Term

if TYPE_CHECKING:
    from .spec import ModelSpec

SRC = "transformers"
if SRC not in sources.SOURCES:
    sources.register(SRC, "Hugging Face transformers 5.24.0: models/<model_type>/modeling_<model_type>.py "
                          "(nn.Linear, nn.Embedding and norm shapes)")

__all__ = ["Component", "Formula", "breakdown", "layer_formula", "params_formula", "with_numbers"]


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


def _attention_terms(spec: ModelSpec, w: _Widths) -> list[Term]:
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
    if spec.qk_norm and w.norm:
        terms.append(_term("attention.qk_norm", "query and key norms over one head", 2 * w.norm * w.head))
    if spec.cross_attention:
        cross = 2 * H * w.q + 2 * H * w.kv + (w.q + 2 * w.kv if spec.qkv_bias else 0) + (H if spec.attn_out_bias else 0)
        terms.append(_term("cross_attention", "cross-attention: q, k, v, o, their biases and its norm",
                           cross + w.norm * H))
    return terms


def _mlp_terms(spec: ModelSpec, w: _Widths, active: bool) -> list[Term]:
    if not spec.is_moe:
        terms = [_term("mlp.gate", "MLP gate projection H → d_ff", H * w.ffn)] if spec.gated_mlp else []
        terms += [_term("mlp.up", "MLP up projection H → d_ff", H * w.ffn),
                  _term("mlp.down", "MLP down projection d_ff → H", w.ffn * H)]
        if spec.mlp_bias:
            terms.append(_term("mlp.bias", "MLP biases", (2 if spec.gated_mlp else 1) * w.ffn + H))
        return terms
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


def _layer_terms(spec: ModelSpec, active: bool) -> list[Term]:
    w = _widths(spec)
    terms = _attention_terms(spec, w) + _mlp_terms(spec, w, active)
    if spec.norms_per_layer and w.norm:
        kind = "LayerNorm" if spec.norm == "layernorm" else "RMSNorm"
        terms.append(_term("norms", f"{spec.norms_per_layer} × {kind} per layer", spec.norms_per_layer * w.norm * H))
    return terms


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
        notes.append(f"{spec.experts} experts, top-{spec.top_k} per token")
    return "; ".join(notes)


@lru_cache(maxsize=256)
def layer_formula(spec: ModelSpec, active: bool = False) -> Formula:
    """Parameters of one layer of ``spec``: one term per component."""
    values = spec.numbers()
    terms = _layer_terms(spec, active)
    f = Formula(f"{spec.name}.layer", f"Parameters of one {spec.name} layer", terms, source=SRC,
                name="N_layer", note=_note(spec))
    f.example = {s.name: values[s.name] for s in f.inputs}
    return f


@lru_cache(maxsize=256)
def params_formula(spec: ModelSpec, active: bool = False) -> Formula:
    """Total (or, with ``active``, per-token) parameters of ``spec``: L layers plus the rest."""
    layer = layer_formula(spec, active)
    layers = _term("layers", "L layers × per-layer parameters", L * layer.expr)
    what = "Active parameters per token" if active else "Parameters"
    f = Formula(f"{spec.name}.{'active' if active else 'params'}", f"{what} of {spec.name} ({spec.model_type})",
                [layers, *_outer_terms(spec)], source=SRC, name="N_active" if active else "N", note=_note(spec))
    values = spec.numbers()
    f.example = {s.name: values[s.name] for s in f.inputs}
    return f


@dataclass(frozen=True)
class Component:
    """One component's formula (per layer when ``per_layer`` is set) and exact counts."""

    key: str
    title: str
    expr: sympy.Expr
    per_layer: int | None
    total: int


def breakdown(spec: ModelSpec, active: bool = False) -> list[Component]:
    """Every component of ``spec`` in formula order; the per-layer ones are multiplied by L."""
    layer = layer_formula(spec, active).evaluate(layer_formula(spec, active).example)
    model = params_formula(spec, active).evaluate(params_formula(spec, active).example)
    out = [Component(t.key, t.title, t.expr, int(v), int(v) * spec.layers) for t, v in layer.terms]
    out += [Component(t.key, t.title, t.expr, None, int(v)) for t, v in model.terms if t.key != "layers"]
    return out


def with_numbers(formula: Formula, values: dict[str, int]) -> str:
    """The formula's terms, in order, with every symbol replaced by its number (unevaluated)."""
    return " + ".join(printing.text_with_numbers(t.expr, values) for t in formula.terms)
