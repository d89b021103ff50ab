"""The exact FLOP count against PyTorch's own: torch.utils.flop_counter.FlopCounterMode on real
transformers models (tiny configs, eager attention so that Q·Kᵀ and softmax·V are plain matmuls).

FlopCounterMode counts 2 FLOPs per multiply-add of every mm/bmm/addmm, forward and backward, the
convention of the project's count. It does not see transformers 5's fused MoE expert kernels, so
mixture-of-experts models are checked by the parameter-based tests instead.
"""

from __future__ import annotations

import pytest

from symbolic.networks import transformer as architectures
from symbolic.planning import time as ptime

pytestmark = pytest.mark.torch

CASES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"hidden_size": 64, "intermediate_size": 176,
                                                   "num_hidden_layers": 2, "num_attention_heads": 4,
                                                   "num_key_value_heads": 2, "vocab_size": 1000,
                                                   "max_position_embeddings": 256, "tie_word_embeddings": False}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                                                  "num_attention_heads": 4, "num_key_value_heads": 2,
                                                  "vocab_size": 500, "max_position_embeddings": 256}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 500,
                                               "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0}),
}


def _counted(model_type: str, batch: int, seq: int, train: bool) -> int:
    import torch
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    config_cls, model_cls, cfg = CASES[model_type]
    torch.set_num_threads(1)  # tiny models: more threads only spin (CPU time) on a shared machine
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**cfg, attn_implementation="eager"))
    ids = torch.randint(0, 100, (batch, seq))
    with FlopCounterMode(display=False) as counter:
        if train:
            model(ids, labels=ids).loss.backward()
        else:
            model(ids)
    return counter.get_total_flops()


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_forward_flops_equal_pytorchs_count(model_type) -> None:
    spec = architectures.spec_from_config({"model_type": model_type, **CASES[model_type][2]}, f"tiny-{model_type}")
    fl = ptime.flops(spec, seq=16)
    assert fl.per_token(train=False) * 2 * 16 == _counted(model_type, 2, 16, train=False)


def test_training_flops_are_three_forwards_as_pytorch_counts() -> None:
    spec = architectures.spec_from_config({"model_type": "llama", **CASES["llama"][2]}, "tiny-llama")
    fl = ptime.flops(spec, seq=16)
    assert fl.per_token() * 2 * 16 == _counted("llama", 2, 16, train=True)
