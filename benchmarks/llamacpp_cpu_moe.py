r"""llama.cpp's --n-cpu-moe overrides on the CPU build: where the overridden expert tensors land (CPU_REPACK / CPU).

Run with the environment of ``llamacpp_buffers.py``::

    /work/llvenv/bin/python benchmarks/llamacpp_cpu_moe.py

It writes the llama-moe model of ``llamacpp_buffers.py`` in F16, Q4_0 and Q4_K_M and loads each on the CPU with
the overrides ``--n-cpu-moe 2`` makes (``common/common.h`` ``llm_add_n_cpu_ffn_overrides``: ``blk\.i\.ffn_(up|down|
gate|gate_up)_(ch|)exps`` to the CPU buffer type for i < 2), printing the "buffer type overridden to" lines and the
model buffers. At llama.cpp 0c1e570 the F16 experts go to CPU, the Q4_0 and Q4_K ones to CPU_REPACK; the CPU's
model buffer totals do not change (``symbolic.engines.llamacpp._cpu_moe_notes``).
"""

import ctypes
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_cpp  # noqa: E402
import llamacpp_buffers as B  # noqa: E402

lines = []


@llama_cpp.llama_log_callback
def _log(level, text, user_data):
    lines.append(text.decode("utf-8", "replace"))


llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))
llama_cpp.llama_backend_init()


class Override(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


cpu = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-cpu.so"))
cpu.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p
buft = cpu.ggml_backend_cpu_buffer_type()
tmp = tempfile.mkdtemp()
spec = B.MODELS["llama-moe"]
src = f"{tmp}/moe-F16.gguf"
B.write_model(src, spec)
for ftype in ("F16", "Q4_0", "Q4_K_M"):
    path = src if ftype == "F16" else f"{tmp}/moe-{ftype}.gguf"
    if ftype != "F16":
        p = llama_cpp.llama_model_quantize_default_params()
        p.ftype, p.nthread = B.FILE_TYPES[ftype], 2
        assert llama_cpp.llama_model_quantize(src.encode(), path.encode(), p) == 0
    for n in (0, 2):
        # common.h llm_add_n_cpu_ffn_overrides: one pattern per layer i < N, LLM_FFN_EXPS_REGEX, the CPU buffer type
        pats = [f"blk\\.{i}\\.ffn_(up|down|gate|gate_up)_(ch|)exps".encode() for i in range(n)]
        arr = (Override * (len(pats) + 1))()
        for i, pat in enumerate(pats):
            arr[i].pattern, arr[i].buft = pat, buft
        mp = llama_cpp.llama_model_default_params()
        mp.n_gpu_layers = 0
        if n:
            mp.tensor_buft_overrides = ctypes.cast(arr, ctypes.c_void_p)
        del lines[:]
        m = llama_cpp.llama_model_load_from_file(path.encode(), mp)
        llama_cpp.llama_model_free(m)
        log = "".join(lines)
        keep = [x for x in log.splitlines() if "model buffer size" in x or "overridden" in x]
        print(ftype, n, *keep, sep="\n  ")
