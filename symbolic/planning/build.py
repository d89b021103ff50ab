"""Building a plan: one composed ``Formula`` of per-GPU memory and the values to evaluate it.

Training, per GPU (the most loaded one: first pipeline stage):

- model states (``library.precision``), sharded by ZeRO (``library.parallel``) over N_d, with
  the parameters per GPU N_gpu = (N − embeddings − head)/(p·t) + embeddings/t (+ head/t when
  p = 1), and N the model's own parameter formula;
- ``zero3_gathered``: with ZeRO-3, the largest weight matrix gathered whole (DeepSpeed);
- ``activations``: L/p layers × min(m, p) micro-batches in flight (1F1B: L layers' worth when
  m ≥ p), × (1 + (p − 1)/(p·v)) for the interleaved schedule (Narayanan et al. 2021), each
  layer as in ``library.activations`` for the micro-batch B;
- ``recompute_buffer``: with full recompute, one layer's activations rebuilt during its backward;
- ``inputs``: int64 token ids 8sb and the embedding dropout mask sbh, per micro-batch in flight
  (Megatron's ``compute_activation_memory``);
- ``logits`` (p = 1 only: with pipelines the last stage holds them, with far fewer activations);
- with ``activations="pytorch"``: ``activations``, ``inputs``, ``logits`` and ``loss_gradients``
  as PyTorch's autograd keeps them (``planning.pytorch``; one device, no recompute).

Inference, per GPU: weights (quantised layers plus 16-bit embeddings and head), ``kv_cache``,
``activations`` (the prefill working set of one layer) and ``logits`` of the last position.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

import sympy

from .. import display, printing
from ..algebra import Solution
from ..catalogs import GPU
from ..custom import CustomTerm, with_terms
from ..formula import Evaluation, Formula, to_plain
from ..library import activations as acts
from ..library import inference as infer
from ..library import parallel as par
from ..library import precision as prec
from ..library import registry
from ..plan_options import PlanOptionError
from ..symbols import B, H, L, N, N_gpu, S, UnknownSymbolError, V, a, e_p, k_exp, n_d, n_mb, p, t, v_pp
from ..term import Term
from ..units import format_bytes
from . import pytorch
from .model import ModelShape
from .regime import Regime


@dataclass(frozen=True)
class Fit:
    """Whether a plan fits one GPU, and by how much."""

    gpu: GPU
    total: int
    fits: bool
    headroom: int  # capacity − total; negative when it does not fit

    def as_dict(self) -> dict[str, object]:
        return {"gpu": self.gpu.as_dict(), "fits": self.fits, "headroom": self.headroom, "headroom_bytes": self.headroom,
                "headroom_human": format_bytes(self.headroom)}

    def __repr__(self) -> str:  # display methods: symbolic.display renders
        return display.short("Fit", self.gpu.name, f"fits={self.fits}", f"headroom {format_bytes(self.headroom)}")

    def _repr_html_(self) -> str:
        return display.html(display.fit_table(self))

    def to_frame(self):  # noqa: ANN201 (pandas is optional)
        return display.frame(display.fit_table(self))


@dataclass
class Plan:
    """Per-GPU memory of one model under one regime: a ``Formula`` and its values.

    ``formula`` is an ordinary Formula (differentiate, solve, render it); ``values`` maps every
    input symbol's name to its number; ``host`` is host memory per GPU process (offload only);
    ``saved`` is the saved-for-backward model behind ``activations="pytorch"`` (else None).
    """

    model: ModelShape
    regime: Regime
    formula: Formula
    values: dict[str, object]
    host: Formula | None = None
    notes: list[str] = field(default_factory=list)
    host_values: dict[str, object] = field(default_factory=dict)
    saved: pytorch.SavedActivations | None = None
    _evaluation: Evaluation | None = field(default=None, repr=False)

    def __repr__(self) -> str:  # display methods: symbolic.display renders
        return display.short("Plan", f"{self.model.name} {self.regime.mode}", f"{format_bytes(self.total)} per GPU",
                             f"{len(self.formula.terms)} terms")

    def _repr_html_(self) -> str:
        return display.html(display.plan_table(self))

    def to_frame(self):  # noqa: ANN201 (pandas is optional)
        """Each term in whole bytes as a pandas DataFrame (needs pandas)."""
        return display.frame(display.plan_table(self))

    def evaluate(self) -> Evaluation:
        """Exact per-term values and total (cached)."""
        if self._evaluation is None:
            self._evaluation = self.formula.evaluate(self.values)
        return self._evaluation

    @property
    def total(self) -> int:
        """Per-GPU bytes: the sum of the terms, each rounded up to a whole byte.

        A sharded term (N/n_d) can be fractional; rounding each up keeps the table's rows
        adding up to its total, and errs by at most one byte a term on the safe side.
        """
        return sum(self.terms().values())

    def terms(self) -> dict[str, int]:
        """Each term in whole bytes (rounded up), in formula order."""
        return {term.key: _ceil(value) for term, value in self.evaluate().terms}

    def host_terms(self) -> dict[str, int]:
        """Host-memory terms (offload) in whole bytes; empty without offload."""
        if self.host is None:
            return {}
        return {term.key: _ceil(value) for term, value in self.host.evaluate(self.host_values).terms}

    @property
    def host_total(self) -> int:
        return sum(self.host_terms().values())

    def fit(self, gpu: GPU) -> Fit:
        """Does the plan fit ``gpu``? Headroom = capacity − total."""
        total = self.total
        return Fit(gpu, total, total <= gpu.bytes, gpu.bytes - total)

    def solve(self, symbol: str, budget: object) -> Solution:
        """Largest whole value of ``symbol`` (e.g. "B", "S") with the total within ``budget`` bytes."""
        given = {k: v for k, v in self.values.items() if k != symbol}
        return self.formula.solve(symbol, budget, given)

    def with_terms(self, terms: Iterable[CustomTerm], values: Mapping[str, object] | None = None) -> Plan:
        """This plan with user-defined terms added to the per-GPU total.

        ``values`` gives numbers for the symbols the terms introduce; a value for a symbol the
        plan already sets, or one no term uses, is an error (change the plan's options instead).
        """
        formula = with_terms(self.formula, terms)
        extra = dict(values or {})
        missing = {s.name for s in formula.inputs} - set(self.values) - set(extra) - {
            s.name for s in formula.definitions}
        if missing:
            raise PlanOptionError(f"values missing for {', '.join(sorted(missing))} (give them with --set NAME=VALUE)")
        inputs = {s.name for s in formula.inputs}
        for name in extra:
            if name in self.values:
                raise PlanOptionError(f"{name} is set by the plan's options ({name}={self.values[name]}); "
                                 "--set is for symbols that custom terms introduce")
            if name not in inputs:
                raise UnknownSymbolError(name, sorted(inputs - set(self.values)), "the custom terms")
        return Plan(self.model, self.regime, formula, {**self.values, **extra}, self.host, list(self.notes),
                    dict(self.host_values), self.saved)

    @property
    def cache_bytes(self) -> int:
        """Everything the KV cache holds on this GPU: the sum of the cache terms of every attention kind."""
        return sum(v for k, v in self.terms().items() if k in infer.CACHE_KEYS)

    @property
    def activation_bytes(self) -> int | None:
        """With ``activations="pytorch"``: the bytes saved for backward (activations + inputs + logits)."""
        return None if self.saved is None else self.saved.total(self.values)

    def as_dict(self, gpu: GPU | None = None, formulas: bool = False) -> dict[str, object]:
        """Plain data for JSON and reports: totals, terms, choices, values; fit with ``gpu``."""
        evaluation = self.evaluate()
        data: dict[str, object] = {
            "model": self.model.name, "mode": self.regime.mode, "options": self.regime.options(),
            "defaults": list(self.regime.defaulted), "gpus_in_job": self.regime.gpus,
            "total_bytes": self.total, "total_human": format_bytes(self.total),
            "terms": self.terms(),
            "titles": {t.key: t.title for t in self.formula.terms},
            "values": {k: to_plain(sympy.Rational(v)) if not isinstance(v, str) else v for k, v in self.values.items()},
            "derived": {s.name: to_plain(v) for s, v in evaluation.derived.items()},
            "notes": list(self.notes),
        }
        if not self.regime.train:
            data["cache_bytes"] = self.cache_bytes
            data["cache_terms"] = {k: v for k, v in self.terms().items() if k in infer.CACHE_KEYS}
        if self.saved is not None:
            data["activation_bytes"] = self.activation_bytes
            data["activations_pytorch"] = self.saved.as_dict(self.values)
        if self.host is not None:
            data["host_bytes"] = self.host_total
            data["host_terms"] = self.host_terms()
        if formulas:
            data["formula"] = {
                "text": str(self.formula), "latex": self.formula.latex(equation=True),
                "terms": {t.key: printing.text(t.expr) for t in self.formula.terms},
                "definitions": {s.name: str(d) for s, d in _all_definitions(self.formula).items()},
            }
        if gpu is not None:
            data.update(self.fit(gpu).as_dict())
        return data


def _ceil(value: sympy.Expr) -> int:
    number = Fraction(int(value.p), int(value.q)) if value.is_Rational else Fraction(str(sympy.N(value, 30)))
    return math.ceil(number)


def _all_definitions(formula: Formula) -> dict[sympy.Symbol, Formula]:
    out: dict[sympy.Symbol, Formula] = {}
    for symbol, definition in formula.definitions.items():
        out[symbol] = definition
        out.update(_all_definitions(definition))
    return out


# --- building ------------------------------------------------------------------------------------
def build(model: ModelShape, regime: Regime) -> Plan:
    """The plan of ``model`` under an already resolved ``regime``."""
    values: dict[str, object] = {**model.numbers, "B": regime.batch, "S": regime.seq}
    tp_s: sympy.Expr | int = t if regime.tp > 1 else 1
    pp_s: sympy.Expr | int = p if regime.pp > 1 else 1
    if regime.tp > 1:
        values["t"] = regime.tp
    if regime.pp > 1:
        values["p"] = regime.pp
    if regime.ep > 1:
        values["e_p"] = regime.ep
    notes = list(regime.notes)
    saved = pytorch.saved(model, regime) if regime.train and regime.activations == "pytorch" else None
    if saved is not None:
        notes += pytorch.notes(regime, saved)
    if regime.train:
        terms, definitions, host = _train_terms(model, regime, tp_s, pp_s, values, notes, saved)
        title = f"Training memory per GPU of {model.name}"
    else:
        terms, definitions, host = _infer_terms(model, regime, tp_s, pp_s, values, notes)
        title = f"Inference memory per GPU of {model.name}"
    formula = Formula(f"plan.{model.name}.{regime.mode}", title, terms, source="project", name="M_gpu",
                      definitions=definitions, note="; ".join(notes))
    host_formula = None
    if host:
        host_formula = Formula(f"plan.{model.name}.host", f"Host memory per GPU process of {model.name} (offload)",
                               host, source="ren2021", name="M_host", definitions=definitions)
    host_values = host_formula.restrict(values) if host_formula is not None else {}
    plan = Plan(model, regime, formula, formula.restrict(values), host_formula, notes, host_values, saved)
    formula.example = {k: v for k, v in plan.values.items() if isinstance(v, (int, str))}
    return plan


def _params(model: ModelShape, regime: Regime, tp_s: sympy.Expr | int,
            pp_s: sympy.Expr | int) -> tuple[sympy.Expr, dict[sympy.Symbol, Formula]]:
    """The parameter count on this GPU and the definitions behind it (N, and N_gpu when split)."""
    if regime.tp == 1 and regime.pp == 1 and regime.ep == 1:
        return N, {N: model.params}
    if regime.ep == 1:
        shard = par.params_per_gpu(model.first_stage, model.head, regime.pp, N, tp_s, pp_s, {N: model.params})
        return N_gpu, {N_gpu: shard}
    base = par.params_per_gpu(model.first_stage, model.head, regime.pp, N - model.experts, tp_s, pp_s,
                              {N: model.params})
    shard = Formula(base.key, base.title, (*base.terms, _experts_term(model, pp_s)), source=base.source,
                    name="N_gpu", definitions={N: model.params},
                    note=base.note + " Routed experts: ÷ e_p·p (expert parallelism), replicated over the other ranks.")
    return N_gpu, {N_gpu: shard}


def _experts_term(model: ModelShape, pp_s: sympy.Expr | int) -> Term:
    """The routed experts one GPU holds under expert parallelism: all of them ÷ e_p (and ÷ p by stage)."""
    return Term("experts", "routed experts: n_exp/e_p of them per GPU (expert parallelism)", model.experts / (e_p * pp_s),
                "params", "project", "", "Expert parallelism (GShard, Lepikhin et al. 2020; DeepSpeed-MoE) places "
                "n_exp/e_p whole experts on each GPU; the router, shared experts, attention and embeddings stay "
                "replicated (or split by t and p as without experts). Every expert stays resident somewhere: the "
                "job's total is all n_exp experts.")


def _train_terms(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, pp_s: sympy.Expr | int,
                 values: dict[str, object], notes: list[str],
                 saved: pytorch.SavedActivations | None = None) -> tuple[list[Term], dict, list[Term]]:
    params, definitions = _params(model, r, tp_s, pp_s)
    factored = model.factored_entries() / (tp_s * pp_s) if r.optimizer == "adafactor" else None
    if factored is not None and (r.tp > 1 or r.pp > 1):
        notes.append("Adafactor's row and column accumulators are divided by t·p like the parameters (an "
                     "approximation: a column-split matrix keeps all its rows)")
    states = prec.state_terms(r.precision, r.optimizer, r.grads, params=params, factored_entries=factored)
    if r.zero:
        values["n_d"] = r.dp
    states = par.shard_terms(states, r.zero, n_d)
    host: list[Term] = []
    if r.offload:
        states, host = par.split_offload(states)
        host.append(par.host_buffer_term(host))
    terms = list(states)
    if r.zero == 3 and r.dp > 1:  # with one data-parallel rank nothing is partitioned or gathered
        name, size = model.largest_matrix()
        regime_prec = prec.get(r.precision)
        grad_bytes = 4 if r.grads == "fp32" else 2
        terms.append(par.gathered_layer_term(size / tp_s, regime_prec.weight_bytes, grad_bytes, name))
    if saved is not None:  # activations="pytorch": one device, no recompute (regime.resolve checks)
        return terms + pytorch.terms(saved), definitions, host
    if r.activations == "article-b":
        terms += _article_b_terms()
        article = registry.get("llm.activations")
        definitions = {**definitions, **article.definitions}
        return terms, definitions, host
    act_bytes = prec.get(r.precision).activation_bytes
    variant = acts.LayerVariant(flash=r.flash, gated=model.gated, dropout=r.dropout, moe=model.moe,
                                act_bytes=act_bytes)
    sp = r.sequence_parallel and r.tp > 1
    widths = model.widths()
    per = acts.per_layer(variant, r.recompute, tp_s, sp).xreplace(widths)
    in_flight = min(r.microbatches, r.pp)
    layers: sympy.Expr = L
    if in_flight < r.pp:  # fewer micro-batches than stages: m of them in flight
        layers = L * n_mb / pp_s
        values["n_mb"] = r.microbatches
    how = "L layers"
    if r.pp > 1:
        how = f"L/p layers × {in_flight} micro-batches in flight (1F1B)"
        how += " = L layers' worth" if in_flight == r.pp else ""
        if r.interleave > 1 and r.microbatches >= r.pp:
            layers = layers * (1 + (p - 1) / (p * v_pp))
            values["v_pp"] = r.interleave
            how += " × (1 + (p − 1)/(p·v)) interleaved"
    terms.append(Term("activations", f"activations: {how} × one layer ({variant.name}, recompute {r.recompute})",
                      layers * per, "bytes", "korthikanti2022", "§4.1, §4.2.3 (pipeline)",
                      f"One layer keeps {printing.text(per)} bytes per micro-batch; see act.layer.* for its tensors."))
    if r.recompute == "full":
        rebuilt = acts.per_layer(variant, "none", tp_s, sp).xreplace(widths)
        terms.append(Term("recompute_buffer", "one layer's activations, rebuilt during its backward", rebuilt, "bytes",
                          "project", "", "Full recompute stores only layer inputs, but the layer being "
                          "back-propagated holds all its activations for a moment."))
    hidden_tp = tp_s if sp else 1
    inputs = 8 * S * B + (S * B * H / hidden_tp if r.dropout else 0)
    terms.append(Term("inputs", "token ids (int64)" + (" and embedding dropout mask" if r.dropout else "")
                      + (f", × {in_flight} micro-batches in flight" if r.pp > 1 else ""),
                      inputs * in_flight, "bytes", "megatron", "compute_activation_memory"))
    if r.pp == 1:
        parts = acts.logits_terms(r.logits, act_bytes, tp_s, sp)
        expr = sympy.Add(*(part.expr for part in parts))
        detail = "; ".join(f"{part.title} {printing.text(part.expr)}" for part in parts)
        source = "korthikanti2022" if r.logits == "megatron" else "huggingface"
        terms.append(Term("logits", f"output layer and loss ({r.logits} accounting)", expr, "bytes", source,
                          "", detail))
    else:
        notes.append("the last pipeline stage holds the logits instead; this plan is the first stage, which holds "
                     "L layers' worth of activations")
    return terms, definitions, host


def _article_b_terms() -> list[Term]:
    article = registry.get("llm.activations")
    peak = registry.get("llm.peak")
    return [article.term("layers").replace(key="activations"), article.term("logits"),
            peak.term("backward_extra").replace(key="logits_grad")]


def _infer_terms(model: ModelShape, r: Regime, tp_s: sympy.Expr | int, pp_s: sympy.Expr | int,
                 values: dict[str, object], notes: list[str]) -> tuple[list[Term], dict, list[Term]]:
    head_here = model.head if r.pp == 1 else 0
    if r.ep > 1:
        quantised = (N - model.experts - model.first_stage - model.head) / (pp_s * tp_s) + model.experts / (e_p * pp_s)
        notes.append(f"ep {r.ep}: each GPU holds {model.numbers.get('n_exp', 0) // r.ep} of the "
                     f"{model.numbers.get('n_exp', 0)} routed experts of every MoE layer; the rest is as without ep")
    else:
        quantised = (N - model.first_stage - model.head) / (pp_s * tp_s)
    kept = (model.first_stage + head_here) / tp_s
    terms = infer.weight_terms(r.weights, quantised, kept)
    for kv in infer.cache_terms(model.cache_kinds, tp_s, infer.kv_bytes(r.kv_dtype), r.kv_dtype, pp_s):
        terms.append(kv.replace(expr=kv.expr.xreplace(model.widths())))
    act = 4 if r.weights == "fp32" else 2
    mlp = (3 if model.gated else 2) * model.ffn * (k_exp if model.moe else 1) / tp_s
    work = act * S * B * (2 * H + mlp)
    if not r.flash:
        work += act * a * S**2 * B / tp_s
    terms.append(Term("activations", "prefill working set of one layer" + ("" if r.flash else " (with s² scores)"),
                      work, "bytes", "project", "",
                      "Residual stream, norm output and MLP intermediates of one layer for B×S prompt tokens; "
                      "layers run one after another, so only one layer's tensors are alive. Decode steps need far "
                      "less. An estimate, not from a paper."))
    terms.append(Term("logits", "fp32 logits of the last position", 4 * B * V / tp_s, "bytes", "huggingface", "",
                      "Generation keeps the logits of the last position only."))
    if r.pp > 1:
        notes.append("pipeline stages hold L/p layers each; this plan is the first stage (embeddings, no head)")
    return terms, {N: model.params}, []
