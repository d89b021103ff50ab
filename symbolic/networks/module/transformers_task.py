"""Any transformers config as a module source: the task's model class and the inputs it needs (issue 29).

``transformers_source(name, config, task, sizes)`` chooses the model class (``--task``, else the
config's ``architectures`` entry when it names a class, else the first auto mapping in ``ORDER``
that has the config's type) and the forward's inputs with size names and defaults from the
config: tokens ``S`` (and a decoder's ``T``), an image's ``H``, ``W``, Whisper's fixed frames, a
vision encoder-decoder's image at its encoder's own size (TrOCR, Donut), a vision-language
model's text with image placeholders and images in its own form (``vlm.py``).
Every input set includes the labels, so the model returns its own loss. The model is built with
``_from_config`` under the caller's device (the meta device for the probes); what a forward
cannot do on the meta device is worked around only inside that forward (``_meta_forward``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from difflib import get_close_matches
from typing import Any

from .. import torch_env
from ..generic import probes
from . import vlm
from .source import BATCH, Input, ModuleError, ModuleSource

# --task value -> transformers' auto mapping (modeling_auto.py) whose class that task builds
TASKS: dict[str, str] = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "token-classification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "zero-shot-image-classification": "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "seq2seq-lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "speech-seq2seq": "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "image-text-to-text": "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "base": "MODEL_MAPPING_NAMES",
}
# without --task or architectures: the first of these whose mapping has the config's model_type
# (the most specific head first: a type with an image-text class is a VLM, one with a masked-LM head an encoder)
ORDER = ("seq2seq-lm", "speech-seq2seq", "image-text-to-text", "masked-lm", "causal-lm",
         "zero-shot-image-classification", "image-classification", "base")
TEXT_TOKENS = 512  # default S: tokens per sequence, capped by the config's positions
DECODER_TOKENS = 128  # default T: decoder tokens of an encoder-decoder, capped by its positions
IMAGE_SIZE = 224  # default H = W when the config names no image size
POSITION_FIELDS = ("max_position_embeddings", "n_positions", "max_target_positions")


def transformers_source(name: str, config: Mapping[str, Any], task: str | None = None,
                        sizes: Mapping[str, int] | None = None) -> ModuleSource:
    """A transformers config as a ModuleSource: its task's model class, and inputs with labels so it returns its loss."""
    if not probes.torch_available():
        raise ModuleError(f"a transformers config needs torch and transformers: {probes.INSTALL_EXTRA}")
    data = dict(config)
    config_obj = _config(data)
    class_name, chosen, why = choose_class(data, config_obj, task)
    if chosen == "image-text-to-text" and config_obj.model_type in vlm.ENCODER_DECODER:
        inputs, defaults, keywords, notes = _vision_encoder_decoder(config_obj)
        extra = None
    elif chosen == "image-text-to-text":
        model = vlm.vlm_inputs(config_obj, class_name, _positions(config_obj.get_text_config(), TEXT_TOKENS))
        inputs, defaults, extra, notes = (), model.sizes, model.extra, model.notes
    else:
        inputs, defaults, keywords, notes = task_inputs(chosen, config_obj, class_name)
        extra = functools.partial(_constants, keywords) if keywords else None
    values = _sizes(defaults, sizes)
    import transformers

    return ModuleSource(
        label=f"{name} ({class_name})", origin="transformers",
        build=functools.partial(_build, class_name=class_name), arguments=data,
        inputs=inputs, sizes=values, loss=None,
        fingerprint=("transformers", transformers.__version__, class_name),
        task=class_name, notes=(f"model class {class_name} ({why})", *notes),
        extra=extra, extra_sizes=tuple(values) if not inputs else (),
    )


def cached_source(name: str, config: Mapping[str, Any], task: str | None = None) -> ModuleSource:
    """``transformers_source``, read from the cache when asked before (transformers then is not imported)."""
    from . import cache, stored

    key = cache.key("source", "transformers", name, dict(config), task, cache.package_version("transformers"),
                    cache.package_version("torch"))
    return stored.cached_source(key, lambda: transformers_source(name, config, task),
                                lambda class_name: functools.partial(_build, class_name=str(class_name)))


def _constants(keywords: Mapping[str, Any], batch: int, sizes: Mapping[str, int], device: str) -> dict[str, Any]:
    """Keyword arguments the forward takes whatever the batch and sizes (CLIP's ``return_loss``)."""
    return dict(keywords)


def _config(data: Mapping[str, Any]) -> Any:
    try:
        return probes.config_object(data)
    except probes.GenericError as err:
        raise ModuleError(str(err)) from None


# --- the model class ------------------------------------------------------------------------------
def task_classes(task: str) -> dict[str, str]:
    """model_type -> class name of a task's auto mapping, read from transformers' source."""
    return dict(_task_table(task))


@functools.cache
def _task_table(task: str) -> tuple[tuple[str, str], ...]:
    """A task's mapping read once per process (each read parses modeling_auto.py's table)."""
    return tuple(probes._auto_names("modeling_auto.py", TASKS[task]).items())


def choose_class(data: Mapping[str, Any], config_obj: Any, task: str | None) -> tuple[str, str, str]:
    """(class name, its task, why it was chosen): ``task``, else ``architectures``, else the first of ORDER."""
    import transformers

    model_type = config_obj.model_type
    if task is not None:
        if task not in TASKS:
            close = get_close_matches(task, TASKS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ModuleError(f"unknown task {task!r}{hint}; choose from {', '.join(TASKS)}")
        name = task_classes(task).get(model_type)
        if name is None:
            have = [t for t in TASKS if model_type in task_classes(t)]
            raise ModuleError(f"transformers has no {task} class for model_type {model_type!r}"
                              f" (it has: {', '.join(have) or 'none'})")
        return name, task, f"--task {task}"
    for arch in data.get("architectures") or ():
        if isinstance(arch, str) and arch.isidentifier() and hasattr(transformers, arch):
            found = next((t for t in (*ORDER, *TASKS) if arch in task_classes(t).values()), "base")
            return arch, found, "the config's architectures"
    for candidate in ORDER:
        name = task_classes(candidate).get(model_type)
        if name is not None:
            return name, candidate, f"task {candidate}, the first that has model_type {model_type!r}"
    raise ModuleError(f"transformers has no model class for model_type {model_type!r}")


def _build(arguments: Mapping[str, Any], *, class_name: str) -> Any:
    """The model of ``class_name`` from the config ``arguments`` on the current default device."""
    import torch

    torch_env.ready()
    import transformers

    config_obj = _config(arguments)
    cls = getattr(transformers, class_name)
    meta = torch.get_default_device().type == "meta"
    try:
        with probes._quiet(), (probes._no_init() if meta else contextlib.nullcontext()):
            model = cls._from_config(config_obj)
    except Exception as err:  # transformers raises many kinds while building
        raise ModuleError(f"transformers cannot build {class_name} from this config: {probes._first_line(err)}") from None
    model.forward = _meta_forward(model.forward, type(model).__module__)
    return model


def _meta_forward(forward: Callable[..., Any], module: str) -> Callable[..., Any]:
    """The model's forward with what needs tensor values answered for meta tensors, inside the call only."""
    @functools.wraps(forward)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with _meta_masks(), _meta_checks(module):
            return forward(*args, **kwargs)
    return wrapped


@contextlib.contextmanager
def _meta_masks() -> Iterator[None]:
    """transformers' "is this padding mask all ones" read as True for a meta tensor.

    An encoder-decoder's decoder makes its own all-ones mask (BART) and then asks whether it is
    all ones to skip it (``masking_utils.fast_all``): a value a meta tensor lacks. The inputs here
    never pad, so the answer is yes; on any other device the real test runs.
    """
    from transformers import masking_utils

    real = masking_utils.fast_all

    def fast_all(tensor: Any) -> Any:
        return True if tensor.device.type == "meta" else real(tensor)

    with probes._swapped(masking_utils, {"fast_all": fast_all}):
        yield


@contextlib.contextmanager
def _meta_checks(module: str) -> Iterator[None]:
    """The model module's ``torch_compilable_check`` passed for a meta tensor condition.

    A VLM checks that its image placeholder tokens match its image features by counting them
    (a value a meta tensor lacks). The inputs place exactly that many (``vlm.token_ids``, the
    count from ``symbolic.library.vision``; on the CPU the real check runs and passes).
    """
    import sys

    import torch

    namespace = sys.modules.get(module)
    real = getattr(namespace, "torch_compilable_check", None)
    if real is None:
        yield
        return

    def check(cond: Any, msg: Any, error_type: type[Exception] = ValueError) -> None:
        value = cond() if callable(cond) else cond
        if isinstance(value, torch.Tensor) and value.device.type == "meta":
            return
        real(value, msg, error_type)

    with probes._swapped(namespace, {"torch_compilable_check": check}):
        yield


# --- the inputs -----------------------------------------------------------------------------------
Inputs = tuple[tuple[Input, ...], dict[str, int], dict[str, Any], tuple[str, ...]]


def task_inputs(task: str, config_obj: Any, class_name: str) -> Inputs:
    """(inputs, default sizes, constant keywords, notes) of a task's forward, from its config."""
    text = config_obj.get_text_config()
    vocab = _int(text, "vocab_size")
    labels = _int(config_obj, "num_labels") or 2
    if task in ("causal-lm", "masked-lm", "token-classification"):
        high = labels if task == "token-classification" else vocab
        return _tokens(text, vocab) + (Input("labels", (BATCH, "S"), "int64", high),), \
            {"S": _positions(text, TEXT_TOKENS)}, {}, ()
    if task == "sequence-classification":
        return _tokens(text, vocab) + (Input("labels", (BATCH,), "int64", labels),), \
            {"S": _positions(text, TEXT_TOKENS)}, {}, ()
    if task == "seq2seq-lm":
        return _tokens(text, vocab) + _decoder(vocab), \
            {"S": _positions(text, TEXT_TOKENS), "T": _positions(text, DECODER_TOKENS)}, {}, ()
    if task == "speech-seq2seq":
        return _speech(config_obj) + _decoder(vocab), {"T": _positions(text, DECODER_TOKENS)}, {}, \
            ("input_features: num_mel_bins × 2·max_source_positions frames (the encoder's fixed 30 s window)",)
    if task == "image-classification":
        pixels, sizes = _pixels(config_obj)
        return (pixels, Input("labels", (BATCH,), "int64", labels)), sizes, _interpolate(class_name), ()
    if task == "zero-shot-image-classification":
        pixels, sizes = _pixels(config_obj)
        return _tokens(text, vocab) + (pixels,), {"S": _positions(text, TEXT_TOKENS), **sizes}, \
            {"return_loss": True}, ("both towers with return_loss=True: the contrastive loss of B pairs",)
    return _base(config_obj, text, vocab)


def _vision_encoder_decoder(config_obj: Any) -> Inputs:
    """A vision encoder-decoder (TrOCR, Donut): the image at its encoder's own size (its processor resizes to it)."""
    pixels, sizes = _pixels(config_obj.encoder)
    fixed = Input(pixels.name, (BATCH, pixels.dims[1], sizes["H"], sizes["W"]))
    text = config_obj.get_text_config()
    return (fixed, *_decoder(_int(text, "vocab_size"))), {"T": _positions(text, DECODER_TOKENS)}, {}, \
        (f"pixel_values: {sizes['H']} × {sizes['W']}, the encoder's image size (its processor resizes to it)",)


def _base(config_obj: Any, text: Any, vocab: int | None) -> Inputs:
    """A base model: tokens, else pixels; its loss the mean of its first output (it has no head)."""
    if vocab:
        return _tokens(text, vocab), {"S": _positions(text, TEXT_TOKENS)}, {}, ()
    if _vision(config_obj) is not None:
        pixels, sizes = _pixels(config_obj)
        return (pixels,), sizes, {}, ()
    raise ModuleError(f"no known inputs for a base {config_obj.model_type!r} model: choose a --task "
                      f"({', '.join(TASKS)})")


def _tokens(text: Any, vocab: int | None) -> tuple[Input, ...]:
    if not vocab:
        raise ModuleError("the config has no vocab_size for its token ids")
    return (Input("input_ids", (BATCH, "S"), "int64", vocab),)


def _decoder(vocab: int | None) -> tuple[Input, ...]:
    return (Input("decoder_input_ids", (BATCH, "T"), "int64", vocab),
            Input("labels", (BATCH, "T"), "int64", vocab))


def _speech(config_obj: Any) -> tuple[Input, ...]:
    mels, positions = _int(config_obj, "num_mel_bins"), _int(config_obj, "max_source_positions")
    if not (mels and positions):
        raise ModuleError(f"a {config_obj.model_type!r} config without num_mel_bins and max_source_positions "
                          "has no known audio input")
    return (Input("input_features", (BATCH, mels, 2 * positions)),)


def _vision(config_obj: Any) -> Any:
    """The config that holds the image size: the vision tower's, else the config itself when it has one."""
    vision = getattr(config_obj, "vision_config", None)
    if vision is not None:
        return vision
    return config_obj if hasattr(config_obj, "image_size") or hasattr(config_obj, "num_channels") else None


def image_size(config_obj: Any) -> tuple[int, int]:
    """(H, W) of the config's image (``image_size`` an int or a pair), IMAGE_SIZE when it has none."""
    vision = _vision(config_obj)
    size = getattr(vision, "image_size", None) if vision is not None else None
    if isinstance(size, int) and size > 0:
        return size, size
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(isinstance(s, int) for s in size):
        return int(size[0]), int(size[1])
    if isinstance(size, Mapping) and isinstance(size.get("height"), int) and isinstance(size.get("width"), int):
        return int(size["height"]), int(size["width"])
    return IMAGE_SIZE, IMAGE_SIZE


def _pixels(config_obj: Any) -> tuple[Input, dict[str, int]]:
    vision = _vision(config_obj)
    channels = _int(vision, "num_channels") if vision is not None else None
    height, width = image_size(config_obj)
    return Input("pixel_values", (BATCH, channels or 3, "H", "W")), {"H": height, "W": width}


def _interpolate(class_name: str) -> dict[str, Any]:
    """``interpolate_pos_encoding=True`` where the class takes it: a ViT then runs at image sizes other than its own."""
    import inspect

    import transformers

    cls = getattr(transformers, class_name, None)
    if cls is not None and "interpolate_pos_encoding" in inspect.signature(cls.forward).parameters:
        return {"interpolate_pos_encoding": True}
    return {}


def _positions(text: Any, cap: int) -> int:
    """``cap`` tokens, or fewer when the config's positions are fewer."""
    for field in POSITION_FIELDS:
        value = _int(text, field)
        if value:
            return min(cap, value)
    return cap


def _int(obj: Any, name: str) -> int | None:
    value = getattr(obj, name, None)
    return value if type(value) is int and value > 0 else None


def _sizes(defaults: Mapping[str, int], given: Mapping[str, int] | None) -> dict[str, int]:
    """The default sizes with the given ones over them (a name the inputs do not use is an error)."""
    values = dict(defaults)
    for key, value in (given or {}).items():
        if key not in values:
            raise ModuleError(f"size {key!r} is not an input size of this model (its sizes: "
                              f"{', '.join(values) or 'none'})")
        if type(value) is not int or value < 1:
            raise ModuleError(f"size {key}={value!r} must be a positive integer")
        values[key] = value
    return values
