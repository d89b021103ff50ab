"""Real architectures: exact counts of every preset, config defaults, formulas and errors.

The reference counts come from the real ``transformers`` models built on the meta device
(``symbolic/presets/reference_counts.json``, written by ``benchmarks/reference_param_counts.py``);
``test_architectures_torch.py`` repeats that comparison live when torch is installed.
"""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path

import pytest
import sympy

from symbolic import Formula
from symbolic.core.symbols import H, L, V, a_kv, d_ff, k_exp, n_exp, n_pos
from symbolic.networks.transformer import (
    SUPPORTED,
    ConfigError,
    ModelSpec,
    ModelSpecError,
    breakdown,
    load,
    preset_config,
    preset_names,
    preset_source,
    spec_from_config,
    with_numbers,
)

REFERENCE = json.loads((resources.files("symbolic") / "presets" / "reference_counts.json").read_text())
COUNTS = REFERENCE["counts"]

# Published totals (ANCHORS.md); the other presets are checked against reference_counts.json.
PUBLISHED = {
    "gpt2": 124_439_808,
    "llama-2-7b": 6_738_415_616,
    "llama-3-8b": 8_030_261_248,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
}
MIXTRAL_ACTIVE = 12_879_925_248


# --- every preset is exact ------------------------------------------------------------------
@pytest.mark.parametrize("name,total", PUBLISHED.items())
def test_published_totals(name: str, total: int) -> None:
    assert load(name).param_count() == total


def test_mixtral_active_per_token() -> None:
    spec = load("mixtral-8x7b")
    assert spec.active_param_count() == MIXTRAL_ACTIVE
    # ANCHORS.md: total − L·(E − k)·3·H·I
    assert spec.param_count() - 32 * 6 * 3 * 4096 * 14336 == MIXTRAL_ACTIVE


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_equals_the_real_library(name: str) -> None:
    spec = load(name)
    assert spec.param_count() == COUNTS[name]["total"]
    active = COUNTS[name]["active"]
    assert spec.active_param_count() == (COUNTS[name]["total"] if active is None else active)
    assert spec.architecture == COUNTS[name]["class"]


def test_preset_names_are_the_shipped_files() -> None:
    names = preset_names()
    assert set(names) == set(COUNTS)
    assert {"gpt2", "gpt2-medium", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
            "mistral-7b", "mixtral-8x7b"} <= set(names)
    assert names.index("llama-2-7b") < names.index("llama-2-13b") < names.index("llama-2-70b")
    assert all(preset_source(n).startswith("Hugging Face hub: ") for n in names)


def _category(key: str) -> str:
    if key in ("attention.q_norm", "attention.kv_norm", "attention.qk_norm"):  # norms inside attention
        return "norm"
    if key.startswith(("attention.", "cross_attention")):
        return "attention"
    if key == "moe.router":
        return "router"
    if key == "moe.experts":
        return "mlp_experts"
    return {"norms": "norm"}.get(key, "mlp")


@pytest.mark.parametrize("name", preset_names())
def test_components_agree_with_the_real_model_structure(name: str) -> None:
    """Per-layer attention / MLP / norms and the parts outside the layers, as the library has them."""
    spec, ref = load(name), REFERENCE["breakdown"][name]
    per_layer: dict[str, int] = {}
    outside: dict[str, int] = {}
    dense_first = spec.dense_layers > 0  # the reference describes layer 0: dense in DeepSeek (first_k_dense_replace)
    for c in breakdown(spec):
        if c.per_layer is not None:
            if dense_first and c.layers == spec.moe_layers and c.key.startswith("moe."):
                continue
            per_layer[_category(c.key)] = per_layer.get(_category(c.key), 0) + c.per_layer
        else:
            group = {"positions": "embedding", "token_types": "embedding", "lm_head_bias": "lm_head"}.get(c.key, c.key)
            if spec.mlm_transform and c.key in ("mlm_transform", "lm_head_bias"):
                group = "mlm_head"
            outside[group] = outside.get(group, 0) + c.total
    assert per_layer == {k: v for k, v in ref["per_layer"].items() if k != "total"}
    assert outside == ref["outside_layers"]
    assert sum(spec.components().values()) == spec.param_count()


# --- formulas ------------------------------------------------------------------------------
def test_gpt2_formula_reads_as_the_known_one() -> None:
    spec = load("gpt2")
    f = spec.params_formula()
    assert isinstance(f, Formula) and f.unit == "params"
    assert str(f) == "N = L·(12·H^2 + 13·H) + H·V + H·n_pos + 2·H"
    assert f.expr == L * (12 * H**2 + 13 * H) + V * H + n_pos * H + 2 * H
    assert spec.values() == {"H": 768, "L": 12, "V": 50257, "n_pos": 1024}
    assert f.example == spec.values()
    assert f.evaluate(spec.values()).total == 124_439_808
    assert with_numbers(f, spec.values()) == "12·(12·768^2 + 13·768) + 768·50257 + 768·1024 + 2·768"
    assert f.latex() == r"L \left(12 H^{2} + 13 H\right) + H V + H n_{\mathrm{pos}} + 2 H"


def test_llama3_formula_has_gqa_and_an_untied_head() -> None:
    spec = load("llama-3-8b")
    f = spec.params_formula()
    assert [t.key for t in f.terms] == ["layers", "embedding", "final_norm", "lm_head"]
    assert f.term("lm_head").expr == V * H
    layer = spec.layer_formula()
    assert layer.term("attention.k").expr == H**2 * a_kv / sympy.Symbol("a", positive=True, integer=True)
    assert [t.key for t in layer.terms] == ["attention.q", "attention.k", "attention.v", "attention.o",
                                            "mlp.gate", "mlp.up", "mlp.down", "norms"]
    assert layer.term("mlp.up").expr == H * d_ff
    # one more KV head adds 2·H·d_head per layer: the formula answers what-if questions
    assert f.diff("a_kv") == 2 * L * H**2 / sympy.Symbol("a", positive=True, integer=True)
    assert f.evaluate(spec.values()).total == 8_030_261_248


def test_explicit_head_dim_and_sizes_are_symbols() -> None:
    f = load("gemma-7b").params_formula()
    assert {"d_head", "a", "a_kv", "d_ff"} <= {s.name for s in f.inputs}
    assert load("gemma-7b").values()["d_head"] == 256


def test_moe_active_formula_routes_top_k() -> None:
    spec = load("mixtral-8x7b")
    total, active = spec.layer_formula(), spec.layer_formula(active=True)
    assert total.term("moe.experts").expr == 3 * n_exp * H * d_ff
    assert active.term("moe.experts").expr == 3 * k_exp * H * d_ff
    assert active.term("moe.router").expr == n_exp * H  # the router runs for every token
    assert "k_exp" not in spec.values() and spec.values(active=True)["k_exp"] == 2
    assert spec.active_params_formula().evaluate(spec.values(active=True)).total == MIXTRAL_ACTIVE


def test_dense_model_active_equals_total() -> None:
    spec = load("llama-2-7b")
    assert spec.active_param_count() == spec.param_count()
    assert not spec.is_moe


def test_formula_built_on_demand_not_registered() -> None:
    import symbolic

    spec = load("gpt2")
    assert spec.params_formula().key == "gpt2.params"
    assert "gpt2.params" not in symbolic.keys()


def test_symbolic_architectures_load_is_exported() -> None:
    import symbolic

    assert symbolic.networks.transformer.load("gpt2").param_count() == 124_439_808


# --- reading configs -------------------------------------------------------------------------
DEFAULT_COUNTS = {  # a config with only model_type is the library's default model
    "gpt2": 124_439_808,            # GPT-2 small
    "llama": 6_738_415_616,         # Llama-2-7B
    "mistral": 7_241_732_096,       # Mistral-7B
    "mixtral": 46_702_792_704,      # Mixtral-8x7B
    "gemma": 8_537_680_896,         # Gemma-7B (head_dim 256, tied)
    "opt": 125_239_296,             # OPT-125m
    "falcon": 6_921_720_704,        # Falcon-7B (multi-query, parallel, one norm)
    "bert": 109_482_240,            # bert-base as BertModel (pooler, no MLM head)
}


@pytest.mark.parametrize("model_type,total", DEFAULT_COUNTS.items())
def test_missing_fields_take_the_library_defaults(model_type: str, total: int) -> None:
    assert spec_from_config({"model_type": model_type}, name="d").param_count() == total


def test_partial_configs_fill_in_standard_relations() -> None:
    gpt2 = spec_from_config({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2}, name="g")
    assert gpt2.ffn is None and gpt2.resolved_ffn == 256 and gpt2.tied and gpt2.positions == 1024
    llama = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}, name="l")
    assert llama.kv_heads is None and llama.resolved_kv_heads == 4 and llama.resolved_head_dim == 16
    assert not llama.tied and llama.vocab == 32000
    opt = spec_from_config({"model_type": "opt", "hidden_size": 64, "num_attention_heads": 4}, name="o")
    assert opt.positions == 2050 and opt.embed_dim is None
    falcon = spec_from_config({"model_type": "falcon", "multi_query": False}, name="f")
    assert falcon.kv_heads is None and falcon.norms_per_layer == 1
    assert spec_from_config({"model_type": "falcon"}, name="f").kv_heads == 1


def test_bert_head_class_decides_the_heads() -> None:
    base = dict(preset_config("bert-base-uncased"))
    base.pop("_source")
    count = {cls: spec_from_config({**base, "architectures": [f"Bert{cls}"]}, name="b").param_count()
             for cls in ("ForMaskedLM", "Model", "ForSequenceClassification", "ForTokenClassification")}
    assert count["ForMaskedLM"] == 109_514_298
    assert count["Model"] == 109_482_240
    assert count["ForSequenceClassification"] == 109_482_240 + 2 * 768 + 2
    assert count["ForTokenClassification"] == 109_482_240 - (768**2 + 768) + 2 * 768 + 2
    labels = spec_from_config({**base, "architectures": ["BertForSequenceClassification"],
                               "id2label": {"0": "a", "1": "b", "2": "c"}}, name="b")
    assert labels.classifier == 3 and labels.values()["n_cls"] == 3


def test_path_directory_and_case_insensitive_names(tmp_path: Path) -> None:
    config = preset_config("llama-2-7b")
    (tmp_path / "Llama-2-7b-hf").mkdir()
    target = tmp_path / "Llama-2-7b-hf" / "config.json"
    target.write_text(json.dumps(config))
    assert load(target).param_count() == 6_738_415_616
    assert load(str(target.parent)).name == "Llama-2-7b-hf"
    assert load("LLaMA-2-7B").name == "llama-2-7b"


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.json"
    path.write_text(text)
    return str(path)


LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}


@pytest.mark.parametrize("config,fragment", [
    ({"model_type": "t5"}, "; supported: gpt2, bert, llama"),
    ({"model_type": "lama"}, "did you mean 'llama'?"),
    ({"hidden_size": 64}, "no 'model_type' field; supported model types: gpt2, bert"),
    ({**LLAMA, "hidden_size": "768"}, "hidden_size must be an integer, got '768'"),
    ({**LLAMA, "hidden_size": 768.0}, "hidden_size must be an integer, got 768.0"),
    ({**LLAMA, "hidden_size": True}, "hidden_size must be an integer, got true"),
    ({**LLAMA, "num_hidden_layers": 0}, "num_hidden_layers must be positive, got 0"),
    ({**LLAMA, "vocab_size": -5}, "vocab_size must be positive, got -5"),
    ({**LLAMA, "hidden_size": 100, "num_attention_heads": 3}, "3 heads do not divide the hidden size 100"),
    ({**LLAMA, "tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
    ({**LLAMA, "architectures": ["LlamaForTokenClassification"]}, "is not supported for llama; supported: "),
    ({**LLAMA, "architectures": "LlamaForCausalLM"}, "architectures must be a list"),
    ({**LLAMA, "intermediate_size": 10**15}, "implausibly large"),
    ({"model_type": "qwen2_moe", "num_hidden_layers": 2, "mlp_only_layers": [0, 1]}, "every layer is dense"),
    ({"model_type": "qwen3_moe", "mlp_only_layers": "0"}, "mlp_only_layers must be a list of integers"),
    ({"model_type": "gemma2", "layer_types": ["sliding_attention"]}, "layer_types has 1 entries for 26 layers"),
    ({"model_type": "qwen3", "num_hidden_layers": 1, "layer_types": ["linear_attention"]},
     "layer type 'linear_attention' is not covered"),
    ({"model_type": "gemma2", "sliding_window": 0}, "sliding_window must be a positive integer"),
])
def test_bad_configs_give_one_line_errors(tmp_path: Path, config: dict, fragment: str) -> None:
    path = _write(tmp_path, json.dumps(config))
    with pytest.raises(ConfigError) as err:
        load(path)
    message = str(err.value)
    assert fragment in message and "\n" not in message and message.startswith(path)


def test_heads_that_do_not_divide_are_fine_with_head_dim() -> None:
    spec = spec_from_config({**LLAMA, "hidden_size": 100, "num_attention_heads": 3, "head_dim": 32}, name="x")
    assert spec.param_count() > 0


@pytest.mark.parametrize("text,fragment", [
    ('{\n  "model_type": "gpt2",\n  "n_embd": 768,\n}', "not valid JSON (line 4, column 1"),
    ('{"model_type": "gpt2", "n_embd": NaN}', "n_embd must be an integer, got NaN"),
    ('[1, 2]', "expected a JSON object, found list"),
])
def test_malformed_files_name_file_and_line(tmp_path: Path, text: str, fragment: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match="config.json") as err:
        load(path)
    assert fragment in str(err.value)


def test_unknown_names_and_missing_files() -> None:
    with pytest.raises(ConfigError, match=r"unknown model 'llama-3-7b' \(did you mean .*'llama-3-8b'.*\?\)"):
        load("llama-3-7b")
    with pytest.raises(ConfigError, match="no such file"):
        load("models/missing/config.json")


# --- the spec itself -----------------------------------------------------------------------
def test_spec_is_frozen_hashable_and_validated() -> None:
    spec = ModelSpec(name="tiny", model_type="llama", hidden=64, layers=2, heads=4, vocab=100, kv_heads=2,
                     gated_mlp=True, norm="rmsnorm", ffn=128)
    assert spec.norm_bias is False and hash(spec) == hash(dataclasses.replace(spec))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.hidden = 1  # type: ignore[misc]
    # 2 layers × (q 64² + k,v 2·64·32 + o 64² + 3·64·128 + 2·64) + embedding + final norm + head
    assert spec.param_count() == 2 * (4096 + 4096 + 4096 + 24576 + 128) + 6400 + 64 + 6400
    bigger = dataclasses.replace(spec, layers=3)
    assert bigger.param_count() - spec.param_count() == spec.layer_formula().evaluate(
        spec.layer_formula().example).total


@pytest.mark.parametrize("changes,fragment", [
    ({"hidden": 0}, "hidden must be a positive integer"),
    ({"hidden": True}, "hidden must be a positive integer"),
    ({"norm": "batchnorm"}, "norm must be one of layernorm, rmsnorm"),
    ({"norm": "rmsnorm", "norm_bias": True}, "an RMSNorm has no bias"),
    ({"experts": 4, "top_k": 5}, "top_k must be between 1 and the 4 experts"),
    ({"top_k": 2}, "need experts > 0"),
    ({"tied": "yes"}, "tied must be true or false"),
    ({"heads": 3}, "3 heads do not divide the hidden size 64"),
])
def test_spec_errors(changes: dict, fragment: str) -> None:
    fields = {"name": "tiny", "model_type": "llama", "hidden": 64, "layers": 2, "heads": 4, "vocab": 100}
    with pytest.raises(ModelSpecError, match=fragment):
        ModelSpec(**{**fields, **changes})


def test_shared_experts_and_expert_sizes() -> None:
    spec = ModelSpec(name="moe", model_type="qwen2_moe", hidden=64, layers=2, heads=4, vocab=100, ffn=96,
                     gated_mlp=True, norm="rmsnorm", experts=4, top_k=2, expert_ffn=32, shared_experts=1,
                     shared_ffn=80, shared_expert_gate=True)
    layer = spec.layer_formula()
    assert {"moe.router", "moe.experts", "moe.shared", "moe.shared_gate"} <= {t.key for t in layer.terms}
    assert spec.values()["d_exp"] == 32 and spec.values()["d_shared"] == 80
    expert = 3 * 64 * 32
    assert spec.param_count() - spec.active_param_count() == 2 * (4 - 2) * expert


def test_supported_types() -> None:
    assert set(SUPPORTED) >= {"gpt2", "bert", "llama", "mistral", "mixtral", "qwen2", "gemma", "phi", "opt",
                              "falcon", "gpt_neox"}
