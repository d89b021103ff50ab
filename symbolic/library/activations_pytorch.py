"""What PyTorch autograd really saves for backward: implementation-aware activation terms.

Article B's ``L(14E + 4BSS) + 6BSV`` and Korthikanti's ``sbh(34 + 5as/h)`` describe an idealised
layer. The terms here follow, tensor by tensor, what ``torch.autograd`` keeps alive between the
forward and the backward pass of three real implementations:

- ``mlp``: article A's network as PyTorch code (``symbolic.crosscheck.ArticleANet``): four
  ``nn.Linear`` layers with or without biases, ReLUs, a softmax output and
  ``F.cross_entropy(probs, targets)`` as the loss;
- ``gpt2``: Hugging Face ``GPT2LMHeadModel`` (LayerNorm, ``Conv1D`` projections, the Python
  tanh-GELU ``gelu_new``, multi-head attention, learned positions, dropout, tied LM head);
- ``llama``: Hugging Face ``LlamaForCausalLM`` and its copies (Mistral, Qwen2): RMSNorm computed
  in fp32, SwiGLU MLP, grouped-query attention (``repeat_kv`` in eager attention,
  ``enable_gqa`` in SDPA), rotary position embeddings, untied head.

How the terms were found (the derivation, written down once):

1. Measure. ``symbolic.measure.saved_tensors`` records every tensor autograd's pack hook sees,
   once per storage, parameters excluded, and attributes it to the innermost module running
   when it was first saved. Walking ``grad_fn._saved_*`` of the graph names the op that keeps
   each tensor. Both were done for each module type in isolation and for whole models.
2. Write each kept tensor as a term: its shape in symbols times its element size.
3. Check: ``symbolic validate`` compares the sum and each module type's share with the
   measurement over a grid of B, S, L, dtype and attention implementation.

What autograd keeps, op by op (b = bytes of the compute dtype, fp32 4, bf16 2):

- ``Linear``/``Conv1D`` (``addmm``/``mm``): its input (the weight is a parameter). A view of an
  earlier tensor adds nothing: storages are counted once.
- ``LayerNorm`` (``native_layer_norm``): its input and the per-row mean and 1/std, which are in
  the input dtype on the CPU and fp32 on CUDA (``toAccumulateType`` in ``layer_norm_cuda``).
- Llama's ``RMSNorm`` (Python): ``x.to(float32)`` is kept by ``pow`` and ``mul`` (4 bytes, the
  input itself in fp32 training), the fp32 1/rms per row, and the normalised tensor after
  ``.to(input_dtype)`` (b bytes, kept by ``weight * x``): (4 + b)·BSH + 4·BS.
- ``gelu_new`` (Python: ``0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))``): ``pow`` keeps x, ``tanh``
  its output, the last ``mul`` both of its operands ``0.5·x`` and ``1 + tanh``: 4 tensors of
  B·S·d_ff. Fused activations (``F.gelu``, ``F.silu``, ReLU) keep one.
- SwiGLU ``down(silu(gate(x)) · up(x))``: silu keeps its input, the product both operands, down
  its input: 4 tensors of B·S·d_ff.
- Eager attention: ``torch.matmul`` on 4-d tensors reshapes Q and Kᵀ (and V) to 3-d; those are
  transposed views, so the reshape copies them and ``bmm`` keeps the copies: Q, K and V each
  once, a·d_head wide (after ``repeat_kv`` for K and V in Llama). ``softmax`` keeps its output
  (GPT-2: dtype b; Llama: ``dtype=float32``, 4 bytes, plus the b-byte copy ``.to(query.dtype)``
  when b ≠ 4). Dropout keeps its mask and ``bmm`` the dropped-out probabilities.
- Dropout on the CPU is ``input * mask`` with a mask of the input's dtype (b bytes); on CUDA the
  fused ``native_dropout`` keeps a bool mask (1 byte). With p = 0 nothing is kept.
- SDPA with a fused kernel (CPU flash attention when there is no attention dropout; CUDA flash,
  memory-efficient or cuDNN kernels) keeps Q, K, V as given (views of the projection outputs,
  K and V only a_kv heads wide with ``enable_gqa``), its output and the fp32 log-sum-exp per
  row, 4·B·a·S: no S² tensor. On the CPU with attention dropout SDPA falls back to the math
  path, which keeps the same tensors as eager attention.
- ``nn.Embedding``: the int64 ids (8 bytes each): token ids B·S, GPT-2's position ids 1·S.
- Loss (Hugging Face ``ForCausalLMLoss``): logits are upcast to fp32, ``log_softmax`` keeps its
  fp32 output 4·B·S·V (the logits themselves are not kept), ``nll_loss`` the int64 targets and
  a scalar weight.
- Rotary embeddings: ``q·cos + rotate_half(q)·sin`` keeps cos and sin, computed once per forward
  and shared by every layer: 2·S·d_head·b.

Only measurements on the CPU were possible when these terms were written (torch 2.13.0,
transformers 5.24.0). The CUDA variants differ where the code differs (bool dropout masks,
fp32 LayerNorm statistics, fused SDPA kernels even with dropout); they follow the ATen sources
and are checked by ``benchmarks/gpu_measure.py`` when a GPU is available. Not modelled: the
memory-efficient kernel pads its log-sum-exp to a multiple of 32 rows; the RNG state a fused
CUDA dropout or attention kernel keeps (a few bytes per layer); Hugging Face's KV cache, which
``use_cache=True`` would also build during training (``validate`` turns it off).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import sympy

from ..errors import UnknownNameError
from ..formula import Formula
from ..symbols import B, H, L, S, V, a, a_kv, d_ff, d_h, d_head, d_in, n_out
from ..term import Term
from .registry import register

SRC = "pytorch"
FAMILIES = ("mlp", "gpt2", "llama")
PRECISIONS = {"fp32": 4, "bf16": 2, "fp16": 2}
DEVICES = ("cpu", "cuda")
ATTENTION = ("eager", "sdpa")
# B·S·d_ff tensors an MLP activation module keeps (Hugging Face implementations, measured)
ACTIVATION_TENSORS = {"gelu_new": 4, "gelu": 1, "gelu_pytorch_tanh": 1, "silu": 1, "swish": 1, "relu": 1}
ACTIVATION_CLASSES = {"gelu_new": "NewGELUActivation", "gelu": "GELUActivation", "gelu_pytorch_tanh": "GELUTanh",
                      "silu": "SiLUActivation", "swish": "SiLU", "relu": "ReLU"}


@dataclass(frozen=True)
class Setup:
    """Where and how the model runs: what decides which tensors autograd keeps.

    ``dropout`` names the dropout sites with p > 0: "embd", "attn" (attention probabilities)
    and "resid" (after the attention and MLP output projections). ``activation`` is the
    config's MLP activation (``activation_function``/``hidden_act``).
    """

    precision: str = "bf16"
    device: str = "cuda"
    attn: str = "sdpa"
    dropout: frozenset[str] = field(default_factory=frozenset)
    activation: str = ""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise UnknownNameError(f"unknown precision {self.precision!r}; choose from {', '.join(PRECISIONS)}")
        if self.device not in DEVICES:
            raise UnknownNameError(f"unknown device {self.device!r}; choose from {', '.join(DEVICES)}")
        if self.attn not in ATTENTION:
            raise UnknownNameError(f"unknown attention {self.attn!r}; choose from {', '.join(ATTENTION)}")
        unknown = set(self.dropout) - {"embd", "attn", "resid"}
        if unknown:
            raise UnknownNameError(f"unknown dropout sites {sorted(unknown)}; use embd, attn, resid")
        object.__setattr__(self, "dropout", frozenset(self.dropout))

    @property
    def b(self) -> int:
        """Bytes per element of parameters and activations."""
        return PRECISIONS[self.precision]

    @property
    def mask_bytes(self) -> int:
        """Bytes per dropout-mask element: the dtype's on the CPU, a bool on CUDA."""
        return self.b if self.device == "cpu" else 1

    @property
    def norm_stat_bytes(self) -> int:
        """Bytes of LayerNorm's saved mean and 1/std: the dtype's on the CPU, fp32 on CUDA."""
        return self.b if self.device == "cpu" else 4

    @property
    def kernel(self) -> str:
        """Which attention path runs: 'eager', 'math' (SDPA's unfused fallback) or 'fused'."""
        if self.attn == "eager":
            return "eager"
        if self.device == "cpu" and "attn" in self.dropout:
            return "math"
        return "fused"

    def label(self, family: str = "") -> str:
        """Short text such as 'bf16, sdpa, cuda, dropout embd+attn+resid' ('fp32, cpu' for the MLP)."""
        if family == "mlp":
            return f"{self.precision}, {self.device}"
        drop = "+".join(sorted(self.dropout)) or "none"
        return f"{self.precision}, {self.attn}, {self.device}, dropout {drop}"


@dataclass(frozen=True)
class SavedModel:
    """A family's saved-tensor formula and, per term, the module type that saves it first."""

    family: str
    setup: Setup
    formula: Formula
    saved_by: dict[str, str]

    def by_module(self, values: Mapping[str, object]) -> dict[str, int]:
        """Predicted bytes per module type at a point (the way ``measure`` attributes them)."""
        result = self.formula.evaluate(self.formula.restrict(values))
        out: dict[str, int] = {}
        for term, value in result.terms:
            out[self.saved_by[term.key]] = out.get(self.saved_by[term.key], 0) + int(value)
        return out


class _Terms:
    """Collects terms and the module type that saves each."""

    def __init__(self) -> None:
        self.terms: list[Term] = []
        self.saved_by: dict[str, str] = {}

    def add(self, key: str, title: str, expr: sympy.Expr | int, saved_by: str, note: str = "") -> None:
        self.terms.append(Term(key, title, sympy.sympify(expr), "bytes", SRC, f"saved by {saved_by}", note))
        self.saved_by[key] = saved_by


# --- article A's network ---------------------------------------------------------------------
def _mlp(s: Setup) -> _Terms:
    b = s.b
    t = _Terms()
    t.add("gat.input", "x: input of gat, kept by the Linear for its weight gradient", b * B * d_in, "Linear",
          "Article A leaves the input out (erratum 5).")
    t.add("relu1", "relu(gat(x)): ReLU output, also the input of up", b * B * d_h, "ArticleANet")
    t.add("relu2", "relu(up(g)): ReLU output", b * B * d_h, "ArticleANet")
    t.add("relu3", "relu(g + u): ReLU output, also the input of down", b * B * d_h, "ArticleANet")
    t.add("relu4", "relu(down(g)): ReLU output", b * B * d_in, "ArticleANet")
    t.add("out.input", "g + x: input of out", b * B * d_in, "Linear")
    t.add("softmax", "softmax output", b * B * n_out, "ArticleANet")
    t.add("loss.log_softmax", "cross-entropy's log-softmax output", b * B * n_out, "(top level)",
          "F.cross_entropy applied to the softmax output, as the article's network ends in a softmax.")
    t.add("loss.targets", "int64 class targets", 8 * B, "(top level)")
    t.add("loss.weight", "nll_loss's total weight (a scalar)", b, "(top level)")
    return t


# --- Hugging Face GPT-2 ----------------------------------------------------------------------
def _gpt2(s: Setup) -> _Terms:
    b, m, st = s.b, s.mask_bytes, s.norm_stat_bytes
    act = ACTIVATION_TENSORS.get(s.activation or "gelu_new", 1)
    t = _Terms()
    bsh = B * S * H
    t.add("embedding.ids", "token ids (int64)", 8 * B * S, "Embedding")
    t.add("embedding.positions", "position ids (int64, one row shared by the batch)", 8 * S, "Embedding")
    if "embd" in s.dropout:
        t.add("embedding.dropout_mask", "embedding dropout mask", m * bsh, "Dropout")
    for ln in ("ln_1", "ln_2"):
        t.add(f"{ln}.input", f"{ln} input", L * b * bsh, "LayerNorm")
        t.add(f"{ln}.stats", f"{ln} mean and 1/std per token", L * 2 * st * B * S, "LayerNorm")
    t.add("attn.c_attn.input", "ln_1 output: input of c_attn", L * b * bsh, "Conv1D")
    if s.kernel == "fused":
        t.add("attn.qkv", "c_attn output: Q, K, V views kept by SDPA", L * 3 * b * bsh, "GPT2Attention")
        t.add("attn.output", "SDPA output, also the input of c_proj", L * b * bsh, "GPT2Attention")
        t.add("attn.logsumexp", "SDPA log-sum-exp per row (fp32)", L * 4 * B * a * S, "GPT2Attention")
    else:
        # SDPA's math fallback computes in fp32: it upcasts 16-bit Q, K, V, so everything it keeps is 4 bytes
        c = 4 if s.kernel == "math" else b
        cm = 4 if s.kernel == "math" else m
        t.add("attn.query", "Q, copied contiguous by matmul", L * c * bsh, "GPT2Attention",
              "SDPA's math fallback (CPU with attention dropout) keeps the same tensors as eager attention, "
              "in fp32." if s.kernel == "math" else "")
        t.add("attn.key", "Kᵀ, copied contiguous by matmul", L * c * bsh, "GPT2Attention")
        t.add("attn.softmax", "softmax output a·S² per sequence", L * c * B * a * S**2, "GPT2Attention")
        if "attn" in s.dropout:
            t.add("attn.dropout_mask", "attention dropout mask", L * cm * B * a * S**2, "GPT2Attention")
            t.add("attn.dropout_output", "dropped-out probabilities, input of the product with V",
                  L * c * B * a * S**2, "GPT2Attention")
        t.add("attn.value", "V, copied contiguous by matmul", L * c * bsh, "GPT2Attention")
        if s.kernel == "math" and b == 4:
            t.add("attn.value_view", "with B = 1, V is a view that keeps the whole c_attn output",
                  L * 2 * c * S * H * sympy.Max(0, 2 - B), "GPT2Attention",
                  "matmul's reshape of V is a view when the batch is 1 (and V is not upcast), so bmm keeps the "
                  "3·S·H c_attn output instead of an S·H copy.")
        t.add("attn.c_proj.input", "merged heads (contiguous copy): input of c_proj", L * b * bsh, "Conv1D")
    if "resid" in s.dropout:
        t.add("attn.dropout_mask_out", "dropout mask after c_proj", L * m * bsh, "Dropout")
    t.add("mlp.c_fc.input", "ln_2 output: input of c_fc", L * b * bsh, "Conv1D")
    t.add("mlp.activation", f"{s.activation or 'gelu_new'}: {act} tensor(s) of B·S·d_ff",
          L * act * b * B * S * d_ff, ACTIVATION_CLASSES.get(s.activation or "gelu_new", "activation"),
          "gelu_new keeps its input, tanh output, 0.5·x and 1 + tanh." if act == 4 else "")
    t.add("mlp.c_proj.input", "activation output: input of the MLP's c_proj", L * b * B * S * d_ff, "Conv1D")
    if "resid" in s.dropout:
        t.add("mlp.dropout_mask", "dropout mask after the MLP", L * m * bsh, "Dropout")
    t.add("ln_f.input", "final layer norm input", b * bsh, "LayerNorm")
    t.add("ln_f.stats", "final layer norm mean and 1/std", 2 * st * B * S, "LayerNorm")
    t.add("lm_head.input", "ln_f output: input of the LM head", b * bsh, "Linear")
    _loss(t, "GPT2LMHeadModel")
    return t


def _loss(t: _Terms, top: str) -> None:
    t.add("loss.log_softmax", "fp32 log-softmax of the upcast logits", 4 * B * S * V, top,
          "Hugging Face upcasts the logits to fp32 before cross-entropy; the logits are not kept.")
    t.add("loss.targets", "shifted int64 targets", 8 * B * S, top,
          "With B = 1 the shifted labels are a view of the padded (1, S + 1) labels: 8 bytes more.")
    t.add("loss.weight", "nll_loss's total weight (fp32 scalar)", 4, top)


# --- Hugging Face Llama ----------------------------------------------------------------------
def _llama(s: Setup) -> _Terms:
    b, m = s.b, s.mask_bytes
    act = ACTIVATION_TENSORS.get(s.activation or "silu", 1)
    t = _Terms()
    bsh = B * S * H
    q_width = B * S * a * d_head
    t.add("embedding.ids", "token ids (int64)", 8 * B * S, "Embedding")
    t.add("rotary", "cos and sin, one copy shared by all layers", 2 * b * S * d_head, "LlamaAttention")
    for norm in ("input_norm", "post_norm"):
        t.add(f"{norm}.fp32_input", f"{norm}: the input in fp32", L * 4 * bsh, "LlamaRMSNorm",
              "x.to(float32) is a copy in 16-bit training and the input itself in fp32 training.")
        t.add(f"{norm}.normalized", f"{norm}: normalised input in the dtype, kept by weight·x", L * b * bsh,
              "LlamaRMSNorm")
        t.add(f"{norm}.rstd", f"{norm}: 1/rms per token (fp32)", L * 4 * B * S, "LlamaRMSNorm")
    t.add("attn.proj.input", "input_norm output: input of q/k/v_proj", L * b * bsh, "Linear")
    if s.kernel == "fused":
        t.add("attn.query", "rotated Q kept by SDPA", L * b * q_width, "LlamaAttention")
        t.add("attn.key", "rotated K, a_kv heads (enable_gqa)", L * b * B * S * a_kv * d_head, "LlamaAttention")
        t.add("attn.value", "V, a_kv heads (enable_gqa)", L * b * B * S * a_kv * d_head, "LlamaAttention")
        t.add("attn.output", "SDPA output, also the input of o_proj", L * b * q_width, "LlamaAttention")
        t.add("attn.logsumexp", "SDPA log-sum-exp per row (fp32)", L * 4 * B * a * S, "LlamaAttention")
    else:
        note = ("SDPA's math fallback (CPU with attention dropout) is approximated by eager attention; "
                "not validated.") if s.kernel == "math" else ""
        t.add("attn.query", "Q, copied contiguous by matmul", L * b * q_width, "LlamaAttention", note)
        t.add("attn.key", "K after repeat_kv (a heads)", L * b * q_width, "LlamaAttention")
        t.add("attn.value", "V after repeat_kv (a heads)", L * b * q_width, "LlamaAttention")
        t.add("attn.softmax", "fp32 softmax output a·S² per sequence", L * 4 * B * a * S**2, "LlamaAttention")
        if b != 4 or "attn" in s.dropout:
            t.add("attn.probs", "probabilities in the dtype (after .to or dropout): input of the product with V",
                  L * b * B * a * S**2, "LlamaAttention")
        if "attn" in s.dropout:
            t.add("attn.dropout_mask", "attention dropout mask", L * m * B * a * S**2, "LlamaAttention")
        t.add("attn.o_proj.input", "merged heads (contiguous copy): input of o_proj", L * b * q_width, "Linear")
    t.add("mlp.input", "post_norm output: input of gate_proj and up_proj", L * b * bsh, "Linear")
    t.add("mlp.gate", "gate_proj output: input of the activation", L * act * b * B * S * d_ff,
          ACTIVATION_CLASSES.get(s.activation or "silu", "activation"))
    t.add("mlp.product_operands", "activation output and up_proj output, kept by their product",
          L * 2 * b * B * S * d_ff, "LlamaMLP")
    t.add("mlp.down.input", "their product: input of down_proj", L * b * B * S * d_ff, "Linear")
    t.add("norm.fp32_input", "final norm: the input in fp32", 4 * bsh, "LlamaRMSNorm")
    t.add("norm.normalized", "final norm: normalised input in the dtype", b * bsh, "LlamaRMSNorm")
    t.add("norm.rstd", "final norm: 1/rms per token (fp32)", 4 * B * S, "LlamaRMSNorm")
    t.add("lm_head.input", "final norm output: input of the LM head", b * bsh, "Linear")
    _loss(t, "LlamaForCausalLM")
    return t


_BUILDERS = {"mlp": _mlp, "gpt2": _gpt2, "llama": _llama}
TITLES = {"mlp": "article A's network", "gpt2": "Hugging Face GPT-2", "llama": "Hugging Face Llama"}


def saved(family: str, setup: Setup | None = None, **options: Any) -> SavedModel:
    """The saved-for-backward bytes of one training step of ``family`` under ``setup``.

    ``options`` override fields of ``setup`` (precision, device, attn, dropout, activation).
    """
    if family not in _BUILDERS:
        raise UnknownNameError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}")
    s = replace(setup or Setup(), **options) if options else (setup or Setup())
    if family == "mlp" and (s.dropout or s.attn != "sdpa"):
        s = replace(s, dropout=frozenset(), attn="sdpa")  # the network has neither
    t = _BUILDERS[family](s)
    key = f"pytorch.saved.{family}"
    formula = Formula(
        key, f"Bytes saved for backward by one training step of {TITLES[family]} ({s.label(family)})",
        t.terms, source=SRC, name="A_saved", example=EXAMPLES[family],
        note=f"Follows what torch.autograd keeps ({s.label(family)}); see symbolic/library/activations_pytorch.py.")
    return SavedModel(family, s, formula, t.saved_by)


# --- configs -------------------------------------------------------------------------------
_GPT2_TYPES = {"gpt2"}
_LLAMA_TYPES = {"llama", "mistral", "qwen2"}
_DROPOUT_KEYS = {
    "embd": ("embd_pdrop", "embedding_dropout", "emb_pdrop"),
    "attn": ("attn_pdrop", "attention_dropout", "attention_probs_dropout_prob"),
    "resid": ("resid_pdrop", "hidden_dropout", "hidden_dropout_prob", "resid_dropout"),
}


def family_for(config: Mapping[str, Any]) -> tuple[str, str]:
    """(family, note) for a Hugging Face config: the implementation whose terms apply.

    GPT-2 and the Llama family (Llama, Mistral, Qwen2) are measured; other models get the family
    of the same block structure (RMSNorm + gated MLP → llama, else gpt2) and a note saying so.
    """
    model_type = str(config.get("model_type", ""))
    if model_type in _GPT2_TYPES:
        return "gpt2", ""
    if model_type in _LLAMA_TYPES:
        return "llama", ""
    gated = str(config.get("hidden_act", "")) in ("silu", "swish") or "intermediate_size" in config
    family = "llama" if gated and "rms_norm_eps" in config else "gpt2"
    return family, (f"{model_type or 'this model'}: not measured; approximated by the {family} implementation's "
                    "terms")


# transformers' defaults when a config leaves a probability out
_DROPOUT_DEFAULTS = {"gpt2": {"embd_pdrop": 0.1, "attn_pdrop": 0.1, "resid_pdrop": 0.1}, "llama": {}}


def dropout_sites(config: Mapping[str, Any], family: str | None = None) -> frozenset[str]:
    """The dropout sites with p > 0 in a Hugging Face config (GPT-2, Llama and BERT key names).

    A probability the config leaves out takes the family's ``transformers`` default (GPT-2: 0.1).
    """
    family = family or family_for(config)[0]
    merged = {**_DROPOUT_DEFAULTS.get(family, {}), **config}
    sites = set()
    for site, keys in _DROPOUT_KEYS.items():
        for key in keys:
            value = merged.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                sites.add(site)
    return frozenset(sites)


def dropout_keys() -> tuple[str, ...]:
    """Every config key that holds a dropout probability."""
    return tuple(k for keys in _DROPOUT_KEYS.values() for k in keys)


def setup_for(config: Mapping[str, Any], **options: Any) -> tuple[str, Setup, str]:
    """(family, setup, note) for a config: its dropout probabilities and activation, plus ``options``."""
    family, note = family_for(config)
    activation = str(config.get("activation_function") or config.get("hidden_act") or "")
    setup = Setup(dropout=dropout_sites(config, family), activation=activation, **options)
    return family, setup, note


# --- registered examples ---------------------------------------------------------------------
EXAMPLES: dict[str, dict[str, int]] = {
    "mlp": {"d_in": 2048, "d_h": 4096, "n_out": 10, "B": 128},
    "gpt2": {"H": 768, "L": 12, "a": 12, "V": 50257, "d_ff": 3072, "B": 8, "S": 1024},
    "llama": {"H": 4096, "L": 32, "a": 32, "a_kv": 8, "d_head": 128, "V": 128256, "d_ff": 14336, "B": 1, "S": 8192},
}
CANONICAL = {
    "mlp": Setup(precision="fp32", device="cpu"),
    "gpt2": Setup(precision="bf16", device="cuda", attn="sdpa", dropout=frozenset({"embd", "attn", "resid"}),
                  activation="gelu_new"),
    "llama": Setup(precision="bf16", device="cuda", attn="sdpa", activation="silu"),
}
for _family, _setup in CANONICAL.items():
    register(saved(_family, _setup).formula)
