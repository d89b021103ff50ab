"""The GPU's fused attention on the meta device (networks/module/cuda_attention.py, issue 29).

No GPU here: every expected number is the formula of what the chosen kernel's autograd saves, written
out by hand from PyTorch's source (pytorch/pytorch@001f694): aten/src/ATen/native/transformers/cuda/
sdp_utils.cpp (which backend), attention.cpp (what reaches the kernel) and torch/_meta_registrations.py
(what it returns: ``meta__scaled_dot_product_flash_attention``, ``..._efficient_attention``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from symbolic.networks.module import files, probe
from symbolic.networks.module.cuda_attention import choose

pytestmark = [pytest.mark.torch, pytest.mark.imports_torch]  # torch runs in the test process (meta tensors)

VIT = str(Path(__file__).parent / "data" / "modules" / "nets.py") + ":TinyViT"
SIZES = {"H": 8, "W": 12}  # 4 × 4 patches: L = 2 · 3 = 6 tokens
BATCH, DIM, HEADS = 2, 32, 2  # TinyViT's defaults: head dim 16
TOKENS = (SIZES["H"] // 4) * (SIZES["W"] // 4)
BYTES = {"bfloat16": 2, "float32": 4}


def _attn_saved(dtype: str, **arguments: object) -> int:
    """Bytes the tiny ViT's attention module saves in one step under the "cuda" kernels."""
    source = files.file_source(VIT, arguments, files.parse_inputs(["x=B,3,H,W"]), "cross-entropy", SIZES)
    return probe.trace(source, BATCH, SIZES, dtype, kernels="cuda").saved["attn"]


def _qkv_and_output(dtype: str) -> int:
    """q, k, v (views of the qkv projection's B·L·3E output, one storage) and the B·heads·L·D output."""
    return BATCH * TOKENS * 3 * DIM * BYTES[dtype] + BATCH * TOKENS * DIM * BYTES[dtype]


def _flash(dtype: str) -> int:
    """Flash: logsumexp B·heads·L fp32; philox seed (2,) uint64 and offset () uint64 (its meta function)."""
    return _qkv_and_output(dtype) + BATCH * HEADS * TOKENS * 4 + 2 * 8 + 8


def _efficient(dtype: str, mask: bool = False) -> int:
    """Efficient: logsumexp B·heads·L fp32, seed and offset () int64 (its meta function); the mask expanded to
    B·heads·L·S (attention.cpp preprocess_mask). Both without the kernel's paddings to 32 rows and 16 columns
    (cuda_attention.py: the step's bytes must stay a polynomial in the input sizes)."""
    masked = BATCH * HEADS * TOKENS * TOKENS * BYTES[dtype] if mask else 0
    return _qkv_and_output(dtype) + BATCH * HEADS * TOKENS * 4 + 8 + 8 + masked


def test_bf16_runs_flash_attention() -> None:
    """sdp_utils.cpp: flash first (no mask, head dim 16 ≤ 256, bf16 on sm80+)."""
    assert _attn_saved("bfloat16") == _flash("bfloat16")


def test_fp32_falls_back_to_efficient_attention() -> None:
    """check_dtypes_flash_attention: fp16/bf16 only; efficient takes fp32 on sm80+ (head dim 16 a multiple of 4)."""
    assert _attn_saved("float32") == _efficient("float32")


def test_a_float_mask_in_bf16_falls_back_to_efficient_with_its_expanded_mask() -> None:
    """check_for_attn_mask: flash takes no mask; efficient keeps the mask preprocess_mask expands."""
    assert _attn_saved("bfloat16", masked=True) == _efficient("bfloat16", mask=True)


def test_dropout_keeps_flash_attention_on_the_gpu() -> None:
    """CUDA's flash kernel takes dropout (no check_for_dropout in can_use_flash_attention, unlike the CPU's)."""
    assert _attn_saved("bfloat16", p=0.1) == _flash("bfloat16")


def _args(dtype: str, d: int = 16, heads: tuple[int, int] = (2, 2), lengths: tuple[int, int] = (6, 6),
          **extra: object) -> dict:
    """SDPA's arguments as ``kernels.sdpa_arguments`` gives them: q (B, heads, L, d), k and v (B, heads_kv, S, d)."""
    import torch

    q = torch.empty(2, heads[0], lengths[0], d, dtype=getattr(torch, dtype), device="meta", requires_grad=True)
    k = torch.empty(2, heads[1], lengths[1], d, dtype=getattr(torch, dtype), device="meta", requires_grad=True)
    return {"query": q, "key": k, "value": k.detach().clone().requires_grad_(), "attn_mask": None,
            "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False, **extra}


@pytest.mark.parametrize(("arguments", "arch", "backend", "rule"), [
    ({"dtype": "float32", "d": 6}, (9, 0), "math", "minimum_gemm_alignment: fp32 rows a multiple of 4"),
    ({"dtype": "bfloat16", "d": 264}, (9, 0), "efficient", "check_head_dim_size_flash: head dim ≤ 256"),
    ({"dtype": "bfloat16", "d": 200}, (8, 6), "efficient", "sm86-89: no flash backward for head dim in (192, 224]"),
    ({"dtype": "bfloat16", "d": 200}, (8, 0), "flash", "that rule is for sm86-89 and sm120-121 only"),
    ({"dtype": "bfloat16"}, (7, 5), "math", "flash needs sm80; efficient takes bf16 on sm80+ only"),
    ({"dtype": "float16"}, (7, 5), "efficient", "efficient takes fp16 below sm80"),
    ({"dtype": "bfloat16", "lengths": (6, 8), "is_causal": True}, (9, 0), "efficient",
     "check_flash_causal_non_square_seqlens"),
    ({"dtype": "bfloat16", "heads": (4, 2), "enable_gqa": True}, (9, 0), "flash",
     "check_grouped_query_attention: flash takes fewer kv heads under enable_gqa"),
    ({"dtype": "bfloat16", "heads": (4, 2)}, (9, 0), "math", "different heads without enable_gqa"),
])
def test_backend_choice_follows_sdp_utils(arguments: dict, arch: tuple[int, int], backend: str, rule: str) -> None:
    assert choose(_args(**arguments), arch) == backend, rule


def test_a_misaligned_storage_offset_rules_out_efficient_attention() -> None:
    """check_data_ptr_alignment_mem_efficient (sm80+): storage offset a multiple of the gemm alignment (fp32: 4)."""
    import torch

    a = _args("float32")
    rows = torch.empty(2 * 2 * 6 * 16 + 2, device="meta")
    a["query"] = rows[2:].view(2, 2, 6, 16)
    assert choose(a, (9, 0)) == "math"
    a["query"] = rows[:-2].view(2, 2, 6, 16)
    assert choose(a, (9, 0)) == "efficient"


def test_the_planner_follows_the_gpu_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module plan without --device plans CUDA's kernels (Setup.device "cuda"); --device cpu the CPU's."""
    from symbolic import planning
    from symbolic.networks.module import resolve

    monkeypatch.setenv("SYMBOLIC_CACHE", str(tmp_path))
    source = files.file_source(VIT, {}, files.parse_inputs(["x=B,3,H,W"]), "cross-entropy", SIZES)
    net = resolve.module_network(source)
    default = planning.plan(net, "train", batch=BATCH, precision="fp32").activation_bytes
    cpu = planning.plan(net, "train", batch=BATCH, precision="fp32", device="cpu").activation_bytes
    cuda = sum(probe.trace(source, BATCH, SIZES, "float32", kernels="cuda").saved.values())
    assert default == cuda != cpu


def test_a_planned_gpu_sets_the_arch_of_the_attention_kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Head dim 200 in bf16 with gradients: flash on sm90 (h100-80gb, and without --gpu); memory-efficient on sm89
    (rtx-4090: check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120 refuses flash for 192 < d ≤ 224)."""
    from symbolic import planning
    from symbolic.networks.module import resolve
    from symbolic.planning.time import train_time

    monkeypatch.setenv("SYMBOLIC_CACHE", str(tmp_path))  # one cache for both GPUs: the key must tell them apart
    dim = 200  # one head of 200, a multiple of 8 (no flash padding, efficient's bf16 alignment on sm80+)
    source = files.file_source(VIT, {"dim": dim, "heads": 1}, files.parse_inputs(["x=B,3,H,W"]), "cross-entropy",
                               SIZES)
    net = resolve.module_network(source)

    def attn(gpu: str | None) -> tuple[int, list[str]]:
        plan = planning.plan(net, "train", gpu, batch=BATCH, precision="bf16")
        return plan.saved.as_dict(plan.values)["terms"]["attn"], plan.notes

    # by hand (see _flash and _efficient): qkv's B·L·3d storage, the B·L·d output, B·1·L fp32 logsumexp, seeds
    common = BATCH * TOKENS * 3 * dim * 2 + BATCH * TOKENS * dim * 2 + BATCH * TOKENS * 4
    (h100, h100_notes), (rtx, rtx_notes), (plain, _) = attn("h100-80gb"), attn("rtx-4090"), attn(None)
    assert h100 == plain == common + 2 * 8 + 8  # flash: philox seed (2,) and offset (), uint64
    assert rtx == common + 8 + 8  # efficient: seed and offset (), int64
    assert any("attention as on sm89" in n and "--gpu" in n for n in rtx_notes)
    assert not any("attention as on sm" in n for n in h100_notes)
    timed = train_time(net, "rtx-4090", mfu=0.4, batch=BATCH, precision="bf16").memory  # `time`, `plan`
    assert timed.saved.as_dict(timed.values)["terms"]["attn"] == rtx
