"""Every serving engine's own flags, once, as data: what ``symbolic serve``'s parser, a report's ``[serve]`` table
and ``engines.serve`` check against, without importing the engines' rules (the command line builds its
parser for every command, so this module imports nothing but ``flags.Flag``).

Each entry is named as the engine's own CLI names it; the engine modules read their defaults from the
constants here and list ``FLAGS = TABLES[NAME]``.
"""

from __future__ import annotations

from .flags import Flag

DEFAULT_PREFILL_CHUNK = 8192  # the torch engine's default chunk (engines/pytorch.py says why)
SGLANG_KV_CHOICES = ("auto", "fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16")
LLAMACPP_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
FIT_TARGETS = ("gpu-layers", "context", "file-type")

TABLES: dict[str, tuple[Flag, ...]] = {
    "torch": (
    Flag("--prefill-chunk", "prefill_chunk", "count",
         f"tokens one step prefills at most (default {DEFAULT_PREFILL_CHUNK}, as vLLM's max_num_batched_tokens; "
         "0: whole prompts at once)", "TOKENS"),
),
    "vllm": (
    Flag("--gpu-memory-utilization", "gpu_memory_utilization", "fraction",
         "the fraction of the GPU's total memory vLLM may use (vLLM 0.34's default 0.92)", "F"),
    Flag("--max-model-len", "max_model_len", "whole", "the longest request in tokens (default: the model's context)",
         "TOKENS"),
    Flag("--max-num-seqs", "max_num_seqs", "whole", "requests in one batch at most (vLLM's default 1024 on GPUs "
         "of 70 GiB and more, else 256)", "N"),
    Flag("--max-num-batched-tokens", "max_num_batched_tokens", "whole",
         "tokens in one step at most: the profile run's size (vLLM's default 16384, 8192 or 2048 by GPU memory)",
         "TOKENS"),
    Flag("--block-size", "block_size", "whole", "tokens per KV page (vLLM 0.34's default 64)", "TOKENS"),
    Flag("--kv-cache-dtype", "kv_cache_dtype", "choice", "the KV cache's element type, as vLLM names it",
         "DTYPE", ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")),
    Flag("--enforce-eager", "enforce_eager", "switch", "no CUDA graphs (vLLM's default: graphs captured)"),
    Flag("--flashinfer-sampler", "flashinfer_sampler", "switch",
         "VLLM_USE_FLASHINFER_SAMPLER, vLLM's environment variable: FlashInfer's top-k/top-p sampler (0.34's "
         "default: on); off, vLLM's Triton top-k/top-p masking and Gumbel draw"),
),
    "sglang": (
    Flag("--mem-fraction-static", "mem_fraction_static", "fraction",
         "the fraction of GPU memory for weights and the KV pool (default: SGLang's own rule from the GPU)", "F"),
    Flag("--chunked-prefill-size", "chunked_prefill_size", "whole", "tokens per prefill chunk (SGLang's default "
         "by GPU)", "TOKENS"),
    Flag("--context-length", "context_length", "whole", "the longest request (default: the model's context)",
         "TOKENS"),
    Flag("--kv-cache-dtype", "kv_cache_dtype", "choice", "the KV cache's element type, as SGLang names it",
         "DTYPE", SGLANG_KV_CHOICES),
    Flag("--cuda-graph-max-bs", "cuda_graph_max_bs", "whole", "the largest batch captured in a CUDA graph", "N"),
    Flag("--max-running-requests", "max_running_requests", "whole",
         "requests running at once at most (SGLang's default from the pool: 2048 to 4096, at most tokens / 2)", "N"),
    Flag("--page-size", "page_size", "whole", "tokens per KV page (SGLang's default 1)", "TOKENS"),
),
    "llamacpp": (
    Flag("--ctx-size", "ctx_size", "count", "context size in tokens, all sequences together (0: the model's)",
         "TOKENS"),
    Flag("--parallel", "parallel", "whole", "sequences decoded at once (llama-server's -np; default auto: 4, "
         "unified)", "N"),
    Flag("--n-gpu-layers", "n_gpu_layers", "count", "layers on the GPU(s); 0 keeps everything on the CPU", "N"),
    Flag("--tensor-split", "tensor_split", "list", "the share of layers on each GPU, e.g. 3,1", "F,F,..."),
    Flag("--n-cpu-moe", "n_cpu_moe", "count", "keep the MoE experts of the first N layers on the CPU", "N"),
    Flag("--swa-full", "swa_full", "switch", "a full-size cache for sliding-window layers (llama-server: off)"),
    Flag("--cache-type-k", "cache_type_k", "choice", "the K cache's type", "TYPE", LLAMACPP_CACHE_TYPES),
    Flag("--cache-type-v", "cache_type_v", "choice", "the V cache's type (quantized needs flash attention)", "TYPE",
         LLAMACPP_CACHE_TYPES),
    Flag("--batch-size", "batch_size", "whole", "logical batch in tokens (llama.cpp's -b, default 2048)", "N"),
    Flag("--ubatch-size", "ubatch_size", "whole", "physical batch in tokens (llama.cpp's -ub, default 512)", "N"),
    Flag("--flash-attn", "flash_attn", "choice", "flash attention (llama.cpp's default auto)", "on|off|auto",
         ("on", "off", "auto")),
    Flag("--kv-unified", "kv_unified", "switch", "one KV stream shared by all sequences (llama-server: on unless --parallel is given)"),
    Flag("--fit", "fit", "choice", "find the most GPU layers, the longest context or the best file type that fits "
         "the GPU(s)", "WHAT", FIT_TARGETS),
),
}
