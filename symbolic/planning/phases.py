"""A plan as phases: what is alive all the time (resident) and what each phase adds at its peak moment.

A training step is three phases, a serving step two:

- ``forward``: the tensors saved for backward, as they pile up to the end of the forward pass;
- ``backward``: at its start everything saved is still alive, plus the transient gradients of the
  loss (the fp32 logits gradient); parameter gradients appear as activations are released, so
  the other end of the backward pass is covered by the optimizer phase;
- ``optimizer``: every gradient and the optimizer's temporaries (the inputs the caller holds);
- ``prefill`` and ``decode`` (serving): weights and KV cache are resident; the prefill holds the
  working set of the largest prompt chunk, a decode step that of one token per sequence.

The peak is the largest phase: the resident terms plus one term whose expression is
``peak_pytorch.maximum`` of the phases' extras (an unevaluated ``Max`` where no phase always
dominates), so a plan's formula still evaluates, differentiates where smooth, solves and typesets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sympy

from ..core.term import Term
from ..library import peak_pytorch as pypeak

TRAIN_PHASES = ("forward", "backward", "optimizer")
INFER_PHASES = ("prefill", "decode")
PEAK_KEY = "peak"


@dataclass(frozen=True)
class Layout:
    """The resident terms and, per phase, the terms alive at that phase's peak besides them."""

    resident: tuple[Term, ...]
    phases: Mapping[str, tuple[Term, ...]]
    pools: Mapping[str, sympy.Expr] = field(default_factory=dict)  # per phase: side-stream pools beyond its tensors

    def components(self) -> list[Term]:
        """Every distinct term once (resident first, then each phase's in order of first appearance)."""
        seen: dict[str, Term] = {t.key: t for t in self.resident}
        for terms in self.phases.values():
            for term in terms:
                seen.setdefault(term.key, term)
        return list(seen.values())

    def extra(self, phase: str) -> sympy.Expr:
        """The bytes ``phase`` adds to the resident terms."""
        return sympy.Add(*(t.expr for t in self.phases[phase]))

    def where(self) -> dict[str, tuple[str, ...]]:
        """For each component's key, the phases it is alive in ("resident": every one)."""
        out: dict[str, tuple[str, ...]] = {t.key: ("resident",) for t in self.resident}
        for phase, terms in self.phases.items():
            for term in terms:
                if out.get(term.key) != ("resident",):
                    out[term.key] = (*out.get(term.key, ()), phase)
        return out

    def peak_term(self) -> Term:
        """One term: the largest phase's extras, ``maximum`` over the phases (see the module docstring)."""
        names = tuple(self.phases)
        expr = pypeak.maximum(*(self.extra(p) for p in names))
        return Term(PEAK_KEY, f"the largest phase's live tensors besides the resident ones: max({' | '.join(names)})",
                    expr, "bytes", "project", "phases",
                    "; ".join(f"{p}: {', '.join(t.key for t in self.phases[p]) or 'nothing'}" for p in names)
                    + ". The step's peak is the resident terms plus the largest of these.")

    def with_resident(self, terms: Sequence[Term]) -> Layout:
        """This layout with ``terms`` added to the resident ones (runtime terms, custom terms)."""
        return Layout((*self.resident, *terms), dict(self.phases), dict(self.pools))


def lead(phase_bytes: Mapping[str, int]) -> tuple[str, int]:
    """(the phase that sets the peak, its lead in bytes over the runner-up; 0 with one phase)."""
    ranked = sorted(phase_bytes.items(), key=lambda kv: -kv[1])
    first = ranked[0]
    return first[0], (first[1] - ranked[1][1]) if len(ranked) > 1 else 0
