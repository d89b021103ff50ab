"""The exact FLOP count against PyTorch's own: torch.utils.flop_counter.FlopCounterMode on real
transformers models (tiny configs, eager attention so that Q·Kᵀ and softmax·V are plain matmuls).

FlopCounterMode counts 2 FLOPs per multiply-add of every mm/bmm/addmm, forward and backward, the
convention of the project's count. It does not see transformers 5's fused MoE expert kernels, so
a mixture of experts is counted with its experts run eagerly (``experts_implementation="eager"``).
"""

from __future__ import annotations

import json

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


# --- partly trained steps: peft's LoRA, frozen embeddings (library/flops_trained.py) ------------------------------
LORA_RANK = 4


def _partly_counted(targets: object = None, *, freeze: bool = False, tie: bool = False,
                    checkpoint: bool | dict[str, bool] = False, batch: int = 2, seq: int = 16, layers: int = 2,
                    every: int = 0) -> dict[str, int]:
    """FlopCounterMode over one real step of the tiny Llama (eager attention): peft's LoRA on ``targets`` (None: full
    training), the token embedding frozen (``freeze``), the head tied to it (``tie``), transformers' checkpointing
    (``checkpoint``: True, its default; or the keywords it passes to torch.utils.checkpoint); ``every`` N: instead
    torchtitan's layer-frequency rule, blocks counted from 1 wrapped in torch's checkpoint_wrapper (non-reentrant,
    ``checkpoint`` its keywords) when the count % N == 0."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model
    from torch.utils.flop_counter import FlopCounterMode

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = {**CASES["llama"][2], "tie_word_embeddings": tie, "num_hidden_layers": layers}
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg, attn_implementation="eager"))
    if targets is not None:
        model = get_peft_model(model, LoraConfig(r=LORA_RANK, lora_alpha=LORA_RANK, target_modules=targets))
    if freeze:
        model.get_input_embeddings().weight.requires_grad_(False)
    if every:  # torchtitan's _apply_layer_sac (1f02964 lines 37-40; 9dec370 parallelize_llama.py 279-283)
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        blocks = model.model.layers
        for count, block in enumerate(list(blocks), start=1):
            if count % every == 0:
                blocks[count - 1] = checkpoint_wrapper(block, preserve_rng_state=False, **dict(checkpoint or {}))
    elif checkpoint:  # transformers 5: non-reentrant unless told (modeling_utils.py 3158), enable_input_require_grads
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=None if checkpoint is True else checkpoint)
    model.train()
    ids = torch.randint(0, 100, (batch, seq))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()  # a rerun layer would extend a cache
    counts = {str(op).removeprefix("aten."): n for op, n in counter.get_flop_counts()["Global"].items()}
    return {"total": counter.get_total_flops(), **counts}


def _planned(tie: bool = False, layers: int = 2, **options: object) -> int:
    """The planner's training FLOPs of the same step (batch 2 × seq 16 tokens)."""
    spec = _tiny(tie, layers)
    plan = ptime.train_time(spec, "h100-80gb", mfu=0.4, batch=2, seq=16, **options)
    return int(plan.evaluate("flops_per_token") * 2 * 16)


def _tiny(tie: bool = False, layers: int = 2) -> architectures.ModelSpec:
    """The tiny Llama's ModelSpec (``layers`` decoder layers)."""
    return architectures.spec_from_config({"model_type": "llama", **CASES["llama"][2], "tie_word_embeddings": tie,
                                           "num_hidden_layers": layers},
                                          f"tiny-llama{'-tied' if tie else ''}{'' if layers == 2 else f'-{layers}'}")


H_, D_FF, HEADS, D_HEAD = 64, 176, 4, 16  # CASES["llama"]: hidden, MLP width, heads, head width (64 / 4)
TOKENS, LAYERS, SEQ = 32, 2, 16


@pytest.mark.parametrize("case, targets, freeze, tie, options", [
    ("frozen embedding", None, True, False, {"freeze_embeddings": True}),  # no matmul changes: the head is its own
    ("frozen tied embedding", None, True, True, {"freeze_embeddings": True}),  # the head: no weight gradient
    ("lora q,v eager", ["q_proj", "v_proj"], False, False, {"lora_rank": LORA_RANK, "flash": False}),
    ("lora q,v frozen embedding", ["q_proj", "v_proj"], True, False, {"lora_rank": LORA_RANK, "flash": False}),
    ("lora all-linear", "all-linear", False, False, {"lora_rank": LORA_RANK, "lora_targets": "all-linear"}),
])
def test_partly_trained_flops_equal_pytorchs_count(case, targets, freeze, tie, options) -> None:
    """Every mm and bmm FlopCounterMode sees in a real step (forward, loss, backward) equals the planner's count.

    What neither counts: norms, softmax, rotary, SiLU, the loss, the embedding's backward (no matmul). Full training is
    the control (``test_training_flops_are_three_forwards_as_pytorch_counts``, and 30,769,152 below): a frozen
    untied embedding changes no matmul, a tied one drops the head's weight gradient (2·V·H per token), LoRA drops
    every base weight gradient and layer 0's first input gradients and adds the adapters.
    """
    counted = _partly_counted(targets, freeze=freeze, tie=tie)
    assert counted["total"] == counted["mm"] + counted["bmm"]  # matmuls only: nothing fused the counter misses
    assert _planned(tie, **options) == counted["total"]
    full = _partly_counted(None, tie=tie)["total"]  # the control: full training, tied or not the same matmuls
    assert full == _planned(tie) == 30_769_152
    assert (counted["total"] < full) == (case != "frozen embedding")


def test_lora_with_flash_counts_layer0_key_gradient() -> None:
    """With flash (the default) the planner counts the attention core's three gradients in layer 0 too (the fused
    kernel computes dK whenever dQ is wanted); eager attention skips layer 0's dK when K has no adapter: the stated
    difference is one Q·Kᵀ of layer 0, 2·S·a·d_head per token, exactly."""
    counted = _partly_counted(["q_proj", "v_proj"])["total"]
    assert _planned(lora_rank=LORA_RANK) - counted == 2 * SEQ * HEADS * D_HEAD * TOKENS == 65_536
    assert _planned(lora_rank=LORA_RANK, flash=False) == counted


@pytest.mark.parametrize("targets, last", [(["q_proj", "v_proj"], 2 * H_ * D_FF),  # down_proj's base matmul
                                           ("all-linear", 2 * LORA_RANK * H_)])  # down_proj's lora_B
def test_lora_checkpointed_reruns_all_but_each_layers_last_matmul(targets, last) -> None:
    """recompute full under LoRA (transformers' gradient checkpointing, non-reentrant, enable_input_require_grads:
    layer 0's input needs a gradient) against the real step: torch's non-reentrant checkpoint stops early, before each
    layer's last matmul (its inputs are packed before it runs, and nothing after it is saved), and the planner counts
    so, to the FLOP; the whole rerun (what Megatron's reentrant checkpoint does) is that matmul's forward a layer more."""
    counted = _partly_counted(targets, checkpoint=True)["total"]
    options = {"lora_targets": targets} if targets == "all-linear" else {}
    planned = _planned(lora_rank=LORA_RANK, recompute="full", flash=False, **options)
    assert planned == counted
    spec = architectures.spec_from_config({"model_type": "llama", **CASES["llama"][2]}, "tiny-llama")
    trained = ptime.trained_of(ptime.load_shape(spec), ptime.train_time(
        spec, "h100-80gb", mfu=0.4, batch=2, seq=16, lora_rank=LORA_RANK, recompute="full", flash=False,
        **options).memory.regime)
    whole = ptime.flops(spec, seq=SEQ, recompute="full", trained=trained).exact() * TOKENS
    assert whole - counted == LAYERS * last * TOKENS


@pytest.mark.parametrize("checkpoint, stops_early", [({"use_reentrant": False}, True),
                                                     ({"use_reentrant": False, "early_stop": False}, False),
                                                     ({"use_reentrant": True}, False)])
def test_full_recompute_by_checkpoint(checkpoint, stops_early) -> None:
    """Full training under recompute full, each checkpoint against FlopCounterMode, to the FLOP: torch's non-reentrant
    checkpoint (transformers', torchtune's: early_stop True) does not run each layer's down_proj again, 35,487,744;
    early_stop False (torchtitan's FullAC) and the reentrant one (Megatron's) rerun the whole forward, 36,929,536 =
    Narayanan et al.'s count (forward + backward + the forward less the head), the default plan's."""
    counted = _partly_counted(None, checkpoint=checkpoint)["total"]
    assert counted == (35_487_744 if stops_early else 36_929_536)
    assert 36_929_536 - 35_487_744 == LAYERS * 2 * H_ * D_FF * TOKENS  # down_proj's forward, each layer
    torch_stack = {"layer_impl": "torchtune"}  # torchtune's layer: non-reentrant, early stop
    assert _planned(recompute="full", **(torch_stack if stops_early else {})) == counted
    assert _planned(recompute="full", activations="pytorch", precision="fp32") == 35_487_744  # transformers'


@pytest.mark.parametrize("layers, every", [(3, 2), (4, 2), (4, 3), (5, 2)])
def test_every_nth_layer_recompute_equals_pytorchs_count(layers, every) -> None:
    """recompute full --recompute-every N against FlopCounterMode, to the FLOP: blocks counted from 1 are checkpointed
    when the count % N == 0 (torchtitan's layer-frequency rule), so ⌊L/N⌋ layers run their forward again and the last
    L mod N never (3 layers, N 2: layer 2 only). torchtitan's config passed early_stop=False at 1f02964 (the whole
    forward of those layers again: the default plan's count, and so plan's search's); 9dec370 left torch's default,
    early stop, which skips each checkpointed layer's down_proj (``flops(..., early_stop=True, every=N)``)."""
    whole = _partly_counted(None, layers=layers, every=every, checkpoint={"early_stop": False})["total"]
    none = _planned(layers=layers)
    assert none == _partly_counted(None, layers=layers)["total"]  # the control: no checkpoint
    assert _planned(layers=layers, recompute="full", recompute_every=every) == whole
    full = _planned(layers=layers, recompute="full")  # every layer checkpointed: the L-layer rerun, the head excepted
    assert (whole - none) * layers == (full - none) * (layers // every)
    early = _partly_counted(None, layers=layers, every=every)["total"]
    spec = _tiny(layers=layers)
    assert ptime.flops(spec, seq=SEQ, recompute="full", early_stop=True, every=every).exact() * TOKENS == early
    assert whole - early == (layers // every) * 2 * H_ * D_FF * TOKENS  # each checkpointed layer's down_proj forward


def test_every_nth_layer_plan_search_times_as_time(tmp_path) -> None:
    """plan's search with --recompute full --recompute-every 2 times each layout as ``time`` does (3 layers: ⌊3/2⌋ = 1
    rerun; tp 2 among them, whose recomputed all-reduces are the checkpointed layers' only), and below recompute full
    of every layer."""
    from symbolic.planning import search
    from tests.helpers import layout_flags

    config = tmp_path / "config.json"  # the search loads a model by name or file
    config.write_text(json.dumps({"model_type": "llama", **CASES["llama"][2], "num_hidden_layers": 3}))
    spec = str(config)
    every = {"recompute": "full", "recompute_every": 2}
    found = search.search(spec, "h100-80gb", seq=SEQ, gpus=2, global_batch=4, mfu=0.4, top=None, **every)
    assert {lay["tp"] for lay in found.layouts} == {1, 2}
    for lay in found.layouts:
        timed = ptime.train_time(spec, "h100-80gb", mfu=0.4, **{**layout_flags(lay, SEQ), **every})
        assert lay["step_seconds"] == pytest.approx(timed.figures["step_seconds"], rel=1e-12)
        whole = ptime.train_time(spec, "h100-80gb", mfu=0.4, **layout_flags(lay, SEQ))
        assert timed.figures["step_seconds"] < whole.figures["step_seconds"]


# --- every N-th layer checkpointed, layers of different kinds (library/flops.py KINDS_NOTE) -------------------------
# A tiny Qwen3-MoE, decoder_sparse_step 2: layers 0 and 2 dense (d_ff 176), 1 and 3 mixtures of 4 experts (top 2, width
# 48). Its experts run eagerly (transformers 5's experts_implementation "eager": one F.linear per expert hit, which
# FlopCounterMode sees; the fused kernels it does not).
MOE = {"hidden_size": 64, "intermediate_size": 176, "moe_intermediate_size": 48, "num_hidden_layers": 4,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000, "num_experts": 4,
       "num_experts_per_tok": 2, "decoder_sparse_step": 2, "max_position_embeddings": 256, "tie_word_embeddings": False}


def _moe_counted(every: int = 0, checkpoint: dict[str, bool] | None = None) -> int:
    """FlopCounterMode over one real training step of the tiny Qwen3-MoE; ``every`` N: blocks counted from 1 wrapped in
    torch's checkpoint_wrapper (non-reentrant, ``checkpoint`` its keywords) when the count % N == 0, as
    ``_partly_counted`` wraps the Llama's."""
    import torch
    import transformers
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.flop_counter import FlopCounterMode

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**MOE, attn_implementation="eager",
                                                                         experts_implementation="eager"))
    blocks = model.model.layers
    for count, block in enumerate(list(blocks), start=1):
        if every and count % every == 0:
            blocks[count - 1] = checkpoint_wrapper(block, preserve_rng_state=False, **(checkpoint or {}))
    model.train()
    ids = torch.randint(0, 100, (2, SEQ))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("every, early_stop", [(2, False), (3, False), (2, True), (3, True)])
def test_every_nth_layer_recompute_of_mixed_layer_kinds(every, early_stop) -> None:
    """recompute full --recompute-every N on a model whose layers differ: the recompute is the forward of exactly the
    checkpointed layers (N 2: layers 1 and 3, both MoE; N 3: layer 2, dense), to the FLOP against FlopCounterMode, with
    early stop (a dense layer's down_proj not run again; a MoE layer's weighted sum saves its experts' outputs) and
    without (torchtitan's early_stop=False). The average layer's ⌊L/N⌋/L of the whole rerun is not this count."""
    spec = architectures.spec_from_config({"model_type": "qwen3_moe", **MOE}, "tiny-qwen3-moe")
    assert spec.dense_at == (0, 2) and spec.moe_layers == 2
    none = ptime.flops(spec, seq=SEQ).exact() * TOKENS
    assert none == _moe_counted()  # the control: the forward and backward of both kinds, eager experts
    counted = _moe_counted(every, {} if early_stop else {"early_stop": False})
    assert ptime.flops(spec, seq=SEQ, recompute="full", early_stop=early_stop, every=every).exact() * TOKENS == counted
    full = ptime.flops(spec, seq=SEQ, recompute="full").exact() * TOKENS  # every layer again
    layers = MOE["num_hidden_layers"]
    assert none + (full - none) * (layers // every) / layers != counted  # the average layer's share
    if not early_stop:  # the default stack's count (torchtitan's layer-frequency rule, early_stop=False)
        plan = ptime.train_time(spec, "h100-80gb", mfu=0.4, batch=2, seq=SEQ, recompute="full", recompute_every=every)
        assert plan.evaluate("flops_per_token") * TOKENS == counted
