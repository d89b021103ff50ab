"""Every number the two source articles print, recomputed from the library's formulas.

Each check names the formula and inputs that produce the article's figure; the engine's
value is computed, never copied, so the errata show up as disagreements with the correct
figure beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from . import get

SCALES = {"": 1, "B": 1, "MiB": 2**20, "MB": 10**6, "GB": 10**9, "M": 10**6}


@dataclass(frozen=True)
class SeedCheck:
    """One printed figure: what the article says and which formula should give it."""

    source: str
    label: str
    key: str
    values: dict[str, int]
    article: str  # as printed, e.g. "33,574,912" or "128"
    unit: str = ""  # display unit of the printed figure, a key of SCALES
    approx: bool = False  # the article writes ≈: compare at its printed precision
    term: str | None = None  # compare one term of the formula instead of the total
    note: str = ""
    shown_unit: str = field(default="")  # how the article labels the unit, when it mislabels it

    def engine_value(self) -> Fraction:
        """The formula's value in the figure's unit (exact)."""
        formula = get(self.key)
        evaluation = formula.evaluate(formula.restrict(self.values))
        if self.term is None:
            value = evaluation.total
        else:
            value = next(v for t, v in evaluation.terms if t.key == self.term)
        return Fraction(int(value.p), int(value.q)) / SCALES[self.unit]

    def article_value(self) -> Decimal:
        return Decimal(self.article.replace(",", ""))

    def engine_text(self) -> str:
        """The engine's value printed like the article's figure."""
        value = self.engine_value()
        if not self.approx and value.denominator == 1:
            return f"{value.numerator:,}"
        return _round_like(value, self.article_value())

    def agrees(self) -> bool:
        """Exact figures must be equal; ≈ figures equal at the article's printed precision."""
        if self.approx:
            return Decimal(_round_like(self.engine_value(), self.article_value()).replace(",", "")) == self.article_value()
        return self.engine_value() == Fraction(self.article_value())

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source, "label": self.label, "formula": self.key, "term": self.term,
            "values": self.values, "unit": self.shown_unit or self.unit, "approx": self.approx,
            "article": self.article, "engine": self.engine_text(), "agrees": self.agrees(), "note": self.note,
        }


def _round_like(value: Fraction, like: Decimal) -> str:
    """``value`` rounded to the same significant digits as ``like`` (≈ 128 keeps three)."""
    digits = len(like.as_tuple().digits)
    exact = Decimal(value.numerator) / Decimal(value.denominator)
    if exact == 0:
        return "0"
    shift = digits - exact.adjusted() - 1
    quantum = Decimal(1).scaleb(-shift)
    rounded = exact.quantize(quantum, rounding=ROUND_HALF_UP) if shift > 0 else \
        (exact / quantum).quantize(Decimal(1), rounding=ROUND_HALF_UP) * quantum
    return f"{rounded:,.{max(shift, 0)}f}"


_A = {"d_in": 2048, "d_h": 4096, "n_out": 10}
_A4 = {**_A, "b": 4}
_A_RUN = {**_A4, "B": 128}
_B = {"H": 768, "L": 12, "V": 50000, "d_ff": 3072}

CHECKS: tuple[SeedCheck, ...] = (
    SeedCheck("article-A", "parameters (weights of the four matrices)", "mlp.params", _A, "33,574,912",
              note="The article writes the first matrix as 2024 × 4096 (erratum 1)."),
    SeedCheck("article-A", "P = parameters × 4 bytes", "mlp.weights", _A4, "134,299,648", "B"),
    SeedCheck("article-A", "P ≈ 128 MB", "mlp.weights", _A4, "128", "MiB", approx=True, shown_unit="MiB (printed 'MB')"),
    SeedCheck("article-A", "G = P", "mlp.grads", _A4, "134,299,648", "B"),
    SeedCheck("article-A", "O = 2P (AdamW) ≈ 256 MB", "mlp.optimizer.adamw", _A4, "256", "MiB", approx=True,
              shown_unit="MiB (printed 'MB')"),
    SeedCheck("article-A", "activation elements per sample: 3·4096 + 2·2048 + 10", "mlp.activations.elements",
              {**_A, "B": 1}, "16349", note="Arithmetic slip (erratum 3): the sum is 16,394."),
    SeedCheck("article-A", "activation elements at B = 128", "mlp.activations.elements", {**_A, "B": 128},
              "2,098,432"),
    SeedCheck("article-A", "A ≈ 8 MB at B = 128", "mlp.activations", _A_RUN, "8", "MiB", approx=True,
              shown_unit="MiB (printed 'MB')"),
    SeedCheck("article-A", "total P + G + O + A ≈ 520 MB", "mlp.total", _A_RUN, "520", "MiB", approx=True,
              shown_unit="MiB (printed 'MB')"),
    SeedCheck("article-B", "embedding V·d", "llm.params.embedding", _B, "38,400,000"),
    SeedCheck("article-B", "attention 4d²", "llm.params.attention", _B, "2,359,296"),
    SeedCheck("article-B", "feed-forward 2·d·d_ff + d + d_ff", "llm.params.ffn", _B, "4,719,616",
              note="Erratum 1: 2·768·3072 + 768 + 3072 = 4,722,432."),
    SeedCheck("article-B", "layer norm 2d", "llm.params.layernorm", _B, "1,536"),
    SeedCheck("article-B", "per layer", "llm.params.layer", _B, "7,081,984", note="Follows from erratum 1."),
    SeedCheck("article-B", "12 layers", "llm.params", _B, "84,983,808", term="layers", note="Follows from erratum 1."),
    SeedCheck("article-B", "model parameters", "llm.params", _B, "123,383,808", note="Follows from erratum 1."),
    SeedCheck("article-B", "model parameters ≈ 123 M", "llm.params", _B, "123", "M", approx=True),
    SeedCheck("article-B", "model memory, fp32 (× 4 B)", "llm.weights", {**_B, "b": 4}, "493,535,232", "B",
              note="Right product of the wrong count (erratum 1)."),
    SeedCheck("article-B", "model memory, fp32 ≈ 494 MB", "llm.weights", {**_B, "b": 4}, "494", "MB", approx=True),
    SeedCheck("article-B", "model memory, fp16 (× 2 B)", "llm.weights", {**_B, "b": 2}, "246,767,616", "B",
              note="Right product of the wrong count (erratum 1)."),
    SeedCheck("article-B", "model memory, fp16 ≈ 247 MB", "llm.weights", {**_B, "b": 2}, "247", "MB", approx=True),
    SeedCheck("article-B", "inference working memory 2 × 494 MB", "llm.rule.inference", {**_B, "b": 4}, "988", "MB",
              approx=True, note="The article doubles the rounded 494 MB; 2 × 493,670,400 B is 987 MB."),
    SeedCheck("article-B", "inference working memory ≈ 1 GB", "llm.rule.inference", {**_B, "b": 4}, "1", "GB",
              approx=True),
    SeedCheck("article-B", "training memory 4 × 494 MB", "llm.rule.training", {**_B, "b": 4}, "1,976", "MB",
              approx=True, note="The article multiplies the rounded 494 MB; 4 × 493,670,400 B is 1,975 MB."),
    SeedCheck("article-B", "training memory ≈ 2 GB", "llm.rule.training", {**_B, "b": 4}, "2", "GB", approx=True),
)


def report() -> list[dict[str, object]]:
    """Every check as plain data (article figure, engine figure, agreement)."""
    return [c.as_dict() for c in CHECKS]
