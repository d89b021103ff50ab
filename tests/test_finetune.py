"""LoRA/QLoRA/frozen-embedding plans without torch: targets as peft resolves them, state bytes by hand, errors."""

from __future__ import annotations

import json

import pytest
from helpers import run

from symbolic.core.errors import UserError
from symbolic.core.symbols import N
from symbolic.library import lora
from symbolic.networks import shape as planmodel
from symbolic.options.table import PlanOptionError
from symbolic.planning import finetune, regime


@pytest.fixture(scope="module")
def llama() -> planmodel.ModelShape:
    return planmodel.load("llama-3-8b")


@pytest.fixture(scope="module")
def gpt2() -> planmodel.ModelShape:
    return planmodel.load("gpt2")


def _states(shape: planmodel.ModelShape, **options: object) -> dict[str, int]:
    r = regime.resolve(shape, "train", **options)
    terms = finetune.state_terms(shape, r, N)
    return {t.key: int(shape.value(t.expr.xreplace({N: shape.params.expr}))) for t in terms}


def test_default_targets_are_peft_s(llama, gpt2):
    r = regime.resolve(llama, "train", lora_rank=8)
    assert finetune.adapters(llama, r).names() == ("self_attn.q_proj", "self_attn.v_proj")
    r = regime.resolve(gpt2, "train", lora_rank=8)
    assert finetune.adapters(gpt2, r).names() == ("attn.c_attn",)


def test_suffix_matching_as_peft(gpt2):
    # "c_proj" ends both attn.c_proj and mlp.c_proj; "mlp.c_proj" only the second
    assert lora.resolve_targets("gpt2", "gpt2", ["c_proj"])[0] == ("attn.c_proj", "mlp.c_proj")
    assert lora.resolve_targets("gpt2", "gpt2", ["mlp.c_proj"])[0] == ("mlp.c_proj",)
    assert lora.resolve_targets("llama", "llama", ["all-linear"])[0] == tuple(
        n for n, _, _ in lora.LAYER_MODULES["llama"])
    assert lora.resolve_targets("llama", "llama", ["lm_head", "q_proj"])[0] == ("self_attn.q_proj", "lm_head")


def test_adapter_parameters_by_hand(llama, gpt2):
    # Llama-3-8B, r 16 on q (4096 → 4096) and v (4096 → 1024): 32 · 16 · (4096 + 4096 + 4096 + 1024)
    r = regime.resolve(llama, "train", lora_rank=16, lora_targets="q_proj,v_proj")
    assert llama.value(finetune.adapters(llama, r).params()) == 32 * 16 * (4096 + 4096 + 4096 + 1024) == 6_815_744
    # GPT-2, r 8 on c_attn (768 → 2304): 12 · 8 · (768 + 2304) = 294,912 (peft's print_trainable_parameters)
    r = regime.resolve(gpt2, "train", lora_rank=8)
    assert gpt2.value(finetune.adapters(gpt2, r).params()) == 294_912


def test_lora_states_by_hand(llama):
    states = _states(llama, lora_rank=16, lora_targets="q_proj,v_proj")
    n = 8_030_261_248
    t = 6_815_744
    assert states == {"weights": 2 * n, "adapter_weights": 4 * t, "gradients": 4 * t, "optimizer_states": 8 * t}
    states = _states(llama, lora_rank=16, lora_targets="q_proj,v_proj", adapter_dtype="bf16")
    assert states["adapter_weights"] == 2 * t and states["optimizer_states"] == 4 * t


def test_qlora_base_by_hand(llama):
    # per layer: q, o 4096², k, v 4096·1024, gate, up, down 4096·14336; each n/2 + n/64 + 4·n/16384 + 1092
    sizes = [4096 * 4096, 4096 * 1024, 4096 * 1024, 4096 * 4096, 4096 * 14336, 4096 * 14336, 14336 * 4096]
    nf4 = sum(n // 2 + n // 64 + 4 * (n // 16384) + 1092 for n in sizes)
    quantized = sum(sizes) * 32
    expected = 32 * nf4 + 2 * (8_030_261_248 - quantized)
    assert _states(llama, lora_rank=16, qlora=True)["weights"] == expected


def test_frozen_embeddings_states(llama):
    n, e = 8_030_261_248, 128256 * 4096
    states = _states(llama, freeze_embeddings=True, precision="bf16-mixed")
    assert states["weights"] == 2 * n
    assert states["master_weights"] == 4 * (n - e) and states["optimizer_states"] == 8 * (n - e)


def test_adapters_shard_like_weights(llama):
    from symbolic.core.symbols import n_d
    from symbolic.library import parallel as par

    r = regime.resolve(llama, "train", lora_rank=8, zero=3, dp=8)
    terms = finetune.state_terms(llama, r, N)
    sharded = par.shard_terms(terms, 3)
    assert [t.key for t in terms] == ["weights", "adapter_weights", "gradients", "optimizer_states"]
    assert all(s.expr == t.expr / n_d for s, t in zip(sharded, terms))  # ZeRO-3 partitions every state


@pytest.mark.parametrize("options, message", [
    ({"lora_rank": 8, "lora_targets": "c_attn"}, "no module of llama matches LoRA target 'c_attn'"),
    ({"lora_rank": 8, "qlora": True, "precision": "fp32"}, "qlora computes in bf16"),
])
def test_bad_options_are_one_line_errors(llama, options, message):
    with pytest.raises(PlanOptionError, match=message):
        regime.resolve(llama, "train", **options)


def test_parallel_layouts_refused(llama):
    r = regime.resolve(llama, "train", lora_rank=8, tp=2)
    with pytest.raises(UserError, match="tensor or pipeline"):
        finetune.state_terms(llama, r, N)


def test_cli_reports_lora_and_refuses_unknown_targets(capsys):
    argv = ["memory", "llama-3-8b", "--mode", "train", "--lora-rank", "16", "--qlora", "--json"]
    code, out, err = run(capsys, *argv)  # the command line in this process (no interpreter start-up)
    assert code == 0, err
    data = json.loads(out)
    assert data["terms"]["adapter_weights"] == 4 * 6_815_744
    code, _, err = run(capsys, *argv[:-1], "--lora-targets", "c_fc")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
