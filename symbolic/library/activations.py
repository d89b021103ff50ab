"""Activation memory of transformer training: Korthikanti et al. 2022 and its variants.

Three models of the same quantity are kept side by side, none replacing another:

- article B's ``llm.activations``: L·(14E + 4BSS) + 6BSV (see ``article_b.py`` and its errata);
- Korthikanti et al. 2022, Table 2, verbatim: ``act.korthikanti.<row>``, one formula per row;
- a per-tensor generalisation of Korthikanti's derivation (``layer_parts``), which the planner
  uses and which reduces to Korthikanti's rows for a GPT-2-style layer (tests check this
  symbolically): ``act.layer.<attention>.<mlp>``.

Derivation (Korthikanti §4.1, 16-bit activations, 1-byte dropout masks; s sequence, b micro-
batch, h hidden, a heads). What the backward pass needs from one layer:

- attention, 11sbh + 5as²b: the input of the QKV projection 2sbh; Q and K 4sbh (for QKᵀ);
  the softmax output 2as²b; the softmax-dropout mask as²b; the dropout output 2as²b (input of
  the product with V); V 2sbh; the input of the output projection 2sbh; its dropout mask sbh;
- MLP, 19sbh: the input of the first linear 2sbh; its output 8sbh (input of GeLU, d_ff = 4h);
  the GeLU output 8sbh (input of the second linear); the dropout mask sbh;
- two LayerNorms, 4sbh: each keeps its input.

Sum: sbh(34 + 5as/h). Under tensor parallelism t the attention and MLP internals (24sbh and the
5as²b term) are split over t ranks, while the norms, dropouts and the inputs of the QKV and first
MLP projections (10sbh) are replicated; sequence parallelism splits those 10sbh too. Selective
recompute drops the 5as²b term (softmax, dropout and attention-over-V are recomputed); full
recompute keeps only the layer input, 2sbh (2sbh/t with sequence parallelism, where the layer's
input is already split over the sequence; without it every tp rank keeps the whole input, as
Megatron does unless --distribute-saved-activations, and torchtitan always).

Per-op selective checkpointing (``ops``, torchtitan's ``selective_ac_option = "op"``,
parallelize_llama.py at 9dec370) runs each layer under ``create_selective_checkpoint_contexts``
with a save list (``aten.mm``, the flash and memory-efficient SDPA kernels,
``reduce_scatter_tensor``, ``abs``, ``max``) and recomputes every second ``mm`` of the layer
(its counter starts at 0 for each layer: the 1st, 3rd, 5th... are saved). A torchtitan Llama
layer's matmuls run wq, wk, wv, wo, w1, w3, w2, so it keeps: the layer input (the checkpoint's),
the outputs of wq (a·d_head), wv (a_kv·d_head), w1 (d_ff) and w2 (h), the attention output and
its fp32 log-sum-exp; with sequence parallelism also the reduce-scatter outputs after wo and w2
(sbh/t each). The row-parallel w2's output is a partial sum over the full sequence: not split by
t. Everything else (norms, rotary, SiLU, the product, wk, wo, w3) is recomputed. A GeLU MLP has
two matmuls (fc1 saved, fc2 recomputed: 6 in all). The projections are torchtitan's (separate,
bias-free: ``aten.mm``); a model's own widths are used. With torchao's float8 linears the list's ``abs``
keeps every cast's ``|x|`` as well (``ops_float8_parts``).

The generalisation replaces the assumptions by symbols:

- GQA/MQA: K and V are a_kv·d_head wide, Q and the attention output a·d_head wide, so Q and K
  take 2sb·d_head·(a + a_kv) and V plus the projection input 2sb·d_head·(a_kv + a).
- gated MLP (SwiGLU/GeGLU, Shazeer 2020): the gate and up projections' outputs, the activation's
  output and the product (input of the down projection) are kept: 4 · 2sb·d_ff instead of 2 · 2sb·d_ff.
- FlashAttention (Dao et al. 2022): the s² tensors are never stored (the backward pass
  recomputes them from Q, K, V, the output and the per-row log-sum-exp); the log-sum-exp adds
  4asb bytes (fp32). Attention dropout masks are regenerated from the RNG state.
- no dropout (most current LLMs): the masks go and the softmax output is itself the input of
  the product with V.
- mixture of experts: each token's MLP tensors exist in k_exp experts (× k_exp), plus the
  router's fp32 probabilities 4sb·n_exp; capacity-factor padding, token-permutation buffers and
  shared (always active) experts are ignored.
- element size: 2 bytes (16-bit) or 4 (fp32 training); masks stay 1 byte.

Outputs (``logits_terms``), three named byte accountings:

- ``hf``: 16-bit logits 2sbV (kept as the model output), the fp32 log-softmax output 4sbV that
  cross-entropy saves after Hugging Face upcasts the logits, and the fp32 gradient of the logits
  4sbV alive at the start of backward — 10sbV, article B's 6BSV + 4BSV; plus the LM-head input.
- ``megatron``: Korthikanti §4.3: 4sbh(1 + V/h) — final norm and output-projection inputs 4sbh,
  fp32 logits of the fused vocab-parallel cross-entropy 4sbV.
- ``fused``: a fused linear + cross-entropy kernel that never materialises the s × V logits
  (e.g. Liger's): only the LM-head input is kept; its chunk workspace is ignored.
- ``chunked``: torchtune's ``CEWithChunkedOutputLoss``: the LM head runs on N chunks of the
  sequence, and each chunk's logits are upcast to fp32 and passed to ``F.cross_entropy`` in turn.
  ``log_softmax`` still saves its fp32 output for every chunk (4sbV in all, measured); what
  chunking saves is the fp32 upcast, one chunk (4sbV/N) at a time instead of 4sbV, and the
  gradients at the start of backward, one chunk's (8sbV/N). The transients are in
  ``peak_pytorch`` (``chunked_logits_forward_term``, ``chunked_loss_gradients_term``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sympy

from ..core.errors import UnknownNameError
from ..core.symbols import B, H, S, V, a, a_kv, d_ff, d_head, k_exp, n_exp, t
from ..core.term import Term
from ..math.formula import Formula
from .registry import register

SRC = "korthikanti2022"
RECOMPUTE = ("none", "selective", "full", "ops")
OPS_SRC = "torchtitan-ac"
COMPILE_SRC = "torch-partitioner"
FLOAT8_SRC = "torchao-float8"
FLOAT8_TP_SRC = "torchao-float8-tp"
LOGITS = ("hf", "megatron", "fused", "chunked")

# --- Korthikanti et al. 2022, Table 2, verbatim ------------------------------------------------
ROWS: dict[str, tuple[str, sympy.Expr]] = {
    "none": ("no parallelism", S * B * H * (34 + 5 * a * S / H)),
    "tp": ("tensor parallel", S * B * H * (10 + 24 / t + 5 * a * S / (H * t))),
    "tp_sp": ("tensor + sequence parallel", S * B * H * (34 / t + 5 * a * S / (H * t))),
    "tp_selective": ("tensor parallel + selective recompute", S * B * H * (10 + 24 / t)),
    "tp_sp_selective": ("tensor + sequence parallel + selective recompute", 34 * S * B * H / t),
    "full": ("full recompute", 2 * S * B * H),
}
EXAMPLE_GPT3 = {"S": 2048, "B": 1, "H": 12288, "a": 96, "t": 8}  # GPT-3 175B as in the paper's Table 3

for _key, (_title, _expr) in ROWS.items():
    register(Formula(
        f"act.korthikanti.{_key}", f"Activations per layer, {_title} (Korthikanti et al. 2022, Table 2)",
        (Term("layer", f"one layer, {_title}", _expr, "bytes", SRC, "Table 2"),),
        source=SRC, where="Table 2", name="M_layer",
        example={k: v for k, v in EXAMPLE_GPT3.items() if k != "t" or "tp" in _key},
        note="16-bit activations, 1-byte dropout masks; GPT-2-style layer (LayerNorm, GeLU MLP with d_ff = 4h, "
             "multi-head attention)."))

register(Formula(
    "act.korthikanti.layer", "Activations per layer broken down (Korthikanti et al. 2022, §4.1): sbh(34 + 5as/h)",
    (Term("attention", "self-attention block", 11 * S * B * H + 5 * a * S**2 * B, "bytes", SRC, "§4.1 eq. 1",
          "QKV input 2sbh, Q and K 4sbh, softmax 2as²b, its dropout mask as²b and output 2as²b, V 2sbh, "
          "projection input 2sbh, dropout mask sbh."),
     Term("mlp", "MLP block", 19 * S * B * H, "bytes", SRC, "§4.1",
          "input 2sbh, GeLU input 8sbh, GeLU output 8sbh, dropout mask sbh."),
     Term("layernorm", "two layer norms", 4 * S * B * H, "bytes", SRC, "§4.1", "each keeps its input, 2sbh")),
    source=SRC, where="§4.1", name="M_layer", example={k: v for k, v in EXAMPLE_GPT3.items() if k != "t"}))


# --- the per-tensor generalisation --------------------------------------------------------------
@dataclass(frozen=True)
class LayerVariant:
    """What a layer's stored activations depend on besides the sizes."""

    flash: bool = False
    gated: bool = False
    dropout: bool = True
    moe: bool = False
    act_bytes: int = 2
    compiled: bool = False  # issue 28: the layer compiled (torch.compile's min-cut partitioner decides what is saved)
    impl: str = "korthikanti"  # issue 28: "torchtune" / "torchtune-packed", torchtune's layer (torchtune_parts; compiled)
    float8: str = ""  # issue 28: torchao's float8 recipe of the linear layers ("" in bf16); changes what compile saves
    float8_gathered: bool = False  # issue 28: FSDP2 all-gathers the weights in float8 (cast before the layer runs)
    tp_impl: str = "megatron"  # whose tensor parallelism: "dtensor", PyTorch's (the colwise linears save gathered inputs)

    @property
    def name(self) -> str:
        """Short name, e.g. 'flash.gated'."""
        parts = ["flash" if self.flash else "standard", "gated" if self.gated else "gelu"]
        if self.moe:
            parts.append("moe")
        if not self.dropout:
            parts.append("nodropout")
        if self.act_bytes != 2:
            parts.append(f"{self.act_bytes}byte")
        if self.compiled:
            parts.append("compiled")
        if self.float8:
            parts.append(f"float8-{self.float8}")
        if self.impl != "korthikanti":
            parts.append(self.impl)
        if self.tp_impl != "megatron":
            parts.append(f"{self.tp_impl}-tp")
        return ".".join(parts)


@dataclass(frozen=True)
class Part:
    """One stored tensor of a layer.

    ``shard`` is "tp" when tensor parallelism splits it, "sp" when only sequence parallelism
    does; ``scores`` marks the s² tensors selective recompute drops.
    """

    key: str
    title: str
    expr: sympy.Expr
    shard: str
    scores: bool = False
    source: str = SRC


def layer_parts(v: LayerVariant) -> list[Part]:
    """Every tensor one layer keeps for backward, for one micro-batch, in bytes."""
    if v.compiled:
        return compiled_parts(v)
    if v.impl != "korthikanti":
        return torchtune_parts(v)
    b = v.act_bytes
    sbh = S * B * H
    parts = [
        Part("ln1_input", "input of the first norm", b * sbh, "sp"),
        linear_input(v, "qkv_input", "norm output: input of the QKV projection"),
        Part("query", "Q (a·d_head wide)", b * S * B * a * d_head, "tp"),
        Part("key", "K (a_kv·d_head wide)", b * S * B * a_kv * d_head, "tp", source="ainslie2023"),
    ]
    if v.flash:
        parts.append(Part("softmax_stats", "per-row log-sum-exp (fp32)", 4 * a * S * B, "tp", source="dao2022"))
    else:
        parts.append(Part("softmax_output", "softmax output a·s²", b * a * S**2 * B, "tp", True))
        if v.dropout:
            parts.append(Part("attn_dropout_mask", "softmax dropout mask (1 byte)", a * S**2 * B, "tp", True))
            parts.append(Part("attn_dropout_output", "softmax dropout output", b * a * S**2 * B, "tp", True))
    parts += [
        Part("value", "V (a_kv·d_head wide)", b * S * B * a_kv * d_head, "tp", source="ainslie2023"),
        Part("attn_output", "attention output: input of the output projection", b * S * B * a * d_head, "tp"),
    ]
    if v.dropout:
        parts.append(Part("attn_out_dropout_mask", "attention-output dropout mask (1 byte)", sbh, "sp"))
    parts += [
        Part("ln2_input", "input of the second norm", b * sbh, "sp"),
        linear_input(v, "mlp_input", "norm output: input of the MLP"),
    ]
    k = k_exp if v.moe else 1
    per = " per routed expert" if v.moe else ""
    if v.gated:
        src = "shazeer2020"
        parts += [
            Part("gate_output", "gate projection output" + per, k * b * S * B * d_ff, "tp", source=src),
            Part("up_output", "up projection output" + per, k * b * S * B * d_ff, "tp", source=src),
            Part("act_output", "activation(gate) output" + per, k * b * S * B * d_ff, "tp", source=src),
            Part("product", "gate·up product: input of the down projection" + per, k * b * S * B * d_ff, "tp",
                 source=src),
        ]
    else:
        parts += [
            Part("fc1_output", "first linear output: input of GeLU" + per, k * b * S * B * d_ff, "tp"),
            Part("act_output", "GeLU output: input of the second linear" + per, k * b * S * B * d_ff, "tp"),
        ]
    if v.moe:
        parts.append(Part("router_probs", "router probabilities over the experts (fp32)", 4 * S * B * n_exp, "sp",
                          source="project"))
    if v.dropout:
        parts.append(Part("mlp_dropout_mask", "MLP dropout mask (1 byte)", sbh, "sp"))
    return parts


TP_IMPLS = ("megatron", "dtensor")
GATHERED = ("qkv_input", "mlp_input")  # the norms' outputs the column-parallel linears read
DTENSOR_SRC = "pytorch-tp-prepare-input"


def linear_input(v: LayerVariant, key: str, title: str, nbytes: int | None = None, source: str = DTENSOR_SRC) -> Part:
    """A norm's output the column-parallel linears read: Megatron's sequence shard (Korthikanti §4.2.2: saved split,
    B·S·H/t under sequence parallelism, all-gathered again in backward) or, under PyTorch's tensor parallelism
    (``tp_impl`` dtensor, torchtitan's plan), the all-gathered B·S·H tensor ``PrepareModuleInput`` hands to the
    ``ColwiseParallel`` linears, which save it for their weight gradients (measured on the CPU over two gloo ranks,
    eager and compiled, ``tests/dtensor_tp_block_child.py``): never split by t. Eager float8 (the bf16 layer's saved
    set) counts them at 2 bytes where torchao's float8 styles gather and keep e4m3: an over-count, not modelled."""
    b = v.act_bytes if nbytes is None else nbytes
    if v.tp_impl == "dtensor":
        return Part(key, f"{title}, all-gathered over the t ranks", b * S * B * H, "whole", source=source)
    return Part(key, title, b * S * B * H, "sp")


def compiled_parts(v: LayerVariant) -> list[Part]:
    """What one compiled layer keeps (torch.compile per block, inductor's min-cut partitioner, measured on the CPU).

    The eager layer's tensors less what the partitioner recomputes in the compiled backward: the
    activation's output (SiLU/GeLU of a saved matmul output), and the second norm's input, which
    is rebuilt from the layer input and the attention's output projection (kept instead: the
    same bytes). It keeps each norm's per-token statistics: 1/rms (RMSNorm) or mean and 1/std
    (LayerNorm), fp32.

    torchtune's layer compiled (``impl`` torchtune or torchtune-packed, ``training.compile_model``: each layer
    compiled; measured on the CPU with inductor, ``tests/test_torchtune_layer.py``): the same tensors with K and V
    expanded to every query head, the copies SDPA's backward reads (``torchtune_kv``); the norms' fp32 upcasts and
    normalized copies are recomputed from the saved 16-bit input and 1/rms, and with packed positions the RoPE rows
    are gathered again from ``input_pos`` (a model input, saved once for every layer): nothing of their own.
    """
    if not v.flash or v.moe or v.dropout:
        raise UnknownNameError("compile is modelled (measured) for a dense layer with a fused attention kernel and no "
                               "dropout")
    if v.impl != "korthikanti" and (v.float8 or not v.gated):
        raise UnknownNameError("torchtune's compiled layer is modelled (measured) for a dense gated bf16 layer")
    eager = layer_parts(replace(v, compiled=False, impl="korthikanti"))
    if v.impl != "korthikanti":
        eager = [torchtune_kv(part) for part in eager]
    b, stats = v.act_bytes, 1 if v.gated else 2
    out = []
    for part in eager:
        if part.key == "act_output" and v.gated:
            continue  # SiLU(gate) recomputed; a GeLU MLP keeps the activation's output for its second linear
        if part.key == "ln2_input":
            part = Part("attn_proj_output", "attention output projection's output (the second norm's input is "
                        "rebuilt from it)", b * S * B * H, "sp", source=COMPILE_SRC)
        out.append(part)
    out.append(Part("norm_stats", f"both norms' per-token {'1/rms' if v.gated else 'mean and 1/std'} (fp32)",
                    2 * stats * 4 * S * B, "sp", source=COMPILE_SRC))
    return compiled_float8_parts(v, out) if v.float8 and v.gated else out


FLOAT8_RECOMPUTED = ("qkv_input", "mlp_input", "product")  # linear inputs that are pointwise of saved tensors
GATED_LINEARS = 7  # wq, wk, wv, wo, w1, w2, w3


def compiled_float8_parts(v: LayerVariant, parts: list[Part]) -> list[Part]:
    """What a compiled gated layer keeps when its linears are torchao's Float8Linear (measured on the CPU with
    inductor, ``tests/test_float8_compile.py``).

    Under PyTorch's tensor parallelism (``tp_impl`` dtensor, torchtitan's plan with torchao's float8 styles) each norm's
    output is cast to float8 on its sequence shard and all-gathered in float8 (``PrepareFloat8ModuleInput``); the
    gathered e4m3 tensor is what the column-parallel linears save, and the partitioner never recomputes a collective
    (``force_save_collectives``): kept, B·S·H bytes each (read from the sources, not measured).

    In backward each linear casts its saved input to float8 for the weight gradient; where that input is a
    pointwise function of tensors saved anyway (both norms' outputs, from the layer input or the attention
    projection's output and the 1/rms; the MLP's SiLU(gate)·up, from the gate and up outputs), the min-cut
    partitioner fuses its recomputation into the cast's kernel and does not save it. Each linear keeps its
    weight's amax (bf16) and float8 scale (fp32) from the forward under the tensorwise recipe; under rowwise no
    scale is saved (each is recomputed in backward).
    """
    kept = [part for part in parts if part.key not in FLOAT8_RECOMPUTED]
    if v.tp_impl == "dtensor":  # a gathered input is a collective's output: saved (force_save_collectives), float8
        if v.float8 != "tensorwise":
            raise UnknownNameError("PyTorch's tensor parallelism with float8 is modelled for the tensorwise recipe "
                                   "(torchao's float8 TP styles)")
        kept += [linear_input(v, key, f"{title}, cast to float8 (e4m3) before its all-gather", 1, FLOAT8_TP_SRC)
                 for key, title in (("qkv_input", "norm output: input of the QKV projection"),
                                    ("mlp_input", "norm output: input of the MLP"))]
    if v.float8 != "tensorwise":
        return kept
    return [*kept, Part("fp8_weight_scales", "each linear's weight amax (bf16) and float8 scale (fp32), tensorwise",
                        sympy.Integer(GATED_LINEARS * (2 + 4)), "whole", source=FLOAT8_SRC)]


LAYER_IMPLS = ("korthikanti", "torchtune", "torchtune-packed")
TORCHTUNE_SRC = "torchtune-layer"


def rms_norm_parts(b: int, name: str, title: str) -> list[Part]:
    """torchtune's eager RMSNorm (1814feb): ``x.float()`` kept by ``pow`` and the product with ``rsqrt`` (not the
    16-bit input), the fp32 1/rms per token, and the normalized 16-bit copy the scale's product keeps."""
    return [Part(f"{name}_fp32", f"{title}: its input upcast to fp32", 4 * S * B * H, "sp", source=TORCHTUNE_SRC),
            Part(f"{name}_rstd", f"{title}: 1/rms per token (fp32)", 4 * S * B, "sp", source=TORCHTUNE_SRC),
            Part(f"{name}_normed", f"{title}: normalized, before the scale", b * S * B * H, "sp",
                 source=TORCHTUNE_SRC)]


def final_norm_terms(b: int) -> list[Term]:
    """torchtune's final norm (``TransformerDecoder.unembed``'s ``self.norm``) as terms: what ``rms_norm_parts``
    keeps beyond its output (which the head keeps: ``lm_head_input``)."""
    return [Term(part.key, part.title, part.expr, "bytes", part.source, "RMSNorm.forward")
            for part in rms_norm_parts(b, "final_norm", "final norm")]


def torchtune_kv(part: Part) -> Part:
    """K or V as torchtune's ``MultiHeadAttention`` hands them to SDPA: expanded to every query head
    (``expand(...).flatten(1, 2)``, a copy, a·d_head wide); any other part as it is."""
    if part.key not in ("key", "value"):
        return part
    return Part(part.key, f"{part.key[0].upper()} expanded to every query head (a·d_head wide)",
                part.expr / a_kv * a, "tp", source=TORCHTUNE_SRC)


def torchtune_parts(v: LayerVariant) -> list[Part]:
    """What torchtune's eager ``TransformerSelfAttentionLayer`` keeps (1814feb; measured on the CPU).

    Korthikanti's tensors with three differences read from torchtune's source: each ``RMSNorm`` keeps its fp32
    upcast and normalized copy instead of its 16-bit input (``rms_norm_parts``); ``MultiHeadAttention`` expands K
    and V to every query head (``expand(...).flatten(1, 2)``, a copy) before attention, which keeps them so; and
    with packed positions (``input_pos``, ``torchtune-packed``) each RoPE call gathers its cache rows
    (``self.cache[input_pos]``, fp32 B·S·d_head), which the rotation's products keep (without positions they are
    views of the module's buffer: no bytes of their own).
    """
    if not v.flash or not v.gated or v.moe or v.dropout:
        raise UnknownNameError("torchtune's layer is modelled for a dense gated layer with a fused attention kernel "
                               "and no dropout")
    b = v.act_bytes
    out: list[Part] = []
    for part in layer_parts(replace(v, impl="korthikanti")):
        if part.key in ("ln1_input", "ln2_input"):
            first = part.key == "ln1_input"
            out += rms_norm_parts(b, "sa_norm" if first else "mlp_norm", "attention norm" if first else "MLP norm")
            continue
        out.append(torchtune_kv(part))
    if v.impl == "torchtune-packed":
        out.append(Part("rope_rows", "RoPE cache rows gathered by packed positions, for Q and K (fp32)",
                        2 * 4 * S * B * d_head, "sp", source=TORCHTUNE_SRC))
    return out


def _check(recompute: str) -> None:
    if recompute not in RECOMPUTE:
        raise UnknownNameError(f"unknown recompute {recompute!r}; choose from {', '.join(RECOMPUTE)}")


def _matmul_widths(v: LayerVariant) -> list[tuple[str, str, sympy.Expr, sympy.Expr, str]]:
    """A torchtitan layer's matmuls in forward order: key, title, input width, output width, shard (one source)."""
    mms = [("wq", "query projection output (wq)", H, a * d_head, "tp"),
           ("wk", "key projection output (wk)", H, a_kv * d_head, "tp"),
           ("wv", "value projection output (wv)", H, a_kv * d_head, "tp"),
           ("wo", "attention output projection (wo), a partial sum under tp", a * d_head, H, "whole")]
    if v.gated:
        return mms + [("w1", "gate projection output (w1)", H, d_ff, "tp"),
                      ("w3", "up projection output (w3)", H, d_ff, "tp"),
                      ("w2", "down projection output (w2), a partial sum under tp", d_ff, H, "whole")]
    return mms + [("fc1", "first MLP projection output", H, d_ff, "tp"),
                  ("fc2", "second MLP projection output, a partial sum under tp", d_ff, H, "whole")]


def layer_matmuls(v: LayerVariant) -> list[tuple[str, str, sympy.Expr, str]]:
    """A torchtitan layer's matmuls (``aten.mm``) in forward order: key, title, output bytes, shard.

    The row-parallel projections (wo, w2/fc2) give a partial sum over the whole output on each tp
    rank ("whole": never split); the column-parallel ones are split by t.
    """
    return [(key, title, v.act_bytes * S * B * out, shard) for key, title, _, out, shard in _matmul_widths(v)]


def _refuse_ops(v: LayerVariant) -> None:
    if not v.flash or v.moe:
        raise UnknownNameError("recompute ops models torchtitan's dense layer with a fused attention kernel (its save "
                               "list has the flash and memory-efficient SDPA ops): use flash and a dense model")


def ops_recomputed(v: LayerVariant, early_stop: bool = True) -> list[tuple[str, sympy.Expr]]:
    """The matmuls torchtitan's per-op policy runs again in backward: (key, weights of the matrix), per layer.

    The even-counted mm outputs are not saved (``_custom_policy``: PREFER_RECOMPUTE); the saved ones are
    served from the checkpoint's cache. With ``early_stop`` the layer's last matmul (w2, fc2) is not run
    again even when even-counted: backward does not read its output (it only enters the residual sum), so
    eager checkpointing with early stop (torch's default, torchtitan 9dec370) stops recomputing before it
    and the compiled partitioner recomputes only what backward reads. Without (torchtitan's SelectiveAC
    passes early_stop=False since 25413d2; b5bcd76 activation_checkpoint.py, SelectiveAC._wrap_block) an
    even-counted last matmul (GeLU's fc2) runs again. Measured on the CPU, ``tests/saved_for_backward_child.py``.
    Gated: wk, wo, w3 either way (w2 is odd-counted, saved).
    """
    _refuse_ops(v)
    matmuls = _matmul_widths(v)[:-1] if early_stop else _matmul_widths(v)
    return [(key, inp * out) for count, (key, _, inp, out, _) in enumerate(matmuls, start=1) if not count % 2]


def ops_parts(v: LayerVariant, sp: bool = False) -> list[Part]:
    """What torchtitan's per-op policy keeps of one layer: its input, every other mm output, attention's outputs.

    ``v.compiled`` (the checkpointed block compiled, torchtitan's apply_ac then apply_compile): the
    min-cut partitioner keeps a MUST_SAVE output only where the backward graph reads it, so the
    layer's last matmul (w2, whose output only enters the residual sum) is not kept (measured on
    the CPU, ``tests/compile_child.py``).
    """
    _refuse_ops(v)
    b = v.act_bytes
    parts = [Part("layer_input", "layer input (kept by the checkpoint)", b * S * B * H, "sp", source=OPS_SRC)]
    matmuls = layer_matmuls(v)
    if v.compiled:  # the partitioner saves what backward reads: the last matmul's output feeds only the residual sum
        matmuls = matmuls[:-1]
    for count, (key, title, expr, shard) in enumerate(matmuls, start=1):
        if count % 2:  # torchtitan: "not (func == aten.mm and meta[mm_count_key] % 2 == 0)"
            parts.append(Part(f"{key}_output", title, expr, shard, source=OPS_SRC))
    parts += [Part("attn_output", "flash attention output (saved op output)", b * S * B * a * d_head, "tp",
                   source=OPS_SRC),
              Part("softmax_stats", "flash attention's per-row log-sum-exp (fp32)", 4 * a * S * B, "tp",
                   source="dao2022")]
    if sp:  # reduce_scatter_tensor is on the save list: the row-parallel outputs, split over the sequence
        parts += [Part(f"{key}_reduce_scatter", f"reduce-scatter of {key}'s output (sequence-split)", expr, "sp",
                       source=OPS_SRC) for key, _, expr, shard in layer_matmuls(v) if shard == "whole"]
    return parts + (ops_float8_parts(v) if v.float8 else [])


# the inputs the compiled rowwise layer keeps |x| of: wk and wv share wq's input, w3 w1's (one abs each after CSE)
ROWWISE_ABS_INPUTS = ("wq", "wo", "w1")


def ops_float8_parts(v: LayerVariant) -> list[Part]:
    """What torchtitan's per-op policy (9dec370) keeps beyond the bf16 layer's when the linears are torchao's
    Float8Linear (measured on the CPU: ``tests/test_float8.py``, ``tests/test_float8_compile.py``).

    The policy's dispatch mode sees ``aten.mm`` on torchao's float8 tensors (their ``_scaled_mm`` runs below it), so
    the same bf16 mm outputs are saved. Each cast computes its amax as ``max(abs(x))`` (tensorwise) or
    ``amax(abs(x), dim)`` (rowwise; ``tensor_to_amax``, identical at torchao eab345c, the benchmark's, and 36027d8),
    and 9dec370's list has ``aten.abs`` ("for low precision training"): eager, every cast's ``abs`` output is saved
    whole, 2 bytes an element: each linear's input and its (FSDP-unsharded) weight; tensorwise also its two amax
    (bf16 scalars, ``aten.max``). torchtitan 88247277c (Feb 2025) took ``abs`` off the list: eager, only the amax
    scalars are left (measured; not an option here). Compiled (inductor, torch 2.13, with either list): tensorwise
    saves the compiled bf16 layer's tensors and scalars only; rowwise saves ``abs`` of every weight, of the inputs of
    wq, wo and w1 (wk, wv, w3 share them) and both norms' fp32 1/rms, which the compiled bf16 layer recomputes.
    Weights all-gathered in float8 (``float8_gathered``) are cast in FSDP2's pre-all-gather hook, outside the
    checkpointed layer (torchao 36027d8 ``fsdp_utils.py``; the linear skips a cast weight): no abs or amax of a
    weight (read, not measured).
    """
    _refuse_ops(v)
    if v.compiled and v.float8 == "rowwise" and not v.gated:
        raise UnknownNameError("recompute ops --compile with rowwise float8 is measured for a gated (Llama) layer")
    weights = not v.float8_gathered
    parts: list[Part] = []
    matmuls = _matmul_widths(v)
    for key, _, inp, out, shard in matmuls:
        x_shard = "tp" if shard == "whole" else "sp"  # row-parallel inputs are split by t; the others the norm's
        if not v.compiled or (v.float8 == "rowwise" and key in ROWWISE_ABS_INPUTS):
            parts.append(Part(f"{key}_abs_input", f"|input| of {key}'s float8 cast (bf16)", 2 * S * B * inp, x_shard,
                              source=FLOAT8_SRC))
        if weights and (not v.compiled or v.float8 == "rowwise"):
            parts.append(Part(f"{key}_abs_weight", f"|weight| of {key}'s float8 cast (bf16, the unsharded weight)",
                              2 * inp * out, "tp", source=FLOAT8_SRC))
    if v.compiled and v.float8 == "rowwise":
        parts.append(Part("norm_stats", "both norms' per-token 1/rms (fp32), kept by the compiled rowwise layer",
                          2 * 4 * S * B, "sp", source=COMPILE_SRC))
    if not v.compiled and v.float8 == "tensorwise":
        casts = len(matmuls) * (1 if v.float8_gathered else 2)
        parts.append(Part("fp8_amax", "each cast's amax, max(|x|), a bf16 scalar (input's and weight's)",
                          sympy.Integer(2 * casts), "whole", source=FLOAT8_SRC))
    return parts


def layer_terms(v: LayerVariant, recompute: str = "none", tp: sympy.Expr | int = 1,
                sp: bool = False) -> list[Term]:
    """Per-layer, per-micro-batch stored activations as terms, after parallelism and recompute."""
    _check(recompute)
    if recompute == "full":
        if sp:
            return [Term("layer_input", "layer input, split over the sequence (everything else is recomputed)",
                         v.act_bytes * S * B * H / tp, "bytes", "megatron-distribute-saved", "CheckpointFunction",
                         "Under sequence parallelism the checkpointed input is the sequence-split residual stream.")]
        return [Term("layer_input", "layer input (everything else is recomputed)", v.act_bytes * S * B * H, "bytes",
                     SRC, "Table 2, full recompute", "Kept unsplit, as Table 2 writes it (2sbh): without sequence "
                     "parallelism every tp rank holds the whole input.")]
    out = []
    for part in (ops_parts(v, sp) if recompute == "ops" else layer_parts(v)):
        if recompute == "selective" and part.scores:
            continue
        divide = part.shard == "tp" or (part.shard == "sp" and sp)
        expr = part.expr / tp if divide else part.expr
        out.append(Term(part.key, part.title, expr, "bytes", part.source,
                        "_save_list" if recompute == "ops" else "§4.1"))
    return out


def per_layer(v: LayerVariant, recompute: str = "none", tp: sympy.Expr | int = 1, sp: bool = False) -> sympy.Expr:
    """Bytes one layer keeps for one micro-batch (a single expression)."""
    return sympy.Add(*(term.expr for term in layer_terms(v, recompute, tp, sp)))


def korthikanti_assumptions() -> dict[sympy.Symbol, sympy.Expr]:
    """GPT-2-style sizes under which the generalisation must equal Korthikanti's rows."""
    return {a_kv: a, d_head: H / a, d_ff: 4 * H}


# --- outputs: logits and cross-entropy -----------------------------------------------------------
def inputs_term(dropout: bool, hidden_tp: sympy.Expr | int = 1, in_flight: int = 1, pipelined: bool = False) -> Term:
    """What the embeddings keep for backward: int64 token ids (8·S·B), with dropout also its S·B·H mask.

    ``hidden_tp`` is t under sequence parallelism (the mask is split with the sequence), else 1;
    ``in_flight`` micro-batches each keep their own (``pipelined``: the title says so).
    """
    expr = 8 * S * B + (S * B * H / hidden_tp if dropout else 0)
    return Term("inputs", "token ids (int64)" + (" and embedding dropout mask" if dropout else "")
                + (f", × {in_flight} micro-batches in flight" if pipelined else ""),
                expr * in_flight, "bytes", "megatron", "compute_activation_memory")


def logits_terms(kind: str, act_bytes: int = 2, tp: sympy.Expr | int = 1, sp: bool = False,
                 compiled: bool = False) -> list[Term]:
    """Output-layer and loss activations for one micro-batch (bytes), under a named accounting.

    ``compiled`` (with ``hf`` or ``chunked``): the loss compiled (torchtune's ``compile_loss``): the partitioner
    keeps the logits in their dtype and the per-token max and log-sum-exp, and recomputes the fp32
    upcast and log-softmax in backward (measured, ``activations_pytorch.compiled_loss_terms``).
    """
    if kind not in LOGITS:
        raise UnknownNameError(f"unknown logits accounting {kind!r}; choose from {', '.join(LOGITS)}")
    b = act_bytes
    hidden_tp = tp if sp else 1
    if kind == "megatron":
        return [
            Term("output_inputs", "final norm and output-projection inputs", 4 * S * B * H / hidden_tp, "bytes", SRC,
                 "§4.3", "4sbh (split by t with sequence parallelism)."),
            Term("logits_fp32", "fp32 logits of the vocab-parallel cross-entropy", 4 * S * B * V / tp, "bytes", SRC,
                 "§4.3", "4sbV/t: Megatron's fused cross-entropy keeps fp32 logits."),
        ]
    head_input = Term("lm_head_input", "final norm output: input of the LM head"
                      + (", all-gathered over the t ranks" if sp else ""), b * S * B * H, "bytes",
                      "pytorch-tp-colwise" if sp else "huggingface", "ColwiseParallel._prepare_input_fn" if sp else "",
                      "Under sequence parallelism PyTorch's column-parallel head all-gathers its sequence-sharded "
                      "input before the matmul and saves the gathered tensor (Megatron's linear keeps its shard and "
                      "gathers again in backward: the megatron accounting)." if sp else "")
    if kind == "fused":
        return [head_input.replace(note="A fused linear + cross-entropy kernel never stores the s × V logits "
                                        "(its chunk workspace is ignored).")]
    if compiled and kind in ("hf", "chunked"):  # torchtune compiles each chunk's compute_cross_entropy: the same
        return [head_input,
                Term("logits_compiled", f"logits in the training dtype ({b} bytes), kept by the compiled loss",
                     b * S * B * V / tp, "bytes", COMPILE_SRC, "min_cut_rematerialization_partition",
                     "The fp32 upcast and log-softmax are recomputed from them in the compiled backward (measured)."),
                Term("loss_stats", "fp32 max and log-sum-exp per token, kept by the compiled loss", 8 * S * B / tp,
                     "bytes", COMPILE_SRC, "min_cut_rematerialization_partition")]
    if kind == "chunked":
        return [head_input,
                Term("log_softmax_fp32", "fp32 log-softmax saved by cross-entropy, every chunk's", 4 * S * B * V / tp,
                     "bytes", "torchtune-chunked-ce", "CEWithChunkedOutputLoss.forward",
                     "Each chunk is upcast on its own, but log_softmax saves every chunk's fp32 output for backward.")]
    return [
        head_input,
        Term("logits", f"logits in the training dtype ({b} bytes)", b * S * B * V / tp, "bytes", "huggingface",
             "model output", "Kept as the model's output until the step ends."),
        Term("log_softmax_fp32", "fp32 log-softmax saved by cross-entropy", 4 * S * B * V / tp, "bytes",
             "huggingface", "ForCausalLMLoss", "Hugging Face upcasts the logits to fp32 before cross-entropy."),
        Term("logits_grad_fp32", "fp32 gradient of the logits at the start of backward", 4 * S * B * V / tp, "bytes",
             "article-B", "peak memory total", "Article B's 4BSV extra allocation; with the two above, 10sbV."),
    ]


# --- registered variants --------------------------------------------------------------------------
_LLAMA_LIKE = {"S": 4096, "B": 1, "H": 4096, "a": 32, "a_kv": 8, "d_head": 128, "d_ff": 14336}
_GPT2_LIKE = {"S": 1024, "B": 1, "H": 768, "a": 12, "a_kv": 12, "d_head": 64, "d_ff": 3072}

for _flash in (False, True):
    for _gated in (False, True):
        _v = LayerVariant(flash=_flash, gated=_gated)
        register(Formula(
            f"act.layer.{_v.name}", f"Activations per layer: {'FlashAttention' if _flash else 'standard attention'}, "
            f"{'gated' if _gated else 'GeLU'} MLP, GQA-aware (Korthikanti's derivation generalised)",
            layer_terms(_v), source=SRC, where="§4.1", name="M_layer",
            example=_LLAMA_LIKE if _gated else _GPT2_LIKE,
            note="16-bit activations, 1-byte dropout masks, no parallelism, no recompute. Equals "
                 "act.korthikanti.none when a_kv = a, d_head = H/a, d_ff = 4H and attention is standard."))

for _kind in LOGITS:
    register(Formula(
        f"act.logits.{_kind}", f"Output layer and cross-entropy activations ({_kind} accounting)",
        logits_terms(_kind), source=SRC if _kind == "megatron" else "huggingface", name="M_logits",
        example={"S": 4096, "B": 1, "H": 4096, "V": 128256}))

# Every activation model a plan can select, by name (none silently replaces another).
MODELS = {
    "korthikanti": "Korthikanti et al. 2022 per tensor, generalised (GQA, gated MLP, FlashAttention, MoE)",
    "article-b": "article B's llm.activations: L·(14E + 4BSS) + 6BSV (+ 4BSV at the start of backward)",
    "pytorch": "what torch.autograd saves in one step of the Hugging Face implementation (pytorch.saved.*, measured)",
}

__all__ = ["GATHERED", "LAYER_IMPLS", "TP_IMPLS", "linear_input", "LOGITS", "MODELS", "RECOMPUTE", "ROWS", "LayerVariant", "Part", "korthikanti_assumptions",
           "layer_matmuls", "layer_parts", "layer_terms", "logits_terms", "ops_float8_parts", "ops_parts",
           "ops_recomputed", "per_layer", "final_norm_terms", "rms_norm_parts", "torchtune_kv", "torchtune_parts"]
