"""The llamacpp engine and gguf:<FILETYPE> weights against llama.cpp itself (issue 27).

``tests/data/llamacpp_buffers.json`` is what ``benchmarks/llamacpp_buffers.py`` measured: llama.cpp (as
llama-cpp-python 0.3.36 builds it, ggml commit 0c1e570) loading small random-weight GGUF models on the CPU; its
buffer sizes are llama.cpp's own log lines, in MiB with 2 decimals. These tests need no llama-cpp-python.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from symbolic.engines import serve
from symbolic.engines.flags import EngineFlagError
from symbolic.engines.ggml_graph import Shape
from symbolic.engines.llamacpp import (
    Device,
    Settings,
    _compute,
    _kv_cells,
    graph_layout,
    layer_devices,
    n_ctx_padded,
    pad,
    rotation,
    sliding_layers,
)
from symbolic.formats.ggml import row_bytes
from symbolic.formats.gguf_ftypes import typed_tensors
from symbolic.networks.gguf_tensors import gguf_options, gguf_tensors
from symbolic.networks.network import load
from symbolic.networks.stored import stored_weights

TABLE = json.loads((Path(__file__).parent / "data" / "llamacpp_buffers.json").read_text())
MIB = 2**20


def _benchmark():
    """benchmarks/llamacpp_buffers.py as a module (its top level imports only the standard library)."""
    import importlib.util

    path = Path(__file__).parent.parent / "benchmarks" / "llamacpp_buffers.py"
    spec = importlib.util.spec_from_file_location("llamacpp_buffers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OWN_LAYER = _benchmark().own_layer  # the layers written in their architecture's own layout (numpy order)


def _spec_tensors(spec: dict) -> list[tuple[str, tuple[int, ...]]]:
    """The tensors benchmarks/llamacpp_buffers.py writes for ``spec`` (shape ne0 first), in its order."""
    v, h, n, a, kv, d, ff = (spec[k] for k in ("vocab", "hidden", "layers", "heads", "kv_heads", "head_dim", "ffn"))
    out = [("token_embd.weight", (h, v))] + ([] if spec["tied"] else [("output.weight", (h, v))])
    out.append(("output_norm.weight", (h,)))
    if spec["arch"] == "starcoder2":
        out.append(("output_norm.bias", (h,)))
    if spec.get("layout"):
        return out + [(name, shape[::-1]) for i in range(n) for name, shape in OWN_LAYER(spec, i)]
    ne, fe = spec.get("experts", 0), spec.get("expert_ffn", 0)
    ffn = ((("ffn_gate_inp", (h, ne)), ("ffn_gate_exps", (h, fe, ne)), ("ffn_up_exps", (h, fe, ne)),
            ("ffn_down_exps", (fe, h, ne))) if ne else (("ffn_gate", (h, ff)), ("ffn_up", (h, ff)), ("ffn_down", (ff, h))))
    gpt_oss = spec["arch"] == "gpt-oss"
    norms = (("attn_norm", (h,)),) if gpt_oss else (("attn_norm", (h,)), ("ffn_norm", (h,)))
    for i in range(n):
        out += [(f"blk.{i}.{name}.weight", shape) for name, shape in (
            ("attn_q", (h, a * d)), ("attn_k", (h, kv * d)), ("attn_v", (h, kv * d)), ("attn_output", (a * d, h)),
            *ffn, *norms)]
        if spec["qk_norm"]:
            out += [(f"blk.{i}.attn_q_norm.weight", (d,)), (f"blk.{i}.attn_k_norm.weight", (d,))]
        if spec.get("qkv_bias"):
            out += [(f"blk.{i}.attn_{p}.bias", (w,)) for p, w in (("q", a * d), ("k", kv * d), ("v", kv * d))]
        if spec["arch"] in ("gemma2", "gemma3"):
            out += [(f"blk.{i}.post_attention_norm.weight", (h,)), (f"blk.{i}.post_ffw_norm.weight", (h,))]
        if gpt_oss:
            out += [(f"blk.{i}.{name}", shape) for name, shape in (
                ("post_attention_norm.weight", (h,)), ("attn_sinks.weight", (a,)), ("attn_q.bias", (a * d,)),
                ("attn_k.bias", (kv * d,)), ("attn_v.bias", (kv * d,)), ("attn_output.bias", (h,)),
                ("ffn_gate_inp.bias", (ne,)), ("ffn_gate_exps.bias", (fe, ne)), ("ffn_up_exps.bias", (fe, ne)),
                ("ffn_down_exps.bias", (h, ne)))]
    return out


FILES = [(m, ft) for m, entry in TABLE["models"].items() for ft in entry["files"]]
# the CPU backend repacks some types (Q4_0, IQ4_NL, Q4_K, ...) into a CPU_REPACK buffer of its own layout: a CPU
# detail that no GPU has, so the model buffer is checked on the files it left alone
UNPACKED = [(m, ft) for m, ft in FILES
            if "model:CPU_REPACK" not in TABLE["models"][m]["files"][ft]["load"]["buffers_mib"]]


@pytest.mark.parametrize(("model", "ftype"), FILES)
def test_every_tensor_type_and_bytes_as_llama_quantize_wrote_them(model, ftype):
    entry = TABLE["models"][model]
    spec = entry["spec"]
    # the file types llama.cpp refuses without an importance matrix were quantized with one (the benchmark's flag)
    got = {n: (t, b) for n, _, t, b in typed_tensors(ftype, _spec_tensors(spec), spec.get("experts", 0),
                                                  spec["heads"] // spec["kv_heads"],
                                                  imatrix=entry["files"][ftype].get("imatrix", False))}
    measured = {n: (t, b) for n, t, b in entry["files"][ftype]["tensors"]}
    assert got == measured


@pytest.mark.parametrize(("model", "ftype"), UNPACKED)
def test_model_buffer_is_the_tensors_padded_to_32_bytes(model, ftype):
    # llama.cpp's "CPU_Mapped model buffer size" with every tensor on the CPU, logged in MiB to 2 decimals
    entry = TABLE["models"][model]
    total = sum(pad(b, 32) for _, _, b in entry["files"][ftype]["tensors"])
    assert round(total / MIB, 2) == entry["files"][ftype]["load"]["buffers_mib"]["model:CPU_Mapped"]


def _settings(ctx: dict) -> Settings:
    return Settings(n_ctx_padded(ctx["n_ctx"], ctx["n_seq_max"], ctx["kv_unified"]), ctx["n_seq_max"], ctx["n_batch"], ctx["n_ubatch"], ctx["flash_attn"],
                    ctx["type_k"], ctx["type_v"], ctx["swa_full"], ctx["kv_unified"], 0, 0, (), 0)


def _sliding(spec: dict) -> list[bool]:
    # the engine's own pattern for the architecture (gemma3: load_swa_pattern(ml, 6), layer 5 full of 0..6); olmo2
    # slides only where the file has a window (olmo2.cpp:6-9), so a model written without one has none
    if not spec["swa"]:
        return [False] * spec["layers"]
    return sliding_layers(spec["arch"].replace("-", "_"), spec["layers"]) or [False] * spec["layers"]


CONTEXTS = [(m, i) for m, entry in TABLE["models"].items() for i in range(len(entry["contexts"]))]


@pytest.mark.parametrize(("model", "i"), CONTEXTS)
def test_kv_buffer_and_padded_context_match_llama_cpp(model, i):
    entry = TABLE["models"][model]
    spec, ctx = entry["spec"], entry["contexts"][i]
    s = _settings(ctx)
    assert s.n_ctx == ctx["n_ctx_logged"]
    width = spec["kv_heads"] * spec["head_dim"]
    per_cell = row_bytes(s.type_k.upper(), width) + row_bytes(s.type_v.upper(), width)
    kv = sum(_kv_cells(s, w, spec["swa"]) * per_cell for w in _sliding(spec))
    assert round(kv / MIB, 2) == pytest.approx(ctx["buffers_mib"]["KV:CPU"], abs=0.011)


def _shape(spec: dict) -> Shape:
    # the layout as the engine reads it from the tensors written (pre-norm, fused QKV, the FFN's form)
    return Shape(spec["hidden"], spec["heads"], spec["kv_heads"], spec["head_dim"], spec["ffn"], spec["vocab"],
                 spec.get("experts", 0), spec.get("experts_used", 0), spec.get("expert_ffn", 0),
                 spec.get("shared_ffn", 0), **graph_layout(dict(_spec_tensors(spec))))


@pytest.mark.parametrize(("model", "i"), CONTEXTS)
def test_compute_buffer_within_a_third_of_a_percent(model, i):
    # the compute buffer from the graph's tensor shapes through ggml's allocator (no constant fitted to rows); the
    # rows with a quantized cache need its rotations (gemma3 at 128 tokens with a q8_0 cache was 10.4 % high without),
    # every row without flash attention the roped Q as a tensor of its own (1-4 % low without; gpt-oss's and
    # qwen2's rows, with Q/K/V biases, 4-13 %); olmo2 no pre-norms (+4-8 % with them), phi3 its fused QKV and
    # gate-up (+2-8 % as llama's layer), starcoder2 its GELU FFN (+50-71 % with flash attention as a gated one)
    entry = TABLE["models"][model]
    spec, ctx = entry["spec"], entry["contexts"][i]
    s = _settings(ctx)
    devs = {"cpu": Device("cpu", layers=list(range(spec["layers"])))}
    _compute(devs, ["cpu"] * (spec["layers"] + 1), _sliding(spec), spec["swa"], s, _shape(spec), spec["layers"])
    measured = ctx["buffers_mib"]["compute:CPU"] * MIB
    # the log's 2 decimals of MiB are worth 0.3 % of the smallest rows (1.5 MiB): either bound
    assert devs["cpu"].compute == pytest.approx(measured, rel=0.003, abs=0.005 * MIB)


def test_cache_rotation_follows_the_cache_type_and_head_size():
    # llama-kv-cache.cpp:321-338, 1447-1480 at 0c1e57098: only a quantized cache with a head size a multiple of 64;
    # K's matrix the largest power of two from 64 dividing the head size, V's 64
    assert [rotation(t, 128, k=True) for t in ("f16", "bf16", "q8_0", "q4_0")] == [0, 0, 128, 128]
    assert (rotation("q8_0", 192, k=True), rotation("q8_0", 128), rotation("q8_0", 80, k=True)) == (64, 64, 0)


@pytest.mark.parametrize(("model", "i"), CONTEXTS)
def test_output_buffer_is_logits_per_sequence(model, i):
    entry = TABLE["models"][model]
    ctx = entry["contexts"][i]
    assert round(ctx["n_seq_max"] * entry["spec"]["vocab"] * 4 / MIB, 2) == pytest.approx(
        ctx["buffers_mib"]["output:CPU"], abs=0.011)


# llama.cpp tools/quantize/quantize.cpp at 03161a4eb9a2ec66ef97789f347c5a28279f06ea, QUANT_OPTIONS: file sizes of
# Llama-3-8B per type; 'G' is GiB (2**30 bytes): 8.03e9 weights at Q8_0's 8.5 bits are 8.53e9 bytes = 7.95 GiB
QUANTIZE_CPP_GIB = {"Q4_0": 4.34, "Q4_1": 4.78, "Q5_0": 5.21, "Q5_1": 5.65, "Q2_K": 2.96, "Q3_K_S": 3.41,
                    "Q3_K_M": 3.74, "Q3_K_L": 4.03, "Q4_K_S": 4.37, "Q4_K_M": 4.58, "Q5_K_S": 5.21, "Q5_K_M": 5.33,
                    "Q6_K": 6.14, "Q8_0": 7.96}


@pytest.mark.parametrize("ftype", sorted(QUANTIZE_CPP_GIB))
def test_llama_3_8b_file_sizes_from_quantize_cpp(ftype):
    got = sum(stored_weights(load("llama-3-8b"), "gguf:" + ftype).values()) / 2**30
    assert got == pytest.approx(QUANTIZE_CPP_GIB[ftype], rel=0.005)


@pytest.mark.parametrize("name", ["llama-3-8b", "qwen3-30b-a3b", "gpt-oss-20b", "deepseek-v3", "gemma-2b",
                                  "mixtral-8x7b", "qwen2-7b"])
def test_gguf_tensors_sum_to_the_parameter_count(name):
    net = load(name)
    total = 0
    for _, shape in gguf_tensors(net):
        n = 1
        for x in shape:
            n *= x
        total += n
    assert total == net.total


def test_model_without_a_gguf_layout_is_one_line_error():
    with pytest.raises(Exception) as err:
        stored_weights(load("gpt2"), "gguf:Q4_K_M")
    assert "\n" not in str(err.value) and "gpt2" in str(err.value)


def test_last_layers_go_to_the_gpu_and_the_output_only_past_n_layer():
    # llama-model.cpp load_tensors: i_gpu_start = n_layer + 1 - n_gpu_layers
    s = Settings(4096, 1, 2048, 512, True, "f16", "f16", False, True, 3, 1, (1.0,), 0)
    assert layer_devices(4, s) == ["cpu", "cpu", "cuda:0", "cuda:0", "cuda:0"]
    s2 = Settings(4096, 1, 2048, 512, True, "f16", "f16", False, True, 5, 2, (3.0, 1.0), 0)
    assert layer_devices(4, s2) == ["cuda:0", "cuda:0", "cuda:0", "cuda:0", "cuda:1"]


def test_zero_gpu_layers_keeps_everything_on_the_cpu():
    plan = serve("llama-3-8b", "llamacpp", "24GiB", weights="gguf:Q4_K_M", ctx_size=8192, n_gpu_layers=0)
    devices = {d["device"]: d for d in plan.figures["devices"]}
    assert devices["cuda:0"]["total_bytes"] == 0
    assert devices["cpu"]["model_buffer_bytes"] == plan.figures["model_buffer_bytes"]


def test_gpu_layers_beyond_the_count_are_clamped_as_llama_cpp_does():
    full = serve("llama-3-8b", "llamacpp", "24GiB", weights="gguf:Q4_K_M", ctx_size=8192, n_gpu_layers=33)
    more = serve("llama-3-8b", "llamacpp", "24GiB", weights="gguf:Q4_K_M", ctx_size=8192, n_gpu_layers=999)
    assert more.figures["devices"] == full.figures["devices"] and more.figures["n_gpu_layers"] == 33


def test_kv_buffer_of_llama_3_8b_at_8192_is_one_gib():
    # the formula itself: 32 layers · 8192 cells · 2 · 1024 (8 KV heads of 128) · 2 bytes (f16) = 1 GiB
    plan = serve("llama-3-8b", "llamacpp", "24GiB", weights="gguf:Q4_K_M", ctx_size=8192)
    assert plan.kv_cache_bytes == 32 * 8192 * 2 * 1024 * 2
    assert "llama_kv_cache: CUDA0 KV buffer size = 1024.00 MiB" in plan.log_lines


def test_quantized_v_cache_without_flash_attention_is_refused():
    with pytest.raises(EngineFlagError, match="requires Flash Attention"):
        serve("llama-3-8b", "llamacpp", "24GiB", cache_type_v="q8_0", flash_attn="off")


def test_tensor_split_with_the_wrong_count_is_refused():
    with pytest.raises(EngineFlagError, match="--tensor-split"):
        serve("llama-3-8b", "llamacpp", "24GiB", tp=2, tensor_split=(1.0, 1.0, 1.0))


def test_flag_of_another_engine_is_refused():
    with pytest.raises(EngineFlagError, match="not of --engine llamacpp"):
        serve("llama-3-8b", "llamacpp", "24GiB", gpu_memory_utilization=0.9)


def test_fit_gpu_layers_on_a_small_gpu():
    plan = serve("llama-3-70b", "llamacpp", "24GiB", weights="gguf:Q4_K_M", ctx_size=8192, fit="gpu-layers")
    ngl = plan.figures["n_gpu_layers"]
    assert 0 < ngl < 81 and plan.figures["fits"]
    worse = serve("llama-3-70b", "llamacpp", "24GiB", weights="gguf:Q4_K_M", ctx_size=8192, n_gpu_layers=ngl + 1)
    assert not worse.figures["fits"]


def test_fit_file_type_picks_the_best_that_fits():
    plan = serve("llama-3-70b", "llamacpp", "48GiB", ctx_size=8192, fit="file-type")
    assert plan.figures["fits"] and plan.weights.startswith("gguf:")


def test_cli_json_has_devices(capsys):
    from symbolic.cli import main

    assert main(["serve", "llama-3-8b", "--engine", "llamacpp", "--gpu", "24GiB", "--weights", "gguf:Q4_K_M",
                 "--ctx-size", "8192", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"devices", "model_buffer_bytes", "kv_buffer_bytes", "compute_buffer_bytes", "total_bytes"} <= set(data)


def test_context_per_sequence_is_padded_without_a_unified_cache():
    # llama-context.cpp:290-305 at 0c1e57098: n_ctx = pad(1000, 256) = 1024; n_ctx_seq = pad(1024 // 3, 256) = 512;
    # n_ctx = 512 · 3
    assert n_ctx_padded(1000, 3, unified=False) == 512 * 3
    assert n_ctx_padded(1000, 3, unified=True) == 1024


def test_parallel_auto_is_four_unified_slots_and_a_given_parallel_is_not_unified():
    # tools/server/server.cpp:156-161 (auto: 4 slots, kv_unified); common/common.h:575 (kv_unified false)
    auto = serve("llama-3-8b", "llamacpp", "24GiB", weights="gguf:Q4_K_M", ctx_size=8192)
    given = serve("llama-3-8b", "llamacpp", "24GiB", weights="gguf:Q4_K_M", ctx_size=8192, parallel=4)
    assert (auto.figures["n_seq_max"], auto.figures["kv_unified"]) == (4, True)
    assert (given.figures["n_seq_max"], given.figures["kv_unified"]) == (4, False)


def test_n_cpu_moe_moves_only_the_expert_tensors_of_the_first_layers():
    # common/common.h:1198-1219: blk.i.ffn_(up|down|gate|gate_up)_(ch|)exps for i < N go to the CPU buffer
    from symbolic.engines.llamacpp import _tensor_device

    s = Settings(4096, 1, 2048, 512, True, "f16", "f16", False, True, 49, 1, (1.0,), 2)
    devices = layer_devices(48, s)
    assert _tensor_device("blk.1.ffn_up_exps.weight", devices, 48, s) == "cpu"
    assert _tensor_device("blk.1.ffn_gate_inp.weight", devices, 48, s) == "cuda:0"
    assert _tensor_device("blk.10.ffn_up_exps.weight", devices, 48, s) == "cuda:0"
    assert _tensor_device("blk.2.ffn_down_exps.weight", devices, 48, s) == "cuda:0"


def test_n_cpu_moe_moves_the_expert_bytes_to_the_cpu():
    base = serve("qwen3-30b-a3b", "llamacpp", "80GiB", weights="gguf:Q4_K_M", ctx_size=4096)
    moved = serve("qwen3-30b-a3b", "llamacpp", "80GiB", weights="gguf:Q4_K_M", ctx_size=4096, n_cpu_moe=4)
    before, after = ({d["device"]: d["model_buffer_bytes"] for d in p.figures["devices"]} for p in (base, moved))
    shift = before["cuda:0"] - after["cuda:0"]
    assert shift > 0 and after["cpu"] - before["cpu"] == shift


def test_sliding_window_layers_follow_each_architecture():
    # set_swa_pattern (src/llama-hparams.cpp:8-22): gemma3 period 6 (the 6th full), gpt-oss period 2 (odd full)
    assert sliding_layers("gemma3", 12) == [True] * 5 + [False] + [True] * 5 + [False]
    assert sliding_layers("gpt_oss", 4) == [True, False, True, False]
    assert sliding_layers("smallthinker", 4) == [False, True, True, True]  # dense_first


def _gpu_totals(plan) -> list[int]:
    return [d["total_bytes"] for d in plan.figures["devices"] if d["device"] != "cpu"]


def test_fit_context_is_the_longest_that_fits_and_256_more_does_not():
    plan = serve("llama-3-8b", "llamacpp", "5GiB", weights="gguf:Q4_K_M", fit="context")
    ctx = plan.figures["n_ctx"]
    assert max(_gpu_totals(plan)) <= plan.budget_bytes
    beyond = serve("llama-3-8b", "llamacpp", "5GiB", weights="gguf:Q4_K_M", ctx_size=ctx + 256)
    assert max(_gpu_totals(beyond)) > plan.budget_bytes


def test_fit_gpu_layers_totals_at_the_answer_and_one_more():
    plan = serve("llama-3-8b", "llamacpp", "4GiB", weights="gguf:Q4_K_M", ctx_size=4096, fit="gpu-layers")
    ngl = plan.figures["n_gpu_layers"]
    assert 0 < ngl < 33 and max(_gpu_totals(plan)) <= plan.budget_bytes
    beyond = serve("llama-3-8b", "llamacpp", "4GiB", weights="gguf:Q4_K_M", ctx_size=4096, n_gpu_layers=ngl + 1)
    assert max(_gpu_totals(beyond)) > plan.budget_bytes


def test_fit_file_type_totals_at_the_answer_and_the_next_better_type():
    from symbolic.engines.llamacpp import FIT_FILE_TYPES

    plan = serve("llama-3-8b", "llamacpp", "6GiB", ctx_size=4096, fit="file-type")
    chosen = plan.weights.split(":")[1]
    assert max(_gpu_totals(plan)) <= plan.budget_bytes
    better = FIT_FILE_TYPES[FIT_FILE_TYPES.index(chosen) - 1]
    over = serve("llama-3-8b", "llamacpp", "6GiB", weights="gguf:" + better, ctx_size=4096)
    assert max(_gpu_totals(over)) > plan.budget_bytes


def test_buffers_over_the_budget_do_not_fit_and_serve_nothing():
    # Llama-3.1-70B in Q5_K_M over two 24 GiB cards: the busiest card's model, KV and compute buffers exceed it, so
    # llama.cpp would fail to allocate (no request runs), whatever n_ctx // seq says
    from symbolic.engines import serve

    plan = serve("llama-3.1-70b", engine="llamacpp", gpu="24GiB", weights="gguf:Q5_K_M", tp=2, seq=8192,
                 ctx_size=8192, n_gpu_layers=99, parallel=1, flash_attn="on")
    busiest = max((d for d in plan.figures["devices"] if d["device"] != "cpu"), key=lambda d: d["total_bytes"])
    assert busiest["total_bytes"] > plan.budget_bytes
    assert not plan.fits and plan.max_concurrency == 0
    fitting = serve("llama-3.1-70b", engine="llamacpp", gpu="24GiB", weights="gguf:Q4_K_M", tp=2, seq=8192,
                    ctx_size=8192, n_gpu_layers=99, parallel=1, flash_attn="on")
    assert fitting.fits and fitting.max_concurrency == 1


def test_qwen2_serves_with_its_qkv_biases_in_the_model_buffer():
    # qwen2 loads attn_q/k/v.bias (create_tensor_qkv, src/llama-model.cpp:3428-3430 at 0c1e57098): f32 vectors of the
    # projections' widths in every layer, on the layer's device; measured above (qwen2-bias) in the CPU model buffer
    net = load("qwen2-7b")
    names = {n for n, _ in gguf_tensors(net)}
    assert {f"blk.{i}.attn_{p}.bias" for i in range(net.numbers["L"]) for p in "qkv"} <= names
    plan = serve("qwen2-7b", "llamacpp", "24GiB", weights="gguf:Q4_K_M", ctx_size=4096, n_gpu_layers=99)
    opts = gguf_options(net)
    tensors = {n: b for n, _, _, b in typed_tensors("Q4_K_M", gguf_tensors(net), opts["n_expert"], opts["n_gqa"])}
    gpu = sum(pad(b, 32) for n, b in tensors.items() if not n.startswith("token_embd"))
    assert {d["device"]: d["model_buffer_bytes"] for d in plan.figures["devices"]}["cuda:0"] == gpu


def test_buffers_are_checked_against_cuda_total_on_a_catalogue_gpu():
    # llama.cpp allocates from the memory CUDA reports (cudaMemGetInfo): on a catalogue GPU with a published CUDA
    # total (catalogs.cuda_totals) the longest context is the one that CUDA's total gives, shorter than nvidia-smi's
    from symbolic.catalogs import GPUS

    gpu = GPUS["rtx-4090"]
    flags = dict(weights="gguf:Q4_K_M", tp=2, n_gpu_layers=99, parallel=1, flash_attn="on", fit="context")
    named = serve("llama-3.1-70b", "llamacpp", "rtx-4090", **flags)
    cuda = serve("llama-3.1-70b", "llamacpp", f"{gpu.cuda_bytes}B", **flags)
    smi = serve("llama-3.1-70b", "llamacpp", f"{gpu.bytes}B", **flags)
    assert named.budget_bytes == gpu.cuda_bytes and named.figures["gpu_total_basis"] == "cuda"
    assert named.figures["fit_answer"] == cuda.figures["fit_answer"] != smi.figures["fit_answer"]
    assert named.figures["n_ctx"] < smi.figures["n_ctx"]


# each measured model's Hugging Face config fields beyond its sizes (gpt-oss left out: its config has more)
HF_CONFIGS = {
    "llama-gqa": {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
    "qwen2-bias": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "use_sliding_window": False},
    "qwen3-qknorm": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]},
    "gemma3-swa": {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"]},
    "gemma2-swa": {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"]},
    "qwen3-moe": {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "decoder_sparse_step": 1,
                  "mlp_only_layers": []},
    "llama-moe": {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"]},
    "phi3-fused": {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"]},
    "starcoder2-bias": {"model_type": "starcoder2", "architectures": ["Starcoder2ForCausalLM"], "use_bias": True},
    "olmo2-norms": {"model_type": "olmo2", "architectures": ["Olmo2ForCausalLM"]},
    "gemma-tied": {"model_type": "gemma", "architectures": ["GemmaForCausalLM"]},
    "qwen2moe-shexp": {"model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 1,
                       "mlp_only_layers": []},
}


@pytest.mark.parametrize("model", sorted(HF_CONFIGS))
def test_gguf_layout_of_the_config_is_what_llama_cpp_loaded(model, tmp_path):
    # the project's GGUF tensors for the equivalent config (names and shapes) are the file llama.cpp loaded above:
    # phi3 fused (attn_qkv, a 2 n_ff ffn_up), olmo2's norms after attention/FFN and full-width q/k norms, gemma2's
    # four norms, starcoder2's LayerNorm biases, qwen2moe's shared-expert gate
    spec = TABLE["models"][model]["spec"]
    config = {"vocab_size": spec["vocab"], "hidden_size": spec["hidden"], "num_hidden_layers": spec["layers"],
              "num_attention_heads": spec["heads"], "num_key_value_heads": spec["kv_heads"],
              "head_dim": spec["head_dim"], "intermediate_size": spec["ffn"],
              "max_position_embeddings": spec["ctx_train"], "tie_word_embeddings": spec["tied"], **HF_CONFIGS[model]}
    if spec["swa"]:
        config["sliding_window"] = spec["swa"]
    if spec.get("experts"):
        config.update(num_experts=spec["experts"], num_local_experts=spec["experts"],
                      num_experts_per_tok=spec["experts_used"], moe_intermediate_size=spec["expert_ffn"])
    if spec.get("shared_ffn"):
        config["shared_expert_intermediate_size"] = spec["shared_ffn"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert dict(gguf_tensors(load(str(path)))) == dict(_spec_tensors(spec))


def test_mistral_sliding_window_is_a_full_cache_in_llama_cpp():
    # Mistral-7B-v0.1's config slides over 4096 tokens, but llama.cpp converts it as llama, whose graph applies no
    # window (conversion/llama.py:20, src/models/llama.cpp at 0c1e57098): every layer caches the whole context, so the
    # KV buffer is the formula's 32 layers · 8192 cells · 2 · 1024 (8 KV heads of 128) · 2 bytes (f16)
    plan = serve("mistral-7b", "llamacpp", "24GiB", weights="gguf:Q4_K_M", ctx_size=8192, parallel=1)
    assert plan.figures["kv_buffer_bytes"] == 32 * 8192 * 2 * 1024 * 2
    assert any("full cache" in n for n in plan.notes)


def test_n_cpu_moe_on_a_gpu_names_the_expert_copies_it_does_not_count():
    # the experts of layers 0..3 of qwen3-30b-a3b (3 tensors each) are on the CPU while their layers run on the GPU:
    # the note names them and the largest (ffn_down_exps: Q4_K_M gives it more bits than gate and up)
    plan = serve("qwen3-30b-a3b", "llamacpp", "80GiB", weights="gguf:Q4_K_M", ctx_size=4096, n_gpu_layers=99,
                 n_cpu_moe=4)
    note = next(n for n in plan.notes if n.startswith("--n-cpu-moe 4"))
    assert "12 expert tensors" in note and "ffn_down_exps" in note
    on_cpu = serve("qwen3-30b-a3b", "llamacpp", "80GiB", weights="gguf:Q4_K_M", ctx_size=4096, n_gpu_layers=0,
                   n_cpu_moe=4)
    assert not any(n.startswith("--n-cpu-moe") for n in on_cpu.notes)  # nothing to copy: those layers run on the CPU
