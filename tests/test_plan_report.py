"""The report's plan section: the [plan] table is checked, the section shows what `symbolic plan` finds."""

from __future__ import annotations

import base64
import re

import pytest
from helpers import run

from symbolic.planning import search
from symbolic.report import plan_section
from symbolic.report import spec as report_spec
from symbolic.report.typeset import Typesetter

PLAN = {"gpus": 16, "global_batch": 256, "tokens": 1e11, "mfu": 0.4, "price": 2.5, "top": 4}
BASE = {"title": "plan", "model": "llama-3-8b", "gpus": ["h100-80gb"], "regime": {"seq": 4096}}


def test_plan_table_is_checked() -> None:
    spec = report_spec.parse({**BASE, "plan": PLAN})
    assert spec.plan == {**PLAN, "tokens": 100_000_000_000}
    assert report_spec.parse(BASE).plan is None
    for bad, message in (({**PLAN, "gpu_count": 3}, "unknown key"), ({**PLAN, "max_gpus": 64}, "exactly one of gpus"),
                         ({**PLAN, "achieved_tflops": 300}, "exactly one of mfu"),
                         ({**PLAN, "tokens": 1.5}, "whole number"), ({**PLAN, "objective": "fast"}, "one of time"),
                         ({k: v for k, v in PLAN.items() if k != "global_batch"}, "global_batch")):
        with pytest.raises(report_spec.ReportSpecError, match=message):
            report_spec.parse({**BASE, "plan": bad})


def test_section_shows_the_search_result() -> None:
    spec = report_spec.parse({**BASE, "plan": PLAN})
    (section,) = plan_section.build(spec, Typesetter(), charts=True)
    found = search.search("llama-3-8b", "h100-80gb", seq=4096, global_batch=256, gpus=16, tokens=10**11, mfu=0.4,
                          price=2.5, top=4)
    best = found.layouts[0]
    chosen = {row["cells"][0]["text"]: row["cells"][1]["text"] for row in section["chosen"][0]["rows"]}
    assert chosen["GPUs"] == f"16 (dp {best['dp']} × tp {best['tp']} × pp {best['pp']})"
    assert chosen["memory per GPU"].startswith(f"{best['memory_bytes']:,} bytes")
    assert chosen["cost"].startswith(f"{best['cost']:,.0f} USD")
    assert len(section["alternatives"][0]["rows"]) == 4
    assert section["charts"][0]["src"].startswith("data:image/svg+xml;base64,")
    assert f"{found.considered:,} layouts" in section["intro"]


def test_no_section_without_a_plan_table() -> None:
    assert plan_section.build(report_spec.parse(BASE), Typesetter()) == []


@pytest.mark.slow
def test_html_report_has_the_plan_section(tmp_path, capsys) -> None:
    path = tmp_path / "plan.toml"
    path.write_text('title = "plan"\nmodel = "llama-3-8b"\ngpus = ["h100-80gb"]\n[regime]\nseq = 4096\n[plan]\n'
                    'gpus = 16\nglobal_batch = 256\ntokens = 1e11\nmfu = 0.4\nprice = 2.5\n')
    out = tmp_path / "plan.html"
    code, _, err = run(capsys, "report", str(path), "--html", str(out), "-q")
    assert code == 0, err
    html = out.read_text()
    assert "Capacity plan: layout, time and cost" in html and "Alternatives that fit" in html
    charts = [base64.b64decode(c).decode() for c in re.findall(r"data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)", html)]
    # every chart, the plan's time-cost chart too, draws its glyphs in place (symbolic.report.svgglyphs)
    assert len(charts) >= 5 and all("<metadata>" in c and 'href="#DejaVuSans' not in c for c in charts)
