"""Which phase of a step sets a report's peak: phase totals, each term's phases, the runtime's share.

A planner's formula is the resident terms plus one ``peak`` term (the largest phase's extras,
``symbolic.planning.phases``). ``Phases`` keeps the plan's layout so that the report can say which
phase sets the peak, by how much it leads, and which phase each term is alive in. Values are
exact, from the report's own evaluation: resident terms are the scenario formula's terms other
than ``peak`` (custom terms included), so the peak phase's total equals the report's total.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sympy

from ..core.term import Term
from ..math.algebra import at_point
from ..math.formula import Evaluation
from ..planning.phases import PEAK_KEY, lead

RESIDENT = "resident"


@dataclass(frozen=True)
class Phases:
    """A plan's phases as the report needs them: what each adds, and the runtime's terms and setting."""

    extras: Mapping[str, tuple[Term, ...]]
    runtime_keys: tuple[str, ...]
    runtime_on: bool  # the regime's ``runtime`` option (True: the CUDA runtime's own memory is counted)
    runtime_note: str = ""  # the planner's note on the runtime (why none is counted on device cpu, say)
    runtime_notes: tuple[str, ...] = ()  # every plan note about the runtime (the summary's runtime line replaces them)


@dataclass(frozen=True)
class PeakView:
    """The report's phases evaluated at its point: exact bytes of terms and phases, the peak and its lead."""

    resident: tuple[tuple[Term, sympy.Rational], ...]
    extras: dict[str, tuple[tuple[Term, sympy.Rational], ...]]
    totals: dict[str, sympy.Rational]  # resident + that phase's extras, per phase
    resident_total: sympy.Rational
    phase: str  # the phase that sets the peak
    lead: sympy.Rational  # bytes it exceeds the runner-up by (0 with one phase)
    runner_up: str | None
    runtime: sympy.Rational  # the runtime terms' bytes (0 when left out)
    runtime_keys: tuple[str, ...]  # those of them in the plan

    def where(self) -> dict[str, tuple[str, ...]]:
        """Each component's key -> the phases it is alive in (``("resident",)``: all of them)."""
        out: dict[str, tuple[str, ...]] = {t.key: (RESIDENT,) for t, _ in self.resident}
        for phase, items in self.extras.items():
            for term, _ in items:
                if out.get(term.key) != (RESIDENT,):
                    out[term.key] = (*out.get(term.key, ()), phase)
        return out

    def components(self) -> list[tuple[Term, sympy.Rational]]:
        """Every term once: the resident ones, then each phase's in order of first appearance."""
        seen: dict[str, tuple[Term, sympy.Rational]] = {t.key: (t, v) for t, v in self.resident}
        for items in self.extras.values():
            for term, value in items:
                seen.setdefault(term.key, (term, value))
        return list(seen.values())

    def at_peak(self) -> list[tuple[Term, sympy.Rational]]:
        """The terms alive in the peak phase (they sum to the total)."""
        return [*self.resident, *self.extras[self.phase]]


def from_plan(plan: Any) -> Phases | None:
    """The phases of a ``planning.Plan`` (None for a plan without a layout)."""
    layout = getattr(plan, "layout", None)
    if layout is None or not layout.phases:
        return None
    from ..planning.build import runtime_keys

    try:
        from ..library.runtime import RUNTIME_NOTE
    except ImportError:
        RUNTIME_NOTE = ""  # noqa: N806
    about = tuple(n for n in plan.notes if n.startswith("runtime:") or (RUNTIME_NOTE and n == RUNTIME_NOTE))
    note = next((n for n in about if n.startswith("runtime:")), "")
    return Phases(dict(layout.phases), tuple(runtime_keys()), bool(plan.regime.runtime), note, about)


def view(phases: Phases, ev: Evaluation) -> PeakView:
    """The phases at the evaluation's point (exact), resident terms taken from the evaluation itself."""
    resident = tuple((t, v) for t, v in ev.terms if t.key != PEAK_KEY)
    point = {**ev.values, **ev.derived}
    extras = {name: tuple((t, at_point(t.expr, point)) for t in terms)
              for name, terms in phases.extras.items()}
    resident_total = sympy.Add(*(v for _, v in resident))
    totals = {name: resident_total + sympy.Add(*(v for _, v in items)) for name, items in extras.items()}
    phase, ahead = lead(totals)
    ranked = [name for name, _ in sorted(totals.items(), key=lambda kv: -kv[1]) if name != phase]
    keys = tuple(t.key for t, _ in resident if t.key in phases.runtime_keys)
    runtime = sympy.Add(*(v for t, v in resident if t.key in phases.runtime_keys))
    return PeakView(resident, extras, totals, resident_total, phase, sympy.Rational(ahead),
                    ranked[0] if ranked else None, sympy.Rational(runtime), keys)


def sentences(v: PeakView, phases: Phases, total: sympy.Rational, fmt: Callable[[Any], str],
              pct: Callable[[float], str], num: Callable[[Any], str]) -> list[str]:
    """The summary's lines on the peak: the phase that sets it, its lead, each phase, the runtime's share.

    ``fmt`` formats bytes (IEC), ``pct`` a fraction and ``num`` a byte count, as the rest of the report does.
    """
    listed = ", ".join(f"{name} {fmt(value)}" for name, value in v.totals.items())
    if v.runner_up is None:
        out = [f"Peak: the {v.phase} phase, {fmt(v.totals[v.phase])} (its only phase)."]
    elif v.lead == 0:
        out = [f"Peak: the {v.phase} and {v.runner_up} phases tie at {fmt(v.totals[v.phase])} "
               f"(phases: {listed})."]
    else:
        out = [f"Peak: the {v.phase} phase sets it, {fmt(v.lead)} ({num(v.lead)} bytes) more than "
               f"{v.runner_up} (phases: {listed}; each is the {fmt(v.resident_total)} of resident terms plus what "
               "it adds)."]
    if v.runtime:
        share = float(v.runtime / total) if total else 0.0
        out.append(f"Runtime: {fmt(v.runtime)} ({pct(share)} of the total) is the CUDA runtime's own memory "
                   f"({', '.join(v.runtime_keys)}); runtime = false in the [regime] (--no-runtime on the command line) "
                   "leaves it out.")
    elif not phases.runtime_on:
        out.append("Runtime: left out (runtime = false in the [regime], or --no-runtime): the total has no CUDA "
                   "context, cuBLAS workspaces or allocator slack, which a CUDA process also holds.")
    elif phases.runtime_note:
        note = phases.runtime_note.removeprefix("runtime:").strip()
        out.append(f"Runtime: {note[:1].upper() + note[1:]}" + ("" if note.endswith(".") else "."))
    return out
