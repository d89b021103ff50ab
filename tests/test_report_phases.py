"""Issue 13, reports: the summary names the phase that sets the peak, its lead and the runtime's share;
the breakdown says which phase each term is alive in and gives each phase's total, in HTML and .tex.

Every expected number comes from ``symbolic.planning`` (the same plan the report is built from),
never from the report itself; specifications are written to tmp_path and built without typesetting.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from symbolic import planning
from symbolic.core.units import format_bytes
from symbolic.planning.build import runtime_keys
from symbolic.report import adapter, context, render, spec
from symbolic.report.texescape import escape
from symbolic.report.typeset import Typesetter

TRAIN = '''title = "Phases"
model = "llama-3-8b"
mode = "train"
gpus = ["h100-80gb"]
[regime]
batch = 1
seq = 4096
'''
TRAIN_OPTIONS = {"batch": 1, "seq": 4096}


def _build(tmp_path: Path, body: str, name: str = "r.toml") -> tuple[object, dict]:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    report_spec = spec.load(path)
    scenario = adapter.scenario_for(report_spec)
    return scenario, context.build(report_spec, scenario, Typesetter(), charts=False)


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _rows(ctx: dict) -> list[list[str]]:
    return [[c["text"] for c in row["cells"]] for row in ctx["breakdown"]["table"]["rows"]]


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    scenario, ctx = _build(tmp_path_factory.mktemp("train"), TRAIN)
    return {"scenario": scenario, "ctx": ctx, "plan": planning.plan("llama-3-8b", mode="train", **TRAIN_OPTIONS),
            "tex": render.render_tex(ctx), "html": render.render_html(ctx)}


def test_summary_names_the_peak_phase_its_lead_and_the_runner_up(train):
    plan = train["plan"]
    ranked = sorted(plan.phase_bytes().items(), key=lambda kv: -kv[1])
    peak = train["ctx"]["summary"]["peak"]
    assert peak["phase"] == plan.peak_phase == ranked[0][0]
    assert peak["runner_up"] == ranked[1][0]
    # the plan rounds each term up to a byte, the report keeps them exact: at most a byte a term apart
    assert abs(_number(peak["lead_bytes"]) - plan.peak_lead) <= len(plan.terms())
    sentence = next(p for p in train["ctx"]["summary"]["points"] if p.startswith("Peak:"))
    assert f"the {plan.peak_phase} phase sets it, {format_bytes(plan.peak_lead)}" in sentence
    assert f"more than {ranked[1][0]}" in sentence
    for name, value in plan.phase_bytes().items():
        assert f"{name} {format_bytes(value)}" in sentence


def test_summary_gives_the_runtime_share_and_how_to_leave_it_out(train):
    plan = train["plan"]
    assert plan.runtime_bytes > 0
    sentence = next(p for p in train["ctx"]["summary"]["points"] if p.startswith("Runtime:"))
    share = plan.runtime_bytes / plan.total * 100
    assert f"{format_bytes(plan.runtime_bytes)} ({share:.1f} % of the total)" in sentence
    assert "runtime = false" in sentence and "--no-runtime" in sentence
    keys = [k for k in plan.resident_keys if k in runtime_keys()]
    assert ", ".join(keys) in sentence
    # the planner's own runtime note is not repeated as a caveat
    assert sum("runtime" in p.lower() and "leaves it out" in p for p in train["ctx"]["summary"]["points"]) == 1


def test_no_runtime_regime_says_it_is_left_out(tmp_path):
    scenario, ctx = _build(tmp_path, TRAIN + "runtime = false\n")
    plan = planning.plan("llama-3-8b", mode="train", runtime=False, **TRAIN_OPTIONS)
    assert plan.runtime_bytes == 0
    sentence = next(p for p in ctx["summary"]["points"] if p.startswith("Runtime:"))
    assert sentence.startswith("Runtime: left out") and "runtime = false" in sentence
    keys = set(runtime_keys())
    assert not keys & {t.key for t in scenario.formula.terms}
    assert not any(row[0].startswith("CUDA context") for row in _rows(ctx))


def test_breakdown_says_where_each_term_is_alive(train):
    plan = train["plan"]
    where = plan.layout.where()
    titles = {t.key: t.title for t in plan._components().terms}
    rows = {row[0]: row for row in _rows(train["ctx"])}
    assert train["ctx"]["breakdown"]["table"]["columns"][5]["title"] == "alive in"
    for key, phases in where.items():
        assert rows[titles[key]][5] == ", ".join(phases)
        assert abs(_number(rows[titles[key]][2]) - plan.terms()[key]) <= 1  # fractional terms: exact vs rounded up
    assert "peak" not in {row[0] for row in _rows(train["ctx"])}  # the max term gives way to its phases


def test_breakdown_phase_rows_add_up_to_the_peak(train):
    plan = train["plan"]
    rows = _rows(train["ctx"])
    where = plan.layout.where()
    titles = {t.key: t.title for t in plan._components().terms}
    by_title = {row[0]: row for row in rows}
    exact = {t.key: v for t, v in plan.evaluate_terms().terms}
    for name, terms in plan.phase_terms().items():
        label = f"{name} phase" + (" (sets the peak)" if name == plan.peak_phase else "")
        row = by_title[label]
        expected = sum(v for k, v in exact.items() if "resident" in where[k]) + sum(exact[k] for k in terms)
        assert row[2] == context.count(expected)
        assert row[1] == "resident + " + ", ".join(terms)
        assert abs(_number(row[2]) - plan.phase_bytes()[name]) <= len(plan.terms())
    total = by_title[f"total (peak: {plan.peak_phase})"]
    assert total[2] == by_title[f"{plan.peak_phase} phase (sets the peak)"][2]
    assert total[2] == context.count(plan.evaluate().total)
    # shares are given for the terms alive at the peak, and they add up to 100 %
    at_peak = [k for k, phases in where.items() if "resident" in phases or plan.peak_phase in phases]
    shares = [float(by_title[titles[k]][4].split()[0]) for k in at_peak]
    assert sum(shares) == pytest.approx(100, abs=0.1 * len(shares))
    assert all(by_title[titles[k]][4] == "—" for k in where if k not in at_peak)


def test_tex_and_html_show_the_phases(train):
    plan = train["plan"]
    tex, page = train["tex"], train["html"]
    for text in (tex, page):
        assert "alive in" in text and f"total (peak: {plan.peak_phase})" in text
        assert f"{plan.peak_phase} phase (sets the peak)" in text
    body = tex[tex.index("section*{Breakdown}"):]
    assert re.search(r"\\midrule\s*resident terms &", body)
    assert re.search(r"\\midrule\s*total \(peak: " + plan.peak_phase, body)
    assert "-{}-no-runtime" in tex and "--no-runtime" not in tex  # two hyphens, not an en dash
    assert '<tr class="phase peak-phase">' in page
    assert f"the {plan.peak_phase} phase sets it" in tex and f"the {plan.peak_phase} phase sets it" in page


def test_serving_report_has_prefill_and_decode(tmp_path):
    body = TRAIN.replace('mode = "train"', 'mode = "infer"')
    scenario, ctx = _build(tmp_path, body)
    plan = planning.plan("llama-3-8b", mode="infer", **TRAIN_OPTIONS)
    assert set(plan.phase_bytes()) == {"prefill", "decode"}
    assert ctx["summary"]["peak"]["phase"] == plan.peak_phase
    alive = {row[5] for row in _rows(ctx)}
    assert {"resident", "prefill", "decode"} <= alive | {p for a in alive for p in a.split(", ")}
    labels = [row[0] for row in _rows(ctx)]
    assert f"{plan.peak_phase} phase (sets the peak)" in labels


def test_custom_terms_are_resident_and_the_peak_stays_the_total(tmp_path):
    scenario, ctx = _build(tmp_path, TRAIN + '[[terms]]\nname = "lora"\nexpr = "2*r*H*L*k"\n\n[values]\nr = 16\n'
                                            'k = 8\n')
    rows = {row[0]: row for row in _rows(ctx)}
    lora = next(row for title, row in rows.items() if "lora" in title)
    assert lora[5] == "resident" and _number(lora[2]) == 2 * 16 * 4096 * 32 * 8
    peak = ctx["summary"]["peak"]["phase"]
    assert rows[f"total (peak: {peak})"][2] == rows[f"{peak} phase (sets the peak)"][2]
    assert rows[f"total (peak: {peak})"][2] == context.count(scenario.evaluate().total)


def test_article_reports_keep_their_plain_breakdown(tmp_path):
    scenario, ctx = _build(tmp_path, 'title = "a"\nmodel = "article-a"\n')
    assert scenario.phases is None and ctx["summary"]["peak"] == {}
    assert [c["title"] for c in ctx["breakdown"]["table"]["columns"]][5] == "source"
    assert not any(p.startswith(("Peak:", "Runtime:")) for p in ctx["summary"]["points"])


def test_escape_keeps_double_hyphens():
    assert escape("--no-runtime") == "-{}-no-runtime"
    assert escape("a---b") == "a-{}-{}-b"
    assert escape("–") == "--"  # an en dash is still typeset as one
