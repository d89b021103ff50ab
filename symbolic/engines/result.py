"""What a serving answer holds: per-GPU bytes (weights, KV pool, the rest), tokens, concurrency, the engine's own figures.

A ``ServePlan`` is plain data built by an engine module: the named terms it summed (``Term``s
evaluated at ``values``), the headline numbers every engine gives (the JSON fields users' scripts
read), the engine's own figures under the names its logs and flags use (``figures``), the log lines
it would print, and notes saying what was assumed. Display (``_repr_html_``, ``to_frame``) goes
through ``text.display``; nothing here computes a number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import sympy

from ..core.term import Term
from ..core.units import format_bytes
from ..text import display

# the fields every engine's --json has, in the order printed
HEADLINE = ("engine", "model", "gpu", "gpus", "budget_bytes", "weights_bytes", "kv_cache_bytes", "kv_cache_tokens",
            "non_kv_bytes", "seq", "max_concurrency", "batch", "max_context")


@dataclass(frozen=True)
class ServePlan:
    """One engine's answer for one model on one GPU type: per GPU unless a field says otherwise.

    ``terms`` are the engine's named, sourced terms per GPU (their bytes at ``values``): every byte
    counted in the budget, and those outside it (``outside``: keys of terms the engine holds beyond
    its budget, such as vLLM's CUDA graphs). ``kv_cache_tokens`` is what the pool holds (one replica);
    ``max_concurrency`` is how many requests of ``seq`` tokens run at once (None when ``seq`` was not
    asked); ``max_context`` the longest context for ``batch`` requests at once.
    """

    engine: str
    engine_version: str  # the release and commit whose rules are modelled
    model: str
    gpu: str
    gpus: int
    weights: str
    weights_from: str
    kv_dtype: str
    budget_bytes: int
    weights_bytes: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    non_kv_bytes: int
    seq: int | None = None
    max_concurrency: int | float | None = None
    batch: int | None = None
    max_context: int | None = None
    terms: tuple[Term, ...] = ()
    values: Mapping[sympy.Symbol, object] = field(default_factory=dict)
    outside: tuple[str, ...] = ()
    figures: Mapping[str, object] = field(default_factory=dict)
    log_lines: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        """Whether one request fits: of ``seq`` tokens when it was asked (concurrency ≥ 1), else any pool at all.

        An engine whose buffers are fixed (llama.cpp) says itself whether they fit (``figures["fits"]``).
        """
        if self.figures.get("fits") is False:
            return False
        if self.max_concurrency is not None and self.seq is not None:
            return self.max_concurrency >= 1
        return self.kv_cache_tokens > 0

    def term_bytes(self) -> dict[str, int]:
        """Each term's whole bytes at ``values`` (rounded up)."""
        return {t.key: int(sympy.ceiling(sympy.sympify(t.expr).subs(self.values))) for t in self.terms}

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON: the headline fields, the engine's figures, terms, log lines and notes."""
        data: dict[str, object] = {k: getattr(self, k) for k in HEADLINE}
        data.update(fits=self.fits, engine_version=self.engine_version, weights=self.weights, weights_from=self.weights_from,
                    kv_dtype=self.kv_dtype)
        data.update(self.figures)
        found = self.term_bytes()
        data["terms"] = [{"key": t.key, "title": t.title, "bytes": found[t.key], "source": t.source,
                          "in_budget": t.key not in self.outside} for t in self.terms]
        data["log_lines"] = list(self.log_lines)
        data["notes"] = list(self.notes)
        return data

    def __repr__(self) -> str:  # display methods: symbolic.text.display renders
        asked = f"{self.max_concurrency} × {self.seq:,} tokens" if self.fits and self.seq is not None else ""
        return display.short("ServePlan", f"{self.model} on {self.gpus} × {self.gpu} with {self.engine}",
                             f"KV pool {format_bytes(self.kv_cache_bytes)} ({self.kv_cache_tokens:,} tokens)",
                             asked if self.fits else "nothing fits")

    def _repr_html_(self) -> str:
        return display.html(display.serve_table(self))

    def to_frame(self):  # noqa: ANN201 (pandas is optional)
        """Each term in whole bytes as a pandas DataFrame (needs pandas)."""
        return display.frame(display.serve_table(self))
