"""More networks of issue 29 planned and measured for ``test_networks.py``, in a child process.

torch is imported here, not in the test process. The group comes on stdin (``{"group": "vision"}``):

- ``vision``: torchvision's ResNet-50 (its Bottleneck depth, narrower inner width) and
  MobileNetV3-small, timm's ConvNeXt (convnext_atto with fewer blocks and channels);
- ``generative``: a diffusers UNet2DConditionModel and a DiTTransformer2DModel (tiny configs in
  ``tests/data/modules``) and LLaVA (a tiny config with CLIP's tower), with SDPA as each library
  runs it, which ``--device cpu`` follows (the CPU's flash kernel).

Each is fitted at one input size and planned at another, beside a real CPU step there
(``measured.measure`` through ``library_modules_child._case``). To keep the child short the
classifiers take square images (one size H for both sides; ResNet-18 at 160 x 192 covers H != W)
and the UNet's text length is fixed (its fit in h alone). Writes one JSON object on stdout; exits
77 when torch is missing.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script
from library_modules_child import _case  # this folder: sys.path[0] of a child script

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "modules"
TEXT_TOKENS = 6  # the UNet's encoder_hidden_states length, fixed
# LLaVA: a tiny llama with CLIP's tower at 28 x 28 (2 x 2 patches), as tests/test_vlm_sources.py
TEXT = {"vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 512}
CLIP = {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "image_size": 28, "patch_size": 14, "projection_dim": 32}
LLAVA = {"model_type": "llava", "text_config": {"model_type": "llama", **TEXT}, "vision_config": CLIP,
         "image_token_index": 290, "vision_feature_layer": -1}


def _fixed(source, **sizes):
    """``source`` with sizes fixed: a dimension named in ``sizes`` becomes a number or another size's name."""
    from symbolic.networks.module.source import Input

    inputs = tuple(Input(i.name, tuple(sizes.get(d, d) if isinstance(d, str) else d for d in i.dims), i.dtype, i.high)
                   for i in source.inputs)
    return dataclasses.replace(source, inputs=inputs, sizes={k: v for k, v in source.sizes.items() if k not in sizes})


def _library(model, **arguments):
    from symbolic.networks.module import resolve

    return resolve.module_source(model, resolve.ModuleOptions(arguments=arguments))


def vision():
    resnet = _fixed(_library("torchvision:resnet50", width_per_group=16), W="H")
    mobilenet = _fixed(_library("torchvision:mobilenet_v3_small"), W="H")
    convnext = _fixed(_library("timm:convnext_atto", depths=(1, 1, 2, 1), dims=(16, 32, 64, 128)), W="H")
    # fitted at H = 64, 128, 192 (batch 2, 3; checked at 320, batch 5), asked at 32 with batch 4: multiples of
    # the total stride 32, small enough for a short CPU step
    return {"resnet50": _case(resnet, {"H": 64}, 4, {"H": 32}),
            "mobilenet_v3_small": _case(mobilenet, {"H": 64}, 4, {"H": 32}),
            "convnext": _case(convnext, {"H": 64}, 4, {"H": 32})}


def generative():
    from symbolic.networks.module import resolve
    from symbolic.networks.module.transformers_task import transformers_source

    def diffusers(name, file):
        config = json.loads((DATA / file).read_text())
        return resolve.module_source(f"diffusers:{name}", resolve.ModuleOptions(config=config))

    unet = _fixed(diffusers("UNet2DConditionModel", "unet.json"), w="h", S=TEXT_TOKENS)
    dit = diffusers("DiTTransformer2DModel", "dit.json")  # square latents: one size h
    llava = transformers_source("llava", LLAVA)
    llava = dataclasses.replace(llava, extra_sizes=("S",), sizes={**llava.sizes, "n_img": 2})  # two images, fixed
    return {"unet": _case(unet, {"h": 8}, 2, {"h": 20}), "dit": _case(dit, {"h": 8}, 2, {"h": 12}),
            "dit_inputs": [[i.name, list(i.dims)] for i in dit.inputs],
            "llava": _case(llava, {"S": 8}, 3, {"S": 13})}


def main() -> None:
    child_main.run(lambda tmp: {"vision": vision, "generative": generative}[json.load(sys.stdin)["group"]](),
                   threads=1)


if __name__ == "__main__":
    main()
