"""What the planner needs from a model: sizes, widths, parameter groups and weight matrices.

``ModelShape.from_spec`` reads a ``symbolic.networks.transformer.ModelSpec`` (issue 3). Widths follow
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

from ..core.symbols import (
    H,
    L,
    L_conv,
    L_dense,
    SymbolScope,
    V,
    a,
    a_kv,
    d_emb,
    d_exp,
    d_ff,
    d_h,
    d_head,
    d_in,
    d_nope,
    d_rope,
    d_shared,
    d_v,
    n_exp,
    n_out,
    n_pos,
    n_shared,
    n_type,
    r_kv,
    r_q,
)
from ..core.term import Term
from ..library.inference import CacheKind, default_kinds
from ..math.formula import Formula

if TYPE_CHECKING:  # pragma: no cover
    from .transformer import ModelSpec

# The config field that says how long a context the model was trained for (rotary models run past it).
TRAINED_FIELD = "max_position_embeddings"
# What running past it does, said by the report and by the command line's warning alike.
PAST_TRAINED = ("a rotary model run past its trained length usually loses quality unless a scaling scheme "
                "(e.g. RoPE scaling) is applied")

# Model types whose Hugging Face configs set attention and hidden dropout to 0.1; the others use 0
# for attention (OPT and phi-2 keep a 0.1 hidden dropout; --dropout counts Korthikanti's masks).
DROPOUT_TYPES = ("gpt2", "bert")

# Parameter-formula terms held by the first pipeline stage (with the embedding) and by the last.
FIRST_STAGE_TERMS = ("embedding", "positions", "token_types", "embedding_norm")
HEAD_TERMS = ("lm_head", "lm_head_bias")


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order, found in O(√n) steps (pipeline degrees, GPU splits)."""
    low, high = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            low.append(d)
            if d * d != n:
                high.append(n // d)
        d += 1
    return low + high[::-1]


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
    # attention kinds as the KV cache sees them (full, sliding, latent), each with its layer count
    cache_kinds: tuple[CacheKind, ...] = field(default=(CacheKind("full", L),), compare=False)
    # mixture-of-experts layers (L − L_dense with dense layers; 0 without experts)
    moe_layers: sympy.Expr = field(default=sympy.Integer(0), compare=False)
    # parameters of all routed experts of all layers (what expert parallelism splits; 0 without experts)
    experts: sympy.Expr = field(default=sympy.Integer(0), compare=False)
    # the config.json fields (without "_source"); from a bare ModelSpec, the few its fields imply
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # --- the Network interface's capabilities (networks.network): what the planner asks instead of a type
    kind: str = field(default="transformer", compare=False)  # which implementation (shown, never compared)
    sequence: bool = field(default=True, compare=False)  # a token sequence: seq, attention, dropout, cache apply
    has_attention: bool = field(default=True, compare=False)
    tensor_parallel: bool = field(default=True, compare=False)  # which matrices split over t ranks is known
    dropout_default: bool = field(default=False, compare=False)  # the config trains with dropout masks
    label: str = field(default="", compare=False)  # what the network is, in a sentence ("article A's network")
    # what it knows it cannot say, one line each, by topic ("activations", "serving", "flops")
    cannot_say: Mapping[str, str] = field(default_factory=dict, compare=False)
    # the library's saved-tensor model of this network (activations_pytorch's family); "": from its config
    saved_family: str = field(default="", compare=False)
    spec: Any = field(default=None, compare=False, repr=False)  # the ModelSpec of a family table (FLOPs), else None
    # the weight format the checkpoint ships in (its config's quantization_config; networks.quantization), else None
    quantization: str | None = field(default=None, compare=False)
    quantization_rules: Any = field(default=None, compare=False, repr=False)  # quantization.Quantization, or None

    @classmethod
    def from_spec(cls, spec: ModelSpec, config: Mapping[str, Any] | None = None) -> ModelShape:
        """The planner's view of an architectures.ModelSpec (and of its config, when read from one)."""
        _require_top_k(spec)
        params = spec.params_formula()
        moe_layers = (L - L_dense if getattr(spec, "dense_layers", 0) else L) if spec.is_moe else sympy.Integer(0)
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
            cache_kinds=default_kinds(sliding=bool(getattr(spec, "sliding_layers", 0)),
                                      latent=bool(getattr(spec, "kv_lora_rank", 0)),
                                      all_sliding=getattr(spec, "sliding_layers", 0) == spec.layers,
                                      heads=a if getattr(spec, "cache_all_heads", False) else a_kv,
                                      conv=bool(getattr(spec, "conv_layers", 0))),
            moe_layers=moe_layers,
            experts=moe_layers * spec.layer_formula().term("moe.experts").expr if spec.is_moe else sympy.Integer(0),
            dropout_default=spec.model_type in DROPOUT_TYPES, spec=spec, **quantization_fields(config or {}),
        )

    # --- derived -------------------------------------------------------------------------
    @property
    def trained_context(self) -> int | None:
        """The context the config says the model was trained for, where learned positions do not cap it."""
        return trained_context(self.config, self.positions)

    @property
    def scope(self) -> SymbolScope | None:
        """Where this network's own symbols are (None: every symbol it uses is in the symbol table)."""
        return None

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

    # --- the Network interface (networks.network) ------------------------------------------
    @property
    def total(self) -> int:
        """The parameter count at this model's values."""
        return int(self.params.evaluate(self.params.restrict(self.numbers)).total)

    @property
    def active(self) -> int | None:
        """Parameters one token uses (mixtures of experts), else None."""
        if not self.moe or self.spec is None or not getattr(self.spec, "active_defined", True):
            return None
        return int(self.spec.active_param_count())

    @property
    def layer_kinds(self) -> dict[str, int]:
        """Layers of each kind (attention kinds as the cache sees them, MoE layers; an MLP network's one block)."""
        if not self.sequence:
            return {"mlp": 1}
        out = {k.kind: int(self.value(k.count)) for k in self.cache_kinds}
        if self.moe:
            out["moe"] = int(self.value(self.moe_layers))
        return out

    @property
    def pytorch_family(self) -> str | None:
        """The library's saved-tensor model of this network (``library.activations_pytorch``), or None."""
        if self.saved_family:
            return self.saved_family
        from ..library import activations_pytorch as pyacts

        return pyacts.family_for(self.config or {"model_type": self.model_type})[0]

    def lora_layout(self) -> str:
        """'gpt2' or 'llama': whose module names its linear layers have (a UserError otherwise)."""
        from ..library import lora

        return lora.family_of(self.model_type, self.pytorch_family or "")

    def lora_modules(self, targets: tuple[str, ...]) -> tuple[tuple[str, ...], bool]:
        """The modules peft gives adapters for ``targets`` (() for peft's default), and whether it was the default."""
        from ..library import lora

        return lora.resolve_targets(self.lora_layout(), self.model_type, targets)

    @property
    def lora_targets(self) -> tuple[str, ...]:
        """peft's default LoRA targets for this network (empty when peft has none)."""
        from ..library import lora

        return tuple(lora.DEFAULT_TARGETS.get(self.model_type, ()))

    @property
    def attention_bias(self) -> bool:
        """Whether the attention projections have biases (Qwen2's do unless its config says otherwise)."""
        return bool(self.config.get("attention_bias", self.model_type == "qwen2"))

    def layer_activations(self, variant: Any, recompute: str, tp: sympy.Expr | int, sp: bool) -> sympy.Expr:
        """Bytes one layer saves for backward per micro-batch (Korthikanti's generalised layer, these widths)."""
        from ..library import activations as acts

        return acts.per_layer(variant, recompute, tp, sp).xreplace(self.widths())

    def activations_label(self, variant: Any) -> str:
        """What ``layer_activations`` counts, for the term's title: the layer variant's name."""
        return str(variant.name)

    def serving_width(self, tp: sympy.Expr | int) -> sympy.Expr:
        """The MLP intermediates one token of one layer holds while serving (gate/up outputs, × k experts)."""
        from ..library import inference as infer

        return infer.mlp_width(self.ffn, self.gated, self.moe, tp)

    def cache_terms(self, tp: sympy.Expr | int, element: sympy.Expr, dtype: str, pp: sympy.Expr | int) -> list[Term]:
        """The serving cache: one term per attention kind, in this model's widths."""
        from ..library import inference as infer

        return [kv.replace(expr=kv.expr.xreplace(self.widths()))
                for kv in infer.cache_terms(self.cache_kinds, tp, element, dtype, pp)]

    def pytorch_saved(self, setup: Any, refused: tuple[str, ...] = (), recompute: int = 0,
                      sharded: bool = False) -> Any:
        """Its own saved-tensor model (``activations_pytorch.SavedModel``) under ``setup``, or None: the library's.

        ``refused``: the regime's options the planner applies to the library's model (LoRA, recompute...)
        that a network with its own model must refuse (a torch module probed on the meta device);
        ``recompute`` N > 0: every N-th of its ``checkpoint_blocks`` checkpointed (recompute full); ``sharded``:
        under FSDP2, its step's backward without the parameters' gradients (FSDP2's terms count them).
        """
        return None

    @property
    def checkpoint_blocks(self) -> tuple[str, ...]:
        """The blocks a network that measures its own step checkpoints under recompute full; () for the others
        (the table families' layers are the planner's own, ``layers``)."""
        return ()

    @property
    def fsdp_units(self) -> tuple[int, ...] | None:
        """The parameters of each FSDP2 ``fully_shard`` unit below the root, for a network that measures its own
        step (the root holds the rest); None where the planner's FSDP2 terms apply (its layers)."""
        return None

    @property
    def fsdp_root_last(self) -> int:
        """The elements of the root unit's last parameter, for a network that measures its own step (else 0)."""
        return 0

    def pytorch_step(self, setup: Any, saved: Any, *, optimizer: str, accumulate: int = 1,
                     in_backward: bool = False, recompute: int = 0, sharded: bool | str = False) -> Any:
        """Its own training step (``peak_pytorch.StepModel``), or None: the library's ``step``."""
        return None

    def inference_terms(self, regime: Any) -> Any:
        """Its own inference memory ((resident terms, {phase: terms}, notes)), or None: the planner's serving terms."""
        return None

    @property
    def forward_inference(self) -> bool:
        """Whether a network without a token sequence plans inference itself (``inference_terms``)."""
        return False

    @property
    def generates(self) -> bool:
        """Whether its inference is an encoder-decoder's generate loop (``--beams``, ``--sample`` apply), none here."""
        return False

    @property
    def input_sizes(self) -> tuple[str, ...]:
        """The forward's input size names besides the batch and seq (a torch module's H, W, S...), none here."""
        return ()

    def varying(self, names: tuple[str, ...], regime: Any) -> Any:
        """(this network with input sizes ``names`` grown by one symbol, the symbol's name, each size's unit):
        what ``fit`` of an input size solves; a network without such sizes refuses in one line."""
        from ..core.errors import UserError

        raise UserError(f"{self.name} has no input sizes to grow ({', '.join(names)}): ask for the batch, seq or gpus")

    def flop_parts(self) -> tuple[list[tuple[str, str, sympy.Expr, sympy.Expr]], sympy.Expr | None]:
        """(matmuls: key, title, weights of one instance, instances per token; no output layer) from ``matrices``.

        What ``time`` counts for a network without layer formulas (article A's): 2 FLOPs per weight per token.
        """
        return [(name, f"{name} ({rows} → {cols})", rows * cols, count) for name, rows, cols, count in self.matrices], None

    @property
    def own_loss(self) -> str | None:
        """The loss a network brings itself (a torch module's), which the planner's ``loss`` option then shows; None here."""
        return None

    def own_flops(self, batch: int, precision: str, recompute: int = 0, lora: tuple[Any, ...] = ()) -> Any:
        """Its own FLOPs per sample at micro-batch ``batch`` (``module.flops.OwnFlops``: counted), or None: ``time``'s.

        ``recompute`` N > 0: every N-th of its ``checkpoint_blocks`` checkpointed (their forward counted again).

        None for a network whose FLOPs ``time`` derives from its weight matrices (``flop_parts``, the family tables).
        """
        return None

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
    out: list[tuple[str, sympy.Expr, sympy.Expr, sympy.Expr]]
    if getattr(spec, "kv_lora_rank", 0):  # DeepSeek latent attention
        qk = d_nope + d_rope
        out = ([("attention.q", H, a * qk, L)] if spec.q_lora_rank is None else
               [("attention.q_a", H, r_q, L), ("attention.q_b", r_q, a * qk, L)])
        out += [("attention.kv_a", H, r_kv + d_rope, L), ("attention.kv_b", r_kv, a * (d_nope + d_v), L),
                ("attention.o", a * d_v, H, L)]
    else:
        out = [("attention.q", H, q, L), ("attention.k", H, k, L), ("attention.v", H, k, L),
               ("attention.o", q, H, L)]
    if getattr(spec, "conv_layers", 0):  # a hybrid: attention on L − L_conv layers, convolutions on the rest
        out = [(name, r, c, L - L_conv) for name, r, c, _ in out]
        out += [("conv.in_proj", H, 3 * H, L_conv), ("conv.out_proj", H, H, L_conv)]
    dense_layers = getattr(spec, "dense_layers", 0)
    moe_layers = (L - L_dense if dense_layers else L) if spec.is_moe else 0

    def mlp(width: sympy.Expr) -> list[tuple[str, sympy.Expr, sympy.Expr]]:
        gate = [("mlp.gate", H, width)] if spec.gated_mlp else []
        return gate + [("mlp.up", H, width), ("mlp.down", width, H)]

    if spec.is_moe:
        out += [(name, r, c, moe_layers * n_exp) for name, r, c in mlp(ffn)]
        out.append(("moe.router", H, n_exp, moe_layers))
        if spec.shared_experts:
            shared = d_shared if spec.shared_ffn is not None else ffn
            out += [("moe.shared." + name[4:], r, c, moe_layers * n_shared) for name, r, c in mlp(shared)]
        if dense_layers:
            dense = 4 * H if spec.ffn is None else d_ff
            out += [("dense." + name, r, c, L_dense) for name, r, c in mlp(dense)]
    else:
        out += [(name, r, c, L) for name, r, c in mlp(ffn)]
    out.append(("embedding", V, emb, sympy.Integer(1)))
    if getattr(spec, "positions", 0):
        out.append(("positions", n_pos, H, sympy.Integer(1)))
    if getattr(spec, "token_types", 0):
        out.append(("token_types", n_type, H, sympy.Integer(1)))
    if spec.lm_head and not spec.tied:
        out.append(("lm_head", V, emb, sympy.Integer(1)))
    return tuple(out)


def quantization_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """``quantization`` and ``quantization_rules`` of a network from its config's quantization_config."""
    from .quantization import read

    rules = read(config)
    return {"quantization": rules.format if rules else None, "quantization_rules": rules}


def _require_top_k(spec: ModelSpec) -> None:
    """A one-line refusal of a mixture of experts without its top-k: a plan's activations and FLOPs need it."""
    if not getattr(spec, "active_defined", True):
        from .transformer.spec import ACTIVE_UNDEFINED, ModelSpecError

        raise ModelSpecError(f"{spec.name}: {ACTIVE_UNDEFINED}; a plan needs it (the routed experts' activations "
                             "and FLOPs): set num_experts_per_tok in the config ('symbolic params' gives the total)")


def trained_context(config: Mapping[str, Any], positions: int = 0) -> int | None:
    """``max_position_embeddings`` of a config, unless learned positions make it a hard limit (``positions``).

    Rotary models run past it, usually with degraded quality: a warning (``context_warning``, the
    report's summary, ``symbolic fit --for seq``), not a cap.
    """
    value = None if positions else config.get(TRAINED_FIELD)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def trained_phrase(value: int, name: str, source: str = TRAINED_FIELD) -> str:
    """'the 8,192 positions llama-3-70b was trained for (max_position_embeddings in its config)'."""
    return f"the {value:,} positions {name} was trained for ({source} in its config)"


def context_warning(config: Mapping[str, Any], name: str, seq: int, positions: int = 0) -> str | None:
    """One line when ``seq`` is beyond the context the model was trained for, else None (what the CLI warns)."""
    trained = trained_context(config, positions)
    if trained is None or seq <= trained:
        return None
    return f"seq {seq:,} is beyond {trained_phrase(trained, name)}: the plan is computed, but {PAST_TRAINED}"


# article A's network as a planner model: with the nn.Linear biases, and without them
ARTICLE_A_MODELS = {"mlp": True, "mlp-nobias": False}


def article_a_shape(name: str = "mlp", widths: Mapping[str, int] | None = None) -> ModelShape:
    """Article A's network (gat, up, down, out; 2048/4096/10) as a model the planner trains.

    ``mlp`` has the nn.Linear biases (what PyTorch builds), ``mlp-nobias`` only the weights (what
    the article counts). Only ``activations="pytorch"`` plans it (``library.peak_pytorch``'s mlp).
    ``widths``: other values of d_in, d_h, n_out (``--arg d_in=512``: issue 29).
    """
    from ..library import article_a

    unknown = sorted(set(widths or {}) - set(article_a.NETWORK))
    if unknown:
        from ..core.errors import UnknownNameError

        raise UnknownNameError(f"{name} has no argument {unknown[0]!r}; its widths are {', '.join(article_a.NETWORK)}")
    bad = [k for k, v in (widths or {}).items() if type(v) is not int or v < 1]
    if bad:
        from ..core.errors import UserError

        raise UserError(f"{name}: {bad[0]} must be a positive integer")
    bias = ARTICLE_A_MODELS[name]
    params = article_a.params_with_bias if bias else article_a.params
    one = sympy.Integer(1)
    matrices = (("gat", d_in, d_h, one), ("up", d_h, d_h, one), ("down", d_h, d_in, one), ("out", d_in, n_out, one))
    return ModelShape(
        name=name, model_type="mlp", numbers={**article_a.NETWORK, **(widths or {})}, params=params, head_dim=one, kv_heads=one,
        ffn=d_h, gated=False, moe=False, first_stage=sympy.Integer(0), head=sympy.Integer(0), matrices=matrices,
        positions=0, source="article A (symbolic.library.article_a)", cache_kinds=(),
        config={"model_type": "mlp", "bias": bias, "use_cache": False}, kind="article-a",
        label="article A's network", sequence=False, has_attention=False, saved_family=article_a.SAVED_FAMILY)


def load(model: object) -> ModelShape:
    """A ModelShape from a preset name, a config path, a ModelSpec or a ModelShape ("mlp": article A's network).

    The family tables and article A only; ``networks.network.load`` takes any model (the generic path too).
    """
    if isinstance(model, ModelShape):
        return model
    if isinstance(model, str) and model in ARTICLE_A_MODELS:
        return article_a_shape(model)
    from . import transformer as architectures  # imported here: the planner works on any spec-like object too

    if isinstance(model, str):
        return ModelShape.from_spec(architectures.load(model), architectures.resolve_config(model)[1])
    if isinstance(model, architectures.ModelSpec):
        return ModelShape.from_spec(model)
    raise TypeError(f"expected a model name, a config path or a ModelSpec, not {type(model).__name__}")


def _implied_config(spec: ModelSpec) -> dict[str, Any]:
    """What a ModelSpec without its config says about the fields ``config`` holds."""
    out: dict[str, Any] = {"model_type": spec.model_type}
    if spec.norm == "rmsnorm":
        out["rms_norm_eps"] = 1e-6
    if spec.gated_mlp:
        out["intermediate_size"] = spec.resolved_ffn
    return out
