"""What PyTorch autograd really saves for backward: implementation-aware activation terms.

Article B's ``L(14E + 4BSS) + 6BSV`` and Korthikanti's ``sbh(34 + 5as/h)`` describe an idealised
layer. The terms here follow, tensor by tensor, what ``torch.autograd`` keeps alive between the
forward and the backward pass of three real implementations:

- ``mlp``: article A's network as PyTorch code (``symbolic.measured.crosscheck.ArticleANet``): four
  ``nn.Linear`` layers with or without biases, ReLUs, a softmax output and
  ``F.cross_entropy(probs, targets)`` as the loss;
- ``gpt2``: Hugging Face ``GPT2LMHeadModel`` (LayerNorm, ``Conv1D`` projections, the Python
  tanh-GELU ``gelu_new``, multi-head attention, learned positions, dropout, tied LM head);
- ``llama``: Hugging Face ``LlamaForCausalLM`` and its copies (Mistral, Qwen2): RMSNorm computed
  in fp32, SwiGLU MLP, grouped-query attention (``repeat_kv`` in eager attention,
  ``enable_gqa`` in SDPA), rotary position embeddings, untied head.

How the terms were found (the derivation, written down once):

1. Measure. ``symbolic.measured.measure.saved_tensors`` records every tensor autograd's pack hook sees,
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

- Mixed precision (``torch.autocast``, "bf16-mixed"/"fp16-mixed"; fp32 weights): the residual
  stream stays fp32 (fp32 embeddings plus 16-bit branch outputs), so LayerNorm/RMSNorm inputs
  and statistics, GPT-2's embedding dropout mask and Llama's cos/sin are 4 bytes; each matmul
  casts its fp32 input to a 16-bit copy (Llama's q/k/v and gate/up projections each make their
  own) and its weight to a 16-bit copy that autocast caches for the forward pass and the matmul
  keeps: b·(every matmul weight) more, less the first matmul's when its input needs no
  gradient (article A's ``gat``). GPT-2's eager softmax is fp32 (the fp32 mask is added first)
  and its ``.type(value.dtype)`` copy is kept by the product with V.
- ``use_cache`` (the config's, true by default): ``DynamicLayer.update`` concatenates the new K
  and V onto empty tensors, so the cache holds copies. GPT-2 with fused SDPA then keeps the
  copies beside the c_attn output that Q still views: 2·b·B·S·H more per layer; with eager
  attention only at B = 1 (where matmul's reshapes are views). Llama saves the same bytes (the
  copies replace the rotated K and V); its eager attention repeats them, so the cache's copies
  are alive, unsaved, until the forward pass ends (``peak_pytorch``'s forward phase).

Only measurements on the CPU were possible when these terms were written (torch 2.13.0,
transformers 5.24.0). The CUDA variants differ where the code differs (bool dropout masks,
fp32 LayerNorm statistics, fused SDPA kernels even with dropout); they follow the ATen sources
and are checked by ``benchmarks/gpu_measure.py`` when a GPU is available. The bool masks are
also checked on the CPU: ``symbolic validate --dropout-masks bool`` runs ``torch.native_dropout``
(CUDA's fused dropout, whose backward keeps a bool mask) in place of ``F.dropout``. Not
modelled: the memory-efficient kernel pads its log-sum-exp to a multiple of 32 rows; the RNG
state a fused CUDA dropout or attention kernel keeps (a few bytes per layer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import sympy

from .. import formats
from ..core.errors import UnknownNameError
from ..core.symbols import B, H, L, S, V, a, a_kv, d_ff, d_h, d_head, d_in, n_out
from ..core.term import Term
from ..math.formula import Formula
from .registry import register

SRC = "pytorch"
IMPLEMENTATIONS = ("mlp", "gpt2", "llama")  # the PyTorch implementations whose saved tensors are modelled
# the "-mixed" precisions are torch.autocast (fp32 weights, 16-bit compute); bytes: element_bytes
PRECISIONS = ("fp32", "bf16", "fp16", "bf16-mixed", "fp16-mixed")
DEVICES = ("cpu", "cuda")
ATTENTION = ("eager", "sdpa")
DROPOUT_MASKS = ("bool", "dtype")
LOSSES = ("cross-entropy", "mse")
# what the planner's loss option takes: article A's losses and a torch module's sum or mean of its output
# (networks.module.source.LOSSES, issue 29)
PLAN_LOSSES = (*LOSSES, "sum", "mean")
# B·S·d_ff tensors an MLP activation module keeps (Hugging Face implementations, measured)
ACTIVATION_TENSORS = {"gelu_new": 4, "gelu": 1, "gelu_pytorch_tanh": 1, "silu": 1, "swish": 1, "relu": 1}
ACTIVATION_CLASSES = {"gelu_new": "NewGELUActivation", "gelu": "GELUActivation", "gelu_pytorch_tanh": "GELUTanh",
                      "silu": "SiLUActivation", "swish": "SiLU", "relu": "ReLU"}


_FP32 = int(formats.nbytes("fp32"))  # autocast keeps weights, states and the residual stream in fp32


def element_bytes(precision: str) -> int:
    """Bytes per activation element of a precision: its compute dtype's (the 16-bit one under autocast)."""
    if precision not in PRECISIONS:
        raise UnknownNameError(f"unknown precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    return int(formats.nbytes(precision.removesuffix("-mixed")))


@dataclass(frozen=True)
class Setup:
    """Where and how the model runs: what decides which tensors autograd keeps.

    ``dropout`` names the dropout sites with p > 0: "embd", "attn" (attention probabilities)
    and "resid" (after the attention and MLP output projections). ``activation`` is the
    config's MLP activation (``activation_function``/``hidden_act``). ``dropout_masks``: the
    dropout mask element, "bool" (CUDA's fused dropout) or "dtype" (the CPU's ``input * mask``);
    empty follows ``device``. ``use_cache``: transformers builds its KV cache during the step
    (the config's ``use_cache``; off under gradient checkpointing).
    """

    precision: str = "bf16"
    device: str = "cuda"
    attn: str = "sdpa"
    dropout: frozenset[str] = field(default_factory=frozenset)
    activation: str = ""
    dropout_masks: str = ""
    use_cache: bool = False
    compile: bool = False
    compile_loss: bool = True  # with compile: the loss compiled too (torchtune); False: eager (torchtitan 9dec370)
    cuda_arch: tuple[int, int] | None = None  # the planned GPU's compute capability (None: sm90 assumed)
    lora: tuple[object, ...] = ()  # (rank, targets, dropout, adapter dtype, qlora): a network that measures its own

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
        if self.dropout_masks not in ("", *DROPOUT_MASKS):
            raise UnknownNameError(f"unknown dropout mask element {self.dropout_masks!r}; choose from "
                                   f"{', '.join(DROPOUT_MASKS)}")
        object.__setattr__(self, "dropout", frozenset(self.dropout))
        object.__setattr__(self, "use_cache", bool(self.use_cache))
        object.__setattr__(self, "compile", bool(self.compile))
        object.__setattr__(self, "compile_loss", bool(self.compile_loss))

    @property
    def b(self) -> int:
        """Bytes per activation element (the compute dtype's: 2 under autocast)."""
        return element_bytes(self.precision)

    @property
    def mixed(self) -> bool:
        """Whether the step runs under ``torch.autocast`` (fp32 weights, 16-bit matmuls)."""
        return self.precision.endswith("-mixed")

    @property
    def param_bytes(self) -> int:
        """Bytes per element of weights, gradients and optimizer state: fp32 under autocast."""
        return _FP32 if self.mixed else self.b

    @property
    def masks(self) -> str:
        """The dropout mask element in effect: as given, else bool on CUDA and dtype on the CPU."""
        return self.dropout_masks or ("dtype" if self.device == "cpu" else "bool")

    @property
    def mask_bytes(self) -> int:
        """Bytes per dropout-mask element: the dtype's (CPU default) or a bool's (CUDA default)."""
        return self.b if self.masks == "dtype" else 1

    @property
    def residual_bytes(self) -> int:
        """Bytes per element of the residual stream: fp32 under autocast (embeddings and sums of fp32)."""
        return _FP32 if self.mixed else self.b

    @property
    def norm_stat_bytes(self) -> int:
        """Bytes of LayerNorm's saved mean and 1/std: its input's dtype on the CPU, fp32 on CUDA."""
        return self.residual_bytes if self.device == "cpu" else _FP32

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
        return f"{self.precision}, {self.attn}, {self.device}, dropout {drop}" + self._compiled_label()

    def _compiled_label(self) -> str:
        """", compiled" (blocks and loss), ", compiled blocks" (the loss eager) or nothing."""
        if not self.compile:
            return ""
        return ", compiled" if self.compile_loss else ", compiled blocks"


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
def _mlp(s: Setup, loss: str = "cross-entropy") -> _Terms:
    b = s.b
    f = 4 if s.mixed else b  # what autocast runs in fp32 (cross-entropy)
    t = _Terms()
    t.add("gat.input", "x: input of gat, kept by the Linear for its weight gradient"
          + (" (autocast's 16-bit copy)" if s.mixed else ""), b * B * d_in, "Linear",
          "Article A leaves the input out (erratum 5).")
    if s.mixed:
        t.add("weights.copies", "autocast's 16-bit copies of up, down and out's weights", b * (d_h**2 + 2 * d_h * d_in
              - d_h * d_in + d_in * n_out), "Linear",
              "gat's copy is not kept: its input x needs no gradient, so neither does the copy's product.")
    t.add("relu1", "relu(gat(x)): ReLU output, also the input of up", b * B * d_h, "ArticleANet")
    t.add("relu2", "relu(up(g)): ReLU output", b * B * d_h, "ArticleANet")
    t.add("relu3", "relu(g + u): ReLU output, also the input of down", b * B * d_h, "ArticleANet")
    t.add("relu4", "relu(down(g)): ReLU output", b * B * d_in, "ArticleANet")
    t.add("out.input", "g + x: input of out" + (" (16-bit copy of the fp32 sum)" if s.mixed else ""), b * B * d_in,
          "Linear")
    t.add("softmax", "softmax output", b * B * n_out, "ArticleANet")
    if loss == "mse":
        t.add("loss.target", "one-hot targets in the dtype, kept by mse_loss", f * B * n_out, "(top level)",
              "F.mse_loss(probs, F.one_hot(y).to(probs.dtype)) keeps both operands; probs is the softmax output.")
        if s.mixed:
            t.add("loss.probs_fp32", "autocast's fp32 copy of the probabilities (mse_loss runs in fp32)",
                  4 * B * n_out, "(top level)")
        return t
    t.add("loss.log_softmax", "cross-entropy's log-softmax output", f * B * n_out, "(top level)",
          "F.cross_entropy applied to the softmax output, as the article's network ends in a softmax"
          + ("; autocast runs it in fp32." if s.mixed else "."))
    t.add("loss.targets", "int64 class targets", 8 * B, "(top level)")
    t.add("loss.weight", "nll_loss's total weight (a scalar)", f, "(top level)")
    return t


# --- Hugging Face GPT-2 ----------------------------------------------------------------------
def _gpt2(s: Setup) -> _Terms:
    b, m, st, r = s.b, s.mask_bytes, s.norm_stat_bytes, s.residual_bytes
    act = ACTIVATION_TENSORS.get(s.activation or "gelu_new", 1)
    t = _Terms()
    bsh = B * S * H
    t.add("embedding.ids", "token ids (int64)", 8 * B * S, "Embedding")
    t.add("embedding.positions", "position ids (int64, one row shared by the batch)", 8 * S, "Embedding")
    if "embd" in s.dropout:
        t.add("embedding.dropout_mask", "embedding dropout mask", (r if s.masks == "dtype" else 1) * bsh, "Dropout",
              "Under autocast the embeddings are fp32, and so is a dtype mask." if s.mixed else "")
    for ln in ("ln_1", "ln_2"):
        t.add(f"{ln}.input", f"{ln} input", L * r * bsh, "LayerNorm")
        t.add(f"{ln}.stats", f"{ln} mean and 1/std per token", L * 2 * st * B * S, "LayerNorm")
    t.add("attn.c_attn.input", "ln_1 output: input of c_attn", L * b * bsh, "Conv1D")
    if s.mixed:
        t.add("attn.c_attn.weight", "autocast's 16-bit copies of the layers' Conv1D weights", L * b * (4 * H**2 + 2 * H * d_ff),
              "Conv1D", "torch.autocast casts each weight once per forward (its cache); addmm keeps the copy.")
    if s.kernel == "fused":
        t.add("attn.qkv", "c_attn output: Q, K, V views kept by SDPA", L * 3 * b * bsh, "GPT2Attention")
        t.add("attn.output", "SDPA output, also the input of c_proj", L * b * bsh, "GPT2Attention")
        t.add("attn.logsumexp", "SDPA log-sum-exp per row (fp32)", L * 4 * B * a * S, "GPT2Attention")
        if s.use_cache:
            t.add("attn.kv_cache", "K and V as the KV cache's torch.cat copies, kept by SDPA", L * 2 * b * bsh,
                  "GPT2Attention", "use_cache: DynamicLayer.update concatenates, so SDPA keeps copies beside the "
                                   "c_attn output that Q still views.")
    else:
        # SDPA's math fallback computes in fp32: it upcasts 16-bit Q, K, V, so everything it keeps is 4 bytes
        c = 4 if s.kernel == "math" else b
        cm = 4 if s.kernel == "math" else m
        t.add("attn.query", "Q, copied contiguous by matmul", L * c * bsh, "GPT2Attention",
              "SDPA's math fallback (CPU with attention dropout) keeps the same tensors as eager attention, "
              "in fp32." if s.kernel == "math" else "")
        t.add("attn.key", "Kᵀ, copied contiguous by matmul", L * c * bsh, "GPT2Attention")
        soft = 4 if s.mixed else c
        t.add("attn.softmax", "softmax output a·S² per sequence", L * soft * B * a * S**2, "GPT2Attention",
              "softmax runs in fp32 under autocast" if s.mixed else "")
        if s.mixed and "attn" not in s.dropout and s.kernel == "eager":
            t.add("attn.probs", "probabilities cast back to the dtype (.type(value.dtype)): input of the product with V",
                  L * b * B * a * S**2, "GPT2Attention")
        if "attn" in s.dropout:
            t.add("attn.dropout_mask", "attention dropout mask", L * cm * B * a * S**2, "GPT2Attention")
            t.add("attn.dropout_output", "dropped-out probabilities, input of the product with V",
                  L * c * B * a * S**2, "GPT2Attention")
        t.add("attn.value", "V, copied contiguous by matmul", L * c * bsh, "GPT2Attention")
        if s.kernel == "eager" and s.use_cache:
            t.add("attn.kv_cache", "with B = 1, K and V are the KV cache's copies, kept beside the c_attn output",
                  L * 2 * b * S * H * sympy.Max(0, 2 - B), "GPT2Attention",
                  "use_cache: with B = 1 matmul's reshapes of Q, Kᵀ and V are views, so the c_attn output stays and "
                  "the cache's torch.cat copies of K and V are kept besides; with B ≥ 2 the copies replace the ones "
                  "matmul would make.")
        if s.kernel == "math" and b == 4 and not s.use_cache:
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
    t.add("ln_f.input", "final layer norm input", r * bsh, "LayerNorm")
    t.add("ln_f.stats", "final layer norm mean and 1/std", 2 * st * B * S, "LayerNorm")
    t.add("lm_head.input", "ln_f output: input of the LM head", b * bsh, "Linear")
    _head_copy(t, s)
    _loss(t, "GPT2LMHeadModel")
    return t


def _head_copy(t: _Terms, s: Setup) -> None:
    if s.mixed:
        t.add("lm_head.weight", "autocast's 16-bit copy of the LM head weight", s.b * V * H, "Linear",
              "The head's F.linear casts the (tied or own) fp32 weight; the copy is kept for the input gradient.")


def _loss(t: _Terms, top: str) -> None:
    t.add("loss.log_softmax", "fp32 log-softmax of the upcast logits", 4 * B * S * V, top,
          "Hugging Face upcasts the logits to fp32 before cross-entropy; the logits are not kept.")
    t.add("loss.targets", "shifted int64 targets", 8 * B * S, top,
          "With B = 1 the shifted labels are a view of the padded (1, S + 1) labels: 8 bytes more.")
    t.add("loss.weight", "nll_loss's total weight (fp32 scalar)", 4, top)


# --- Hugging Face Llama ----------------------------------------------------------------------
def _llama(s: Setup) -> _Terms:
    b, m, r = s.b, s.mask_bytes, s.residual_bytes
    act = ACTIVATION_TENSORS.get(s.activation or "silu", 1)
    t = _Terms()
    bsh = B * S * H
    q_width = B * S * a * d_head
    casts = 3 if s.mixed else 1  # autocast casts the fp32 norm output once per projection
    t.add("embedding.ids", "token ids (int64)", 8 * B * S, "Embedding")
    t.add("rotary", "cos and sin, one copy shared by all layers", 2 * r * S * d_head, "LlamaAttention",
          "In the hidden states' dtype: fp32 under autocast." if s.mixed else "")
    for norm in ("input_norm", "post_norm"):
        t.add(f"{norm}.fp32_input", f"{norm}: the input in fp32", L * 4 * bsh, "LlamaRMSNorm",
              "x.to(float32) is a copy in 16-bit training and the input itself in fp32 training.")
        t.add(f"{norm}.normalized", f"{norm}: normalised input in the dtype, kept by weight·x", L * r * bsh,
              "LlamaRMSNorm")
        t.add(f"{norm}.rstd", f"{norm}: 1/rms per token (fp32)", L * 4 * B * S, "LlamaRMSNorm")
    t.add("attn.proj.input", "input_norm output: input of q/k/v_proj" + (", one 16-bit copy each" if s.mixed else ""),
          L * casts * b * bsh, "Linear")
    if s.mixed:
        kv = a_kv * d_head
        t.add("attn.proj.weight", "autocast's 16-bit copies of the layers' Linear weights",
              L * b * (2 * H * a * d_head + 2 * H * kv + 3 * H * d_ff), "Linear",
              "torch.autocast casts each weight once per forward (its cache); the matmul keeps the copy.")
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
    t.add("mlp.input", "post_norm output: input of gate_proj and up_proj" + (", one 16-bit copy each" if s.mixed else ""),
          L * (2 if s.mixed else 1) * b * bsh, "Linear")
    t.add("mlp.gate", "gate_proj output: input of the activation", L * act * b * B * S * d_ff,
          ACTIVATION_CLASSES.get(s.activation or "silu", "activation"))
    t.add("mlp.product_operands", "activation output and up_proj output, kept by their product",
          L * 2 * b * B * S * d_ff, "LlamaMLP")
    t.add("mlp.down.input", "their product: input of down_proj", L * b * B * S * d_ff, "Linear")
    t.add("norm.fp32_input", "final norm: the input in fp32", 4 * bsh, "LlamaRMSNorm")
    t.add("norm.normalized", "final norm: normalised input in the dtype", r * bsh, "LlamaRMSNorm")
    t.add("norm.rstd", "final norm: 1/rms per token (fp32)", 4 * B * S, "LlamaRMSNorm")
    t.add("lm_head.input", "final norm output: input of the LM head", b * bsh, "Linear")
    _head_copy(t, s)
    _loss(t, "LlamaForCausalLM")
    return t


# --- torch.compile (issue 28): what the min-cut partitioner saves ---------------------------------
COMPILE_SRC = "torch-partitioner"


def _check_compiled(s: Setup) -> None:
    """The setups whose compiled step was measured: a fused attention kernel, no dropout, no autocast, no cache."""
    if s.kernel != "fused" or s.dropout or s.mixed or s.use_cache:
        raise UnknownNameError("compile is modelled (measured) with sdpa's fused attention, no dropout, pure fp32/bf16 "
                               "and no KV cache; this setup has "
                               f"{s.label()}{', autocast' if s.mixed else ''}{', use_cache' if s.use_cache else ''}")


def _llama_block_compiled(t: _Terms, s: Setup) -> None:
    """One compiled LlamaDecoderLayer: the partitioner keeps mm and SDPA outputs and inputs, recomputes the rest."""
    b, bsh, block = s.b, B * S * H, "LlamaDecoderLayer"
    note = "Norms, rotary, SiLU and the residual sums are recomputed in the compiled backward."
    t.add("layer.input", "layer input, kept by the compiled block (its norm is recomputed from it)", L * b * bsh, block,
          note)
    t.add("input_norm.rstd", "input_norm: 1/rms per token (fp32)", L * 4 * B * S, block)
    t.add("attn.proj.input", "input_norm output: input of q/k/v_proj", L * b * bsh, block)
    t.add("attn.query", "rotated Q kept by SDPA", L * b * B * S * a * d_head, block)
    t.add("attn.key", "rotated K, a_kv heads (enable_gqa)", L * b * B * S * a_kv * d_head, block)
    t.add("attn.value", "V, a_kv heads (enable_gqa)", L * b * B * S * a_kv * d_head, block)
    t.add("attn.output", "SDPA output, also the input of o_proj", L * b * B * S * a * d_head, block)
    t.add("attn.logsumexp", "SDPA log-sum-exp per row (fp32)", L * 4 * B * a * S, block)
    t.add("attn.o_proj.output", "o_proj output: the residual sum post_norm needs is rebuilt from it", L * b * bsh, block)
    t.add("post_norm.rstd", "post_norm: 1/rms per token (fp32)", L * 4 * B * S, block)
    t.add("mlp.input", "post_norm output: input of gate_proj and up_proj", L * b * bsh, block)
    t.add("mlp.gate_up", "gate_proj and up_proj outputs (the SiLU and the product are recomputed)",
          L * 2 * b * B * S * d_ff, block)
    t.add("mlp.down.input", "their product: input of down_proj", L * b * B * S * d_ff, block)


def _gpt2_block_compiled(t: _Terms, s: Setup) -> None:
    """One compiled GPT2Block: LayerNorms and the GELU recomputed from the saved matmul inputs and outputs."""
    b, st, bsh, block = s.b, s.norm_stat_bytes, B * S * H, "GPT2Block"
    t.add("layer.input", "layer input, kept by the compiled block (ln_1 input)", L * s.residual_bytes * bsh, block,
          "LayerNorm outputs, the GELU and the residual sums are recomputed in the compiled backward.")
    for ln in ("ln_1", "ln_2"):
        t.add(f"{ln}.stats", f"{ln} mean and 1/std per token", L * 2 * st * B * S, block)
    t.add("attn.c_attn.input", "ln_1 output: input of c_attn", L * b * bsh, block)
    t.add("attn.qkv", "c_attn output: Q, K, V views kept by SDPA", L * 3 * b * bsh, block)
    t.add("attn.output", "SDPA output, also the input of c_proj", L * b * bsh, block)
    t.add("attn.logsumexp", "SDPA log-sum-exp per row (fp32)", L * 4 * B * a * S, block)
    t.add("attn.c_proj.output", "the attention's c_proj output: ln_2's input is rebuilt from it", L * b * bsh, block)
    t.add("mlp.c_fc.input", "ln_2 output: input of c_fc", L * b * bsh, block)
    t.add("mlp.c_fc.output", "c_fc output: the activation's input (the activation is recomputed)",
          L * b * B * S * d_ff, block)
    t.add("mlp.c_proj.input", "activation output: input of the MLP's c_proj (kept transposed for its weight gradient)",
          L * b * B * S * d_ff, block)


def compiled_loss_terms(act_bytes: int) -> list[tuple[str, str, sympy.Expr, str]]:
    """What a compiled ``F.cross_entropy(logits.float(), labels)`` saves: (key, title, bytes, note).

    The partitioner keeps the logits in their dtype and recomputes the fp32 upcast and softmax
    from them with the per-token max and log-sum-exp (measured: no B·S·V fp32 tensor is saved).
    """
    return [("loss.logits", f"logits in the dtype ({act_bytes} bytes): the compiled loss's input", act_bytes * B * S * V,
             "The fp32 upcast and the log-softmax are recomputed in the compiled backward."),
            ("loss.targets", "int64 targets", 8 * B * S, ""),
            ("loss.stats", "fp32 max and log-sum-exp per token", 2 * 4 * B * S, ""),
            ("loss.weight", "the total weight (fp32 scalar)", 4, "")]


def _compiled(t: _Terms, s: Setup, block: Any, top: str) -> _Terms:
    """The eager model's once-terms (embeddings, final norm, head) with compiled blocks and a compiled loss
    (``s.compile_loss``; else the eager loss's terms)."""
    _check_compiled(s)
    out = _Terms()
    tail = [term for term in t.terms if not term.expr.has(L) and not (s.compile_loss and term.key.startswith("loss."))]
    head = [term for term in tail if term.key in ("embedding.ids", "embedding.positions", "rotary")]
    for term in head:
        out.add(term.key, term.title, term.expr, t.saved_by[term.key], term.note)
    block(out, s)
    for term in tail:
        if term not in head:
            out.add(term.key, term.title, term.expr, t.saved_by[term.key], term.note)
    for key, title, expr, note in compiled_loss_terms(s.b) if s.compile_loss else ():
        out.add(key, title, expr, top, note)
    return out


def _llama_any(s: Setup) -> _Terms:
    return _compiled(_llama(s), s, _llama_block_compiled, "LlamaForCausalLM") if s.compile else _llama(s)


def _gpt2_any(s: Setup) -> _Terms:
    return _compiled(_gpt2(s), s, _gpt2_block_compiled, "GPT2LMHeadModel") if s.compile else _gpt2(s)


_BUILDERS = {"mlp": _mlp, "gpt2": _gpt2_any, "llama": _llama_any}
TITLES = {"mlp": "article A's network", "gpt2": "Hugging Face GPT-2", "llama": "Hugging Face Llama"}


def saved(family: str, setup: Setup | None = None, *, loss: str = "cross-entropy", **options: Any) -> SavedModel:
    """The saved-for-backward bytes of one training step of ``family`` under ``setup``.

    ``options`` override fields of ``setup`` (precision, device, attn, dropout, activation,
    dropout_masks, use_cache). ``loss``: article A's network's loss, "cross-entropy" of its
    softmax output or "mse" to one-hot targets (the language models use Hugging Face's loss).
    """
    if family not in _BUILDERS:
        raise UnknownNameError(f"unknown family {family!r}; choose from {', '.join(IMPLEMENTATIONS)}")
    if loss not in LOSSES or (loss != "cross-entropy" and family != "mlp"):
        raise UnknownNameError(f"unknown loss {loss!r} for {family}; choose from "
                               f"{', '.join(LOSSES if family == 'mlp' else LOSSES[:1])}")
    s = replace(setup or Setup(), **options) if options else (setup or Setup())
    if family == "mlp" and (s.dropout or s.attn != "sdpa" or s.use_cache or s.compile):
        if s.compile:
            raise UnknownNameError("compile is modelled for the gpt2 and llama implementations, not article A's network")
        s = replace(s, dropout=frozenset(), attn="sdpa", use_cache=False)  # the network has none of these
    t = _mlp(s, loss) if family == "mlp" else _BUILDERS[family](s)
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
    """(family, setup, note) for a config: its dropout probabilities, activation and ``use_cache``
    (transformers' default true), plus ``options``, which win."""
    family, note = family_for(config)
    activation = str(config.get("activation_function") or config.get("hidden_act") or "")
    options = {"use_cache": bool(config.get("use_cache", True)), **options}
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
