"""vLLM's memory rules (V1 engine): the budget, the profile run, non-torch memory, KV pages, CUDA graphs.

Read from vLLM 0.34.0 (commit 62d4bc3c7, as the PyPI wheel's ``vllm/_version.py`` names it; source id
``vllm``):

- ``vllm/v1/worker/utils.py`` ``request_memory``: the budget is ⌈total × gpu_memory_utilization⌉,
  ``total`` being CUDA's total (``torch.accelerator.get_memory_info``): the catalogue's ``cuda_bytes``
  (published readings, ``catalogs.cuda_totals``), nvidia-smi's total with a note where none is
  published, or a size given as ``--gpu 79.18GiB``, taken as it is.
  Default utilization 0.92 (``CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION``, ``vllm/config/cache.py``).
- ``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory`` and ``vllm/utils/mem_utils.py``
  ``memory_profiling``: KV = budget − (weights + the profile run's activation peak + the non-torch
  growth since the start snapshot). The CUDA context, NCCL buffers and cuBLAS handles are made
  before that snapshot (``init_device``), so they are not in the budget's count.
- ``vllm/v1/kv_cache_interface.py``: a page is ``block_size`` tokens of one layer: full attention
  2·bs·kv_heads·head_size·bytes; MLA bs·(kv_lora_rank + rope)·bytes, ``fp8_ds_mla`` 656 bytes a
  token; a sliding-window layer holds ⌈min(window − 1 + in-flight tokens, max_model_len)/bs⌉ + 1
  pages of a request; chunked-local attention (``ChunkedLocalAttentionSpec``, Llama-4's
  ``attention_chunk_size`` layers) ⌈min(chunk + in-flight, max_model_len)/bs⌉ pages.
- Mamba-kind state (``MambaSpec``; LFM2's short convolution, ``models/lfm2.py``
  ``get_mamba_state_shape_from_config`` and ``layers/mamba/mamba_utils.py`` ``short_conv_state_shape`` /
  ``short_conv_state_dtype``): one state of conv_dim/tp × (conv_L_cache − 1) elements in the model dtype
  (``mamba_cache_dtype`` auto; ``--kv-cache-dtype`` does not apply to it), whatever the request's length.
  ``platforms/interface.py`` ``_align_hybrid_block_size`` raises the attention block to
  bs·⌈state / (bs · attention bytes a token)⌉ tokens and pads the state page to the attention page, so
  both kinds share one page size. A hybrid generative model has prefix caching on by default
  (``config/model.py`` ``is_prefix_caching_supported``), which sets ``mamba_cache_mode`` "align"
  (``models/config.py`` ``MambaModelConfig``): a request holds 2 state pages per conv group
  (``MambaSpec.max_memory_usage_bytes``), counted like attention pages in the blocks and in
  "Maximum concurrency". LFM2's conv_dim is its hidden size (the published configs), as the table has it.
- ``model_executor/layers/attention/attention.py`` ``set_default_quant_scales``: every attention layer
  registers four fp32 scalar buffers (``_k_scale``, ``_v_scale``, ``_q_scale``, ``_prob_scale``) whatever
  the KV dtype; they are model state, counted with the weights (never in the KV pool). Counted here with an
  fp8 ``--kv-cache-dtype`` only (16 bytes a layer; 0 otherwise, so the auto-dtype figures stay as before).
- ``vllm/v1/core/kv_cache_utils.py``: layers of one kind form groups of equal size (a kind whose
  count is not a multiple gets padding layers); one block is a page of every layer of a group;
  blocks = available // (page × group size); the maximum concurrency is blocks / Σ pages a request
  of max_model_len needs per group; "GPU KV cache size" is int(concurrency × max_model_len). 0.34
  prints both on one line.

- The profile run (``vllm/v1/worker/gpu/model_runner.py``): ``_dummy_run`` of max_num_batched_tokens
  tokens in R = min(tokens, max_num_seqs) requests (:911); logits only for the R sampled rows, in the
  model dtype (:1035, :1044), all-gathered over tp (``model_executor/layers/logits_processor.py``:130);
  the hidden states live until the sampler is done (:1102). The sampler's warm-up pass (:1059–1062,
  ``SamplingParams.for_sampler_warmup``: top-k, top-p, penalties, logprobs) copies the logits to fp32
  (``v1/worker/gpu/sample/sampler.py``:239; bias, penalties, temperature and min-p work in place) and,
  with FlashInfer's sampler (on by default, ``envs.py``:937), calls
  ``top_k_top_p_sampling_from_logits`` (``v1/sample/ops/topk_topp_sampler.py``:316), which makes an fp32
  top-k-masked copy and fp32 probabilities (FlashInfer 0.7.4 ``flashinfer/sampling.py``:1889–1890;
  vLLM pins 0.7.3, not on the index). Peak of that stage: R·V·(e + 4 + 4 + 4) + T·hidden·e.
- ``--no-flashinfer-sampler`` (``VLLM_USE_FLASHINFER_SAMPLER=0``): 0.34 has no PyTorch-native sampler on
  CUDA any more. ``sampler.py``:344 calls ``apply_top_k_top_p``, which takes Triton whenever it is
  installed (``topk_topp_sampler.py``:212; the sort-based ``apply_top_k_top_p_pytorch``, :242–262, runs
  only without Triton): it masks the fp32 copy in place and keeps a cached fp32 buffer of one vocab row
  per program, min(next_pow2(min(SMs, R)), SMs) rows (``topk_topp_triton.py``:1688–1695). Then
  ``gumbel_sample`` (``v1/worker/gpu/sample/gumbel.py``:441–445) draws in the kernel and keeps per-block
  partials, R·⌈V/1024⌉ int64 indices and fp32 maxima; no softmax probabilities, no exponential q. The
  warm-up's logprobs (5, ``sampling_params.py``:1493) come after, from the raw logits
  (``v1/worker/gpu/sample/logprob.py``:128–133, R × 6 ids and fp32 values): smaller than the partials,
  made after they are freed. Peak: R·V·(e + 4) + buffer + partials + T·hidden·e.
- Persistent sampler state (``v1/worker/gpu/sample/penalties.py``:48): ``output_bin_counts``, int32
  max_num_seqs × V, made in ``load_model`` after "Model loading took" is measured (model_runner.py:440,
  :513), so it is in 0.34's non-KV memory (``mem_utils.py``: total consumed since the start snapshot).

Approximations, said as such: the forward stage is the MLP's intermediate (gate·up and its
activation) over the profile's tokens; the peak is the larger of the two stages. Checked against
llm-d's published peaks (an older release, 1,024 rows), 0.34's are far lower (Llama-3.1-8B: 1.77 GiB
with FlashInfer, 0.86 with Triton, against 4.76): their release sorted the fp32 logits for top-k/top-p
(the PyTorch-native path, 0.34's ``apply_top_k_top_p_pytorch``), and our shared terms plus that sort's
buffers give their three peaks within 1.5 % (see the tests). The non-torch growth is llm-d's measured
0.13 GiB (tp 1; vLLM PR #12126 logged 0.16) and 0.55 GiB (tp 2). 0.34 takes its start snapshot after
NCCL, the custom all-reduce buffers and the cuBLAS handles are made (``gpu_worker.py``:502–549), so
those are outside the budget; what grows at tp 2 after it is NCCL's, not in vLLM's source, and tp > 2
reuses tp 2's figure (an assumption). The 1.79 / 3.58 GiB of PR #10511 came from a measure PR #11809
corrected (PyTorch's reserved cache counted as non-torch). The SM count for Triton's buffer comes from
a table (``SMS``; an H100's for a GPU given by size). Mamba-2, GDN and
other SSM mixers have no table entry here (their configs are refused when loaded); a conv hybrid with
latent attention is refused in one line (no table family has it).

CUDA graphs (``cuda_graph_bytes``), inside the budget: ``gpu_worker.py``:734-779 runs
``profile_cudagraph_memory`` (``v1/worker/gpu/cudagraph_utils.py``:989) after the profile run unless
``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0`` (``envs.py``:2352, default 1) and subtracts its estimate from the KV
memory; ``--enforce-eager`` sets no capture sizes (``config/vllm.py``:2551), so 0. The mode is
FULL_AND_PIECEWISE (``config/vllm.py``:339): PIECEWISE graphs for mixed batches at every shared capture size,
FULL graphs for uniform decode batches of n requests. Sizes (``config/vllm.py`` ``_set_cudagraph_sizes``:2322
and ``_split_cudagraph_capture_sizes``): the largest is min(2 · max_num_seqs, 512, max_num_batched_tokens)
tokens (1,024 is SM100's ceiling, whose wide defaults instead take the prefill grid up to min(8192,
max_num_batched_tokens), ``config/compilation.py`` ``prefill_cudagraph_capture_grid``), the shared sizes are
1, 2, 4, every 8 below 256 and every 16 from 256 up to it, plus max_num_batched_tokens and max_num_seqs when
within it; the decode request counts are min(size, max_num_seqs) of those (SM100: the request grid
``decode_cudagraph_capture_grid`` up to max_num_seqs). The estimate (``cudagraph_utils.py``:1066-1091) is one
throwaway capture: PIECEWISE graphs first, largest first, measured whole, then the two largest FULL graphs, and
the FULL total extrapolated as the first sample + (N_FULL − 1) · max(second sample, 1 MiB)
(``_MIN_PER_GRAPH_BYTES``). All graphs share one pool, so what is held is the pool, sized by the largest
graph, plus what each graph keeps. vLLM measures this (free memory before and after); we approximate the
measurement from the shapes: the largest graph's live intermediates (residual, qkv, attention output, MLP
gate·up and activation at that many tokens, per tp rank; MoE: top_k experts' intermediates, as in the
profile run), the first FULL graph fitting in the pool the PIECEWISE graphs already hold (the source's
comment, :479-481), and the 1 MiB floor for each further FULL graph. Published captures vary too widely to
check against (vLLM PR #11349: Llama-3.2-1B, 0.21 GiB, an older release; gpustack/runner PR #251, 0.27.1,
"Estimated CUDA graph memory: 0.36 GiB"; vLLM PR #51590: gpt-oss-120b MXFP4, tp 8, RTX PRO 4500, 0.28.0, a
62 MiB pool; issue #53013: 118.65 GiB, a profiler bug), so the tests check the arithmetic of the source.
"""

from __future__ import annotations

import math

import sympy

from .. import formats
from ..catalogs.budget import as_fraction
from ..core.term import Term
from ..networks.stored import stored_weights
from .flag_table import TABLES
from .flags import Flag
from .result import ServePlan
from .setup import ServeError, ServeSetup, total_figures, total_note

NAME = "vllm"
VERSION = "vLLM 0.34.0 (commit 62d4bc3c7)"
SOURCE = "vllm"
MEASURED = "llm-d-vllm-memory"
DEFAULT_UTILIZATION = sympy.Rational(92, 100)  # CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION
DEFAULT_BLOCK_SIZE = 64  # CacheConfig.DEFAULT_BLOCK_SIZE
GIB = 2**30
# arg_utils.py: `vllm serve` defaults by the GPU's total memory (≥160 GiB, ≥70 GiB other than A100, else)
BATCHED_TOKENS = ((160 * GIB, 16384, 1024), (70 * GIB, 8192, 1024), (0, 2048, 256))
# kv_cache_interface.MambaSpec.max_memory_usage_bytes, mamba_cache_mode "align" (prefix caching's default)
MAMBA_ALIGN_PAGES = 2
KERNEL_BLOCK = 16  # FlashAttention's get_supported_kernel_block_sizes: MultipleOf(16)
ATTENTION_SCALES = 4  # attention.py set_default_quant_scales: _k/_v/_q/_prob_scale, fp32 scalars
FP8_DS_MLA_TOKEN_BYTES = 656  # kv_cache_interface.py: 512 fp8 latent + 4 fp32 scales + 64 bf16 rope
# GiB of non-torch growth during the profile run, measured by llm-d on an H100 at tp 1 and tp 2 (their
# vLLM release unstated); a measured default, not a rule read from vLLM's source
NON_TORCH_MEASURED = {1: 0.13, 2: 0.55}
FP32 = 4
FLASHINFER = "flashinfer"
FLAGS: tuple[Flag, ...] = TABLES[NAME]
# Streaming multiprocessors per GPU (NVIDIA's architecture whitepapers; AMD's CDNA 3 whitepaper: compute units):
# vLLM's Triton top-k/top-p keeps one vocab row per program, min(SMs, rows) programs
SMS = {"v100-16gb": 80, "v100-32gb": 80, "t4": 40, "a10g": 80, "l4": 58, "l40s": 142, "rtx-3090": 82,
       "rtx-4090": 128, "a100-40gb": 108, "a100-80gb": 108, "h100-80gb": 132, "h100-94gb": 132, "h200-141gb": 132,
       "b200": 148, "mi300x": 304}
DEFAULT_SMS = 132  # a GPU given by its size only: an H100's (said in a note)
GUMBEL_BLOCK = 1024  # gumbel.py:441, vocab entries per program of the Gumbel kernel
INT64 = 8
INT32 = 4
# CUDA graphs: config/vllm.py _set_cudagraph_sizes (default ceiling 512 tokens, SM100's wide defaults up to 8192
# prefill tokens) and cudagraph_utils.py _MIN_PER_GRAPH_BYTES (the extrapolated FULL graph's floor)
GRAPH_CEILING = 512
SM100_PREFILL_CEILING = 8192
SM100 = frozenset({"b200"})
MIN_PER_GRAPH_BYTES = 1 << 20


def _term(key: str, title: str, value: object, source: str = SOURCE, note: str = "") -> Term:
    return Term(key, title, sympy.nsimplify(value) if isinstance(value, float) else sympy.Integer(value), "bytes",
                source, note=note)


def scheduler_defaults(total: int) -> tuple[int, int]:
    """``vllm serve``'s default (max_num_batched_tokens, max_num_seqs) for a GPU of ``total`` bytes."""
    for floor, tokens, seqs in BATCHED_TOKENS:
        if total >= floor:
            return tokens, seqs
    return BATCHED_TOKENS[-1][1:]


def kv_format(setup: ServeSetup, choice: str) -> str:
    """The formats name of the KV element: ``auto`` is the model's dtype, fp8 variants are fp8."""
    if choice == "auto":
        return setup.kv_dtype
    return "fp8"


def page_bytes(net: object, layer: str, block: int, tp: int, kv_fmt: str, choice: str) -> int:
    """Bytes of one page (``block`` tokens of one layer of kind ``layer``) on one GPU."""
    spec = net.spec
    element = formats.get(kv_fmt, "kv", "KV-cache dtype").element_bytes
    if spec.kv_lora_rank:
        if choice == "fp8_ds_mla":
            return block * FP8_DS_MLA_TOKEN_BYTES
        return int(block * (spec.kv_lora_rank + spec.qk_rope_dim) * element)
    if choice == "fp8_ds_mla":
        raise ServeError(f"--kv-cache-dtype fp8_ds_mla is for latent-attention (MLA) models; {net.name} has none")
    heads = max(net.kv_head_count // tp, 1)  # vLLM replicates KV heads when tp exceeds them
    return int(2 * block * heads * int(net.value(net.head_dim)) * element)


def is_chunked(net: object) -> bool:
    """Whether the table's windowed layers are Llama-4's chunked-local attention (its window is the chunk)."""
    return net.spec.model_type.startswith("llama4")


def layer_groups(net: object, pp: int) -> dict[str, int]:
    """Layers with KV pages on one pipeline stage by kind ('full', 'sliding' or 'chunked', 'conv')."""
    spec = net.spec
    sliding = math.ceil(spec.sliding_layers / pp)
    full = math.ceil((spec.layers - spec.sliding_layers - spec.conv_layers) / pp)
    conv = math.ceil(spec.conv_layers / pp)
    windowed = "chunked" if is_chunked(net) else "sliding"
    return {k: v for k, v in (("full", full), (windowed, sliding), ("conv", conv)) if v}


def group_size(groups: dict[str, int]) -> int:
    """Layers per group: the fewest of any kind, or the most when that is under 1.5× the fewest (kv_cache_planning.py:567-578)."""
    low, high = min(groups.values()), max(groups.values())
    return high if high < low * 1.5 else low


def conv_state_bytes(net: object, tp: int, element: float) -> int:
    """One request's short-conv state on one GPU: conv_dim/tp × (kernel − 1) in the model dtype (mamba_utils.py)."""
    spec = net.spec
    return int(spec.hidden // tp * (spec.conv_kernel - 1) * element)


def hybrid_block_size(block: int, state: int, token_bytes: int) -> int:
    """The attention block vLLM picks so one attention page holds a state page (interface.py _align_hybrid_block_size).

    The alignment is the larger of the block and the backend's smallest kernel block (FlashAttention: multiples
    of 16); a block below the state's size grows to whole alignments.
    """
    align = max(KERNEL_BLOCK, block)
    needed = align * math.ceil(state / (align * token_bytes))
    return max(block, KERNEL_BLOCK * math.ceil(needed / KERNEL_BLOCK)) if needed > block else block


def pages_per_request(kind: str, window: int, max_len: int, in_flight: int, block: int) -> int:
    """Pages one request of ``max_len`` tokens holds in a group of ``kind`` (kv_cache_interface.py)."""
    if kind == "sliding":
        return math.ceil(min(window - 1 + in_flight, max_len) / block) + 1
    if kind == "chunked":
        return math.ceil(min(window + in_flight, max_len) / block)
    if kind == "conv":
        return MAMBA_ALIGN_PAGES
    return math.ceil(max_len / block)


def concurrency_text(value: float) -> str:
    """vLLM's ``%.2fx``."""
    return f"{value:.2f}x"


def log_line(tokens: int, max_len: int, concurrency: float) -> str:
    """The line vLLM 0.34 logs after sizing the cache (kv_cache_utils.update_kv_cache_capacity)."""
    return (f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for {max_len:,} tokens per request: "
            f"{concurrency_text(concurrency)}")


def weight_terms(setup: ServeSetup, element: float) -> list[Term]:
    """The weights on one GPU: stored bytes over tp·pp, the rotary cos/sin cache and the attention layers' scales."""
    net = setup.network
    stored = sum(stored_weights(net, setup.weights).values())
    rope = (net.trained_context or 0) * int(net.value(net.head_dim)) * element
    attention = math.ceil((net.spec.layers - net.spec.conv_layers) / setup.pp)
    out = [_term("weights", f"weights as stored ({setup.weights}), over tp × pp", math.ceil(stored / setup.gpus),
                 note="linear layers, vocab-parallel embedding and head sharded; norms (replicated) split too"),
           _term("rope_cache", "rotary cos/sin cache: max_position × head_dim in the model dtype", int(rope),
                 note="rotary_embedding/base.py; counted in vLLM's 'Model loading took'")]
    return out + [_term("attention_scales", "KV/q/prob quantization scales: 4 fp32 scalars per attention layer",
                        attention * ATTENTION_SCALES * FP32,
                        note="model_executor/layers/attention/attention.py set_default_quant_scales: registered "
                             "buffers of every attention layer, whatever --kv-cache-dtype; model state, not KV pages")]


def mlp_stage(setup: ServeSetup, tokens: int, element: float) -> int:
    """The forward stage: gate·up (2·ffn) and its activation (ffn) over ``tokens`` tokens, per tp rank."""
    spec = setup.network.spec
    ffn = (spec.expert_ffn or spec.ffn or 4 * spec.hidden) * max(spec.top_k, 1)
    return int(tokens * 3 * ffn * element / setup.tp)


def sm_count(setup: ServeSetup) -> int:
    """The GPU's streaming multiprocessors (``SMS``), or an H100's for a GPU given by size only."""
    return SMS.get(setup.budget.gpu.name, DEFAULT_SMS)


def triton_rows(rows: int, sms: int) -> int:
    """Rows of the cached Triton top-k/top-p buffer: min(next_pow2(min(SMs, R)), SMs) (topk_topp_triton.py:1688-1694)."""
    programs = min(sms, rows)
    return min(1 << (programs - 1).bit_length(), sms)


def sampler_terms(setup: ServeSetup, tokens: int, seqs: int, element: float, flashinfer: bool = True) -> list[Term]:
    """The sampler warm-up's live tensors at its peak: vLLM 0.34 with FlashInfer's sampler or its Triton path."""
    spec = setup.network.spec
    rows = min(seqs, tokens)  # model_runner.py:911, one sampled row per dummy request
    entries = rows * spec.vocab
    runner = "vllm/v1/worker/gpu/model_runner.py"
    terms = [_term("activation_hidden", "hidden states of the T profiled tokens, kept through the sampler",
                   int(tokens * spec.hidden * element), note=f"{runner}:1035, freed at :1102"),
             _term("sampler_logits", "logits of R = min(T, max_num_seqs) rows in the model dtype",
                   int(entries * element), note=f"{runner}:1044 (compute_logits on the sampled rows only)")]
    if setup.tp > 1:
        terms.append(_term("sampler_logits_shard", "each rank's vocab shard of the logits before the all-gather",
                           int(entries * element / setup.tp), note="model_executor/layers/logits_processor.py:130"))
    terms.append(_term("sampler_fp32", "warm-up pass: the logits copied to fp32 for the sampling parameters",
                       entries * FP32, note="vllm/v1/worker/gpu/sample/sampler.py:239"))
    if flashinfer:
        return terms + [
            _term("sampler_topk_mask", "FlashInfer top-k/top-p sampling: fp32 top-k-masked logits", entries * FP32,
                  FLASHINFER, "flashinfer/sampling.py:1889, called from v1/sample/ops/topk_topp_sampler.py:316"),
            _term("sampler_probs", "FlashInfer top-k/top-p sampling: fp32 softmax probabilities", entries * FP32,
                  FLASHINFER, "flashinfer/sampling.py:1890")]
    buffer = triton_rows(rows, sm_count(setup)) * spec.vocab * FP32
    partials = rows * math.ceil(spec.vocab / GUMBEL_BLOCK) * (INT64 + FP32)
    return terms + [
        _term("sampler_triton_buffer", "Triton top-k/top-p (masks the fp32 logits in place): its cached fp32 "
              "buffer of one vocab row per program, min(SMs, R) programs", buffer,
              note="v1/sample/ops/topk_topp_triton.py:1688-1695 (kept in a cache after the warm-up)"),
        _term("sampler_gumbel_partials", "Gumbel draw: per-block argmax (int64) and maximum (fp32), R × ⌈V/1024⌉",
              partials, note="v1/worker/gpu/sample/gumbel.py:441-445; noise drawn in the kernel, no probabilities")]


def sampler_state_term(setup: ServeSetup, seqs: int) -> Term:
    """The penalties' persistent ``output_bin_counts``: int32 max_num_seqs × vocab, made after the weights' count."""
    return _term("sampler_bin_counts", "sampler state: penalties' output-token counts, int32 max_num_seqs × vocab",
                 seqs * setup.network.spec.vocab * INT32,
                 note="v1/worker/gpu/sample/penalties.py:48, made in load_model (model_runner.py:513) after "
                      "'Model loading took' is measured (:440): non-KV memory, not activations")


def activation_terms(setup: ServeSetup, tokens: int, seqs: int, element: float,
                     flashinfer: bool = True) -> tuple[list[Term], int]:
    """The profile run's peak: the larger of the MLP stage and the sampler warm-up stage (see the docstring)."""
    mlp = mlp_stage(setup, tokens, element)
    sampler = sampler_terms(setup, tokens, seqs, element, flashinfer)
    sampler_peak = sum(t_bytes(t) for t in sampler)
    if mlp > sampler_peak:
        return [_term("activation_mlp", "profile run: MLP intermediate (gate·up and act) of T tokens", mlp,
                      note="approximation: the forward stage from the model's shapes")], mlp
    return sampler, sampler_peak


def sampler_note(flashinfer: bool, setup: ServeSetup) -> str:
    """Which sampler path the warm-up follows, and the SM count it assumed for Triton's buffer."""
    if flashinfer:
        return ("the sampler warm-up is FlashInfer's top-k/top-p path (VLLM_USE_FLASHINFER_SAMPLER, on by default "
                "on CUDA GPUs of more than 16 SMs); --no-flashinfer-sampler: vLLM's Triton path, lighter")
    sms = sm_count(setup)
    assumed = "" if setup.budget.gpu.name in SMS else " (a GPU given by size: an H100's count assumed)"
    return (f"the sampler warm-up is vLLM 0.34's Triton top-k/top-p and Gumbel path (--no-flashinfer-sampler); "
            f"its buffer has one vocab row per program, {sms} SMs{assumed}")


def _walk_grid(limit: int, step) -> list[int]:
    """Sizes 1 … ``limit``, each the next multiple of the largest power of two not above step(size) (compilation.py)."""
    grid, size = [], 1
    while size < limit:
        grid.append(size)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, step(size)))))
        size = (size // stride + 1) * stride
    return [*grid, limit] if limit else []


def shared_capture_sizes(seqs: int, tokens: int) -> list[int]:
    """The shared capture sizes in tokens off SM100 (config/vllm.py _set_cudagraph_sizes, one token a decode)."""
    ceiling = min(min(2 * seqs, GRAPH_CEILING), tokens)
    sizes = [i for i in (1, 2, 4) if i <= ceiling] + list(range(8, min(ceiling + 1, 256), 8))
    sizes += list(range(256, ceiling + 1, 16)) if ceiling >= 256 else []
    sizes += [n for n in (tokens, seqs) if n <= ceiling]
    return sorted(set(sizes))


def capture_plan(setup: ServeSetup, seqs: int, tokens: int) -> tuple[int, int]:
    """(tokens of the largest graph, FULL decode graphs) vLLM 0.34 captures by default (FULL_AND_PIECEWISE)."""
    if setup.budget.gpu.name in SM100:
        prefill = min(SM100_PREFILL_CEILING, tokens)
        grid = _walk_grid(seqs, lambda n: 0.65 * n ** (2 / 3))  # decode_cudagraph_capture_grid
        limit = min(seqs, prefill)
        decode = {min(n, limit) for n in grid[:next((i for i, n in enumerate(grid) if n >= limit), len(grid)) + 1]}
        return max(prefill, max(decode, default=0)), len(decode)
    shared = shared_capture_sizes(seqs, tokens)
    return shared[-1], len({min(s, seqs) for s in shared})


def cuda_graph_terms(setup: ServeSetup, seqs: int, tokens: int, element: float) -> list[Term]:
    """The graph pool (the largest graph's intermediates) and each further FULL graph's floor, per GPU."""
    net, tp = setup.network, setup.tp
    spec = net.spec
    largest, full = capture_plan(setup, seqs, tokens)
    head = int(net.value(net.head_dim))
    q_heads = max(spec.heads // tp, 1)
    kv_heads = max(net.kv_head_count // tp, 1)
    where = "approximation of cudagraph_utils.py profile_cudagraph_memory's measured pool, from the shapes"
    t = f"T = {largest} tokens, the largest graph"
    terms = [
        _term("cuda_graph_residual", f"CUDA graph pool: residual stream, {t} × hidden",
              int(largest * spec.hidden * element), note=where),
        _term("cuda_graph_qkv", "CUDA graph pool: qkv projection, T × (q + 2·kv heads)/tp × head_dim",
              int(largest * (q_heads + 2 * kv_heads) * head * element), note=where),
        _term("cuda_graph_attention", "CUDA graph pool: attention output, T × q heads/tp × head_dim",
              int(largest * q_heads * head * element), note=where),
        _term("cuda_graph_mlp", "CUDA graph pool: MLP gate·up and activation, T × 3·ffn/tp",
              mlp_stage(setup, largest, element), note=where),
        _term("cuda_graph_per_graph", f"CUDA graphs: {full} FULL decode graphs, 1 MiB each after the first",
              (full - 1) * MIN_PER_GRAPH_BYTES if full else 0,
              note="cudagraph_utils.py _extrapolate_full_graph_memory: (N − 1) · max(second sample, "
                   "_MIN_PER_GRAPH_BYTES); the first FULL graph fits in the pool the PIECEWISE graphs hold")]
    return terms


def non_torch_bytes(tp: int) -> int:
    """Non-torch growth during the profile run: llm-d's measurement at tp 1 and 2 (tp > 2 reuses tp 2's)."""
    return int(NON_TORCH_MEASURED[1 if tp == 1 else 2] * GIB)


def serve(setup: ServeSetup) -> ServePlan:
    """vLLM's answer on ``setup``: blocks, the log line, concurrency and the refusal vLLM gives."""
    net, budget = setup.network, setup.budget
    total = setup.engine_budget.bytes  # CUDA's total where the catalogue has it (torch.accelerator.get_memory_info)
    given = setup.option("gpu_memory_utilization")
    fraction = DEFAULT_UTILIZATION
    if given is not None:
        fraction = sympy.Rational(as_fraction(given, "--gpu-memory-utilization"))
    requested = int(sympy.ceiling(total * fraction))
    default_tokens, default_seqs = scheduler_defaults(total)
    max_len = int(setup.option("max_model_len", net.trained_context or 0))
    if max_len < 1:
        raise ServeError(f"{net.name} names no context length: give --max-model-len")
    seqs = int(setup.option("max_num_seqs", default_seqs))
    tokens = int(setup.option("max_num_batched_tokens", default_tokens))
    block = int(setup.option("block_size", DEFAULT_BLOCK_SIZE))
    choice = str(setup.option("kv_cache_dtype", "auto"))
    eager = bool(setup.option("enforce_eager", False))
    flashinfer = bool(setup.option("flashinfer_sampler", True))  # envs.py:937, on unless set to 0
    element = formats.get(setup.weights, "weights", "weight format").element_bytes
    element = element if not formats.get(setup.weights).quantised else 2  # activations in bf16
    kv_fmt = kv_format(setup, choice)
    terms = weight_terms(setup, element)
    weight_count = len(terms)
    act_terms, activation = activation_terms(setup, tokens, seqs, element, flashinfer)
    terms += act_terms
    state = sampler_state_term(setup, seqs)
    terms.append(state)
    non_torch = non_torch_bytes(setup.tp)
    terms.append(_term("non_torch", "non-torch growth during the profile run (measured default)", non_torch, MEASURED,
                       "measured by llm-d on an H100 (vLLM release not stated): 0.13 GiB at tp 1 (vLLM PR #12126: "
                       "0.16), 0.55 GiB at tp 2; NCCL and custom all-reduce buffers are made before 0.34's start "
                       "snapshot (gpu_worker.py:502-549), outside the budget; tp > 2 reuses tp 2's (an assumption)"))
    graphs = [] if eager else cuda_graph_terms(setup, seqs, tokens, element)
    terms += graphs
    cuda_graph = sum(t_bytes(t) for t in graphs)
    weights = sum(t_bytes(t) for t in terms[:weight_count])
    non_kv = weights + activation + t_bytes(state) + non_torch + cuda_graph
    available = int(requested - non_kv)
    groups = layer_groups(net, setup.pp)
    size = group_size(groups)
    slots = {k: math.ceil(v / size) for k, v in groups.items()}  # groups per kind, padding included
    notes = [graph_note(eager, cuda_graph),
             sampler_note(flashinfer, setup),
             f"non-torch memory is llm-d's H100 measurement ({non_torch / GIB:.2f} GiB"
             f"{', tp 2 figure reused for tp > 2' if setup.tp > 2 else ''}), not a rule read from vLLM"]
    notes += [n for n in (total_note(setup),) if n]
    if "conv" in groups:
        if net.spec.kv_lora_rank:
            raise ServeError(f"{net.name}: convolution layers with latent attention have no vLLM page rule here")
        conv_state = conv_state_bytes(net, setup.tp, element)
        block = hybrid_block_size(block, conv_state, page_bytes(net, "full", 1, setup.tp, kv_fmt, choice))
        notes.append(f"conv state {conv_state:,} bytes a request per layer, padded to the attention page "
                     f"(block {block} tokens); {MAMBA_ALIGN_PAGES} state pages a request per conv group "
                     f"(prefix caching's 'align' mode)")
    page = page_bytes(net, "full", block, setup.tp, kv_fmt, choice)
    if available <= 0:
        raise ServeError(f"vLLM would stop: no memory for the KV cache ({available / GIB:.2f} GiB available after "
                         f"weights, activations, non-torch memory and CUDA graphs); raise --gpu-memory-utilization or --tp")
    blocks = available // (page * size)
    window = net.spec.window
    per_request = sum(n * pages_per_request(k, window, max_len, tokens, block) for k, n in slots.items())
    concurrency = blocks / per_request
    kv_tokens = int(concurrency * max_len)
    if concurrency < 1:
        raise ServeError(f"vLLM would stop: max_model_len {max_len:,} is larger than the maximum number of tokens "
                         f"that can be stored in KV cache ({kv_tokens:,}); raise --gpu-memory-utilization or "
                         f"lower --max-model-len")
    kv_bytes = blocks * page * size  # groups alias one allocation (kv_cache_planning.py:685, 0.34)
    seq = setup.seq or max_len
    fit = blocks // sum(n * pages_per_request(k, window, seq, tokens, block) for k, n in slots.items())
    context = _max_context(setup.batch, blocks, slots, window, tokens, block, max_len)
    figures = {"num_gpu_blocks": blocks, "activation_peak_bytes": activation, "non_torch_bytes": non_torch,
               "cuda_graph_bytes": cuda_graph, "requested_memory_bytes": requested, "available_kv_cache_bytes": available,
               "block_size": block, "max_model_len": max_len, "max_num_seqs": seqs,
               "max_num_batched_tokens": tokens, "gpu_memory_utilization": float(fraction),
               "max_concurrency_at_max_model_len": concurrency_text(concurrency), "flashinfer_sampler": flashinfer,
               "sampler_state_bytes": t_bytes(state), **total_figures(setup)}
    return ServePlan(NAME, VERSION, net.name, budget.gpu.name, setup.gpus, setup.weights, setup.weights_from, kv_fmt,
                     requested, weights, kv_bytes, kv_tokens, non_kv, seq, fit, setup.batch, context,
                     terms=tuple(terms), figures=figures,
                     log_lines=(log_line(kv_tokens, max_len, concurrency),), notes=tuple(notes))


def graph_note(eager: bool, cuda_graph: int) -> str:
    """What the CUDA-graph figure is: none with --enforce-eager, else an approximation of vLLM's measurement."""
    if eager:
        return "--enforce-eager: no CUDA graphs, cuda_graph_bytes 0"
    return (f"CUDA graphs: {cuda_graph / GIB:.2f} GiB subtracted from the KV memory as vLLM 0.34 does; vLLM measures "
            f"it with a throwaway capture, approximated here from the largest graph's intermediates and 1 MiB for "
            f"each further FULL graph (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 or --enforce-eager: none)")


def t_bytes(term: Term) -> int:
    """A term's whole bytes."""
    return int(sympy.ceiling(term.expr))


def _max_context(batch: int | None, blocks: int, slots: dict[str, int], window: int, tokens: int, block: int,
                 max_len: int) -> int | None:
    """The longest context (≤ max_model_len, whole pages) that ``batch`` requests hold at once."""
    if batch is None:
        return None
    best, low, high = 0, 1, max_len
    while low <= high:
        mid = (low + high) // 2
        need = batch * sum(n * pages_per_request(k, window, mid, tokens, block) for k, n in slots.items())
        if need <= blocks:
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best
