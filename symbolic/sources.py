"""Where the formulas come from: one citation per source id, used by terms and reports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """A citable work."""

    id: str
    citation: str
    url: str = ""


SOURCES: dict[str, Source] = {}


def register(id: str, citation: str, url: str = "") -> Source:
    """Add a source to the table; ids are unique."""
    if id in SOURCES:
        raise ValueError(f"source {id!r} already registered")
    SOURCES[id] = Source(id, citation, url)
    return SOURCES[id]


def source(id: str) -> Source:
    """The source with this id."""
    return SOURCES[id]


register("article-A", "Misraj AI, \"Calculating the memory of deep neural networks\" (Arabic), 12 Nov 2025")
register("article-B", "Misraj AI, \"Parameters and memory of transformer LLMs\" (Arabic), 2025")
register("korthikanti2022", "V. Korthikanti et al., \"Reducing Activation Recomputation in Large Transformer Models\", 2022",
         "https://arxiv.org/abs/2205.05198")
register("zero2020", "S. Rajbhandari et al., \"ZeRO: Memory Optimizations Toward Training Trillion Parameter Models\", SC 2020",
         "https://arxiv.org/abs/1910.02054")
register("megatron", "NVIDIA Megatron-LM, megatron/training/theoretical_memory_usage.py and docs")
register("deepspeed", "DeepSpeed, estimate_zero2/zero3_model_states_mem_needs")
register("pytorch", "PyTorch nn.Linear / nn.LayerNorm parameter shapes")
register("project", "symbolic: derived in this project from the definitions cited beside it")
