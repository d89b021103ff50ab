"""Scenarios from the memory planner: a real model (preset or config.json) under a regime.

``symbolic.planning`` builds the one per-GPU ``Formula`` and its values; this module adds what a
report compares it with, each computed by the planner or the library, never re-derived here:
the fewest GPUs of each kind (``planning.fit_gpus``), the model-state accountings of the ZeRO
paper, Megatron and DeepSpeed (``states.*`` formulas), the activation formulas (article B,
Korthikanti et al. with and without FlashAttention and recompute: alternative plans), weight
and KV-cache dtypes for serving, and the rules of thumb (``llm.rule.*``, ``infer.rule.eleuther``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import sympy

from .. import formats, library, planning
from ..catalogs import GPU
from ..core import symbols as symtab
from ..core import values as vals
from ..core.errors import UserError
from ..core.symbols import B, N, S, b
from ..library import inference as infer
from ..library import precision as prec
from ..math.formula import Formula
from ..text import printing
from . import calc, peak
from .scenario import Gpu, Scenario, Step, Trained, VariantGroup, VariantRow
from .spec import ReportSpec, ReportSpecError

STATE_KEYS = ("weights", "gradients", "fp32_gradients", "master_weights", "optimizer_states")
ACTIVATION_KEYS = ("activations", "recompute_buffer")
SPLIT_OPTIONS = ("dp", "tp", "pp", "zero", "sequence_parallel", "microbatches", "interleave", "offload")
LABELS = {
    "batch": "batch B (micro-batch per GPU)", "seq": "sequence length S", "dp": "data parallel (dp)",
    "tp": "tensor parallel (tp)", "pp": "pipeline parallel (pp)", "flash": "FlashAttention",
    "precision": "precision", "optimizer": "optimizer", "grads": "gradients", "recompute": "activation recompute",
    "dropout": "dropout masks", "zero": "ZeRO stage", "sequence_parallel": "sequence parallel",
    "microbatches": "micro-batches in flight", "interleave": "virtual pipeline stages", "offload": "optimizer offload",
    "logits": "logits accounting", "activations": "activation formula", "weights": "weight dtype",
    "kv_dtype": "KV-cache dtype",
}


def _where(spec: ReportSpec) -> str:
    return f"{spec.path}: " if spec.path else ""


def _module(ref: Any) -> Any:
    """The probed ModuleNetwork of a report's torch module model (its [module] table as the command line's flags)."""
    from . import module_model

    return module_model.network(ref)


def scenario(spec: ReportSpec, gpus: list[Gpu]) -> Scenario:
    """The report's scenario for a real model, from ``planning.plan``."""
    builtin = [name for name in spec.values if symtab.info(name).unit != "user"]
    if builtin:
        raise ReportSpecError(f"{_where(spec)}values.{builtin[0]}: [values] sets the articles' symbols and those of "
                        "custom terms; a real model takes its sizes from its config and the regime's options")
    try:
        shape = _module(spec.model) if spec.model.module else planning.load(
            str(spec.model.path) if spec.model.path else spec.model.name)
    except (UserError, OSError) as err:
        raise ReportSpecError(f"{_where(spec)}model: {_message(err)}") from None
    options = dict(spec.regime.options)
    make = _maker(shape, spec.mode)
    try:
        plan = make(**options)
    except UserError as err:
        raise ReportSpecError(f"{_where(spec)}regime: {_message(err)}") from None
    scope = shape.scope  # a network's own symbols (a generic model's config fields), else None
    given = {symtab.lookup(name, scope): _number(name, value) for name, value in plan.values.items()}
    regime = plan.regime
    notes = {symtab.lookup(name, scope): "the model's config" for name in plan.values if name in shape.numbers}
    for name, option in (("B", "batch"), ("S", "seq"), ("t", "tp"), ("p", "pp"), ("n_d", "dp")):
        if name in plan.values:
            notes[symtab.lookup(name)] = (f"regime.{option}" if option in options
                                          else f"the planner's default {option}")
    phases = peak.from_plan(plan)
    scen = Scenario(
        model_name=f"{shape.name} ({'training' if spec.mode == 'train' else 'inference'})",
        formula=_titled(plan.formula), given=given, gpus=gpus,
        batch=B if B in given else None, seq=S if S in given else None, value_notes=notes,
        model_rows=_model_rows(shape), regime_rows=_regime_rows(plan),
        steps=_steps(plan.formula, plan.values, scope),
        caveats=[_sentence(n) for n in plan.notes if not (phases and n in phases.runtime_notes)],  # summary says it
        limits={S: shape.positions} if shape.positions else {},
        trained=_trained(shape),
        gpu_rows=[],
        phases=phases,
    )
    scen.fewest = _fewest(shape, spec.mode, options, regime)
    scen.variants = (_train_variants(shape, plan, make, options) if spec.mode == "train"
                     else _infer_variants(shape, plan, make, options))
    errata = ["article-B"] if any(row.source == "article-B" for g in scen.variants for row in g.rows) else []
    scen.errata_sources = errata
    return scen


def _trained(shape: Any) -> dict[sympy.Symbol, Trained]:
    """The context the config says the model was trained for, where it is not a hard limit.

    Learned position embeddings cap the context (``limits``); rotary models run past
    ``max_position_embeddings``, usually with degraded quality, so it is a warning, as in
    ``symbolic fit`` (planning.fit).
    """
    trained = shape.trained_context  # networks.shape.trained_context, as the command line's warning reads it
    return {S: Trained(trained, shape.name)} if trained is not None else {}


LAYERS_ONLY = " (transformer layers)"


def _titled(formula: Formula) -> Formula:
    """``formula`` with its weights term titled by what it counts, when the embeddings are a term of their own.

    Inference plans split the weights into the transformer layers' and the embeddings' and head's
    (kept in 16 bits when the layers are quantised); "bf16 weights" alone would read as all of them.
    """
    keys = {t.key: t for t in formula.terms}
    weights = keys.get("weights")
    if weights is None or "embeddings" not in keys or weights.title.endswith(LAYERS_ONLY):
        return formula
    terms = tuple(dataclasses.replace(t, title=t.title + LAYERS_ONLY) if t is weights else t for t in formula.terms)
    return Formula(formula.key, formula.title, terms, source=formula.source, where=formula.where, note=formula.note,
                   name=formula.name, definitions=formula.definitions, example=formula.example)


def _maker(shape: Any, mode: str) -> Callable[..., Any]:
    def make(**options: object) -> Any:
        return planning.plan(shape, mode=mode, **options)
    return make


def _message(err: BaseException) -> str:
    text = getattr(err, "message", None) or (str(err.args[0]) if err.args else str(err))
    return str(text).splitlines()[0]


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _number(name: str, value: object) -> sympy.Rational:
    return vals.to_number(value, name)


def _model_rows(shape: Any) -> list[tuple[str, str]]:
    numbers = shape.numbers
    params = shape.params.evaluate(shape.params.restrict(numbers)).total
    rows = [("model", f"{shape.name} ({shape.model_type})")]
    if shape.source:
        rows.append(("config source", shape.source))
    for name in ("H", "L", "a", "a_kv", "d_head", "d_ff", "V", "n_pos", "n_exp", "k_exp", "d_exp"):
        if name in numbers:
            rows.append((f"{symtab.info(name).description.split('(')[0].split(':')[0].strip()} {name}",
                         f"{numbers[name]:,}"))
    rows.append(("parameters N (exact, from the architecture's formula)", f"{int(params):,}"))
    active = _active(shape) if shape.moe else None
    if active is not None:
        rows.append(("active parameters per token", f"{active:,}"))
    return rows


def _active(shape: Any) -> int | None:
    """Active parameters per token: a preset's table count, or what a network without a table counted."""
    if shape.spec is None:
        return shape.active
    from ..networks import transformer as architectures

    spec = architectures.load(shape.name) if shape.name in architectures.preset_names() else None
    return spec.active_param_count() if spec is not None else None


def _regime_rows(plan: Any) -> list[tuple[str, str]]:
    regime = plan.regime
    rows = [("mode", "training" if regime.train else "inference")]
    for name, value in regime.options().items():
        if name == "mode":
            continue
        text = {True: "yes", False: "no"}.get(value, str(value)) if isinstance(value, bool) else str(value)
        rows.append((LABELS.get(name, name), text + (" (default)" if name in regime.defaulted else "")))
    rows.append(("GPUs in the job (dp × tp × pp)", str(regime.gpus)))
    return rows


def _all_definitions(formula: Formula) -> list[Formula]:
    """Definitions, innermost first (N before N_gpu)."""
    out: list[Formula] = []
    for definition in formula.definitions.values():
        for inner in _all_definitions(definition):
            if inner not in out:
                out.append(inner)
        if definition not in out:
            out.append(definition)
    return out


def _steps(formula: Formula, values: dict[str, object], scope: symtab.SymbolScope | None = None) -> list[Step]:
    point = {symtab.lookup(k, scope): _number(k, v) for k, v in values.items()}
    return [Step(d, point) for d in _all_definitions(formula)]


# --- fewest GPUs ---------------------------------------------------------------------------------
def _fewest(shape: Any, mode: str, options: dict[str, object], regime: Any) -> Callable[[Gpu], str]:
    over = "tp" if mode == "infer" or options.get("zero") == 0 else "dp"
    asked = {k: v for k, v in options.items() if k != over}

    def fewest(gpu: Gpu) -> str:
        target = GPU(gpu.name, gpu.name, "", gpu.capacity, "spec", gpu.source)
        try:
            answer = planning.fit_gpus(shape, target, mode=mode, over=over, **asked)
        except UserError:
            return "—"
        if answer.status != "ok" or answer.gpus is None:
            return "none"
        zero = answer.plan.regime.zero if answer.plan is not None and over == "dp" else None
        if answer.value == 1:
            return f"{answer.gpus}"
        detail = f"{over} {answer.value}" + (f", ZeRO-{zero}" if zero else "")
        return f"{answer.gpus} ({detail})"

    return fewest


# --- variants ------------------------------------------------------------------------------------
def _sum_terms(plan: Any, keys: tuple[str, ...]) -> tuple[sympy.Rational, str]:
    ev = plan.evaluate_terms()  # every component term (the plan's formula is its peak: resident terms + max)
    picked = [(t, v) for t, v in ev.terms if t.key in keys]
    return sympy.Add(*(v for _, v in picked)), printing.join_latex([t.expr for t, _ in picked])


def _try(make: Callable[..., Any], **options: object) -> Any | None:
    try:
        return make(**options)
    except UserError:
        return None


def _n_value(shape: Any) -> sympy.Rational:
    return shape.params.evaluate(shape.params.restrict(shape.numbers)).total


def _bpp(value: sympy.Rational) -> str:
    return f"{int(value)}" if value.is_Integer else f"{float(value):.3g}"


def _states_group(shape: Any, plan: Any) -> VariantGroup | None:
    n_value = _n_value(shape)
    regime = plan.regime
    rows = []
    for key, label, source in (("states.zero2020", "ZeRO paper (fp16 weights and gradients)", "zero2020"),
                               ("states.megatron", "Megatron-LM (bf16, fp32 main gradients)", "megatron"),
                               ("states.deepspeed", "DeepSpeed ZeRO-2 estimator (fp16 + fp32 gradients)", "deepspeed")):
        formula = library.get(key)
        if set(formula.inputs) != {N}:
            continue
        value = formula.evaluate({N: n_value}).total
        rows.append(VariantRow(f"{label}: {_bpp(value / n_value)} bytes per parameter", formula.latex(equation=True),
                               value, source))
    # the eager step under autocast: the fp32 weights are their own master copy (no 16-bit copy between steps)
    eager = regime.activations == "pytorch" and regime.precision.endswith("-mixed")
    try:
        own = prec.states_formula("report.states", "this report's model states", "fp32" if eager else regime.precision,
                                  regime.optimizer, regime.grads)
        if set(own.inputs) == {N}:
            value = own.evaluate({N: n_value}).total
            under = " (autocast over fp32 weights)" if eager else ""
            rows.append(VariantRow(f"this report: {regime.precision}{under}, {regime.optimizer}, {regime.grads} "
                                   "gradients: "
                                   f"{_bpp(value / n_value)} bytes per parameter", own.latex(equation=True), value,
                                   own.source, chosen=True))
    except UserError:
        pass
    if not rows:
        return None
    return VariantGroup(
        "Bytes per parameter: 16, 18 or 20?",
        f"Model states (weights, gradients, fp32 master copy, optimizer states) of all N = {int(n_value):,} "
        "parameters on one GPU without sharding. The published figures differ because each source counts "
        "different copies; here each copy is a named term.", "bytes", tuple(rows))


def _activation_group(plan: Any, make: Callable[..., Any], options: dict[str, object]) -> VariantGroup | None:
    regime = plan.regime
    base = {k: v for k, v in options.items() if k not in ("activations", "flash", "recompute")}
    choices = [
        ("article B: L(14E + 4BSS), no head count", {"activations": "article-b"}, "article-B"),
        ("Korthikanti et al., no FlashAttention", {"activations": "korthikanti", "flash": False, "recompute": "none"},
         "korthikanti2022"),
        ("Korthikanti et al. with FlashAttention (no s² terms)",
         {"activations": "korthikanti", "flash": True, "recompute": "none"}, "korthikanti2022"),
        ("Korthikanti et al., selective recompute",
         {"activations": "korthikanti", "flash": False, "recompute": "selective"}, "korthikanti2022"),
        ("Korthikanti et al., full recompute", {"activations": "korthikanti", "flash": True, "recompute": "full"},
         "korthikanti2022"),
    ]
    mine = {"activations": regime.activations, "flash": regime.flash, "recompute": regime.recompute}
    if regime.activations == "pytorch":  # what autograd saves: attn and device, not flash, choose the kernel
        choices.append((f"this report: as PyTorch saves it ({regime.attn}, {regime.device})", mine, "pytorch"))
    elif not any(_same(c, mine) for _, c, _ in choices):
        choices.append((f"this report: {regime.activations}, flash {'on' if regime.flash else 'off'}, "
                        f"recompute {regime.recompute}", mine, "korthikanti2022"))
    rows = []
    for label, choice, source in choices:
        alt = _try(make, **base, **choice)
        if alt is None:
            continue
        value, latex = _sum_terms(alt, ACTIVATION_KEYS)
        chosen = _same(choice, mine)
        rows.append(VariantRow(label, latex, value, source, chosen=chosen))
    if len(rows) < 2:
        return None
    korthikanti = ("Korthikanti et al. (2022) store 5·a·S² bytes per layer of attention scores, which "
                   "FlashAttention-style kernels and selective recompute avoid.")
    at = f"Activation memory per GPU at B = {regime.batch} and S = {regime.seq:,}, everything else as in this report."
    if any(row.source == "article-B" for row in rows):
        return VariantGroup("Activations: article B against Korthikanti et al.",
                            f"{at} Article B's formula has no head count and no FlashAttention; {korthikanti}",
                            "bytes", tuple(rows))
    return VariantGroup("Activations: Korthikanti et al. with and without FlashAttention and recompute",
                        f"{at} {korthikanti} (Article B's formula cannot express this regime, so it is not shown.)",
                        "bytes", tuple(rows))


def _same(choice: dict[str, object], mine: dict[str, object]) -> bool:
    if choice.get("activations") == "article-b":
        return mine["activations"] == "article-b"
    return all(mine.get(k) == v for k, v in choice.items())


def _whole_latex(expr: sympy.Expr) -> str:
    """A plan's whole formula for a table cell; where a max holds another max (a phase that is itself the larger of
    two moments), a fraction of it printed coefficient first, so that the cell can break it after its commas."""
    nested = any(arg.has(sympy.Max) for node in expr.atoms(sympy.Max) for arg in node.args)
    return printing.latex(calc.coefficient_first(expr) if nested else expr)


def _rules_group(shape: Any, plan: Any, make: Callable[..., Any], options: dict[str, object],
                 weight_bytes: sympy.Rational) -> VariantGroup:
    n_value = _n_value(shape)
    regime = plan.regime
    at = {N: n_value, b: weight_bytes}
    rows = []
    keys = ("llm.rule.training",) if regime.train else ("llm.rule.inference", "infer.rule.eleuther")
    for key in keys:
        formula = library.get(key)
        rows.append(VariantRow(formula.title.replace("Rule of thumb: ", "rule of thumb: "),
                               formula.latex(equation=True), formula.evaluate(at).total, formula.source))
    single = {k: v for k, v in options.items() if k not in SPLIT_OPTIONS}
    alone = _try(make, **single) or plan
    rows.append(VariantRow("this report's formula on one GPU (no parallelism)",
                           f"{alone.formula.name_latex} = {_whole_latex(alone.formula.expr)}",
                           alone.evaluate().total, "project", chosen=True))
    return VariantGroup(
        "Rules of thumb against the formula",
        f"Rules of thumb scale the model memory N·b (b = {weight_bytes} bytes per weight here) and ignore batch, "
        "context and activations; the formula does not.", "bytes", tuple(rows))


def _train_variants(shape: Any, plan: Any, make: Callable[..., Any], options: dict[str, object]) -> list[VariantGroup]:
    groups = [_states_group(shape, plan), _activation_group(plan, make, options),
              _rules_group(shape, plan, make, options, sympy.Integer(prec.get(plan.regime.precision).weight_bytes))]
    return [g for g in groups if g is not None]


WEIGHT_KEYS = ("weights", "weight_scales", "embeddings")
WEIGHT_PARTS = {"weights": "layers", "weight_scales": "scales", "embeddings": "embeddings and head"}


def _weight_parts(plan: Any) -> str:
    """What a plan's weight memory is made of, e.g. 'layers, scales, embeddings and head'."""
    keys = [t.key for t in plan.formula.terms if t.key in WEIGHT_KEYS]
    return ", ".join(WEIGHT_PARTS[k] for k in keys)


def _infer_variants(shape: Any, plan: Any, make: Callable[..., Any], options: dict[str, object]) -> list[VariantGroup]:
    regime = plan.regime
    rows = []
    for dtype in dict.fromkeys(("bf16", "int8", "int4", regime.weights)):  # and the format asked for, or shipped
        alt = _try(make, **{**options, "weights": dtype, "kv_dtype": regime.kv_dtype})
        if alt is None:
            continue
        value, latex = _sum_terms(alt, WEIGHT_KEYS)
        rows.append(VariantRow(f"{dtype} weights (all: {_weight_parts(alt)})", latex, value,
                               formats.get(dtype).source, chosen=dtype == regime.weights))
    groups = [VariantGroup("Weights: 16, 8 or 4 bits", "All weight memory per GPU: the transformer layers' weights "
                           "(int8 and int4 with one fp16 scale, and for int4 a zero point, per group of 128 weights) "
                           "plus the embeddings and LM head, kept in 16 bits. The breakdown lists these parts as "
                           "separate terms.", "bytes", tuple(rows))] if len(rows) > 1 else []
    rows = []
    for dtype in ("bf16", "fp8", "int4"):
        alt = _try(make, **{**options, "kv_dtype": dtype})
        if alt is None:
            continue
        value, latex = _sum_terms(alt, infer.CACHE_KEYS)
        rows.append(VariantRow(f"{dtype} KV cache", latex, value, "shazeer2019", chosen=dtype == regime.kv_dtype))
    if len(rows) > 1:
        groups.append(VariantGroup(
            "KV cache: element size", f"KV-cache memory per GPU for B = {regime.batch} sequences of S = "
            f"{regime.seq:,} tokens (grouped-query attention counted through a_kv).", "bytes", tuple(rows)))
    groups.append(_rules_group(shape, plan, make, options, formats.nbytes(regime.weights)))
    return groups
