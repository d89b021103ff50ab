"""llama.cpp's own buffer sizes for small random-weight GGUF models: the table tests/test_llamacpp_engine.py checks.

Run with an environment that has ``gguf`` and ``llama-cpp-python`` (not the project's)::

    /work/llvenv/bin/python benchmarks/llamacpp_buffers.py [--out tests/data/llamacpp_buffers.json]

For thirteen models (llama with grouped KV heads; qwen2 with Q/K/V biases and a tied output; qwen3 with q/k norms
and an FFN width that is not whole super-blocks, so llama-quantize falls back; gemma3 with sliding-window layers (its
5:1 pattern) and a tied output; gemma2 (sliding window every other layer, soft-capping); qwen3moe; llama with 4
experts, 2 used; gpt-oss with attention sinks and biases; and, each in its own layout (``own_layer``), phi3 with
fused QKV and gate-up, starcoder2 with LayerNorm and projection biases and a GELU FFN, olmo2 with its norms after
attention and FFN, gemma, qwen2moe with a gated shared expert; the MoE ones and those in their own layout on fewer
file types) it writes an F16
model with the ``gguf`` package, quantizes it to several llama.cpp file types with ``llama_model_quantize``, reads
each file's tensor types back (``gguf.GGUFReader``) and loads it on the CPU (``n_gpu_layers=0``, no mmap), at several
contexts, parallel sequences, micro-batches, cache types and flash
attention on/off; one child process per model quantizes and loads everything, taking llama.cpp's log through
``llama_log_set`` load by load. From each load's log it keeps the lines ``load_tensors: CPU model buffer size``,
``llama_context: CPU output buffer size``, ``llama_kv_cache: CPU KV buffer size`` and ``sched_reserve: CPU compute
buffer size`` (in MiB with 2 decimals, as printed). The file types llama.cpp refuses without an importance matrix
(IQ1/IQ2/IQ3_XXS/IQ3_XS, Q2_K_S) get a uniform one (``NEEDS_IMATRIX``). The JSON records the ggml commit the library reports (``ggml_commit``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "llamacpp_buffers.json"

# the file types the architectures written in their own layout are measured at
OWN_FTYPES = ["F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_K_S", "Q4_0", "IQ4_XS", "Q3_K_M", "Q2_K"]
# name -> hyperparameters (the gguf metadata written) and tensor recipe
MODELS = {
    "llama-gqa": dict(arch="llama", vocab=1024, hidden=256, layers=4, heads=8, kv_heads=2, head_dim=32, ffn=768,
                      ctx_train=4096, qk_norm=False, swa=0, tied=False),
    "qwen3-qknorm": dict(arch="qwen3", vocab=1536, hidden=256, layers=3, heads=4, kv_heads=2, head_dim=64, ffn=320,
                         ctx_train=8192, qk_norm=True, swa=0, tied=False),
    # qwen2 (src/models/qwen2.cpp: create_tensor_qkv loads attn_q/k/v.bias, build_qkv adds them) with a tied output
    "qwen2-bias": dict(arch="qwen2", vocab=1536, hidden=256, layers=3, heads=4, kv_heads=2, head_dim=64, ffn=512,
                       ctx_train=8192, qk_norm=False, swa=0, tied=True, qkv_bias=True),
    "gemma3-swa": dict(arch="gemma3", vocab=2048, hidden=256, layers=7, heads=4, kv_heads=1, head_dim=64, ffn=512,
                       ctx_train=8192, qk_norm=True, swa=128, tied=True),
    # gemma2 (src/models/gemma2.cpp: load_swa_pattern(ml, 2), the output always tied, attention and final logit
    # soft-capping) and qwen3moe (q/k norms and experts), the other architectures the project reads from GGUF files
    "gemma2-swa": dict(arch="gemma2", vocab=2048, hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64, ffn=512,
                       ctx_train=8192, qk_norm=False, swa=128, tied=True, softcap=(50.0, 30.0),
                       ftypes=["F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0", "IQ4_XS", "Q3_K_M", "Q2_K"]),
    "qwen3-moe": dict(arch="qwen3moe", vocab=1024, hidden=256, layers=3, heads=4, kv_heads=2, head_dim=64, ffn=256,
                      ctx_train=4096, qk_norm=True, swa=0, tied=False, experts=4, experts_used=2, expert_ffn=256,
                      ftypes=["F16", "Q8_0", "Q6_K", "Q4_K_M", "IQ4_XS", "Q3_K_M"]),
    # the other architectures the project reads from GGUF files, each in its own layout (own_layer): phi3 with fused
    # attn_qkv and ffn_up (gate and up), starcoder2 (LayerNorms and projections with biases, a GELU FFN), olmo2 (norms
    # after attention and FFN, q/k norms over all heads), gemma (tied output) and qwen2moe (shared expert with a gate)
    "phi3-fused": dict(arch="phi3", vocab=1024, hidden=256, layers=3, heads=4, kv_heads=4, head_dim=64, ffn=512,
                       ctx_train=4096, qk_norm=False, swa=0, tied=False, layout=True, ftypes=OWN_FTYPES),
    "starcoder2-bias": dict(arch="starcoder2", vocab=1024, hidden=256, layers=3, heads=4, kv_heads=2, head_dim=64,
                            ffn=1024, ctx_train=4096, qk_norm=False, swa=0, tied=False, layout=True, ftypes=OWN_FTYPES),
    "olmo2-norms": dict(arch="olmo2", vocab=1024, hidden=256, layers=3, heads=4, kv_heads=2, head_dim=64, ffn=512,
                        ctx_train=4096, qk_norm=False, swa=0, tied=False, layout=True, ftypes=OWN_FTYPES),
    "gemma-tied": dict(arch="gemma", vocab=2048, hidden=256, layers=3, heads=4, kv_heads=1, head_dim=64, ffn=512,
                       ctx_train=8192, qk_norm=False, swa=0, tied=True, layout=True, ftypes=OWN_FTYPES),
    "qwen2moe-shexp": dict(arch="qwen2moe", vocab=1024, hidden=256, layers=3, heads=4, kv_heads=2, head_dim=64,
                           ffn=256, ctx_train=4096, qk_norm=False, swa=0, tied=False, experts=4, experts_used=2,
                           expert_ffn=256, shared_ffn=512, layout=True, ftypes=OWN_FTYPES),
    # llama with experts (mixtral's layout: ffn_gate_inp and 3-D ffn_*_exps), fewer file types to keep it short
    "llama-moe": dict(arch="llama", vocab=1024, hidden=256, layers=4, heads=8, kv_heads=2, head_dim=32, ffn=256,
                      ctx_train=4096, qk_norm=False, swa=0, tied=False, experts=4, experts_used=2, expert_ffn=256,
                      ftypes=["F16", "Q8_0", "Q4_K_M", "IQ2_XXS", "IQ3_XXS"]),
    # gpt-oss (LLM_ARCH_OPENAI_MOE, src/models/openai-moe.cpp: attention sinks, an output bias, expert biases,
    # sliding window every other layer, no q/k norms), the file types its releases use
    "gpt-oss-moe": dict(arch="gpt-oss", vocab=1024, hidden=256, layers=4, heads=8, kv_heads=2, head_dim=64, ffn=256,
                        ctx_train=4096, qk_norm=False, swa=128, tied=False, experts=4, experts_used=2, expert_ffn=256,
                        ftypes=["F16", "Q8_0", "MXFP4_MOE", "Q4_K_M"]),
}
FILE_TYPES = {"F16": 1, "BF16": 32, "Q8_0": 7, "Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
              "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17,
              "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "IQ3_S": 26, "IQ3_M": 27, "TQ2_0": 37, "MXFP4_MOE": 38,
              "Q2_K_S": 21, "IQ1_S": 24, "IQ1_M": 31, "IQ2_XXS": 19, "IQ2_XS": 20, "IQ2_S": 28, "IQ2_M": 29,
              "IQ3_XXS": 23, "IQ3_XS": 22}
# llama-quant.cpp tensor_requires_imatrix (856-875 at 0c1e57098): these file types' low-bit tensors are refused
# without an importance matrix, so they are quantized with a uniform one (all ones; the tensor types do not depend
# on its values, only on having one: quantize_state_impl::has_imatrix)
NEEDS_IMATRIX = ("Q2_K_S", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS")
# the file types every model is written in unless its spec names its own
DEFAULT_FTYPES = [f for f in FILE_TYPES if f != "MXFP4_MOE"]
GGML_TYPE_IDS = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}
# (n_ctx, n_seq_max, n_batch, n_ubatch, flash_attn, type_k, type_v, swa_full, kv_unified)
CONTEXTS = [
    (1000, 1, 2048, 512, False, "f16", "f16", False, False),
    (4096, 1, 2048, 512, False, "f16", "f16", False, False),
    (4096, 1, 2048, 512, True, "f16", "f16", False, False),
    (4096, 1, 2048, 256, False, "f16", "f16", False, False),
    (4096, 4, 2048, 512, False, "f16", "f16", False, False),
    (4096, 4, 2048, 512, True, "f16", "f16", False, True),
    (2048, 1, 512, 128, True, "q8_0", "q8_0", False, False),
    (2048, 1, 2048, 512, True, "q4_0", "f16", False, False),
    (8192, 2, 2048, 512, False, "f16", "f16", True, False),
]
_LINE = re.compile(r"^(load_tensors|llama_context|llama_kv_cache|sched_reserve):\s+(\S+)\s+(model|output|KV|compute) "
                   r"buffer size =\s+([0-9.]+) MiB")


def write_model(path: str, spec: dict) -> None:
    """A random-weight F16 model (1-D tensors F32) in llama.cpp's tensor names."""
    import gguf
    import numpy as np

    arch, v, h, n, a, kv, d, ff = (spec[k] for k in ("arch", "vocab", "hidden", "layers", "heads", "kv_heads",
                                                     "head_dim", "ffn"))
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(n)
    w.add_context_length(spec["ctx_train"])
    w.add_embedding_length(h)
    w.add_feed_forward_length(ff)
    w.add_head_count(a)
    w.add_head_count_kv(kv)
    w.add_key_length(d)
    w.add_value_length(d)
    w.add_rope_dimension_count(d)
    w.add_layer_norm_rms_eps(1e-6)
    if arch == "starcoder2":
        w.add_layer_norm_eps(1e-5)
    if spec.get("shared_ffn"):
        w.add_expert_shared_feed_forward_length(spec["shared_ffn"])
    w.add_rope_freq_base(10000.0)
    w.add_file_type(1)
    if spec["swa"]:
        w.add_sliding_window(spec["swa"])
    if spec.get("softcap"):
        w.add_attn_logit_softcapping(spec["softcap"][0])
        w.add_final_logit_softcapping(spec["softcap"][1])
    if spec.get("experts"):
        w.add_expert_count(spec["experts"])
        w.add_expert_used_count(spec["experts_used"])
        w.add_expert_feed_forward_length(spec["expert_ffn"])
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    tokens += [f"tok{i}".encode() for i in range(v - len(tokens))]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * v)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (v - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    rng = np.random.default_rng(0)

    def tensor(name: str, *shape: int) -> None:  # numpy order: (ne1, ne0)
        dtype = np.float32 if len(shape) == 1 or not name.endswith("weight") else np.float16
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(dtype))

    tensor("token_embd.weight", v, h)
    if not spec["tied"]:
        tensor("output.weight", v, h)
    tensor("output_norm.weight", h)
    if arch == "starcoder2":
        tensor("output_norm.bias", h)
    for i in range(n):
        if spec.get("layout"):
            for name, shape in own_layer(spec, i):
                tensor(name, *shape)
            continue
        ne, fe = spec.get("experts", 0), spec.get("expert_ffn", 0)
        ffn = ((("ffn_gate_inp", (ne, h)), ("ffn_gate_exps", (ne, fe, h)), ("ffn_up_exps", (ne, fe, h)),
                ("ffn_down_exps", (ne, h, fe))) if ne else
               (("ffn_gate", (ff, h)), ("ffn_up", (ff, h)), ("ffn_down", (h, ff))))
        norms = (("attn_norm", (h,)),) if arch == "gpt-oss" else (("attn_norm", (h,)), ("ffn_norm", (h,)))
        for name, shape in (("attn_q", (a * d, h)), ("attn_k", (kv * d, h)), ("attn_v", (kv * d, h)),
                            ("attn_output", (h, a * d)), *ffn, *norms):
            tensor(f"blk.{i}.{name}.weight", *shape)
        if spec["qk_norm"]:
            tensor(f"blk.{i}.attn_q_norm.weight", d)
            tensor(f"blk.{i}.attn_k_norm.weight", d)
        if spec.get("qkv_bias"):
            tensor(f"blk.{i}.attn_q.bias", a * d)
            tensor(f"blk.{i}.attn_k.bias", kv * d)
            tensor(f"blk.{i}.attn_v.bias", kv * d)
        if arch in ("gemma2", "gemma3"):
            tensor(f"blk.{i}.post_attention_norm.weight", h)
            tensor(f"blk.{i}.post_ffw_norm.weight", h)
        if arch == "gpt-oss":  # openai-moe.cpp load_arch_tensors: the post-attention norm, sinks and biases
            tensor(f"blk.{i}.post_attention_norm.weight", h)
            tensor(f"blk.{i}.attn_sinks.weight", a)
            tensor(f"blk.{i}.attn_q.bias", a * d)
            tensor(f"blk.{i}.attn_k.bias", kv * d)
            tensor(f"blk.{i}.attn_v.bias", kv * d)
            tensor(f"blk.{i}.attn_output.bias", h)
            tensor(f"blk.{i}.ffn_gate_inp.bias", ne)
            tensor(f"blk.{i}.ffn_gate_exps.bias", ne, fe)
            tensor(f"blk.{i}.ffn_up_exps.bias", ne, fe)
            tensor(f"blk.{i}.ffn_down_exps.bias", ne, h)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def own_layer(spec: dict, i: int) -> list[tuple[str, tuple[int, ...]]]:
    """Layer ``i``'s tensors (numpy order) as src/models/<arch>.cpp load_arch_tensors creates them."""
    arch, h, a, kv, d, ff = (spec[k] for k in ("arch", "hidden", "heads", "kv_heads", "head_dim", "ffn"))
    q, k = a * d, kv * d
    if arch == "phi3":  # phi3.cpp: fused attn_qkv (create_tensor_qkv), ffn_up {n_embd, 2 n_ff}
        names = [("attn_norm.weight", (h,)), ("attn_qkv.weight", (q + 2 * k, h)), ("attn_output.weight", (h, q)),
                 ("ffn_norm.weight", (h,)), ("ffn_up.weight", (2 * ff, h)), ("ffn_down.weight", (h, ff))]
    elif arch == "starcoder2":  # starcoder2.cpp: every norm and projection with a bias, no gate
        names = [("attn_norm.weight", (h,)), ("attn_norm.bias", (h,)), ("attn_q.weight", (q, h)),
                 ("attn_k.weight", (k, h)), ("attn_v.weight", (k, h)), ("attn_q.bias", (q,)), ("attn_k.bias", (k,)),
                 ("attn_v.bias", (k,)), ("attn_output.weight", (h, q)), ("attn_output.bias", (h,)),
                 ("ffn_norm.weight", (h,)), ("ffn_norm.bias", (h,)), ("ffn_up.weight", (ff, h)), ("ffn_up.bias", (ff,)),
                 ("ffn_down.weight", (h, ff)), ("ffn_down.bias", (h,))]
    elif arch == "olmo2":  # olmo2.cpp: no pre-norms; q/k norms over all heads; norms after attention and FFN
        names = [("attn_q.weight", (q, h)), ("attn_k.weight", (k, h)), ("attn_v.weight", (k, h)),
                 ("attn_output.weight", (h, q)), ("attn_q_norm.weight", (q,)), ("attn_k_norm.weight", (k,)),
                 ("post_attention_norm.weight", (h,)), ("ffn_gate.weight", (ff, h)), ("ffn_up.weight", (ff, h)),
                 ("ffn_down.weight", (h, ff)), ("post_ffw_norm.weight", (h,))]
    elif arch == "gemma":  # gemma.cpp: llama's layer, the output tied
        names = [("attn_norm.weight", (h,)), ("attn_q.weight", (q, h)), ("attn_k.weight", (k, h)),
                 ("attn_v.weight", (k, h)), ("attn_output.weight", (h, q)), ("ffn_norm.weight", (h,)),
                 ("ffn_gate.weight", (ff, h)), ("ffn_up.weight", (ff, h)), ("ffn_down.weight", (h, ff))]
    elif arch == "qwen2moe":  # qwen2moe.cpp: Q/K/V biases, experts and a shared expert with a sigmoid gate
        ne, fe, fs = spec["experts"], spec["expert_ffn"], spec["shared_ffn"]
        names = [("attn_norm.weight", (h,)), ("attn_q.weight", (q, h)), ("attn_k.weight", (k, h)),
                 ("attn_v.weight", (k, h)), ("attn_q.bias", (q,)), ("attn_k.bias", (k,)), ("attn_v.bias", (k,)),
                 ("attn_output.weight", (h, q)), ("ffn_norm.weight", (h,)), ("ffn_gate_inp.weight", (ne, h)),
                 ("ffn_gate_exps.weight", (ne, fe, h)), ("ffn_down_exps.weight", (ne, h, fe)),
                 ("ffn_up_exps.weight", (ne, fe, h)), ("ffn_gate_inp_shexp.weight", (h,)),
                 ("ffn_gate_shexp.weight", (fs, h)), ("ffn_down_shexp.weight", (h, fs)), ("ffn_up_shexp.weight", (fs, h))]
    else:
        raise ValueError(f"no own layout for {arch}")
    return [(f"blk.{i}.{name}", shape) for name, shape in names]


_CHILD = r"""
import ctypes, json, sys, llama_cpp
job = json.load(open(sys.argv[1]))
lines = []

@llama_cpp.llama_log_callback
def _log(level, text, user_data):  # llama.cpp's (and ggml's) log, kept for the load under way
    lines.append(text.decode("utf-8", "replace"))

llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))
llama_cpp.llama_backend_init()

def quantize(src, dst, ftype, entries):
    p = llama_cpp.llama_model_quantize_default_params(); p.ftype = ftype; p.nthread = 2
    keep = []
    if entries:  # llama.h llama_model_imatrix_data: {name, data, size}, ended by a null name; every weight all ones
        arr = (llama_cpp.llama_model_imatrix_data * (len(entries) + 1))()
        for i, (name, size) in enumerate(entries):
            keep.append((ctypes.c_float * size)(*([1.0] * size)))
            arr[i].name, arr[i].size = name.encode(), size
            arr[i].data = ctypes.cast(keep[-1], ctypes.POINTER(ctypes.c_float))
        p.imatrix = ctypes.cast(arr, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    return llama_cpp.llama_model_quantize(src.encode(), dst.encode(), p)

def load(path, n_ctx, n_seq, n_batch, n_ubatch, fa, tk, tv, swa_full, unified):
    mp = llama_cpp.llama_model_default_params(); mp.n_gpu_layers = 0; mp.use_mmap = False
    m = llama_cpp.llama_model_load_from_file(path.encode(), mp)
    if not m:
        return False
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_seq_max, cp.n_batch, cp.n_ubatch = n_ctx, n_seq, n_batch, n_ubatch
    cp.flash_attn_type = 1 if fa else 0
    cp.type_k, cp.type_v, cp.swa_full, cp.kv_unified = tk, tv, swa_full, unified
    ctx = llama_cpp.llama_init_from_model(m, cp)
    ok = bool(ctx)
    if ctx:
        llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(m)
    return ok

out = {"quantized": [], "loads": []}
for src, dst, ftype, entries in job["quantize"]:
    del lines[:]
    out["quantized"].append([quantize(src, dst, ftype, entries), "".join(lines)[-2000:]])
for args in job["loads"]:
    del lines[:]
    ok = load(*args)
    out["loads"].append([ok, "".join(lines)])
json.dump(out, open(sys.argv[2], "w"))
"""


def uniform_imatrix(path: str) -> list[tuple[str, int]]:
    """(name, ne0 · ne2) of every 2-D and 3-D weight: the sizes llama-quant.cpp:1281 expects of an imatrix entry."""
    import gguf

    out = []
    for t in gguf.GGUFReader(path).tensors:
        shape = [int(x) for x in t.shape]  # ne0 first
        if len(shape) >= 2 and t.name.endswith("weight"):
            out.append((t.name, shape[0] * (shape[2] if len(shape) > 2 else 1)))
    return out


def tensors_of(path: str) -> list[dict]:
    """Every tensor of a GGUF file: [name, ggml type name, stored bytes] (shapes follow from the spec)."""
    import gguf

    reader = gguf.GGUFReader(path)
    return [[t.name, t.tensor_type.name, int(t.n_bytes)] for t in reader.tensors]


def load_args(path: str, ctx: tuple) -> list:
    """The child's load arguments for ``path`` at ``ctx`` (cache types as ggml type ids)."""
    n_ctx, n_seq, n_batch, n_ubatch, fa, tk, tv, swa_full, unified = ctx
    return [path, n_ctx, n_seq, n_batch, n_ubatch, fa, GGML_TYPE_IDS[tk], GGML_TYPE_IDS[tv], swa_full, unified]


def run_child(job: dict, tmp: str, env: dict | None = None) -> dict:
    """Quantize and load everything ``job`` lists in one child process (in-process quantizing crashed here)."""
    job_path, out_path = os.path.join(tmp, "job.json"), os.path.join(tmp, "out.json")
    Path(job_path).write_text(json.dumps(job))
    proc = subprocess.run([sys.executable, "-c", _CHILD, job_path, out_path], capture_output=True, text=True,
                          timeout=3600, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"llama.cpp child failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
    return json.loads(Path(out_path).read_text())


def buffers_of(ok: bool, log: str) -> dict:
    """llama.cpp's buffer lines of one load's log (MiB per device and kind) and the context it reports."""
    buffers: dict[str, float] = {}
    n_ctx_seen = None
    for line in log.splitlines():
        m = _LINE.match(line)
        if m:
            key = f"{m.group(3)}:{m.group(2)}"
            buffers[key] = buffers.get(key, 0.0) + float(m.group(4))
        if line.startswith("llama_context: n_ctx ") and n_ctx_seen is None:
            n_ctx_seen = int(line.split("=")[1])
    lines = log.strip().splitlines()
    return {"ok": ok, "n_ctx_logged": n_ctx_seen, "buffers_mib": buffers,
            "error": "" if ok else (lines[-1][:300] if lines else "no log")}


def ggml_commit() -> str:
    """The ggml build commit libggml-base reports (llama-cpp-python builds its vendored llama.cpp)."""
    import ctypes

    import llama_cpp

    lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    lib.ggml_commit.restype = ctypes.c_char_p
    return lib.ggml_commit().decode()


def measure_model(name: str, spec: dict, tmp: str, logs: str | None = None) -> dict:
    """One model's table entry: its file types' tensors and loads and the F16 model at every context."""
    src = os.path.join(tmp, f"{name}-source.gguf")
    write_model(src, spec)
    ftypes = [f for f in FILE_TYPES if f in spec.get("ftypes", DEFAULT_FTYPES)]
    dsts = [os.path.join(tmp, f"{name}-{f}.gguf") for f in ftypes]
    imatrix = uniform_imatrix(src)
    job = {"quantize": [[src, dst, FILE_TYPES[f], imatrix if f in NEEDS_IMATRIX else None]
                        for f, dst in zip(ftypes, dsts)],
           "loads": [load_args(dst, CONTEXTS[0]) for dst in dsts] + [load_args(src, ctx) for ctx in CONTEXTS]}
    env = dict(os.environ, GGML_SCHED_DEBUG="2") if logs else None
    out = run_child(job, tmp, env)
    for f, (rc, log) in zip(ftypes, out["quantized"]):
        if rc != 0:
            raise RuntimeError(f"llama_model_quantize failed for {name} {f}: {log.strip()[-300:]}")
    loads = out["loads"]
    if logs:
        for i, (_, log) in enumerate(loads):
            tag = ftypes[i] if i < len(ftypes) else f"ctx{i - len(ftypes)}"
            Path(logs, f"{name}-{tag}.log").write_text(log)
    entry = {"spec": spec, "files": {}, "contexts": []}
    for f, dst, (ok, log) in zip(ftypes, dsts, loads):
        result = buffers_of(ok, log)
        entry["files"][f] = {"tensors": tensors_of(dst), "load": result, "imatrix": f in NEEDS_IMATRIX}
        print(name, f, result["buffers_mib"], result["error"], flush=True)
    keys = ("n_ctx", "n_seq_max", "n_batch", "n_ubatch", "flash_attn", "type_k", "type_v", "swa_full", "kv_unified")
    for ctx, (ok, log) in zip(CONTEXTS, loads[len(ftypes):]):
        result = buffers_of(ok, log)
        entry["contexts"].append({**dict(zip(keys, ctx)), **result})
        print(name, ctx, result["n_ctx_logged"], result["buffers_mib"], result["error"], flush=True)
    for dst in dsts:
        os.remove(dst)
    return entry


def main() -> int:
    """Write the models, quantize, load and write the table."""
    import llama_cpp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--models", nargs="*", default=list(MODELS), help="only these models")
    parser.add_argument("--logs", help="write each load's llama.cpp log (GGML_SCHED_DEBUG=2) to this folder")
    args = parser.parse_args()
    table = {"llama_cpp_python": llama_cpp.__version__, "ggml_commit": ggml_commit(), "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            table["models"][name] = measure_model(name, MODELS[name], tmp, args.logs)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(table, separators=(",", ":")) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
