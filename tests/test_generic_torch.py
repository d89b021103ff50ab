"""The generic torch path (issue 12): any transformers model type counted from its real module tree.

Counts are compared with ``hf_reference.py`` (its own plain build and count), formulas with
hand-derived ones, caches with the hand formula 2·L·a_kv·d_head bytes per element and token, every
preset with its family table, and the coverage survey runs over every causal-LM type transformers
5.24 knows. Torch runs in one child process (``generic_child.py``, a pool of two) that does all of
it at once, so the test process never imports torch, and a surveyed type's params reuse its survey
analysis. The command lines that analyse a generic config (``symbolic params``, ``symbolic memory
--mode infer``) run there too, through ``symbolic.cli.main``: a fresh interpreter for each would
import torch and transformers again.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sympy
from helpers import run, torch_child

from symbolic.cli import generic_params
from symbolic.core.symbols import H, L, V, a, a_kv, d_ff, d_head, n_pos
from symbolic.networks import transformer as architectures
from symbolic.networks.generic import probes as generic

HERE = Path(__file__).parent
ROOT = HERE.parent
HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None

# Model types without a family table, at their transformers default configs (real sizes: the meta
# device allocates nothing): hybrid attention + linear attention, SSM hybrids, pure SSM, MoE hybrid,
# sliding/full attention, and xLSTM (whose FFN width is rounded up: a size not in the fields).
TYPES = ("qwen3_next", "falcon_h1", "mamba", "jamba", "exaone4", "xlstm", "deepseek_v32", "mimo_v2_flash")
# Mixtures of experts among them: stacked expert tensors (MimoV2FlashExperts, DeepseekV32Experts...), fitted in
# fields or kept as measured numbers (MiMo-V2-Flash's, whose MoE layers follow mlp_layer_types)
MOE_TYPES = ("qwen3_next", "jamba", "deepseek_v32", "mimo_v2_flash")
# caches measured other than by a plain meta prefill: XLM fills a cache it is given, X-MOD needs a default
# language, JetMoE's forward cannot run on meta and runs on the CPU cut, OpenAI GPT keeps no cache. XLM, X-MOD
# and JetMoE prefill on the CPU, so they are small configs of those types (the same code paths, at a fraction of
# the default sizes' bfloat16 arithmetic); JetMoE's vocabulary and experts put its weights above
# generic_cache.CPU_LIMIT, so that it still runs cut, as its default config does.
CACHE_CONFIGS = {
    "xlm": {"model_type": "xlm", "emb_dim": 256, "n_layers": 2, "n_heads": 4, "vocab_size": 1000},
    "xmod": {"model_type": "xmod", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 256, "vocab_size": 1000},
    "jetmoe": {"model_type": "jetmoe", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
               "num_key_value_heads": 4, "kv_channels": 32, "intermediate_size": 20000, "num_local_experts": 64,
               "vocab_size": 2_000_000},
    "openai-gpt": {"model_type": "openai-gpt"},
}
CACHE_TYPES = tuple(CACHE_CONFIGS)
USER = {"model_type": "exaone4", "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 6,
        "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "sliding_window": 64,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"], "architectures": ["Exaone4ForCausalLM"]}
# the same model trained for 64 positions: serving it 100 tokens is past that length
USER_SHORT = {**USER, "max_position_embeddings": 64}


@pytest.fixture(scope="module")
def generic_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One child process for every check of this module (the module runs on one worker: tests/conftest.py)."""
    if not HAS_TORCH:
        pytest.skip("torch and transformers are not installed")
    configs = {t: {"model_type": t} for t in TYPES} | {"user": USER}
    caches = {t: {"model_type": t} for t in ("llama", "gpt2", "mamba")} | CACHE_CONFIGS | {"user": USER}
    folder = tmp_path_factory.mktemp("cli")
    path, short = folder / "config.json", folder / "short.json"
    path.write_text(json.dumps(USER), encoding="utf-8")
    short.write_text(json.dumps(USER_SHORT), encoding="utf-8")
    (folder / "jamba.toml").write_text(REPORT_SPEC, encoding="utf-8")
    out = torch_child("generic_child.py", {"survey": True, "params": configs, "cache": caches,
                                            "forward": ["openai-gpt"], "presets": list(architectures.preset_names()),
                                            "reference": configs,
                                            "cli": command_lines(str(path), str(short)) | network_lines(folder),
                                            "known": True})
    out["folder"] = str(folder)
    return out


def command_lines(path: str, short: str) -> dict[str, list[str]]:
    """The command lines of a generic model's config file that the child runs (``symbolic.cli.main`` there)."""
    return {
        "params": ["params", path, "--json"],
        "infer": ["memory", path, "--mode", "infer", "--batch", "2", "--seq", "100", "--json"],
        "past-trained": ["memory", short, "--mode", "infer", "--batch", "2", "--seq", "100", "--json"],
        "bare-type": ["params", "mamba", "--json"],  # a model type, no config: its default, as mamba in TYPES
    }


# a report of a model without a family table, built from a spec (issue 26)
REPORT_SPEC = """title = "Jamba on one H200"
model = "jamba"
mode = "train"
gpus = ["h200", "h100-80gb"]

[regime]
batch = 1
seq = 2048
"""


def network_lines(folder: Path) -> dict[str, list[str]]:
    """Generic models through the planner (issue 26): training memory, --gpu, fit, time, plan and a report."""
    return {
        "train-mamba": ["memory", "mamba", "--mode", "train", "--json"],
        "train-jamba": ["memory", "jamba", "--mode", "train", "--json"],
        "gpu-jamba": ["memory", "jamba", "--gpu", "h100-80gb", "--json"],
        "gpu-infer-mamba": ["memory", "mamba", "--mode", "infer", "--gpu", "h100-80gb", "--json"],
        "fit-mamba": ["fit", "mamba", "--for", "batch", "--gpu", "l4", "--json"],
        "time-mamba": ["time", "mamba", "--gpu", "h100-80gb", "--mfu", "0.4", "--json"],
        "plan-mamba": ["plan", "mamba", "--gpu", "h100-80gb", "--max-gpus", "8", "--mfu", "0.4", "--global-batch", "16",
                       "--seq", "2048", "--json"],
        "report-jamba": ["report", str(folder / "jamba.toml"), "--html", str(folder / "jamba.html"), "-q"],
    }


def _ok(proc: dict) -> dict:
    assert "error" not in proc and proc["code"] == 0, proc
    return json.loads(proc["out"])


@pytest.fixture(scope="module")
def reference(generic_run) -> dict:
    """transformers' own counts, built the plain way (``hf_reference.count``, in the same child)."""
    return generic_run["reference"]


@pytest.mark.slow
@pytest.mark.torch
def test_every_causal_lm_type_transformers_builds(generic_run) -> None:
    """The coverage survey (``benchmarks/generic_coverage.py``'s rows): every causal-LM type at its default config."""
    result = generic_run["survey"]
    crashed = {r["model_type"]: r["harness_error"] for r in result["rows"] if "harness_error" in r}
    assert not crashed, crashed  # a crash is not "transformers cannot build it": it must not leave the denominator
    c = result["coverage"]
    assert c["types"] == len(generic.causal_lm_types()) == len(result["rows"]) >= 190
    assert c["built"] >= 0.9 * c["types"]
    assert c["exact"] == c["built"]  # every buildable type: the formula at its values is the plain count
    assert c["verified_pct"] >= 75.0


@pytest.mark.slow
@pytest.mark.torch
def test_both_paths_agree_on_every_preset(generic_run) -> None:
    """Every preset through both paths: the generic torch path's count equals the family table's."""
    names = list(architectures.preset_names())
    got = generic_run["presets"]
    for name in names:
        table = architectures.load(name)
        assert got[name]["total"] == got[name]["formula_total"] == table.param_count(), name
        if table.is_moe and got[name]["active"] is not None:
            assert got[name]["active"] == table.active_param_count(), name


@pytest.mark.torch
@pytest.mark.parametrize("name", [*TYPES, "user"])
def test_generic_total_is_the_real_count_and_the_formula_gives_it(name, generic_run, reference) -> None:
    got, ref = generic_run["params"][name], reference[name]
    assert "error" not in got and "error" not in ref, (got, ref)
    assert got["total"] == ref["total"] and got["formula_total"] == ref["total"]
    assert got["active"] == ref["active"]  # None for dense models, the total less the idle experts' for MoEs
    if ref["active"] is not None:
        assert got["active"] == got["active_formula_total"]


@pytest.mark.torch
@pytest.mark.parametrize("name", MOE_TYPES)
def test_generic_mixtures_of_experts_count_their_active_parameters(name, generic_run, reference) -> None:
    """Active = total − (n_exp − k)/n_exp of the routed experts' tensors, against transformers' own module tree:
    ``hf_reference.count`` sums every tensor under ``.experts.`` of the plain build, by hand."""
    got, ref = generic_run["params"][name], reference[name]
    assert ref["active"] is not None and 0 < ref["active"] < ref["total"], ref
    assert got["active"] == got["active_formula_total"] == ref["active"], (got["active"], ref["active"])


@pytest.mark.torch
def test_most_formulas_are_in_fields_and_checked_at_a_second_point(generic_run) -> None:
    if not HAS_TORCH:
        pytest.skip("torch and transformers are not installed")
    rows = generic_run["params"]
    for name in ("qwen3_next", "falcon_h1", "mamba", "exaone4", "user"):
        assert rows[name]["verified"] and rows[name]["in_fields"], (name, rows[name]["unexplained"])
    # xLSTM rounds its FFN width up to a multiple of 64: not a product of fields, so it says so
    assert not rows["xlstm"]["in_fields"] and any("ffn" in p for p in rows["xlstm"]["unexplained"])
    # Jamba puts attention at layers i ≡ 4 (mod 8): the Mamba layer count L − ⌈(L − 4)/8⌉ is no product either
    assert not rows["jamba"]["verified"] and any(".mamba." in p for p in rows["jamba"]["unexplained"])
    assert rows["user"]["values"]["L"] == 6 and rows["user"]["fields"]["a_kv"] == "num_key_value_heads"


@pytest.mark.torch
def test_generic_formulas_equal_the_hand_derived_ones(generic_run) -> None:
    if not HAS_TORCH:
        pytest.skip("torch and transformers are not installed")
    presets = generic_run["presets"]
    gpt2 = 12 * H**2 * L + 13 * H * L + H * V + H * n_pos + 2 * H  # GPT-2: README's formula
    assert presets["gpt2"]["expanded"] == str(sympy.expand(gpt2)) and presets["gpt2"]["total"] == 124_439_808
    # Llama: q and o are H×a·d_head, k and v H×a_kv·d_head, a gated MLP, two RMSNorms a layer, untied head
    llama = L * (2 * H * a * d_head + 2 * H * a_kv * d_head + 3 * H * d_ff + 2 * H) + 2 * H * V + H
    assert presets["llama-3-8b"]["expanded"] == str(sympy.expand(llama))
    assert presets["llama-3-8b"]["total"] == 8_030_261_248  # also the table path's count (README)
    assert presets["mixtral-8x7b"]["total"] == 46_702_792_704 and presets["mixtral-8x7b"]["active"] == 12_879_925_248


@pytest.mark.torch
def test_cache_formula_is_the_hand_formula_and_the_real_cache(generic_run) -> None:
    if not HAS_TORCH:
        pytest.skip("torch and transformers are not installed")
    caches = generic_run["cache"]
    # keys and values: 2 · L · a_kv · d_head elements per token, bfloat16 (2 bytes); defaults of transformers
    assert caches["llama"]["per_token"] == 2 * 32 * 32 * 128 * 2 and caches["llama"]["per_sequence"] == 0
    assert caches["gpt2"]["per_token"] == 2 * 12 * 768 * 2
    # the user's config: 1 full layer keeps every token, 5 sliding layers keep min(S, W − 1) = min(S, 63)
    # (DynamicSlidingWindowLayer), each 2 · a_kv · d_head = 2 · 2 · 64 elements of 2 bytes per token
    per_layer = 2 * 2 * (512 // 8) * 2
    assert caches["user"]["per_token"] == per_layer and caches["user"]["windowed"] == 5 * per_layer
    assert caches["user"]["cap"] == 63 and caches["user"]["at_4x100"] == 4 * (100 * per_layer + 63 * 5 * per_layer)
    assert caches["llama"]["windowed"] == 0 and caches["llama"]["cap"] == 0
    # Mamba: a fixed state per sequence and layer: the bf16 convolution window d_inner·conv_kernel and
    # the SSM state d_inner·state_size, which transformers keeps in float32 (4 bytes)
    d_inner, layers, conv_kernel, state_size = 2 * 768, 32, 4, 16
    assert caches["mamba"]["per_token"] == 0
    assert caches["mamba"]["per_sequence"] == layers * d_inner * (2 * conv_kernel + 4 * state_size)
    assert all(c["verified"] for c in caches.values())


@pytest.mark.torch
def test_caches_measured_other_than_by_a_meta_prefill(generic_run) -> None:
    if not HAS_TORCH:
        pytest.skip("torch and transformers are not installed")
    caches = generic_run["cache"]
    # XLM (n_layers 2, emb_dim 256) and X-MOD (2 layers, hidden 128): keys and values of every layer, bf16
    assert caches["xlm"]["per_token"] == 2 * 2 * 256 * 2 and caches["xlm"]["class"] == "EncoderDecoderCache"
    assert caches["xmod"]["per_token"] == 2 * 2 * 128 * 2
    # JetMoE (2 layers, 4 KV heads of kv_channels 32), measured with vocabulary, FFN and experts cut
    assert caches["jetmoe"]["per_token"] == 2 * 2 * 4 * 32 * 2 and caches["jetmoe"]["per_sequence"] == 0
    assert "num_local_experts" in caches["jetmoe"]["note"] and "two cuts give the same cache" in caches["jetmoe"]["note"]
    assert all(caches[t]["verified"] and "error" not in caches[t] for t in CACHE_TYPES)
    # OpenAI GPT: transformers' own forward takes no cache argument and returns no cache, so 0 bytes, said so
    gpt = caches["openai-gpt"]
    assert gpt["per_token"] == gpt["per_sequence"] == gpt["at_4x100"] == 0 and "keeps no cache" in gpt["note"]
    plain = generic_run["forward"]["openai-gpt"]
    cache_names = {"past_key_values", "cache", "cache_params", "mems", "use_mems", "use_cache", "past_buckets_states",
                   "past", "cache_position", "state"}
    assert "logits" in plain["outputs"] and not cache_names & set(plain["outputs"])
    assert not cache_names & set(plain["arguments"]) and "input_ids" in plain["arguments"]


def test_unknown_type_without_torch_is_one_line_naming_the_extra(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(generic, "torch_available", lambda: False)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "exaone4", "hidden_size": 64, "state_size": 16}), encoding="utf-8")
    code, out, err = run(capsys, "params", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "'torch' extra" in err and "pip install 'symbolic-memory[torch]'" in err and "llama" in err
    assert "did you mean" not in err and "its size fields are those of" not in err


def test_did_you_mean_only_names_a_family_of_the_same_layout() -> None:
    llama_like = {"model_type": "llama5", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100}
    assert generic_params.same_layout(llama_like) is not None
    gpt2_like = {"model_type": "gpt3", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100}
    assert generic_params.same_layout(gpt2_like) == "gpt2"
    # close in name to llama, but an SSM's fields: no family reads them, so nothing is suggested
    ssm = {"model_type": "llama5", "hidden_size": 64, "state_size": 16, "conv_kernel": 4, "num_hidden_layers": 2,
           "vocab_size": 100}
    assert generic_params.same_layout(ssm) is None
    assert "its size fields are those of" not in generic_params.unsupported_message(ssm)


def test_models_lists_how_each_type_is_covered(capsys) -> None:
    code, out, _ = run(capsys, "models", "--json")
    families = json.loads(out)["families"]
    coverage = {f["model_type"]: f["coverage"] for f in families}
    assert code == 0 and coverage["llama"] == "table"
    if HAS_TORCH:
        assert set(generic.causal_lm_types()) <= set(coverage) and coverage.get("xlstm") == "generic"
    # listing the types reads transformers' source, it imports nothing: checked in a fresh interpreter (this one may
    # hold torch from an earlier test's in-process module plan)
    script = ("import sys, contextlib, io\nfrom symbolic.cli import main\n"
              "with contextlib.redirect_stdout(io.StringIO()): main(['models', '--json'])\n"
              "raise SystemExit(3 if 'torch' in sys.modules else 0)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr


@pytest.mark.torch
def test_generic_params_cli_json(generic_run, reference) -> None:
    proc = generic_run["cli"]["params"]
    assert "error" not in proc and proc["code"] == 0, proc
    data = json.loads(proc["out"])
    assert data["coverage"] == "generic" and data["total"] == reference["user"]["total"]
    assert sum(data["components"].values()) == data["total"] and data["verified"] is True
    assert data["values"]["H"] == 512 and data["formula"].startswith("N = ")


@pytest.mark.torch
def test_a_bare_model_type_is_its_default_config_through_the_generic_path(generic_run, reference) -> None:
    proc = generic_run["cli"]["bare-type"]
    assert "error" not in proc and proc["code"] == 0 and proc["err"] == "", proc
    data = json.loads(proc["out"])
    assert data["model"] == data["model_type"] == "mamba" and data["total"] == reference["mamba"]["total"]


@pytest.mark.torch
def test_known_types_read_from_source_are_those_transformers_imports(generic_run) -> None:
    assert generic_run["known"] == {"missing": [], "extra": []}


@pytest.mark.torch
def test_generic_memory_warns_past_the_trained_length(generic_run) -> None:
    proc = generic_run["cli"]["past-trained"]
    assert "error" not in proc and proc["code"] == 0, proc
    assert proc["err"].count("\n") == 1 and proc["err"].startswith("symbolic: warning: seq 100 is beyond the 64 "
                                                                    "positions short was trained for"), proc["err"]
    assert json.loads(proc["out"])["options"]["seq"] == 100
    assert generic_run["cli"]["infer"]["err"] == ""  # no max_position_embeddings: nothing to warn of


@pytest.mark.torch
def test_memory_infer_of_a_generic_model_gives_cache_bytes(generic_run, reference) -> None:
    proc = generic_run["cli"]["infer"]
    assert "error" not in proc and proc["code"] == 0, proc
    data = json.loads(proc["out"])
    # keys and values of 2 KV heads of 512/8 = 64 dims, bf16: the full layer for 100 tokens, the 5 sliding
    # layers for their window less one (63), for B = 2
    per_layer = 2 * 2 * 64 * 2
    assert data["cache_bytes"] == 2 * (100 * per_layer + 5 * 63 * per_layer) and data["coverage"] == "generic"
    assert data["terms"]["weights"] == 2 * reference["user"]["total"]
    assert data["total_bytes"] == data["terms"]["weights"] + data["cache_bytes"]
    # training a generic model is planned now (issue 26): test_generic_training_memory_holds_the_real_count_in_each_state


# --- a generic model through the planner (issue 26: one Network interface) ------------------------
@pytest.mark.torch
@pytest.mark.parametrize("name", ["mamba", "jamba"])
def test_generic_training_memory_holds_the_real_count_in_each_state(name, generic_run, reference) -> None:
    data = _ok(generic_run["cli"][f"train-{name}"])
    total = reference[name]["total"]  # transformers' own count on the meta device
    # bf16-mixed AdamW: 16-bit weights, fp32 master weights and two fp32 moments, fp32 gradients
    assert data["terms"]["weights"] == 2 * total and data["terms"]["master_weights"] == 4 * total
    assert data["terms"]["optimizer_states"] == 8 * total and data["terms"]["gradients"] == 4 * total
    assert any("cannot be said" in note for note in data["notes"])


@pytest.mark.torch
def test_generic_activations_are_korthikanti_over_the_matrices(generic_run) -> None:
    """Mamba's four matrices per layer: in_proj H → 2d, x_proj d → r + 2n, dt_proj r → d, out_proj d → H."""
    data = _ok(generic_run["cli"]["train-mamba"])
    v = generic_run["params"]["mamba"]["values"]
    h, d, n, r = v["H"], v["d_ff"], v["state_size"], v["time_step_rank"]
    per_token = (h + 2 * d) + (d + r + 2 * n) + (r + d) + (d + h)  # inputs + outputs, 2 bytes each
    assert data["terms"]["activations"] == 2 * data["values"]["S"] * data["values"]["B"] * v["L"] * per_token
    assert "weight matrices' inputs and outputs" in data["titles"]["activations"]  # not a transformer variant's name


@pytest.mark.torch
def test_generic_memory_with_a_gpu_gives_a_verdict(generic_run, reference) -> None:
    data = _ok(generic_run["cli"]["gpu-jamba"])  # training, the default mode
    assert data["fits"] is False and data["headroom"] == data["gpu"]["bytes"] - data["total_bytes"] < 0
    served = _ok(generic_run["cli"]["gpu-infer-mamba"])  # the generic serving estimate, now checked too
    assert served["total_bytes"] == 2 * reference["mamba"]["total"] + served["cache_bytes"]
    assert served["fits"] is True and served["headroom"] == served["gpu"]["bytes"] - served["total_bytes"]


@pytest.mark.torch
def test_generic_fit_time_plan_and_report(generic_run, tmp_path) -> None:
    fit = _ok(generic_run["cli"]["fit-mamba"])
    assert fit["status"] == "ok" and fit["total_bytes"] <= fit["capacity_bytes"] < fit["next_total_bytes"]
    timed = _ok(generic_run["cli"]["time-mamba"])
    v = generic_run["params"]["mamba"]["values"]
    h, d, n, r = v["H"], v["d_ff"], v["state_size"], v["time_step_rank"]
    weights = v["L"] * (h * 2 * d + d * (r + 2 * n) + r * d + d * h)  # the matrices; scans and convolutions cannot be said
    assert timed["flops_per_token"] == pytest.approx(3 * (2 * weights + 2 * v["V"] * h))  # forward + 2 × backward
    assert any("cannot be said" in note for note in timed["notes"])
    searched = _ok(generic_run["cli"]["plan-mamba"])
    assert searched["fitting"] > 0 and all(row["tp"] == 1 for row in searched["layouts"])
    report = generic_run["cli"]["report-jamba"]
    assert "error" not in report and report["code"] == 0, report
    page = (Path(generic_run["folder"]) / "jamba.html").read_text(encoding="utf-8")
    assert "JambaForCausalLM built on the meta device" in page and "cannot be said" in page
