"""``symbolic params`` and ``symbolic models``: tables, JSON, formulas and one-line errors (exit 2)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run

from symbolic.networks.generic import probes as generic
from symbolic.networks.transformer import SUPPORTED, preset_config, preset_names


def test_params_json_gpt2(capsys) -> None:
    code, out, err = run(capsys, "params", "gpt2", "--json")
    data = json.loads(out)
    assert code == 0 and err == ""
    assert data["total"] == 124_439_808 and data["model"] == "gpt2" and data["model_type"] == "gpt2"
    assert data["architecture"] == "GPT2LMHeadModel" and "openai-community/gpt2" in data["source"]
    assert sum(data["components"].values()) == data["total"]
    assert data["components"]["embedding"] == 50257 * 768 and data["components"]["positions"] == 1024 * 768
    assert data["per_layer"]["attention.q"] == 768 * 768 and data["layers"] == 12
    assert data["formula"] == "N = L·(12·H^2 + 13·H) + H·V + H·n_pos + 2·H"
    assert data["values"] == {"H": 768, "L": 12, "V": 50257, "n_pos": 1024}
    assert "active" not in data


def test_params_json_mixtral_active(capsys) -> None:
    code, out, _ = run(capsys, "params", "mixtral-8x7b", "--json")
    data = json.loads(out)
    assert code == 0 and data["total"] == 46_702_792_704 and data["active"] == 12_879_925_248
    assert sum(data["active_components"].values()) == data["active"]
    assert data["components"]["moe.router"] == data["active_components"]["moe.router"] == 32 * 8 * 4096
    assert "k_exp" in data["active_formula"]


def test_params_table_llama3(capsys) -> None:
    code, out, _ = run(capsys, "params", "llama-3-8b")
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == "llama-3-8b: LlamaForCausalLM (llama), 8,030,261,248 parameters (8.03 B)"
    assert lines[1].split() == ["component", "formula", "per", "layer", "parameters"]
    rows = {line.split()[0]: line for line in lines[2:] if line and not line.startswith(" ")}
    assert rows["attention.k"].split()[1:] == ["H^2·a_kv/a", "4,194,304", "134,217,728"]
    assert rows["lm_head"].split()[1:] == ["H·V", "525,336,576"]
    assert rows["total"].split()[-2:] == ["218,112,000", "8,030,261,248"]
    assert "at H=4096, L=32, a=32, V=128256, d_ff=14336, a_kv=8" in out


def test_params_table_moe_has_active_column(capsys) -> None:
    code, out, _ = run(capsys, "params", "mixtral-8x7b")
    assert code == 0 and "12,879,925,248 active per token" in out.splitlines()[0]
    assert out.splitlines()[1].split()[-1] == "active"
    experts = next(line for line in out.splitlines() if line.startswith("moe.experts"))
    assert experts.split()[-2:] == ["45,097,156,608", "11,274,289,152"]


def test_params_formula_symbolic_then_numbers(capsys) -> None:
    code, out, _ = run(capsys, "params", "gpt2", "--formula")
    assert code == 0
    tail = out.split("\n\n", 1)[1].splitlines()
    assert tail == [
        "N = L·(12·H^2 + 13·H) + H·V + H·n_pos + 2·H",
        "  at H=768, L=12, V=50257, n_pos=1024:",
        "N = 12·(12·768^2 + 13·768) + 768·50257 + 768·1024 + 2·768",
        "  = 124,439,808",
    ]


def test_params_from_a_config_path(capsys, tmp_path: Path) -> None:
    config = preset_config("qwen2-0.5b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, _ = run(capsys, "params", str(path), "--json")
    assert code == 0 and json.loads(out)["total"] == 494_032_768


def test_models_lists_presets_with_sources(capsys) -> None:
    code, out, _ = run(capsys, "models", "--json")
    data = json.loads(out)
    rows = data["presets"]
    assert code == 0 and [r["name"] for r in rows] == list(preset_names())
    families = {f["model_type"]: f for f in data["families"]}
    assert set(families) >= set(SUPPORTED) and all(families[t]["coverage"] == "table" for t in SUPPORTED)
    assert "mixtral-8x7b" in families["mixtral"]["presets"]
    assert all(r["source"] and r["total"] > 0 for r in rows)
    mixtral = next(r for r in rows if r["name"] == "mixtral-8x7b")
    assert mixtral["active"] == 12_879_925_248
    code, out, _ = run(capsys, "models")
    assert code == 0 and all(name in out for name in preset_names())
    assert "meta-llama/Meta-Llama-3-8B (reconstructed)" in out and "openai-community/gpt2 (verbatim)" in out


def _bad(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.json"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("argv,fragment", [
    (["params", "llama-3-7b"], "did you mean"),
    (["params", "no/such/config.json"], "no/such/config.json: no such file"),
    (["params", "BAD_JSON"], "not valid JSON (line 1"),
    (["params", "T5"], "UNKNOWN_TYPE"),
    (["params", "NEGATIVE"], "num_hidden_layers must be positive, got -2"),
])
@pytest.mark.imports_torch  # an unknown model_type is looked up in transformers where it is installed
def test_params_errors_are_one_line_exit_2(capsys, tmp_path: Path, argv: list[str], fragment: str) -> None:
    files = {"BAD_JSON": '{"model_type": "gpt2",, }', "T5": '{"model_type": "no_such_type"}',
             "NEGATIVE": '{"model_type": "llama", "num_hidden_layers": -2}'}
    argv = [_bad(tmp_path, files[a]) if a in files else a for a in argv]
    if fragment == "UNKNOWN_TYPE":  # with torch, transformers is asked; without it, the tables are listed
        fragment = ("model_type 'no_such_type' is not" if generic.torch_available() else
                    "model_type 'no_such_type' has no family table")
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("symbolic: error: ") and err.count("\n") == 1 and fragment in err


def test_params_exit_code_in_a_real_process(tmp_path: Path) -> None:
    path = _bad(tmp_path, '{"model_type": "falcon", "hidden_size": 4545}')
    proc = subprocess.run([sys.executable, "-m", "symbolic", "params", path], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().endswith("71 heads do not divide the hidden size 4545 and no head_dim is given")


@pytest.mark.parametrize(("name", "bias"), [("mlp", True), ("mlp-nobias", False)])
def test_params_of_article_a_network_as_memory_resolves_it(capsys, name: str, bias: bool) -> None:
    """'params mlp' answers for the network 'memory mlp' plans (article A's: Linear 2048→4096→4096→2048→10)."""
    layers = [(2048, 4096), (4096, 4096), (4096, 2048), (2048, 10)]  # (in, out) of gat, up, down, out
    expected = sum(i * o + (o if bias else 0) for i, o in layers)  # what nn.Linear holds: weight, and bias
    code, out, err = run(capsys, "params", name, "--json")
    data = json.loads(out)
    assert code == 0 and err == "" and data["total"] == expected and data["model"] == name
    assert sum(data["components"].values()) == expected and data["values"] == {"d_in": 2048, "d_h": 4096, "n_out": 10}
    assert data["formula"].startswith("N = ") and data["with_numbers"].startswith("N = 4096·2048")
    code, memory, _ = run(capsys, "memory", name, "--json")
    assert code == 0 and json.loads(memory)["derived"]["N"] == expected  # the same N as the memory plan
    code, text, err = run(capsys, "params", name, "--formula")
    assert code == 0 and err == "" and f"{expected:,} parameters" in text and "d_h·d_in" in text
    assert text.rstrip().endswith(f"= {expected:,}")


def test_a_mixture_of_experts_without_top_k_has_a_total_and_says_the_active_count_is_undefined(capsys, tmp_path) -> None:
    """DeepSeek-V2's default config (transformers leaves num_experts_per_tok None): total yes, active no."""
    from symbolic.networks.transformer import spec_from_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "deepseek_v2", "num_experts_per_tok": None}), encoding="utf-8")
    # the total does not depend on the top-k: that of the same config routed to 6 experts (test_architectures_torch
    # checks that one against the real module)
    routed = spec_from_config({"model_type": "deepseek_v2", "num_experts_per_tok": 6}, name="v2").param_count()
    code, out, err = run(capsys, "params", str(path), "--json")
    data = json.loads(out)
    assert code == 0 and err == "" and data["total"] == routed and data["active"] is None
    assert "num_experts_per_tok" in data["active_note"] and "active_formula" not in data
    code, out, err = run(capsys, "params", str(path), "--formula")
    assert code == 0 and err == "" and "active per token undefined" in out and f"= {routed:,}" in out
    assert "N_active" not in out
    plan = ["plan", "--gpu", "h100-80gb", "--mfu", "0.4", "--gpus", "8", "--global-batch", "8", "--seq", "1024"]
    for argv in (["memory"], ["fit", "--gpu", "h100-80gb", "--for", "batch"], plan):
        code, out, err = run(capsys, argv[0], str(path), *argv[1:])
        assert code == 2 and out == "" and err.count("\n") == 1, (argv, err)
        assert "num_experts_per_tok is not set" in err and "a plan needs it" in err


HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


@pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="which model types transformers knows is read from its source")
def test_a_transformers_model_type_is_not_a_typo_of_a_table_family(capsys, tmp_path, monkeypatch) -> None:
    """'mamba' is a transformers type (MambaForCausalLM): never "did you mean 'llama'?"; what it needs instead.

    With torch, ``time`` and ``fit`` plan it through the generic path (issue 26; ``test_generic_torch.py``
    checks that in its child process); without torch they say, in one line, that it needs the extra.
    """
    assert "mamba" in generic.known_types() and "mamba" not in SUPPORTED
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba"}), encoding="utf-8")
    monkeypatch.setattr(generic, "torch_available", lambda: False)
    for model in ("mamba", str(path)):  # the bare type (its default config) and a config of it
        for argv in (["time", "--gpu", "h100-80gb", "--mfu", "0.4"], ["fit", "--gpu", "h100-80gb", "--for", "batch"]):
            code, out, err = run(capsys, argv[0], model, *argv[1:])
            assert code == 2 and out == "" and err.count("\n") == 1, err
            assert "did you mean" not in err and "'mamba' is a transformers model type" in err
            assert "'torch' extra" in err
    code, out, err = run(capsys, "params", "mamba")
    assert code == 2 and out == "" and err.count("\n") == 1 and "did you mean" not in err
    assert "'mamba' is a transformers model type" in err and "'torch' extra" in err
    code, _, err = run(capsys, "params", "lama")  # a typo still gets its suggestion
    assert code == 2 and "did you mean 'llama'" in err


def test_a_bare_table_model_type_is_its_default_config(capsys) -> None:
    """'params mixtral' (no such preset): transformers' default Mixtral config, counted by the table, no torch."""
    from symbolic.networks.transformer import spec_from_config

    assert "mixtral" not in preset_names()
    code, out, err = run(capsys, "params", "mixtral", "--json")
    data = json.loads(out)
    default = spec_from_config({"model_type": "mixtral"}, name="mixtral")  # test_architectures_torch checks it
    assert code == 0 and err == "" and data["total"] == default.param_count() and data["model_type"] == "mixtral"
    assert data["active"] == default.active_param_count()
