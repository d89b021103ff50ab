"""A config's quantization_config (issue 27): the format its checkpoint ships in, used when --weights is not given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run

from symbolic.networks import quantization as q
from symbolic.networks import stored
from symbolic.networks.network import load

LLAMA = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
         "num_hidden_layers": 2, "vocab_size": 1024}


@pytest.mark.parametrize(("config", "fmt", "group"), [
    ({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
     "fp8-block", 128),  # DeepSeek-V3's README_WEIGHTS.md
    ({"quant_method": "fp8", "activation_scheme": "static"}, "fp8", None),
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}, "mxfp4", None),
    ({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": True}, "gptq-int4", 32),
    ({"quant_method": "gptq", "bits": 3, "group_size": -1, "desc_act": False}, "gptq-int3", -1),
    ({"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm", "zero_point": True}, "awq-int4", 64),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
      "bnb_4bit_use_double_quant": True}, "nf4-dq", None),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "fp4"}, "fp4", None),
    ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "bnb-int8", None),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}},
      "ignore": ["lm_head"]}, "fp8-channel", None),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                           "group_size": 16}}}}, "nvfp4", None),
])
def test_each_quant_method_is_read(config: dict, fmt: str, group: int | None) -> None:
    rules = q.read({"model_type": "llama", "quantization_config": config})
    assert rules is not None and not rules.error
    assert (rules.format, rules.group) == (fmt, group)


def test_modules_to_not_convert_are_matrix_roles() -> None:
    # gpt-oss's config.json
    rules = q.read({"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}})
    assert rules is not None and set(rules.kept) == {"attention", "router", "embedding", "lm_head"}


def _config(tmp_path: Path, quantization: dict) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "quantization_config": quantization}))
    return str(path)


def test_the_config_group_size_reaches_the_bytes(tmp_path: Path) -> None:
    g32 = load(_config(tmp_path, {"quant_method": "gptq", "bits": 4, "group_size": 32}))
    g128 = stored.weight_bytes(g32, "gptq-int4") - stored.weight_bytes(load(_config(
        tmp_path, {"quant_method": "gptq", "bits": 4, "group_size": 128})), "gptq-int4")
    # per matrix (in 512 or 1024 inputs): 3× more groups of one fp16 scale and one 4-bit zero point per output
    per_input_group = sum(int(g32.value(n * c)) * (int(g32.value(r)) // 32 - int(g32.value(r)) // 128)
                          for name, r, c, n in g32.matrices if name not in ("embedding", "lm_head"))
    assert g128 == per_input_group * (2 + 4 / 8)


@pytest.mark.parametrize(("quantization", "message"), [
    ({"quant_method": "hqq"}, "unknown quant_method 'hqq'; known: fp8, mxfp4, gptq, awq, bitsandbytes"),
    ({"quant_method": "gptq", "bits": 5}, "gptq bits 5"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {
        "num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}}, "are not modelled"),
])
def test_an_unreadable_quantization_config_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         quantization: dict, message: str) -> None:
    path = _config(tmp_path, quantization)
    code, _, err = run(capsys, "memory", path, "--mode", "infer")
    assert code == 2 and err.count("\n") == 1 and message in err, err
    code, _, err = run(capsys, "memory", path, "--mode", "infer", "--weights", "bf16")  # a chosen format plans it
    assert code == 0, err


def test_the_planner_uses_the_shipped_format_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path, {"quant_method": "awq", "bits": 4, "group_size": 128})
    code, out, err = run(capsys, "memory", path, "--mode", "infer", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["options"]["weights"] == "awq-int4"
    net = load(path)
    assert data["terms"]["weights"] + data["terms"]["embeddings"] == stored.weight_bytes(net, "awq-int4")
    assert any("awq-int4, the format the checkpoint ships in" in n for n in data["notes"])
    code, out, err = run(capsys, "memory", path, "--mode", "infer", "--weights", "bf16", "--json")
    data = json.loads(out)
    assert data["terms"]["weights"] + data["terms"].get("embeddings", 0) == 2 * net.total
    assert not any("ships in" in n for n in data["notes"])
