"""The report's ``[serve]`` section (issue 27): checked keys, the torch engine's numbers, the formats, the chart."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import run

import symbolic
from symbolic.report import serve_section
from symbolic.report import spec as report_spec
from symbolic.report.typeset import Typesetter

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
SERVE = {"engine": "torch", "seq": 8192, "batch": 8, "formats": ["bf16", "int8", "int4"], "prefill_chunk": 2048}
BASE = {"title": "serve", "model": "llama-3-8b", "mode": "infer", "gpus": ["h100-80gb"], "regime": {"seq": 8192}}
# the example specifications of the other engines (tests/test_report_examples.py builds them)
EXAMPLES = ("gpt-oss-120b-vllm-h200.toml", "llama-3.1-70b-q4km-llamacpp.toml")


def _cells(table: dict) -> dict[str, list[str]]:
    return {row["cells"][0]["text"]: [c["text"] for c in row["cells"][1:]] for row in table["rows"]}


def test_serve_table_is_checked() -> None:
    spec = report_spec.parse({**BASE, "serve": SERVE})
    assert spec.serve["engine"] == "torch" and spec.serve["settings"] == {"prefill_chunk": 2048}
    assert spec.serve["formats"] == ("bf16", "int8", "int4")
    assert report_spec.parse(BASE).serve is None
    for bad, message in (({**SERVE, "engin": "vllm"}, "serve.engin: unknown key"),
                         ({**SERVE, "engine": "tgi"}, "'tgi' is not one of torch"),
                         ({**SERVE, "gpu_memory_utilization": 0.9}, "gpu_memory_utilization is a flag of vllm, not of "
                                                                    "engine torch"),
                         ({"engine": "vllm", "gpu_memory_utilization": 1.5}, "above 0 and at most 1"),
                         ({**SERVE, "formats": ["bf16", "bf16; rm"]}, "serve.formats: 'bf16; rm' is not a format name"),
                         ({**SERVE, "seq": 0}, "whole number"),
                         ({**SERVE, "gpus": 2, "tp": 2}, "not both")):
        with pytest.raises(report_spec.ReportSpecError, match=message) as err:
            report_spec.parse({**BASE, "serve": bad})
        assert "\n" not in str(err.value)


def test_section_shows_the_engines_answer() -> None:
    spec = report_spec.parse({**BASE, "serve": SERVE})
    (section,) = serve_section.build(spec, Typesetter(), charts=True)
    plan = symbolic.serve("llama-3-8b", "torch", "h100-80gb", seq=8192, batch=8, prefill_chunk=2048)
    memory = _cells(section["memory"][0])
    assert memory["KV pool"][1] == f"{plan.kv_cache_bytes:,}" and f"{plan.kv_cache_tokens:,} tokens" in memory["KV pool"][0]
    assert memory["non-KV"][1] == f"{plan.non_kv_bytes:,}" and memory["budget"][1] == f"{plan.budget_bytes:,}"
    assert memory["kv_cache"][1] == f"{plan.term_bytes()['kv_cache']:,}" and memory["kv_cache"][3] == "shazeer2019"
    settings = _cells(section["settings"][0])
    assert settings["prefill_chunk"] == ["2,048"] and settings["prefill"] == ["chunks of 2,048 tokens"]
    assert f"Maximum concurrency at 8,192 tokens per request: {plan.max_concurrency}." in section["answers"]
    assert f"{plan.max_concurrency} requests of 8,192 tokens at once" in section["summary"]
    formats = _cells(section["formats"][0])
    for fmt in ("int8", "int4"):
        other = symbolic.serve("llama-3-8b", "torch", "h100-80gb", seq=8192, batch=8, prefill_chunk=2048, weights=fmt)
        assert formats[fmt] == [f"{other.weights_bytes:,}", formats[fmt][1], "yes", str(other.max_concurrency)]
    assert section["charts"][0]["src"].startswith("data:image/svg+xml;base64,")


def test_a_format_the_engine_cannot_start_with_is_a_row_that_does_not_fit() -> None:
    # vLLM stops when the weights leave no KV memory (gpt-oss-120b in bf16 on one H200): the row says so, with the
    # weights' bytes as stored (networks.stored), instead of failing the whole report
    from symbolic.networks.network import load
    from symbolic.networks.stored import weight_bytes

    serve = {"engine": "vllm", "seq": 32768, "max_model_len": 32768, "formats": ["bf16", "mxfp4"]}
    spec = report_spec.parse({**BASE, "model": "gpt-oss-120b", "gpus": ["h200-141gb"], "serve": serve})
    (section,) = serve_section.build(spec, Typesetter(), charts=False)
    formats = _cells(section["formats"][0])
    assert formats["bf16"][0] == f"{weight_bytes(load('gpt-oss-120b'), 'bf16'):,}" and formats["bf16"][2] == "no"
    assert formats["mxfp4"][2] == "yes"


def test_no_section_without_a_serve_table() -> None:
    assert serve_section.build(report_spec.parse(BASE), Typesetter()) == []


@pytest.mark.parametrize("name", EXAMPLES)
def test_engine_example_specifications_parse(name: str) -> None:
    path = ROOT / "reports" / name
    spec = report_spec.load(path)
    assert spec.serve is not None and spec.serve["engine"] in ("vllm", "llamacpp")
    assert tomllib.loads(path.read_text(encoding="utf-8"))["serve"]["engine"] == spec.serve["engine"]


@pytest.mark.slow
def test_html_report_has_the_serve_section(tmp_path, capsys) -> None:
    path = tmp_path / "serve.toml"
    path.write_text('title = "serve"\nmodel = "llama-3-8b"\nmode = "infer"\ngpus = ["h100-80gb"]\n[regime]\n'
                    'seq = 8192\n[serve]\nseq = 8192\nformats = ["bf16", "int4"]\n')
    out = tmp_path / "serve.html"
    code, _, err = run(capsys, "report", str(path), "--html", str(out), "-q")
    assert code == 0, err
    html = out.read_text()
    assert "Serving: weights, KV pool and concurrency" in html and "Weight formats compared" in html
    assert "requests at once against tokens per request" in html
