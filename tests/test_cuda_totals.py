"""CUDA's total per catalogue GPU: published readings, the median rule, and where the engines and planner read it."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import replace
from decimal import Decimal

import pytest
from helpers import run

from symbolic.catalogs import GPUS, make_budget
from symbolic.catalogs.cuda_totals import READINGS, chosen
from symbolic.core.sources import SOURCES


def _bytes(value: str | int) -> int:
    return value if isinstance(value, int) else int(Decimal(value) * 2**30)


@pytest.mark.parametrize("name", sorted(READINGS))
def test_each_cuda_total_is_the_low_median_of_its_readings(name):
    # the rule (catalogs.cuda_totals): median, the lower middle reading for an even count
    readings = READINGS[name]
    assert GPUS[name].cuda_bytes == statistics.median_low(_bytes(v) for v, _ in readings) == chosen(readings)


@pytest.mark.parametrize("name", sorted(READINGS))
def test_each_reading_names_where_it_was_printed(name):
    for _, source in READINGS[name]:
        assert source.startswith("https://github.com/") or "llm-d-vllm-memory" in source


@pytest.mark.parametrize("name", sorted(READINGS))
def test_cuda_total_is_below_nvidia_smi_total(name):
    # CUDA leaves out what the driver keeps: every published reading is below nvidia-smi's memory.total
    assert GPUS[name].cuda_bytes < GPUS[name].bytes


def test_h100_total_is_llm_d_reading():
    # four readings (79.11, 79.18, 79.22, 79.22 GiB): the lower middle is llm-d's 79.18 GiB, which the vLLM tests cite
    assert "llm-d-vllm-memory" in SOURCES
    assert GPUS["h100-80gb"].cuda_bytes == int(Decimal("79.18") * 2**30)


def test_a_size_and_a_rocm_total_are_their_own_cuda_total():
    assert make_budget("79.18GiB").gpu.cuda_total == make_budget("79.18GiB").capacity
    assert GPUS["mi300x"].cuda_total == GPUS["mi300x"].bytes


def test_training_budget_keeps_nvidia_smi_and_the_engine_view_is_cuda():
    budget = make_budget("h100-80gb", fraction="0.9")
    assert budget.capacity == 81559 * 2**20  # nvidia-smi's memory.total, as the catalogue quotes it
    engine = budget.over_cuda()
    assert engine.capacity == GPUS["h100-80gb"].cuda_bytes and engine.fraction == budget.fraction


def test_a_catalogue_gpu_without_a_reading_keeps_its_total(monkeypatch):
    # every catalogue GPU has a reading today; an entry added without one keeps nvidia-smi's total
    monkeypatch.setitem(GPUS, "h100-94gb", replace(GPUS["h100-94gb"], cuda_bytes=None, cuda_source=None))
    assert make_budget("h100-94gb").over_cuda() == make_budget("h100-94gb")


def test_gpus_command_shows_the_cuda_column_and_json_field(capsys):
    code, out, _ = run(capsys, "gpus")
    assert code == 0 and "CUDA GiB" in out.splitlines()[0]
    row = next(line for line in out.splitlines() if line.startswith("h100-80gb"))
    assert re.search(r"\b79\.18\b", row)
    code, out, _ = run(capsys, "gpus", "--json")
    data = {g["name"]: g for g in json.loads(out)}
    assert data["h100-80gb"]["cuda_bytes"] == GPUS["h100-80gb"].cuda_bytes and data["h100-94gb"]["cuda_bytes"] == 93 * 2**30
    assert "median" in data["h100-80gb"]["cuda_source"]
