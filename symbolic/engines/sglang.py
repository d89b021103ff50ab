"""SGLang's memory rules: mem_fraction_static, the token pool after the weights, chunked prefill.

Read from SGLang 0.5.23 (the PyPI wheel; its ``sglang/_version.py`` names no commit; source id
``sglang``), paths under ``python/sglang/srt/``:

- ``arg_groups/memory_hook.py`` ``handle_gpu_memory_settings``: by the GPU's memory (nvidia-smi's
  total in MiB, ``utils/common.py`` ``get_nvgpu_memory_capacity``) the default chunked prefill size
  and decode CUDA-graph max batch (< 20 GiB: 2048, 8; < 35: 4096, 48 or 160 at tp ≥ 4; < 60: 4096, 32
  or 160; < 90 and < 160: 8192, 256 or 512; else 16384, 512), capped by --max-running-requests;
  then mem_fraction_static = round((gpu − reserved) / gpu, 3) with reserved MiB = 512 + 1.5 ·
  max(chunked, 2048) + tp·pp/8 · 1024 + the graph reserve (``reserve_for_graph_mb``: 2 · decode
  max_bs, and 8 MiB per prefill capture size on CUDA, 1.5 GiB instead for MLA), at least 10 GiB
  on GPUs above 60 GiB. Post-capture KV sizing (``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``) is off by
  default and not modelled.
- ``arg_groups/cuda_graph_hook.py`` ``generate_prefill_cuda_graph_batch_sizes``: the prefill capture
  sizes up to the chunked prefill size (MLA: at most 8192); ``model_executor/cuda_graph_config.py``:
  decode graphs on, prefill ("breakable") graphs on CUDA.
- ``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``: the KV budget is the memory
  free after the weights less pre_model_load_memory · (1 − mem_fraction_static), pre_model_load_memory
  being what was free before loading; ``resolve_max_num_reqs``: max_running_requests =
  min(clamp(⌊tokens / context_len · 512⌋, 2048, 4096) or the given value, tokens // 2).
- ``model_executor/pool_configurator.py``: the per-token cell (MHA/GQA: kv_heads/tp (at least 1) ·
  (head_dim + v_head_dim) · layers · bytes; MLA: (kv_lora_rank + qk_rope_head_dim) · layers · bytes),
  max_total_num_tokens = available // cell rounded down to the page size (default 1,
  ``arg_groups/overrides.py`` ``_page_size_default``); hybrid sliding-window models (gpt-oss and the
  architectures of ``configs/model_config.py`` ``is_hybrid_swa_model``) split the pool: cell = full
  layers' bytes + swa_full_tokens_ratio (0.8) · sliding layers' bytes, SWA tokens = 0.8 · full tokens.
- ``mem_cache/memory_pool.py``: the K and V buffers hold tokens + page_size rows per layer; the log
  line "KV Cache is allocated. dtype: …, #tokens: …, K size: … GB, V size: … GB" (GB = 2³⁰ bytes),
  and ``managers/scheduler.py`` the line with max_total_num_tokens.

Two totals, as SGLang reads them: the default chunked prefill size, graph batch and mem_fraction_static
come from nvidia-smi's total (the catalogue's ``bytes``); pre_model_load_memory is CUDA's free memory
(``cudaMemGetInfo``), so it starts from CUDA's total (the catalogue's ``cuda_bytes`` where published,
else nvidia-smi's with a note; a ``--gpu SIZE`` is both).

Approximations, said as such: pre_model_load_memory is the GPU's CUDA total less the CUDA context (the
published 400 MiB of ``library.runtime``) and, at tp·pp > 1, less what SGLang starts before it measures:
the PyNccl communicators and the custom all-reduce (``sglang_startup``; each byte there costs
mem_fraction_static bytes of KV pool). The weights are the stored bytes over tp × pp (SGLang's "mem
usage" at load also counts rotary caches and loader buffers still held).
"""

from __future__ import annotations

import math

import sympy

from .. import formats
from ..catalogs.budget import as_fraction
from ..core.term import Term
from ..library.runtime import CONTEXT_BYTES
from ..networks.stored import stored_weights
from .flag_table import SGLANG_KV_CHOICES, TABLES
from .flags import Flag
from .result import ServePlan
from .setup import ServeError, ServeSetup, total_figures, total_note
from .sglang_startup import terms as startup_terms

NAME = "sglang"
VERSION = "SGLang 0.5.23 (PyPI wheel)"
SOURCE = "sglang"
MIB = 2**20
GIB = 2**30
# memory_hook.py: (below this many MiB, chunked prefill size, decode max bs at tp < 4, at tp ≥ 4)
CAPACITY = ((20 * 1024, 2048, 8, 8), (35 * 1024, 4096, 48, 160), (60 * 1024, 4096, 32, 160),
            (90 * 1024, 8192, 256, 512), (160 * 1024, 8192, 256, 512), (math.inf, 16384, 512, 512))
BASE_RESERVE_MIB = 512  # "constant meta data (e.g., from attention backend)"
PER_ACTIVATION_TOKEN_MIB = 1.5
MIN_ACTIVATION_TOKENS = 2048
FLOOR_MIB, FLOOR_ABOVE_MIB = 10 * 1024, 60 * 1024  # at least 10 GiB reserved on GPUs above 60 GiB
DECODE_GRAPH_MIB_PER_BS = 2
PREFILL_GRAPH_MIB_PER_SIZE = 8
MLA_PREFILL_GRAPH_MIB = 1.5 * 1024
MLA_PREFILL_GRAPH_MAX = 8192
SWA_FULL_TOKENS_RATIO = 0.8  # schedule.py swa_full_tokens_ratio fallback
DEFAULT_PAGE_SIZE = 1
DEFAULT_MAX_PREFILL_TOKENS = 16384
RUNNING_PER_CONTEXT, RUNNING_MIN, RUNNING_MAX = 512, 2048, 4096
# configs/model_config.py is_hybrid_swa_model (and SWA_SINK_ARCHS): hybrid-pool architectures
HYBRID_SWA_ARCHS = frozenset({"GptOssForCausalLM", "Llama4ForConditionalGeneration", "Gemma4ForCausalLM",
                              "Gemma4ForConditionalGeneration", "GraniteSWAForCausalLM", "GraniteMoeSWAForCausalLM",
                              "Step3p5ForCausalLM", "MiMoV2FlashForCausalLM"})
KV_CHOICES = SGLANG_KV_CHOICES
TORCH_DTYPE = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32",
               "fp8_e4m3": "torch.float8_e4m3fn", "fp8_e5m2": "torch.float8_e5m2"}
FLAGS: tuple[Flag, ...] = TABLES[NAME]


def _term(key: str, title: str, value: int, note: str = "") -> Term:
    return Term(key, title, sympy.Integer(value), "bytes", SOURCE, note=note)


def capacity_defaults(gpu_mib: float, tp: int) -> tuple[int, int]:
    """SGLang's default (chunked_prefill_size, decode CUDA-graph max bs) for a GPU of ``gpu_mib`` MiB."""
    for below, chunked, small_tp, large_tp in CAPACITY:
        if gpu_mib < below:
            return chunked, small_tp if tp < 4 else large_tp
    raise AssertionError("unreachable: the last row has no bound")


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """The prefill CUDA-graph capture sizes up to ``max_bs`` tokens (cuda_graph_hook.py)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


def graph_reserve_mib(decode_max_bs: int, chunked: int, mla: bool, prefill_graphs: bool = True) -> float:
    """``reserve_for_graph_mb``: decode graphs 2 MiB a batch slot, prefill graphs 8 MiB a size (MLA 1.5 GiB)."""
    reserved = float(decode_max_bs * DECODE_GRAPH_MIB_PER_BS)
    if prefill_graphs:
        if mla:
            reserved += MLA_PREFILL_GRAPH_MIB
        else:
            reserved += len(prefill_graph_sizes(chunked)) * PREFILL_GRAPH_MIB_PER_SIZE
    return reserved


def reserved_mib(gpu_mib: float, chunked: int, decode_max_bs: int, tp: int, pp: int, mla: bool,
                 prefill_graphs: bool = True) -> float:
    """MiB SGLang keeps outside the static fraction: activations, parallel slack, CUDA graphs, the floor."""
    reserved = BASE_RESERVE_MIB + max(chunked, MIN_ACTIVATION_TOKENS) * PER_ACTIVATION_TOKEN_MIB
    reserved += tp * pp / 8 * 1024
    reserved += graph_reserve_mib(decode_max_bs, chunked, mla, prefill_graphs)
    if gpu_mib > FLOOR_ABOVE_MIB:
        reserved = max(reserved, FLOOR_MIB)
    return reserved


def default_fraction(gpu_mib: float, chunked: int, decode_max_bs: int, tp: int = 1, pp: int = 1, mla: bool = False,
                     prefill_graphs: bool = True) -> float:
    """SGLang's default mem_fraction_static: round((gpu − reserved) / gpu, 3), as Python rounds."""
    reserved = reserved_mib(gpu_mib, chunked, decode_max_bs, tp, pp, mla, prefill_graphs)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def is_hybrid_swa(net: object) -> bool:
    """Whether SGLang gives ``net`` the split full/SWA pool (an architecture of is_hybrid_swa_model)."""
    archs = (getattr(net, "config", None) or {}).get("architectures") or ()
    return bool(net.spec.sliding_layers) and any(a in HYBRID_SWA_ARCHS for a in archs)


def layer_counts(net: object, pp: int) -> tuple[int, int]:
    """(full-attention layers, sliding layers SGLang pools apart) on the largest pipeline stage."""
    spec = net.spec
    attention = spec.layers - spec.conv_layers
    sliding = spec.sliding_layers if is_hybrid_swa(net) else 0
    return math.ceil((attention - sliding) / pp), math.ceil(sliding / pp)


def token_bytes(net: object, tp: int, element: float) -> int:
    """Bytes of one token of one layer on one GPU: K and V heads, or MLA's latent and rope."""
    spec = net.spec
    if spec.kv_lora_rank:
        return int((spec.kv_lora_rank + spec.qk_rope_dim) * element)
    heads = max(1, net.kv_head_count // tp)  # model_config.get_num_kv_heads
    return int(heads * 2 * int(net.value(net.head_dim)) * element)


def cell_bytes(net: object, tp: int, pp: int, element: float) -> float:
    """The per-token cell of max_total_num_tokens (pool_configurator.py): full layers + 0.8 · sliding layers."""
    full, sliding = layer_counts(net, pp)
    per_layer = token_bytes(net, tp, element)
    return full * per_layer + SWA_FULL_TOKENS_RATIO * sliding * per_layer


def pool_tokens(available: int, cell: float, page: int) -> int:
    """max_total_num_tokens: the budget over the cell, rounded down to whole pages."""
    return int(available // cell) // page * page


def max_running_requests(tokens: int, context_len: int, given: int | None) -> int:
    """``resolve_max_num_reqs``: the given cap or 512 per context's worth of tokens in [2048, 4096], ≤ tokens // 2."""
    if given is not None:
        return min(given, tokens // 2)
    estimated = max(min(int(tokens / context_len * RUNNING_PER_CONTEXT), RUNNING_MAX), RUNNING_MIN)
    return min(estimated, tokens // 2)


def kv_log_line(dtype: str, tokens: int, page: int, per_layer: int, layers: int, mla: bool) -> str:
    """memory_pool.py's line: tokens + page_size rows per layer, K and V apart (MLA: one KV buffer)."""
    rows = tokens + page
    if mla:
        return (f"KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, "
                f"KV size: {rows * per_layer * layers / GIB:.2f} GB")
    half = rows * per_layer // 2 * layers / GIB
    return f"KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, K size: {half:.2f} GB, V size: {half:.2f} GB"


def scheduler_line(tokens: int, chunked: int, running: int, context_len: int) -> str:
    """The scheduler's line with max_total_num_tokens (its available_gpu_mem, measured later, is left off)."""
    return (f"max_total_num_tokens={tokens}, chunked_prefill_size={chunked}, "
            f"max_prefill_tokens={DEFAULT_MAX_PREFILL_TOKENS}, max_running_requests={running}, "
            f"context_len={context_len}")


def kv_element(setup: ServeSetup, choice: str) -> tuple[str, str]:
    """The formats name and torch dtype of the KV element for ``--kv-cache-dtype`` (auto: the model's)."""
    if choice not in KV_CHOICES:
        raise ServeError(f"--kv-cache-dtype {choice} is not SGLang's; choose from {', '.join(KV_CHOICES)}")
    if choice.startswith("fp8"):
        return "fp8", TORCH_DTYPE[choice]
    fmt = "bf16" if choice in ("bf16", "bfloat16") else setup.kv_dtype
    return fmt, TORCH_DTYPE.get(fmt, fmt)


def fraction_of(setup: ServeSetup, gpu_mib: float, chunked: int, decode_max_bs: int) -> float:
    """--mem-fraction-static as given (0 < F ≤ 1), else SGLang's default rule."""
    given = setup.option("mem_fraction_static")
    if given is not None:
        return float(as_fraction(given, "--mem-fraction-static"))
    return default_fraction(gpu_mib, chunked, decode_max_bs, setup.tp, setup.pp, bool(setup.network.spec.kv_lora_rank))


def kv_budget(pre: int, weights: int, fraction: float) -> int:
    """_profile_available_bytes: free after the weights less pre_model_load · (1 − fraction); refused at ≤ 0."""
    rest = (pre - weights) - pre * (1 - fraction)
    if rest <= 0:
        need = math.ceil((1 - (pre - weights) / pre) * 1000) / 1000
        fix = f"raise it above {need:.3f} or raise --tp" if need < 1 else "the weights exceed the GPU: raise --tp or --pp"
        raise ServeError(f"SGLang would stop: the weights ({weights / GIB:.2f} GiB per GPU) leave no GPU memory for the "
                         f"KV cache under --mem-fraction-static={fraction}; {fix}")
    return int(rest)


def serve(setup: ServeSetup) -> ServePlan:
    """SGLang's answer on ``setup``: the fraction, the token pool, max_running_requests, the log lines."""
    net, budget = setup.network, setup.budget
    gpu_mib = budget.bytes / MIB
    default_chunked, default_bs = capacity_defaults(gpu_mib, setup.tp)
    chunked = int(setup.option("chunked_prefill_size", default_chunked))
    given_running = setup.option("max_running_requests")
    decode_bs = int(setup.option("cuda_graph_max_bs", default_bs))
    if given_running is not None and setup.option("cuda_graph_max_bs") is None:
        decode_bs = min(decode_bs, int(given_running))
    fraction = fraction_of(setup, gpu_mib, chunked, decode_bs)
    context_len = int(setup.option("context_length", net.trained_context or 0))
    if context_len < 1:
        raise ServeError(f"{net.name} names no context length: give --context-length")
    page = int(setup.option("page_size", DEFAULT_PAGE_SIZE))
    kv_fmt, dtype = kv_element(setup, str(setup.option("kv_cache_dtype", "auto")))
    element = formats.get(kv_fmt, "kv", "KV-cache dtype").element_bytes
    weights = math.ceil(sum(stored_weights(net, setup.weights).values()) / setup.gpus)
    startup = startup_terms(setup.tp, setup.pp, budget.gpu)
    startup_bytes = int(sum(t.expr for t in startup))
    pre = setup.engine_budget.bytes - CONTEXT_BYTES - startup_bytes  # CUDA's free memory: from CUDA's total
    available = kv_budget(pre, weights, fraction)
    cell = cell_bytes(net, setup.tp, setup.pp, element)
    tokens = pool_tokens(available, cell, page)
    if tokens <= 0:
        raise ServeError(f"SGLang would stop: not enough memory for one KV token; increase --mem-fraction-static "
                         f"(now {fraction})")
    running = max_running_requests(tokens, context_len, None if given_running is None else int(given_running))
    full, sliding = layer_counts(net, setup.pp)
    per_layer = token_bytes(net, setup.tp, element)
    swa_tokens = int(tokens * SWA_FULL_TOKENS_RATIO) // page * page if sliding else 0
    kv_bytes = (tokens + page) * per_layer * full + ((swa_tokens + page) * per_layer * sliding if sliding else 0)
    seq = setup.seq or context_len
    fit = min(_requests_at(seq, tokens, swa_tokens, net.spec.window, page, sliding), running)
    context = None if setup.batch is None else min(context_len, tokens // setup.batch)
    slack = int(pre * (1 - fraction))
    terms = [_term("weights", f"weights as stored ({setup.weights}), over tp × pp", weights,
                 "counted in the static fraction (loaded before the pool is sized)"),
             _term("kv_pool", "K and V buffers: (max_total_num_tokens + page_size) rows per layer", kv_bytes,
                   "mem_cache/memory_pool.py"),
             _term("runtime_slack", "pre_model_load_memory × (1 − mem_fraction_static): activations, CUDA graphs, "
                   "request tables", slack, "kv_cache_configurator.py _profile_available_bytes"),
             Term("cuda_context", "CUDA context before SGLang measures free memory", sympy.Integer(CONTEXT_BYTES),
                  "bytes", "pytorch-context", note="published figure (library.runtime.CONTEXT_BYTES)"),
             *startup]
    figures = {"mem_fraction_static": fraction, "max_total_num_tokens": tokens, "chunked_prefill_size": chunked,
               "max_running_requests": running, "cuda_graph_max_bs": decode_bs, "page_size": page,
               "context_len": context_len, "startup_bytes": startup_bytes, "pre_model_load_bytes": pre, "available_kv_cache_bytes": available,
               "cell_bytes": cell, "reserved_mib": reserved_mib(gpu_mib, chunked, decode_bs, setup.tp, setup.pp,
                                                                 bool(net.spec.kv_lora_rank)), **total_figures(setup)}
    if sliding:
        figures["swa_max_total_num_tokens"] = swa_tokens
    notes = _notes(setup, given=setup.option("mem_fraction_static") is not None, sliding=bool(sliding),
                   startup=tuple(t.key for t in startup))
    log_lines = (kv_log_line(dtype, tokens, page, per_layer, full, bool(net.spec.kv_lora_rank)),
                 scheduler_line(tokens, chunked, running, context_len))
    return ServePlan(NAME, VERSION, net.name, budget.gpu.name, setup.gpus, setup.weights, setup.weights_from, kv_fmt,
                     int(pre * fraction), weights, kv_bytes, tokens, weights, seq, fit, setup.batch, context,
                     terms=tuple(terms), outside=("runtime_slack", "cuda_context", *(t.key for t in startup)),
                     figures=figures, log_lines=log_lines, notes=notes)


def _requests_at(seq: int, tokens: int, swa_tokens: int, window: int, page: int, sliding: int) -> int:
    """Requests of ``seq`` tokens the pool holds; a sliding pool charges min(seq, window) + page_size each."""
    fit = tokens // seq
    if sliding:
        fit = min(fit, swa_tokens // (min(seq, window) + page))
    return fit


def _notes(setup: ServeSetup, given: bool, sliding: bool, startup: tuple[str, ...]) -> tuple[str, ...]:
    """What was assumed, in words."""
    parts = {"nccl": "the PyNccl communicators (NCCL's published A100 figure per communicator, likely low on H100)",
             "custom_all_reduce": "the custom all-reduce's buffers (from the source)"}
    notes = ["pre_model_load_memory is the GPU's total less a 400 MiB CUDA context (a published figure)"
             + ("" if not startup else " and less what SGLang starts before measuring it: "
                + " and ".join(parts[key] for key in startup)
                + "; each costs mem_fraction_static times its bytes of KV pool")]
    notes += [n for n in (total_note(setup),) if n]
    if not given:
        notes.append("mem_fraction_static is SGLang 0.5.23's default rule for this GPU (CUDA: decode and prefill "
                     "CUDA graphs on)")
    if sliding:
        notes.append("hybrid sliding-window pool: SWA layers hold 0.8 × the full layers' tokens "
                     "(--swa-full-tokens-ratio's default)")
    return tuple(notes)
