"""vLLM's memory rules (symbolic.engines.vllm): page and token arithmetic as vLLM 0.34.0's source has it
(vllm/v1/kv_cache_interface.py, vllm/v1/core/kv_cache_utils.py at commit 62d4bc3c7), and llm-d's
published startup split (config_explorer/empirical-vllm-memory-results.md: H100, 79.18 GiB CUDA total)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from decimal import Decimal

import pytest

from symbolic.catalogs import GPUS
from symbolic.core.errors import UserError
from symbolic.engines import serve
from symbolic.engines import vllm as engine
from symbolic.networks.network import load

GIB = 2**30
LLAMA_31 = {  # meta-llama/Llama-3.1-8B config.json: llama-3-8b's fields with its context and rope scaling
    "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "torch_dtype": "bfloat16", "vocab_size": 128256, "attention_bias": False}
QWEN3_06B = {  # Qwen/Qwen3-0.6B config.json
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "intermediate_size": 3072, "max_position_embeddings": 40960, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 151936}
# the llm-d runs: --max-model-len 16000 --gpu-memory-utilization 0.9 (their configs); the scheduler's defaults of
# `vllm serve` on an H100 (vLLM's arg_utils table, the same in 0.34: 8192 tokens, 1,024 sequences on GPUs of 70 GiB
# and more other than the A100); --block-size 128 as before
LLM_D = {"gpu_memory_utilization": 0.9, "max_model_len": 16000, "block_size": 128, "max_num_batched_tokens": 8192,
         "max_num_seqs": 1024}
# llm-d's published peaks (GiB) and the model's vocabulary
LLM_D_PEAKS = {"qwen3-0.6b": 5.56, "llama-3.1-8b": 4.76, "gpt-oss-20b": 7.38}


def _config(tmp_path, name: str, config: dict) -> str:
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return str(path)


@pytest.fixture
def llama31(tmp_path):
    return _config(tmp_path, "llama-3.1-8b", LLAMA_31)


@pytest.fixture
def llm_d_models(tmp_path):
    return {"qwen3-0.6b": _config(tmp_path, "qwen3-0.6b", QWEN3_06B), "llama-3.1-8b": _config(tmp_path, "llama-3.1-8b",
            LLAMA_31), "gpt-oss-20b": "gpt-oss-20b"}


def test_full_attention_page_and_blocks_follow_the_source():
    # kv_cache_interface.py: page = 2 · block · kv_heads · head_size · bytes; blocks = available // (page · layers)
    plan = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192, block_size=16)
    page = 2 * 16 * 8 * 128 * 2
    blocks = plan.figures["available_kv_cache_bytes"] // (page * 32)
    assert plan.figures["num_gpu_blocks"] == blocks
    concurrency = blocks / math.ceil(8192 / 16)  # kv_cache_utils.get_max_concurrency_for_kv_cache_config
    assert plan.kv_cache_tokens == int(concurrency * 8192)
    assert plan.log_lines == (f"GPU KV cache size: {int(concurrency * 8192):,} tokens, Maximum concurrency for "
                              f"8,192 tokens per request: {concurrency:.2f}x",)


def test_budget_is_the_fraction_of_the_total_rounded_up():
    # worker/utils.py request_memory: ceil(total × utilization), total being CUDA's (the catalogue's cuda_bytes,
    # published readings: catalogs.cuda_totals); 0.92 is 0.34's default
    plan = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192)
    assert plan.budget_bytes == math.ceil(GPUS["h100-80gb"].cuda_bytes * 92 / 100)
    assert plan.figures["gpu_memory_utilization"] == 0.92
    assert plan.figures["gpu_total_bytes"] == GPUS["h100-80gb"].cuda_bytes
    assert plan.figures["gpu_total_basis"] == "cuda"


def test_a_catalogue_gpu_is_its_cuda_total_and_a_given_size_is_itself():
    # the catalogue's H100 CUDA total and "--gpu" with the same bytes give one answer; the given size gets no note
    total = GPUS["h100-80gb"].cuda_bytes
    named = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192)
    given = serve("llama-3-8b", engine="vllm", gpu=f"{total}B", max_model_len=8192)
    assert named.kv_cache_tokens == given.kv_cache_tokens and named.budget_bytes == given.budget_bytes
    assert any("CUDA's 79.18 GiB for h100-80gb" in n for n in named.notes)
    assert not any(n.startswith("GPU total") for n in given.notes) and given.figures["gpu_total_basis"] == "given"


def test_a_gpu_without_a_published_cuda_total_uses_its_catalogue_total_and_says_so(monkeypatch):
    # a catalogue entry without a CUDA reading (every entry has one today: the H100 NVL's taken away here)
    monkeypatch.setitem(GPUS, "h100-94gb", replace(GPUS["h100-94gb"], cuda_bytes=None, cuda_source=None))
    plan = serve("llama-3-8b", engine="vllm", gpu="h100-94gb", max_model_len=8192)
    assert plan.budget_bytes == math.ceil(95830 * 2**20 * 92 / 100)  # nvidia-smi's 95830 MiB (gpus.py's source)
    assert plan.figures["gpu_total_basis"] == "nvidia-smi"
    assert any("nvidia-smi's 93.58 GiB for h100-94gb: no published CUDA total" in n for n in plan.notes)


def test_h200_starts_from_its_published_cuda_total():
    # catalogs.cuda_totals: prime-rl's benchmark page prints 'total capacity of 139.80 GiB' on 8xH200 (nvidia-smi
    # says 143,771 MiB, 140.40 GiB); vLLM's budget is 0.92 of CUDA's total
    plan = serve("llama-3-8b", engine="vllm", gpu="h200-141gb", max_model_len=8192)
    assert GPUS["h200-141gb"].cuda_bytes == int(Decimal("139.80") * 2**30)
    assert plan.budget_bytes == math.ceil(GPUS["h200-141gb"].cuda_bytes * 92 / 100)
    assert any("CUDA's 139.80 GiB for h200-141gb" in n for n in plan.notes)


def test_sliding_window_layers_hold_window_pages_plus_one():
    # kv_cache_interface.SlidingWindowSpec: ceil(min(window − 1 + in-flight, max_len) / block) + 1 pages
    net = load("gpt-oss-20b")
    window = net.spec.window
    assert engine.pages_per_request("sliding", window, 16000, 8192, 128) == math.ceil((window - 1 + 8192) / 128) + 1
    assert engine.pages_per_request("sliding", window, 100, 8192, 16) == math.ceil(100 / 16) + 1
    assert engine.layer_groups(net, 1) == {"full": 12, "sliding": 12}


def test_fp8_ds_mla_page_is_656_bytes_a_token():
    net = load("deepseek-v3")
    assert engine.page_bytes(net, "full", 64, 1, "fp8", "fp8_ds_mla") == 64 * 656
    assert engine.page_bytes(net, "full", 64, 1, "bf16", "auto") == 64 * (512 + 64) * 2


def test_sampler_stage_is_what_the_source_allocates(llama31):
    # model_runner.py:911/:1044: R = min(T, max_num_seqs) rows of logits in bf16; sampler.py:239 an fp32 copy;
    # flashinfer/sampling.py:1889-1890 fp32 top-k-masked logits and probabilities; T hidden states alive (:1102)
    plan = serve(llama31, engine="vllm", gpu="79.18GiB", **LLM_D)
    rows, vocab, tokens, hidden = 1024, 128256, 8192, 4096
    assert plan.figures["activation_peak_bytes"] == rows * vocab * (2 + 4 + 4 + 4) + tokens * hidden * 2
    keys = {t.key for t in plan.terms}
    assert {"sampler_logits", "sampler_fp32", "sampler_topk_mask", "sampler_probs"} <= keys


def test_tensor_parallel_logits_add_the_shard_before_the_all_gather():
    # logits_processor.py:130: each rank holds its vocab shard, then the all-gathered rows
    plan = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", tp=2, max_model_len=8192, max_num_seqs=1024)
    found = plan.term_bytes()
    assert found["sampler_logits_shard"] == found["sampler_logits"] // 2


def test_llm_d_llama_31_8b_split(llama31):
    # llm-d: weights 14.99, activation peak 4.76, non-torch 0.13, KV 51.38 GiB of 0.9 × 79.18 GiB
    plan = serve(llama31, engine="vllm", gpu="79.18GiB", **LLM_D)
    assert plan.weights_bytes / GIB == pytest.approx(14.99, abs=0.005)  # exact: bf16 weights + rope cache
    assert plan.figures["non_torch_bytes"] / GIB == pytest.approx(0.13, abs=0.005)  # llm-d's measured default
    # The activation peak is 0.34's source; llm-d's release took another sampler path (next tests): ours is far
    # lower (1.77 against 4.76 GiB), so no tolerance is claimed for it. 0.34 also keeps the penalties' counts
    # (sampler_bin_counts, non-KV) and subtracts its CUDA-graph estimate (on by default only since v0.21.0, as
    # 0.34's gpu_worker.py log line says; llm-d's split has no such term). Every other term agrees: the KV
    # difference is those three differences.
    ours = plan.figures["activation_peak_bytes"] / GIB
    state = plan.figures["sampler_state_bytes"] / GIB
    graphs = plan.figures["cuda_graph_bytes"] / GIB
    assert ours < 4.76
    assert plan.figures["available_kv_cache_bytes"] / GIB - 51.38 == pytest.approx(4.76 - ours - state - graphs,
                                                                                    abs=0.02)


# The older V1 sampler that llm-d's release ran (VLLM_USE_FLASHINFER_SAMPLER unset meant the PyTorch-native path,
# "FlashInfer is available, but it is not enabled. Falling back to the PyTorch-native implementation") masked top-k
# and top-p by sorting the fp32 logits, as 0.34 still does without Triton (apply_top_k_top_p_pytorch,
# vllm/v1/sample/ops/topk_topp_sampler.py:242 at 0.34.0): sorted values fp32 (4 bytes an entry) and indices int64
# (8); PyTorch's sort of R > 128 rows (aten/src/ATen/native/cuda/SortStable.cu, segmented_sort_pairs) adds an int64
# index input (8) and cub's DeviceSegmentedRadixSort alternate keys and values (4 + 8) while it runs. The bf16
# logits, their fp32 copy and the hidden states are live then too: those are 0.34's terms.
SORT_BYTES_PER_ENTRY = 4 + 8 + 8 + 4 + 8


def test_llm_d_peaks_are_our_shared_terms_plus_the_older_sort(llm_d_models):
    # Our terms common to both releases, plus the older path's sort buffers, give llm-d's three peaks within 1.5 %
    # (0.7-1.1 % under: the masks and small tensors around the sort are not counted); this is what explains their
    # figures, not a rule of 0.34, whose CUDA path has no sort.
    for name, model in llm_d_models.items():
        plan = serve(model, engine="vllm", gpu="79.18GiB", **LLM_D)
        found = plan.term_bytes()
        shared = found["activation_hidden"] + found["sampler_logits"] + found["sampler_fp32"]
        entries = 1024 * load(model).spec.vocab
        older = (shared + entries * SORT_BYTES_PER_ENTRY) / GIB
        assert older == pytest.approx(LLM_D_PEAKS[name], rel=0.015), name


def test_llm_d_peaks_against_both_034_paths(llm_d_models):
    # 0.34's peaks at llm-d's configs, FlashInfer (default) and Triton (--no-flashinfer-sampler): both far under
    # llm-d's, by the sort buffers 0.34 no longer makes; the gap, stated: FlashInfer 37-38 %, Triton 18 % of theirs.
    for name, model in llm_d_models.items():
        theirs = LLM_D_PEAKS[name] * GIB
        default = serve(model, engine="vllm", gpu="79.18GiB", **LLM_D).figures["activation_peak_bytes"]
        triton = serve(model, engine="vllm", gpu="79.18GiB", flashinfer_sampler=False,
                       **LLM_D).figures["activation_peak_bytes"]
        assert triton < default < theirs
        assert 0.36 < default / theirs < 0.39 and 0.17 < triton / theirs < 0.19, name


def test_no_flashinfer_sampler_is_the_triton_path_tensor_by_tensor(llama31):
    # sampler.py:239 fp32 copy; topk_topp_triton.py:1688-1695 a cached fp32 buffer of min(next_pow2(min(SMs, R)),
    # SMs) vocab rows, masking in place; gumbel.py:441-445 per-1,024-entry-block int64 argmax and fp32 maximum;
    # model_runner.py:1044 bf16 logits and :1035 the hidden states live throughout. An H100 has 132 SMs.
    plan = serve(llama31, engine="vllm", gpu="h100-80gb", flashinfer_sampler=False, **LLM_D)
    rows, vocab, tokens, hidden = 1024, 128256, 8192, 4096
    found = plan.term_bytes()
    assert found["sampler_triton_buffer"] == 132 * vocab * 4
    assert found["sampler_gumbel_partials"] == rows * math.ceil(vocab / 1024) * (8 + 4)
    assert plan.figures["activation_peak_bytes"] == (rows * vocab * (2 + 4) + 132 * vocab * 4
                                                     + rows * math.ceil(vocab / 1024) * 12 + tokens * hidden * 2)
    assert "sampler_probs" not in found and plan.figures["flashinfer_sampler"] is False


def test_triton_buffer_rows_follow_the_source():
    # topk_topp_triton.py:1688-1694: programs = min(SMs, R); rows = min(next_power_of_2(programs), SMs)
    assert engine.triton_rows(1024, 132) == 132
    assert engine.triton_rows(100, 132) == 128
    assert engine.triton_rows(3, 132) == 4
    assert engine.triton_rows(1024, 58) == 58


def test_flashinfer_sampler_is_on_by_default():
    # envs.py:937: VLLM_USE_FLASHINFER_SAMPLER is True unless set to 0
    default = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192)
    given = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192, flashinfer_sampler=True)
    assert default.figures == given.figures and default.figures["flashinfer_sampler"] is True
    assert "sampler_topk_mask" in default.term_bytes()


def test_a_gpu_given_by_size_assumes_an_h100_sm_count_and_says_so():
    plan = serve("llama-3-8b", engine="vllm", gpu="79.18GiB", max_model_len=8192, flashinfer_sampler=False)
    assert any("an H100's count assumed" in note for note in plan.notes)


def test_sampler_bin_counts_are_non_kv_memory(llama31):
    # penalties.py:48: int32 max_num_seqs × vocab, made after the weights' count, before the profile snapshot
    plan = serve(llama31, engine="vllm", gpu="79.18GiB", **LLM_D)
    assert plan.figures["sampler_state_bytes"] == 1024 * 128256 * 4
    assert plan.non_kv_bytes == (plan.weights_bytes + plan.figures["activation_peak_bytes"]
                                 + plan.figures["sampler_state_bytes"] + plan.figures["non_torch_bytes"]
                                 + plan.figures["cuda_graph_bytes"])


def test_non_torch_at_tp_1_against_published_logs():
    # Post-fix measurements of the non-torch growth at tp 1 on an H100: llm-d 0.13 GiB (our default), and vLLM PR
    # #12126 (Llama-3.2-11B-Vision, enforce-eager: "non_torch_memory takes 0.16GiB"). The figures of PR #10511
    # (Llama-3-8B: 1.79 GiB at tp 1, 3.58 GiB at tp 2, the numbers) came from a measure PR #11809 found
    # wrong (it counted PyTorch's reserved-but-unallocated cache as non-torch), so they are not held against it.
    plan = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192)
    assert plan.figures["non_torch_bytes"] / GIB == pytest.approx(0.16, abs=0.035)
    assert plan.figures["non_torch_bytes"] / GIB == pytest.approx(0.13, abs=0.005)


def test_pr_10511_weights_at_tp_1_and_2():
    # vLLM PR #10511, `vllm serve meta-llama/Meta-Llama-3-8B` on an H100: "model weights take 14.96GiB" (tp 1) and
    # 7.48GiB (-tp 2): the weights split over tp as ours (their non-torch figures: see the test above)
    for tp, published in ((1, 14.96), (2, 7.48)):
        plan = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", tp=tp, max_model_len=8192)
        assert plan.term_bytes()["weights"] / GIB == pytest.approx(published, abs=0.005)


def test_non_torch_above_tp_2_reuses_the_tp_2_measurement():
    plan = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", tp=4, max_model_len=8192)
    assert plan.figures["non_torch_bytes"] == int(0.55 * GIB)
    assert any("tp 2 figure reused for tp > 2" in note for note in plan.notes)


def test_a_request_longer_than_the_pool_is_refused_in_one_line():
    with pytest.raises(UserError, match="is larger than the maximum number of tokens that can be stored in KV cache"):
        serve("qwen3-4b", engine="vllm", gpu="l4", gpu_memory_utilization=0.9)  # its own 262,144 context


@pytest.mark.parametrize("bad", [0, 1.5, -0.1])
def test_utilization_outside_zero_one_is_refused(bad):
    with pytest.raises(UserError, match="gpu-memory-utilization"):
        serve("llama-3-8b", engine="vllm", gpu="h100-80gb", gpu_memory_utilization=bad)


def test_a_flag_of_another_engine_is_refused():
    with pytest.raises(UserError, match="mem-fraction-static is a flag of sglang"):
        serve("llama-3-8b", engine="vllm", mem_fraction_static=0.8)


def test_fp8_ds_mla_on_a_model_without_mla_is_refused():
    with pytest.raises(UserError, match="fp8_ds_mla"):
        serve("llama-3-8b", engine="vllm", kv_cache_dtype="fp8_ds_mla", max_model_len=8192)


def test_json_has_vllm_figures():
    data = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192).as_dict()
    for key in ("num_gpu_blocks", "activation_peak_bytes", "non_torch_bytes", "cuda_graph_bytes", "log_lines"):
        assert key in data


def test_cli_takes_no_flashinfer_sampler_and_other_engines_refuse_it(capsys):
    from helpers import run

    code, out, _ = run(capsys, "serve", "llama-3-8b", "--engine", "vllm", "--gpu", "h100-80gb", "--max-model-len",
                       "8192", "--no-flashinfer-sampler", "--json")
    assert code == 0 and json.loads(out)["flashinfer_sampler"] is False
    code, _, err = run(capsys, "serve", "llama-3-8b", "--engine", "sglang", "--no-flashinfer-sampler")
    assert code == 2 and "--flashinfer-sampler is a flag of vllm" in err


def test_hybrid_groups_share_one_allocation_so_the_pool_fits_the_available_memory():
    # vLLM 0.34 kv_cache_planning.get_kv_cache_config_from_groups: every layer group aliases one allocation of
    # bytes_per_block × num_blocks, so a hybrid model's pool (gpt-oss: full and sliding groups) is not counted per group
    plan = serve("gpt-oss-120b", engine="vllm", gpu="h200-141gb", seq=32768)
    page = engine.page_bytes(load("gpt-oss-120b"), "full", plan.figures["block_size"], 1, plan.kv_dtype, "auto")
    groups = engine.layer_groups(load("gpt-oss-120b"), 1)
    assert len(groups) == 2
    assert plan.kv_cache_bytes == plan.figures["num_gpu_blocks"] * page * min(groups.values())
    assert plan.kv_cache_bytes <= plan.figures["available_kv_cache_bytes"]
    assert plan.kv_cache_bytes + plan.non_kv_bytes <= plan.budget_bytes


# LiquidAI/LFM2-1.2B config.json: 16 blocks, 10 short convolutions and 6 attention layers (transformers'
# docs/source/en/model_doc/lfm2.md), kernel conv_L_cache 3, conv_dim = hidden_size 2048
LFM2_12B = {
    "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": 2048, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 65536, "max_position_embeddings": 128000,
    "block_ff_dim": 12288, "block_multiple_of": 256, "block_ffn_dim_multiplier": 1.0, "block_auto_adjust_ff_dim": True,
    "conv_L_cache": 3, "conv_bias": False, "full_attn_idxs": [2, 5, 8, 10, 12, 14], "tie_embedding": True,
    "torch_dtype": "bfloat16"}


def test_lfm2_conv_state_is_padded_to_the_attention_page_and_counts_two_pages_a_request(tmp_path):
    # mamba_utils.short_conv_state_shape: conv_dim/tp × (conv_L_cache − 1), model dtype; interface.py
    # _align_hybrid_block_size pads it to the attention page; MambaSpec "align" mode: 2 pages a request per group;
    # kv_cache_planning.py:567: 6 attention and 10 conv layers make groups of 6, the conv kind two of them
    path = _config(tmp_path, "lfm2-1.2b", LFM2_12B)
    net = load(path)
    assert engine.layer_groups(net, 1) == {"full": 6, "conv": 10}
    assert engine.conv_state_bytes(net, 1, 2) == 2048 * (3 - 1) * 2
    plan = serve(path, engine="vllm", gpu="l4", max_model_len=32768)
    block = plan.figures["block_size"]
    page = 2 * block * 8 * (2048 // 32) * 2
    assert block == 64  # the conv state (8 KiB) is below one 64-token attention page: no raise
    assert plan.figures["num_gpu_blocks"] == plan.figures["available_kv_cache_bytes"] // (page * 6)
    per_request = math.ceil(32768 / block) + 2 * engine.MAMBA_ALIGN_PAGES
    concurrency = plan.figures["num_gpu_blocks"] / per_request
    assert plan.kv_cache_tokens == int(concurrency * 32768)
    assert plan.log_lines[0].endswith(f"{concurrency:.2f}x")


def test_hybrid_block_grows_to_hold_a_state_larger_than_a_page():
    # interface.py _align_hybrid_block_size: align = max(kernel block 16, block); block = align·⌈state/(align·token)⌉
    assert engine.hybrid_block_size(64, 8192, 2048) == 64
    assert engine.hybrid_block_size(16, 100_000, 1024) == 16 * math.ceil(100_000 / (16 * 1024))
    assert engine.hybrid_block_size(8, 4096, 2048) == 16


def test_group_size_takes_the_most_layers_when_under_one_and_a_half_times_the_fewest():
    # kv_cache_planning.py:567-578 (gpt-oss-20b + eagle: 12 sliding and 13 full make groups of 13)
    assert engine.group_size({"full": 13, "sliding": 12}) == 13
    assert engine.group_size({"full": 6, "conv": 10}) == 6


def test_llama4_chunked_layers_hold_the_chunk_plus_in_flight_pages(tmp_path):
    # transformers' Llama4TextConfig defaults (Llama-4-Scout's text model): 48 layers, no_rope_layers 0 every 4th,
    # attention_chunk_size 8192; ChunkedLocalAttentionSpec: ⌈min(chunk + in-flight, max_len)/block⌉ pages
    config = {"architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text", "hidden_size": 5120,
              "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_hidden_layers": 48,
              "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 202048,
              "max_position_embeddings": 131072, "attention_chunk_size": 8192, "torch_dtype": "bfloat16"}
    net = load(_config(tmp_path, "llama-4-text", config))
    assert engine.layer_groups(net, 1) == {"full": 12, "chunked": 36}
    assert engine.pages_per_request("chunked", 8192, 131072, 8192, 64) == math.ceil((8192 + 8192) / 64)
    assert engine.pages_per_request("chunked", 8192, 1000, 8192, 64) == math.ceil(1000 / 64)
    plan = serve(str(tmp_path / "llama-4-text" / "config.json"), engine="vllm", gpu="h200-141gb",
                 max_model_len=65536, tp=8)
    in_flight = plan.figures["max_num_batched_tokens"]  # the in-flight tokens of one step
    per_request = math.ceil(65536 / 64) + 3 * math.ceil((8192 + in_flight) / 64)
    assert plan.kv_cache_tokens == int(plan.figures["num_gpu_blocks"] / per_request * 65536)


def test_attention_scales_are_four_fp32_buffers_per_attention_layer_in_the_weights():
    # attention.py set_default_quant_scales: _k/_v/_q/_prob_scale registered on every attention layer, any KV dtype
    plan = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192, kv_cache_dtype="fp8")
    scales = next(t for t in plan.terms if t.key == "attention_scales")
    assert int(scales.expr) == 32 * 4 * 4
    assert plan.weights_bytes == sum(int(t.expr) for t in plan.terms if t.key in ("weights", "rope_cache",
                                                                                     "attention_scales"))


def test_attention_scales_are_counted_whatever_the_kv_dtype():
    # set_default_quant_scales registers the buffers on every attention layer, also with the auto (model) dtype
    plan = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192)
    assert int(next(t for t in plan.terms if t.key == "attention_scales").expr) == 32 * 4 * 4


# CUDA graphs (vLLM 0.34.0, commit 62d4bc3c7): gpu_worker.py:772-779 subtracts profile_cudagraph_memory's estimate
# from the KV memory. vLLM measures the pool; published figures vary too widely to check (the module docstring
# cites them), so these tests check the source's arithmetic: the sizes of config/vllm.py _set_cudagraph_sizes and
# cudagraph_utils.py _extrapolate_full_graph_memory, with the pool approximated from the model's shapes.
MIB = 1 << 20  # cudagraph_utils.py _MIN_PER_GRAPH_BYTES


def _default_sizes(seqs: int, tokens: int) -> list[int]:
    # config/vllm.py _set_cudagraph_sizes off SM100: 1, 2, 4, every 8 below 256, every 16 from 256 to the ceiling
    # min(2 · max_num_seqs, 512, max_num_batched_tokens), plus max_num_batched_tokens and max_num_seqs within it
    top = min(2 * seqs, 512, tokens)
    sizes = {1, 2, 4, *range(8, min(top + 1, 256), 8), *range(256, top + 1, 16), tokens, seqs}
    return sorted(s for s in sizes if s <= top)


def _pool(tokens: int, hidden: int, heads: int, kv_heads: int, head: int, ffn: int, e: int = 2) -> int:
    # the largest graph's live intermediates: residual, qkv, attention output, MLP gate·up (2·ffn) and act (ffn)
    return tokens * (hidden + (heads + 2 * kv_heads) * head + heads * head + 3 * ffn) * e


def test_cuda_graphs_are_the_largest_graphs_pool_and_a_mib_per_further_full_graph():
    # llama-3-8b on an H100, vllm serve's defaults (8192 tokens, 1,024 sequences): graphs up to 512 tokens
    plan = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192)
    sizes = _default_sizes(1024, 8192)
    assert sizes[-1] == 512 and len(sizes) == 51  # 3 + 31 + 17, as the source's docstring lists them
    full = len({min(s, 1024) for s in sizes})  # decode request counts: the shared sizes at one token a request
    expected = _pool(512, 4096, 32, 8, 128, 14336) + (full - 1) * MIB
    assert plan.figures["cuda_graph_bytes"] == expected
    found = plan.term_bytes()
    assert sum(v for k, v in found.items() if k.startswith("cuda_graph")) == expected


def test_cuda_graphs_come_out_of_the_kv_memory_and_enforce_eager_has_none():
    graphs = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192)
    eager = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192, enforce_eager=True)
    assert eager.figures["cuda_graph_bytes"] == 0
    assert not any(t.key.startswith("cuda_graph") for t in eager.terms)
    assert graphs.figures["cuda_graph_bytes"] > 0
    gap = eager.figures["available_kv_cache_bytes"] - graphs.figures["available_kv_cache_bytes"]
    assert gap == graphs.figures["cuda_graph_bytes"]
    rows = graphs.as_dict()["terms"]
    assert all(r["in_budget"] for r in rows if r["key"].startswith("cuda_graph"))


@pytest.mark.parametrize("seqs, tokens", [(64, 8192), (1024, 300), (5, 2048)])
def test_cuda_graph_sizes_follow_max_num_seqs_and_batched_tokens(seqs, tokens):
    # the ceiling min(2 · seqs, 512, tokens) sets the pool's tokens; the decode graphs are min(size, seqs)
    plan = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192, max_num_seqs=seqs,
                 max_num_batched_tokens=tokens)
    sizes = _default_sizes(seqs, tokens)
    full = len({min(s, seqs) for s in sizes})
    assert plan.figures["cuda_graph_bytes"] == _pool(sizes[-1], 4096, 32, 8, 128, 14336) + (full - 1) * MIB


def test_cuda_graph_pool_is_per_tp_rank():
    # heads, kv heads and the MLP are sharded over tp; the residual is not
    plan = serve("llama-3-8b", engine="vllm", gpu="h100-80gb", max_model_len=8192, tp=2)
    full = len(_default_sizes(1024, 8192))
    assert plan.figures["cuda_graph_bytes"] == _pool(512, 4096, 16, 4, 128, 14336 // 2) + (full - 1) * MIB


def test_sm100_takes_the_wide_prefill_grid():
    # config/vllm.py _split_cudagraph_capture_sizes: on SM100 the prefill graphs go up to min(8192, batched tokens)
    # and the decode graphs follow decode_cudagraph_capture_grid up to max_num_seqs
    plan = serve("llama-3-8b", engine="vllm", gpu="b200", max_model_len=8192, max_num_batched_tokens=8192)
    decode, n = [], 1
    while n < 1024:  # _walk_grid with step 0.65 · n^(2/3): every count to 6, then strides of powers of two
        decode.append(n)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, 0.65 * n ** (2 / 3)))))
        n = (n // stride + 1) * stride
    decode.append(1024)
    assert len(decode) == 64  # "64 sizes at 1024" (compilation.py decode_cudagraph_capture_grid's docstring)
    assert plan.figures["cuda_graph_bytes"] == _pool(8192, 4096, 32, 8, 128, 14336) + 63 * MIB
