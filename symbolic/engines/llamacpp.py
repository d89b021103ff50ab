"""llama.cpp's memory rules (llama-server; also Ollama and LM Studio): per-device buffers and layer offload.

Read from ggml-org/llama.cpp at 0c1e57098bba43ac29e6e3b677cdceebdd22334f, the commit llama-cpp-python 0.3.36
vendors (its CHANGELOG; the sdist's vendor/llama.cpp is that tree; ggml reports ``0c1e570``):

- ``src/llama-model.cpp`` ``load_tensors``: the input layer (``token_embd``) stays on the CPU (1603-1605);
  ``i_gpu_start = n_layer + 1 − n_gpu_layers`` (1589), so the *last* layers go to the GPU(s) and the output layer
  (index n_layer) only when ``n_gpu_layers > n_layer`` (1614); a layer's GPU is the first whose cumulative,
  normalised ``tensor_split`` share exceeds ``(il − i_gpu_start) / n_gpu_layers`` (1579-1597; without
  ``--tensor-split`` llama.cpp splits by each GPU's free memory (1559-1574): equal shares here); ``-ngl`` defaults
  to all layers + output (2002-2004).
- ``common/common.h:1198-1219`` and ``common/arg.cpp:2767-2775``: ``--n-cpu-moe N`` overrides
  ``blk.i.ffn_(up|down|gate|gate_up)_(ch|)exps`` for i < N to the CPU buffer (routers and shared experts stay).
- ``src/llama-context.cpp``: ``n_ctx`` 0 is the trained context (133); ``n_batch = min(n_ctx, -b)`` and
  ``n_ubatch = min(n_batch, -ub)`` (246-248); ``n_ctx`` padded to 256 and, without a unified cache, ``n_ctx_seq =
  pad(n_ctx / n_seq, 256)``, ``n_ctx = n_ctx_seq · n_seq`` (290-305); the output buffer ``max(n_outputs, n_seq) ·
  n_vocab`` f32 on the host (2116-2170, reserved for ``n_seq_max`` at 377); the compute buffer: the worst-case graph
  of ``min(n_ctx, n_ubatch)`` tokens and as many outputs (628-674), see ``ggml_graph``.
- ``src/llama-kv-cache.cpp:233-234``: per layer a K tensor ``type_k × n_embd_k_gqa × kv_size × n_stream`` and a V
  tensor alike, on the layer's device (212-217); ``n_stream`` is 1 with a unified cache, else ``n_seq`` (84).
- ``src/llama-kv-cache-iswa.cpp:69-81``: a sliding-window layer's cache holds ``pad(min(n_ctx_seq, n_swa ·
  (unified ? n_seq : 1) + n_ubatch), 256)`` cells per stream; ``--swa-full`` gives it the full size. Which layers
  slide: ``llama_hparams::set_swa_pattern`` (``src/llama-hparams.cpp:8-22``) with each architecture's period
  (``SWA_PATTERNS``, ``src/models/<arch>.cpp``).
- Defaults as llama-server sets them: ``-c 0``, ``-b 2048``, ``-ub 512`` (``common/common.h:452-454``), ``-fa auto``
  (501), ``-ngl`` auto (475), ``--parallel`` auto = 4 slots with ``kv_unified`` (``common/arg.cpp:1403``,
  ``tools/server/server.cpp:156-161``), a given ``--parallel`` without ``--kv-unified`` keeps it off
  (``common/common.h:575``), ``--swa-full`` off (574). llama-server also fits unset ``-ngl``/``-c`` to free memory
  by default (``fit_params``, 478-483: 1 GiB left per device, context not below 4096); ``--fit`` answers the same
  questions explicitly. A quantized V cache without flash attention is refused.

The rules were checked against that llama.cpp: ``benchmarks/llamacpp_buffers.py`` writes
``tests/data/llamacpp_buffers.json``, read by ``tests/test_llamacpp_engine.py`` (model and KV buffers exact, the
compute buffer within 0.3 %, as ``ggml_graph`` says). No PyTorch runtime terms: llama.cpp has no
caching allocator, NCCL or cuBLAS workspace of the kind ``torch`` counts.

Each GPU's buffers are checked against the budget over CUDA's total (``ServeSetup.engine_budget``: the catalogue's
``cuda_bytes`` where published, else nvidia-smi's total with a note), as llama.cpp allocates from the memory CUDA
reports (``ggml_backend_cuda_get_device_memory``: ``cudaMemGetInfo``).

Devices are ``cpu``, ``cuda:0`` … ; ``--tp N`` (or the length of ``--tensor-split``) is the number of GPUs. The
headline per-GPU fields of the ``ServePlan`` are those of the GPU with the largest total (the one that limits),
``figures`` has every device and the job's sums.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy

from .. import formats
from ..core.term import Term
from ..core.units import format_bytes
from ..formats.ggml import row_bytes
from ..formats.gguf_ftypes import FILE_TYPES, typed_tensors
from ..networks.gguf_tensors import gguf_options, gguf_tensors
from ..networks.stored import weight_bytes
from .flag_table import TABLES
from .flags import EngineFlagError, Flag
from .ggml_graph import Reserve, Shape, compute_buffer
from .result import ServePlan
from .setup import ServeError, ServeSetup, total_figures, total_note

NAME = "llamacpp"
COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
VERSION = f"llama.cpp {COMMIT[:12]} (as llama-cpp-python 0.3.36 vendors it; measured)"
SOURCE = "llamacpp"

FLAGS: tuple[Flag, ...] = TABLES[NAME]
N_PAD = 256  # n_ctx and the SWA cache size are padded to this (measured: 1000 -> 1024)
DEFAULT_BATCH, DEFAULT_UBATCH = 2048, 512
LOGIT_BYTES = 4  # f32 logits
_BLOCK = re.compile(r"blk\.(\d+)\.")
# --n-cpu-moe N: an override to the CPU buffer for blk.i<N matching LLM_FFN_EXPS_REGEX (common/common.h:1198)
_EXPERTS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")
# the file types --fit file-type tries, best first (those llama-quantize makes without an importance matrix)
FIT_FILE_TYPES = ("F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q4_K_M", "Q4_K_S", "IQ4_XS", "Q3_K_L", "Q3_K_M",
                  "Q3_K_S", "IQ3_M", "IQ3_S", "Q2_K")


@dataclass
class Device:
    """One device's buffers in bytes, as llama.cpp logs them."""

    name: str
    model: int = 0
    kv: int = 0
    compute: int = 0
    output: int = 0
    layers: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.model + self.kv + self.compute + self.output

    def as_dict(self) -> dict[str, object]:
        return {"device": self.name, "model_buffer_bytes": self.model, "kv_buffer_bytes": self.kv,
                "compute_buffer_bytes": self.compute, "output_buffer_bytes": self.output, "total_bytes": self.total}


@dataclass(frozen=True)
class Settings:
    """The llama.cpp flags as resolved (defaults filled, n_ctx padded)."""

    n_ctx: int
    n_seq: int
    n_batch: int
    n_ubatch: int
    flash_attn: bool
    type_k: str
    type_v: str
    swa_full: bool
    unified: bool
    n_gpu_layers: int  # clamped to n_layer + 1
    gpus: int
    split: tuple[float, ...]
    n_cpu_moe: int


def pad(n: int, to: int = N_PAD) -> int:
    """GGML_PAD: ``n`` rounded up to a multiple of ``to``."""
    return -(-n // to) * to


def _settings(setup: ServeSetup, n_layer: int, trained: int) -> tuple[Settings, list[str]]:
    """The flags with llama.cpp's defaults and checks; notes say what was assumed or clamped."""
    notes: list[str] = []
    opt = setup.option
    parallel_given = opt("parallel", None) is not None
    # llama-server: --parallel auto is 4 slots with a unified cache (tools/server/server.cpp:156-161); a given
    # --parallel keeps kv_unified off (common/common.h:575) unless --kv-unified is given
    n_seq = int(opt("parallel", None) or 4)
    unified = bool(opt("kv_unified", False)) or not parallel_given
    ctx = int(opt("ctx_size", 0))
    if ctx == 0:
        ctx = setup.seq * n_seq if setup.seq else trained
        notes.append(f"--ctx-size {ctx:,} ({'--seq × --parallel' if setup.seq else 'the model trained context'})")
    if not parallel_given:
        notes.append("--parallel auto: 4 slots, one unified KV cache (llama-server's default)")
    n_batch = min(int(opt("batch_size", DEFAULT_BATCH)), ctx)  # llama-context.cpp:246, before n_ctx is padded
    n_ubatch = min(int(opt("ubatch_size", DEFAULT_UBATCH)), n_batch)
    fa_flag = opt("flash_attn", "auto")
    type_k, type_v = str(opt("cache_type_k", "f16")), str(opt("cache_type_v", "f16"))
    if fa_flag == "off" and type_v not in ("f32", "f16", "bf16"):
        raise EngineFlagError("quantized V cache was requested, but this requires Flash Attention "
                              f"(--cache-type-v {type_v} with --flash-attn off)")
    flash = fa_flag != "off"
    if fa_flag == "auto":
        notes.append("--flash-attn auto: taken as on (llama.cpp enables it where every layer's device supports it)")
    split = tuple(float(x) for x in opt("tensor_split", ()) or ())
    gpus = setup.gpus
    if split and setup.gpus > 1 and len(split) != setup.gpus:
        raise EngineFlagError(f"--tensor-split has {len(split)} shares for {setup.gpus} GPUs (--tp × --pp)")
    if split:
        gpus = len(split)
    ngl = int(opt("n_gpu_layers", n_layer + 1))
    if ngl > n_layer + 1:
        notes.append(f"--n-gpu-layers {ngl} is more than the model's {n_layer} layers + output: all offloaded")
        ngl = n_layer + 1
    return Settings(n_ctx_padded(ctx, n_seq, unified), n_seq, n_batch, n_ubatch, flash, type_k, type_v,
                    bool(opt("swa_full", False)), unified, ngl, gpus, split or (1.0,) * gpus,
                    min(int(opt("n_cpu_moe", 0)), n_layer)), notes


def n_ctx_padded(ctx: int, n_seq: int, unified: bool) -> int:
    """n_ctx as llama-context.cpp:290-305 sets it: padded to 256, and per sequence padded to 256 when not unified."""
    n_ctx = pad(ctx)
    return n_ctx if unified else pad(n_ctx // n_seq) * n_seq


def layer_devices(n_layer: int, s: Settings) -> list[str]:
    """The device of each layer 0..n_layer (n_layer: the output layer), as llama-model.cpp's load_tensors assigns."""
    start = max(n_layer + 1 - s.n_gpu_layers, 0)
    act = min(s.n_gpu_layers, n_layer + 1)
    total = sum(s.split)
    cumulative, acc = [], 0.0
    for share in s.split:
        acc += share / total
        cumulative.append(acc)
    out = []
    for il in range(n_layer + 1):
        if il < start or act == 0:
            out.append("cpu")
            continue
        frac = (il - start) / act
        gpu = next((i for i, c in enumerate(cumulative) if frac < c), len(cumulative) - 1)
        out.append(f"cuda:{gpu}")
    return out


def _tensors(setup: ServeSetup) -> list[tuple[str, int]]:
    """Every tensor's (GGUF name, stored bytes): the file's own when read from one, else the format's rules."""
    net = setup.network
    stored = getattr(net, "stored_tensors", None)
    if stored:
        return [(t.name, t.nbytes) for t in stored]
    tensors = gguf_tensors(net)
    fmt = formats.get(setup.weights, "weights", "weight format")
    if fmt.mixture:
        opts = gguf_options(net)
        return [(n, b) for n, _, _, b in typed_tensors(fmt.mixture, tensors, opts["n_expert"], opts["n_gqa"],
                                                       llama_70b=opts["llama_70b"])]
    total, stored_bytes = net.total, weight_bytes(net, setup.weights)
    return [(n, stored_bytes * _count(shape) // total) for n, shape in tensors]  # spread the format's bytes


def _count(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def _tensor_device(name: str, devices: list[str], n_layer: int, s: Settings) -> str:
    """Where one tensor lives: its layer's device; token_embd on the CPU; output tensors with the output layer."""
    m = _BLOCK.match(name)
    if m:
        il = int(m.group(1))
        if il < s.n_cpu_moe and _EXPERTS.search(name):
            return "cpu"
        return devices[min(il, n_layer)]
    if name.startswith(("output", "result_norm")):
        return devices[n_layer]
    return "cpu"  # token_embd, position and type embeddings: the input layer


def _cpu_moe_notes(tensors: list[tuple[str, int]], devices: list[str], n_layer: int, s: Settings) -> list[str]:
    """What --n-cpu-moe does beyond the model buffers, for experts kept on the CPU of layers that run on a GPU.

    The override puts them in the CPU's buffer type or, where the CPU backend repacks their type, CPU_REPACK
    (src/llama-model-loader.cpp:1235-1257 at 0c1e57098; checked on the CPU build: Q4_0 and Q4_K experts are
    "overridden to CPU_REPACK", F16 ones to CPU). With op offload (llama.cpp's default), a matmul of >= 32 tokens
    whose weight is in a host buffer runs on the GPU with the weight copied into that GPU's compute buffer, one at a
    time (ggml-backend.cpp:951-975, 1324-1341; ggml-cuda.cu ggml_backend_cuda_device_offload_op); a repacked
    weight's matmul runs on the CPU. Which types the CPU repacks depends on its instruction set, so neither is counted.
    """
    moved = [(n, b) for n, b in tensors if (m := _BLOCK.match(n)) and int(m.group(1)) < s.n_cpu_moe
             and _EXPERTS.search(n) and devices[min(int(m.group(1)), n_layer)] != "cpu"]
    if not moved:
        return []
    name, largest = max(moved, key=lambda t: t[1])
    return [f"--n-cpu-moe {s.n_cpu_moe}: {len(moved)} expert tensors in the CPU buffer; in prompt processing llama.cpp "
            f"copies each to the GPU for its matmul unless the CPU repacked it (the largest, {name}, "
            f"{format_bytes(largest)}): not in the GPU compute buffer here"]


# llama.cpp's sliding-window layers per architecture (HF model_type -> load_swa_pattern(n, dense_first) in
# src/models/<arch>.cpp): llama_hparams::set_swa_pattern (src/llama-hparams.cpp:8-22) makes layer il sliding when
# il % n < n - 1 (the last of every n is full), or with dense_first when il % n != 0 (the first is full)
SWA_PATTERNS: dict[str, tuple[int, bool]] = {
    "gemma2": (2, False),        # src/models/gemma2.cpp:6
    "gemma3": (6, False),        # src/models/gemma3.cpp:7
    "gemma3_text": (6, False),
    "gpt_oss": (2, False),       # src/models/openai-moe.cpp:9
    "cohere2": (4, False),       # src/models/cohere2.cpp:5
    "llama4": (4, False),        # src/models/llama4.cpp:19 (chunked attention)
    "exaone4": (4, False),       # src/models/exaone4.cpp:7
    "olmo2": (4, False),         # src/models/olmo2.cpp:9 (olmo3's configs convert to this arch)
    "olmo3": (4, False),
    "smallthinker": (4, True),   # src/models/smallthinker.cpp:9
}


# the architectures whose config has a sliding window that llama.cpp does not apply: every layer gets a full cache.
# Mistral is converted as llama (conversion/llama.py:20), whose graph (src/models/llama.cpp) has no window; phi3 turns
# it off (src/models/phi3.cpp:13-24, "Phi SWA is currently disabled"); starcoder2.cpp and qwen2.cpp read none
FULL_ATTENTION = ("mistral", "phi3", "starcoder2", "qwen2")


def sliding_layers(model_type: str, n_layer: int, config_types: list[str] | None = None) -> list[bool]:
    """Which layers llama.cpp gives a sliding-window cache: the architecture's pattern, else the config's layer_types.

    load_swa_pattern (src/llama-model.cpp:3434-3441) reads a per-layer array from the GGUF first; the converter
    writes one from ``layer_types`` for the architectures not in SWA_PATTERNS (conversion/*.py).
    """
    if model_type in SWA_PATTERNS:
        n, dense_first = SWA_PATTERNS[model_type]
        return [il % n != 0 if dense_first else il % n < n - 1 for il in range(n_layer)]
    if config_types and len(config_types) == n_layer:
        return [t in ("sliding_attention", "chunked_attention") for t in config_types]
    return []


def _windows(setup: ServeSetup) -> tuple[list[bool], int]:
    """Which layers are sliding-window ones (llama.cpp's pattern for the architecture), and n_swa."""
    net = setup.network
    kinds = net.layer_kinds
    n_layer = net.numbers["L"]
    if "latent" in kinds or "conv" in kinds:
        raise ServeError(f"{net.name}: llama.cpp's cache for latent attention or conv layers is not modelled yet")
    if not kinds.get("sliding", 0) or net.model_type in FULL_ATTENTION:
        return [False] * n_layer, 0
    types = (net.config or {}).get("layer_types") if isinstance(getattr(net, "config", None), dict) else None
    pattern = sliding_layers(net.model_type, n_layer, types)
    if not pattern:
        raise ServeError(f"{net.name}: llama.cpp's sliding-window layer pattern for {net.model_type!r} is not known")
    return pattern, int(net.numbers.get("W", 0))


def _kv_cells(s: Settings, sliding: bool, n_swa: int) -> int:
    """Cells of one layer's cache over all streams (llama-kv-cache.cpp:233, llama-kv-cache-iswa.cpp:73)."""
    streams = 1 if s.unified else s.n_seq
    per_stream = s.n_ctx // streams  # n_ctx_seq
    if sliding and not s.swa_full:
        per_stream = pad(min(per_stream, n_swa * (s.n_seq if s.unified else 1) + s.n_ubatch))
    return per_stream * streams


def serve(setup: ServeSetup) -> ServePlan:
    """llama.cpp's answer on ``setup``: every device's buffers; with ``--fit``, the largest setting that fits."""
    target = setup.option("fit")
    if target:
        return _fit(setup, str(target))
    return _plan(setup)


def _plan(setup: ServeSetup) -> ServePlan:
    net = setup.network
    n_layer = net.numbers["L"]
    trained = int(net.trained_context or 4096)
    s, notes = _settings(setup, n_layer, trained)
    layer_dev = layer_devices(n_layer, s)
    names = ["cpu"] + [f"cuda:{i}" for i in range(s.gpus)]
    devs = {n: Device(n) for n in names}
    for il, d in enumerate(layer_dev[:n_layer]):
        devs[d].layers.append(il)
    tensors = _tensors(setup)
    for name, nbytes in tensors:
        devs[_tensor_device(name, layer_dev, n_layer, s)].model += pad(nbytes, 32)
    notes += _cpu_moe_notes(tensors, layer_dev, n_layer, s)
    sliding, n_swa = _windows(setup)
    if net.layer_kinds.get("sliding", 0) and not any(sliding):
        notes.append(f"llama.cpp gives {net.model_type}'s sliding-window layers a full cache (it applies no window)")
    kv_heads, head_dim = int(net.value(net.kv_heads)), int(net.value(net.head_dim))
    width = kv_heads * head_dim
    k_row, v_row = row_bytes(s.type_k.upper(), width), row_bytes(s.type_v.upper(), width)
    for il in range(n_layer):
        devs[layer_dev[il]].kv += _kv_cells(s, sliding[il], n_swa) * (k_row + v_row)
    vocab = net.numbers.get("V", 0)
    devs["cpu"].output = s.n_seq * vocab * LOGIT_BYTES
    _compute(devs, layer_dev, sliding, n_swa, s, graph_shape(net), n_layer)
    return _result(setup, s, devs, notes)


def _compute(devs: dict[str, Device], layer_dev: list[str], sliding: list[bool], n_swa: int, s: Settings,
             shape: Shape, n_layer: int) -> None:
    """Each device's compute buffer: its part of the reserved graph through ggml's allocator (ggml_graph)."""
    n_tokens = min(s.n_ctx, s.n_ubatch)
    streams = 1 if s.unified else s.n_seq
    n_kv = (("full", _kv_cells(s, False, n_swa) // streams), ("swa", _kv_cells(s, True, n_swa) // streams))
    reserve = Reserve(any(sliding), rotation(s.type_k, shape.head_dim, k=True), rotation(s.type_v, shape.head_dim))
    for dev in devs.values():
        kinds = tuple("swa" if sliding[il] else "full" for il in dev.layers)
        first = dev.name == "cpu"  # the input layer (token_embd) is always on the CPU
        output = layer_dev[n_layer] == dev.name
        if not (kinds or first or output):
            continue
        alignment = 32 if dev.name == "cpu" else 128  # TENSOR_ALIGNMENT; the CUDA buffer type's alignment
        dev.compute = compute_buffer(shape, n_tokens, kinds, n_kv, s.flash_attn, first, (n_layer - 1) in dev.layers,
                                     output, alignment, reserve)


# llama_kv_cache (src/llama-kv-cache.cpp:321-338, build_input_k_rot/v_rot 1447-1480 at 0c1e57098): a quantized
# cache whose head size is a multiple of 64 stores K (V) rotated by a Hadamard matrix, an f32 graph input; K's side
# is the largest power of two (from 64) dividing the head size, V's is 64
UNQUANTIZED_CACHE = ("f32", "f16", "bf16")


def rotation(cache_type: str, head_dim: int, *, k: bool = False) -> int:
    """The side of the rotation matrix llama.cpp applies to a ``cache_type`` cache (0: none)."""
    if cache_type in UNQUANTIZED_CACHE or head_dim % 64:
        return 0
    side = 64
    while k and head_dim % (side * 2) == 0:
        side *= 2
    return side


def graph_shape(net) -> Shape:
    """The tensor shapes of ``net``'s llama.cpp graph, its layout read from the GGUF tensor names."""
    num = net.numbers
    shared = int(num.get("n_shared", 0)) * int(num.get("d_shared") or num.get("d_exp") or num.get("d_ff", 0))
    stored = getattr(net, "stored_tensors", None)
    shapes = {t.name: tuple(t.shape) for t in stored} if stored else dict(gguf_tensors(net))
    return Shape(num["H"], num.get("a", 1), int(net.value(net.kv_heads)), int(net.value(net.head_dim)),
                 num.get("d_ff", 0), num.get("V", 0), num.get("n_exp", 0), num.get("k_exp", 0),
                 num.get("d_exp", num.get("d_ff", 0)), shared, **graph_layout(shapes))


def graph_layout(shapes: dict[str, tuple[int, ...]]) -> dict[str, object]:
    """What the layer-0 tensors (name: shape, ne0 first) say of the graph: a pre-norm, a fused QKV, the FFN's form.

    llama.cpp builds the layer from the tensors the architecture loads: ``attn_norm`` before attention (olmo2 has
    none, src/models/olmo2.cpp), ``attn_qkv`` for a fused projection (build_qkv, src/llama-graph.cpp:1663), and
    the FFN from ``ffn_gate`` and ``ffn_up``, from one ``ffn_up`` twice ``ffn_down``'s input wide holding both
    (phi3, LLM_FFN_SWIGLU), or from ``ffn_up`` alone (starcoder2, LLM_FFN_GELU).
    """
    up, down = shapes.get("blk.0.ffn_up.weight"), shapes.get("blk.0.ffn_down.weight")
    if "blk.0.ffn_gate.weight" in shapes or not up or not down:
        ffn = "gated"  # gate and up, or experts (their own path)
    else:
        ffn = "fused" if up[1] == 2 * down[0] else "plain"
    return {"pre_norm": "blk.0.attn_norm.weight" in shapes, "fused_qkv": "blk.0.attn_qkv.weight" in shapes,
            "ffn": ffn}


def _result(setup: ServeSetup, s: Settings, devs: dict[str, Device], notes: list[str]) -> ServePlan:
    net, budget = setup.network, setup.engine_budget  # CUDA's total: llama.cpp allocates what CUDA reports free
    gpus = [d for d in devs.values() if d.name != "cpu"]
    top = max(gpus, key=lambda d: d.total)
    sums = {k: sum(getattr(d, a) for d in devs.values()) for k, a in
            (("model_buffer_bytes", "model"), ("kv_buffer_bytes", "kv"), ("compute_buffer_bytes", "compute"),
             ("output_buffer_bytes", "output"), ("total_bytes", "total"))}
    figures = {"devices": [d.as_dict() for d in devs.values()], **sums, "n_ctx": s.n_ctx, "n_seq_max": s.n_seq,
               "n_batch": s.n_batch, "n_ubatch": s.n_ubatch, "flash_attn": s.flash_attn,
               "n_gpu_layers": s.n_gpu_layers, "cache_type_k": s.type_k, "cache_type_v": s.type_v,
               "kv_unified": s.unified, "fits": all(d.total <= budget.bytes for d in gpus), **total_figures(setup)}
    logs = []
    for d in devs.values():
        label = "CPU" if d.name == "cpu" else "CUDA" + d.name.split(":")[1]
        logs += [f"load_tensors: {label} model buffer size = {d.model / 2**20:.2f} MiB" for _ in [0] if d.model]
        logs += [f"llama_kv_cache: {label} KV buffer size = {d.kv / 2**20:.2f} MiB" for _ in [0] if d.kv]
        logs += [f"llama_context: {label} compute buffer size = {d.compute / 2**20:.2f} MiB" for _ in [0] if d.compute]
    logs.append(f"llama_context: CPU output buffer size = {devs['cpu'].output / 2**20:.2f} MiB")
    notes += [n for n in (total_note(setup),) if n]
    if not figures["fits"]:
        notes.append(f"the busiest GPU ({top.name}) needs {format_bytes(top.total)}, over {setup.budget.label}")
    seq, batch = setup.seq, setup.batch
    room = s.n_ctx if figures["fits"] else 0  # llama.cpp fails to allocate a buffer that does not fit: nothing runs
    concurrency = room // seq if seq else None
    terms = tuple(Term(f"{k}_{d.name.replace(':', '')}", f"{d.name} {k} buffer", sympy.Integer(getattr(d, k)),
                       "bytes", SOURCE) for d in devs.values() for k in ("model", "kv", "compute", "output")
                  if getattr(d, k))
    return ServePlan(NAME, VERSION, net.name, setup.budget.gpu.name, s.gpus, setup.weights, setup.weights_from,
                     f"{s.type_k}/{s.type_v}", budget.bytes, top.model, top.kv, s.n_ctx,
                     top.model + top.compute, seq, concurrency, batch, room // batch if batch else None,
                     terms=terms, figures=figures, log_lines=tuple(logs), notes=tuple(notes))


def _with(setup: ServeSetup, **options: object) -> ServeSetup:
    from dataclasses import replace

    return replace(setup, options={**setup.options, **options, "fit": None})


def _fit(setup: ServeSetup, target: str) -> ServePlan:
    """The most GPU layers, the longest context (multiples of 256) or the best file type whose plan fits."""
    n_layer = setup.network.numbers["L"]

    def fits(candidate: ServeSetup) -> bool:
        return bool(_plan(candidate).figures["fits"])

    if target == "gpu-layers":
        found = [n for n in range(n_layer + 1, -1, -1) if fits(_with(setup, n_gpu_layers=n))]
        best = _with(setup, n_gpu_layers=found[0] if found else 0)
        answer = f"--n-gpu-layers {found[0] if found else 0}"
    elif target == "context":
        low, high = 0, pad(int(setup.network.trained_context or 4096)) // N_PAD
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(_with(setup, ctx_size=mid * N_PAD)) else (low, mid - 1)
        if low == 0:
            raise ServeError(f"{setup.network.name}: no context fits {setup.budget.label} with these layers on the GPU")
        best = _with(setup, ctx_size=low * N_PAD)
        answer = f"--ctx-size {low * N_PAD:,}"
    else:
        from dataclasses import replace

        options = [t for t in FIT_FILE_TYPES if t in FILE_TYPES]
        chosen = next((t for t in options if fits(replace(_with(setup), weights="gguf:" + t))), None)
        if chosen is None:
            raise ServeError(f"{setup.network.name}: no llama.cpp file type fits {setup.budget.label}")
        best = replace(_with(setup), weights="gguf:" + chosen, weights_from="--fit file-type")
        answer = f"--weights gguf:{chosen}"
    plan = _plan(best)
    from dataclasses import replace

    return replace(plan, figures={**plan.figures, "fit": target, "fit_answer": answer},
                   notes=(f"--fit {target}: {answer}", *plan.notes))
