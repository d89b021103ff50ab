"""`symbolic time`: the JSON keys the issue names, text and formulas, the catalogue's rates, one-line errors."""

from __future__ import annotations

import json

import pytest
from helpers import run

from symbolic import catalogs, library
from symbolic.planning import time as ptime

TRAIN = ("llama-3-8b", "--gpu", "h100-80gb", "--gpus", "16", "--tp", "2", "--seq", "4096", "--microbatches", "4",
         "--tokens", "1e11", "--mfu", "0.4", "--price", "2.5")


def test_time_train_json_has_every_figure(capsys) -> None:
    code, out, err = run(capsys, "time", *TRAIN, "--json")
    assert code == 0, err
    data = json.loads(out)
    for key in ("flops_per_token", "flops_per_step", "step_seconds", "tokens_per_second", "train_seconds",
                "gpu_hours", "cost"):
        assert data[key] > 0, key
    assert data["options"]["dp"] == 8 and data["gpus"] == 16
    tokens_step = 8 * 1 * 4 * 4096
    assert data["tokens_per_step"] == tokens_step
    assert data["flops_per_step"] == pytest.approx(data["flops_per_token"] * tokens_step, rel=1e-12)
    assert data["tokens_per_second"] == pytest.approx(tokens_step / data["step_seconds"], rel=1e-12)
    assert data["train_seconds"] == pytest.approx(1e11 / data["tokens_per_second"], rel=1e-12)
    assert data["gpu_hours"] == pytest.approx(data["train_seconds"] * 16 / 3600, rel=1e-12)
    assert data["cost"] == pytest.approx(data["gpu_hours"] * 2.5, rel=1e-12)
    assert sum(data["step_terms"].values()) == pytest.approx(data["step_seconds"], rel=1e-12)
    # the memory is what `symbolic memory` prints for the same flags
    code, out, _ = run(capsys, "memory", "llama-3-8b", "--dp", "8", "--tp", "2", "--seq", "4096", "--microbatches",
                       "4", "--json")
    assert json.loads(out)["total_bytes"] == data["memory_bytes"]


def test_time_compute_term_is_flops_over_peak_times_mfu(capsys) -> None:
    code, out, _ = run(capsys, "time", *TRAIN, "--json")
    data = json.loads(out)
    # H100 SXM5 datasheet: 1,979 TFLOP/s BF16 with sparsity → 989.5 dense
    per_gpu = data["flops_per_step"] / 16
    assert data["step_terms"]["compute"] == pytest.approx(per_gpu / (989.5e12 * 0.4), rel=1e-12)
    # tp 2 inside one node: NVLink 900 GB/s total → 450 GB/s per direction; 4 all-reduces per layer
    ring = 2 * (2 - 1) / 2
    tp_bytes = 4 * 32 * 4 * ring * 2 * 1 * 4096 * 4096  # m · L · 4 · 2(t−1)/t · 2 bytes · B·S·H
    assert data["step_terms"]["tp_comm"] == pytest.approx(tp_bytes / 450e9, rel=1e-12)
    assert data["step_terms"]["bubble"] == 0 and data["step_terms"]["pp_comm"] == 0


def test_time_achieved_rate_is_flops_over_gpus_times_x(capsys) -> None:
    code, out, _ = run(capsys, "time", "llama-3-8b", "--gpu", "h100-80gb", "--gpus", "8", "--seq", "4096",
                       "--achieved-tflops", "400", "--tokens", "1e10", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["step_seconds"] == pytest.approx(data["flops_per_step"] / (8 * 400e12), rel=1e-12)
    assert data["achieved_tflops"] == pytest.approx(400, rel=1e-12)


def test_time_infer_json(capsys) -> None:
    code, out, err = run(capsys, "time", "llama-3-8b", "--mode", "infer", "--gpu", "h100-80gb", "--batch", "4", "--seq",
                         "2048", "--mfu", "0.5", "--json")
    assert code == 0, err
    data = json.loads(out)
    for key in ("flops_per_token", "prefill_seconds", "decode_tokens_per_second", "tokens_per_second",
                "max_concurrency"):
        assert data[key] > 0, key
    assert data["decode_tokens_per_second"] <= data["bandwidth_bound_tokens_per_second"] * (1 + 1e-12)
    code, out, _ = run(capsys, "time", "llama-3-8b", "--mode", "infer", "--gpu", "h100-80gb", "--batch", "4", "--seq",
                       "2048", "--mfu", "0.5", "--dp", "2", "--tokens", "1e9", "--price", "2", "--json")
    two = json.loads(out)
    assert two["tokens_per_second"] == pytest.approx(2 * data["tokens_per_second"], rel=1e-12)
    assert two["total_seconds"] == pytest.approx(1e9 / two["tokens_per_second"], rel=1e-12)
    assert two["cost"] == pytest.approx(two["total_seconds"] * 2 / 3600 * 2, rel=1e-12)


def test_time_text_and_formulas(capsys) -> None:
    code, out, _ = run(capsys, "time", *TRAIN, "--formula")
    assert code == 0
    assert "step_seconds" in out and "t_step = Max(" in out and "where F_tok" in out
    assert "tp_comm" in out


@pytest.mark.parametrize(("argv", "message"), [
    (("--gpu", "h100-80gb", "--mfu", "0.4", "--achieved-tflops", "100"), "not allowed with"),
    (("--gpu", "h100-80gb"), "one of the arguments --mfu --achieved-tflops is required"),
    (("--gpu", "h10", "--mfu", "0.4"), "unknown GPU"),
    (("--gpu", "h100-80gb", "--mfu", "1.5"), "at most 1"),
    (("--gpu", "h100-80gb", "--mfu", "0.4", "--price", "2"), "price needs tokens"),
    (("--gpu", "v100-32gb", "--mfu", "0.4"), "no bf16 peak"),
    (("--gpu", "a10g", "--mfu", "0.4"), "custom GPU file"),
    (("--gpu", "h100-80gb", "--mfu", "0.4", "--gpus", "6", "--tp", "4"), "not a multiple"),
    (("--gpu", "h100-80gb", "--mfu", "0.4", "--tokens", "1.5"), "whole number"),
    (("--gpu", "h100-80gb", "--mfu", "x"), "not a number"),
    (("--gpu", "missing.toml", "--mfu", "0.4"), "missing.toml"),
])
def test_time_bad_input_is_one_line_exit_2(capsys, argv, message) -> None:
    code, _, err = run(capsys, "time", "llama-3-8b", *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_every_rated_gpu_names_its_datasheet() -> None:
    rated = [g for g in catalogs.GPUS.values() if g.flops]
    assert {g.name for g in rated} >= {"a100-80gb", "h100-80gb", "h200-141gb", "b200", "mi300x"}
    for g in rated:
        assert "datasheet" in g.rates_source or "whitepaper" in g.rates_source, g.name  # GeForce: no datasheet
        assert g.hbm_bandwidth and g.nvlink_bandwidth, g.name
    h100 = catalogs.get("h100-80gb")
    # NVIDIA H100 datasheet, SXM5: 1,979 TFLOP/s BF16 and 3,958 FP8 with sparsity, 3.35 TB/s, NVLink 900 GB/s
    assert h100.peak_flops("bf16") == 989.5e12 and h100.peak_flops("fp8") == 1979e12
    assert h100.hbm_bandwidth == 3.35e12 and h100.nvlink_bandwidth == 450e9 and h100.network_bandwidth == 50e9
    assert catalogs.get("a100-80gb").peak_flops("bf16") == 312e12  # A100 datasheet: 312 TFLOP/s dense BF16


def test_every_catalogue_gpu_has_rates_or_says_why_not(capsys) -> None:
    """The memory catalogue and the rates agree: a GPU 'symbolic memory' knows, 'symbolic time' can time."""
    from symbolic.catalogs.rates import RATES, WITHOUT_RATES

    assert set(WITHOUT_RATES) <= set(catalogs.GPUS) and not set(WITHOUT_RATES) & set(RATES)
    for name, gpu in catalogs.GPUS.items():
        if name in WITHOUT_RATES:
            code, _, err = run(capsys, "time", "llama-3-8b", "--gpu", name, "--mfu", "0.4")
            assert code == 2 and WITHOUT_RATES[name] in err and err.count("\n") == 1, err
            continue
        assert gpu.flops.get("fp32") and gpu.hbm_bandwidth and gpu.nvlink_bandwidth, name
        dtype = "bf16" if "bf16" in gpu.flops else "fp16"  # the V100 and the T4 have no bf16
        code, out, err = run(capsys, "time", "llama-3-8b", "--gpu", name, "--mfu", "0.4", "--mode", "infer",
                             "--compute-dtype", dtype, "--json")
        assert code == 0, (name, err)
        assert json.loads(out)["values"]["F_peak"] == gpu.flops[dtype], name


def test_pcie_cards_have_their_datasheet_dense_rates() -> None:
    # NVIDIA L4 datasheet: 242 TFLOP/s BF16 and 485 FP8 "with sparsity", 300 GB/s, PCIe Gen4 x16 64 GB/s
    l4 = catalogs.get("l4")
    assert l4.peak_flops("bf16") == 242e12 / 2 and l4.peak_flops("fp8") == 485e12 / 2
    assert l4.hbm_bandwidth == 300e9 and l4.nvlink_bandwidth == 64e9 / 2 and l4.network_bandwidth is None
    # NVIDIA L40S datasheet prints dense and sparse: 362.05 | 733* BF16, 733 | 1,466* FP8, 864 GB/s
    l40s = catalogs.get("l40s")
    assert l40s.peak_flops("bf16") == 362.05e12 and l40s.peak_flops("fp8") == 733e12 and l40s.hbm_bandwidth == 864e9
    # Ada whitepaper, RTX 4090: 165.2 | 330.4* TFLOP/s BF16 with FP32 accumulate, 1,008 GB/s GDDR6X
    rtx = catalogs.get("4090")
    assert rtx.peak_flops("bf16") == 165.2e12 and rtx.hbm_bandwidth == 1008e9


def test_custom_gpu_file(tmp_path, capsys) -> None:
    path = tmp_path / "gpu.toml"
    path.write_text('name = "lab-gpu"\nmemory_gib = 80\nsource = "our measurements"\nhbm_bandwidth = 2e12\n'
                    'nvlink_bandwidth = 3e11\nnetwork_bandwidth = 2.5e10\n[flops]\nbf16 = 5e14\n')
    plan = ptime.train_time("llama-3-8b", str(path), mfu=0.5, seq=2048)
    assert plan.gpu.name == "lab-gpu" and plan.gpu.bytes == 80 * 2**30
    assert plan.values["F_peak"] == 5e14
    path.write_text('name = "x"\nmemory_gib = 80\nsource = "s"\n[flops]\nbf17 = 1\n')
    code, _, err = run(capsys, "time", "llama-3-8b", "--gpu", str(path), "--mfu", "0.5")
    assert code == 2 and "unknown dtype 'bf17'" in err


def test_library_formulas_listed_and_shown(capsys) -> None:
    keys = library.keys()
    assert {"flops.forward", "flops.train.full", "flops.train.kaplan", "flops.iteration.narayanan", "time.step",
            "time.decode", "time.train.narayanan"} <= set(keys)
    code, out, _ = run(capsys, "show", "time.step")
    assert code == 0 and "bubble" in out
    code, out, _ = run(capsys, "eval", "flops.train.kaplan", "--example")
    assert code == 0 and "48,181,567,488" in out  # 6 × 8,030,261,248
    step = library.get("time.step")
    assert step.diff("mfu") != 0  # differentiable like the memory formulas


def _presets() -> list[str]:
    from symbolic.networks import transformer as architectures

    return architectures.preset_names()


@pytest.mark.parametrize("model", _presets())
def test_time_works_for_every_preset(model) -> None:
    train = ptime.train_time(model, "h100-80gb", mfu=0.4, seq=512, tokens=10**9)
    assert train.figures["train_seconds"] > 0
    serve = ptime.infer_time(model, "h100-80gb", mfu=0.4, seq=512)
    assert train.figures["flops_per_token"] == pytest.approx(3 * serve.figures["flops_per_token"], rel=1e-12)
    assert serve.figures["decode_tokens_per_second"] > 0
    assert serve.figures["decode_tokens_per_second"] <= serve.figures["bandwidth_bound_tokens_per_second"] * (1 + 1e-12)


@pytest.mark.parametrize("model", ["gpt2", "mistral-7b", "mixtral-8x7b", "gpt-oss-20b", "qwen3-30b-a3b",
                                   "deepseek-v3"])
def test_plan_works_for_the_layer_kinds(model) -> None:
    from symbolic import planning
    from symbolic.networks import transformer as architectures
    from symbolic.planning import search

    if model not in architectures.preset_names():
        pytest.skip(f"{model} is not a preset here")
    res = search.search(model, "h100-80gb", gpus=8, seq=512, global_batch=8, mfu=0.4, top=2)
    assert res.considered > 0
    for lay in res.layouts:
        opts = {"batch": lay["micro_batch"], "seq": 512, "dp": lay["dp"], "tp": lay["tp"], "pp": lay["pp"],
                "zero": lay["zero"], "recompute": lay["recompute"], "microbatches": lay["grad_accum"]}
        if lay["sequence_parallel"]:
            opts["sequence_parallel"] = True
        if lay["offload"]:
            opts["offload"] = True
        assert lay["memory_bytes"] == planning.plan(model, "train", **opts).total


def test_time_of_article_as_network_counts_a_sample_as_a_token(capsys) -> None:
    """Article A's network (no token sequence): 2 FLOPs per weight of its matrices per sample, × 3 for training."""
    code, out, err = run(capsys, "time", "mlp", "--arg", "d_in=512", "--gpu", "h100-80gb", "--mfu", "0.4", "--batch",
                         "16", "--microbatches", "2", "--json")
    assert code == 0, err
    data = json.loads(out)
    from symbolic.networks.shape import article_a_shape

    network = article_a_shape("mlp", {"d_in": 512})
    weights = sum(int(network.value(rows * cols * n)) for _, rows, cols, n in network.matrices)
    d_in, d_h, n_out = 512, 4096, 10
    assert weights == network.total - (d_h + d_h + d_in + n_out)  # every parameter but the four Linear biases
    assert data["flops_per_token"] == 3 * 2 * weights
    assert data["tokens_per_step"] == 16 * 2 and "step_terms" in data and "tp_comm" not in data["step_terms"]


def test_time_refuses_seq_for_a_network_without_a_token_sequence(capsys) -> None:
    code, _, err = run(capsys, "time", "mlp", "--seq", "128", "--gpu", "h100-80gb", "--mfu", "0.4")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--seq applies to" in err


@pytest.mark.parametrize("mode, first", [("train", "step_seconds"), ("infer", "prefill_seconds")])
def test_time_quiet_prints_one_line_of_the_json_figures(capsys, mode: str, first: str) -> None:
    argv = ["time", "llama-3-8b", "--gpu", "h100-80gb", "--seq", "1024", "--batch", "1", "--mfu", "0.4",
            "--tokens", "1e9", "--mode", mode]
    code, out, _ = run(capsys, *argv, "-q")
    _, data, _ = run(capsys, *argv, "--json")
    lines = out.strip().splitlines()
    assert code == 0 and len(lines) == 1 and lines[0].startswith("llama-3-8b on 1 × h100-80gb: ")
    shown = float(lines[0].split(f"{first} ")[1].split()[0].replace(",", ""))
    assert shown == pytest.approx(json.loads(data)[first], rel=1e-3)  # the figure, as --json gives it
