"""Any nn.Module as a Network (issue 29): a user's PATH.py:NAME probed on the meta device.

torch runs in ``modules_child.py`` (the test process never imports it). Every expected number
comes from torch on the CPU there (``measure.step_peak``, ``measure.saved_tensors``,
``sum(p.numel())``) or from article A's own formulas.
"""

from __future__ import annotations

import json

import pytest
from helpers import torch_child

from symbolic.networks.module import cache, files, probe

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("modules_child.py")


def _close(plan: dict, measured: dict) -> None:
    """Parameters exact, saved bytes within 1 %, the step's peak within 2 %."""
    assert plan["params"] == measured["params"]
    assert abs(plan["saved"] - measured["saved"]) <= 0.01 * measured["saved"]
    assert abs(plan["peak"] - measured["peak"]) <= 0.02 * measured["peak"]


def test_article_a_at_other_widths_equals_its_formulas(child: dict) -> None:
    out = child["article_a"]
    assert out["same_params"]  # the probed formula is article A's, symbol for symbol
    for batch in ("5", "17"):
        (saved, total), (a_saved, a_total) = out[batch]["module"], out[batch]["article"]
        assert saved == a_saved
        # article A's step has its int64 targets held by the caller (8·B); a module's loss makes its own in the step
        assert abs(total - a_total) <= 8 * int(batch)


def test_cnn_with_batch_norm_against_a_cpu_step(child: dict) -> None:
    out = child["cnn"]
    _close(out["plan"], out["measured"])  # at H=40, W=24: the fit used 16, 32, 48 and checked 80
    assert "buffers" in out["plan"]["terms"]  # batch norm's running statistics
    assert out["symbols"] == ["B", "H", "W"]


def test_dropout_mlp_keeps_masks_and_matches_the_cpu(child: dict) -> None:
    out = child["dropout"]
    _close(out["plan"], out["measured"])
    _close(out["sgd"], out["sgd_measured"])


def test_attention_scores_are_b_s_squared(child: dict) -> None:
    out = child["attention"]
    assert out["degree_s"] == 2
    _close(out["plan"], out["measured"])


def test_second_ask_reads_the_cache(child: dict) -> None:
    assert child["cached"] == {"params": True, "step": True}


def test_what_cannot_apply_is_refused(child: dict) -> None:
    out = child["refusals"]
    assert "tensor parallelism" in out["tp"] and "LoRA" in out["lora"]  # bf16-mixed: test_module_autocast.py


NEEDLES = {"no-file": "no such file", "no-name": "does not define", "not-module": "not a torch.nn.Module",
           "raises": "ValueError: no such layer", "shape": "raised", "data": "meta device",
           "no-loss": "scalar loss", "dimension": "dimension", "not-a-module-model": "--arg applies"}


@pytest.mark.parametrize("name", sorted(NEEDLES))
def test_bad_input_is_one_line_exit_2(child: dict, name: str) -> None:
    done = child["cli"]["bad"][name]
    lines = done["err"].strip().splitlines()
    assert done["code"] == 2, done["err"]
    assert len(lines) == 1 and NEEDLES[name] in lines[0] and "Traceback" not in done["err"]


def test_cli_params_and_memory(child: dict) -> None:
    out = child["cli"]
    assert out["params"]["code"] == 0 and f"{out['params_count']:,} parameters" in out["params"]["out"]
    assert out["mlp"]["code"] == 0 and f"{out['mlp_total']:,} bytes" in out["mlp"]["out"]
    options = out["memory"]["out"].split("(* = default)")[0]  # the options line names the module's own loss
    assert out["memory"]["code"] == 0 and "loss mean" in options and "cross-entropy" not in options
    data = json.loads(out["memory_json"]["out"])  # --json says the same
    assert data["options"]["loss"] == "mean" and "loss" not in data["defaults"]


def test_cache_is_plain_data_and_bounded(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYMBOLIC_CACHE", str(tmp_path))
    monkeypatch.setattr(cache, "LIMIT", 2)
    for i in range(4):
        cache.write(f"entry{i}", {"x": i})
    kept = sorted(p.stem for p in cache.folder().glob("*.json"))
    assert len(kept) == 2 and cache.read(kept[-1])["x"] in (2, 3)
    with pytest.raises(ValueError):
        cache.fraction("__import__('os')")  # coefficients are read by Fraction, never evaluated


def test_values_are_never_evaluated() -> None:
    assert files.parse_value("2+2") == "2+2"
    assert files.parse_value("7") == 7 and files.parse_value("true") is True and files.parse_value("0.5") == 0.5


def _synthetic_fit(moments: list, base: list[int], factors: tuple[int, ...] = probe.SIZE_FACTORS) -> tuple:
    """Traces whose forward moments are the given functions of (B, H), fitted the way ``fit_step`` fits them."""
    exps = probe.monomials(len(base))
    points = probe.grid(base, factors)
    inv = probe.inverse(points, exps)
    traces = [probe.Trace({}, [m(*p) for m in moments], [0], 0) for p in points]
    return probe._moments(traces, "forward", lambda v: probe.Poly.of(probe.solve(inv, v), exps)), points, traces


def test_a_phase_peak_keeps_every_moment_that_can_win() -> None:
    """6B + 2H² wins only where B ≥ 4 and H is moderate: at no probe point, yet at the check's (5, 20).

    The expected peak is the largest of the moments themselves (synthetic, not measured).
    """
    moments = [lambda b, h: 20 + 2 * h * h, lambda b, h: 6 * b * h - 2, lambda b, h: 6 * b + 2 * h * h]
    polys, _, _ = _synthetic_fit(moments, [4])
    for point in [(5, 20), (4, 9), (2, 4), (1000, 3), (3, 1000)]:
        assert max(p.at(point) for p in polys) == max(m(*point) for m in moments)


def test_operators_that_differ_only_at_the_sizes_themselves_are_seen() -> None:
    """A ViT's forward at its own image size runs fewer operators (no interpolation): the fit moves off it."""
    base = [64]
    points = probe.grid(base)
    traces = [probe.Trace({}, [1] * (59 if p[1] == 64 else 61), [1], 0) for p in points]
    assert probe._changes_at_base(traces, points, base)
    same = [probe.Trace({}, [1] * 61, [1], 0) for _ in points]
    assert not probe._changes_at_base(same, points, base)
