"""Hub ids resolved offline from the local Hugging Face cache, and the one model resolver (issues 11, 12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run

from symbolic.core.errors import UnknownNameError
from symbolic.measured import predict
from symbolic.networks import hub
from symbolic.networks import shape as planning_model
from symbolic.networks import transformer as architectures

REV = "0123456789abcdef0123456789abcdef01234567"


def _cache(root: Path, hub_id: str, preset: str, revision: str = REV) -> Path:
    """A hub cache folder holding ``preset``'s config under ``hub_id``, the layout huggingface_hub writes."""
    org, name = hub_id.split("/")
    repo = root / f"models--{org}--{name}"
    snap = repo / "snapshots" / revision
    snap.mkdir(parents=True)
    config = {k: v for k, v in architectures.preset_config(preset).items() if k != "_source"}
    (snap / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision, encoding="utf-8")
    return snap / "config.json"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.delenv("HF_HOME", raising=False)
    return root


def test_params_of_a_cached_hub_id_equals_the_preset(capsys, hub_cache) -> None:
    _cache(hub_cache, "meta-llama/Meta-Llama-3-8B", "llama-3-8b")
    code, out, err = run(capsys, "params", "meta-llama/Meta-Llama-3-8B", "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["total"] == architectures.load("llama-3-8b").param_count()
    assert data["model"] == "meta-llama/Meta-Llama-3-8B"


def test_hf_home_means_its_hub_folder(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    path = _cache(tmp_path / "home" / "hub", "openai-community/gpt2", "gpt2")
    assert hub.cache_dir() == tmp_path / "home" / "hub"
    assert architectures.resolve("openai-community/gpt2").path == path
    assert architectures.load("openai-community/gpt2").param_count() == architectures.load("gpt2").param_count()


def test_refs_main_chooses_the_snapshot(hub_cache) -> None:
    _cache(hub_cache, "org/model", "gpt2", revision="a" * 40)
    main = _cache(hub_cache, "org/other", "opt-125m", revision="b" * 40)
    # a second snapshot of org/model, newer on disk, is not the one refs/main names
    newer = hub_cache / "models--org--model" / "snapshots" / ("c" * 40)
    newer.mkdir()
    (newer / "config.json").write_text(main.read_text(encoding="utf-8"), encoding="utf-8")
    assert architectures.resolve("org/model").path == hub_cache / "models--org--model" / "snapshots" / ("a" * 40) / "config.json"
    (hub_cache / "models--org--model" / "refs" / "main").unlink()
    assert architectures.resolve("org/model").path == newer / "config.json"


def test_an_id_not_cached_says_where_it_looked(capsys, hub_cache) -> None:
    code, out, err = run(capsys, "params", "Qwen/Qwen3-8B")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "not in the local Hugging Face cache" in err
    assert str(hub_cache / "models--Qwen--Qwen3-8B" / "snapshots") in err and "nothing is downloaded" in err
    with pytest.raises(UnknownNameError):
        architectures.resolve("Qwen/Qwen3-8B")


def test_folder_and_file_and_preset_resolve_to_the_same_config(tmp_path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    config = {k: v for k, v in architectures.preset_config("qwen2-0.5b").items() if k != "_source"}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    by_folder = architectures.resolve_config(str(folder))
    by_file = architectures.resolve_config(str(folder / "config.json"))
    assert by_folder == by_file == ("my-model", config)
    assert architectures.resolve_config("qwen2-0.5b") == ("qwen2-0.5b", config)
    assert architectures.resolve("qwen2-0.5b").kind == "preset" and architectures.resolve(str(folder)).kind == "path"


def test_predict_and_planner_use_the_one_resolver(hub_cache) -> None:
    _cache(hub_cache, "openai-community/gpt2", "gpt2")
    assert predict.config_of("openai-community/gpt2") == architectures.resolve_config("openai-community/gpt2")
    shape = planning_model.load("openai-community/gpt2")
    assert shape.numbers == planning_model.load("gpt2").numbers
    assert shape.config == architectures.resolve_config("gpt2")[1]


def test_an_existing_folder_wins_over_a_hub_id(tmp_path, monkeypatch, hub_cache) -> None:
    _cache(hub_cache, "org/name", "gpt2")
    local = tmp_path / "org" / "name"
    local.mkdir(parents=True)
    config = {k: v for k, v in architectures.preset_config("opt-125m").items() if k != "_source"}
    (local / "config.json").write_text(json.dumps(config), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert architectures.resolve("org/name").kind == "path"
    assert architectures.load("org/name").param_count() == architectures.load("opt-125m").param_count()


@pytest.mark.parametrize("text", ["../etc/passwd", "a/b/c", "org/name.json"])
def test_only_org_slash_name_is_a_hub_id(text) -> None:
    assert not hub.looks_like_hub_id(text)
