"""Weight formats as stored (issue 27): each format's bytes for one matrix, a network's stored bytes, params --weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sympy
from helpers import run

from symbolic import formats
from symbolic.core.errors import UserError
from symbolic.networks import stored
from symbolic.networks.network import load
from symbolic.networks.transformer import preset_names

GiB = 2**30
OUT, IN = 256, 512  # a small out × in matrix, every dimension a multiple of each format's block


@pytest.mark.parametrize(("name", "expected"), [
    # fp8 per tensor: 256·512 e4m3 bytes + one float32 weight_scale (compressed-tensors strategy tensor)
    ("fp8", OUT * IN + 4),
    # fp8 per channel: + weight_scale float32 [out, 1]
    ("fp8-channel", OUT * IN + 4 * OUT),
    # DeepSeek-V3: + weight_scale_inv float32 [⌈256/128⌉, ⌈512/128⌉] = 2·4 blocks
    ("fp8-block", OUT * IN + 4 * 2 * 4),
    # MXFP4 (gpt-oss): *_blocks uint8 [256, 512/32, 16] + *_scales uint8 [256, 512/32]
    ("mxfp4", OUT * (IN // 32) * 16 + OUT * (IN // 32)),
    # NVFP4 (ModelOpt): weight uint8 [256, 256] + weight_scale e4m3 [256, 512/16] + weight_scale_2 and input_scale fp32
    ("nvfp4", OUT * IN // 2 + OUT * (IN // 16) + 4 + 4),
    # GPTQ 4-bit g128 (QuantLinear): qweight int32 [512·4/32, 256], qzeros int32 [4, 256·4/32], scales fp16 [4, 256],
    # g_idx int32 [512]
    ("gptq-int4", 4 * (IN * 4 // 32) * OUT + 4 * 4 * (OUT * 4 // 32) + 2 * 4 * OUT + 4 * IN),
    ("gptq-int8", 4 * (IN * 8 // 32) * OUT + 4 * 4 * (OUT * 8 // 32) + 2 * 4 * OUT + 4 * IN),
    ("gptq-int3", 4 * (IN * 3 // 32) * OUT + 4 * 4 * (OUT * 3 // 32) + 2 * 4 * OUT + 4 * IN),
    ("gptq-int2", 4 * (IN * 2 // 32) * OUT + 4 * 4 * (OUT * 2 // 32) + 2 * 4 * OUT + 4 * IN),
    # AWQ GEMM: qweight int32 [512, 256/8], qzeros int32 [4, 256/8], scales fp16 [4, 256]; no g_idx
    ("awq-int4", 4 * IN * (OUT // 8) + 4 * 4 * (OUT // 8) + 2 * 4 * OUT),
    # bitsandbytes nf4/fp4: packed uint8 [w/2], absmax fp32 [w/64], quant_map fp32 [16]
    ("nf4", OUT * IN // 2 + 4 * (OUT * IN // 64) + 4 * 16),
    ("fp4", OUT * IN // 2 + 4 * (OUT * IN // 64) + 4 * 16),
    # double quantization: absmax uint8 [w/64], nested_absmax fp32 [⌈(w/64)/256⌉], nested code fp32 [256], offset fp32,
    # the 16-value code
    ("nf4-dq", OUT * IN // 2 + OUT * IN // 64 + 4 * 8 + 4 * 256 + 4 + 4 * 16),
    # LLM.int8: CB int8 [256, 512] + SCB fp32 [256]
    ("bnb-int8", OUT * IN + 4 * OUT),
])
def test_each_format_stores_a_matrix_as_its_library_does(name: str, expected: int) -> None:
    assert formats.get(name).matrix_bytes(OUT, IN) == expected


def test_a_group_size_from_the_config_changes_gptq_bytes() -> None:
    # group 32: 16 groups of scales and zero points instead of 4
    g32 = 4 * (IN * 4 // 32) * OUT + 4 * 16 * (OUT * 4 // 32) + 2 * 16 * OUT + 4 * IN
    assert formats.get("gptq-int4").matrix_bytes(OUT, IN, 32) == g32
    assert formats.get("gptq-int4").matrix_bytes(OUT, IN, -1) == 4 * (IN * 4 // 32) * OUT + 4 * (OUT * 4 // 32) \
        + 2 * OUT + 4 * IN  # one group per row


def test_kv_block_types_are_ggml_block_bytes_per_number() -> None:
    # ggml-common.h: block_q8_0 34 bytes per 32, q4_0 18, q4_1 20, q5_0 22, q5_1 24, iq4_nl 18
    for name, size in (("q8_0", 34), ("q4_0", 18), ("q4_1", 20), ("q5_0", 22), ("q5_1", 24), ("iq4_nl", 18)):
        assert formats.get(name, "kv").element_bytes == sympy.Rational(size, 32), name
    assert formats.get("fp8", "kv").layer_bytes == 2 * 4  # k_scale and v_scale, float32, per attention layer


def test_the_qlora_base_keeps_its_double_quantized_numbers() -> None:
    # the measured QLoRA base (library/lora.py): 1/2 + 1/64 + 4/(64·256) bytes per number plus 1092 per tensor
    n = 64 * 256
    assert formats.get("nf4-dq").tensor_bytes(sympy.Integer(n)) == n // 2 + n // 64 + 4 + 64 + 4 + 1024


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_stores_every_tensor(name: str) -> None:
    """bf16 stores exactly 2 bytes per parameter; a shaped format's parts count every parameter once."""
    net = load(name)
    assert stored.weight_bytes(net, "bf16") == 2 * net.total
    parts = stored.stored_parts(net, "fp8-block")
    assert sum(p.params for p in parts.values()) == net.total
    assert all(p.params >= 0 for p in parts.values())


def test_gpt_oss_checkpoints_as_published() -> None:
    # OpenAI, gpt-oss-120b & gpt-oss-20b model card (arXiv 2508.10925), Table 1: checkpoint sizes 12.8 GiB and 60.8 GiB
    for name, published in (("gpt-oss-20b", 12.8), ("gpt-oss-120b", 60.8)):
        net = load(name)
        assert net.quantization == "mxfp4"
        got = stored.weight_bytes(net, "mxfp4") / GiB
        assert abs(got / published - 1) < 0.005, (name, got)


def test_deepseek_v3_fp8_checkpoint_as_published(tmp_path: Path) -> None:
    """deepseek-ai/DeepSeek-V3 at afb92e1f: weight files of 688,586,727,753 bytes (its safetensors' total).

    That file holds the 671B main model and the multi-token-prediction module (README_WEIGHTS.md: one more
    decoder layer, eh_proj of 2H → H, enorm, hnorm, shared_head.norm, and its own copies of embed_tokens and
    shared_head.head). Compared: the main model as stored + one more MoE layer (the 62-layer model's extra
    bytes) + eh_proj in fp8-block + three bf16 norms + the two bf16 V × H copies.
    """
    net = load("deepseek-v3")
    assert net.quantization == "fp8-block"
    config = json.loads((Path(__file__).parent.parent / "symbolic/presets/deepseek-v3.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "num_hidden_layers": 62}))
    main = stored.weight_bytes(net, "fp8-block")
    layer = stored.weight_bytes(load(str(path)), "fp8-block") - main
    h, v = config["hidden_size"], config["vocab_size"]
    mtp = layer + int(formats.get("fp8-block").matrix_bytes(h, 2 * h)) + 2 * 3 * h + 2 * 2 * v * h
    assert abs((main + mtp) / 688_586_727_753 - 1) < 0.005


def test_the_quantization_config_keeps_what_it_names() -> None:
    net = load("gpt-oss-120b")
    own = stored.stored_weights(net, "mxfp4")
    # without modules_to_not_convert the attention would be mxfp4 too: the shipped checkpoint keeps it in bf16
    shaped = formats.get("mxfp4")
    attention = sum(int(net.value(n * r * c)) for name, r, c, n in net.matrices if name.startswith("attention."))
    assert own["bf16"] > 2 * attention
    assert shaped.kept_roles and "attention" not in shaped.kept_roles


def test_a_format_a_model_cannot_take_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 100, "intermediate_size": 300,
                                "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000}))
    with pytest.raises(UserError, match=r"cannot be stored as gptq-int4: its attention.q is 100 × 100") as e:
        stored.weight_bytes(load(str(path)), "gptq-int4")
    assert "\n" not in str(e.value)


def test_params_says_the_stored_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "params", "llama-3-8b", "--weights", "gptq-int4", "--json")
    assert code == 0, err
    data = json.loads(out)
    net = load("llama-3-8b")
    assert data["weight_bytes_by_type"] == stored.stored_weights(net, "gptq-int4")
    assert data["weight_bytes"] == sum(data["weight_bytes_by_type"].values()) and data["weight_format_from"] == "--weights"
    code, out, err = run(capsys, "params", "gpt-oss-20b")
    assert code == 0 and "weights as stored in mxfp4 (the config's quantization_config)" in out, err
    code, out, _ = run(capsys, "params", "llama-3-8b", "--json")
    assert "weight_bytes" not in json.loads(out)  # no format asked for, none shipped: the count alone


def test_gpt_oss_120b_fits_one_h200_in_its_own_format(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "memory", "gpt-oss-120b", "--mode", "infer", "--gpu", "h200", "--seq", "32768",
                         "--json")
    assert code == 0, err
    data = json.loads(out)
    weights = data["terms"]["weights"] + data["terms"]["embeddings"]
    assert weights == pytest.approx(stored.weight_bytes(load("gpt-oss-120b"), "mxfp4"), rel=1e-9)
    assert any("quantization_config" in n for n in data["notes"])
    code, out, err = run(capsys, "fit", "gpt-oss-120b", "--mode", "infer", "--gpu", "h200", "--seq", "32768",
                         "--for", "batch")
    assert code == 0, err
