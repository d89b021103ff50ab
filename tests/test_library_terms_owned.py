"""The library owns every term: the planner assembles library terms and writes no formula of its own.

An AST scan lists the ``Term(...)`` calls in ``symbolic/planning/*.py``; they must be exactly the
allow-list below, each of which only groups, sums or renames library terms. A new inline formula
in the planner fails here: write it in ``symbolic/library`` (with its source) and call it. The
moved formulas are checked at small points worked out by hand from their definitions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sympy

from symbolic.core.symbols import B, H, M_kv, M_w, S, W_hbm, X, e_p, n_d, n_mb, p, t, t_dec
from symbolic.library import activations as acts
from symbolic.library import parallel as par
from symbolic.library import timing as tm
from symbolic.library.flops import F_fwd, F_tok, T

PLANNING = Path(__file__).resolve().parents[1] / "symbolic" / "planning"

# (module, the Term's key as written): each assembles library terms, none writes a formula
ASSEMBLING = {
    ("build", "activations"),  # L (or the layers in flight) × model.layer_activations (library.activations)
    ("build", "recompute_buffer"),  # one layer's model.layer_activations, renamed
    ("build", "logits"),  # the sum of the saved parts of acts.logits_terms
    ("finetune", "weights"),  # frozen_base_bytes: precision weight bytes × N, or lora.qlora_base_bytes
    ("finetune", "adapter_weights"),  # the adapters' parameter count (library.lora) × their element bytes
    ("finetune", "gradients"),  # the same count × element bytes: one gradient per adapter parameter
    ("finetune", "optimizer_states"),  # the optimizer's own state_expr (library.optimizers)
    ("finetune", "checkpoint.leaf"),  # lora.checkpoint_leaf
    ("phases", "PEAK_KEY"),  # peak_pytorch.maximum over the phases' library terms
    ("pytorch", "activations"),  # the saved-tensor terms of library.activations_pytorch, grouped
    ("pytorch", "inputs"),  # ditto
    ("pytorch", "logits"),  # ditto
}


def _term_calls() -> set[tuple[str, str]]:
    """(module, key: the first argument's string, or its source) of every ``Term(...)`` call in planning/."""
    found = set()
    for path in sorted(PLANNING.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name == "Term":
                key = node.args[0] if node.args else ast.Constant("?")
                found.add((path.stem, key.value if isinstance(key, ast.Constant) else ast.unparse(key)))
    return found


def test_planning_writes_no_term_of_its_own() -> None:
    assert _term_calls() == ASSEMBLING


def _at(expr: sympy.Expr, values: dict) -> sympy.Expr:
    return sympy.sympify(expr).subs(values)


def test_achieved_step_term() -> None:
    # F_tok·B·n_mb·S / (t·p·X) = 6·2·3·4 / (2·1·12) = 144 / 24 = 6
    term = tm.achieved_step_term()
    assert term.key == "compute" and term.unit == "seconds"
    assert _at(term.expr, {F_tok: 6, B: 2, n_mb: 3, S: 4, t: 2, p: 1, X: 12}) == 6


def test_step_flops_formula() -> None:
    # F_tok × n_d·B·n_mb·S = 6 × 2·1·3·4 = 144
    formula = tm.step_flops_formula("flops.x.step", "x", tm.STEP)
    assert formula.name == "F_step" and formula.definitions == {F_tok: tm.STEP}
    assert _at(formula.terms[0].expr, {F_tok: 6, n_d: 2, B: 1, n_mb: 3, S: 4}) == 144


def test_prefill_formula() -> None:
    # F_fwd·B·S / (t·p·peak·η) = 10·2·3 / (2·1·5·½) = 60 / 5 = 12
    formula = tm.prefill_formula("time.x.prefill", "x", tm.STEP, sympy.Integer(5), sympy.Rational(1, 2))
    assert formula.name == "t_prefill" and formula.definitions == {F_fwd: tm.STEP}
    assert _at(formula.terms[0].expr, {F_fwd: 10, B: 2, S: 3, t: 2, p: 1}) == 12


def test_decode_formula_is_a_roofline() -> None:
    peak, eff = sympy.Integer(5), sympy.Rational(1, 2)
    at = {F_fwd: 10, B: 2, t: 2, p: 2, M_w: 6, M_kv: 4}
    with_kv = tm.decode_formula("time.x.decode", "x", tm.STEP, peak, eff).terms[0].expr
    # compute F_fwd·B / (t·peak·η) = 20 / 5 = 4; reads p·(M_w + M_kv)/W_hbm = 2·10/10 = 2: max 4
    assert _at(with_kv, {**at, W_hbm: 10}) == 4
    # at W_hbm = 2 the reads take 2·10/2 = 10 > 4
    assert _at(with_kv, {**at, W_hbm: 2}) == 10
    # without a KV cache only the weights are read: 2·6/2 = 6
    bare = tm.decode_formula("time.x.decode", "x", tm.STEP, peak, eff, kv_cache=False).terms[0].expr
    assert not bare.has(M_kv) and _at(bare, {**at, W_hbm: 2}) == 6


def test_decode_rate_and_generate() -> None:
    decode = tm.decode_formula("time.x.decode", "x", tm.STEP, sympy.Integer(1), X)
    rate = tm.decode_rate_formula("time.x.rate", "x", decode)
    assert rate.name == "R_dec" and rate.definitions == {t_dec: decode}
    assert _at(rate.terms[0].expr, {B: 8, t_dec: 2}) == 4  # B / t_dec = 8 / 2
    total = tm.generate_formula("time.x.generate", "x", decode)
    assert total.name == "t_train" and total.definitions == {t_dec: decode}
    assert _at(total.terms[0].expr, {T: 100, n_d: 5, B: 2, t_dec: 3}) == 30  # 100 / (5·2) steps × 3 s


def test_experts_term() -> None:
    # 800 expert parameters ÷ (e_p·p) = 800 / (4·2) = 100; without pipeline stages 800 / 4 = 200
    assert _at(par.experts_term(sympy.Integer(800)).expr, {e_p: 4, p: 2}) == 100
    assert _at(par.experts_term(sympy.Integer(800), 1).expr, {e_p: 4}) == 200


def test_inputs_term() -> None:
    at = {S: 4, B: 2, H: 8}
    assert _at(acts.inputs_term(False).expr, at) == 64  # 8·S·B = 8·4·2
    # with the dropout mask split by t = 2 under sequence parallelism: 64 + 4·2·8/2 = 96
    assert _at(acts.inputs_term(True, 2).expr, at) == 96
    # three micro-batches in flight keep three copies: 3·96 = 288
    term = acts.inputs_term(True, 2, 3, pipelined=True)
    assert _at(term.expr, at) == 288 and term.title.endswith("× 3 micro-batches in flight")
