"""Image tokens of vision-language models: how many tokens (and vision-tower patches) one image becomes.

Each rule is the model's own processor's (transformers 5.24.0, cited per term), checked exactly
against that processor on random images in ``tests/test_vision_tokens.py``:

- **Qwen2-VL / Qwen2.5-VL**: ``smart_resize`` rounds height and width to multiples of
  patch·merge = 28 and scales them into [min_pixels, max_pixels]; the tower sees
  (H_img/14)·(W_img/14) patches and the language model (H_img/28)·(W_img/28) tokens. The resize
  (Python's round, floor and ceil of a square root) has no useful closed form: ``qwen2_vl_resized``
  computes it, and the terms are in the resized H_img, W_img.
- **LLaVA-1.5**: a fixed (image_size/patch)² = (336/14)² = 576 tokens whatever the image.
- **LLaVA-NeXT** (anyres): the best grid of tiles for the image (``select_best_resolution``), the
  grid's patches less the padding rows or columns, one newline token per row, plus the base
  image's patches: a function of H, W (``llava_next_tokens``), no closed form.
- **Gemma 3**: a fixed ``mm_tokens_per_image`` = 256 per image (the 896-pixel image's 64×64
  patches pooled 4×4).
- **Llama-3.2-Vision**: the image fits a canvas of n_tile ≤ 4 tiles of 560 (``mllama_tiles``);
  each tile is (560/14)² + 1 = 1601 vision tokens, which the language model reads through
  cross-attention (one ``<|image|>`` token in the text).
"""

from __future__ import annotations

import math

import sympy

from ..core.symbols import H_img, W_img, n_img, n_tile
from ..core.term import Term

QWEN2_VL = {"patch_size": 14, "merge_size": 2, "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 1280}
LLAVA = {"image_size": 336, "patch_size": 14}
LLAVA_NEXT = {"tile": 336, "patch_size": 14,
              "pinpoints": ((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008))}
GEMMA3_TOKENS = 256  # Gemma3Config.mm_tokens_per_image
MLLAMA = {"tile": 560, "patch_size": 14, "max_tiles": 4}


# --- Qwen2-VL / Qwen2.5-VL ------------------------------------------------------------------------
def qwen2_vl_resized(height: int, width: int, patch_size: int = 14, merge_size: int = 2,
                     min_pixels: int = QWEN2_VL["min_pixels"], max_pixels: int = QWEN2_VL["max_pixels"]) -> tuple[int, int]:
    """(H_img, W_img): Qwen2-VL's ``smart_resize`` of an image, multiples of patch·merge within the pixel bounds."""
    factor = patch_size * merge_size
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"aspect ratio must be below 200, got {max(height, width) / min(height, width)}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen2_vl_terms(patch_size: int = 14, merge_size: int = 2) -> dict[str, Term]:
    """Patches the vision tower sees and tokens the language model reads, per image, in the resized H_img, W_img."""
    patches = H_img * W_img / patch_size**2
    tokens = patches / merge_size**2
    where = "models/qwen2_vl/image_processing_qwen2_vl.py, smart_resize and grid_thw"
    note = "H_img, W_img: smart_resize's output (qwen2_vl_resized), multiples of patch·merge"
    return {
        "patches": Term("vision.qwen2_vl.patches", "vision-tower patches per image", patches, "elements",
                        "qwen2-vl-processor", where, note),
        "tokens": Term("vision.qwen2_vl.tokens", "image tokens per image", tokens, "elements",
                       "qwen2-vl-processor", where, note),
    }


def qwen2_vl_tokens(height: int, width: int, **rule: int) -> tuple[int, int]:
    """(image tokens, vision patches) of one image of height × width pixels."""
    size = {"patch_size": rule.get("patch_size", 14), "merge_size": rule.get("merge_size", 2)}
    h, w = qwen2_vl_resized(height, width, **{**QWEN2_VL, **rule})
    terms = qwen2_vl_terms(**size)
    at = {H_img: h, W_img: w}
    return int(terms["tokens"].expr.subs(at)), int(terms["patches"].expr.subs(at))


# --- LLaVA-1.5 --------------------------------------------------------------------------------------
def llava_term(image_size: int = LLAVA["image_size"], patch_size: int = LLAVA["patch_size"]) -> Term:
    """LLaVA-1.5's fixed tokens per image: (image_size/patch)² patches (the class token dropped)."""
    side = sympy.Integer(image_size) // patch_size
    return Term("vision.llava.tokens", "image tokens per image", side**2, "elements", "llava-processor",
                "models/llava/processing_llava.py", "every image is resized to image_size × image_size first")


# --- LLaVA-NeXT -------------------------------------------------------------------------------------
def best_resolution(height: int, width: int, pinpoints: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """The (height, width) grid that keeps most of the image and wastes least (``select_best_resolution``)."""
    best, most, least = pinpoints[0], 0, float("inf")
    for h, w in pinpoints:
        scale = min(w / width, h / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        wasted = w * h - effective
        if effective > most or (effective == most and wasted < least):
            best, most, least = (h, w), effective, wasted
    return best


def llava_next_tiles(height: int, width: int, tile: int = LLAVA_NEXT["tile"],
                     pinpoints: tuple[tuple[int, int], ...] = LLAVA_NEXT["pinpoints"]) -> int:
    """Tiles of the best grid, plus one for the base image: what the vision tower encodes."""
    h, w = best_resolution(height, width, pinpoints)
    return -(-h // tile) * -(-w // tile) + 1


def llava_next_tokens(height: int, width: int, tile: int = LLAVA_NEXT["tile"], patch_size: int = LLAVA_NEXT["patch_size"],
                      pinpoints: tuple[tuple[int, int], ...] = LLAVA_NEXT["pinpoints"]) -> int:
    """Image tokens of one image: the grid's unpadded patches, a newline per row, and the base image's patches.

    As llava-hf's LLaVA-NeXT processors count them: one class token added and dropped again by
    the "default" feature strategy, so the base image is (tile/patch)² tokens.
    """
    grid_h, grid_w = best_resolution(height, width, pinpoints)
    side = tile // patch_size
    rows, cols = side * (grid_h // tile), side * (grid_w // tile)
    if width / height > cols / rows:
        new_rows = int(round(height * (cols / width), 7))
        rows -= (rows - new_rows) // 2 * 2
    else:
        new_cols = int(round(width * (rows / height), 7))
        cols -= (cols - new_cols) // 2 * 2
    return rows * cols + rows + side * side


# --- Gemma 3 ----------------------------------------------------------------------------------------
def gemma3_term(tokens_per_image: int = GEMMA3_TOKENS) -> Term:
    """Gemma 3's fixed tokens per image (``mm_tokens_per_image``), whatever its size."""
    return Term("vision.gemma3.tokens", "image tokens per image", sympy.Integer(tokens_per_image), "elements",
                "gemma3-processor", "models/gemma3/processing_gemma3.py, image_seq_length",
                "every image is resized to 896 × 896 (pan-and-scan off)")


# --- Llama-3.2-Vision -------------------------------------------------------------------------------
def mllama_tiles(height: int, width: int, tile: int = MLLAMA["tile"], max_tiles: int = MLLAMA["max_tiles"]) -> int:
    """Tiles of the canvas ``get_optimal_tiled_canvas`` picks (``mllama_canvas``)."""
    rows, cols = mllama_canvas(height, width, tile, max_tiles)
    return rows * cols


def mllama_canvas(height: int, width: int, tile: int = MLLAMA["tile"], max_tiles: int = MLLAMA["max_tiles"]) -> tuple[int, int]:
    """(rows, columns) of tiles ``get_optimal_tiled_canvas`` picks: the least upscale, else the least downscale, then least area."""
    canvases = [(h * tile, w * tile) for w in range(1, max_tiles + 1) for h in range(1, max_tiles + 1) if w * h <= max_tiles]
    scales = [min(ch / height, cw / width) for ch, cw in canvases]
    up = [s for s in scales if s >= 1]
    chosen = min(up) if up else max(scales)
    ch, cw = min((c for c, s in zip(canvases, scales, strict=True) if s == chosen), key=lambda c: c[0] * c[1])
    return ch // tile, cw // tile


def mllama_term(tile: int = MLLAMA["tile"], patch_size: int = MLLAMA["patch_size"]) -> Term:
    """Vision tokens of one image: n_tile tiles of (tile/patch)² patches and a class token each."""
    per_tile = (sympy.Integer(tile) // patch_size) ** 2 + 1
    return Term("vision.mllama.tokens", "vision tokens per image", n_tile * per_tile, "elements", "mllama-processor",
                "models/mllama/image_processing_mllama.py get_optimal_tiled_canvas; modeling_mllama.py",
                "n_tile from mllama_tiles(H, W); the text holds one <|image|> token, the tokens enter by cross-attention")


def sequence_image_tokens(per_image: Term) -> Term:
    """Image tokens of one sequence: n_img images of ``per_image`` tokens each."""
    return per_image.replace(key=per_image.key + ".sequence", title="image tokens per sequence",
                             expr=n_img * per_image.expr)
