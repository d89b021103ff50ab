"""A model type without a family table as a ``Network`` (issue 26): the generic torch path for the planner.

``generic_network(name, config)`` builds the model on the meta device (``probes.analyse``) and
answers the planner's questions from what the real module tree shows:

- parameters: the fitted formula (exact at the config's values), the input embedding and an untied
  output layer (what pipeline stages and quantised serving keep apart), the routed experts;
- activations for training: Korthikanti et al.'s accounting applied to the weight matrices. For a
  GPT-2 layer without dropout Korthikanti's 32·sbh (FlashAttention: no s² tensors) is exactly the
  inputs and outputs of its four matrices (QKV, output projection, the two MLP matrices), 2 bytes
  each; the generic path keeps that rule for every matrix it finds (a routed expert's × k/n), and
  one layer's share is the stack's total over L. What is not a matrix cannot be said from them:
  norms, dropout masks, attention scores without FlashAttention, state-space scans and convolutions
  are not counted (``cannot_say``);
- serving: the cache measured after a prefill on the meta device (``cache.cache_formula``), scaled
  to the KV element size; one layer's working set from its matrices' outputs;
- FLOPs: 2 per weight of every matrix (``flop_parts``); attention scores and other layers without
  matrices cannot be said.

Tensor parallelism needs to know which matrices split (a family table's knowledge): tp stays 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy

from ...core.errors import UnknownNameError, UserError
from ...core.symbols import B, H, L, S, SymbolScope
from ...core.term import Term
from ..shape import ModelShape, quantization_fields

ACTIVATIONS_NOTE = ("activations of a generic model: Korthikanti et al.'s accounting applied to its weight matrices "
                    "(each matrix's input and output kept for backward; a routed expert's × k/n); norms, dropout "
                    "masks, attention scores without FlashAttention and attention-free layers' own tensors "
                    "(state-space scans, convolutions) cannot be said from the matrices and are not counted")
SERVING_NOTE = ("serving working set of a generic model: one average layer's matrix outputs for the prompt chunk (an "
                "estimate); attention scores without FlashAttention cannot be said from the matrices and are not "
                "counted; the cache is measured after a prefill on the meta device")
FLOPS_NOTE = ("FLOPs of a generic model: 2 per weight of each matrix and the output layer; attention scores and "
              "layers without matrices (scans, convolutions) cannot be said from the matrices and are not counted")
TP_REFUSAL = ("tensor parallelism of a generic model cannot be said: which of its matrices split over t ranks is a "
              "family table's knowledge ('symbolic models'); plan tp 1")
NEEDS = ("H", "L", "V")  # the sizes the planner's inputs and logits terms use


def is_table_family(config: Mapping[str, Any]) -> bool:
    """Whether the config's model_type has a family table (counted without torch)."""
    from ..transformer.families import FAMILIES

    model_type = config.get("model_type")
    return isinstance(model_type, str) and model_type in FAMILIES  # a list or dict is the config reader's error


# Integer fields that size nothing in a decoder's parameters (positions are rotary in most families).
_NOT_SIZES = {"max_position_embeddings", "sliding_window", "max_window_layers", "num_experts_per_tok",
              "original_max_position_embeddings", "rope_theta"}


def same_layout(config: Mapping[str, Any]) -> str | None:
    """A table family that reads every size field this config has (the only kind worth suggesting)."""
    from ..transformer.families import FAMILIES
    from .probes import int_fields

    present = {p[0] for p in int_fields(config) if len(p) == 1} - _NOT_SIZES
    if not present:
        return None
    best: tuple[int, str] | None = None
    for model_type, family in FAMILIES.items():
        keys = {k for size in family.sizes.values() for k in size.keys}
        if present <= keys:
            score = len(keys & present)
            if best is None or score > best[0]:
                best = (score, model_type)
    return best[1] if best else None


def unsupported_message(config: Mapping[str, Any]) -> str:
    """One line for a model type without a table when torch is missing."""
    from ..transformer.families import FAMILIES
    from .probes import EXTRA, INSTALL_EXTRA, known_types

    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in known_types():  # a type transformers builds: what it needs, not a table it might be
        return (f"model_type {model_type!r} is a transformers model type without a family table (tables: "
                f"{', '.join(FAMILIES)}): counting it needs the '{EXTRA}' extra ({INSTALL_EXTRA}), which builds it "
                "on the meta device")
    like = same_layout(config)
    hint = f" (its size fields are those of {like!r}: set model_type to {like!r} if it is that layout)" if like else ""
    return (f"model_type {model_type!r} has no family table{hint}; tables: {', '.join(FAMILIES)}; "
            f"any other transformers model type needs the '{EXTRA}' extra ({INSTALL_EXTRA})")


def load_generic(name: str, config: Mapping[str, Any]) -> Any:
    """The GenericModel of a resolved config, or a one-line error without torch."""
    from . import probes as generic

    if not generic.torch_available():
        raise UnknownNameError(unsupported_message(config))
    archs = config.get("architectures")
    architecture = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    if set(config) - {"_source"} == {"model_type"} and architecture is None:  # a bare type: its cached default
        return generic.default_model(str(config["model_type"]))
    return generic.analyse(config, name=name, architecture=architecture)


@dataclass(frozen=True)
class GenericNetwork(ModelShape):
    """A model without a family table, as the planner sees it (see the module docstring)."""

    generic: Any = field(default=None, compare=False, repr=False)  # the probes.GenericModel behind it
    # the matrices one token passes: (name, rows, columns, instances; a routed expert's × k/n)
    per_token: tuple[tuple[str, sympy.Expr, sympy.Expr, sympy.Expr], ...] = field(default=(), compare=False)
    linear_width: sympy.Expr = field(default=sympy.Integer(0), compare=False)  # Σ (in + out) of every matrix
    output_width: sympy.Expr = field(default=sympy.Integer(0), compare=False)  # Σ out of every matrix
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def total(self) -> int:
        return int(self.generic.total)

    @property
    def scope(self) -> SymbolScope:
        """The symbols of this model's config fields (``probes.GenericModel.symbols``), outside the table."""
        return self.generic.symbols

    @property
    def active(self) -> int | None:
        return self.generic.active

    @property
    def layer_kinds(self) -> dict[str, int]:
        """Matrices of each name pattern (layer indices as ``*``): what the module tree shows."""
        return {name: int(count) for name, _, _, count in self.matrices}

    @property
    def pytorch_family(self) -> str | None:
        return None  # no measured saved-tensor model: activations korthikanti only

    @property
    def lora_targets(self) -> tuple[str, ...]:
        return ()

    @property
    def attention_bias(self) -> bool:
        return False

    def lora_layout(self) -> str:
        raise UserError(f"LoRA targets are modelled for GPT-2 and Llama-family module names; {self.name} "
                        f"({self.model_type}, generic torch path) has another layout")

    def layer_activations(self, variant: Any, recompute: str, tp: sympy.Expr | int, sp: bool) -> sympy.Expr:
        """One layer's share of the matrices' inputs and outputs (the stack's total over L); full recompute: its input."""
        if recompute == "full":
            return variant.act_bytes * S * B * H
        if recompute == "ops":
            raise UserError(f"recompute ops: {self.name} ({self.model_type}, generic torch path): the order of its "
                            "matmuls, which torchtitan's policy alternates over, is not known; use a family table")
        return variant.act_bytes * S * B * self.linear_width / L

    def activations_label(self, variant: Any) -> str:
        """What ``layer_activations`` counts, for the term's title: the matrices' inputs and outputs."""
        return f"its weight matrices' inputs and outputs, {variant.act_bytes} bytes each"

    def serving_width(self, tp: sympy.Expr | int) -> sympy.Expr:
        """One token's matrix outputs in one average layer, less the residual stream the planner adds (2H)."""
        return sympy.Max(self.output_width / L - 2 * H, 0)

    def cache_terms(self, tp: sympy.Expr | int, element: sympy.Expr, dtype: str, pp: sympy.Expr | int) -> list[Term]:
        """The cache measured after a prefill on the meta device, scaled from bfloat16 to ``element`` bytes."""
        from . import cache as generic_cache

        if "cache" not in self._cache:
            archs = self.config.get("architectures")
            self._cache["cache"] = generic_cache.cache_formula(
                self.config, architecture=archs[0] if isinstance(archs, list) and archs else None)
        c = self._cache["cache"]
        ratio = sympy.nsimplify(element) / generic_cache.BYTES_PER_ELEMENT
        where = f" ({dtype})" if dtype else ""
        return [Term("kv_cache", f"serving cache{where}: measured after a prefill on the meta device ({c.cache_class})",
                     c.expr * ratio / pp, "bytes", "transformers", "", "bytes = B·(c_0 + c_S·S + c_W·min(S, K)), "
                     "fitted to prefills of the real module tree in bfloat16 and scaled to the element size"
                     + ("; checked at a further point" if c.verified else "; not confirmed at a further point"))]

    def flop_parts(self) -> tuple[list[tuple[str, str, sympy.Expr, sympy.Expr]], sympy.Expr | None]:
        """(matmuls: key, title, weights of one instance, instances per token; the output layer's input width)."""
        out = [(name, f"{name} ({rows} → {cols})", rows * cols, count) for name, rows, cols, count in self.per_token]
        return out, (H if self.generic.head or self.generic.embedding else None)


def generic_network(name: str, config: Mapping[str, Any]) -> GenericNetwork:
    """The Network of a config without a family table (needs torch: a one-line error without it)."""
    m = load_generic(name, config)
    numbers = {**m.sizes, **m.values}
    missing = [s for s in NEEDS if s not in numbers]
    if missing:
        raise UserError(f"{m.name}: the generic torch path plans a model whose config gives {', '.join(NEEDS)} "
                        f"(hidden size, layers, vocabulary); this one lacks {', '.join(missing)}")
    top, experts = numbers.get("k_exp"), numbers.get("n_exp")
    share = sympy.Rational(top, experts) if m.is_moe and top and experts else sympy.Integer(1)
    matrices = tuple((pattern, sympy.Integer(rows), sympy.Integer(cols), sympy.Integer(count))
                     for pattern, rows, cols, count, _ in m.matrices)
    per_token = tuple((pattern, sympy.Integer(rows), sympy.Integer(cols), count * (share if routed else 1))
                      for pattern, rows, cols, count, routed in m.matrices)  # a token passes k of n experts
    kv = numbers.get("a_kv", numbers.get("a", 1))
    return GenericNetwork(
        name=m.name, model_type=m.model_type, numbers=numbers, params=m.params_formula(),
        head_dim=sympy.Integer(1), kv_heads=sympy.Integer(kv), ffn=sympy.Integer(numbers.get("d_ff", 0)),
        gated=False, moe=m.is_moe, first_stage=sympy.Integer(m.embedding), head=sympy.Integer(m.head),
        matrices=matrices, positions=0, source=f"{m.architecture} built on the meta device (generic torch path)",
        cache_kinds=(), experts=sympy.Integer(sum(r * c * n for _, r, c, n, routed in m.matrices if routed)),
        config={k: v for k, v in config.items() if k != "_source"}, kind="generic",
        label=f"{m.architecture}, generic torch path", tensor_parallel=False,
        cannot_say={"activations": ACTIVATIONS_NOTE, "serving": SERVING_NOTE, "flops": FLOPS_NOTE}, generic=m, per_token=per_token,
        linear_width=sympy.Add(*(n * (r + c) for _, r, c, n in per_token)), **quantization_fields(config),
        output_width=sympy.Add(*(n * c for _, _, c, n in per_token)))
