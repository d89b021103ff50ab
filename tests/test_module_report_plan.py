"""A report's ``[plan]`` section for a torch module model equals ``symbolic plan`` with the same flags (issue 29).

torch runs in ``module_report_plan_child.py`` (the test process never imports it). The expected figures come from
``symbolic plan --json`` run there with the flags the specification's ``[module]``, ``[regime]`` and ``[plan]``
tables give.
"""

from __future__ import annotations

import json
import re

import pytest
from helpers import torch_child

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("module_report_plan_child.py")


def test_the_sections_best_layout_is_the_plans(child: dict) -> None:
    """The module's probed network and no seq: the chosen layout's memory and the counts of layouts are the plan's."""
    report, plan = child["report"], child["plan"]
    assert report["code"] == 0, report["err"]
    assert plan["code"] == 0, plan["err"]
    searched = json.loads(plan["out"])
    memory = re.search(r"memory per GPU & ([\d,]+) bytes", report["tex"])
    assert memory is not None
    assert int(memory.group(1).replace(",", "")) == searched["layouts"][0]["memory_bytes"]
    counts = re.search(r"([\d,]+) layouts of .*?; ([\d,]+) fit", report["tex"])
    assert counts is not None
    assert (int(counts.group(1).replace(",", "")), int(counts.group(2).replace(",", ""))) == (
        searched["considered"], searched["fitting"])
    assert "8 samples per step" in report["tex"]  # no token sequence: a token of the figures is one sample


def test_a_seq_for_a_module_is_refused_in_one_line(child: dict) -> None:
    """A network without a token sequence takes no seq: one line, exit 2, as ``symbolic plan --seq``."""
    done = child["seq"]
    assert done["code"] == 2
    assert done["err"].count("\n") == 1 and "seq applies to a network that takes a token sequence" in done["err"]
