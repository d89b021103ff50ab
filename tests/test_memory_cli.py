"""`symbolic memory`, `symbolic fit` and `symbolic gpus` as a user runs them: text, JSON, one-line errors."""

import json

import pytest
from helpers import run

from symbolic import catalogs, planning
from symbolic.cli import main


def test_memory_json_matches_the_planner(capsys) -> None:
    code, out, _ = run(capsys, "memory", "llama-3-8b", "--json")
    data = json.loads(out)
    plan = planning.plan("llama-3-8b")
    assert code == 0
    assert data["total_bytes"] == plan.total == max(data["phases"].values()) == data["phases"]["optimizer"]
    assert data["peak_phase"] == "optimizer" and data["peak_lead_bytes"] == plan.peak_lead > 0
    assert data["terms"] == plan.terms() and data["runtime_bytes"] == plan.runtime_bytes > 0
    code, out, _ = run(capsys, "memory", "llama-3-8b", "--no-runtime", "--json")
    bare = json.loads(out)
    assert bare["total_bytes"] == 22 * 8_030_261_248  # hand-checked in test_memory_planning
    assert data["total_bytes"] - bare["total_bytes"] == data["runtime_bytes"] and bare["runtime_bytes"] == 0
    assert data["options"]["precision"] == "bf16-mixed" and "precision" in data["defaults"]


def test_memory_with_gpu_reports_fit_and_headroom(capsys) -> None:
    code, out, _ = run(capsys, "memory", "llama-3-8b", "--zero", "3", "--dp", "8", "--gpu", "h100-80gb", "--json")
    data = json.loads(out)
    assert code == 0 and data["fits"] is True
    assert data["headroom_bytes"] == 85_520_809_984 - data["total_bytes"]
    assert data["gpu"]["name"] == "h100-80gb"


def test_memory_text_and_formula(capsys) -> None:
    code, out, _ = run(capsys, "memory", "llama-3-8b", "--gpu", "h100-80gb", "--formula")
    assert code == 0
    assert "optimizer_states" in out and "64,242,089,984" in out and "does NOT fit" in out
    assert "where N = " in out and "8·N" in out and "(* = default)" in out


def test_memory_inference_json(capsys) -> None:
    code, out, _ = run(capsys, "memory", "llama-3-8b", "--mode", "infer", "--seq", "8192", "--weights", "int4",
                       "--kv-dtype", "fp8", "--json", "--formula")
    data = json.loads(out)
    assert code == 0 and data["terms"]["kv_cache"] == 2**29
    assert "kv_cache" in data["formula"]["terms"]


def test_memory_note_for_zero_without_data_parallel(capsys) -> None:
    code, out, _ = run(capsys, "memory", "gpt2", "--zero", "2")
    assert code == 0 and "with dp 1 it changes nothing" in out


def test_fit_batch_seq_gpus_json(capsys) -> None:
    code, out, _ = run(capsys, "fit", "llama-3-8b", "--gpu", "h200-141gb", "--for", "batch", "--zero", "3",
                       "--dp", "8", "--json")
    data = json.loads(out)
    assert code == 0 and data["status"] == "ok" and data["value"] >= 1 and data["headroom_bytes"] >= 0
    code, out, _ = run(capsys, "fit", "gpt2", "--gpu", "t4", "--for", "seq", "--json")
    assert json.loads(out)["value"] == 1024
    code, out, _ = run(capsys, "fit", "llama-3-70b", "--gpu", "h100-80gb", "--for", "gpus", "--mode", "infer",
                       "--json")
    data = json.loads(out)
    assert data["over"] == "tp" and data["gpus"] == 2


def test_fit_text(capsys) -> None:
    code, out, _ = run(capsys, "fit", "llama-3-70b", "--gpu", "h100-80gb", "--for", "gpus", "--recompute", "full")
    assert code == 0 and "with ZeRO-3 fits h100-80gb" in out


def test_gpus_lists_the_catalogue(capsys) -> None:
    code, out, _ = run(capsys, "gpus", "--json")
    names = {g["name"] for g in json.loads(out)}
    assert code == 0 and {"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "l4", "rtx-4090", "mi300x"} <= names
    code, out, _ = run(capsys, "gpus")
    assert "85,520,809,984" in out and "nvidia-smi" in out
    h100 = next(line for line in out.splitlines() if line.startswith("h100-80gb "))
    gpu = catalogs.get("h100-80gb")  # the datasheet rates, printed in TFLOP/s and TB/s
    assert h100.split()[-2:] == [f"{gpu.flops['bf16'] / 1e12:,.1f}", f"{gpu.hbm_bandwidth / 1e12:,.2f}"]


@pytest.mark.parametrize(("argv", "message"), [
    (["memory", "llama-3-8b", "--tp", "3"], "must divide the 32 attention heads"),
    (["memory", "llama-3-8b", "--mode", "infer", "--optimizer", "adamw"], "applies to mode train"),
    (["memory", "llama-3-8b", "--weights", "int4"], "applies to mode infer"),
    (["memory", "llama-3-8b", "--zero", "3", "--pp", "2"], "pipeline"),
    (["memory", "llama-3-8b", "--offload"], "ZeRO"),
    (["memory", "llama-3-8b", "--gpu", "h300"], "unknown GPU"),
    (["memory", "no-such-model"], "unknown model"),
    (["memory", "llama-3-8b", "--batch", "0"], "whole number"),
    (["memory", "llama-3-8b", "--precision", "int8"], "invalid choice"),
    (["fit", "llama-3-8b", "--gpu", "h100-80gb", "--for", "batch", "--batch", "2"], "what is solved for"),
    (["fit", "llama-3-8b", "--gpu", "h100-80gb", "--for", "batch", "--over", "tp"], "--for gpus only"),
    (["fit", "llama-3-8b", "--gpu", "h100-80gb", "--for", "gpus", "--over", "dp", "--mode", "infer"], "replicas"),
])
def test_errors_are_one_line_exit_2(capsys, argv, message) -> None:
    code = main(argv)  # argparse's own errors (bad choice or number) included
    out, err = capsys.readouterr()
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1 and out == ""


@pytest.mark.parametrize("command", [
    ("memory",), ("fit", "--gpu", "h100-80gb", "--for", "batch"), ("time", "--gpu", "h100-80gb", "--mfu", "0.4"),
    ("plan", "--gpu", "h100-80gb", "--mfu", "0.4", "--gpus", "8", "--global-batch", "8"),
])
def test_a_sequence_past_the_planners_bound_is_refused(capsys, command) -> None:
    """--seq 1e9 answered in PiB with exit 0; past options.table.MAX_SEQ (2^27 tokens) it is one line, exit 2."""
    from symbolic.options.table import MAX_SEQ

    name, *flags = command
    for seq in ("1000000000", str(MAX_SEQ + 1)):
        code, out, err = run(capsys, name, "llama-3-8b", "--seq", seq, *flags)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert f"{MAX_SEQ:,}" in err and "Llama 4 Scout" in err
    with pytest.raises(planning.PlanOptionError, match="planner's bound"):
        planning.plan("llama-3-8b", seq=MAX_SEQ + 1)  # the Python API and the report's planner too


def test_the_bound_itself_is_planned(capsys) -> None:
    from symbolic.options.table import MAX_SEQ

    code, out, err = run(capsys, "memory", "llama-3-8b", "--seq", str(MAX_SEQ), "--json")
    assert code == 0 and json.loads(out)["values"]["S"] == MAX_SEQ and "trained for" in err


def test_validate_takes_the_same_bound_on_seq(capsys) -> None:
    """'validate' runs real steps at each --seq: past the planner's bound it is refused before anything is built."""
    code, out, err = run(capsys, "validate", "mlp", "--seq", "64,1000000000")
    assert code == 2 and out == "" and err.count("\n") == 1 and "argument --seq" in err and "134,217,728" in err


def test_memory_refuses_seq_for_a_network_without_a_sequence(capsys):
    """Article A's network takes samples, not tokens: --seq is refused in one line, as time refuses it."""
    code, out, err = run(capsys, "memory", "mlp", "--seq", "128")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "--seq applies" in err
