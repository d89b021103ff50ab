"""Reliability (issue 25): counts with realistic bounds, and what users give read within them.

Layer counts, GPU counts and global batches that used to run until killed are refused in one
line; a hub cache's ``refs/main`` is read bounded; a custom GPU's sizes and rates have one range.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run

from symbolic.networks import transformer as architectures
from symbolic.networks.shape import divisors
from symbolic.networks.transformer import ConfigError, ModelSpec
from symbolic.networks.transformer.spec import MAX_LAYERS
from symbolic.planning import search
from symbolic.planning import time as ptime

ROOT = Path(__file__).resolve().parent.parent
FAST = 120  # seconds: what used to run without end must answer within this (15 s idle on two cores; its speed is
# benchmarks/bench_plan.py's to watch, this only that it ends, so loaded CI machines leave it room)
PLAN = ("--gpu", "h100-80gb", "--mfu", "0.4", "--seq", "2048")


def _config(tmp_path: Path, **fields: object) -> Path:
    """A config.json of the llama-2-7b preset with ``fields`` changed."""
    config = {k: v for k, v in architectures.preset_config("llama-2-7b").items() if k != "_source"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, **fields}), encoding="utf-8")
    return path


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


# --- layers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("layers", [MAX_LAYERS + 1, 10**9])
def test_a_layer_count_above_the_bound_is_one_line(capsys, tmp_path, layers) -> None:
    path = _config(tmp_path, num_hidden_layers=layers)
    for command in ("params", "memory"):
        code, out, err = run(capsys, command, str(path))
        assert code == 2 and out == ""
        assert f"num_hidden_layers={layers} is implausibly large" in _one_line(err) and f"{MAX_LAYERS:,}" in err


def test_the_layer_bound_itself_is_accepted_and_counted_exactly(tmp_path) -> None:
    spec = architectures.load(str(_config(tmp_path, num_hidden_layers=MAX_LAYERS)))
    one = architectures.load(str(_config(tmp_path, num_hidden_layers=1)))
    two = architectures.load(str(_config(tmp_path, num_hidden_layers=2)))
    per_layer = two.param_count() - one.param_count()
    assert spec.param_count() == one.param_count() + (MAX_LAYERS - 1) * per_layer


def test_a_model_spec_refuses_too_many_layers() -> None:
    with pytest.raises(ValueError, match=r"layers=65537 is implausibly large"):
        ModelSpec(name="deep", model_type="llama", hidden=64, layers=MAX_LAYERS + 1, heads=4, vocab=100)


def test_a_sliding_pattern_over_too_many_layers_is_refused_first(tmp_path) -> None:
    config = {"model_type": "gemma2", "num_hidden_layers": 10**9}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ConfigError, match="num_hidden_layers=1000000000 is implausibly large"):
        architectures.load(str(path))


def test_the_generic_path_refuses_too_many_layers_before_transformers(capsys, tmp_path) -> None:
    pytest.importorskip("transformers")
    config = {"model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"], "hidden_size": 64, "num_heads": 4,
              "head_dim": 32, "n_groups": 1, "state_size": 16, "vocab_size": 100, "num_hidden_layers": 10**9}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    code, out, err = run(capsys, "params", str(path))
    assert code == 2 and out == ""
    assert "num_hidden_layers=1000000000 is implausibly large" in _one_line(err)


# --- GPUs, global batch, divisors ---------------------------------------------------------------------
def test_divisors_are_every_divisor_in_order() -> None:
    for n in [*range(1, 200), 720720, 2**20, 999983]:
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@pytest.mark.parametrize("flag", ["--gpus", "--max-gpus"])
def test_plan_refuses_more_gpus_than_the_bound(capsys, flag) -> None:
    count = ptime.MAX_GPUS + 1
    code, out, err = run(capsys, "plan", "llama-2-7b", *PLAN, "--global-batch", "64", flag, str(count))
    assert code == 2 and out == ""
    assert f"{flag[2:].replace('-', '_')} must be at most {ptime.MAX_GPUS:,}" in _one_line(err)


def test_time_refuses_more_gpus_than_the_bound(capsys) -> None:
    code, out, err = run(capsys, "time", "llama-2-7b", *PLAN, "--gpus", str(ptime.MAX_GPUS + 1))
    assert code == 2 and out == "" and f"gpus must be at most {ptime.MAX_GPUS:,}" in _one_line(err)


def test_plan_refuses_a_global_batch_above_the_bound(capsys) -> None:
    batch = search.MAX_GLOBAL_BATCH + 1
    code, out, err = run(capsys, "plan", "llama-2-7b", *PLAN, "--global-batch", str(batch), "--gpus", "1")
    assert code == 2 and out == ""
    assert f"global_batch must be at most {search.MAX_GLOBAL_BATCH:,}" in _one_line(err)


def test_plan_over_every_count_up_to_the_bound_answers() -> None:
    proc = subprocess.run([sys.executable, "-m", "symbolic", "plan", "llama-2-7b", *PLAN, "--global-batch", "512",
                           "--max-gpus", str(ptime.MAX_GPUS), "--json"],
                          capture_output=True, text=True, timeout=FAST, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    best = json.loads(proc.stdout)["layouts"][0]
    assert best["dp"] * best["tp"] * best["pp"] == best["gpus"] <= ptime.MAX_GPUS


# --- a hub cache's refs/main ------------------------------------------------------------------------
REV = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_repo(tmp_path, monkeypatch) -> Path:
    """A cached org/model (gpt2's config at REV) in a hub cache folder; its refs/main is the test's to write."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HOME", raising=False)
    repo = tmp_path / "hub" / "models--org--model"
    (repo / "snapshots" / REV).mkdir(parents=True)
    config = {k: v for k, v in architectures.preset_config("gpt2").items() if k != "_source"}
    (repo / "snapshots" / REV / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (repo / "refs").mkdir()
    return repo


def test_refs_main_with_a_hash_and_a_line_break_is_read(hub_repo) -> None:
    (hub_repo / "refs" / "main").write_text(REV + "\n", encoding="utf-8")
    assert architectures.resolve("org/model").path == hub_repo / "snapshots" / REV / "config.json"


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage", b"main\n", b"0123456789abcdef" * 4 + b"zz"])
def test_refs_main_that_is_not_a_revision_is_one_line(capsys, hub_repo, content) -> None:
    (hub_repo / "refs" / "main").write_bytes(content)
    code, out, err = run(capsys, "params", "org/model")
    assert code == 2 and out == ""
    assert "refs/main: not a revision (expected a commit hash" in _one_line(err)


def test_a_huge_refs_main_is_refused_without_reading_it(capsys, hub_repo) -> None:
    with open(hub_repo / "refs" / "main", "wb") as handle:
        handle.truncate(512 * 2**20)  # sparse: 512 MiB of zeros that take no disk space
    code, out, err = run(capsys, "params", "org/model")
    assert code == 2 and out == ""
    assert "refs/main: larger than 256 bytes" in _one_line(err)


# --- a custom GPU's sizes and rates --------------------------------------------------------------------
def _gpu_file(tmp_path: Path, memory: str, flops: str = "1e15", rate: str = "3e12") -> Path:
    path = tmp_path / "gpu.toml"
    path.write_text(f'name = "g"\n{memory}\nsource = "a test"\nhbm_bandwidth = {rate}\n[flops]\nbf16 = {flops}\n',
                    encoding="utf-8")
    return path


@pytest.mark.parametrize("memory", ["memory_gib = 1e300", "memory_bytes = 1e300", "memory_gb = 1e300",
                                    "memory_gib = 1e-300", "memory_bytes = 0", "memory_bytes = 0.5",
                                    "memory_gib = inf", "memory_gb = nan", "memory_bytes = 1208925819614629174706177"])
def test_every_way_of_giving_a_gpu_memory_has_one_range(capsys, tmp_path, memory) -> None:
    path = _gpu_file(tmp_path, memory)
    code, out, err = run(capsys, "time", "llama-2-7b", "--gpu", str(path), "--mfu", "0.4", "--gpus", "8")
    assert code == 2 and out == ""
    assert f"{memory.split(' =')[0]} = " in _one_line(err) and "memory must be 1 byte to 2**80 bytes (1 YiB)" in err


@pytest.mark.parametrize("memory,expected", [("memory_gib = 80", 80 * 2**30), ("memory_gb = 80", 80 * 10**9),
                                             ("memory_bytes = 1", 1), ("memory_bytes = 1.5", 1),
                                             (f"memory_bytes = {2**80}", 2**80)])
def test_a_gpu_memory_within_the_range_is_whole_bytes(tmp_path, memory, expected) -> None:
    from symbolic.catalogs.gpu_files import load_gpu

    assert load_gpu(str(_gpu_file(tmp_path, memory))).bytes == expected


@pytest.mark.parametrize("flops,rate,key", [("1e300", "3e12", "flops.bf16"), ("1e-300", "3e12", "flops.bf16"),
                                            ("1e15", "1e300", "hbm_bandwidth"), ("1e15", "0.5", "hbm_bandwidth")])
def test_a_gpu_rate_out_of_range_is_one_line(capsys, tmp_path, flops, rate, key) -> None:
    path = _gpu_file(tmp_path, "memory_gib = 80", flops=flops, rate=rate)
    code, out, err = run(capsys, "time", "llama-2-7b", "--gpu", str(path), "--mfu", "0.4", "--gpus", "8")
    assert code == 2 and out == ""
    assert f"{key} must be a number from 1 to 1e30 (per second)" in _one_line(err)


# --- names from users stay on one line -----------------------------------------------------------------
FAKE = "fake: 0 bytes"  # what a name with a line break would print as a line of its own


def test_a_custom_gpu_name_with_a_line_break_stays_on_its_line(capsys, tmp_path) -> None:
    path = tmp_path / "gpu.toml"
    path.write_text(f'name = "g\\n{FAKE}"\nmemory_gb = 80\nsource = """our\ncluster"""\ntitle = "t\\tx"\n'
                    '[flops]\nbf16 = 1e15\n', encoding="utf-8")
    code, out, err = run(capsys, "memory", "gpt2", "--gpu", str(path), "-q")
    assert code == 0 and err == ""
    assert out.count("\n") == 1 and f"on g\\n{FAKE} (" in out
    from symbolic.catalogs.gpu_files import load_gpu

    gpu = load_gpu(str(path))
    assert (gpu.name, gpu.source, gpu.rates_source, gpu.title) == (f"g\\n{FAKE}", "our cluster", "our cluster", "t x")


def test_a_model_folder_name_with_a_line_break_stays_on_its_line(capsys, tmp_path) -> None:
    folder = tmp_path / f"m\n{FAKE}"
    folder.mkdir()
    config = {k: v for k, v in architectures.preset_config("gpt2").items() if k != "_source"}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    code, out, err = run(capsys, "memory", str(folder), "-q")
    assert code == 0 and err == "" and out.count("\n") == 1 and out.startswith(f"m\\n{FAKE}: ")
    code, out, _ = run(capsys, "params", str(folder))
    assert code == 0 and out.splitlines()[0].startswith(f"m\\n{FAKE}: GPT2LMHeadModel")
    assert architectures.load(str(folder)).name == f"m\\n{FAKE}"
    assert ModelSpec(name="a\nb", model_type="llama", hidden=64, layers=2, heads=4, vocab=100).name == "a\\nb"


def test_a_report_progress_line_escapes_the_model_folder_name(capsys, tmp_path) -> None:
    folder = tmp_path / f"m\n{FAKE}"
    folder.mkdir()
    config = {k: v for k, v in architectures.preset_config("gpt2").items() if k != "_source"}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    spec = tmp_path / "r.toml"
    spec.write_text(f'title = "t"\nmodel = {json.dumps(str(folder / "config.json"))}\n', encoding="utf-8")
    code, _, err = run(capsys, "report", str(spec), "--html", str(tmp_path / "r.html"))
    assert code == 0
    assert all(line.startswith("symbolic report: ") for line in err.splitlines()) and f"m\\n{FAKE}" in err


@pytest.mark.parametrize("name", ["lora\n", "lora\n\n"])
def test_a_term_name_with_a_trailing_line_break_is_refused(name) -> None:
    from symbolic.math.userterms import CustomTerm, CustomTermError

    with pytest.raises(CustomTermError, match="must match"):
        CustomTerm(name, "2*H")


def test_config_fields_and_hub_ids_with_a_trailing_line_break_are_not_names() -> None:
    from symbolic.networks import hub
    from symbolic.networks.generic import probes as generic

    assert generic.int_fields({"hidden_size\n": 64, "hidden_size": 64}) == {("hidden_size",): 64}
    assert not hub.looks_like_hub_id("org/name\n")


# --- messages name the constraint that failed -------------------------------------------------------
@pytest.mark.parametrize("text", ["1e-300", "5e-100"])
def test_a_tiny_value_names_the_exponent_bound_not_the_largest_value(capsys, text) -> None:
    from symbolic.core.values import MAX_EXPONENT

    code, out, err = run(capsys, "eval", "--example", "mlp.total", "--set", f"B={text}")
    assert code == 2 and out == ""
    assert f"exponents are at least e-{MAX_EXPONENT}" in _one_line(err) and "at most" not in err


def test_a_huge_value_still_names_the_largest_value(capsys) -> None:
    code, _, err = run(capsys, "eval", "--example", "mlp.total", "--set", "B=1e300")
    assert code == 2 and "values are at most 1e30" in _one_line(err)


# --- a config that is missing, empty, not a file or not readable --------------------------------------
@pytest.mark.parametrize("content,fragment", [(b"", "is empty (expected a config.json)"),
                                              (b" \n\t\n", "holds only white space (expected a config.json)"),
                                              (b"{", "not valid JSON")])
def test_an_empty_config_says_it_is_empty(capsys, tmp_path, content, fragment) -> None:
    path = tmp_path / "zero"
    path.write_bytes(content)
    code, out, err = run(capsys, "params", str(path))
    assert code == 2 and out == "" and f"{path}: {fragment}" in _one_line(err)
    spec = tmp_path / "r.toml"
    spec.write_text(f'title = "t"\nmodel = {json.dumps(str(path))}\n', encoding="utf-8")
    code, out, err = run(capsys, "report", str(spec), "-q", "--html", str(tmp_path / "r.html"))
    assert code == 2 and out == "" and f"{path}: {fragment}" in _one_line(err)
    assert not (tmp_path / "r.html").exists()


def test_a_report_model_that_is_a_folder_is_not_missing(capsys, tmp_path) -> None:
    (tmp_path / "folder.json").mkdir()
    spec = tmp_path / "r.toml"
    spec.write_text(f'title = "t"\nmodel = {json.dumps(str(tmp_path / "folder.json"))}\n', encoding="utf-8")
    code, _, err = run(capsys, "report", str(spec), "-q", "--html", str(tmp_path / "r.html"))
    assert code == 2 and "folder.json: is a folder, not a config.json" in _one_line(err) and "not found" not in err


def test_file_problem_tells_missing_from_unreadable(tmp_path, monkeypatch) -> None:
    from symbolic.core import userfiles

    assert userfiles.file_problem(tmp_path / "none.json", "a config.json") == \
        f"{tmp_path / 'none.json'}: no such file (expected a config.json)"
    (tmp_path / "c.json").write_text("{}", encoding="utf-8")
    assert userfiles.file_problem(tmp_path / "c.json", "a config.json") is None

    def denied(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(userfiles.os, "stat", denied)  # root reads every file: the error is simulated
    assert userfiles.file_problem(tmp_path / "c.json", "a config.json") == \
        f"{tmp_path / 'c.json'}: cannot be read (Permission denied)"


# --- Infinity and NaN in a config ---------------------------------------------------------------------
def _raw_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    return path


def test_infinity_in_a_field_that_sizes_nothing_is_read(capsys, tmp_path) -> None:
    # transformers writes time_step_limit = (0.0, inf) into Mamba-2's and Falcon-H1's config.json as Infinity
    plain = json.dumps({k: v for k, v in architectures.preset_config("llama-2-7b").items() if k != "_source"})
    path = _raw_config(tmp_path, plain[:-1] + ', "time_step_limit": [0.0, Infinity], "unused": -Infinity, '
                                              '"also_unused": NaN}')
    code, out, err = run(capsys, "params", str(path), "--json")
    assert code == 0 and err == ""
    assert json.loads(out)["total"] == architectures.load("llama-2-7b").param_count()


@pytest.mark.parametrize("field,constant", [("hidden_size", "Infinity"), ("num_hidden_layers", "NaN"),
                                            ("vocab_size", "-Infinity"), ("intermediate_size", "1e400")])
def test_infinity_or_nan_in_a_size_field_is_one_line_naming_it(capsys, tmp_path, field, constant) -> None:
    plain = json.dumps({k: v for k, v in architectures.preset_config("llama-2-7b").items()
                        if k not in ("_source", field)})
    path = _raw_config(tmp_path, plain[:-1] + f', "{field}": {constant}}}')
    code, out, err = run(capsys, "params", str(path))
    assert code == 2 and out == "" and f"{field} must be an integer, got " in _one_line(err)


@pytest.mark.parametrize("constant,shown", [("Infinity", "inf"), ("NaN", "nan")])
def test_infinity_in_a_float_that_sizes_a_layer_is_one_line_naming_it(tmp_path, constant, shown) -> None:
    path = _raw_config(tmp_path, '{"model_type": "lfm2", "num_hidden_layers": 2, "block_ffn_dim_multiplier": '
                                 f'{constant}}}')
    with pytest.raises(ConfigError, match=f"block_ffn_dim_multiplier must be a positive finite number, got {shown}"):
        architectures.load(str(path))
