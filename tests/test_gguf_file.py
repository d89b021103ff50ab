"""A GGUF file as a model input (issue 27): the bounded header reader, its architecture as a table config, the CLI.

The files are written here by ``gguf_writer`` (its layout checked once, byte for byte, against the ``gguf``
package; see that module). Most stop after the header, as the reader never needs the tensor data; one is
complete. Expected counts come from the presets the headers are made from, bytes from ggml's block structs
(``gguf_writer.GGML``), file type ids from llama.cpp's ``enum llama_ftype`` (15 is MOSTLY_Q4_K_M).
"""

from __future__ import annotations

import struct
from math import prod
from pathlib import Path

import gguf_writer as w
import pytest
from helpers import run

from symbolic.formats import gguf_file
from symbolic.formats.gguf_file import KEEP_ARRAY, GgufError, SkippedArray, read_header
from symbolic.networks import gguf_config
from symbolic.networks.network import load
from symbolic.networks.stored import stored_weights
from symbolic.networks.transformer import preset_config, spec_from_config

Q4_K_M = 15  # include/llama.h: LLAMA_FTYPE_MOSTLY_Q4_K_M


def _decoder_meta(arch: str, cfg: dict, **extra: object) -> dict[str, object]:
    """The {arch}.* keys convert_hf_to_gguf.py writes for a Hugging Face config's sizes."""
    meta: dict[str, object] = {
        "general.architecture": arch, "general.file_type": Q4_K_M,
        f"{arch}.block_count": cfg["num_hidden_layers"], f"{arch}.context_length": cfg["max_position_embeddings"],
        f"{arch}.embedding_length": cfg["hidden_size"], f"{arch}.feed_forward_length": cfg["intermediate_size"],
        f"{arch}.attention.head_count": cfg["num_attention_heads"],
        f"{arch}.attention.head_count_kv": cfg["num_key_value_heads"],
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
    }
    if cfg.get("head_dim"):
        meta[f"{arch}.attention.key_length"] = meta[f"{arch}.attention.value_length"] = cfg["head_dim"]
    meta.update({f"{arch}.{k}": v for k, v in extra.items()})
    return meta


def _llama3(tmp_path: Path) -> tuple[Path, dict]:
    cfg = preset_config("llama-3-8b")
    tensors = w.decoder_tensors(hidden=cfg["hidden_size"], layers=cfg["num_hidden_layers"],
                                heads=cfg["num_attention_heads"], kv_heads=cfg["num_key_value_heads"],
                                head_dim=cfg["hidden_size"] // cfg["num_attention_heads"], ffn=cfg["intermediate_size"],
                                vocab=cfg["vocab_size"])
    return w.write(tmp_path / "Llama-3-8B-Q4_K_M.gguf", _decoder_meta("llama", cfg), tensors), cfg


def test_llama_header_with_grouped_kv_heads_counts_as_its_preset(tmp_path):
    path, cfg = _llama3(tmp_path)
    net = load(str(path))
    assert net.total == load("llama-3-8b").total
    assert net.kv_head_count == cfg["num_key_value_heads"] and net.heads == cfg["num_attention_heads"]
    assert net.quantization == "gguf:Q4_K_M" and net.name == "Llama-3-8B-Q4_K_M"
    assert len(net.stored_tensors) == 3 + 9 * cfg["num_hidden_layers"]  # embedding, norm, output; 9 per layer
    head = read_header(path)
    for t, info in zip(net.stored_tensors, head.tensors):
        assert t.nbytes == w.tensor_nbytes(info.shape, info.type)  # ggml's block bytes, written independently
    by_type: dict[str, int] = {}
    for t in net.stored_tensors:
        by_type[t.type] = by_type.get(t.type, 0) + w.tensor_nbytes(t.shape, t.type)
    assert stored_weights(net, net.quantization) == by_type
    assert stored_weights(net, "bf16") == {"bf16": 2 * net.total}  # another format: the table's rule, as before
    assert len(net.notes) == 1 and "header-only" in net.notes[0]  # the tensor counts agree; only the data is absent


def test_a_complete_small_file_with_every_tested_type(tmp_path):
    cfg = {"model_type": "llama", "vocab_size": 320, "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
           "tie_word_embeddings": False}
    tensors = w.decoder_tensors(hidden=256, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=320,
                                embed="F16", output="Q8_0")
    path = w.write(tmp_path / "tiny.gguf", _decoder_meta("llama", cfg), tensors, data=True)
    head = read_header(path)
    assert {t.type for t in head.tensors} == {"F32", "F16", "Q4_K", "Q6_K", "Q8_0"}
    assert head.complete and head.data_offset % head.alignment == 0
    assert path.stat().st_size == head.data_offset + head.data_bytes  # the writer's padding, as gguf.cpp sums it
    net = load(str(path))
    assert net.total == spec_from_config(cfg, name="tiny").param_count()
    assert net.notes == ()


def test_mixture_of_experts_header_counts_as_its_preset(tmp_path):
    cfg = preset_config("qwen3-30b-a3b")
    tensors = w.decoder_tensors(hidden=cfg["hidden_size"], layers=cfg["num_hidden_layers"],
                                heads=cfg["num_attention_heads"], kv_heads=cfg["num_key_value_heads"],
                                head_dim=cfg["head_dim"], ffn=0, vocab=cfg["vocab_size"], qk_norm=True,
                                experts=cfg["num_experts"], expert_ffn=cfg["moe_intermediate_size"])
    meta = _decoder_meta("qwen3moe", cfg, expert_count=cfg["num_experts"], expert_used_count=cfg["num_experts_per_tok"],
                         expert_feed_forward_length=cfg["moe_intermediate_size"])
    net = load(str(w.write(tmp_path / "q3moe.gguf", meta, tensors)))
    preset = load("qwen3-30b-a3b")
    assert (net.total, net.active, net.moe) == (preset.total, preset.active, True)
    assert not [n for n in net.notes if "numbers" in n]  # Σ of the tensors' elements is the table's count


def test_gemma3_header_with_a_sliding_window(tmp_path):
    layers, window = 12, 512
    cfg = {"model_type": "gemma3_text", "vocab_size": 1024, "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
           "max_position_embeddings": 32768, "sliding_window": window, "tie_word_embeddings": True}
    tensors = w.decoder_tensors(hidden=256, layers=layers, heads=4, kv_heads=1, head_dim=64, ffn=512, vocab=1024,
                                tied=True, qk_norm=True, norms=("post_attention_norm", "post_ffw_norm"))
    meta = _decoder_meta("gemma3", cfg, **{"attention.sliding_window": window})
    net = load(str(w.write(tmp_path / "gemma3.gguf", meta, tensors)))
    assert net.total == spec_from_config(cfg, name="gemma3").param_count()
    sliding = sum(1 for i in range(layers) if (i + 1) % 6)  # Gemma-3: every sixth layer global
    assert net.layer_kinds == {"sliding": sliding, "full": layers - sliding}
    assert net.spec.window == window and not [n for n in net.notes if "numbers" in n]


def _embeddings(cfg: dict) -> list[tuple[str, tuple[int, ...], str]]:
    return [("token_embd.weight", (cfg["hidden_size"], cfg["vocab_size"]), "Q8_0"),
            ("output.weight", (cfg["hidden_size"], cfg["vocab_size"]), "Q8_0")]


@pytest.mark.parametrize(("preset", "arch", "tied"), [
    ("qwen2-7b", "qwen2", False), ("phi-3-mini-4k", "phi3", False), ("gemma-2b", "gemma", True),
    ("mixtral-8x7b", "llama", False),  # llama.cpp writes Mixtral as llama with experts
])
def test_dense_and_llama_expert_headers_count_as_their_presets(tmp_path, preset, arch, tied):
    cfg = preset_config(preset)
    experts = ({"expert_count": cfg["num_local_experts"], "expert_used_count": cfg["num_experts_per_tok"]}
               if "num_local_experts" in cfg else {})
    tensors = _embeddings(cfg)[:1] if tied else _embeddings(cfg)
    net = load(str(w.write(tmp_path / f"{preset}.gguf", _decoder_meta(arch, cfg, **experts), tensors)))
    reference = load(preset)
    assert (net.model_type, net.total, net.active) == (reference.model_type, reference.total, reference.active)


def test_gpt_oss_header_counts_as_its_preset(tmp_path):
    cfg = preset_config("gpt-oss-20b")
    meta = _decoder_meta("gpt-oss", {**cfg, "intermediate_size": None}, expert_count=cfg["num_local_experts"],
                         expert_used_count=cfg["num_experts_per_tok"], expert_feed_forward_length=cfg["intermediate_size"],
                         **{"attention.sliding_window": cfg["sliding_window"]})
    del meta["gpt-oss.feed_forward_length"]
    net = load(str(w.write(tmp_path / "gpt-oss-20b-MXFP4.gguf", meta, _embeddings(cfg))))
    preset = load("gpt-oss-20b")
    assert (net.total, net.active, net.layer_kinds) == (preset.total, preset.active, preset.layer_kinds)


@pytest.mark.parametrize("absorbed", [True, False])  # newer convert_hf_to_gguf.py writes the *_mla keys
def test_deepseek2_header_counts_as_the_v3_preset(tmp_path, absorbed):
    cfg = preset_config("deepseek-v3")
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    attention = ({"key_length": cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], "value_length": cfg["kv_lora_rank"],
                  "key_length_mla": qk, "value_length_mla": cfg["v_head_dim"]} if absorbed else
                 {"key_length": qk, "value_length": cfg["v_head_dim"]})
    meta = _decoder_meta("deepseek2", cfg, expert_count=cfg["n_routed_experts"],
                         expert_used_count=cfg["num_experts_per_tok"],
                         expert_feed_forward_length=cfg["moe_intermediate_size"],
                         expert_shared_count=cfg["n_shared_experts"],
                         leading_dense_block_count=cfg["first_k_dense_replace"],
                         **{"rope.dimension_count": cfg["qk_rope_head_dim"],
                            "attention.q_lora_rank": cfg["q_lora_rank"], "attention.kv_lora_rank": cfg["kv_lora_rank"],
                            **{f"attention.{k}": v for k, v in attention.items()}})
    tensors = _embeddings(cfg) + [("blk.3.exp_probs_b.bias", (cfg["n_routed_experts"],), "F32")]  # V3's router bias
    net = load(str(w.write(tmp_path / "DeepSeek-V3.gguf", meta, tensors)))
    preset = load("deepseek-v3")
    assert (net.model_type, net.total, net.active) == ("deepseek_v3", preset.total, preset.active)


def test_without_general_file_type_the_format_names_the_most_common_type(tmp_path):
    path, _ = _llama3(tmp_path)
    head = read_header(path)
    meta = dict(head.metadata)
    meta["general.file_type"] = [Q4_K_M]  # not a u32: as if absent
    tensors = [(t.name, t.shape, t.type) for t in head.tensors]
    elements: dict[str, int] = {}
    for _, shape, type_name in tensors:
        elements[type_name] = elements.get(type_name, 0) + prod(shape)
    most = max(elements, key=elements.__getitem__)
    net = load(str(w.write(tmp_path / "nofiletype.gguf", meta, tensors)))
    assert net.quantization == f"gguf:{most}"


def test_long_arrays_are_stepped_over_and_only_counted(tmp_path):
    n = KEEP_ARRAY + 1
    cfg = {"num_hidden_layers": 1, "max_position_embeddings": 64, "hidden_size": 64, "intermediate_size": 128,
           "num_attention_heads": 2, "num_key_value_heads": 2}
    tokens = [f"token {i:05d} " * 4 for i in range(n)]  # 48 bytes each with its length: across several chunks
    assert sum(8 + len(t) for t in tokens) > 2 * gguf_file.CHUNK
    meta = {**_decoder_meta("llama", cfg), "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": [0.0] * n,
            "general.name": "after the arrays"}
    path = w.write(tmp_path / "tokens.gguf", meta, [("output.weight", (64, n), "F32")])
    head = read_header(path)
    assert head.metadata["tokenizer.ggml.tokens"] == SkippedArray("str", n)
    assert head.metadata["tokenizer.ggml.scores"] == SkippedArray("f32", n)
    assert head.metadata["general.name"] == "after the arrays"  # read on from exactly where the arrays end
    assert gguf_config.config(path)["vocab_size"] == n  # no token_embd.weight: the token list's length


def test_the_header_bound_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_file, "MAX_HEADER_BYTES", 64)
    path = w.write(tmp_path / "big.gguf", {"general.name": "x" * 100}, [])
    with pytest.raises(GgufError, match="runs past the header bound of 64 bytes"):
        read_header(path)


# --- the command line ------------------------------------------------------------------------------------------


def test_params_prints_the_stored_bytes_and_json_has_them(tmp_path, capsys):
    path, _ = _llama3(tmp_path)
    code, out, _ = run(capsys, "params", str(path))
    assert code == 0 and "stored as gguf:Q4_K_M" in out and "8,030,261,248 parameters" in out
    code, out, _ = run(capsys, "params", str(path), "--json")
    import json

    data = json.loads(out)
    head = read_header(path)
    assert data["weight_bytes"] == sum(w.tensor_nbytes(t.shape, t.type) for t in head.tensors)
    assert data["weight_bytes_by_type"] == head.bytes_by_type() and data["weight_format"] == "gguf:Q4_K_M"
    assert data["total"] == load("llama-3-8b").total


def test_memory_and_serve_take_a_gguf_file(tmp_path, capsys):
    path, _ = _llama3(tmp_path)
    code, out, _ = run(capsys, "memory", str(path), "--mode", "infer")
    assert code == 0 and "total" in out
    code, out, err = run(capsys, "serve", str(path), "--json")
    import json

    data = json.loads(out)
    assert code == 0 and (data["weights"], data["weights_from"]) == ("bf16", "file")
    assert any("dequantizes a GGUF file" in n for n in data["notes"])


def _header(version: int = 3, n_tensors: int = 0, n_kv: int = 1, magic: bytes = b"GGUF") -> bytes:
    return magic + struct.pack("<Iqq", version, n_tensors, n_kv)


def _key(name: str, type_id: int) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode() + struct.pack("<i", type_id)


def _tensor(name: str, dims: tuple[int, ...], type_id: int, n_dims: int | None = None) -> bytes:
    out = struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", len(dims) if n_dims is None else n_dims)
    return out + b"".join(struct.pack("<q", d) for d in dims) + struct.pack("<iQ", type_id, 0)


_ARCH = _key("general.architecture", w.STR) + struct.pack("<Q", 5) + b"llama"
BAD_FILES = {
    "wrong magic": (_header(magic=b"GGML") + _ARCH, "not GGUF's magic"),
    "truncated": ((_header() + _ARCH)[:-3], "truncated"),
    "version 1": (_header(version=1) + _ARCH, "version 1 is not read"),
    "huge string length": (_header() + struct.pack("<Q", 2**60), "truncated"),
    "huge array count": (_header() + _key("a", w.ARR) + struct.pack("<iQ", w.U32, 2**40), "at most 1,073,741,824"),
    "array longer than the file": (_header() + _key("a", w.ARR) + struct.pack("<iQ", w.U32, 2**20), "truncated"),
    "unknown value type": (_header() + _key("a", 13) + b"\0" * 8, "unknown GGUF value type 13"),
    "unknown ggml type": (_header(n_tensors=1) + _ARCH + _tensor("t", (32,), 4), "unknown ggml type id 4"),
    "five dimensions": (_header(n_tensors=1) + _ARCH + _tensor("t", (1, 1, 1, 1, 1), 0), "at most 4"),
    "row not whole blocks": (_header(n_tensors=1) + _ARCH + _tensor("t", (100,), 12), "blocks hold 256"),
    "tensor count": (_header(n_tensors=-1), "number of tensors"),
    "bad alignment": (_header() + _key("general.alignment", w.U32) + struct.pack("<I", 3), "power of two"),
    "repeated key": (_header(n_kv=2) + _ARCH + _ARCH, "repeated"),
    "unknown architecture": (_header() + _key("general.architecture", w.STR) + struct.pack("<Q", 6) + b"mamba9",
                             "architecture 'mamba9' is not read"),
    "missing sizes": (_header() + _ARCH, "the header has no llama."),
    "empty": (b"", "is empty"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_file_is_one_line_and_exit_2(tmp_path, capsys, case):
    data, expected = BAD_FILES[case]
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    code, out, err = run(capsys, "params", str(path))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and expected in err and "Traceback" not in err


def test_a_folder_and_a_missing_file_are_one_line(tmp_path, capsys):
    (tmp_path / "model.gguf").mkdir()
    for path, expected in ((tmp_path / "model.gguf", "is a folder"), (tmp_path / "absent.gguf", "no such file")):
        code, _, err = run(capsys, "params", str(path))
        assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err


def test_version_2_has_the_same_layout(tmp_path):
    path, _ = _llama3(tmp_path)
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<I", 2)  # gguf.cpp reads 2 and 3 alike (1 had 32-bit counts)
    v2 = tmp_path / "v2.gguf"
    v2.write_bytes(bytes(data))
    assert read_header(v2).version == 2 and read_header(v2).tensors == read_header(path).tensors
