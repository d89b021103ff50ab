"""llama.cpp's memory rules (llama-server; also Ollama and LM Studio): per-device buffers and layer offload."""

from __future__ import annotations

from .flags import Flag
from .result import ServePlan
from .setup import ServeError, ServeSetup

NAME = "llamacpp"
VERSION = "llama.cpp (rules not yet read)"
_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
FLAGS: tuple[Flag, ...] = (
    Flag("--ctx-size", "ctx_size", "count", "context size in tokens, all sequences together (0: the model's)",
         "TOKENS"),
    Flag("--parallel", "parallel", "whole", "sequences decoded at once (llama-server's -np)", "N"),
    Flag("--n-gpu-layers", "n_gpu_layers", "count", "layers on the GPU(s); 0 keeps everything on the CPU", "N"),
    Flag("--tensor-split", "tensor_split", "list", "the share of layers on each GPU, e.g. 3,1", "F,F,..."),
    Flag("--n-cpu-moe", "n_cpu_moe", "count", "keep the MoE experts of the first N layers on the CPU", "N"),
    Flag("--swa-full", "swa_full", "switch", "a full-size cache for sliding-window layers (llama-server: off)"),
    Flag("--cache-type-k", "cache_type_k", "choice", "the K cache's type", "TYPE", _CACHE_TYPES),
    Flag("--cache-type-v", "cache_type_v", "choice", "the V cache's type (quantized needs flash attention)", "TYPE",
         _CACHE_TYPES),
    Flag("--batch-size", "batch_size", "whole", "logical batch in tokens (llama.cpp's -b, default 2048)", "N"),
    Flag("--ubatch-size", "ubatch_size", "whole", "physical batch in tokens (llama.cpp's -ub, default 512)", "N"),
    Flag("--flash-attn", "flash_attn", "choice", "flash attention (llama.cpp's default auto)", "on|off|auto",
         ("on", "off", "auto")),
)


def serve(setup: ServeSetup) -> ServePlan:
    """llama.cpp's answer on ``setup``."""
    raise ServeError("the llamacpp engine is not modelled yet")
