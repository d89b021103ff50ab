"""A network's tensors as a GGUF file names and shapes them (llama.cpp's names, ``ne0`` first).

Built from the network's weight matrices (``network.matrices``: name, rows = inputs, columns = outputs,
how many) and the 1-D tensors its parameter formula counts (norms, biases, q/k norms, attention sinks),
so that ``gguf_tensors(net)`` sums to ``net.total`` exactly; a model type whose parameters it cannot place
is a one-line error. Names follow llama.cpp's ``LLM_TENSOR_NAMES`` (``src/llama-arch.cpp``): ``token_embd``,
``output``, ``output_norm``, ``blk.N.attn_q/k/v/output``, ``attn_norm``, ``ffn_gate/up/down``, ``ffn_norm``,
``ffn_gate_inp`` (the router), ``ffn_*_exps`` (experts, 3-D), ``ffn_*_shexp`` (shared experts),
``attn_q_a/q_b/kv_a_mqa/kv_b`` (DeepSeek's latent attention). phi3 is written fused as llama.cpp's converter
keeps it (``attn_qkv``, ``ffn_up`` holding gate and up: ``FUSED_QKV_UP``); the other fused-QKV architectures (gpt2,
falcon, gpt-neox) are written with separate q/k/v: the bytes are the same, the attn_v rule of llama-quantize is then
applied to v alone.
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy

from ..core.errors import UserError
from .shape import ModelShape

_NAMES = {"attention.q": "attn_q", "attention.k": "attn_k", "attention.v": "attn_v", "attention.o": "attn_output",
          "attention.q_a": "attn_q_a", "attention.q_b": "attn_q_b", "attention.kv_a": "attn_kv_a_mqa",
          "attention.kv_b": "attn_kv_b", "mlp.gate": "ffn_gate", "mlp.up": "ffn_up", "mlp.down": "ffn_down",
          "moe.router": "ffn_gate_inp", "moe.shared.gate": "ffn_gate_shexp", "moe.shared.up": "ffn_up_shexp",
          "moe.shared.down": "ffn_down_shexp", "dense.mlp.gate": "ffn_gate", "dense.mlp.up": "ffn_up",
          "dense.mlp.down": "ffn_down"}
_NO_LAYOUT = "no GGUF tensor layout for model type {t!r}: its parameters do not map onto llama.cpp's tensors"

Tensor = tuple[str, tuple[int, ...]]


def _layers(net: ModelShape, name: str) -> range:
    """The blocks a matrix is in: dense layers first (L_dense), then the MoE layers, else every layer."""
    n_layers, dense = net.numbers.get("L", 0), net.numbers.get("L_dense", 0)
    if name.startswith("dense."):
        return range(dense)
    if net.moe and (name.startswith("moe.") or name.startswith("mlp.")):
        return range(dense, n_layers)
    return range(n_layers)


def _matrix_tensors(net: ModelShape) -> list[Tensor]:
    """The 2-D and 3-D weights: (ne0 = inputs, ne1 = outputs[, ne2 = experts])."""
    out: list[Tensor] = []
    n_exp = net.numbers.get("n_exp", 0)
    for name, rows, cols, count in net.matrices:
        r, c, k = (int(net.value(x)) for x in (rows, cols, count))
        if name in ("embedding", "lm_head"):
            out.append(("token_embd.weight" if name == "embedding" else "output.weight", (c, r)))
            continue
        if name not in _NAMES:
            raise UserError(_NO_LAYOUT.format(t=net.model_type))
        layers = _layers(net, name)
        experts = net.moe and name.startswith("mlp.") and n_exp and k == n_exp * len(layers)
        per_layer = k // max(len(layers), 1)
        if experts:
            shape: tuple[int, ...] = (r, c, n_exp)
        elif name.startswith("moe.shared."):  # n_shared experts fused in one tensor
            shape = (r, c * per_layer) if name != "moe.shared.down" else (r * per_layer, c)
        else:
            shape = (r, c)
        if per_layer * len(layers) != k or (not experts and not name.startswith("moe.shared.") and per_layer != 1):
            raise UserError(_NO_LAYOUT.format(t=net.model_type))
        base = _NAMES[name] + ("_exps" if experts else "")
        out += [(f"blk.{i}.{base}.weight", shape) for i in layers]
    return out


def _widths(net: ModelShape) -> dict[str, int]:
    """Output widths of the attention projections (q, k, v, o) by matrix name."""
    return {name: int(net.value(cols)) for name, _, cols, _ in net.matrices}


# per-layer norms named or counted otherwise than llama's attn_norm + ffn_norm (src/models/<arch>.cpp
# load_arch_tensors at llama.cpp 0c1e57098): olmo2's follow attention and the FFN (olmo2.cpp:45, 50), gemma2's and
# gemma3's come before and after each (gemma2.cpp:42-52, gemma3.cpp), starcoder2's are LayerNorms with biases
_NORMS = {"olmo2": ("post_attention_norm", "post_ffw_norm"),
          "gemma2": ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"),
          "gemma3_text": ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"),
          "starcoder2": ("attn_norm", "ffn_norm")}
_BIASED_NORMS = ("starcoder2",)  # starcoder2.cpp:34-44: attn_norm and ffn_norm each with a bias
# the architectures llama.cpp's converter keeps fused (gguf-py tensor_mapping.py: phi3's qkv_proj is attn_qkv (245),
# its gate_up_proj ffn_up (515)); llama.cpp loads them so (phi3.cpp: create_tensor_qkv, ffn_up {n_embd, 2 n_ff})
FUSED_QKV_UP = ("phi3",)


def _layer_vectors(net: ModelShape, terms: Mapping[str, int], widths: Mapping[str, int]) -> list[tuple[str, ...]]:
    """Per-layer 1-D tensors (and gpt-oss's 2-D expert biases) from the layer formula's terms: (suffix, *shape)."""
    h, n_exp = net.numbers["H"], net.numbers.get("n_exp", 0)
    out: list[tuple] = []
    norms = terms.get("norms", 0) // h
    layer_norm = net.model_type in ("gpt2", "opt", "gpt_neox", "phi", "phimoe", "bert", "falcon")
    names = (("attn_norm", "ffn_norm") if not layer_norm or norms == 2 and net.model_type == "falcon"
             else ("attn_norm",))
    if net.model_type == "cohere":
        names = ("attn_norm",)
    names = _NORMS.get(net.model_type, names)
    for norm in names[:norms] if not layer_norm else names:
        out.append((f"{norm}.weight", h))
        if layer_norm and net.model_type != "falcon":
            out.append((f"{norm}.bias", h))
    if net.model_type in _BIASED_NORMS:
        out = [(f"{n}.{p}", h) for n in names for p in ("weight", "bias")]
    if net.model_type == "falcon" and norms == 2:  # falcon-7b: one LayerNorm (weight and bias) per block
        out = [("attn_norm.weight", h), ("attn_norm.bias", h)]
    if "attention.qk_norm" in terms:
        q = terms["attention.qk_norm"] // 2 if net.model_type not in ("olmoe", "olmo2") else widths["attention.q"]
        k = terms["attention.qk_norm"] - q
        out += [("attn_q_norm.weight", q), ("attn_k_norm.weight", k)]
    if "attention.q_norm" in terms:
        out.append(("attn_q_a_norm.weight", terms["attention.q_norm"]))
    if "attention.kv_norm" in terms:
        out.append(("attn_kv_a_norm.weight", terms["attention.kv_norm"]))
    if "attention.qkv_bias" in terms:
        out += [(f"attn_{p}.bias", widths[f"attention.{p}"]) for p in ("q", "k", "v")]
    if "attention.o_bias" in terms:
        out.append(("attn_output.bias", h))
    if "moe.shared_gate" in terms:  # qwen2moe.cpp:54: the shared expert's sigmoid gate, {n_embd}
        out.append(("ffn_gate_inp_shexp.weight", terms["moe.shared_gate"]))
    if "attention.sinks" in terms:
        out.append(("attn_sinks.weight", terms["attention.sinks"]))
    if "mlp.bias" in terms:
        out += [("ffn_up.bias", terms["mlp.bias"] - h), ("ffn_down.bias", h)]
    router_bias = terms.get("moe.router", 0) - h * n_exp
    if n_exp and router_bias > 0:
        out.append(("ffn_gate_inp.bias", router_bias))
    if n_exp and "moe.experts" in terms:
        ff = net.numbers.get("d_exp", net.numbers.get("d_ff", 0))
        extra = terms["moe.experts"] - 3 * h * ff * n_exp
        if extra == n_exp * (h + 2 * ff):
            out += [("ffn_gate_exps.bias", ff, n_exp), ("ffn_up_exps.bias", ff, n_exp), ("ffn_down_exps.bias", h, n_exp)]
    return out


def _top_vectors(net: ModelShape, terms: Mapping[str, int]) -> list[Tensor]:
    """The tensors outside the blocks that are not matrices: the final norm, positions, the output bias."""
    h = net.numbers["H"]
    out: list[Tensor] = [("output_norm.weight", (h,))]
    if terms.get("final_norm", 0) == 2 * h:
        out.append(("output_norm.bias", (h,)))
    if "positions" in terms:
        out.append(("position_embd.weight", (h, terms["positions"] // h)))
    if "token_types" in terms:
        out.append(("token_types.weight", (h, terms["token_types"] // h)))
    if "embedding_norm" in terms:
        out += [("token_embd_norm.weight", (h,)), ("token_embd_norm.bias", (h,))]
    if "lm_head_bias" in terms:
        out.append(("output.bias", (terms["lm_head_bias"],)))
    return out


def gguf_tensors(net: ModelShape) -> list[Tensor]:
    """Every tensor of ``net`` as a GGUF file lists it: (name, shape with ne0 first); they sum to ``net.total``."""
    if net.spec is None or not net.sequence or "H" not in net.numbers or "L" not in net.numbers:
        raise UserError(_NO_LAYOUT.format(t=net.model_type))
    layer_terms = {t.key: int(net.value(sympy.sympify(t.expr))) for t in net.spec.layer_formula().terms}
    top_terms = {t.key: int(net.value(t.expr)) for t in net.params.terms}
    widths = _widths(net)
    tensors = _matrix_tensors(net)
    for i in range(net.numbers["L"]):
        tensors += [(f"blk.{i}.{v[0]}", tuple(v[1:])) for v in _layer_vectors(net, layer_terms, widths)]
    tensors += _top_vectors(net, top_terms)
    if sum(_elements(shape) for _, shape in tensors) != net.total:
        raise UserError(_NO_LAYOUT.format(t=net.model_type))
    return _fused(tensors) if net.model_type in FUSED_QKV_UP else tensors


def _fused(tensors: list[Tensor]) -> list[Tensor]:
    """Q, K, V as one ``attn_qkv`` and gate with up as one ``ffn_up`` (rows stacked), each where its first part was."""
    shapes = dict(tensors)
    parts = {"attn_q": ("attn_q", "attn_k", "attn_v"), "ffn_gate": ("ffn_gate", "ffn_up")}
    merged = {"attn_q": "attn_qkv", "ffn_gate": "ffn_up"}
    out: list[Tensor] = []
    for name, shape in tensors:
        head, _, kind = name[: -len(".weight")].rpartition(".") if name.endswith(".weight") else ("", "", "")
        if kind in merged:
            members = [shapes[f"{head}.{p}.weight"] for p in parts[kind]]
            out.append((f"{head}.{merged[kind]}.weight", (shape[0], sum(m[1] for m in members))))
        elif not any(kind in group[1:] for group in parts.values()):
            out.append((name, shape))
    return out


def _elements(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def gguf_options(net: ModelShape) -> dict[str, object]:
    """What llama-quantize's rules read besides names and shapes: experts, the GQA ratio, LLM_TYPE_70B."""
    heads, kv = net.numbers.get("a", 1), int(net.value(net.kv_heads)) or 1
    n_layers = net.numbers.get("L", 0)
    # llama-model.cpp: LLM_ARCH_LLAMA with 80 layers is LLM_TYPE_70B when n_head != n_head_kv (else 65B)
    llama_70b = net.model_type == "llama" and n_layers == 80 and heads != kv
    return {"n_expert": net.numbers.get("n_exp", 0), "n_gqa": max(heads // kv, 1), "llama_70b": llama_70b}
