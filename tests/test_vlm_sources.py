"""Vision-language models as module sources: the meta-device inputs are the real model's inputs.

Small configs with the real structure of each model. On the meta device the forward gives a scalar
loss; on the CPU the same inputs (real values) run a real forward and backward, where transformers'
own checks (placeholder tokens against image features, M-RoPE groups) run. The expected image-token
counts come from ``symbolic.library.vision``, itself checked against each processor in
``tests/test_vision_tokens.py``.
"""

from __future__ import annotations

import pytest

from symbolic.library import vision
from symbolic.networks.module.source import ModuleError, loss_of, make_inputs
from symbolic.networks.module.transformers_task import transformers_source

pytestmark = [pytest.mark.torch, pytest.mark.imports_torch]  # its fixture imports torch in the test process

TEXT = {"vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 512}
MROPE = {"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0}  # sums to head_dim / 2
QWEN_TOKENS = {"image_token_id": 290, "video_token_id": 291, "vision_start_token_id": 292, "vision_end_token_id": 293}
CLIP = {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "image_size": 28, "patch_size": 14, "projection_dim": 32}
PINPOINTS = [[28, 56], [56, 28], [56, 56]]
CONFIGS = {
    "qwen2_vl": {"model_type": "qwen2_vl", "text_config": {**TEXT, "rope_parameters": MROPE},
                 "vision_config": {"depth": 2, "embed_dim": 32, "hidden_size": 32, "num_heads": 4, "mlp_ratio": 2},
                 **QWEN_TOKENS},
    "qwen2_5_vl": {"model_type": "qwen2_5_vl", "text_config": {**TEXT, "rope_parameters": MROPE},
                   "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 4,
                                     "out_hidden_size": 32, "fullatt_block_indexes": [1]}, **QWEN_TOKENS},
    "llava": {"model_type": "llava", "text_config": {"model_type": "llama", **TEXT}, "vision_config": CLIP,
              "image_token_index": 290, "vision_feature_layer": -1},
    "llava_next": {"model_type": "llava_next", "text_config": {"model_type": "llama", **TEXT}, "vision_config": CLIP,
                   "image_token_index": 290, "vision_feature_layer": -1, "image_grid_pinpoints": PINPOINTS},
    "gemma3": {"model_type": "gemma3", "text_config": {**TEXT, "head_dim": 8, "sliding_window": 16},
               "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                 "num_attention_heads": 4, "image_size": 32, "patch_size": 8},
               "mm_tokens_per_image": 4, "image_token_index": 290, "boi_token_index": 291, "eoi_token_index": 292},
    "mllama": {"model_type": "mllama", "text_config": {**TEXT, "cross_attention_layers": [1], "pad_token_id": 299},
               "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                 "num_global_layers": 1, "attention_heads": 4, "image_size": 28, "patch_size": 14,
                                 "max_num_tiles": 4, "vision_output_dim": 64, "intermediate_layers_indices": [0]},
               "image_token_index": 290},
}
# sizes other than the defaults: two images per sequence, a non-square image where the model takes any size
SIZES = {"S": 6, "n_img": 2}
IMAGE = {"H_img": 56, "W_img": 84}
BATCH = 2


def _sizes(key: str) -> dict[str, int]:
    return {**SIZES, **(IMAGE if key not in ("llava", "gemma3") else {})}


def _expected_tokens(key: str, sizes: dict[str, int]) -> int:
    """Image tokens per image from library/vision.py's rules at the test config's tower."""
    h, w = sizes.get("H_img"), sizes.get("W_img")
    if key.startswith("qwen"):
        return vision.qwen2_vl_tokens(h, w)[0]
    if key == "llava":
        return int(vision.llava_term(CLIP["image_size"], CLIP["patch_size"]).expr)
    if key == "llava_next":
        pinpoints = tuple(tuple(p) for p in PINPOINTS)
        return vision.llava_next_tokens(h, w, tile=CLIP["image_size"], patch_size=CLIP["patch_size"], pinpoints=pinpoints)
    if key == "gemma3":
        return int(vision.gemma3_term(CONFIGS["gemma3"]["mm_tokens_per_image"]).expr)
    return 1  # mllama: one <|image|> token, the image read by cross-attention


@pytest.fixture(scope="module")
def runs():
    """Per model: its source, the meta-device inputs and loss, and the CPU inputs after a real step."""
    import torch

    from symbolic.networks import torch_env

    torch_env.ready()
    out = {}
    for key, config in CONFIGS.items():
        source = transformers_source(key, config, sizes=_sizes(key))
        with torch.device("meta"):
            model = source.build(source.arguments)
        meta = make_inputs(source, BATCH)
        meta_loss = loss_of(model(**meta), source.loss)
        torch.manual_seed(0)
        model = source.build(source.arguments)
        cpu = make_inputs(source, BATCH, device="cpu")
        cpu_loss = loss_of(model(**cpu), source.loss)
        cpu_loss.backward()
        grads = sum(p.grad is not None for p in model.parameters())
        out[key] = (source, meta, meta_loss, cpu, cpu_loss, grads)
    return out


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_vlm_gives_a_scalar_loss_on_meta_and_a_real_step_on_the_cpu(runs, key) -> None:
    source, _, meta_loss, _, cpu_loss, grads = runs[key]
    assert source.task in source.notes[0] and "image-text-to-text" in source.notes[0]
    assert meta_loss.dim() == 0 and meta_loss.device.type == "meta"
    assert cpu_loss.dim() == 0 and bool(cpu_loss.isfinite()) and grads > 0


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_meta_inputs_are_the_cpu_inputs(runs, key) -> None:
    _, meta, _, cpu, _, _ = runs[key]
    # Qwen's M-RoPE positions: given empty on the meta device only (get_rope_index reads the ids)
    shown = {n: tuple(t.shape) for n, t in meta.items() if n != "position_ids"}
    assert shown == {n: tuple(t.shape) for n, t in cpu.items()}
    assert {n: t.dtype for n, t in meta.items() if n in cpu} == {n: t.dtype for n, t in cpu.items()}


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_image_tokens_in_the_ids_are_the_library_count(runs, key) -> None:
    source, _, _, cpu, _, _ = runs[key]
    image_token = CONFIGS[key].get("image_token_id", CONFIGS[key].get("image_token_index"))
    per_sequence = (cpu["input_ids"] == image_token).sum(dim=1)  # counted in the ids the real step ran on
    expected = source.sizes["n_img"] * _expected_tokens(key, source.sizes)
    assert per_sequence.tolist() == [expected] * BATCH
    assert source.size_names == tuple(source.sizes)


def test_qwen_patches_and_grid_follow_the_image_size(runs) -> None:
    source, _, _, cpu, _, _ = runs["qwen2_5_vl"]
    _, patches = vision.qwen2_vl_tokens(IMAGE["H_img"], IMAGE["W_img"])
    assert cpu["pixel_values"].shape[0] == BATCH * SIZES["n_img"] * patches
    assert cpu["image_grid_thw"].device.type == "cpu" and cpu["image_grid_thw"].prod(-1).tolist() == \
        [patches] * (BATCH * SIZES["n_img"])


def test_mllama_canvas_is_the_library_tiles(runs) -> None:
    _, _, _, cpu, _, _ = runs["mllama"]
    tile = CONFIGS["mllama"]["vision_config"]["image_size"]
    tiles = vision.mllama_tiles(IMAGE["H_img"], IMAGE["W_img"], tile=tile, max_tiles=4)
    assert cpu["aspect_ratio_mask"].sum(-1).tolist() == [[tiles] * SIZES["n_img"]] * BATCH


def test_default_sizes_come_from_the_vision_config() -> None:
    gemma = transformers_source("gemma3", CONFIGS["gemma3"])
    assert gemma.sizes == {"S": TEXT["max_position_embeddings"], "n_img": 1}
    mllama = transformers_source("mllama", CONFIGS["mllama"])
    tile = CONFIGS["mllama"]["vision_config"]["image_size"]
    assert (mllama.sizes["H_img"], mllama.sizes["W_img"]) == (tile, tile)
    assert f"{CONFIGS['gemma3']['mm_tokens_per_image']} image tokens each" in gemma.notes[1]


def test_qwen_image_not_a_multiple_of_28_is_one_line() -> None:
    import torch

    source = transformers_source("qwen2_vl", CONFIGS["qwen2_vl"], sizes={"H_img": 50})
    with pytest.raises(ModuleError, match="multiples of 28") as err, torch.device("meta"):
        make_inputs(source, 1)
    assert "\n" not in str(err.value)


def test_unbuilt_vlm_is_one_line() -> None:
    config = {"model_type": "paligemma", "text_config": {"model_type": "gemma", **TEXT}}
    with pytest.raises(ModuleError, match="not built: known are") as err:
        transformers_source("paligemma", config)
    assert "\n" not in str(err.value)
