"""Where the formulas come from: one citation per source id, used by terms and reports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """A citable work."""

    id: str
    citation: str
    url: str = ""


SOURCES: dict[str, Source] = {}


def register(id: str, citation: str, url: str = "") -> Source:
    """Add a source to the table; ids are unique."""
    if id in SOURCES:
        raise ValueError(f"source {id!r} already registered")
    SOURCES[id] = Source(id, citation, url)
    return SOURCES[id]


def source(id: str) -> Source:
    """The source with this id."""
    return SOURCES[id]


register("article-A", "Misraj AI, \"Calculating the memory of deep neural networks\" (Arabic), 12 Nov 2025")
register("article-B", "Misraj AI, \"Parameters and memory of transformer LLMs\" (Arabic), 2025")
register("korthikanti2022", "V. Korthikanti et al., \"Reducing Activation Recomputation in Large Transformer Models\", 2022",
         "https://arxiv.org/abs/2205.05198")
register("zero2020", "S. Rajbhandari et al., \"ZeRO: Memory Optimizations Toward Training Trillion Parameter Models\", SC 2020",
         "https://arxiv.org/abs/1910.02054")
register("megatron", "NVIDIA Megatron-LM, megatron/training/theoretical_memory_usage.py and docs")
register("deepspeed", "DeepSpeed, estimate_zero2/zero3_model_states_mem_needs")
register("pytorch", "PyTorch: nn.Linear / nn.LayerNorm parameter shapes, torch.optim states, and the tensors "
         "torch.autograd saves for backward (measured with torch 2.13.0)")
register("project", "symbolic: derived in this project from the definitions cited beside it")

# --- issue 4: training and inference memory ----------------------------------------------------
register("micikevicius2018", "P. Micikevicius et al., \"Mixed Precision Training\", ICLR 2018",
         "https://arxiv.org/abs/1710.03740")
register("megatron-distopt", "NVIDIA Megatron-LM docs, distributed optimizer: bytes per parameter by dtype "
         "(fp16/fp16 20, bf16/fp32 18, fp32/fp32 16; distributed 4 + 16/d, 6 + 12/d, 8 + 8/d)",
         "https://github.com/NVIDIA/Megatron-LM/blob/main/docs/api-guide/dist_optimizer.md")
register("narayanan2021", "D. Narayanan et al., \"Efficient Large-Scale Language Model Training on GPU Clusters "
         "Using Megatron-LM\" (1F1B and interleaved pipeline schedules), SC 2021", "https://arxiv.org/abs/2104.04473")
register("ren2021", "J. Ren et al., \"ZeRO-Offload: Democratizing Billion-Scale Model Training\", USENIX ATC 2021",
         "https://arxiv.org/abs/2101.06840")
register("dettmers2022", "T. Dettmers et al., \"8-bit Optimizers via Block-wise Quantization\", ICLR 2022 "
         "(the paper: 2048-element blocks; bitsandbytes >= 0.44: 256, one fp32 absmax each)", "https://arxiv.org/abs/2110.02861")
register("chen2023", "X. Chen et al., \"Symbolic Discovery of Optimization Algorithms\" (Lion), NeurIPS 2023",
         "https://arxiv.org/abs/2302.06675")
register("shazeer2018", "N. Shazeer, M. Stern, \"Adafactor: Adaptive Learning Rates with Sublinear Memory Cost\", "
         "ICML 2018", "https://arxiv.org/abs/1804.04235")
register("dao2022", "T. Dao et al., \"FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness\", "
         "NeurIPS 2022", "https://arxiv.org/abs/2205.14135")
register("shazeer2019", "N. Shazeer, \"Fast Transformer Decoding: One Write-Head is All You Need\" (multi-query "
         "attention, the KV cache)", "https://arxiv.org/abs/1911.02150")
register("ainslie2023", "J. Ainslie et al., \"GQA: Training Generalized Multi-Query Transformer Models from "
         "Multi-Head Checkpoints\", EMNLP 2023", "https://arxiv.org/abs/2305.13245")
register("frantar2022", "E. Frantar et al., \"GPTQ: Accurate Post-Training Quantization for Generative Pre-trained "
         "Transformers\" (group-wise int4 weights, group size 128), ICLR 2023", "https://arxiv.org/abs/2210.17323")
register("dettmers2022int8", "T. Dettmers et al., \"LLM.int8(): 8-bit Matrix Multiplication for Transformers at "
         "Scale\", NeurIPS 2022", "https://arxiv.org/abs/2208.07339")
register("eleuther2023", "Q. Anthony, S. Biderman, H. Schoelkopf, \"Transformer Math 101\", EleutherAI blog, 2023 "
         "(read second-hand)", "https://blog.eleuther.ai/transformer-math/")
register("huggingface", "Hugging Face transformers: LlamaForCausalLM forward and ForCausalLMLoss (logits upcast to "
         "fp32 before cross-entropy)")
register("shazeer2020", "N. Shazeer, \"GLU Variants Improve Transformer\" (gated feed-forward: gate, up, down)",
         "https://arxiv.org/abs/2002.05202")
register("user", "Defined by the user (command line --term or a report specification)")

# --- issue 27: serving engines' memory rules -----------------------------------------------------
register("llamacpp", "llama.cpp (ggml-org/llama.cpp at 0c1e57098bba43ac29e6e3b677cdceebdd22334f, as "
         "llama-cpp-python 0.3.36 vendors it): src/llama-context.cpp, src/llama-kv-cache.cpp, "
         "src/llama-kv-cache-iswa.cpp, src/llama-model.cpp load_tensors, src/llama-hparams.cpp, common/arg.cpp, "
         "ggml/src/ggml-alloc.c",
         "https://github.com/ggml-org/llama.cpp/blob/0c1e57098bba43ac29e6e3b677cdceebdd22334f/src/llama-context.cpp")
register("vllm", "vLLM 0.34.0 (commit 62d4bc3c7, the PyPI wheel's vllm/_version.py): "
         "vllm/v1/worker/gpu_worker.py (determine_available_memory), vllm/v1/worker/utils.py (request_memory), "
         "vllm/utils/mem_utils.py (memory_profiling), vllm/v1/kv_cache_interface.py (page sizes), "
         "vllm/v1/core/kv_cache_utils.py (blocks, maximum concurrency, the log line), vllm/config/cache.py and "
         "vllm/engine/arg_utils.py (defaults)", "https://github.com/vllm-project/vllm/tree/v0.34.0")
register("llm-d-vllm-memory", "llm-d, config_explorer/empirical-vllm-memory-results.md (commit 2593348): vLLM "
         "startup logs on an H100 (79.18 GiB CUDA total): weights, peak activation, non-torch memory, KV cache",
         "https://github.com/llm-d/llm-d-benchmark/blob/main/config_explorer/empirical-vllm-memory-results.md")
register("flashinfer", "FlashInfer 0.7.4 (PyPI wheel; vLLM 0.34.0 pins 0.7.3, not on the index): "
         "flashinfer/sampling.py top_k_top_p_sampling_from_logits (fp32 top-k-masked logits, then softmax)",
         "https://github.com/flashinfer-ai/flashinfer/tree/v0.7.4")
register("sglang", "SGLang 0.5.23 (the PyPI wheel; its sglang/_version.py names no commit), python/sglang/srt/: "
         "arg_groups/memory_hook.py (default chunked prefill, CUDA-graph max bs, mem_fraction_static), "
         "arg_groups/cuda_graph_hook.py (prefill capture sizes), mem_cache/kv_cache_configurator.py (KV budget, "
         "max_running_requests), model_executor/pool_configurator.py (cell, page rounding, hybrid SWA split), "
         "mem_cache/memory_pool.py (buffers and the 'KV Cache is allocated' line), managers/scheduler.py, "
         "distributed/bootstrap.py and parallel_state.py (groups started before the pre-load snapshot), "
         "device_communicators/pynccl.py and custom_all_reduce_v2.py with configs/ (start-up buffers)",
         "https://github.com/sgl-project/sglang/tree/v0.5.23")

# --- issue 28 (what is saved for backward): per-op checkpointing, layer frequency, chunked loss ---------------
register("torchtitan-pp", "torchtitan, torchtitan/distributed/pipeline_parallel.py at commit b5bcd76: "
         "_generate_llm_fqn_per_model_part (the embeddings and the norm + head count as one layer each; the L + 2 "
         "layer-equivalents split evenly, the first stages one more) and _get_pipeline_metadata (2 stages per rank "
         "for multi-stage schedules); torchtitan/parallelisms/pipelining_utils.py at 9dec370: generate_split_points",
         "https://github.com/pytorch/torchtitan/blob/b5bcd76c6/torchtitan/distributed/pipeline_parallel.py")
register("pytorch-pipelining", "PyTorch 2.13, torch/distributed/pipelining/schedules.py: ScheduleGPipe, "
         "Schedule1F1B (warmup_chunks = min(m, p − rank)), ScheduleInterleaved1F1B (_get_warmup_ops, "
         "_get_1f1b_rank_ops) and ScheduleZBVZeroBubble (backward split into input and weight gradients)",
         "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/distributed/pipelining/schedules.py")
register("torchtitan-ac", "torchtitan, torchtitan/parallelisms/parallelize_llama.py at commit 9dec370 (the "
         "2024-12 benchmark's): _save_list (aten.mm, the efficient and flash SDPA kernels, reduce_scatter_tensor, "
         "abs, max), the 'op' policy that recomputes every second mm, and selective_ac_option N (layers N, 2N, ... "
         "checkpointed); torchtitan/models/llama/model.py (wq, wk, wv, wo, w1, w3, w2)",
         "https://github.com/pytorch/torchtitan/blob/9dec370ad26b5f8e9a7333a0e36165018262644b/"
         "torchtitan/parallelisms/parallelize_llama.py")
register("torchtitan-bench", "torchtitan, benchmarks/llama3_h100_202412_torchtitan.md (commit b5bcd76): Llama 3.1 "
         "on H100s, torch 1963fc8, torchtitan 9dec370; memory is the allocator's max reserved (train.py logs "
         "max_reserved_gib)", "https://github.com/pytorch/torchtitan/blob/main/benchmarks/"
         "llama3_h100_202412_torchtitan.md")
register("torchtune-chunked-ce", "torchtune, torchtune/modules/loss/ce_chunked_output_loss.py (commit bd2a0fc): "
         "CEWithChunkedOutputLoss, the model's logits as num_output_chunks chunks of the sequence, each upcast "
         "to fp32 and passed to F.cross_entropy in turn", "https://github.com/pytorch/torchtune/blob/"
         "bd2a0fc7c/torchtune/modules/loss/ce_chunked_output_loss.py")
register("megatron-distribute-saved", "Megatron-LM, megatron/core/tensor_parallel/random.py CheckpointFunction "
         "(distribute_saved_activations splits a checkpointed input over the tp ranks when sequence parallelism "
         "is off; with it the input is already sequence-sharded)", "https://github.com/NVIDIA/Megatron-LM")
# --- issue 28, the step's lifetimes: the optimizer in backward, activation offloading ------------
register("torchtune-upcast-logits", "torchtune: TransformerDecoder.unembed returns self.output(h).float(), "
         "torchtune/modules/transformer.py (commits 1814feb and bd2a0fc); the recipe's _loss_step passes the fp32 "
         "logits to the loss and deletes them (recipes/full_finetune_single_device.py)",
         "https://github.com/pytorch/torchtune/blob/bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1/"
         "torchtune/modules/transformer.py")
register("torchtune-layer", "torchtune: RMSNorm.forward (torchtune/modules/rms_norm.py), MultiHeadAttention.forward "
         "(K and V expanded to the query heads, torchtune/modules/attention.py) and RotaryPositionalEmbeddings "
         "(cache rows by input_pos, torchtune/modules/position_embeddings.py), commit 1814feb",
         "https://github.com/pytorch/torchtune/blob/1814feb17a9038e1a8053ce93111bd26774a8db6/"
         "torchtune/modules/attention.py")
register("torchtune-optim-in-bwd", "torchtune: register_optim_in_bwd_hooks, torchtune/training/memory.py (one "
         "optimizer per parameter, step() and zero_grad() in register_post_accumulate_grad_hook), and "
         "recipes/full_finetune_single_device.py (refuses gradient_accumulation_steps > 1 with optimizer_in_bwd), "
         "commit bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1",
         "https://github.com/pytorch/torchtune/blob/bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1/torchtune/training/memory.py")
register("torchtune-offload", "torchtune: OffloadActivations and get_act_offloading_ctx_manager, "
         "torchtune/training/_activation_offloading.py (min_offload_size 1024 bytes, max_fwd_stash_size 5, "
         "pinned host copies, the output head under a NoOpManager), and recipes/full_finetune_single_device.py "
         "(offloading needs activation checkpointing), commit bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1",
         "https://github.com/pytorch/torchtune/blob/bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1/"
         "torchtune/training/_activation_offloading.py")
register("torchtune-readme", "torchtune README, \"Optimization flags\" table (Llama 3.2 3B, batch 2, packed to 4096 "
         "tokens, bf16, A100; peak memory active = torch.cuda.memory_stats()['active_bytes.all.peak'], "
         "torchtune/training/memory.py get_memory_stats), commit bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1",
         "https://github.com/pytorch/torchtune/blob/bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1/README.md")
# --- issue 28: FSDP2, torchao float8, the CUDA context with and without lazy module loading --------
register("pytorch-fsdp2", "PyTorch 2.13.0, torch/distributed/fsdp/_fully_shard/: _fsdp_param_group.py (unshard, "
         "_prefetch_unshard, post_backward, reduce_scatter_max_input_buffers), _fsdp_collectives.py "
         "(foreach_all_gather, foreach_all_gather_copy_out, foreach_reduce), _fsdp_state.py (_lazy_init: the root "
         "is not resharded after forward)",
         "https://github.com/pytorch/pytorch/tree/v2.13.0/torch/distributed/fsdp/_fully_shard")
register("torchao-float8", "pytorch/ao at commit 36027d8: torchao/float8/float8_linear.py "
         "(matmul_with_hp_or_float8_args saves input_hp and weight_hp_t), config.py (Float8LinearRecipeName "
         "tensorwise, rowwise; enable_fsdp_float8_all_gather tensorwise only), fsdp_utils.py "
         "(WeightWithDynamicFloat8CastTensor, precompute_float8_dynamic_scale_for_fsdp)",
         "https://github.com/pytorch/ao/tree/36027d82d1ad9949597ea16002ff4940374b1b94/torchao/float8")
register("torchao-float8-rowwise", "pytorch/ao at commit 36027d8 (as torchao 0.18.0): torchao/float8/config.py "
         "(the rowwise recipe: axiswise e4m3 casts of input, weight and grad_output, scales rounded to powers of two; "
         "gemm_config_output use_fast_accum=True, the grad_input and grad_weight gemms without), float8_ops.py "
         "addmm_float8_unwrapped (rowwise without fast accumulation: _scaled_mm with unit scales, the inverse row and "
         "column scales multiplied after), float8_utils.py (amax in the input's dtype, fp32 scales)",
         "https://github.com/pytorch/ao/blob/36027d82d1ad9949597ea16002ff4940374b1b94/torchao/float8/float8_ops.py")
register("torchtitan-llama3-benchmark", "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (commit "
         "820504e): Llama 3.1 8B on 8 and 128 H100s (96 GB), FSDP, local batch 2, selective AC; memory is "
         "max reserved (torchtitan 9dec370: metrics.py reserved_bytes.all.peak, train.py logs max_reserved_gib); "
         "apply_fsdp in torchtitan/parallelisms/parallelize_llama.py (every TransformerBlock a fully_shard group, "
         "then the root; param_dtype bf16, reduce_dtype fp32)",
         "https://github.com/pytorch/torchtitan/blob/820504e20d1149fbf0b98c567af24c4b0433b22d/"
         "benchmarks/llama3_h100_202412_torchtitan.md")
register("cuda-lazy-loading", "NVIDIA CUDA Programming Guide, Lazy Loading (CUDA_MODULE_LOADING: LAZY or EAGER; "
         "introduced in 11.7, default on Linux from 12.2); pytorch/pytorch#86509 (PyTorch sets LAZY when unset: "
         "287,047,680 bytes used with it, 666,632,192 without, after one small tensor); ptrblck in "
         "pytorch/pytorch#107667 (\"Before CUDA 11.7, *all* kernels were loaded into the context ... which took "
         ">1000MB\")", "https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/lazy-loading.html")
# --- issue 28: context parallelism (ring attention) --------------------------------------------------
register("torchtitan-cp", "pytorch/torchtitan at 9dec370: torchtitan/parallelisms/parallel_dims.py (mesh pp, "
         "dp_replicate, dp_shard, cp, tp; FSDP over the flattened dp_shard_cp mesh), parallelize_llama.py (FSDP "
         "applied whenever cp > 1), utils.py create_context_parallel_ctx and get_train_context (SDPA flash or "
         "efficient only), config_manager.py (context_parallel_rotate_method default 'allgather'), train.py "
         "(input_ids, labels and freqs_cis sharded on the sequence), models/llama/model.py (repeat_kv before SDPA)",
         "https://github.com/pytorch/torchtitan/tree/9dec370ad26b5f8e9a7333a0e36165018262644b")
register("pytorch-context-parallel", "PyTorch 2.13.0, torch/distributed/tensor/experimental/_context_parallel/"
         "_attention.py: _templated_ring_attention (K/V concatenated and rotated; _AllGatherRotater gathers every "
         "rank's block once), _SDPAMerger (fp32 output and logsumexp, convert_to_f32), "
         "_templated_ring_attention_backward (fp32 dq, dk, dv; dK/dV rotated all-to-all), _context_parallel_buffers "
         "(the sequence in 2·cp chunks, round-robin load balance)",
         "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/distributed/tensor/experimental/_context_parallel/"
         "_attention.py")

register("pytorch-loss-parallel", "PyTorch 2.13.0, torch/distributed/tensor/parallel/loss.py: loss_parallel() "
         "(cross-entropy on logits sharded over the vocabulary), _log_softmax (x − max, then exp and sum: two fp32 "
         "temporaries of the shard), _nll_loss_and_log_softmax_backward (zeros_like, exp(x), their sum and the "
         "product with grad_output: fp32 shards alive at once)",
         "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/distributed/tensor/parallel/loss.py")

register("pytorch-tp-colwise", "PyTorch 2.13.0 (and 2.6.0), torch/distributed/tensor/parallel/style.py: "
         "ColwiseParallel._prepare_input_fn (an input laid out as input_layouts, Shard(1) under sequence "
         "parallelism, is redistributed to Replicate, an all-gather, before the column-parallel matmul, which saves "
         "the gathered input for its weight gradient); torchtitan 9dec370 parallelize_llama.py apply_tp: the output "
         "head ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1))",
         "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/distributed/tensor/parallel/style.py")

register("pytorch-tp-prepare-input", "PyTorch 2.13.0, torch/distributed/tensor/parallel/style.py: "
         "PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)) all-gathers "
         "the norm's sequence shard before attention and before the MLP (torchtitan 9dec370 and HEAD "
         "parallelize_llama.py apply_tp), and the ColwiseParallel wq, wk, wv, w1, w3 save the gathered B·S·H input "
         "for their weight gradients (measured on the CPU, tests/dtensor_tp_block_child.py); under torch.compile "
         "torch/_functorch/partitioners.py force_save_collectives marks every _c10d_functional output MUST_SAVE "
         "outside a checkpointed region (Note [Recomputing collectives in the partitioner])",
         "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/distributed/tensor/parallel/style.py")

register("torchao-float8-tp", "torchao 0.18.0 torchao/float8/float8_tensor_parallel.py: PrepareFloat8ModuleInput "
         "casts the sequence shard to float8 (e4m3, tensorwise) before its all-gather, and Float8ColwiseParallel's "
         "Float8Linear (float8_linear.py matmul_with_hp_or_float8_args) saves the gathered float8 input as it is "
         "(1 byte an element); torchtitan 9dec370 apply_tp uses them whenever float8 is on (read, not measured)",
         "https://github.com/pytorch/ao/blob/v0.18.0/torchao/float8/float8_tensor_parallel.py")

# --- issue 29: image tokens of vision-language models ----------------------------------------------
register("qwen2-vl-processor", "Hugging Face transformers 5.24.0, models/qwen2_vl/image_processing_qwen2_vl.py: "
         "smart_resize (factor patch_size·merge_size = 28, min_pixels 56·56, max_pixels 28·28·1280), 14-pixel "
         "patches, 2×2 merged into one token (Qwen2-VL and Qwen2.5-VL)")
register("llava-processor", "Hugging Face transformers 5.24.0, models/llava/processing_llava.py: "
         "(height // patch_size)·(width // patch_size) + num_additional_image_tokens, less 1 for the "
         "\"default\" feature strategy (LLaVA-1.5: 336-pixel images, 14-pixel patches, 576 tokens)")
register("llava-next-processor", "Hugging Face transformers 5.24.0, models/llava_next/processing_llava_next.py "
         "_get_number_of_features and _get_unpadded_features, image_processing_utils.select_best_resolution "
         "(anyres: the best grid of tiles, unpadded, one newline per row, plus the base image)")
register("gemma3-processor", "Hugging Face transformers 5.24.0, models/gemma3/processing_gemma3.py and "
         "configuration_gemma3.py: image_seq_length = mm_tokens_per_image (256) per 896-pixel image")
register("mllama-processor", "Hugging Face transformers 5.24.0, models/mllama/image_processing_mllama.py "
         "get_optimal_tiled_canvas (560-pixel tiles, up to max_image_tiles 4) and modeling_mllama.py "
         "(each tile (560/14)² patches + 1 class token)")
# --- issue 28: torch.compile ----------------------------------------------------------------------------------
register("torch-partitioner", "PyTorch 2.13.0, torch/_functorch/partitioners.py: min_cut_rematerialization_partition "
         "(the compiled forward saves what the min cut keeps: matmul and attention outputs and inputs; pointwise ops, "
         "norms and activations are recomputed in the compiled backward); measured with inductor on the CPU "
         "(tests/compile_child.py)", "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/_functorch/partitioners.py")
register("torch-compile-checkpoint", "torchtitan 9dec370 parallelize_llama.py apply_ac (ptd_checkpoint_wrapper, "
         "preserve_rng_state=False) then apply_compile (torch.compile(block, fullgraph=True)) under PyTorch 2.13.0's "
         "inductor and torchao 0.18.0 (torchao/float8 as 36027d8): the compiled backward recomputes the block and "
         "holds its buffers as inductor's generated code plans them; measured on the CPU "
         "(tests/float8_compile_child.py)", "https://github.com/pytorch/torchtitan/blob/9dec370/torchtitan/"
         "parallelisms/parallelize_llama.py")
register("torch-compile-ops-float8", "torchtitan 9dec370 parallelize_llama.py apply_ac (selective_ac_option "
         "\"op\": checkpoint_wrapper with _save_list's policy) then apply_compile (fullgraph=True) under PyTorch "
         "2.13.0's inductor, torchao 0.18.0's Float8Linear (tensorwise): the compiled backward's buffers as "
         "inductor's generated code plans them; measured on the CPU (tests/float8_compile_child.py, ops)",
         "https://github.com/pytorch/torchtitan/blob/9dec370/torchtitan/parallelisms/parallelize_llama.py")
register("torchtune-chunked-backward", "torchtune CEWithChunkedOutputLoss with compile_loss (commit bd2a0fc) under "
         "PyTorch 2.13.0's autograd engine (torch/csrc/autograd/engine.h CompareNodeTaskTime: the highest sequence "
         "number first, so every chunk's loss before the head): each compiled loss frees its chunk's saved logits as "
         "it writes their gradient; a trained head's H·V weight gradients are summed out of place; measured on the "
         "CPU with inductor (tests/chunked_backward_child.py)", "https://github.com/pytorch/torchtune/blob/"
         "bd2a0fc7c/torchtune/modules/loss/ce_chunked_output_loss.py")
register("torchtitan-compile", "torchtitan, torchtitan/parallelisms/parallelize_llama.py at commit 9dec370: "
         "apply_compile (torch.compile per TransformerBlock, after apply_ac, before FSDP); train.py leaves the loss "
         "uncompiled at that commit", "https://github.com/pytorch/torchtitan/blob/9dec370ad26b5f8e9a7333a0e36165018262644b/"
         "torchtitan/parallelisms/parallelize_llama.py")
register("torchtitan-fsdp", "torchtitan, torchtitan/parallelisms/parallelize_llama.py at commit 9dec370: apply_fsdp "
         "(each TransformerBlock a fully_shard unit with reshard_after_forward = layer_id < L − 1: the last block "
         "stays unsharded after forward), then the root", "https://github.com/pytorch/torchtitan/blob/"
         "9dec370ad26b5f8e9a7333a0e36165018262644b/torchtitan/parallelisms/parallelize_llama.py")
register("adam-8bit-step", "The 8-bit AdamW step: torchao 0.18.0, torchao/optim/adam.py (single_param_adam compiled per "
         "parameter) and subclass_8bit.py (OptimState8bit: lerp dequantizes, copy_ re-quantizes per 256-element "
         "block), measured with inductor on the CPU (tests/adam_8bit_step_child.py); bitsandbytes 0.50.2, "
         "optim/optimizer.py Optimizer2State.update_step and backends/cuda/ops.py (one in-place CUDA kernel)",
         "https://github.com/pytorch/ao/blob/36027d82d/torchao/optim/adam.py")
