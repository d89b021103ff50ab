"""What the planner needs from a model: sizes, widths, parameter groups and weight matrices.

``ModelShape.from_spec`` reads a ``symbolic.architectures.ModelSpec`` (issue 3). Widths follow
the spec's own formulas: where the config leaves a size out, the standard relation is written
instead of a symbol (d_head = H/a, a_kv = a, d_ff = 4H), so a plan's total differentiates
through the same relations as the parameter count. ``config`` keeps the config's own fields for
what a parameter count does not need (dropout probabilities, the MLP activation's name), which
``activations="pytorch"`` reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sympy

from ..formula import Formula
from ..symbols import H, L, V, a, a_kv, d_emb, d_exp, d_ff, d_head, n_exp, n_pos, n_type

if TYPE_CHECKING:  # pragma: no cover
    from ..architectures import ModelSpec

# Parameter-formula terms held by the first pipeline stage (with the embedding) and by the last.
FIRST_STAGE_TERMS = ("embedding", "positions", "token_types", "embedding_norm")
HEAD_TERMS = ("lm_head", "lm_head_bias")


@dataclass(frozen=True)
class ModelShape:
    """A model as the memory planner sees it."""

    name: str
    model_type: str
    numbers: dict[str, int]  # every applicable symbol name -> value
    params: Formula  # N
    head_dim: sympy.Expr  # d_head or H/a
    kv_heads: sympy.Expr  # a_kv or a
    ffn: sympy.Expr  # d_ff or 4H (experts: d_exp or the dense width)
    gated: bool
    moe: bool
    first_stage: sympy.Expr  # parameters only the first pipeline stage holds (embeddings)
    head: sympy.Expr  # untied output head parameters (0 if tied or absent)
    matrices: tuple[tuple[str, sympy.Expr, sympy.Expr, sympy.Expr], ...]  # (name, rows, cols, how many)
    positions: int  # learned position rows (0: none, no hard context limit known)
    source: str = ""
    # the config.json fields (without "_source"); from a bare ModelSpec, the few its fields imply
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_spec(cls, spec: ModelSpec, config: Mapping[str, Any] | None = None) -> ModelShape:
        """The planner's view of an architectures.ModelSpec (and of its config, when read from one)."""
        params = spec.params_formula()
        head_dim = H / a if spec.head_dim is None else d_head
        kv_heads = a if spec.kv_heads is None else a_kv
        dense = 4 * H if spec.ffn is None else d_ff
        ffn = (d_exp if getattr(spec, "expert_ffn", None) is not None else dense) if spec.is_moe else dense
        emb = H if getattr(spec, "embed_dim", None) is None else d_emb
        by_key = {t.key: t for t in params.terms}
        first = sympy.Add(*(by_key[k].expr for k in FIRST_STAGE_TERMS if k in by_key))
        head = sympy.Add(*(by_key[k].expr for k in HEAD_TERMS if k in by_key))
        return cls(
            name=spec.name, model_type=spec.model_type, numbers=dict(spec.numbers()), params=params,
            head_dim=head_dim, kv_heads=kv_heads, ffn=ffn, gated=bool(spec.gated_mlp), moe=bool(spec.is_moe),
            first_stage=first, head=head, matrices=_matrices(spec, head_dim, kv_heads, ffn, emb),
            positions=int(getattr(spec, "positions", 0) or 0), source=getattr(spec, "source", ""),
            config=dict(config) if config is not None else _implied_config(spec),
        )

    # --- derived -------------------------------------------------------------------------
    def widths(self) -> dict[sympy.Symbol, sympy.Expr]:
        """Replacements for the generic activation terms (which use a_kv, d_head, d_ff)."""
        return {a_kv: self.kv_heads, d_head: self.head_dim, d_ff: self.ffn}

    def value(self, expr: sympy.Expr) -> sympy.Rational:
        """Exact value of an expression over this model's symbols."""
        point = {s: self.numbers[s.name] for s in expr.free_symbols if s.name in self.numbers}
        return sympy.Rational(expr.xreplace(point))

    def factored_entries(self) -> sympy.Expr:
        """Σ (rows + columns) over every weight matrix: Adafactor's factored state count."""
        return sympy.Add(*(n * (r + c) for _, r, c, n in self.matrices))

    def largest_matrix(self) -> tuple[str, sympy.Expr]:
        """The weight matrix with the most parameters (ZeRO-3 gathers one module at a time)."""
        name, rows, cols, _ = max(self.matrices, key=lambda m: self.value(m[1] * m[2]))
        return name, rows * cols

    @property
    def layers(self) -> int:
        return self.numbers["L"]

    @property
    def heads(self) -> int:
        return self.numbers["a"]

    @property
    def kv_head_count(self) -> int:
        return int(self.value(self.kv_heads))


def _matrices(spec: ModelSpec, head_dim: sympy.Expr, kv: sympy.Expr, ffn: sympy.Expr,
              emb: sympy.Expr) -> tuple[tuple[str, sympy.Expr, sympy.Expr, sympy.Expr], ...]:
    """(name, rows, columns, count) of the model's weight matrices; biases and norms left out."""
    q, k = a * head_dim, kv * head_dim
    experts = n_exp if spec.is_moe else 1
    out: list[tuple[str, sympy.Expr, sympy.Expr, sympy.Expr]] = [
        ("attention.q", H, q, L), ("attention.k", H, k, L), ("attention.v", H, k, L), ("attention.o", q, H, L),
    ]
    mlp = [("mlp.gate", H, ffn)] if spec.gated_mlp else []
    mlp += [("mlp.up", H, ffn), ("mlp.down", ffn, H)]
    out += [(name, r, c, L * experts) for name, r, c in mlp]
    if spec.is_moe:
        out.append(("moe.router", H, n_exp, L))
    out.append(("embedding", V, emb, sympy.Integer(1)))
    if getattr(spec, "positions", 0):
        out.append(("positions", n_pos, H, sympy.Integer(1)))
    if getattr(spec, "token_types", 0):
        out.append(("token_types", n_type, H, sympy.Integer(1)))
    if spec.lm_head and not spec.tied:
        out.append(("lm_head", V, emb, sympy.Integer(1)))
    return tuple(out)


def load(model: object) -> ModelShape:
    """A ModelShape from a preset name, a config path, a ModelSpec or a ModelShape."""
    if isinstance(model, ModelShape):
        return model
    from .. import architectures  # imported here: the planner works on any spec-like object too

    if isinstance(model, str):
        return ModelShape.from_spec(architectures.load(model), _read_config(model))
    if isinstance(model, architectures.ModelSpec):
        return ModelShape.from_spec(model)
    raise TypeError(f"expected a model name, a config path or a ModelSpec, not {type(model).__name__}")


def _read_config(text: str) -> dict[str, Any]:
    """The config.json fields of a preset name or config path (``architectures.load`` has checked it)."""
    import os
    from pathlib import Path

    from .. import architectures

    looks_like_path = os.sep in text or "/" in text or text.endswith(".json")
    if not looks_like_path and text.strip().lower() in architectures.preset_names():
        data = architectures.preset_config(text.strip().lower())
    else:
        path = Path(text).expanduser()
        data = architectures.read_json(path / "config.json" if path.is_dir() else path)
    return {k: v for k, v in data.items() if k != "_source"}


def _implied_config(spec: ModelSpec) -> dict[str, Any]:
    """What a ModelSpec without its config says about the fields ``config`` holds."""
    out: dict[str, Any] = {"model_type": spec.model_type}
    if spec.norm == "rmsnorm":
        out["rms_norm_eps"] = 1e-6
    if spec.gated_mlp:
        out["intermediate_size"] = spec.resolved_ffn
    return out
