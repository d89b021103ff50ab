"""llama.cpp's compute buffer, derived: its worst-case graph run through a port of ggml's graph allocator.

The compute buffer llama.cpp logs (``sched_reserve: CPU compute buffer size``) is the high-water mark of
``ggml_gallocr`` over the graph ``sched_reserve`` reserves: ``n_tokens = min(n_ctx, n_ubatch)``, ``n_outputs =
min(n_tokens, n_batch)`` (``src/llama-context.cpp:628-674`` at llama.cpp 0c1e57098bba43ac29e6e3b677cdceebdd22334f,
the commit llama-cpp-python 0.3.36 vendors). ``ggml/src/ggml-alloc.c`` at that commit: graph inputs are allocated
first (``ggml_gallocr_alloc_graph_impl``, 718-823), then each node in graph order; a node whose op can run in
place (``ggml_op_can_inplace``, 22-51: ADD, MUL, SCALE, RMS_NORM, ROPE, SOFT_MAX, UNARY, ...) takes its first
parent's memory when that parent has no other consumer and the same layout (623-681); a tensor is freed after
its last consumer; the free list is first best-fit over the inner free blocks, then the tail
(``ggml_dyn_tallocr_alloc``, 202-310), merged with its neighbours when freed (``ggml_dyn_tallocr_free_bytes``,
312-350). The buffer is the largest offset reached, so it counts fragmentation as ggml does.

The graph is the one ``src/models/llama.cpp`` builds (checked node by node with ``GGML_SCHED_DEBUG=2``): the
token rows, per layer the norm, Q/K/V projections (K and V written to the cache, which is not in this buffer),
attention (without flash attention the scores ``n_kv · n_tokens · n_head`` f32, soft-maxed in place, and
``kqv`` made contiguous; with it one ``FLASH_ATTN`` output), the output projection (a sliding-window model's
``build_attn`` expands Q, K, V, the others' Q, V, K: ``src/llama-graph.cpp:2895-2897, 3147-3154``). A quantized cache
whose head size is a multiple of 64 is stored rotated (``src/llama-kv-cache.cpp:321-338``): Q and K are multiplied by
a Hadamard matrix (an f32 input per cache kind), V too, and the attention output is rotated back before the output
projection (``llama_mul_mat_hadamard``, ``src/llama-graph.cpp:3133-3142, 3191-3193``), each a new tensor. Then the
residual add, the FFN (gate, up, their GLU product, down: ``n_ff · n_tokens`` f32 each; or the MoE path: router logits, top-k ids,
per-expert gate/up/product/down over ``n_expert_used · n_tokens`` rows), and at the end the final norm and the
logits ``n_vocab · n_outputs`` f32. Inputs: token ids, positions, the KV-cache row indices (per element of V when
V is stored transposed, i.e. without flash attention), one attention mask per cache kind (``n_kv · n_tokens``,
f16 with flash attention, f32 without), the output ids, and the float embeddings input ``build_inp_embd`` adds
beside the token ids (``ggml_build_forward_select``: no node reads it, so it is never freed). Every size is a tensor
shape of that graph; no constant is fitted.

The projected Q takes a tensor of its own before attention (``Qrope``): llama.cpp's buffer is what the graph needs
when Q's RoPE output does not reuse the projection's memory, though ``ggml_op_can_inplace`` lists ROPE. This is
measured, not located in ggml's source: with it every row of the table below is within 0.3 %, with and without
Q/K/V biases; without it the rows without flash attention were one Q-sized tensor low (1-4 %), and gpt-oss's and
qwen2's (Q/K/V biases) 4-13 % low, which an earlier version closed by making each bias sum a tensor of its own. The
bias sums themselves run in place (the node log, ``GGML_SCHED_DEBUG=2``: ``ADD Qcur-0 <- Qcur-0``), so a model with
biases (``create_tensor_qkv`` loads ``attn_q/k/v.bias`` for every architecture that has them; ``build_qkv`` adds
them, ``src/llama-graph.cpp:1700-1730``) has the same graph as one without. gpt-oss's other differences (the
experts' biases added in place, gate before up, the output rows taken after the last layer) change no allocation.

Against llama.cpp's own log (tests/data/llamacpp_buffers.json: llama with GQA, qwen2 with Q/K/V biases and a tied
output, qwen3 with q/k norms, gemma3 and gemma2 with sliding-window layers, gemma, llama with experts, qwen3moe,
qwen2moe with a shared expert, gpt-oss, phi3, starcoder2, olmo2; 117 rows): every row within 0.3 % (or the log's
0.005 MiB), with and without flash attention. The layer's form follows the tensors the architecture loads
(``llamacpp.graph_layout``): olmo2 has no norm before attention or the FFN (its norms follow them, in place), phi3
one ``attn_qkv`` projection whose Q and K are roped out of their views and whose V is made contiguous, and one
``ffn_up`` holding gate and up (``ffn_up`` 2 n_ff wide, the GLU n_ff); starcoder2 a GELU FFN (``ffn_up``, its bias
and GELU in place, ``ffn_down``). gemma's own layer (norms after
attention and FFN, the scaled embeddings) adds only in-place nodes (RMS_NORM, MUL, SCALE, ADD on a sole consumer;
``src/models/gemma3.cpp:95-190``), which change no allocation, so it runs through this same graph.
A device other than the first gets its input (the residual stream) as a copy in its own buffer, as
``ggml_backend_sched`` copies split inputs; MoE models' leading dense layers are taken as MoE layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

F32, I32, I64, F16 = 4, 4, 8, 2


@dataclass(frozen=True)
class Op:
    """One graph node: its bytes, the nodes it reads, whether ggml may run it in place, whether it is an input."""

    name: str
    nbytes: int
    parents: tuple[str, ...] = ()
    inplace: bool = False
    is_input: bool = False
    output: bool = False


class DynAllocator:
    """ggml_dyn_tallocr with one chunk: best fit over the inner free blocks, else the tail; merge on free."""

    def __init__(self, alignment: int) -> None:
        self.alignment = alignment
        self.blocks: list[list[int]] = [[0, 1 << 62]]  # [offset, size], sorted; the last one is the open tail
        self.max_size = 0

    def _align(self, size: int) -> int:
        return -(-size // self.alignment) * self.alignment

    def alloc(self, size: int) -> int:
        size = self._align(size)
        best, best_size = -1, None
        for i, (_, bsize) in enumerate(self.blocks[:-1]):
            if bsize >= size and (best_size is None or bsize <= best_size):
                best, best_size = i, bsize
        if best == -1:
            best = len(self.blocks) - 1
        block = self.blocks[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del self.blocks[best]
        self.max_size = max(self.max_size, offset + size)
        return offset

    def free(self, offset: int, size: int) -> None:
        size = self._align(size)
        for i, block in enumerate(self.blocks):
            if block[0] + block[1] == offset:
                block[1] += size
                if i + 1 < len(self.blocks) and block[0] + block[1] == self.blocks[i + 1][0]:
                    block[1] += self.blocks[i + 1][1]
                    del self.blocks[i + 1]
                return
            if offset + size == block[0]:
                block[0], block[1] = offset, block[1] + size
                if i > 0 and self.blocks[i - 1][0] + self.blocks[i - 1][1] == block[0]:
                    self.blocks[i - 1][1] += block[1]
                    del self.blocks[i]
                return
        at = next((i for i, b in enumerate(self.blocks) if b[0] > offset), len(self.blocks))
        self.blocks.insert(at, [offset, size])


def high_water(ops: list[Op], alignment: int = 32) -> int:
    """The buffer ggml_gallocr reserves for ``ops`` in this order: inputs first, in-place reuse, free after last use."""
    alloc = DynAllocator(alignment)
    size = {op.name: op.nbytes for op in ops}
    outputs = {op.name for op in ops if op.output}
    children: dict[str, int] = {}
    for op in ops:
        for p in op.parents:
            children[p] = children.get(p, 0) + 1
    addr: dict[str, int] = {}
    for op in ops:
        if op.is_input:
            addr[op.name] = alloc.alloc(op.nbytes)
    for op in ops:
        if op.is_input:
            continue
        reused = next((p for p in op.parents if op.inplace and p in addr and children[p] == 1
                       and size[p] == op.nbytes and p not in outputs), None)
        if reused:
            addr[op.name] = addr.pop(reused)
        elif op.nbytes:  # a 0-byte op is a view of the cache (SET_ROWS): nothing allocated
            addr[op.name] = alloc.alloc(op.nbytes)
        for p in op.parents:
            children[p] -= 1
            if children[p] == 0 and p in addr and p not in outputs:
                alloc.free(addr.pop(p), size[p])
    return alloc.max_size


@dataclass(frozen=True)
class Shape:
    """What the graph's tensor shapes depend on (one model, one reserve)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    d_ff: int
    vocab: int
    n_expert: int = 0
    n_expert_used: int = 0
    d_expert: int = 0
    n_shared_ff: int = 0  # the shared experts' width (qwen2moe, deepseek), 0: none
    pre_norm: bool = True  # a norm before attention and FFN (olmo2 has none: its norms follow them)
    fused_qkv: bool = False  # one attn_qkv projection whose Q, K, V are views (phi3)
    ffn: str = "gated"  # gate and up ("gated"), one ffn_up holding both ("fused", phi3), up alone ("plain", GELU)


@dataclass(frozen=True)
class Reserve:
    """What the graph depends on beside the model: the cache layout and its rotations."""

    iswa: bool = False  # a sliding-window model: llama_kv_cache_iswa, build_attn's iswa node order
    rot_k: int = 0  # side of the K rotation matrix (quantized K cache), 0: none
    rot_v: int = 0  # side of the V rotation matrix (quantized V cache), 0: none


def _attention(i: int, s: Shape, t: int, n_kv: int, flash: bool, kind: str, x: str, r: Reserve) -> list[Op]:
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    ops = [Op(f"norm{i}", s.hidden * t * F32, (x,), inplace=True)] if s.pre_norm else []
    src = f"norm{i}" if s.pre_norm else x
    if s.fused_qkv:  # build_qkv's fused path: Q and K roped out of their views, V made contiguous for the cache
        ops += [Op(f"QKV{i}", (q + 2 * kv) * t * F32, (src,)), Op(f"Qrope{i}", q * t * F32, (f"QKV{i}",))]
        k_ops = [Op(f"K{i}", kv * t * F32, (f"QKV{i}",))]
        v_ops = [Op(f"V{i}", kv * t * F32, (f"QKV{i}",))]
    else:
        ops += [Op(f"Q{i}", q * t * F32, (src,)),
                Op(f"Qrope{i}", q * t * F32, (f"Q{i}",))]  # a tensor of its own: measured (module docstring)
        k_ops = [Op(f"K{i}", kv * t * F32, (src,))]
        v_ops = [Op(f"V{i}", kv * t * F32, (src,))]
    qn = f"Qrope{i}"
    kn, vn = f"K{i}", f"V{i}"
    if r.rot_k:  # llama_mul_mat_hadamard: Q and K times the rotation matrix, each a new tensor
        ops.append(Op(f"Qrot{i}", q * t * F32, (qn, f"krot_{kind}")))
        k_ops.append(Op(f"Krot{i}", kv * t * F32, (kn, f"krot_{kind}")))
        qn, kn = f"Qrot{i}", f"Krot{i}"
    if r.rot_v:
        v_ops.append(Op(f"Vrot{i}", kv * t * F32, (vn, f"vrot_{kind}")))
        vn = f"Vrot{i}"
    # build_attn expands Q, V, K (llama-graph.cpp:2895-2897); the iswa variant Q, K, V (3147-3154); the fused
    # projection's views K (written to the cache) before V's copy
    setk, setv = Op(f"setk{i}", 0, (kn, f"kidx_{kind}")), Op(f"setv{i}", 0, (vn, f"vidx_{kind}"))
    if s.fused_qkv:
        ops += [*k_ops, setk, *v_ops, setv]
    else:
        ops += [*(k_ops + v_ops if r.iswa else v_ops + k_ops), setk, setv]
    mask = f"mask_{kind}"
    if flash:
        ops.append(Op(f"kqv{i}", q * t * F32, (qn, mask)))
    else:
        ops += [Op(f"kq{i}", n_kv * t * s.heads * F32, (qn,)),
                Op(f"softmax{i}", n_kv * t * s.heads * F32, (f"kq{i}", mask), inplace=True),
                Op(f"kqv_raw{i}", q * t * F32, (f"softmax{i}",)), Op(f"kqv{i}", q * t * F32, (f"kqv_raw{i}",))]
    out = f"kqv{i}"
    if r.rot_v:  # the attention output rotated back before the output projection
        ops.append(Op(f"kqv_rot{i}", q * t * F32, (out, f"vrot_{kind}")))
        out = f"kqv_rot{i}"
    ops.append(Op(f"attn_out{i}", s.hidden * t * F32, (out,)))
    return ops


def _ffn(i: int, s: Shape, t: int, src: str) -> tuple[list[Op], str]:
    ops = [Op(f"fnorm{i}", s.hidden * t * F32, (src,), inplace=True)] if s.pre_norm else []
    x = f"fnorm{i}" if s.pre_norm else src
    if not s.n_expert:
        if s.ffn == "plain":  # up, its bias and activation in place, down (starcoder2's GELU FFN)
            ops += [Op(f"up{i}", s.d_ff * t * F32, (x,)), Op(f"down{i}", s.hidden * t * F32, (f"up{i}",))]
            return ops, f"down{i}"
        if s.ffn == "fused":  # one ffn_up holding gate and up, split by the GLU (phi3)
            ops += [Op(f"up{i}", 2 * s.d_ff * t * F32, (x,)), Op(f"glu{i}", s.d_ff * t * F32, (f"up{i}",))]
        else:
            ops += [Op(f"gate{i}", s.d_ff * t * F32, (x,)), Op(f"up{i}", s.d_ff * t * F32, (x,)),
                    Op(f"glu{i}", s.d_ff * t * F32, (f"gate{i}", f"up{i}"))]
        ops.append(Op(f"down{i}", s.hidden * t * F32, (f"glu{i}",)))
        return ops, f"down{i}"
    n, k, ff = s.n_expert, s.n_expert_used, s.d_expert
    ops += [Op(f"logits{i}", n * t * F32, (x,)), Op(f"probs{i}", n * t * F32, (f"logits{i}",), inplace=True),
            Op(f"argsort{i}", n * t * I32, (f"probs{i}",)), Op(f"weights{i}", k * t * F32, (f"probs{i}", f"argsort{i}")),
            Op(f"eup{i}", ff * k * t * F32, (x, f"argsort{i}")),
            Op(f"egate{i}", ff * k * t * F32, (x, f"argsort{i}")),
            Op(f"eglu{i}", ff * k * t * F32, (f"egate{i}", f"eup{i}")),
            Op(f"edown{i}", s.hidden * k * t * F32, (f"eglu{i}", f"argsort{i}")),
            Op(f"weighted{i}", s.hidden * k * t * F32, (f"edown{i}", f"weights{i}"), inplace=True),
            Op(f"moe{i}", s.hidden * t * F32, (f"weighted{i}",))]
    out = f"moe{i}"
    if s.n_shared_ff:
        ff = s.n_shared_ff
        ops += [Op(f"sgate{i}", ff * t * F32, (x,)), Op(f"sup{i}", ff * t * F32, (x,)),
                Op(f"sglu{i}", ff * t * F32, (f"sgate{i}", f"sup{i}")),
                Op(f"sdown{i}", s.hidden * t * F32, (f"sglu{i}",)),
                Op(f"moe_sum{i}", s.hidden * t * F32, (out, f"sdown{i}"), inplace=True)]
        out = f"moe_sum{i}"
    return ops, out


def _layer(i: int, s: Shape, t: int, n_kv: int, flash: bool, kind: str, x: str, last: bool,
           r: Reserve) -> tuple[list[Op], str]:
    """One decoder layer from input ``x``; returns its ops and the name of its output."""
    ops = _attention(i, s, t, n_kv, flash, kind, x, r)
    a, res = f"attn_out{i}", x
    if last:  # llama.cpp keeps the output rows (here all of them) of the last layer
        ops += [Op(f"rows_a{i}", s.hidden * t * F32, (a, "out_ids")), Op(f"rows_x{i}", s.hidden * t * F32, (x, "out_ids"))]
        a, res = f"rows_a{i}", f"rows_x{i}"
    ops.append(Op(f"ffn_inp{i}", s.hidden * t * F32, (a, res), inplace=True))
    ffn, out = _ffn(i, s, t, f"ffn_inp{i}")
    ops += ffn
    ops.append(Op(f"l_out{i}", s.hidden * t * F32, (out, f"ffn_inp{i}"), inplace=True))
    return ops, f"l_out{i}"


def device_graph(s: Shape, t: int, kinds: tuple[str, ...], n_kv: dict[str, int], flash: bool, *, first: bool,
                 last_layer: bool, output: bool, reserve: Reserve = Reserve()) -> list[Op]:
    """The ops one device runs: token rows if ``first``, the layers of ``kinds`` (in order), the logits if ``output``.

    A device that does not start the graph gets the previous device's residual stream as an input copy, as
    ``ggml_backend_sched`` copies split inputs into the device's own buffer.
    """
    # inputs in the order the graph first reaches them (its leaf order): they are allocated before any node
    ops: list[Op] = []
    if first:
        # build_inp_embd puts both inputs in the graph (ggml_build_forward_select): the token ids and a float
        # embeddings input, which no node consumes, so it is never freed
        ops += [Op("inp_tokens", t * I32, is_input=True), Op("inp_embd", s.hidden * t * F32, is_input=True)]
    else:
        ops.append(Op("x_in", s.hidden * t * F32, is_input=True))
    if kinds:
        ops.append(Op("inp_pos", t * I32, is_input=True))
    for kind in dict.fromkeys(kinds):
        if reserve.rot_k:
            ops.append(Op(f"krot_{kind}", reserve.rot_k**2 * F32, is_input=True))
        if reserve.rot_v:
            ops.append(Op(f"vrot_{kind}", reserve.rot_v**2 * F32, is_input=True))
        ops += [Op(f"kidx_{kind}", t * I64, is_input=True),
                Op(f"vidx_{kind}", t * I64 * (1 if flash else s.kv_heads * s.head_dim), is_input=True),
                Op(f"mask_{kind}", n_kv[kind] * t * (F16 if flash else F32), is_input=True)]
    if last_layer or (output and not kinds):
        ops.append(Op("out_ids", t * I32, is_input=True))
    x = "x_in"
    if first:
        ops.append(Op("embd", s.hidden * t * F32, ("inp_tokens",)))
        x = "embd"
    for j, kind in enumerate(kinds):
        layer, x = _layer(j, s, t, n_kv[kind], flash, kind, x, last_layer and j == len(kinds) - 1, reserve)
        ops += layer
    if output:
        ops += [Op("result_norm", s.hidden * t * F32, (x,), inplace=True, output=True),
                Op("result_output", s.vocab * t * F32, ("result_norm",), output=True)]
    return ops


@lru_cache(maxsize=4096)
def compute_buffer(s: Shape, t: int, kinds: tuple[str, ...], n_kv: tuple[tuple[str, int], ...], flash: bool,
                   first: bool, last_layer: bool, output: bool, alignment: int = 32,
                   reserve: Reserve = Reserve()) -> int:
    """One device's compute buffer in bytes (see the module docstring)."""
    ops = device_graph(s, t, kinds, dict(n_kv), flash, first=first, last_layer=last_layer, output=output,
                       reserve=reserve)
    return high_water(ops, alignment) if ops else 0
