"""LoRA and QLoRA fine-tuning as terms: adapters, a frozen or 4-bit base, what autograd then saves.

Measured with peft 0.21.2, bitsandbytes 0.50.2, transformers 5.24.0 and torch 2.13.0 on the
CPU (``tests/test_measure.py`` reproduces every figure from these formulas):

- **Targets** as peft resolves ``target_modules``: a module matches a name when its full name is
  that name or ends with ``"." + name``; ``"all-linear"`` is every ``nn.Linear``/``Conv1D`` but the
  output layer; without targets, peft's default for the model type
  (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``: GPT-2 ``c_attn``, Llama/Mistral/Qwen2
  ``q_proj, v_proj``).
- **Adapters**: per target ``lora_A`` (r × in) and ``lora_B`` (out × r), in fp32 on a 16-bit base
  by default (``get_peft_model(..., autocast_adapter_dtype=True)``); every base weight frozen
  (norms and biases too: ``bias="none"``).
- **QLoRA** (transformers' ``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
  bnb_4bit_use_double_quant=True)``): every linear layer but the output head becomes
  ``Linear4bit``. A weight of n elements keeps n/2 bytes of packed 4-bit codes, one uint8 absmax
  per block of 64 (double quantization), one fp32 absmax per 256 of those blocks, and per tensor
  the 16-value NF4 code (64 bytes), the fp32 offset (4) and the 256-value dynamic code of the
  nested quantization (1024): ``nf4_bytes``, the ``nf4`` entry of ``symbolic.formats``. Embeddings, norms
  and the head stay 16-bit.
- **What autograd saves** changes with frozen weights, because an op keeps a tensor only when a
  gradient that needs it is wanted (``derivatives.yaml``, measured):

  * a frozen ``Linear``/``Conv1D`` keeps nothing: its input is needed only for its weight's
    gradient (the weight itself is a parameter, not an activation);
  * a LoRA target keeps, in ``lora_A``, its input cast to the adapter dtype (a new copy per
    target when that differs from the compute dtype, else the input itself, shared), or with
    ``lora_dropout`` > 0 the dropout mask and the dropped input; ``lora_B`` keeps ``lora_A``'s
    output, r wide, in the adapter dtype;
  * Llama's RMSNorm with a frozen weight no longer keeps its normalised input (``weight · x``
    keeps x only for the weight's gradient); LayerNorm keeps input, mean and 1/std as before;
  * the frozen embedding keeps no ids, and layer 0's input needs no gradient, so layer 0 keeps
    nothing until its first adapter: its first norm keeps nothing; with adapters on the attention
    inputs, eager ``Q·Kᵀ`` keeps Q only if K needs a gradient (K is not a LoRA target by
    default) and the product with V the probabilities only if V does; without, attention keeps
    nothing, and (no ``o_proj``/``c_proj`` adapter either) the second norm neither, and the MLP
    only what its targets' gradients need (``_layer0``).

- **Gradient checkpointing** (``model.gradient_checkpointing_enable()``): ``checkpointed`` keeps each
  layer's input and what lies outside the layers; ``recompute_phase`` is the backward moment when
  the last layer is rebuilt (checked for LoRA; full training also holds gradients by then).

``saved`` applies these rules to a full-training ``pytorch.saved.<family>`` model. With
``freeze_embeddings`` alone (no LoRA) the token embedding is frozen (and GPT-2's tied head with it):
no ids kept, and Llama's layer 0 keeps only the normalised input of its first norm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sympy

from .. import formats
from ..core.errors import UnknownNameError, UserError
from ..core.symbols import B, H, L, S, V, a, a_kv, d_ff, d_head
from ..core.term import Term
from ..math.formula import Formula
from . import activations_pytorch as act

SRC = "peft"
ALL_LINEAR = "all-linear"
QLORA_FORMAT = "nf4-dq"  # the frozen base's storage rule: symbolic.formats

# peft 0.21.2 TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, for the module layouts modelled here
DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "gpt2": ("c_attn",), "llama": ("q_proj", "v_proj"), "mistral": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"), "qwen3": ("q_proj", "v_proj"), "gemma": ("q_proj", "v_proj"),
    "gemma2": ("q_proj", "v_proj"), "stablelm": ("q_proj", "v_proj"),
}

# the linear layers of one block (name relative to the block, in, out) in named_parameters() order
LAYER_MODULES: dict[str, tuple[tuple[str, sympy.Expr, sympy.Expr], ...]] = {
    "gpt2": (("attn.c_attn", H, 3 * H), ("attn.c_proj", H, H), ("mlp.c_fc", H, d_ff), ("mlp.c_proj", d_ff, H)),
    "llama": (("self_attn.q_proj", H, a * d_head), ("self_attn.k_proj", H, a_kv * d_head),
              ("self_attn.v_proj", H, a_kv * d_head), ("self_attn.o_proj", a * d_head, H),
              ("mlp.gate_proj", H, d_ff), ("mlp.up_proj", H, d_ff), ("mlp.down_proj", d_ff, H)),
}
HEAD = ("lm_head", H, V)
BLOCK_PREFIX = {"gpt2": "transformer.h.0.", "llama": "model.layers.0."}

# the pytorch.saved term that is each module's input; "kept": saved by another op as well
INPUT_TERMS = {
    "gpt2": {"attn.c_attn": "attn.c_attn.input", "attn.c_proj": "attn.c_proj.input", "mlp.c_fc": "mlp.c_fc.input",
             "mlp.c_proj": "mlp.c_proj.input", "lm_head": "lm_head.input"},
    "llama": {"self_attn.q_proj": "attn.proj.input", "self_attn.k_proj": "attn.proj.input",
              "self_attn.v_proj": "attn.proj.input", "self_attn.o_proj": "attn.o_proj.input",
              "mlp.gate_proj": "mlp.input", "mlp.up_proj": "mlp.input", "mlp.down_proj": "mlp.down.input",
              "lm_head": "lm_head.input"},
}
NORMALIZED_TERMS = ("input_norm.normalized", "post_norm.normalized", "norm.normalized")


@dataclass(frozen=True)
class Adapter:
    """One LoRA target: a linear layer of ``d_in`` → ``d_out`` features, ``count`` of them."""

    name: str  # relative to the block ("self_attn.q_proj"), or "lm_head"
    d_in: sympy.Expr
    d_out: sympy.Expr
    count: sympy.Expr  # L for a block's layer, 1 for the head

    def tensors(self, rank: int) -> tuple[sympy.Expr, sympy.Expr]:
        """Elements of lora_A (r × in) and lora_B (out × r)."""
        return rank * self.d_in, self.d_out * rank


@dataclass(frozen=True)
class Adapters:
    """The adapters of one model: which modules, their rank, dtype and dropout."""

    family: str
    model_type: str
    rank: int
    targets: tuple[str, ...]  # as given, or peft's default for the model type
    modules: tuple[Adapter, ...]
    dtype: str = "fp32"
    dropout: float = 0.0
    defaulted: bool = False  # targets are peft's default for the model type

    @property
    def element_bytes(self) -> int:
        """Bytes per adapter element (fp32 4, bf16 2)."""
        return int(formats.nbytes(self.dtype))

    def params(self) -> sympy.Expr:
        """Trainable parameters: Σ count · r · (in + out)."""
        return sympy.Add(*(m.count * sum(m.tensors(self.rank)) for m in self.modules))

    def tensor_count(self) -> sympy.Expr:
        """Trainable tensors: lora_A and lora_B of every adapted module."""
        return sympy.Add(*(2 * m.count for m in self.modules))

    def layer_tensors(self) -> list[sympy.Expr]:
        """Elements of the trainable tensors of one block and the head, in ``named_parameters()`` order."""
        return [x for m in self.modules for x in m.tensors(self.rank)]

    def factored_entries(self) -> sympy.Expr:
        """Σ (rows + columns) over the adapter matrices (Adafactor's factored state)."""
        return sympy.Add(*(m.count * (2 * self.rank + m.d_in + m.d_out) for m in self.modules))

    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.modules)

    def describe(self) -> str:
        """One line: 'rank 8 on self_attn.q_proj, self_attn.v_proj (peft's default), fp32'."""
        default = " (peft's default for " + self.model_type + ")" if self.defaulted else ""
        drop = f", dropout {self.dropout:g}" if self.dropout else ""
        return f"rank {self.rank} on {', '.join(self.names())}{default}, {self.dtype}{drop}"


def family_of(model_type: str, family: str) -> str:
    """The module layout of a model type: 'gpt2' or 'llama' (its linear layers' names)."""
    if model_type == "gpt2":
        return "gpt2"
    if family == "llama":
        return "llama"
    raise UserError(f"LoRA targets are modelled for GPT-2 and Llama-family module names; {model_type or 'this model'} "
                    "has another layout")


def _matches(target: str, name: str, prefix: str) -> bool:
    """peft's rule for a list of names: the module's full name is ``target`` or ends with '.' + target."""
    full = prefix + name
    return full == target or full.endswith("." + target)


def resolve_targets(family: str, model_type: str, targets: Sequence[str]) -> tuple[tuple[str, ...], bool]:
    """The modules (relative names) that get adapters, and whether peft's default was used."""
    defaulted = not targets
    if defaulted:
        if model_type not in DEFAULT_TARGETS:
            raise UserError(f"peft has no default target_modules for model type {model_type!r}; give --lora-targets "
                            "(e.g. q_proj,v_proj or all-linear)")
        targets = DEFAULT_TARGETS[model_type]
    layer = [name for name, _, _ in LAYER_MODULES[family]]
    if tuple(targets) == (ALL_LINEAR,):
        return tuple(layer), defaulted
    prefix = BLOCK_PREFIX[family]
    chosen = set()
    for target in targets:
        found = [n for n in layer if _matches(target, n, prefix)]
        if target == HEAD[0] or target.endswith("." + HEAD[0]):
            found.append(HEAD[0])
        if not found:
            names = sorted({n.rsplit(".", 1)[-1] for n in layer} | {HEAD[0]})
            raise UnknownNameError(f"no module of {model_type} matches LoRA target {target!r}; its linear layers are "
                                   f"{', '.join(names)} (or {ALL_LINEAR})")
        chosen.update(found)
    order = [*layer, HEAD[0]]
    return tuple(n for n in order if n in chosen), defaulted


def adapters(family: str, model_type: str, rank: int, targets: Sequence[str] = (), *, dtype: str = "fp32",
             dropout: float = 0.0, widths: dict[sympy.Symbol, sympy.Expr] | None = None) -> Adapters:
    """The adapters peft creates for ``targets`` (module names, ``all-linear``, or peft's default)."""
    formats.get(dtype, "adapter", "adapter dtype")
    names, defaulted = resolve_targets(family, model_type, targets)
    table = {name: (d_in, d_out) for name, d_in, d_out in (*LAYER_MODULES[family], HEAD)}
    sub = widths or {}
    modules = tuple(Adapter(n, sympy.sympify(table[n][0]).xreplace(sub), sympy.sympify(table[n][1]).xreplace(sub),
                            sympy.Integer(1) if n == HEAD[0] else L) for n in names)
    given = tuple(targets) if targets else DEFAULT_TARGETS.get(model_type, ())
    return Adapters(family, model_type, rank, given, modules, dtype, float(dropout), defaulted)


# --- QLoRA storage -------------------------------------------------------------------------------
def nf4_bytes(elements: sympy.Expr) -> sympy.Expr:
    """Bytes bitsandbytes keeps for one NF4 weight of ``elements`` numbers, double quantization on."""
    return formats.get(QLORA_FORMAT).tensor_bytes(elements)


def quantized_matrices(family: str, widths: dict[sympy.Symbol, sympy.Expr] | None = None
                       ) -> list[tuple[str, sympy.Expr]]:
    """(name, elements) of the weights QLoRA stores in 4 bits: every block linear layer, L of each."""
    sub = widths or {}
    return [(name, (d_in * d_out).xreplace(sub)) for name, d_in, d_out in LAYER_MODULES[family]]


def qlora_base_bytes(family: str, params: sympy.Expr, widths: dict[sympy.Symbol, sympy.Expr] | None = None,
                     other_bytes: sympy.Rational | None = None) -> sympy.Expr:
    """Bytes of a QLoRA base: NF4 block linear layers, everything else (``params`` minus them) in the format's
    ``kept_in`` (bf16) unless ``other_bytes`` says otherwise."""
    return nf4_base_bytes([(L, n) for _, n in quantized_matrices(family, widths)], params, other_bytes)


# bitsandbytes 0.50.2 backends/cuda/ops.py: gemm_4bit dequantizes then calls F.linear above this many rows of A
# (_gemm_4bit_custom_max_m); MatMul4Bit.backward (autograd/_functions.py) always dequantizes.
DEQUANT_ROWS = 1536
ABSMAX_PASSES = 4  # the nested absmax in fp32: written, read and written by the offset's add, read by the dequantize


def nf4_pass_bytes(elements: sympy.Expr) -> sympy.Expr:
    """HBM bytes one forward or backward pass moves for one NF4 weight of ``elements`` numbers (double quantization).

    bitsandbytes 0.50.2 on CUDA, for a micro-batch of more than ``DEQUANT_ROWS`` tokens (``_dequant_linear_fallback``,
    backends/cuda/ops.py; and always in ``MatMul4Bit.backward``, autograd/_functions.py, through
    ``functional.dequantize_4bit``): the stored bytes read once (``nf4_bytes``), the uint8 absmax dequantized to an
    fp32 tensor per block of 64 that is written, read and written again as the offset is added, then read
    (``ABSMAX_PASSES`` × 4 bytes per block), and the weight dequantized to a bf16 copy, written and then read by the
    matmul (2 × 2 bytes per number).
    """
    fmt = formats.get(QLORA_FORMAT)
    blocks = sympy.ceiling(elements / fmt.group)
    return nf4_bytes(elements) + ABSMAX_PASSES * formats.nbytes("fp32") * blocks + 2 * fmt.kept_bytes * elements


def qlora_pass_bytes(family: str, params: sympy.Expr, widths: dict[sympy.Symbol, sympy.Expr] | None = None
                     ) -> sympy.Expr:
    """Weight bytes one forward or backward pass of a QLoRA base moves: ``nf4_pass_bytes`` per NF4 block linear layer
    (``quantized_matrices``, the split ``qlora_base_bytes`` stores), the rest of ``params`` read once in bf16."""
    weights = [(L, n) for _, n in quantized_matrices(family, widths)]
    quantized = sympy.Add(*(k * n for k, n in weights))
    other = formats.get(QLORA_FORMAT).kept_bytes
    return sympy.Add(*(k * nf4_pass_bytes(n) for k, n in weights)) + other * (params - quantized)


def nf4_base_bytes(weights: Sequence[tuple[sympy.Expr, sympy.Expr]], params: sympy.Expr,
                   other_bytes: sympy.Rational | None = None) -> sympy.Expr:
    """Bytes of a QLoRA base whose NF4 weights are (copies, elements) each: ``nf4_bytes`` per copy, the rest of
    ``params`` in the format's ``kept_in`` (bf16) unless ``other_bytes`` says otherwise."""
    if other_bytes is None:
        other_bytes = formats.nbytes(formats.get(QLORA_FORMAT).kept_in)
    quantized = sympy.Add(*(k * n for k, n in weights))
    return sympy.Add(*(k * nf4_bytes(n) for k, n in weights)) + other_bytes * (params - quantized)


# --- what autograd saves -------------------------------------------------------------------------
def _layer_share(expr: sympy.Expr) -> sympy.Expr:
    """One layer's part of ``L · per`` (0 when the term is not per layer)."""
    per = sympy.expand(expr / L)
    return per if expr.has(L) and not per.has(L) else sympy.Integer(0)


def saved(base: act.SavedModel, lora: Adapters | None = None, *, frozen_embeddings: bool = False) -> act.SavedModel:
    """``base`` (full training) as saved with a frozen base and LoRA adapters (see the module docstring)."""
    family, s = base.family, base.setup
    if family not in LAYER_MODULES:
        raise UserError(f"fine-tuning terms are modelled for GPT-2 and Llama-family models, not {family}")
    b = s.b
    targets = set(lora.names()) if lora else set()
    ba = lora.element_bytes if lora else b
    same = lora is not None and ba == b and not lora.dropout and not s.mixed
    inputs = INPUT_TERMS[family]
    kept_inputs = set()  # input terms still saved: a trainable module (full weights, or a LoRA sharing them)
    for module, key in inputs.items():
        if lora is None:
            if not (module == "lm_head" and family == "gpt2" and frozen_embeddings):  # tied to the frozen wte
                kept_inputs.add(key)
        elif module in targets and same:
            kept_inputs.add(key)
    no_grad_layer0 = lora is not None or (frozen_embeddings and family == "llama")
    layer0, no_grad_inputs, covered = _layer0(family, targets, lora is not None, same, s)
    terms: list[Term] = []
    saved_by = dict(base.saved_by)
    notes = []
    for term in base.formula.terms:
        key, expr = term.key, term.expr
        per = _layer_share(expr)
        if key in inputs.values() and key not in kept_inputs:
            continue
        if lora is not None and key in NORMALIZED_TERMS:
            continue  # RMSNorm's weight is frozen: weight·x keeps no x
        if key.startswith("embedding."):
            if key == "embedding.ids" or lora is not None:
                continue  # the token embedding (or every embedding) is frozen; its output needs no gradient
        if no_grad_layer0 and per != 0 and covered:
            expr = expr - per * layer0.get(key, 0)
        if lora is not None and key in kept_inputs:
            saved_by[key] = "Linear"  # kept by the adapters' lora_A now
        terms.append(term.replace(expr=expr))
    if lora is not None and not covered:
        notes.append("layer 0 counted as the others (no adapter in it that the rules cover): an upper bound")
    if lora is not None:
        terms += _adapter_terms(lora, s, no_grad_inputs if covered else set(), saved_by)
    formula = Formula(base.formula.key + ".lora" if lora else base.formula.key + ".frozen_embeddings",
                      base.formula.title + (f"; LoRA {lora.describe()}" if lora else "; frozen embeddings"),
                      terms, source=base.formula.source, name=base.formula.name,
                      note="; ".join([base.formula.note, *notes]))
    return act.SavedModel(family, s, formula, saved_by)


def _layer0(family: str, targets: set[str], lora: bool, same: bool, s: act.Setup
            ) -> tuple[dict[str, sympy.Rational], set[str], bool]:
    """What layer 0 does not keep when its input needs no gradient (frozen embedding), as the fraction of
    one layer's share of each term; the targets whose input needs no gradient there; and whether the
    rules cover the case (else layer 0 is counted as the others, an upper bound).

    An op keeps a tensor only for a gradient that is wanted, so layer 0 keeps nothing until the first
    adapter (LoRA) or trainable weight: with LoRA on the attention inputs (peft's defaults), its
    first norm keeps nothing and eager attention's Q·Kᵀ keeps Q only if K needs a gradient, the
    product with V the probabilities only if V does; without, attention keeps nothing, and the MLP
    keeps only what its targets need.
    """
    one, half = sympy.Integer(1), sympy.Rational(1, 2)
    eager = s.kernel != "fused"
    if not lora:  # frozen embeddings, every other weight trained (Llama: layer 0's norm keeps its output)
        return ({"input_norm.fp32_input": one, "input_norm.rstd": one} if family == "llama" else {}), set(), True
    if family == "gpt2":
        drop = {"ln_1.input": one, "ln_1.stats": one}
        no_grad = {"attn.c_attn"}
        if "attn.c_attn" in targets:
            return drop, no_grad, True
        attention = ["attn.qkv", "attn.logsumexp", "attn.query", "attn.key", "attn.softmax", "attn.dropout_mask",
                     "attn.dropout_output", "attn.value", "attn.value_view"]
        if not ("attn.c_proj" in targets and same):
            attention.append("attn.output")  # SDPA's output is then kept by nobody in layer 0
        drop.update(dict.fromkeys(attention, one))
        no_grad.add("attn.c_proj")
        if "attn.c_proj" in targets:
            return drop, no_grad, True
        drop.update({"attn.dropout_mask_out": one, "ln_2.input": one, "ln_2.stats": one})
        no_grad.add("mlp.c_fc")
        if "mlp.c_fc" not in targets:
            drop["mlp.activation"] = one
            no_grad.add("mlp.c_proj")
            if "mlp.c_proj" not in targets:
                return drop, no_grad, False  # no adapter in layer 0 at all
            drop["mlp.dropout_mask"] = one
        return drop, no_grad, True
    q, k, v = ("self_attn.q_proj" in targets, "self_attn.k_proj" in targets, "self_attn.v_proj" in targets)
    drop = {"input_norm.fp32_input": one, "input_norm.rstd": one}
    no_grad = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}
    if q or k or v:
        if eager and "attn" not in s.dropout:
            scores = q or k
            rules = {"attn.query": not k, "attn.key": not q, "attn.value": not scores,
                     "attn.softmax": not scores and not (v and s.b == 4), "attn.probs": not v}
            drop.update({key: one for key, dropped in rules.items() if dropped})
        return drop, no_grad, True  # with attention dropout its tensors are counted as in the other layers
    attention = ["attn.query", "attn.key", "attn.value", "attn.softmax", "attn.probs", "attn.dropout_mask",
                 "attn.logsumexp"]
    if not ("self_attn.o_proj" in targets and same):
        attention.append("attn.output")
    drop.update(dict.fromkeys(attention, one))
    no_grad.add("self_attn.o_proj")
    if "self_attn.o_proj" in targets:
        return drop, no_grad, True
    drop.update({"post_norm.fp32_input": one, "post_norm.rstd": one})
    gate, up = "mlp.gate_proj" in targets, "mlp.up_proj" in targets
    no_grad |= {"mlp.gate_proj", "mlp.up_proj"}
    if not gate:
        drop["mlp.gate"] = one
    # silu(gate)·up keeps silu's output for up's gradient and up's output for silu's
    dropped_operands = (not up) + (not gate)
    if dropped_operands:
        drop["mlp.product_operands"] = half * dropped_operands
    if not (gate or up):
        no_grad.add("mlp.down_proj")
    return drop, no_grad, bool(gate or up or "mlp.down_proj" in targets)


def _adapter_terms(lora: Adapters, s: act.Setup, no_grad_inputs: set[str], saved_by: dict[str, str]) -> list[Term]:
    """What lora_A and lora_B keep per target (see the module docstring)."""
    ba = lora.element_bytes
    same_dtype = ba == s.b and not s.mixed
    mask = ba if s.masks == "dtype" else 1
    out: list[Term] = []

    def add(key: str, title: str, expr: sympy.Expr, by: str, note: str = "") -> None:
        out.append(Term(key, title, expr, "bytes", SRC, f"saved by {by}", note))
        saved_by[key] = by

    for m in lora.modules:
        tokens = m.count * B * S
        short = m.name
        if lora.dropout:
            # x · mask keeps the mask only when x needs a gradient: not in layer 0 before the first adapter
            masked = (m.count - 1) * B * S if short in no_grad_inputs else tokens
            add(f"lora.{short}.dropout_mask", f"LoRA dropout mask of {short}'s input", mask * m.d_in * masked,
                "Dropout", "This input needs no gradient in layer 0 (frozen embedding and layers before the "
                           "first adapter): no mask kept there." if masked != tokens else "")
            add(f"lora.{short}.dropout_output", f"dropped-out input of {short}'s lora_A", ba * m.d_in * tokens,
                "Linear")
        elif not same_dtype:
            add(f"lora.{short}.input", f"{short}'s input cast to {lora.dtype}, kept by lora_A", ba * m.d_in * tokens,
                "Linear", "peft casts the input to the adapter dtype in each target (_cast_input_dtype): one copy "
                          "per target.")
        add(f"lora.{short}.rank", f"lora_A output of {short} (r wide), kept by lora_B", ba * lora.rank * tokens,
            "Linear")
    return out


# --- gradient checkpointing ----------------------------------------------------------------------
CHECKPOINT_DROPPED = ("rotary",)  # computed outside the layers but saved only inside them


def checkpointed(model: act.SavedModel) -> act.SavedModel:
    """``model`` under ``model.gradient_checkpointing_enable()`` (transformers 5: non-reentrant checkpoint).

    Each decoder layer runs under ``torch.utils.checkpoint(use_reentrant=False)``: what it saves is
    dropped and rebuilt in backward, and only its input hidden states are kept (b·B·S·H per layer,
    by the checkpoint's ``_NoopSaveInputs``). Everything outside the layers is saved as without
    checkpointing (embedding ids, the final norm, the LM head's input, the loss), except what only
    the layers keep (Llama's rotary cos and sin); GPT-2's eager attention mask, B·S² in the dtype,
    is a checkpoint input too. ``enable_input_require_grads`` makes layer 0's
    input need a gradient, so nothing else changes with LoRA. Measured on the CPU
    (``tests/test_measure.py``).
    """
    s = model.setup
    kept = [t for t in model.formula.terms if not t.expr.has(L) and t.key not in CHECKPOINT_DROPPED]
    saved_by = dict(model.saved_by)
    block = "GPT2Block" if model.family == "gpt2" else "LlamaDecoderLayer"
    inputs = Term("checkpoint.layer_input", "each layer's input hidden states, kept by the checkpoint",
                  L * s.b * B * S * H, "bytes", "transformers", "gradient_checkpointing_enable",
                  "torch.utils.checkpoint(use_reentrant=False) keeps the layer's inputs and recomputes the rest.")
    saved_by[inputs.key] = block
    extra = []
    if model.family == "gpt2" and s.attn == "eager":
        extra.append(Term("checkpoint.attention_mask", "the additive causal mask (B, 1, S, S), a checkpoint input",
                          s.b * B * S**2, "bytes", "transformers", "gradient_checkpointing_enable",
                          "GPT-2's eager attention gets a dtype mask; the checkpoint keeps it (one storage, shared "
                          "by the layers). Measured at B = 1, 2, 3."))
        saved_by[extra[0].key] = block
    formula = Formula(model.formula.key + ".checkpointed", model.formula.title + "; gradient checkpointing",
                      [inputs, *extra, *kept], source=model.formula.source, name=model.formula.name, note=model.formula.note)
    return act.SavedModel(model.family, s, formula, saved_by)


def recompute_transient(model: act.SavedModel) -> sympy.Expr:
    """Bytes a checkpointed step adds while one layer is recomputed in backward: that layer's saved
    tensors (one layer's share of ``model``, the saved model without checkpointing)."""
    return sympy.Add(*(sympy.expand(sympy.diff(t.expr, L)) for t in model.formula.terms))  # a steady layer's share


AFTER_LAYERS = ("ln_f.", "norm.", "lm_head.", "loss.")  # once-terms whose backward runs before the layers'


def recompute_phase(plain: act.SavedModel, checkpointed_model: act.SavedModel,
                    gradients: sympy.Expr = 0) -> tuple[Term, ...]:
    """What a checkpointed step keeps besides the resident states while the last layer is rebuilt in backward.

    The moment is the MLP backward of the last layer (measured with ``symbolic.measured.measure``'s peak
    snapshots): the checkpoint's kept tensors except those behind the layers, whose backward has
    run (final norm, head input, loss); the rebuilt layer's saved tensors (one layer's share of
    ``plain``, the saved model without checkpointing; in fp32 Llama the norm's fp32 input is the
    kept layer input itself, and so is GPT-2's ln_1 input outside autocast) and the rotary tables; three B·S·d_ff gradients of the MLP backward
    and the gradient of the layer's output; Llama's eager attention mask, referenced by the
    checkpointed call. ``gradients``: parameter gradients that exist by then, less what backward has
    freed besides (full training: ``planning.finetune.extra_phases``).
    """
    s = plain.setup
    b = s.b
    kept = sympy.Add(*(t.expr for t in checkpointed_model.formula.terms if not t.key.startswith(AFTER_LAYERS)))
    layer = recompute_transient(plain)
    once = {t.key: t.expr for t in plain.formula.terms}
    if plain.family == "llama":
        layer += once.get("rotary", 0)
        if b == 4:
            layer -= 4 * B * S * H  # x.to(float32) of the first norm is the kept input itself
        if s.attn == "eager":
            layer += b * B * S**2
    elif not s.mixed:
        layer -= once.get("ln_1.input", 0) / L  # GPT-2's ln_1 keeps its input: the kept layer input itself
    where = "gradient checkpointing, backward"
    kept += checkpoint_leaf(plain)
    terms = [
        Term("checkpoint.kept", "what the checkpoint keeps (layer inputs) and the tensors saved before the layers",
             kept, "bytes", "transformers", where),
        Term("recompute.layer", "the last layer's saved tensors, rebuilt for its backward", layer, "bytes",
             "pytorch", where, "One layer's share of the saved model without checkpointing."),
        Term("recompute.gradients", "MLP backward: three B·S·d_ff gradients and the layer output's gradient",
             3 * b * B * S * d_ff + b * B * S * H, "bytes", "pytorch", where, "Measured peak snapshot."),
    ]
    if gradients != 0:
        terms.append(Term("recompute.parameter_gradients", "parameter gradients produced by then, less the tensors freed with them", sympy.sympify(gradients), "bytes",
                          "pytorch", where))
    return tuple(terms)


def checkpoint_leaf(model: act.SavedModel) -> sympy.Expr:
    """Bytes alive but not saved under checkpointing: ``enable_input_require_grads`` turns the token
    embedding's output into a leaf that needs a gradient, which the graph holds until backward ends.
    In GPT-2 that output is added to the position embedding, so it is a tensor of its own (b·B·S·H);
    in Llama it is layer 0's input, kept by the checkpoint already."""
    return model.setup.b * B * S * H if model.family == "gpt2" else sympy.Integer(0)
