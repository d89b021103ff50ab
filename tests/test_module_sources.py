"""Library models and transformers tasks as module sources: each builds on the meta device and gives a scalar loss.

Small configurations with the real structure; the loss comes from the module's own forward on the
meta device through ``make_inputs`` and ``loss_of``, as the module probes run it.
"""

from __future__ import annotations

import importlib.util

import pytest

from symbolic.networks.module.libraries import library_source
from symbolic.networks.module.source import ModuleError, loss_of, make_inputs
from symbolic.networks.module.transformers_task import transformers_source

pytestmark = [pytest.mark.torch, pytest.mark.imports_torch]  # its fixture imports torch in the test process

SMALL = {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 64}
SEQ2SEQ = {"vocab_size": 100, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
           "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64}
VISION = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
          "image_size": 32, "patch_size": 8}
# key -> (config, --task, the class chosen); SIZES: sizes other than the defaults, run in the same test
CONFIGS = {
    "t5": ({"model_type": "t5", "vocab_size": 100, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2,
            "num_heads": 4}, None, "T5ForConditionalGeneration"),
    "bart": ({"model_type": "bart", **SEQ2SEQ, "max_position_embeddings": 64}, None, "BartForConditionalGeneration"),
    "whisper": ({"model_type": "whisper", **SEQ2SEQ, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
                 "decoder_start_token_id": 3, "num_mel_bins": 16, "max_source_positions": 30,
                 "max_target_positions": 32}, None, "WhisperForConditionalGeneration"),
    "bert-classifier": ({"model_type": "bert", **SMALL, "num_labels": 3}, "sequence-classification",
                        "BertForSequenceClassification"),
    "bert": ({"model_type": "bert", **SMALL}, None, "BertForMaskedLM"),
    "vit": ({"model_type": "vit", **VISION, "num_labels": 5}, None, "ViTForImageClassification"),
    "clip": ({"model_type": "clip", "projection_dim": 16,
              "text_config": {**SMALL, "max_position_embeddings": 32}, "vision_config": VISION}, None, "CLIPModel"),
    "llama": ({"model_type": "llama", **SMALL}, None, "LlamaForCausalLM"),
}
SIZES = {"t5": {"S": 24, "T": 8}, "vit": {"H": 48, "W": 64}}  # an encoder and a decoder length; another image size


@pytest.fixture(scope="module", autouse=True)
def _libraries():
    """The libraries imported once for the module: their imports (transformers' modeling code ~7 s,
    diffusers ~5 s on two shared cores) are most of the time, paid once per process."""
    from symbolic.networks import torch_env

    torch_env.ready()
    import diffusers
    import transformers

    return transformers.PreTrainedModel, diffusers.ModelMixin


def _meta_loss(source, batch: int = 2, sizes=None):
    import torch

    with torch.device("meta"):
        model = source.build(source.arguments)
    loss = loss_of(model(**make_inputs(source, batch, sizes)), source.loss)
    assert loss.dim() == 0 and loss.device.type == "meta"
    return loss


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_transformers_task_builds_on_meta_with_a_scalar_loss(key) -> None:
    config, task, expected = CONFIGS[key]
    source = transformers_source(key, config, task, SIZES.get(key))
    assert source.task == expected and expected in source.notes[0]
    assert source.sizes == {**transformers_source(key, config, task).sizes, **SIZES.get(key, {})}
    _meta_loss(source)


def test_input_dims_follow_the_config() -> None:
    dims = {i.name: i.dims for i in transformers_source("t5", CONFIGS["t5"][0]).inputs}
    assert dims["input_ids"] == ("B", "S") and dims["labels"] == ("B", "T")  # encoder and decoder lengths
    config = CONFIGS["whisper"][0]
    dims = {i.name: i.dims for i in transformers_source("whisper", config).inputs}
    assert dims["input_features"] == ("B", config["num_mel_bins"], 2 * config["max_source_positions"])
    config = CONFIGS["vit"][0]
    assert transformers_source("vit", config).sizes == {"H": config["image_size"], "W": config["image_size"]}


@pytest.mark.parametrize(("task", "message"), [
    ("sequence-clasification", "did you mean 'sequence-classification'"),
    ("speech-seq2seq", "no speech-seq2seq class for model_type 'bert'"),
])
def test_bad_task_is_one_line(task, message) -> None:
    with pytest.raises(ModuleError, match=message) as err:
        transformers_source("bert", CONFIGS["bert"][0], task)
    assert "\n" not in str(err.value)


def test_rejected_config_is_one_line() -> None:
    with pytest.raises(ModuleError, match="not known to transformers"):
        transformers_source("x", {"model_type": "no-such-model"})


@pytest.mark.parametrize(("prefix", "name", "arguments"), [
    ("torchvision", "resnet18", {}),
    ("torchvision", "convnext_tiny", {"num_classes": 10}), ("timm", "vit_tiny_patch16_224", {}),
    ("timm", "resnet18", {}),
])
def test_library_classifiers_build_on_meta(prefix, name, arguments) -> None:
    source = library_source(prefix, name, arguments)
    assert source.loss == "cross-entropy" and source.fingerprint[0] == prefix and name in source.fingerprint
    _meta_loss(source)


def test_library_default_sizes_come_from_the_library() -> None:
    import timm
    from torchvision import models

    inception = library_source("torchvision", "inception_v3", {})
    crop = models.get_model_weights("inception_v3").DEFAULT.transforms.keywords["crop_size"]
    assert inception.sizes == {"H": crop, "W": crop}
    vit = library_source("timm", "vit_tiny_patch16_224", {})
    assert vit.inputs[0].dims[1:] == timm.get_pretrained_cfg("vit_tiny_patch16_224").input_size


UNET = {"sample_size": 8, "in_channels": 4, "out_channels": 4, "layers_per_block": 1, "block_out_channels": [32, 64],
        "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"], "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
        "cross_attention_dim": 32, "attention_head_dim": 8, "norm_num_groups": 8}
DIT = {"num_attention_heads": 2, "attention_head_dim": 16, "in_channels": 4, "out_channels": 4, "num_layers": 2,
       "sample_size": 8, "patch_size": 2, "num_embeds_ada_norm": 10}
VAE = {"in_channels": 3, "out_channels": 3, "down_block_types": ["DownEncoderBlock2D"] * 2,
       "up_block_types": ["UpDecoderBlock2D"] * 2, "block_out_channels": [8, 16], "latent_channels": 4,
       "norm_num_groups": 8, "sample_size": 32, "layers_per_block": 1}


@pytest.mark.parametrize(("name", "config", "inputs"), [
    ("UNet2DConditionModel", UNET, ["sample", "timestep", "encoder_hidden_states"]),
    ("DiTTransformer2DModel", DIT, ["hidden_states", "timestep", "class_labels"]),
    ("AutoencoderKL", VAE, ["sample"]),
])
def test_diffusers_models_build_on_meta(name, config, inputs) -> None:
    source = library_source("diffusers", name, {}, config)
    assert [i.name for i in source.inputs] == inputs and source.loss == "mse"
    _meta_loss(source)


@pytest.mark.parametrize(("prefix", "name", "hint"), [
    ("torchvision", "resnt18", "did you mean torchvision:resnet18?"),
    ("timm", "vit_tiny_patch16_22", "did you mean timm:vit_tiny_patch16_224?"),
    ("diffusers", "UNet2DConditionModl", "did you mean diffusers:UNet2DConditionModel?"),
])
def test_unknown_library_name_is_one_line_with_a_suggestion(prefix, name, hint) -> None:
    with pytest.raises(ModuleError) as err:
        library_source(prefix, name, {})
    assert hint in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("package", ["torchvision", "timm", "diffusers"])
def test_missing_package_is_named(monkeypatch, package) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    with pytest.raises(ModuleError, match=f"pip install {package}$"):
        library_source(package, "anything", {})


def test_bad_library_arguments_are_one_line() -> None:
    with pytest.raises(ModuleError, match="takes no argument 'foo_bar'"):
        library_source("diffusers", "UNet2DConditionModel", {"foo_bar": 1})
    import torch

    source = library_source("torchvision", "resnet18", {"no_such": 1})
    with torch.device("meta"), pytest.raises(ModuleError, match="torchvision:resnet18 cannot be built"):
        source.build(source.arguments)
