"""Scenarios built from the two source articles' formulas (article A's network, article B's LLM).

The articles fix what they fix (article B counts fp32 weights and Adam; article A has no
sequence); a regime setting they cannot express is an error, not silently ignored.
"""

from __future__ import annotations

import sympy

from .. import formats, library
from ..core import symbols as symtab
from ..core.symbols import B, D, H, L, N, S, V, b, d_ff, d_h, d_in, n_out
from ..library import article_a, article_b
from ..text import printing
from .scenario import Gpu, Scenario, Step, VariantGroup, VariantRow
from .spec import ReportSpec, ReportSpecError

ARTICLE_A_PRECISIONS = ("fp32", "bf16", "fp16")  # one element size b for every tensor
# the element sizes article A's variant table compares: (format, label)
SIZE_ROWS = (("fp32", "fp32"), ("bf16", "16-bit"), ("int8", "8-bit"), ("int4", "4-bit"))


def _size_label(name: str, label: str) -> str:
    size = formats.nbytes(name)
    return f"{label} ({size} byte{'' if size <= 1 else 's'})"


def _reject(spec: ReportSpec, allowed: set[str], who: str) -> None:
    """Regime keys the article's formulas cannot express are errors."""
    for key, value in spec.regime.options.items():
        if value is not None and key not in allowed:
            raise ReportSpecError(f"{_where(spec)}regime.{key}: {who}'s formulas have no {key} setting; "
                            f"remove it or use a real model with formulas = 'library'")
    if spec.mode != "train":
        raise ReportSpecError(f"{_where(spec)}mode: {who}'s formulas describe training; use mode = 'train'")


def _where(spec: ReportSpec) -> str:
    return f"{spec.path}: " if spec.path else ""


def _values(spec: ReportSpec, defaults: dict[sympy.Symbol, int], reserved: dict[str, str]) -> dict:
    out = {s: sympy.Integer(v) for s, v in defaults.items()}
    notes = {s: "the article's worked example" for s in defaults}
    for name, value in spec.values.items():
        if symtab.info(name).unit == "user":
            continue  # a symbol a custom term introduced: adapter.add_terms gives it its value
        if name in reserved:
            raise ReportSpecError(f"{_where(spec)}values.{name}: set it with {reserved[name]}")
        symbol = next((s for s in out if s.name == name), None)
        if symbol is None:
            allowed = ", ".join(s.name for s in out if s.name not in reserved)
            raise ReportSpecError(f"{_where(spec)}values.{name}: not an input of these formulas; they take {allowed}")
        out[symbol] = value
        notes[symbol] = "the specification's [values]"
    return {"values": out, "notes": notes}


def article_a_scenario(spec: ReportSpec, gpus: list[Gpu]) -> Scenario:
    """Article A's four-layer network: P + G + O + A, with b from the precision and B from the batch."""
    _reject(spec, {"batch", "precision", "optimizer"}, "article A")
    precision = spec.regime.precision or "fp32"
    if precision not in ARTICLE_A_PRECISIONS:
        raise ReportSpecError(f"{_where(spec)}regime.precision: article A stores every tensor with one element size; "
                        f"choose fp32, bf16 or fp16 (not {precision!r})")
    optimizer = spec.regime.optimizer or "adamw"
    totals = {"adamw": article_a.total, "sgd-momentum": article_a.total_sgd}
    if optimizer not in totals:
        raise ReportSpecError(f"{_where(spec)}regime.optimizer: article A covers adamw and sgd-momentum, not {optimizer!r}")
    batch = spec.regime.batch or 128
    picked = _values(spec, {d_in: 2048, d_h: 4096, n_out: 10}, {"B": "regime.batch", "b": "regime.precision",
                                                                 "N": "the network's widths"})
    given = {**picked["values"], B: sympy.Integer(batch), b: formats.nbytes(precision)}
    notes = {**picked["notes"], B: "regime.batch" if spec.regime.batch else "the article's worked example",
             b: f"regime.precision = {precision}"}
    formula = totals[optimizer]
    widths = {s: given[s] for s in (d_in, d_h, n_out)}
    n_value = article_a.params.evaluate(widths).total
    with_bias = article_a.params_with_bias.evaluate(widths).total
    point = {**given}

    def total_with(**changes: object) -> sympy.Rational:
        return formula.evaluate({**point, **changes}).total

    variants = [
        VariantGroup("Optimizer states", "Article A gives both optimizers; only O changes.", "bytes", (
            VariantRow("AdamW: O = 2P (two moments)", article_a.total.latex(equation=True),
                       article_a.total.evaluate(point).total, "article-A", chosen=optimizer == "adamw"),
            VariantRow("SGD with momentum: O = P", article_a.total_sgd.latex(equation=True),
                       article_a.total_sgd.evaluate(point).total, "article-A", chosen=optimizer == "sgd-momentum"),
        )),
        VariantGroup("Parameter count", "The article counts weights only (erratum 4); nn.Linear also has biases.",
                     "bytes", (
            VariantRow(f"weights only, N = {_n(n_value)}", article_a.params.latex(equation=True),
                       total_with(), "article-A", chosen=True),
            VariantRow(f"with biases, N = {_n(with_bias)}", article_a.params_with_bias.latex(equation=True),
                       total_with(N=with_bias), "pytorch"),
        )),
        VariantGroup("Element size b", "The article says 2 bytes and multiplies by 4 (erratum 2); b is an input here.",
                     "bytes", tuple(
            VariantRow(_size_label(name, label), f"b = {sympy.latex(size)}", total_with(b=size), "article-A",
                       chosen=size == given[b])
            for name, label in SIZE_ROWS for size in (formats.nbytes(name),))),
    ]
    return Scenario(
        model_name="Article A's four-layer network",
        formula=formula, given=given, gpus=gpus, batch=B, seq=None, value_notes=notes,
        model_rows=[("network", "gat = Linear(2048, 4096), up = Linear(4096, 4096), down = Linear(4096, 2048), "
                                "out = Linear(2048, 10)"),
                    ("parameters (weights only, as the article counts)", f"{_n(n_value)}"),
                    ("parameters with nn.Linear biases", f"{_n(with_bias)}")],
        regime_rows=[("mode", "training"), ("batch size B", str(batch)),
                     ("element size b", f"{precision}: {formats.nbytes(precision)} bytes"),
                     ("optimizer", {"adamw": "AdamW (O = 2P)", "sgd-momentum": "SGD with momentum (O = P)"}[optimizer])],
        steps=[Step(article_a.params, widths), Step(article_a.activation_elements, {**widths, B: given[B]})],
        variants=variants, errata_sources=["article-A"],
        caveats=["Article A has no sequence dimension: the largest context does not apply."],
    )


def article_b_scenario(spec: ReportSpec, gpus: list[Gpu], dims: dict[sympy.Symbol, int] | None = None,
                       model_name: str = "", model_rows: list[tuple[str, str]] | None = None,
                       heads: int = 12) -> Scenario:
    """Article B's peak training memory M_peak at H, L, V, d_ff (its worked example unless ``dims``).

    ``heads`` (GPT-2 small's 12, the article's h) is used only to compare its activations with
    Korthikanti et al.'s, which count attention scores per head.
    """
    _reject(spec, {"batch", "seq", "precision", "optimizer"}, "article B")
    if (spec.regime.precision or "fp32") != "fp32":
        raise ReportSpecError(f"{_where(spec)}regime.precision: article B's formulas count fp32 weights and gradients; "
                        "use precision = 'fp32' or formulas = 'library'")
    if (spec.regime.optimizer or "adamw") != "adamw":
        raise ReportSpecError(f"{_where(spec)}regime.optimizer: article B's formulas count Adam's two fp32 states; "
                        "use optimizer = 'adamw' or formulas = 'library'")
    base = dims or dict(zip((H, L, V, d_ff), (768, 12, 50000, 3072)))
    picked = _values(spec, base, {"B": "regime.batch", "S": "regime.seq", "D": "regime.seq (D = S)",
                                  "N": "the model's dimensions", "E": "B, S and H"})
    batch, seq = spec.regime.batch or 8, spec.regime.seq or 1024
    given = {**picked["values"], B: sympy.Integer(batch), S: sympy.Integer(seq), D: sympy.Integer(seq)}
    notes = {**picked["notes"], B: "regime.batch" if spec.regime.batch else "default",
             S: "regime.seq" if spec.regime.seq else "default", D: "tied: D = S (one int64 token id per position)"}
    if dims:
        for s in base:
            notes[s] = notes[s].replace("the article's worked example", "the model's config")
    formula = article_b.peak
    point = dict(given)
    model_point = {s: given[s] for s in (H, L, V, d_ff)}
    n_value = article_b.params.evaluate(model_point).total
    e_point = {s: given[s] for s in (B, S, H)}
    per_layer = sympy.expand(article_b.ACTIVATIONS[0].expr / L)
    listed = article_b.listed
    e_value = article_b.tokens_hidden.evaluate(e_point).total
    layers = given[L]

    def at(expr: sympy.Expr) -> sympy.Rational:
        return expr.xreplace({article_b.E: e_value}).xreplace(point)

    rule_point = {**model_point, b: 4}
    variants = [
        VariantGroup(
            "Activations: article B against Korthikanti et al.",
            "Article B's M_act uses 14E + 4BSS per layer, but the parts it lists add up to 20E + 4BSS (24E with both "
            "layer norms; erratum 5), and 4BSS has no head count (erratum 3). Korthikanti et al. (2022) count 16-bit "
            "activations, with 5·a·S² bytes of attention scores per layer that FlashAttention-style kernels do not "
            "store. Values are for all L layers (per layer in the variant column).", "bytes", (
                VariantRow("article B, M_act as written: 14E + 4BSS", _latex(per_layer), at(per_layer) * layers,
                           "article-B", chosen=True,
                           note=f"{_n(at(per_layer))} per layer"),
                VariantRow("article B, its listed parts: 20E + 4BSS", listed.latex(), listed.evaluate(
                    {**e_point}).total * layers, "article-B",
                           note=f"{_n(listed.evaluate(e_point).total)} per layer"),
                *_korthikanti_rows(given, heads),
            )),
        VariantGroup(
            "Bytes per parameter", "Article B counts fp32 weights, fp32 gradients and Adam's two fp32 moments: 16 "
            "bytes per parameter. Its rules of thumb restate that as multiples of the fp32 model memory.", "bytes", (
                VariantRow("M_steady without inputs: 4N + 8N + 4N = 16N", _latex(16 * N), 16 * n_value, "article-B",
                           chosen=True),
                VariantRow("training rule of thumb: 4 × model memory", article_b.rule_training.latex(),
                           article_b.rule_training.evaluate(rule_point).total, "article-B",
                           note="b = 4 (fp32): also 16N"),
                VariantRow("inference rule of thumb: 2 × model memory", article_b.rule_inference.latex(),
                           article_b.rule_inference.evaluate(rule_point).total, "article-B", note="b = 4 (fp32): 8N"),
            )),
        VariantGroup(
            "Rules of thumb against the formulas", "The rules of thumb ignore inputs and activations, so at this "
            "batch and sequence they disagree with the article's own M_steady and M_peak (erratum 4).", "bytes", (
                VariantRow("inference ≈ 2 × model memory", article_b.rule_inference.latex(equation=True),
                           article_b.rule_inference.evaluate(rule_point).total, "article-B"),
                VariantRow("training ≈ 4 × model memory", article_b.rule_training.latex(equation=True),
                           article_b.rule_training.evaluate(rule_point).total, "article-B"),
                VariantRow("M_steady = 16N + 8BD", article_b.steady.latex(equation=True),
                           article_b.steady.evaluate(article_b.steady.restrict(_names(point))).total, "article-B"),
                VariantRow("M_peak = M_steady + M_act + 4BSV", article_b.peak.latex(equation=True),
                           article_b.peak.evaluate(point).total, "article-B", chosen=True),
            )),
    ]
    sub = {s: given[s] for s in (B, D)}
    return Scenario(
        model_name=model_name or "GPT-2 small as article B describes it",
        formula=formula, given=given, gpus=gpus, batch=B, seq=S, ties={D: S}, value_notes=notes,
        model_rows=model_rows or [
            ("hidden size H (article's d)", f"{_n(given[H])}"), ("layers L (article's n)", f"{_n(given[L])}"),
            ("vocabulary V", f"{_n(given[V])}"), ("feed-forward size d_ff", f"{_n(given[d_ff])}"),
            ("parameters N (article B's count)", f"{_n(n_value)}")],
        regime_rows=[("mode", "training"), ("batch size B", str(batch)), ("sequence length S", str(seq)),
                     ("weights, gradients, Adam states", "fp32 (article B)"), ("input ids", "int64, D = S per sample")],
        steps=[Step(article_b.params, model_point), Step(article_b.tokens_hidden, e_point),
               Step(article_b.steady, {**model_point, **sub}),
               Step(article_b.activations, {**model_point, **{s: given[s] for s in (B, S)}})],
        variants=variants, errata_sources=["article-B"],
    )


KORTHIKANTI = (
    ("act.korthikanti.none", "Korthikanti et al., no FlashAttention: sbh(34 + 5as/h)"),
    ("act.layer.flash.gelu", "FlashAttention-style kernels: no s² terms (Korthikanti's derivation)"),
    ("act.korthikanti.full", "Korthikanti et al., full recompute: 2sbh"),
)


def _korthikanti_rows(given: dict[sympy.Symbol, sympy.Rational], heads: int) -> list[VariantRow]:
    """Korthikanti et al.'s activations per layer (16-bit, with heads) at the report's B, S, H, d_ff."""
    point = {"B": given[B], "S": given[S], "H": given[H], "d_ff": given[d_ff], "a": heads, "a_kv": heads,
             "d_head": sympy.Rational(given[H], heads)}
    rows = []
    for key, label in KORTHIKANTI:
        formula = library.get(key)
        values = formula.restrict(point)
        if len(values) != len(formula.inputs):
            continue
        per_layer = formula.evaluate(values).total
        rows.append(VariantRow(label, formula.latex(), per_layer * given[L], "korthikanti2022",
                               note=f"{_n(per_layer)} per layer, a = {heads} heads"))
    return rows


def _latex(expr: sympy.Expr) -> str:
    return printing.latex(expr)


def _n(value: sympy.Rational) -> str:
    """A whole number with thousands separators."""
    return f"{int(value):,}"


def _names(point: dict[sympy.Symbol, sympy.Rational]) -> dict[str, sympy.Rational]:
    return {s.name: v for s, v in point.items()}
