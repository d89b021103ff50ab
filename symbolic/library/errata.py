"""Where the source articles are wrong, stated once so that reports, CLI and tests agree."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Erratum:
    """One mistake or gap in a source, and what the project does instead."""

    source: str
    number: int
    title: str
    text: str


ERRATA: list[Erratum] = [
    Erratum("article-A", 1, "first matrix written 2024 × 4096",
            "The layer is 2048 wide; the stated total 33,574,912 is the 2048 figure (2024 would give 33,476,608)."),
    Erratum("article-A", 2, "element size said to be 2 bytes, multiplied by 4",
            "It calls each element '2 bytes ... float32' and then multiplies by 4. The element size is the "
            "parameter b here: fp32 4, fp16/bf16 2, fp8/int8 1, int4 1/2."),
    Erratum("article-A", 3, "128 · (16349)",
            "3·4096 + 2·2048 + 10 = 16,394, not 16,349; its product 2,098,432 is the right one."),
    Erratum("article-A", 4, "biases ignored",
            "The four nn.Linear layers also have 4096 + 4096 + 2048 + 10 = 10,250 biases: 33,585,162 parameters in all "
            "(formula mlp.params_with_bias)."),
    Erratum("article-A", 5, "activation count is a rough model",
            "PyTorch also keeps the input x, pre-activation outputs and the softmax output for backward; the measured "
            "figure differs."),
    Erratum("article-B", 1, "feed-forward count",
            "2·768·3072 + 768 + 3072 = 4,722,432, not 4,719,616; so a layer has 7,084,800 parameters, twelve layers "
            "85,017,600 and the model 123,417,600, not 123,383,808."),
    Erratum("article-B", 2, "output head, positions, biases and final norm left out",
            "The output projection counts as zero (weight tying) without saying so; learned position embeddings, "
            "attention biases and the final layer norm are left out. The real GPT-2 small (V = 50,257, 1,024 positions) "
            "has 124,439,808 parameters."),
    Erratum("article-B", 3, "attention matrix without heads",
            "4BSS has no head count; per-head scores scale with the number of heads a (Korthikanti et al. 2022: "
            "5·a·S²·B bytes per layer), and FlashAttention-style kernels store none."),
    Erratum("article-B", 4, "rules of thumb vs 16N",
            "The 2× (inference) and 4× (training) rules of thumb disagree with its own 16N steady-state formula; "
            "both are shown side by side."),
    Erratum("article-B", 5, "listed activations do not add up to 14E",
            "Its per-layer components (layer norm 4E; QKV 2E, attention output 2E; first linear 2E, GELU 8E, second "
            "linear 2E) sum to 20E with one layer norm and 24E with the two a layer has, not the 14E of its M_act. "
            "llm.activations keeps the article's 14E; llm.activations.listed adds up the listed parts."),
]


def errata_for(source: str) -> list[Erratum]:
    """The errata of one source, in order."""
    return [e for e in ERRATA if e.source == source]
