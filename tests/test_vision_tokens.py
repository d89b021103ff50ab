"""Image tokens of vision-language models (library/vision.py) against transformers' own image processors.

Every expected number is measured here: the processor (built from its class with default
arguments, never from the hub) runs on a random uint8 image and its output is counted.
"""

from __future__ import annotations

import numpy as np
import pytest

from symbolic.core.symbols import n_img
from symbolic.library import vision

pytestmark = [pytest.mark.torch, pytest.mark.imports_torch]  # its fixture imports torch in the test process

SIZES = [(480, 640), (100, 3000), (30, 40), (1500, 2000), (70, 42), (336, 1200), (1000, 300)]


@pytest.fixture(scope="module")
def transformers():
    from symbolic.networks import torch_env

    torch_env.ready()
    import transformers

    return transformers


def _image(height: int, width: int) -> np.ndarray:
    return np.random.default_rng(height * 7919 + width).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize(("height", "width"), SIZES)
def test_qwen2_vl_tokens_and_patches_are_the_processors(transformers, height, width) -> None:
    processor = transformers.Qwen2VLImageProcessor()
    out = processor(images=[_image(height, width)], return_tensors="pt")
    patches = out["pixel_values"].shape[0]  # one row per 14-pixel patch (measured)
    grid = out["image_grid_thw"].tolist()[0]
    tokens, counted = vision.qwen2_vl_tokens(height, width)
    assert counted == patches
    assert tokens == patches // processor.merge_size**2
    assert vision.qwen2_vl_resized(height, width) == (grid[1] * 14, grid[2] * 14)


@pytest.mark.parametrize(("height", "width"), SIZES[:4])
def test_llava_next_tiles_and_tokens_are_the_processors(transformers, height, width) -> None:
    from transformers.models.llava_next.processing_llava_next import LlavaNextProcessor

    images = transformers.LlavaNextImageProcessor()
    tile = images.crop_size["height"]
    pinpoints = tuple(tuple(p) for p in images.image_grid_pinpoints)
    out = images(images=[_image(height, width)], return_tensors="pt")
    assert vision.llava_next_tiles(height, width, tile=tile, pinpoints=pinpoints) == out["pixel_values"].shape[1]
    # transformers' own token count, on a processor with llava-hf's settings (no tokenizer needed for the count)
    processor = object.__new__(LlavaNextProcessor)
    processor.image_processor, processor.patch_size = images, 14
    processor.num_additional_image_tokens, processor.vision_feature_select_strategy = 1, "default"
    counted = processor._get_num_multimodal_tokens(image_sizes=[[height, width]])["num_image_tokens"][0]
    assert vision.llava_next_tokens(height, width, tile=tile, pinpoints=pinpoints) == counted


@pytest.mark.parametrize(("height", "width"), SIZES[:4])
def test_mllama_tiles_are_the_processors(transformers, height, width) -> None:
    processor = transformers.MllamaImageProcessor()
    out = processor(images=[[_image(height, width)]], return_tensors="pt")
    tile = processor.size["height"]
    assert vision.mllama_tiles(height, width, tile=tile, max_tiles=processor.max_image_tiles) == out["num_tiles"][0][0]


def test_fixed_token_counts_are_the_configs(transformers) -> None:
    # Gemma 3 and LLaVA read their counts from the model's config: transformers' defaults
    assert vision.gemma3_term().expr == transformers.Gemma3Config().mm_tokens_per_image
    vision_config = transformers.LlavaConfig(vision_config={"model_type": "clip_vision_model", "image_size": 336,
                                                             "patch_size": 14}).vision_config
    assert vision.llava_term(vision_config.image_size, vision_config.patch_size).expr == \
        (vision_config.image_size // vision_config.patch_size) ** 2
    assert vision.sequence_image_tokens(vision.gemma3_term()).expr == n_img * transformers.Gemma3Config().mm_tokens_per_image


def test_mllama_tokens_per_tile_follow_the_vision_tower(transformers) -> None:
    config = transformers.MllamaVisionConfig()
    per_tile = (config.image_size // config.patch_size) ** 2 + 1  # modeling_mllama: patches and a class token
    assert vision.mllama_term(config.image_size, config.patch_size).expr.coeff(vision.n_tile) == per_tile
