"""QLoRA of torch modules: bitsandbytes' NF4 Linear4bit on the meta device, beside real bitsandbytes steps (issue 29).

torch runs in ``module_qlora_child.py`` (the test process never imports it). Every expected number there comes
from a real CPU training step of the module quantized by bitsandbytes itself (a module of one's own: its
nn.Linear swapped for Linear4bit and moved to the CPU; a transformers ViT: reloaded by transformers with
BitsAndBytesConfig nf4, double quantization, bf16 compute) with peft's adapters: the parameters and the storage
of weights and quantization states, the bytes saved for backward (``measure.saved_tensors``) and the step's
tensor peak with AdamW over the adapters (``measure.step_peak``'s profiler method, which sees the weight
bitsandbytes dequantizes inside its matmul), at sizes and batches the fit did not use. Also AdamW's step
counters against a real CPU step's optimizer state.
"""

from __future__ import annotations

import json

import pytest
from helpers import torch_child

from symbolic.library import lora as terms
from symbolic.networks.module import lora

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("module_qlora_child.py")


@pytest.mark.parametrize("name", ["mlp", "vit", "hf_vit", "mlp_mixed", "vit_mixed"])
def test_qlora_step_against_a_real_bitsandbytes_step(child: dict, name: str) -> None:
    """Parameters, storage and saved bytes exact; the step's peak within 1 %.

    mlp: article A's network at d_in 256, d_h 512, adapters on up; vit: a ViT of one's own, adapters on qkv and
    proj; hf_vit: transformers' ViTForImageClassification, q_proj, v_proj (transformers picks the linears it quantizes);
    mlp_mixed, vit_mixed: ``--precision bf16-mixed`` against peft's prepare_model_for_kbit_training under autocast
    (fp32 non-quantized parameters, the NF4 linears' biases bf16 as their forward leaves them).
    """
    plan, measured = child["steps"][name]["plan"], child["steps"][name]["measured"]
    assert plan["params"] == measured["params"] and plan["trainable"] == measured["trainable"]
    assert plan["nf4_layers"] == measured["nf4_layers"]
    # the frozen NF4 base (codes, absmax, nested statistics, bf16 rest) and the fp32 adapters: every stored byte
    assert plan["frozen_bytes"] + plan["adapter_bytes"] == measured["storage"]
    assert plan["saved"] == measured["saved"]
    assert abs(plan["peak"] - measured["peak"]) <= 0.01 * measured["peak"]


def test_the_dequantized_weight_is_part_of_the_peak(child: dict) -> None:
    """Article A's wide network at batch 7: bitsandbytes' bf16 copy of up's weight (512 x 512) sets the peak.

    The dispatch method sees operator outputs only, not what gemm_4bit allocates inside: its peak is another
    moment's, more than the tolerance below (as the probe's would be without ``qlora.expanding``); the plan counts
    the copy (the probe runs gemm_4bit as its CPU kernel does).
    """
    plan, measured = child["steps"]["mlp"]["plan"], child["steps"]["mlp"]["measured"]
    assert measured["peak"] - measured["dispatch"] > 0.01 * measured["peak"]
    assert abs(plan["peak"] - measured["peak"]) <= 0.01 * measured["peak"]


def test_adamw_step_counters_are_counted_on_the_cpu(child: dict) -> None:
    """AdamW keeps a 0-dim float32 ``step`` per parameter: the plan's state equals a real step's, byte for byte."""
    counters = child["counters"]
    assert counters["allocated"] == [4]  # the allocator's record of one torch.tensor(0.0)
    assert counters["plan"]["steps"] == counters["tensors"] * counters["allocated"][0]
    assert counters["plan"]["moments"] + counters["plan"]["steps"] == counters["measured"]


def test_cli_plans_qlora_with_its_nf4_base(child: dict) -> None:
    done = child["cli"]["memory"]
    data = json.loads(done["out"])
    assert done["code"] == 0 and "frozen_weights" in data["resident_terms"]
    # MLP(d_in=64, d_h=32): gat 64x32, up 32x32, down 32x64, out 64x10 in NF4, its 138 biases bf16
    nf4 = terms.nf4_base_bytes([(1, 64 * 32), (1, 32 * 32), (1, 32 * 64), (1, 64 * 10)], 5898)
    assert data["terms"]["frozen_weights"] == nf4
    assert any("linears of them in NF4" in n for n in data["notes"])


def test_params_says_trainable_frozen_and_nf4_bytes(child: dict) -> None:
    data = json.loads(child["cli"]["params"]["out"])
    nf4 = int(terms.nf4_base_bytes([(1, 64 * 32), (1, 32 * 32), (1, 32 * 64), (1, 64 * 10)], data["total"]))
    assert data["lora"]["trainable"] == 4 * ((64 + 32) + (32 + 32)) and data["lora"]["frozen"] == data["total"]
    assert data["lora"]["qlora"] == {"linears": 4, "quantized": 64 * 32 + 32 * 32 + 32 * 64 + 64 * 10,
                                     "frozen_bytes": nf4}
    assert f"holds {nf4:,} bytes" in child["cli"]["params_text"]["out"]


def test_qlora_takes_bf16_or_bf16_mixed(child: dict) -> None:
    """bf16-mixed is peft's prepare_model_for_kbit_training (the rest fp32, the NF4 linears' biases bf16); fp16-mixed
    is not modelled (bitsandbytes' compute dtype bf16 under fp16 autocast): one line."""
    done = child["cli"]["mixed"]
    assert done["code"] == 0, done["err"]
    # MLP(d_in=64, d_h=32): every parameter outside the NF4 weights is one of their 138 biases, bf16
    nf4 = terms.nf4_base_bytes([(1, 64 * 32), (1, 32 * 32), (1, 32 * 64), (1, 64 * 10)], 5898)
    assert json.loads(done["out"])["terms"]["frozen_weights"] == nf4
    done = child["cli"]["fp16_mixed"]
    assert done["code"] == 2 and len(done["err"].strip().splitlines()) == 1
    assert "bf16-mixed" in done["err"] and "fp16-mixed" in done["err"] and "Traceback" not in done["err"]


def test_qlora_keys_its_own_cache_and_keeps_lora_keys() -> None:
    """QLoRA is another cached probe; a LoRA step's key is the one of before (its cached probes stay valid)."""
    assert lora.Spec(8, ("q",), qlora=True).key() != lora.Spec(8, ("q",)).key()
    assert lora.Spec(8, ("q",)).key() == ["lora", 8, ["q"], 0.0, "fp32"]


def test_a_module_without_linears_is_one_line(child: dict) -> None:
    done = child["cli"]["no_linear"]
    assert done["code"] == 2 and len(done["err"].strip().splitlines()) == 1
    assert "no nn.Linear" in done["err"] and "Depthwise" in done["err"] and "Traceback" not in done["err"]


def test_a_report_takes_qlora_beside_its_lora_keys(child: dict) -> None:
    """``qlora = true`` in a module report's [regime]: the planner's total and frozen NF4 base, to the byte."""
    done, memory = child["report"], json.loads(child["report"]["memory"]["out"])
    assert done["code"] == 0, done["err"]
    assert f"{memory['terms']['frozen_weights']:,}" in done["tex"] and f"{memory['total_bytes']:,}" in done["tex"]
    assert "linears of them in NF4" in done["tex"]
