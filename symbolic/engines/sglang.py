"""SGLang's memory rules: mem_fraction_static, the token pool after the weights, chunked prefill."""

from __future__ import annotations

from .flags import Flag
from .result import ServePlan
from .setup import ServeError, ServeSetup

NAME = "sglang"
VERSION = "SGLang (rules not yet read)"
FLAGS: tuple[Flag, ...] = (
    Flag("--mem-fraction-static", "mem_fraction_static", "fraction",
         "the fraction of GPU memory for weights and the KV pool (default: SGLang's own rule from the GPU)", "F"),
    Flag("--chunked-prefill-size", "chunked_prefill_size", "whole", "tokens per prefill chunk (SGLang's default "
         "by GPU)", "TOKENS"),
    Flag("--context-length", "context_length", "whole", "the longest request (default: the model's context)",
         "TOKENS"),
    Flag("--kv-cache-dtype", "kv_cache_dtype", "choice", "the KV cache's element type, as vLLM names it",
         "DTYPE", ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")),
    Flag("--cuda-graph-max-bs", "cuda_graph_max_bs", "whole", "the largest batch captured in a CUDA graph", "N"),
)


def serve(setup: ServeSetup) -> ServePlan:
    """SGLang's answer on ``setup``."""
    raise ServeError("the sglang engine is not modelled yet")
