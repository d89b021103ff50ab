"""vLLM's memory rules (V1 engine): the budget, the profile run, non-torch memory, KV pages, CUDA graphs."""

from __future__ import annotations

from .flags import Flag
from .result import ServePlan
from .setup import ServeError, ServeSetup

NAME = "vllm"
VERSION = "vLLM (rules not yet read)"
FLAGS: tuple[Flag, ...] = (
    Flag("--gpu-memory-utilization", "gpu_memory_utilization", "fraction",
         "the fraction of the GPU's total memory vLLM may use (vLLM's default 0.9)", "F"),
    Flag("--max-model-len", "max_model_len", "whole", "the longest request in tokens (default: the model's context)",
         "TOKENS"),
    Flag("--max-num-seqs", "max_num_seqs", "whole", "requests in one batch at most (vLLM's default 256)", "N"),
    Flag("--max-num-batched-tokens", "max_num_batched_tokens", "whole",
         "tokens in one step at most: the profile run's size (vLLM's default 8192 with chunked prefill)", "TOKENS"),
    Flag("--block-size", "block_size", "whole", "tokens per KV page (vLLM's default 16)", "TOKENS"),
    Flag("--kv-cache-dtype", "kv_cache_dtype", "choice", "the KV cache's element type, as vLLM names it",
         "DTYPE", ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")),
    Flag("--enforce-eager", "enforce_eager", "switch", "no CUDA graphs (vLLM's default: graphs captured)"),
)


def serve(setup: ServeSetup) -> ServePlan:
    """vLLM's answer on ``setup``."""
    raise ServeError("the vllm engine is not modelled yet")
