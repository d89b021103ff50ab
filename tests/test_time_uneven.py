"""`symbolic time` with pipeline stages split as torchtitan splits them (issue 28): the step runs at the slowest
rank's pace, its compute that rank's layers (and the head on the last stage), the bubble on that compute.
"""

from __future__ import annotations

import json

import pytest
from test_pipeline import LLAMA3_405B

from symbolic.planning import time as ptime

KW = {"mfu": 0.4, "seq": 8192, "recompute": "full", "sequence_parallel": True}


@pytest.fixture(scope="module")
def llama405(tmp_path_factory: pytest.TempPathFactory) -> str:
    config = tmp_path_factory.mktemp("time_uneven") / "config.json"
    config.write_text(json.dumps(LLAMA3_405B))
    return str(config)


def _even_compute(timed: ptime.TimePlan) -> float:
    """The compute term of FLOPs split evenly over t·p GPUs: F_tok · B · m · S / (t · p · F_peak · η)."""
    v = timed.values
    return float(v["F_tok"] * v["B"] * v["n_mb"] * v["S"] / (v["t"] * v["p"] * v["F_peak"] * v["mfu"]))


def test_405b_over_8_stages_runs_at_a_16_layer_stage(llama405: str) -> None:
    """126 layers over 8 stages (15/16/…/16/15): a 16-layer stage is slower than the last (15 layers + head)."""
    timed = ptime.train_time(llama405, "h100-80gb", tp=8, pp=8, dp=2, batch=1, microbatches=16, **KW)
    fl_ = ptime.flops(llama405, seq=KW["seq"], recompute=KW["recompute"])
    total = fl_.exact()
    head = 3 * 2 * LLAMA3_405B["vocab_size"] * LLAMA3_405B["hidden_size"]  # the output layer: forward + 2× backward
    layer = (total - head) / LLAMA3_405B["num_hidden_layers"]
    assert 16 * layer > 15 * layer + head  # the last stage's head does not make it the slowest
    terms = timed.as_dict()["step_terms"]
    even = _even_compute(timed)
    assert terms["compute"] == pytest.approx(even * float(8 * 16 * layer / total), rel=1e-12)
    assert terms["compute"] > even
    assert terms["bubble"] == pytest.approx(terms["compute"] * 7 / 16, rel=1e-12)  # (p − 1)/m of that compute


def test_the_even_split_when_the_layers_divide() -> None:
    """llama-3-8b's 32 layers over 4 stages, no schedule asked: FLOPs split evenly, as before."""
    timed = ptime.train_time("llama-3-8b", "h100-80gb", tp=2, pp=4, dp=1, batch=1, microbatches=8, **KW)
    assert ptime.slowest_stage(timed.memory, ptime.flops("llama-3-8b", seq=KW["seq"], recompute="full")) == 1
    assert timed.as_dict()["step_terms"]["compute"] == pytest.approx(_even_compute(timed), rel=1e-12)


def test_tp_and_ring_traffic_are_the_slowest_ranks_layers(llama405: str) -> None:
    """The 16-layer rank that sets the pace moves 16 layers' tensor-parallel all-reduces and ring K/V, not the
    average stage's L/p = 126/8 = 15.75 (library.timing's terms: 6 all-reduces a layer under full recompute, each
    2·(t − 1)/t of B·(S/c_p)·H; the ring's c_p − 1 K/V blocks 3× and the fp32 dK/dV, B·(S/c_p)·a·d_head/t each)."""
    timed = ptime.train_time(llama405, "h100-80gb", tp=8, pp=8, dp=1, cp=2, fsdp=True, batch=1, microbatches=16,
                             **KW)
    assert ptime.slowest_layers(timed.memory, ptime.flops(llama405, seq=KW["seq"], recompute="full")) == 16
    v, terms = timed.values, timed.as_dict()["step_terms"]
    t, cp, m, h = v["t"], v["c_p"], v["n_mb"], LLAMA3_405B["hidden_size"]
    tokens = v["B"] * KW["seq"] / cp
    tp = m * 16 * 6 * 2 * (t - 1) / t * 2 * tokens * h / v["W_tp"]
    block = tokens * h / t  # a·d_head = H for Llama 3.1 405B
    ring = m * 16 * (cp - 1) * (3 * 2 * 2 + 2 * 4) * block / v["W_cp"]
    assert terms["tp_comm"] == pytest.approx(float(tp), rel=1e-12)
    assert terms["cp_comm"] == pytest.approx(float(ring), rel=1e-12)
