"""Vision-language models as module sources: the text with its image placeholder tokens and the images in each model's form (issue 29).

A sequence is ``n_img`` images' placeholder tokens (their count from ``symbolic.library.vision``)
followed by ``S`` text tokens; ``labels`` are the ids with -100 at the image tokens, as a training
collator gives them. The images are in the model's own form:

- Qwen2-VL / Qwen2.5-VL: ``pixel_values`` of (B·n_img·(H_img/14)·(W_img/14), 3·2·14·14) patches,
  ``image_grid_thw`` (B·n_img, 3) on the CPU (the forward reads its values) and ``mm_token_type_ids``
  (1 at the image tokens); the tower's ``image_position_ids`` and window indices are precomputed
  from that grid by transformers' own ``vision_utils`` on the CPU, then moved to the device; on the
  meta device only, ``position_ids`` (3, B, L) is given empty, since ``get_rope_index`` reads the ids;
- LLaVA-1.5 and Gemma 3: ``pixel_values`` of (B·n_img, 3, image_size, image_size), fixed by the config;
  Gemma 3 also ``token_type_ids`` (1 at the image tokens; its training forward requires them);
- LLaVA-NeXT: ``pixel_values`` of (B·n_img, tiles + 1, 3, tile, tile) and ``image_sizes`` on the CPU;
- Llama-3.2-Vision (mllama): one ``<|image|>`` token per image, ``pixel_values`` of
  (B, n_img, max_num_tiles, 3, tile, tile), ``aspect_ratio_ids``, ``aspect_ratio_mask`` and
  ``cross_attention_mask`` for the canvas of H_img × W_img.

Everything is built by ``ModuleSource.extra``, since the sequence length and the patch counts are
functions of the sizes, not one size each. On the meta device the values are empty; on any other
device they are real (random pixels and text ids), so the same inputs run a real step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...library import vision
from .source import ModuleError

QWEN = ("qwen2_vl", "qwen2_5_vl")
BUILT = (*QWEN, "llava", "llava_next", "gemma3", "mllama")  # the model types whose inputs vlm_inputs builds
# image-text-to-text types that are encoder-decoders (pixels in, decoder tokens out: TrOCR, Donut), not a text
# with image placeholders: ``transformers_task`` gives them their own inputs, and their inference is generation
ENCODER_DECODER = ("vision-encoder-decoder",)
SIZES = ("S", "n_img", "H_img", "W_img")
IMAGES = 1  # default n_img
QWEN_IMAGE = 448  # default H_img = W_img of Qwen2-VL (its config names no image size): 16·16 = 256 tokens
IGNORE = -100  # the label transformers' loss skips


@dataclass(frozen=True)
class Vlm:
    """A VLM's inputs: default sizes, the builder of its inputs, notes."""

    sizes: dict[str, int]
    extra: Callable[[int, Mapping[str, int], str], dict[str, Any]]
    notes: tuple[str, ...]


def vlm_inputs(config_obj: Any, class_name: str, text_tokens: int) -> Vlm:
    """The inputs of an image-text-to-text model, by its config's model_type (a ModuleError for one not built)."""
    kind = config_obj.model_type
    if kind in QWEN:
        return _qwen(config_obj, text_tokens)
    if kind == "llava":
        return _llava(config_obj, text_tokens)
    if kind == "llava_next":
        return _llava_next(config_obj, text_tokens)
    if kind == "gemma3":
        return _gemma3(config_obj, text_tokens)
    if kind == "mllama":
        return _mllama(config_obj, text_tokens)
    raise ModuleError(f"the inputs of the vision-language model {class_name} ({kind!r}) are not built: known are "
                      f"{', '.join(BUILT)}")


# --- the text ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Text:
    """What the token ids are made of: the vocabulary, the image token, the markers around each image's tokens."""

    vocab: int
    image_token: int
    markers: tuple[int, ...] = ()  # (start, end) of an image where the processor writes them, else ()

    @property
    def text_high(self) -> int:
        """Text ids are drawn below the special tokens (they sit at the vocabulary's top)."""
        return min(self.vocab, self.image_token, *self.markers)

    def block(self, per_image: int) -> int:
        """Tokens of one image in the text: its placeholders and its markers."""
        return per_image + len(self.markers)


def _text(config_obj: Any, *marker_fields: str) -> Text:
    vocab = getattr(config_obj.get_text_config(), "vocab_size", None)
    token = _token(config_obj, "image_token_id", "image_token_index")
    markers = tuple(_token(config_obj, name) for name in marker_fields)
    if type(vocab) is not int or not all(type(t) is int and 0 <= t < vocab for t in (token, *markers)):
        raise ModuleError(f"the {config_obj.model_type!r} config needs a vocab_size and image token ids below it "
                          f"(vocab_size={vocab!r}, image tokens={(token, *markers)!r})")
    return Text(vocab, token, markers)


def _token(config_obj: Any, *names: str) -> Any:
    return next((getattr(config_obj, n) for n in names if getattr(config_obj, n, None) is not None), None)


def _image_positions(text: Text, per_image: int, images: int) -> list[int]:
    """Positions of the image placeholder tokens: image i's block starts at i·block, after its start marker."""
    first = 1 if text.markers else 0
    return [i * text.block(per_image) + first + k for i in range(images) for k in range(per_image)]


def token_ids(text: Text, batch: int, per_image: int, sizes: Mapping[str, int], device: str) -> tuple[Any, Any]:
    """(input_ids, labels): each sequence's n_img image blocks (markers around per_image placeholders), then S text tokens."""
    import torch

    images = int(sizes["n_img"])
    shape = (batch, images * text.block(per_image) + int(sizes["S"]))
    if device == "meta":
        return torch.empty(shape, dtype=torch.int64, device=device), torch.empty(shape, dtype=torch.int64, device=device)
    ids = torch.randint(0, text.text_high, shape, dtype=torch.int64)
    if text.markers:
        starts = [i * text.block(per_image) for i in range(images)]
        ids[:, starts] = text.markers[0]
        ids[:, [s + per_image + 1 for s in starts]] = text.markers[1]
    placed = _image_positions(text, per_image, images)
    ids[:, placed] = text.image_token
    labels = ids.clone()
    labels[:, placed] = IGNORE
    return ids.to(device), labels.to(device)


def _pixels(shape: tuple[int, ...], device: str) -> Any:
    """Float pixel values, float32 as the image processors return them (the towers cast them)."""
    import torch

    if device == "meta":
        return torch.empty(shape, device=device)
    return torch.randn(shape, device=device)


def _positive(sizes: Mapping[str, int], *names: str) -> None:
    for name in names:
        if type(sizes.get(name)) is not int or sizes[name] < 1:
            raise ModuleError(f"size {name}={sizes.get(name)!r} must be a positive integer")


# --- Qwen2-VL / Qwen2.5-VL --------------------------------------------------------------------------
def _qwen(config_obj: Any, text_tokens: int) -> Vlm:
    tower = config_obj.vision_config
    patch, merge = int(tower.patch_size), int(tower.spatial_merge_size)
    rule = {"patch_size": patch, "merge_size": merge}
    tokens, patches = vision.qwen2_vl_tokens(QWEN_IMAGE, QWEN_IMAGE, **rule)
    notes = (f"inputs: n_img images of H_img × W_img pixels (multiples of {patch * merge}, the image as smart_resize "
             f"leaves it) as {patches} patches and {tokens} image tokens each at {QWEN_IMAGE} × {QWEN_IMAGE} "
             "(between vision start and end tokens), "
             "then S text tokens",)
    return Vlm({"S": text_tokens, "n_img": IMAGES, "H_img": QWEN_IMAGE, "W_img": QWEN_IMAGE},
               functools.partial(_qwen_inputs, _text(config_obj, "vision_start_token_id", "vision_end_token_id"), tower),
               notes)


def _qwen_inputs(text: Text, tower: Any, batch: int, sizes: Mapping[str, int], device: str) -> dict[str, Any]:
    """Qwen2-VL's processor outputs (ids, patches, grid) and the tower's precomputed position and window indices."""
    import torch
    from transformers import vision_utils

    _positive(sizes, *SIZES)
    patch, merge, temporal = int(tower.patch_size), int(tower.spatial_merge_size), int(tower.temporal_patch_size)
    height, width = int(sizes["H_img"]), int(sizes["W_img"])
    if height % (patch * merge) or width % (patch * merge):
        raise ModuleError(f"H_img={height}, W_img={width}: Qwen2-VL's images are multiples of {patch * merge} "
                          f"pixels (smart_resize: symbolic.library.vision.qwen2_vl_resized)")
    images = batch * int(sizes["n_img"])
    grid = torch.tensor([[1, height // patch, width // patch]] * images, dtype=torch.int64)
    per_image = (height // patch) * (width // patch) // merge**2
    ids, labels = token_ids(text, batch, per_image, sizes, device)
    channels = int(getattr(tower, "in_channels", getattr(tower, "in_chans", 3)))
    out = {"input_ids": ids, "labels": labels, "image_grid_thw": grid,
           "mm_token_type_ids": _token_types(text, batch, per_image, sizes, device),
           "pixel_values": _pixels((int(grid.prod(-1).sum()), channels * temporal * patch * patch), device)}
    if device == "meta":  # get_rope_index reads the ids and the grid to place M-RoPE's 3-D positions: their shape
        out["position_ids"] = torch.empty((3, *ids.shape), dtype=torch.int64, device=device)
    out["image_position_ids"] = vision_utils.get_vision_position_ids(grid, merge).to(device)
    if hasattr(tower, "window_size"):  # Qwen2.5-VL's windowed attention
        index, cu_window = vision_utils.get_vision_window_index(grid, merge, int(tower.window_size), patch)
        out["image_window_index"], out["image_cu_window_seqlens"] = index.to(device), cu_window
    return out


# --- LLaVA-1.5 and Gemma 3: one fixed-size image each -------------------------------------------------
def _fixed_image(config_obj: Any) -> tuple[int, int, int]:
    """(channels, image_size, patch_size) of the vision tower."""
    tower = config_obj.vision_config
    size, patch = getattr(tower, "image_size", None), getattr(tower, "patch_size", None)
    if type(size) is not int or type(patch) is not int:
        raise ModuleError(f"the {config_obj.model_type!r} vision config needs an integer image_size and patch_size")
    return int(getattr(tower, "num_channels", 3)), size, patch


def _llava(config_obj: Any, text_tokens: int) -> Vlm:
    channels, size, patch = _fixed_image(config_obj)
    strategy = getattr(config_obj, "vision_feature_select_strategy", "default")
    tokens = int(vision.llava_term(size, patch).expr) + (1 if strategy == "full" else 0)  # "full" keeps the class token
    notes = (f"inputs: n_img images of {size} × {size} (fixed by the vision tower), {tokens} image tokens each, "
             "then S text tokens",)
    return Vlm({"S": text_tokens, "n_img": IMAGES}, functools.partial(
        _fixed_inputs, _text(config_obj), (channels, size, size), tokens, False), notes)


def _gemma3(config_obj: Any, text_tokens: int) -> Vlm:
    channels, size, _ = _fixed_image(config_obj)
    tokens = int(vision.gemma3_term(int(config_obj.mm_tokens_per_image)).expr)
    notes = (f"inputs: n_img images of {size} × {size} (fixed by the vision tower), {tokens} image tokens each "
             "(mm_tokens_per_image), then S text tokens; token_type_ids mark the image tokens",)
    return Vlm({"S": text_tokens, "n_img": IMAGES}, functools.partial(
        _fixed_inputs, _text(config_obj, "boi_token_index", "eoi_token_index"), (channels, size, size), tokens, True),
        notes)


def _fixed_inputs(text: Text, image: tuple[int, int, int], per_image: int, token_types: bool,
                  batch: int, sizes: Mapping[str, int], device: str) -> dict[str, Any]:
    """LLaVA's and Gemma 3's processor outputs: ids, labels, pixel_values (B·n_img, C, H, W) (Gemma 3's token types)."""
    _positive(sizes, "S", "n_img")
    ids, labels = token_ids(text, batch, per_image, sizes, device)
    out = {"input_ids": ids, "labels": labels, "pixel_values": _pixels((batch * int(sizes["n_img"]), *image), device)}
    if token_types:
        out["token_type_ids"] = _token_types(text, batch, per_image, sizes, device)
    return out


def _token_types(text: Text, batch: int, per_image: int, sizes: Mapping[str, int], device: str) -> Any:
    """1 at the image placeholder tokens, 0 elsewhere (Gemma 3's ``token_type_ids``, Qwen2-VL's ``mm_token_type_ids``)."""
    import torch

    images = int(sizes["n_img"])
    shape = (batch, images * text.block(per_image) + int(sizes["S"]))
    if device == "meta":
        return torch.empty(shape, dtype=torch.int64, device=device)
    types = torch.zeros(shape, dtype=torch.int64)
    types[:, _image_positions(text, per_image, images)] = 1
    return types.to(device)


# --- LLaVA-NeXT ---------------------------------------------------------------------------------------
def _llava_next(config_obj: Any, text_tokens: int) -> Vlm:
    channels, tile, patch = _fixed_image(config_obj)
    pinpoints = tuple(tuple(int(v) for v in p) for p in config_obj.image_grid_pinpoints)
    if getattr(config_obj, "vision_feature_select_strategy", "default") != "default":
        raise ModuleError("LLaVA-NeXT's inputs are built for vision_feature_select_strategy 'default' only "
                          "(llava-hf's checkpoints)")
    rule = {"tile": tile, "patch_size": patch, "pinpoints": pinpoints}
    tokens = vision.llava_next_tokens(tile, tile, **rule)
    notes = (f"inputs: n_img images of H_img × W_img pixels, anyres tiles of {tile} (best grid + base image), "
             f"{tokens} image tokens each at {tile} × {tile}, then S text tokens",)
    return Vlm({"S": text_tokens, "n_img": IMAGES, "H_img": tile, "W_img": tile},
               functools.partial(_llava_next_inputs, _text(config_obj), channels, rule), notes)


def _llava_next_inputs(text: Text, channels: int, rule: Mapping[str, Any], batch: int, sizes: Mapping[str, int],
                       device: str) -> dict[str, Any]:
    """LLaVA-NeXT's processor outputs: ids, labels, the tiles of each image and its size (on the CPU: the forward reads it)."""
    import torch

    _positive(sizes, *SIZES)
    height, width, tile = int(sizes["H_img"]), int(sizes["W_img"]), int(rule["tile"])
    per_image = vision.llava_next_tokens(height, width, **rule)
    tiles = vision.llava_next_tiles(height, width, tile=tile, pinpoints=rule["pinpoints"])
    images = batch * int(sizes["n_img"])
    ids, labels = token_ids(text, batch, per_image, sizes, device)
    return {"input_ids": ids, "labels": labels, "pixel_values": _pixels((images, tiles, channels, tile, tile), device),
            "image_sizes": torch.tensor([[height, width]] * images, dtype=torch.int64)}


# --- Llama-3.2-Vision ---------------------------------------------------------------------------------
def _mllama(config_obj: Any, text_tokens: int) -> Vlm:
    tower = config_obj.vision_config
    tile, tiles = int(tower.image_size), int(tower.max_num_tiles)
    notes = (f"inputs: n_img images of H_img × W_img pixels on a canvas of up to {tiles} tiles of {tile} "
             f"(pixel_values padded to {tiles} tiles, as the processor pads them), one <|image|> token each, "
             "then S text tokens; the image enters through cross-attention",)
    return Vlm({"S": text_tokens, "n_img": IMAGES, "H_img": tile, "W_img": tile},
               functools.partial(_mllama_inputs, _text(config_obj), int(tower.num_channels), tile, tiles), notes)


def _mllama_inputs(text: Text, channels: int, tile: int, max_tiles: int, batch: int, sizes: Mapping[str, int],
                   device: str) -> dict[str, Any]:
    """mllama's processor outputs: ids with one image token per image, padded tiles, aspect ratio ids and masks."""
    import torch
    from transformers.models.mllama.image_processing_pil_mllama import get_all_supported_aspect_ratios

    _positive(sizes, *SIZES)
    rows, cols = vision.mllama_canvas(int(sizes["H_img"]), int(sizes["W_img"]), tile, max_tiles)
    images = int(sizes["n_img"])
    ids, labels = token_ids(text, batch, 1, sizes, device)
    length = ids.shape[1]
    out = {"input_ids": ids, "labels": labels,
           "pixel_values": _pixels((batch, images, max_tiles, channels, tile, tile), device)}
    if device == "meta":
        out["aspect_ratio_ids"] = torch.empty((batch, images), dtype=torch.int64, device=device)
        out["aspect_ratio_mask"] = torch.empty((batch, images, max_tiles), dtype=torch.int64, device=device)
        out["cross_attention_mask"] = torch.empty((batch, length, images, max_tiles), dtype=torch.int64, device=device)
        return out
    ratio = get_all_supported_aspect_ratios(max_tiles).index((rows, cols)) + 1
    out["aspect_ratio_ids"] = torch.full((batch, images), ratio, dtype=torch.int64, device=device)
    mask = torch.zeros((batch, images, max_tiles), dtype=torch.int64)
    mask[..., :rows * cols] = 1  # the canvas's tiles; the rest is padding
    out["aspect_ratio_mask"] = mask.to(device)
    # every text token attends to the images before it: all of them, which come first
    out["cross_attention_mask"] = mask[:, None].expand(batch, length, images, max_tiles).contiguous().to(device)
    return out
