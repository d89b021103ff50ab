"""The one place where reports reach the real-model modules: architectures, GPU catalogue, planning.

Everything else in ``symbolic.report`` works on a ``Scenario``; this module turns a
specification into one, using ``symbolic.networks.transformer`` (model configs and presets), the GPU
catalogue and the memory planner when the specification asks for a real model.
"""

from __future__ import annotations

from typing import Any

import sympy

from ..core import symbols as symtab
from ..core.errors import UserError
from ..core.symbols import H, L, V, d_ff
from ..math import userterms as custom
from ..text import printing
from . import articles
from .scenario import Gpu, Scenario
from .spec import ModelRef, ReportSpec, ReportSpecError


def scenario_for(spec: ReportSpec) -> Scenario:
    """The scenario a specification describes (article networks or a real model)."""
    gpus = resolve_gpus(spec)
    if spec.formulas == "article-a":
        scenario = articles.article_a_scenario(spec, gpus)
    elif spec.formulas == "article-b" and spec.model.is_article:
        scenario = articles.article_b_scenario(spec, gpus)
    elif spec.formulas == "article-b":
        model = load_model(spec)
        dims = {H: model.hidden, L: model.layers, V: model.vocab, d_ff: model.resolved_ffn}
        rows = [("model", f"{model.name} ({model.model_type})"),
                ("hidden size H", f"{model.hidden:,}"), ("layers L", f"{model.layers:,}"),
                ("vocabulary V", f"{model.vocab:,}"), ("feed-forward size d_ff", f"{model.resolved_ffn:,}"),
                ("exact parameters (real architecture)", f"{model.param_count():,}")]
        scenario = articles.article_b_scenario(spec, gpus, dims, f"{model.name} with article B's formulas", rows,
                                               heads=model.heads)
        scenario.caveats.append(
            f"Article B's parameter formula ignores biases, position embeddings and other parts: it counts "
            f"{int(scenario.evaluate().derived.get(_n(), 0)):,} parameters where {model.name} has "
            f"{model.param_count():,}.")
    else:
        scenario = library_scenario(spec, gpus)
    if spec.terms:
        add_terms(scenario, spec)
    if spec.sweep.batch:
        scenario.sweep_batch = spec.sweep.batch
    if spec.sweep.seq:
        scenario.sweep_seq = spec.sweep.seq
    return scenario


def add_terms(scenario: Scenario, spec: ReportSpec) -> None:
    """Append the specification's custom terms to the scenario's total (symbolic.math.userterms)."""
    where = f"{spec.path}: " if spec.path else ""
    try:
        formula = custom.with_terms(scenario.formula, spec.terms)
    except custom.CustomTermError as err:
        raise ReportSpecError(f"{where}terms: {err}") from None
    added = formula.terms[len(scenario.formula.terms):]
    known = set(scenario.given) | set(formula.definitions)
    for term in added:
        for symbol in symtab.ordered(term.expr.free_symbols - known):
            if symbol.name not in spec.values:
                raise ReportSpecError(f"{where}values: give a value for {symbol.name}, which term {term.key!r} uses "
                                f"(e.g. [values] {symbol.name} = 8, or --set {symbol.name}=8)")
            scenario.given[symbol] = spec.values[symbol.name]
            scenario.value_notes[symbol] = "the specification's [values]"
            known.add(symbol)
    scenario.formula = formula
    if scenario.fewest is not None:
        scenario.fewest = None
        scenario.caveats.append("The fewest-GPUs column is left out: the planner that answers it does not know "
                                "the custom terms.")
    names = ", ".join(f"{t.key} = {printing.text(t.expr)}" for t in added)
    scenario.caveats.append(f"User-defined terms added to the total: {names}.")


def _n() -> sympy.Symbol:
    from ..core.symbols import N

    return N


def load_model(spec: ReportSpec) -> Any:
    """The ``ModelSpec`` of a preset name or config path (symbolic.networks.transformer)."""
    from ..networks import transformer as architectures

    ref: ModelRef = spec.model
    try:
        return architectures.load(str(ref.path) if ref.path else ref.name)
    except (UserError, OSError) as err:
        message = getattr(err, "message", None) or (err.args[0] if err.args else str(err))
        where = f"{spec.path}: " if spec.path else ""
        raise ReportSpecError(f"{where}model: {str(message).splitlines()[0]}") from None


def resolve_gpus(spec: ReportSpec) -> list[Gpu]:
    """Budgets of the GPUs to compare: inline sizes as given, names from the GPU catalogue, each with its
    fraction and reservations (``catalogs.budget``); the whole GPU when the specification gives neither."""
    out = []
    for ref in spec.gpus:
        budget = ref.budget(spec.path)
        source = "the specification" if ref.memory is not None else (
            f"{budget.gpu.title}; {budget.gpu.basis}: {budget.gpu.source}")
        out.append(Gpu(budget.label, budget.bytes, source, budget.lines()))
    return out


def library_scenario(spec: ReportSpec, gpus: list[Gpu]) -> Scenario:
    """A real model under the memory planner's regime (precision, optimizer, activations, parallelism)."""
    from . import planned

    return planned.scenario(spec, gpus)
