"""Training FLOPs of a step that trains only part of the model: LoRA or QLoRA adapters, frozen embeddings.

A matmul's backward is two matmuls of its size (Narayanan et al. 2021, §5.1): the gradient of its
input and the gradient of its weight. Autograd runs each only when it is wanted (PyTorch's
``derivatives.yaml``: ``mm`` computes ``mat1``'s and ``mat2``'s gradients under separate
``grad_input_mask`` entries), so

- a frozen weight's matmul costs 1 × its forward in backward (the input gradient), and nothing
  when its input needs no gradient either: under LoRA without gradient checkpointing, layer 0's
  input (the frozen embedding's output) needs none, so its first projections (Q, K, V; GPT-2's
  ``c_attn``) compute no gradient, and what follows them needs one only where an adapter lies on
  the way; transformers' gradient checkpointing calls ``enable_input_require_grads``
  (modeling_utils.py, transformers 5.24.0), which makes layer 0's input need one again;
- each adapter adds lora_A (in → r) and lora_B (r → out): 2·r·(in + out) forward FLOPs per token
  (Hu et al. 2021, eq. 3, h = W₀x + BAx), and in backward both weight gradients, lora_B's input
  gradient, and lora_A's input gradient where the base matmul's input needs one. Hu et al. (§4.2)
  report a 25 % higher training throughput on GPT-3 175B than full fine-tuning, "as we do not need
  to calculate the gradient for the vast majority of the parameters";
- the attention core (Q·Kᵀ and softmax·V, activation by activation) keeps both gradients: a fused
  kernel (FlashAttention) computes dQ, dK and dV whenever any is wanted; eager attention (``flash``
  off) runs each bmm's gradients as autograd asks, so layer 0's dK is skipped when K needs none;
- the output layer, frozen (LoRA; or tied to a frozen embedding), computes only its input gradient.

With frozen embeddings alone every layer trains: layer 0's first matmuls still compute their input
gradient (Llama's first norm weight, GPT-2's position embedding need it), so only a tied head's
weight gradient and (OPT's ``project_in``) the input gradient of a matmul reading the embedding go.
Checked against ``torch.utils.flop_counter.FlopCounterMode`` over a real step of a tiny Llama with
peft's adapters (``tests/test_time_torch.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sympy

from ..core import sources
from ..core.symbols import L, S, V
from ..core.term import Term
from . import lora
from .flops import _OPS_NOTE, EARLY_STOP_NOTE, LAST_MATMUL, RECOMPUTE, full_recompute, last_matmuls

if "hu2021" not in sources.SOURCES:
    sources.register("hu2021", "E. J. Hu et al., \"LoRA: Low-Rank Adaptation of Large Language Models\", 2021",
                     "https://arxiv.org/abs/2106.09685")

# The layer's dataflow by the family tables' matmul keys (networks.transformer.formulas): what reads the layer input
_LAYER_INPUT = ("attention.q", "attention.k", "attention.v")
_AFTER_ATTENTION = ("attention.o",)
_MLP_IN = ("mlp.gate", "mlp.up")
_MLP_OUT = ("mlp.down",)
HEAD = "output"


@dataclass(frozen=True)
class Adapter(lora.Adapter):
    """One LoRA adapter (``library.lora.Adapter``) and the forward terms of the base matmul(s) it wraps."""

    wraps: tuple[str, ...] = ()  # forward term keys: "attention.q", ..., "output"


# peft's module names (library.lora.LAYER_MODULES, HEAD) by the forward terms each wraps (GPT-2's c_attn: Q, K, V)
WRAPS: dict[str, dict[str, tuple[str, ...]]] = {
    "gpt2": {"attn.c_attn": _LAYER_INPUT, "attn.c_proj": _AFTER_ATTENTION, "mlp.c_fc": ("mlp.up",),
             "mlp.c_proj": _MLP_OUT, lora.HEAD[0]: (HEAD,)},
    "llama": {"self_attn.q_proj": ("attention.q",), "self_attn.k_proj": ("attention.k",),
              "self_attn.v_proj": ("attention.v",), "self_attn.o_proj": _AFTER_ATTENTION,
              "mlp.gate_proj": ("mlp.gate",), "mlp.up_proj": ("mlp.up",), "mlp.down_proj": _MLP_OUT,
              lora.HEAD[0]: (HEAD,)},
}


def adapters_of(found: lora.Adapters) -> tuple[Adapter, ...]:
    """The planned adapters (``finetune.adapters``) with the forward terms each wraps."""
    wraps = WRAPS[found.family]
    return tuple(Adapter(m.name, m.d_in, m.d_out, m.count, wraps[m.name]) for m in found.modules)


@dataclass(frozen=True)
class Trained:
    """What a training step trains, for its FLOPs (hashable: the planner caches FLOPs by it)."""

    rank: int = 0  # LoRA rank (0: no adapters, every weight but the frozen ones trains)
    adapters: tuple[Adapter, ...] = ()
    frozen_head: bool = False  # the output layer gets no weight gradient
    first_input_grad: bool = True  # layer 0's input needs a gradient
    frozen_embeddings: bool = False
    fused_attention: bool = True  # flash: the attention core's three gradients together

    @property
    def lora(self) -> bool:
        return self.rank > 0

    def params(self) -> sympy.Expr:
        """Parameters of the adapters: Σ count · r · (in + out) (``library.lora.Adapters.params``)."""
        return sympy.Add(*(m.count * self.rank * (m.d_in + m.d_out) for m in self.adapters))


def _layer_grads(keys: Sequence[str], adapted: set[str], needs: bool, base: bool
                 ) -> tuple[dict[str, bool], dict[str, bool], bool]:
    """(per matmul: its input needs a gradient; per Q/K/V: its output needs one; the layer's output needs one).

    ``needs``: the layer input needs a gradient; ``base``: the base weights train (no LoRA). A matmul's
    output needs a gradient when its input or its weight does, or an adapter is added to it.
    """
    def out(key: str, given: bool) -> bool:
        return given or base or key in adapted

    grads: dict[str, bool] = {}
    qkv = {key: out(key, needs) for key in _LAYER_INPUT}
    core = base or any(qkv[k] for k in keys if k in qkv)
    for key in keys:
        if key in _LAYER_INPUT:
            grads[key] = needs
    after = core
    for key in keys:
        if key in _AFTER_ATTENTION:
            grads[key] = core
            after = after or out(key, core)
    residual = needs or after
    mlp = False
    for key in keys:
        if key in _MLP_IN:
            grads[key] = residual
            mlp = mlp or out(key, residual)
    last = False
    for key in keys:
        if key in _MLP_OUT:
            grads[key] = mlp
            last = last or out(key, mlp)
        elif key not in grads:  # another kind of matmul: read after the attention (its input needs what the residual does)
            grads[key] = residual
            last = last or out(key, residual)
    return grads, qkv, residual or last


def _t(key: str, title: str, expr: sympy.Expr, source: str = "project", where: str = "", note: str = "") -> Term:
    return Term(key, title, expr, "flops", source, where, note)


def adapter_forward(trained: Trained) -> list[Term]:
    """Forward FLOPs per token of the adapters: 2·r·(in + out) per adapted matrix (none without LoRA)."""
    if not trained.adapters:
        return []
    r = trained.rank
    expr = sympy.Add(*(m.count * 2 * r * (m.d_in + m.d_out) for m in trained.adapters))
    names = ", ".join(m.name for m in trained.adapters)
    return [_t("adapters", f"LoRA adapters lora_A and lora_B ({names}): 2·r·(in + out) per adapted matrix", expr,
               "hu2021", "§4.1, eq. 3", "h = W₀x + BAx: x·Aᵀ (in → r) and then ·Bᵀ (r → out), beside the base matmul.")]


def train_terms(matmuls: Sequence[tuple[str, str, sympy.Expr, sympy.Expr]], core: tuple[sympy.Expr, sympy.Expr],
                output_width: sympy.Expr | None, extra: Sequence[tuple[str, str, sympy.Expr]], trained: Trained,
                recompute: str, forward: sympy.Expr, ops: sympy.Expr | None = None, early_stop: bool = False,
                every: int = 1, checkpointed: sympy.Expr | None = None) -> list[Term]:
    """Training FLOPs per token of a partly trained step: forward, backward split by gradient, recompute.

    ``matmuls`` as ``flops.forward_terms`` takes them (key, title, weights per layer, layers); ``core``
    the score and value widths (a·d_head each, or MLA's); ``forward`` the forward count (or F_fwd, the
    adapters included). Recompute as ``flops.train_terms``: full runs every layer's forward again
    (adapters too; ``every``: of the checkpointed every-N-th layers only, ``flops.checkpointed_share``),
    selective the attention core, ops the policy's unsaved base matmuls. ``checkpointed``: the rerun of exactly the
    checkpointed layers where their kinds differ (``flops.checkpointed_forward``; no adapters).
    """
    if recompute not in RECOMPUTE:
        raise ValueError(f"unknown recompute {recompute!r}; choose from {', '.join(RECOMPUTE)}")
    base = not trained.lora
    keys = [m[0] for m in matmuls]
    adapted = {key for m in trained.adapters for key in m.wraps}
    g0 = trained.first_input_grad
    grads0, qkv0, out0 = _layer_grads(keys, adapted, g0, base)
    grads1, qkv1, last = _layer_grads(keys, adapted, out0, base)

    def layers(count: sympy.Expr, first: bool, rest: bool) -> sympy.Expr:
        """FLOPs multiplier over the layers: ``count`` layers, layer 0 as ``first``, the others as ``rest``."""
        return count * int(rest) + int(first) - int(rest)

    inputs = sympy.Add(*(2 * w * layers(n, grads0[k], grads1[k]) for k, _, w, n in matmuls))
    weights = sympy.Add(*(2 * w * n for _, _, w, n in matmuls)) if base else sympy.Integer(0)
    for key, _, w in extra:
        weights += 2 * w if base else 0
        reads_embedding = key == "projections" and trained.frozen_embeddings  # project_in reads the frozen table
        inputs += (w if reads_embedding else 2 * w) if (base or last) else 0
    head = 2 * V * output_width if output_width is not None else sympy.Integer(0)
    if output_width is not None:
        inputs += head * int(last)
        weights += 0 if trained.frozen_head else head
    q_width, v_width = core
    if trained.fused_attention:
        attention = 2 * S * (q_width + v_width) * 2 * layers(L, any(qkv0.values()), any(qkv1.values()))
    else:  # eager: Q·Kᵀ's dQ and dK, softmax·V's dP and dV, each as autograd asks
        def eager(qkv: dict[str, bool]) -> sympy.Expr:
            q, k, v = (qkv[key] for key in _LAYER_INPUT)
            return 2 * S * (q_width * (int(q) + int(k)) + v_width * (int(q or k) + int(v)))
        attention = L * eager(qkv1) + eager(qkv0) - eager(qkv1)
    terms = [_t("forward", "forward pass" + (" (the adapters' matmuls included)" if trained.adapters else ""), forward,
                "narayanan2021", "§5.1"),
             _t("backward.input", "backward: input gradients of the weight matmuls, 1 × forward where the input "
                "needs one", inputs, "narayanan2021", "§5.1",
                "Layer 0's input needs none under LoRA without gradient checkpointing (the frozen embedding's output): "
                "its matmuls before the first adapter compute no input gradient." if trained.lora and not g0 else ""),
             _t("backward.weight", "backward: weight gradients of the trained weight matmuls, 1 × forward", weights,
                "narayanan2021", "§5.1", "LoRA: none (every base weight is frozen; the adapters' are counted apart)."
                if trained.lora else ("The output layer is frozen (tied to the frozen embedding): no weight gradient."
                                      if trained.frozen_head else "The token embedding's gradient is no matmul.")),
             _t("backward.attention", "backward: the attention core's gradients (Q·Kᵀ and softmax·V), 2 × forward",
                attention, "narayanan2021", "§5.1",
                "A fused kernel computes dQ, dK and dV whenever any is wanted." if trained.fused_attention else
                "Eager attention: each bmm computes only the gradients wanted (layer 0 under LoRA).")]
    if trained.adapters:
        terms.append(_adapter_backward(trained, grads0, grads1, last))
    recomputed = _recompute(recompute, forward, head, core, trained, ops, last_run(matmuls, trained) if early_stop
                            else None, every, checkpointed)
    return [t for t in terms if t.expr != 0] + recomputed


def _adapter_backward(trained: Trained, grads0: dict[str, bool], grads1: dict[str, bool], last: bool) -> Term:
    """The adapters' backward: lora_A's and lora_B's weight gradients, lora_B's input gradient, lora_A's where the
    base input needs one."""
    r = trained.rank
    total = sympy.Integer(0)
    for m in trained.adapters:
        total += m.count * 2 * r * (m.d_in + 2 * m.d_out)  # dA, dB, and lora_B's input gradient (A trains)
        if HEAD in m.wraps:
            total += 2 * r * m.d_in * int(last)
        else:
            key = m.wraps[0]
            total += 2 * r * m.d_in * (m.count * int(grads1[key]) + int(grads0[key]) - int(grads1[key]))
    return _t("backward.adapters", "backward of the adapters: both weight gradients, lora_B's input gradient, "
              "lora_A's where the base input needs one", total, "hu2021", "§4.2",
              "Hu et al. report 25 % more training throughput on GPT-3 175B than full fine-tuning: most weights need "
              "no gradient.")


def last_run(matmuls: Sequence[tuple[str, str, sympy.Expr, sympy.Expr]], trained: Trained) -> sympy.Expr:
    """Forward FLOPs per token of each layer's last matmul: the down projection's lora_B where an adapter wraps it
    (peft adds it after the base matmul), else the base down projection (``flops.last_matmuls``)."""
    wrapped = [m for m in trained.adapters if LAST_MATMUL in m.wraps]
    if wrapped:
        return sympy.Add(*(m.count * 2 * trained.rank * m.d_out for m in wrapped))
    return last_matmuls(matmuls)


def _recompute(recompute: str, forward: sympy.Expr, head: sympy.Expr, core: tuple[sympy.Expr, sympy.Expr],
               trained: Trained, ops: sympy.Expr | None, last: sympy.Expr | None = None, every: int = 1,
               checkpointed: sympy.Expr | None = None) -> list[Term]:
    if recompute == "none":
        return []
    if recompute == "full":
        head_adapters = sympy.Add(*(m.count * 2 * trained.rank * (m.d_in + m.d_out) for m in trained.adapters
                                    if HEAD in m.wraps))
        if last is not None and last != 0:
            return [full_recompute(forward - head - head_adapters - last, every, "full recompute, torch's "
                                   "non-reentrant checkpoint: every layer's forward again, adapters included, but its "
                                   "last matmul (not the output layer)", "pytorch-checkpoint", "early_stop",
                                   EARLY_STOP_NOTE, checkpointed)]
        return [full_recompute(forward - head - head_adapters, every, "full recompute: every layer's forward again, "
                               "adapters included (not the output layer)", "narayanan2021", "§5.1", "", checkpointed)]
    if recompute == "selective":
        return [_t("recompute", "selective recompute: the attention core Q·Kᵀ, softmax·V again",
                   L * 2 * S * (core[0] + core[1]), "korthikanti2022", "§5")]
    if ops is None:
        raise ValueError("recompute ops needs the recomputed matmuls (ops_recompute)")
    note = _OPS_NOTE + (" With LoRA the adapters' matmuls enter the policy's alternate count (every aten.mm); which "
                        "of them run again is not modelled (at most their forward)." if trained.adapters else "")
    return [_t("recompute", "per-op recompute: the base matmuls the policy did not save, again", ops, "torchtitan-ac",
               "_custom_policy", note)]
