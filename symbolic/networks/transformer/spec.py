"""ModelSpec: the sizes and structure of one real transformer that decide its parameter count.

A spec is plain, validated data. Its parameter count is never computed here by arithmetic: the
methods build the model's parameter formula (``formulas.py``), a ``Formula`` of symbolic terms,
and evaluate it at the spec's numbers.

Three sizes may be left as ``None``, meaning "by the standard relation", and the formula then
writes that relation instead of a new symbol: ``kv_heads`` (= heads, multi-head attention),
``head_dim`` (= hidden / heads) and ``ffn`` (= 4·hidden). That is how GPT-2's formula reads
``L·(12·H^2 + 13·H) + ...``: its config gives neither a head size nor ``n_inner``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ...core.errors import UserError, single_line
from . import formulas

NORMS = ("layernorm", "rmsnorm")
MAX_SIZE = 2**40
# Layers are counted one by one in places (layer-kind patterns, a model built on the meta device), so
# their bound is realistic rather than astronomical: the deepest published transformers have a few
# hundred layers (GPT-3 96, Llama-3 405B 126) and research models about a thousand (DeepNet, 1,000
# layers); 2**16 leaves ample room above both and keeps every per-layer walk in milliseconds.
MAX_LAYERS = 2**16

_POSITIVE_OR_NONE = ("kv_heads", "head_dim", "ffn", "embed_dim", "expert_ffn", "shared_ffn", "q_lora_rank")
_POSITIVE = ("hidden", "layers", "heads", "vocab")
_COUNTS = ("norms_per_layer", "positions", "token_types", "classifier", "experts", "top_k", "shared_experts",
           "dense_layers", "sliding_layers", "window", "kv_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim",
           "conv_layers", "conv_kernel")


class ModelSpecError(UserError):
    """A model description that cannot be counted; the message is one line."""


# Why a mixture of experts with ``top_k`` 0 has no active count (transformers' DeepseekV2Config leaves
# num_experts_per_tok None by default): the total is defined, the parameters a token uses are not.
ACTIVE_UNDEFINED = ("num_experts_per_tok is not set (null, as in transformers' DeepseekV2Config default): how many "
                    "experts each token is routed to is not given, so the active parameter count is undefined")


@dataclass(frozen=True)
class ModelSpec:
    """The fields of a transformer that change its parameter count (see the module docstring).

    Biases are named by the linear layers that carry them; ``norm`` is "layernorm" (scale and,
    unless ``norm_bias=False``, bias) or "rmsnorm" (scale only); ``norm_scale=False`` is a
    LayerNorm without affine parameters. ``experts > 0`` replaces each layer's MLP by a mixture
    of experts routed to ``top_k`` of them (0: not given, so the total is defined and the active
    count is not: ``active_defined``); ``expert_ffn`` and ``shared_ffn`` default to ``ffn``.
    ``embed_dim`` is a word-embedding width other than ``hidden`` (OPT's project_in/out).
    """

    name: str
    model_type: str
    hidden: int
    layers: int
    heads: int
    vocab: int
    kv_heads: int | None = None
    head_dim: int | None = None
    ffn: int | None = None
    gated_mlp: bool = False
    # which linear layers carry biases
    qkv_bias: bool = False
    attn_out_bias: bool = False
    mlp_bias: bool = False
    lm_head_bias: bool = False
    # norms and block structure
    norm: str = "layernorm"
    norm_bias: bool | None = None
    norm_scale: bool = True
    norms_per_layer: int = 2
    final_norm: bool = True
    qk_norm: bool = False
    qk_norm_full: bool = False  # q/k norms over all heads' widths (a·d_head, a_kv·d_head), not one head
    qk_norm_bias: bool | None = None  # None: as the layer norms
    attn_sinks: bool = False  # one learned sink logit per head (gpt-oss)
    parallel_block: bool = False
    cross_attention: bool = False
    # embeddings
    positions: int = 0
    token_types: int = 0
    embedding_norm: bool = False
    embed_dim: int | None = None
    # output heads
    lm_head: bool = True
    tied: bool = False
    mlm_transform: bool = False
    pooler: bool = False
    classifier: int = 0
    classifier_bias: bool = False
    # mixture of experts
    experts: int = 0
    top_k: int = 0
    expert_ffn: int | None = None
    router_bias: bool = False
    shared_experts: int = 0
    shared_ffn: int | None = None
    shared_expert_gate: bool = False
    # latent attention (DeepSeek MLA): on when kv_lora_rank > 0; q_lora_rank None is a full q_proj
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    qk_nope_dim: int = 0
    v_head_dim: int = 0
    # layer kinds: MoE models' dense-MLP layers; sliding-window (or chunked) attention layers
    dense_layers: int = 0
    dense_at: tuple[int, ...] = ()  # which layers (0-based) are the dense ones; empty: the count alone is known
    sliding_layers: int = 0
    window: int = 0
    # the cache holds keys and values broadcast to all a heads (Falcon's new decoder architecture)
    cache_all_heads: bool = False
    # hybrids: layers whose mixer is a short depthwise convolution (LFM2) instead of attention
    conv_layers: int = 0
    conv_kernel: int = 0
    conv_bias: bool = False
    conv_at: tuple[int, ...] = ()  # which layers (0-based) are the convolution ones; empty: the count alone is known
    # where it comes from (display only)
    architecture: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", single_line(self.name))  # a folder's name may hold a line break
        if self.norm_bias is None:
            object.__setattr__(self, "norm_bias", self.norm == "layernorm" and self.norm_scale)
        if self.qk_norm_bias is None:
            object.__setattr__(self, "qk_norm_bias", bool(self.norm_bias))
        _validate(self)

    # --- resolved sizes ------------------------------------------------------------------
    @property
    def resolved_kv_heads(self) -> int:
        """Key/value heads (``heads`` when not given)."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def resolved_head_dim(self) -> int:
        """Width of one head (``hidden // heads`` when not given)."""
        return self.hidden // self.heads if self.head_dim is None else self.head_dim

    @property
    def resolved_ffn(self) -> int:
        """Dense feed-forward inner size (``4 · hidden`` when not given)."""
        return 4 * self.hidden if self.ffn is None else self.ffn

    @property
    def resolved_embed_dim(self) -> int:
        """Width of the word embedding (``hidden`` when not given)."""
        return self.hidden if self.embed_dim is None else self.embed_dim

    @property
    def is_moe(self) -> bool:
        """Whether the model's MLPs are mixtures of experts (all layers but ``dense_layers``)."""
        return self.experts > 0

    @property
    def active_defined(self) -> bool:
        """Whether the parameters a token uses are defined (a mixture of experts needs its top-k)."""
        return not self.is_moe or self.top_k > 0

    def require_active(self) -> None:
        """A one-line ``ModelSpecError`` when the active count is undefined (``ACTIVE_UNDEFINED``)."""
        if not self.active_defined:
            raise ModelSpecError(f"{self.name or 'model'}: {ACTIVE_UNDEFINED}")

    @property
    def is_latent(self) -> bool:
        """Whether attention is DeepSeek's multi-head latent attention."""
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return self.layers - self.dense_layers if self.is_moe else 0

    def layer_kinds(self) -> dict[str, int]:
        """How many layers of each kind: MLP kinds (dense, moe) and attention kinds (full, sliding)."""
        mlp = {"moe": self.moe_layers, "dense": self.layers - self.moe_layers}
        attn = "latent" if self.is_latent else "full"
        attention = {attn: self.layers - self.sliding_layers - self.conv_layers, "sliding": self.sliding_layers,
                     "conv": self.conv_layers}
        return {k: v for k, v in {**mlp, **attention}.items() if v}

    # --- numbers and formulas ------------------------------------------------------------
    def numbers(self) -> dict[str, int]:
        """Every architecture symbol that applies to this model, with its number."""
        out = {"H": self.hidden, "L": self.layers, "a": self.heads, "a_kv": self.resolved_kv_heads,
               "d_head": self.resolved_head_dim, "d_ff": self.resolved_ffn, "V": self.vocab}
        optional = {
            "n_pos": self.positions, "n_type": self.token_types, "n_cls": self.classifier,
            "d_emb": self.embed_dim or 0, "n_exp": self.experts, "k_exp": self.top_k,
            "d_exp": self.expert_ffn or 0, "n_shared": self.shared_experts, "d_shared": self.shared_ffn or 0,
            "L_dense": self.dense_layers, "L_swa": self.sliding_layers, "W": self.window,
            "r_q": self.q_lora_rank or 0, "r_kv": self.kv_lora_rank, "d_rope": self.qk_rope_dim,
            "d_nope": self.qk_nope_dim, "d_v": self.v_head_dim, "L_conv": self.conv_layers, "k_conv": self.conv_kernel,
        }
        out.update({k: v for k, v in optional.items() if v})
        return out

    def values(self, active: bool = False) -> dict[str, int]:
        """The numbers of exactly the symbols this model's formula uses.

        ``params_formula().evaluate(spec.values())`` is the exact count; with ``active=True``
        the symbols of ``active_params_formula()``.
        """
        numbers = self.numbers()
        formula = self.active_params_formula() if active else self.params_formula()
        return {s.name: numbers[s.name] for s in formula.inputs}

    def params_formula(self) -> formulas.Formula:
        """Total parameters as a ``Formula``: per-layer terms times L, embeddings, norms, heads."""
        return formulas.params_formula(self)

    def active_params_formula(self) -> formulas.Formula:
        """Parameters used per token: as ``params_formula`` with top-k experts instead of all (top-k given)."""
        self.require_active()
        return formulas.params_formula(self, active=True)

    def layer_formula(self, active: bool = False) -> formulas.Formula:
        """Parameters of one layer, one term per component."""
        return formulas.layer_formula(self, active)

    def param_count(self) -> int:
        """Exact number of parameters (tied tensors counted once)."""
        return int(self.params_formula().evaluate(self.values()).total)

    def active_param_count(self) -> int:
        """Exact parameters per token (equal to ``param_count()`` without experts)."""
        return int(self.active_params_formula().evaluate(self.values(active=True)).total)

    def components(self, active: bool = False) -> dict[str, int]:
        """Parameters per component (per-layer ones times L); they add up to the total."""
        if active:
            self.require_active()
        return {c.key: c.total for c in formulas.breakdown(self, active)}

    # --- display: the parameter breakdown (symbolic.text.display renders) ----------------------
    def __repr__(self) -> str:
        from ...text import display

        return display.short("ModelSpec", self.name, self.model_type, f"L={self.layers}", f"H={self.hidden}")

    def _repr_html_(self) -> str:
        from ...text import display

        return display.html(display.breakdown_table(self.name, formulas.breakdown(self)))

    def to_frame(self):  # noqa: ANN201 (pandas is optional)
        """Parameters per component as a pandas DataFrame (needs pandas)."""
        from ...text import display

        return display.frame(display.breakdown_table(self.name, formulas.breakdown(self)))


def too_many_layers(key: str, value: int) -> str | None:
    """The one-line refusal of a layer count above MAX_LAYERS (None when it is within it)."""
    if value <= MAX_LAYERS:
        return None
    return (f"{key}={value} is implausibly large: at most {MAX_LAYERS:,} layers (2**16; the deepest published "
            "models have a few hundred)")


def _check_positions(where: str, name: str, at: object, count: int, layers: int) -> None:
    """Positions of a layer kind: empty (not given), or ``count`` increasing 0-based indices below ``layers``."""
    if at == ():
        return
    if (not isinstance(at, tuple) or len(at) != count or any(isinstance(i, bool) or not isinstance(i, int) for i in at)
            or list(at) != sorted(set(at)) or at[0] < 0 or at[-1] >= layers):
        raise ModelSpecError(f"{where}: {name} must list the {count} layers of its kind (increasing indices from 0 to "
                             f"{layers - 1}), got {at!r}")


def _validate(spec: ModelSpec) -> None:
    where = spec.name or "model"
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.type in ("bool", "bool | None") and not isinstance(value, bool):
            raise ModelSpecError(f"{where}: {f.name} must be true or false, got {value!r}")
    for name in _POSITIVE + _POSITIVE_OR_NONE + _COUNTS:
        value = getattr(spec, name)
        if value is None and name in _POSITIVE_OR_NONE:
            continue
        low = 0 if name in _COUNTS else 1
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_SIZE:
            kind = "a positive integer" if low else "a non-negative integer"
            raise ModelSpecError(f"{where}: {name} must be {kind}, got {value!r}")
    problem = too_many_layers("layers", spec.layers)
    if problem:
        raise ModelSpecError(f"{where}: {problem}")
    if spec.norm not in NORMS:
        raise ModelSpecError(f"{where}: norm must be one of {', '.join(NORMS)}, got {spec.norm!r}")
    if spec.norm == "rmsnorm" and spec.norm_bias:
        raise ModelSpecError(f"{where}: an RMSNorm has no bias")
    if spec.head_dim is None and spec.hidden % spec.heads:
        raise ModelSpecError(f"{where}: {spec.heads} heads do not divide the hidden size {spec.hidden} and no head_dim is given")
    if spec.experts:
        if not 0 <= spec.top_k <= spec.experts:  # 0: not given (the active count is then undefined)
            raise ModelSpecError(f"{where}: top_k must be between 1 and the {spec.experts} experts, got {spec.top_k}")
    elif spec.top_k or spec.shared_experts or spec.expert_ffn is not None or spec.router_bias:
        raise ModelSpecError(f"{where}: top_k, shared experts, expert_ffn and router_bias need experts > 0")
    if spec.shared_expert_gate and not spec.shared_experts:
        raise ModelSpecError(f"{where}: shared_expert_gate needs shared_experts > 0")
    if spec.shared_ffn is not None and not spec.shared_experts:
        raise ModelSpecError(f"{where}: shared_ffn needs shared_experts > 0")
    if spec.mlm_transform and not spec.lm_head:
        raise ModelSpecError(f"{where}: an MLM head transform needs lm_head")
    if spec.dense_layers and not spec.experts:
        raise ModelSpecError(f"{where}: dense_layers counts the dense layers of a mixture of experts; it needs experts > 0")
    if spec.dense_layers >= spec.layers and spec.experts:
        raise ModelSpecError(f"{where}: dense_layers must be fewer than the {spec.layers} layers (else it has no experts)")
    if spec.sliding_layers + spec.conv_layers > spec.layers:
        raise ModelSpecError(f"{where}: sliding and convolution layers must be at most the {spec.layers} layers")
    for at, count in (("dense_at", spec.dense_layers), ("conv_at", spec.conv_layers)):
        _check_positions(where, at, getattr(spec, at), count, spec.layers)
    if bool(spec.conv_layers) != bool(spec.conv_kernel):
        raise ModelSpecError(f"{where}: conv_layers and conv_kernel go together (both 0, or both positive)")
    if spec.conv_layers >= spec.layers:
        raise ModelSpecError(f"{where}: a hybrid needs at least one attention layer besides its {spec.conv_layers} "
                        "convolution layers")
    if spec.sliding_layers > spec.layers:
        raise ModelSpecError(f"{where}: sliding_layers must be at most the {spec.layers} layers, got {spec.sliding_layers}")
    if bool(spec.sliding_layers) != bool(spec.window):
        raise ModelSpecError(f"{where}: sliding_layers and window go together (both 0, or both positive)")
    latent = (spec.qk_rope_dim, spec.qk_nope_dim, spec.v_head_dim)
    if spec.kv_lora_rank and not all(latent):
        raise ModelSpecError(f"{where}: latent attention needs qk_rope_dim, qk_nope_dim and v_head_dim > 0")
    if not spec.kv_lora_rank and (any(latent) or spec.q_lora_rank is not None):
        raise ModelSpecError(f"{where}: q_lora_rank and the latent head sizes need kv_lora_rank > 0")
    if spec.classifier_bias and not spec.classifier:
        raise ModelSpecError(f"{where}: classifier_bias needs classifier outputs > 0")
