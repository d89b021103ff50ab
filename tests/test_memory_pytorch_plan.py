"""``activations="pytorch"`` as a regular planner option: one Formula, and everything a plan does works with it."""

import json
import math
import re

import pytest
import sympy
from helpers import run
from hypothesis import given, settings
from hypothesis import strategies as st

from symbolic import planning
from symbolic.math import algebra
from symbolic.math.algebra import at_point, solve_max
from symbolic.math.userterms import CustomTerm
from symbolic.measured import predict
from symbolic.planning import pytorch
from symbolic.report import adapter, context, spec
from symbolic.report.typeset import Typesetter

SAVED = ("activations", "inputs", "logits")


@pytest.mark.parametrize("model", ["gpt2", "llama-3-8b", "qwen2-0.5b", "bert-base-uncased"])
@pytest.mark.parametrize("precision, attn, device", [
    ("fp32", "eager", "cpu"), ("bf16", "sdpa", "cuda"), ("fp32", "sdpa", "cpu"), ("bf16", "eager", "cuda"),
])
def test_plan_saved_bytes_are_the_prediction(model, precision, attn, device) -> None:
    plan = planning.plan(model, batch=2, seq=128, precision=precision, attn=attn, device=device,
                         activations="pytorch")
    expected = predict.activation_bytes(model, batch=2, seq=128, precision=precision, attn=attn, device=device)
    terms = plan.terms()
    assert plan.activation_bytes == expected["activation_bytes"] == sum(terms[k] for k in SAVED)
    assert plan.total == max(plan.phase_bytes().values()) and "master_weights" not in terms
    assert set(SAVED) <= set(plan.phase_terms()["forward"])
    bare = planning.plan(model, batch=2, seq=128, precision=precision, attn=attn, device=device,
                         activations="pytorch", runtime=False)
    assert bare.phase_bytes() == step_phase_bytes(bare)  # the PyTorch step's phases at the model's widths
    data = plan.as_dict()
    assert data["activation_bytes"] == plan.activation_bytes
    assert data["activations_pytorch"]["family"] == expected["family"]
    assert data["options"]["attn"] == attn and data["options"]["device"] == device and "flash" not in data["options"]


def step_phase_bytes(plan: planning.Plan) -> dict[str, int]:
    """``library.peak_pytorch.step``'s phases at the plan's point, each rounded up as the plan rounds."""
    step = pytorch.step_model(plan.model, plan.regime, plan.saved)
    ev = plan.evaluate()
    point = {**ev.values, **ev.derived}
    # the widths (d_head = H/a, ...) at the point, then every symbol at once: the same numbers as putting
    # the widths in first, without SymPy rebuilding each phase's max over symbols
    point = {**point, **{s: at_point(sympy.sympify(w), point) for s, w in plan.model.widths().items()}}
    resident = sum(math.ceil(at_point(t.expr, point)) for t in step.resident)
    return {name: resident + math.ceil(at_point(expr, point)) for name, expr in step.phase_extras().items()}


def test_one_formula_in_b_and_s() -> None:
    # runtime off: the allocator's fragmentation allowance is a share of the peak, a Max of the phases
    plan = planning.plan("gpt2", batch=4, seq=512, activations="pytorch", attn="eager", device="cuda", runtime=False)
    names = {s.name for s in plan.formula.inputs}
    assert {"B", "S", "H", "L", "a", "V", "N"} <= names
    b_sym = next(s for s in plan.formula.inputs if s.name == "B")
    s_sym = next(s for s in plan.formula.inputs if s.name == "S")
    # eager attention keeps the a·S² softmax per layer: the forward phase is quadratic in S, linear in B
    forward = sympy.expand(plan.phases["forward"].composed().subs(b_sym, b_sym + 2))  # B ≥ 2: past SDPA's B = 1 case
    assert sympy.degree(forward, s_sym) == 2 and sympy.degree(forward, b_sym) == 1
    assert plan.formula.diff("B") != 0
    sens = {x.symbol.name: x for x in plan.formula.sensitivity(plan.values, ["B", "S"])}
    assert sens["B"].elasticity > 0 and sens["S"].elasticity > sens["B"].elasticity
    answer = plan.solve("B", 80 * 2**30)
    assert answer.status == "ok" and answer.total_at_value <= 80 * 2**30 < answer.total_at_next


def test_defaults_and_dropout() -> None:
    plan = planning.plan("gpt2", activations="pytorch")
    r = plan.regime
    assert (r.precision, r.attn, r.device, r.dropout) == ("bf16", "sdpa", "cuda", True)
    assert {"precision", "attn", "device", "dropout"} <= set(r.defaulted)
    off = planning.plan("gpt2", activations="pytorch", dropout=False)
    assert off.saved.setup.dropout == frozenset() and off.activation_bytes < plan.activation_bytes
    llama = planning.plan("llama-3-8b", activations="pytorch", dropout=True)
    assert any("no dropout probability" in n for n in llama.notes)
    assert planning.DEFAULTS["attn"] == "sdpa" and planning.DEFAULTS["device"] == "cuda"
    assert planning.CHOICES["attn"] == ("eager", "sdpa") and planning.CHOICES["device"] == ("cpu", "cuda")
    assert "pytorch" in planning.CHOICES["activations"]


@pytest.mark.parametrize("options, message", [
    ({"optimizer": "lion"}, "models the optimizers adamw, sgd-momentum, sgd"),
    ({"optimizer": "adafactor"}, "(what was measured), not adafactor"),
    ({"tp": 2}, "does not model tensor parallelism (tp 2)"),
    ({"pp": 2}, "does not model pipeline parallelism (pp 2)"),
    ({"recompute": "selective"}, "does not model recompute selective"),
    ({"logits": "megatron"}, "logits megatron is not modelled"),
    ({"attn": "flash"}, "unknown attn 'flash'; choose from eager, sdpa"),
    ({"device": "tpu"}, "unknown device 'tpu'; choose from cpu, cuda"),
])
def test_what_is_not_modelled_is_a_one_line_error(options, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        planning.plan("llama-3-8b", activations="pytorch", **options)
    assert "\n" not in str(err.value)


def test_moe_and_inference_are_errors() -> None:
    with pytest.raises(ValueError, match="mixture-of-experts"):
        planning.plan("mixtral-8x7b", activations="pytorch")
    with pytest.raises(ValueError, match="attn applies to mode train"):
        planning.plan("gpt2", mode="infer", attn="eager", device="cpu")
    with pytest.raises(ValueError, match="device applies in mode infer to a torch module's forward"):  # a formula's
        planning.plan("gpt2", mode="infer", device="cpu")


def test_attn_and_device_change_nothing_elsewhere() -> None:
    plain = planning.plan("llama-3-8b")
    given = planning.plan("llama-3-8b", attn="eager", device="cpu")
    assert given.terms() == plain.terms() and "attn" not in given.regime.options()
    assert any("change nothing" in n for n in given.notes)
    flash = planning.plan("gpt2", activations="pytorch", flash=False)
    assert flash.terms() == planning.plan("gpt2", activations="pytorch").terms()
    assert any("flash does not apply" in n for n in flash.notes)


def test_zero_offload_and_custom_terms() -> None:
    plan = planning.plan("llama-3-8b", activations="pytorch", zero=3, dp=8, offload=True, seq=2048)
    terms = plan.terms()
    assert "zero3_gathered" in terms and plan.host is not None and plan.host_total > 0
    extra = plan.with_terms([CustomTerm("workspace", "k*B*S")], {"k": 3})
    assert extra.terms()["workspace"] == 3 * 2048 and extra.activation_bytes == plan.activation_bytes
    assert extra.total == plan.total + 3 * 2048


OPTIONS = dict(activations="pytorch", precision="bf16", attn="sdpa", device="cuda")  # the defaults, given


@pytest.fixture(scope="module")
def gpt2_l4_batch() -> planning.Answer:
    """The largest GPT-2 batch on an L4 at seq 1024, solved once for the planner and the CLI test.

    Module-scoped, so this module runs on one worker (tests/conftest.py), where the planner's
    per-process caches serve all of its tests.
    """
    return planning.fit_batch("gpt2", "l4", seq=1024, **OPTIONS)


def test_fit_questions(gpt2_l4_batch) -> None:
    options = OPTIONS
    batch = gpt2_l4_batch
    assert batch.status == "ok" and batch.plan.total <= batch.gpu.bytes < batch.next_total
    seq = planning.fit_seq("llama-3-8b", "h100-80gb", zero=3, dp=8, **{**options, "attn": "eager"})
    assert seq.status == "ok" and seq.plan.total <= seq.gpu.bytes < seq.next_total
    gpus = planning.fit_gpus("llama-3-8b", "h100-80gb", seq=8192, **options)
    assert gpus.status == "ok" and gpus.over == "dp" and gpus.plan.regime.zero == 3 and gpus.value > 1
    assert gpus.plan.total <= gpus.gpu.bytes
    one = planning.fit_gpus("llama-3-8b", "h200-141gb", seq=2048, **options)  # pure bf16 fits one H200 unsharded
    assert one.value == 1 and one.plan.regime.zero == 0 and one.plan.total <= one.gpu.bytes
    # SDPA's math fallback in fp32 on the CPU keeps more with B = 1 (a Max in B): still solvable
    odd = planning.fit_batch("gpt2", "l4", seq=1024, activations="pytorch", precision="fp32", device="cpu")
    assert odd.status == "ok" and odd.plan.total <= odd.gpu.bytes < odd.next_total
    at = planning.plan("gpt2", seq=1024, batch=odd.value + 1, activations="pytorch", precision="fp32", device="cpu")
    assert at.total > odd.gpu.bytes


def test_solve_max_through_a_max_at_small_values() -> None:
    x = sympy.Symbol("B")
    assert solve_max(100 * x - 1000 * sympy.Max(0, 2 - x), x, 1000).value == 10
    assert solve_max(100 * x + 50 * sympy.Max(0, 2 - x), x, 1000).value == 10
    with pytest.raises(ValueError, match="monotonically"):
        solve_max(100 * x + 1000 * sympy.Max(0, 3 - x), x, 3000)  # falls from 1 to 3, then grows
    # crossing beyond the integers compared one by one: a falling argument beside a sum growing faster is judged
    # with it (c + k·Max(a, b) = Max(c + k·a, c + k·b)), as an eager rebuilt layer's moment below B·S = H is
    assert solve_max(400 * x + sympy.Max(1000 * x, 300_000 - 300 * x), x, 400_000).value == 285
    assert solve_max(3 * (400 * x + sympy.Max(1000 * x, 300_000 - 300 * x)) / 2, x, 600_000).value == 285
    with pytest.raises(ValueError, match="monotonically"):
        solve_max(100 * x + sympy.Max(1000 * x, 300_000 - 300 * x), x, 400_000)  # falls to x = 230, then grows


def test_solve_max_through_maxima_that_fall_far_from_1() -> None:
    """FSDP2's buffers less the activations they free (max(0, a − b·S)) cross far past S = 1: the total is shown to
    grow piece by piece (it was 'cannot show that the total grows monotonically', and `fit --for seq --fsdp` and
    every report of an FSDP2 plan failed); a total that truly falls for a while is still refused."""
    x = sympy.Symbol("S")
    total = 50 * x + sympy.Max(0, 7000 - 13 * x) + sympy.Max(9 * x, 4000 - 2 * x + sympy.Max(0, 900 - x))
    values = [50 * n + max(0, 7000 - 13 * n) + max(9 * n, 4000 - 2 * n + max(0, 900 - n)) for n in range(1, 3000)]
    answer = max(n for n, v in enumerate(values, 1) if v <= 60_000)
    assert all(a <= b for a, b in zip(values, values[1:])) and solve_max(total, x, 60_000).value == answer
    with pytest.raises(ValueError, match="monotonically"):
        solve_max(100 * x + 1000 * sympy.Max(0, 300 - x), x, 10**6)  # falls from 1 to 300, then grows


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(-40, 40)), min_size=1, max_size=4),
       st.integers(0, 60), st.integers(1, 4000))
def test_a_trend_shown_holds_at_every_whole_number(pieces: list[tuple[int, int]], slope: int, budget: int) -> None:
    """Soundness of the piecewise trend: wherever solve_max answers, the total at the answer fits and one more does
    not, checked number by number past every crossing."""
    x = sympy.Symbol("S")
    total = slope * x + sympy.Add(*(sympy.Max(0, a - b * x) if b > 0 else sympy.Max(a, -b * x) for a, b in pieces))
    values = [slope * n + sum(max(0, a - b * n) if b > 0 else max(a, -b * n) for a, b in pieces)
              for n in range(1, 6000)]  # the same total in plain integers, past every crossing (a ≤ 5000)
    try:
        solution = solve_max(total, x, budget * 10)
    except ValueError:
        assert any(a > b for a, b in zip(values, values[1:]))  # refused only where it does fall somewhere
        return
    _holds(solution, values, budget * 10)


def _holds(solution: object, values: list[int], budget: int) -> None:
    """A solve_max answer checked against the total's values at 1, 2, …: what it says fits does, and no more."""
    if solution.status == "ok":
        assert all(v <= budget for v in values[:solution.value]) and values[solution.value] > budget
    elif solution.status in ("unbounded", "independent"):
        assert all(v <= budget for v in values)
    else:
        assert solution.status == "none" and values[0] > budget


POLY = st.tuples(st.integers(-50, 50), st.integers(-9, 9), st.integers(-3, 3), st.integers(-1, 1), st.integers(1, 40))
NODE = st.tuples(st.sampled_from(("max", "min")), st.lists(POLY, min_size=2, max_size=3),
                 st.lists(POLY, min_size=2, max_size=2) | st.just([]))


@settings(max_examples=20, deadline=None)
@given(st.lists(NODE, min_size=1, max_size=3), st.integers(0, 40), st.integers(1, 40_000))
def test_a_trend_shown_of_curved_nested_maxima_holds(nodes: list, slope: int, budget: int) -> None:
    """The piecewise trend with quadratic and cubic arguments (turns and crossings at whole numbers, where a piece
    can be flat for a step), Min beside Max, three arguments, and a nested Max/Min as an argument: a trend it shows
    holds at every whole number, and solve_max's answers hold; a refusal is allowed (unknown), a wrong claim not."""
    x = sympy.Symbol("S")

    def poly(c: tuple[int, ...], at: object) -> object:
        c0, c1, c2, c3, r = c
        return c0 * 1000 + c1 * 100 * at + c2 * 10 * (at - r) ** 2 + c3 * (at - r) ** 3

    def node(spec: tuple, at: object, pick: object) -> object:
        kind, args, inner = spec
        values = [poly(c, at) for c in args]
        if inner:
            values.append(pick(min if kind == "max" else max)(*[poly(c, at) for c in inner]))
        return pick(max if kind == "max" else min)(*values)

    def sym(f):
        return {max: sympy.Max, min: sympy.Min}[f] if f in (max, min) else f

    total = slope * 100 * x + sympy.Add(*(node(n, x, sym) for n in nodes))
    values = [slope * 100 * k + sum(node(n, k, lambda f: f) for n in nodes) for k in range(1, 4000)]
    trend = algebra._trend(total, x, 1)
    steps = [b - a for a, b in zip(values, values[1:])]
    if trend == "grows":
        assert all(d >= 0 for d in steps)
    elif trend == "falls":
        assert all(d <= 0 for d in steps)
    try:
        solution = solve_max(total, x, budget * 100)
    except ValueError:
        return
    _holds(solution, values, budget * 100)


def test_fit_seq_of_an_fsdp2_plan() -> None:
    """`fit --for seq --fsdp`: the answer fits and one token more does not, each checked against the plan itself."""
    options = {"batch": 2, "dp": 8, "fsdp": True}
    answer = planning.fit_seq("llama-3-8b", "h100-80gb", **options)
    assert answer.status == "ok" and answer.plan.total <= answer.limit.bytes
    assert planning.plan("llama-3-8b", seq=answer.value + 1, **options).total > answer.limit.bytes


# --- the command line --------------------------------------------------------------------------
def test_memory_with_gpu_formula_term_and_set(capsys) -> None:
    code, out, _ = run(capsys, "memory", "gpt2", "--activations", "pytorch", "--batch", "2", "--seq", "256",
                       "--gpu", "l4", "--formula", "--term", "workspace = k*B", "--set", "k=1024")
    assert code == 0
    assert "fits, headroom" in out and "formula: M_gpu = " in out and "where N = " in out
    assert "activation_bytes = " in out and "optimizer_temporaries" in out and "workspace" in out
    options = " ".join(out.split("(* = default)")[0].split())
    assert "attn sdpa*" in options and "device cuda*" in options and "flash" not in options
    code, out, _ = run(capsys, "memory", "gpt2", "--activations", "pytorch", "--batch", "2", "--seq", "256",
                       "--gpu", "l4", "--json", "--formula")
    data = json.loads(out)
    plan = planning.plan("gpt2", batch=2, seq=256, activations="pytorch")
    assert data["terms"] == plan.terms() and data["activation_bytes"] == plan.activation_bytes
    assert data["fits"] is True and data["headroom_bytes"] == data["gpu"]["bytes"] - plan.total
    assert set(SAVED) <= set(data["formula"]["terms"])


def test_fit_for_batch_seq_and_gpus(capsys, gpt2_l4_batch) -> None:
    code, out, _ = run(capsys, "fit", "gpt2", "--gpu", "l4", "--for", "batch", "--seq", "1024",
                       "--activations", "pytorch", "--json")
    data = json.loads(out)
    expected = gpt2_l4_batch  # the defaults (bf16, sdpa, cuda; test_defaults_and_dropout) given explicitly
    assert code == 0 and data["value"] == expected.value and data["options"]["activations"] == "pytorch"
    code, out, _ = run(capsys, "fit", "llama-3-8b", "--gpu", "h100-80gb", "--for", "seq", "--activations", "pytorch",
                       "--attn", "eager", "--zero", "3", "--dp", "8")
    assert code == 0 and "largest seq that fits h100-80gb" in out and "attn eager" in " ".join(out.split())
    code, out, _ = run(capsys, "fit", "llama-3-8b", "--gpu", "h100-80gb", "--for", "gpus", "--activations", "pytorch")
    assert code == 0 and "with ZeRO-3 fits" in out
    code, _, err = run(capsys, "fit", "llama-3-8b", "--gpu", "h100-80gb", "--for", "gpus", "--over", "tp",
                       "--activations", "pytorch")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "does not model tensor parallelism" in err


@pytest.mark.parametrize("argv, message", [
    (["memory", "gpt2", "--activations", "pytorch", "--optimizer", "adam-8bit"], "not adam-8bit"),
    (["memory", "gpt2", "--activations", "pytorch", "--pp", "2"], "pipeline parallelism"),
    (["memory", "gpt2", "--activations", "pytorch", "--recompute", "selective"], "recompute selective"),
    (["memory", "mixtral-8x7b", "--activations", "pytorch"], "mixture-of-experts"),
    (["memory", "gpt2", "--mode", "infer", "--device", "cpu"], "device applies in mode infer to a torch module's"),
])
def test_cli_errors_are_one_line(capsys, argv, message) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err


# --- reports -----------------------------------------------------------------------------------
def test_report_spec_with_pytorch_activations_builds_its_context(tmp_path) -> None:
    path = tmp_path / "pt.toml"
    path.write_text('title = "GPT-2 as PyTorch keeps it"\nmodel = "gpt2"\ngpus = ["l4"]\n[regime]\nbatch = 4\n'
                    'seq = 512\nprecision = "fp32"\nactivations = "pytorch"\nattn = "eager"\ndevice = "cpu"\n')
    report = spec.load(path)
    assert report.regime.options["activations"] == "pytorch" and report.regime.options["attn"] == "eager"
    scenario = adapter.scenario_for(report)
    plan = planning.plan("gpt2", batch=4, seq=512, precision="fp32", activations="pytorch", attn="eager",
                         device="cpu")
    assert scenario.formula.evaluate(scenario.given).total == plan.total
    assert [t.key for t in scenario.formula.terms] == [t.key for t in plan.formula.terms]
    ctx = context.build(report, scenario, Typesetter(), charts=False)
    text = json.dumps(ctx, default=str)
    assert f"{plan.total:,}" in text and "as PyTorch saves it (eager, cpu)" in text
    rows = {row.label: row for group in scenario.variants for row in group.rows}
    mine = rows["this report: as PyTorch saves it (eager, cpu)"]
    assert mine.chosen and mine.source == "pytorch" and mine.value == plan.terms()["activations"]


def test_report_spec_rejects_unknown_attn(tmp_path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('title = "x"\nmodel = "gpt2"\n[regime]\nactivations = "pytorch"\nattn = "flash"\n')
    with pytest.raises(spec.ReportSpecError, match="attn"):
        spec.load(path)
