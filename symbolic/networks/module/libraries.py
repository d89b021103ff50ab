"""Library models by name as module sources: ``torchvision:NAME``, ``timm:NAME``, ``diffusers:CLASS`` (issue 29).

Each is built without weights (torchvision ``weights=None``, timm ``pretrained=False``, diffusers
``from_config``) from keyword arguments (``--arg``; a diffusers model also from ``--config
FILE.json``), only when its package is installed. The inputs have size names with defaults from
the library: a classifier's ``x=(B,3,H,W)`` at its weights' crop size (torchvision) or its
``pretrained_cfg`` input size (timm), a fixed size where the model only takes that one (a
torchvision ViT, a timm model whose ``fixed_input_size`` is set); a diffusion model's latent
``sample``/``hidden_states=(B,C,h,w)`` at its config's ``sample_size`` (``(B,C,h,h)`` for DiT, whose
forward takes only square latents), with ``timestep``,
``encoder_hidden_states=(B,S,cross_attention_dim)`` and ``class_labels`` where its config has them.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import warnings
from collections.abc import Mapping
from difflib import get_close_matches
from typing import Any

from .. import torch_env
from .source import BATCH, Input, ModuleError, ModuleSource

LIBRARIES = ("torchvision", "timm", "diffusers")
IMAGE_SIZE = 224  # a classifier's H = W when its library names none
TEXT_TOKENS = 77  # default S of a diffusion model's text conditioning (CLIP's context length)
TIMESTEPS = 1000  # timestep ids below this when the config names no num_train_timesteps
# torchvision classifiers whose builder fixes the image size (their position embeddings or windows)
FIXED_SIZE_PREFIXES = ("vit_", "maxvit_")
SQUARE = ("DiTTransformer2DModel", "Transformer2DModel")  # diffusers models whose latents must be square (_square)


def library_source(prefix: str, name: str, arguments: Mapping[str, Any],
                   config: Mapping[str, Any] | None = None) -> ModuleSource:
    """``prefix:name`` (torchvision, timm or diffusers) as a ModuleSource built without weights."""
    if prefix not in LIBRARIES:
        raise ModuleError(f"unknown library {prefix!r}: choose from {', '.join(LIBRARIES)}")
    if config is not None and prefix != "diffusers":
        raise ModuleError(f"--config applies to diffusers models, not to {prefix}:{name} (give --arg KEY=VALUE)")
    _require(prefix, name)
    if prefix == "torchvision":
        return _torchvision(name, dict(arguments))
    if prefix == "timm":
        return _timm(name, dict(arguments))
    return _diffusers(name, {**(config or {}), **arguments})


def library_builder(prefix: str, name: str) -> Any:
    """``prefix:name``'s builder (arguments -> module), which imports the library only when called."""
    makers = {"torchvision": _torchvision_build, "timm": _timm_build, "diffusers": _diffusers_build}
    if prefix not in makers:
        raise ModuleError(f"unknown library {prefix!r}: choose from {', '.join(LIBRARIES)}")
    return functools.partial(makers[prefix], name=name)


def _require(package: str, name: str) -> None:
    """A one-line error naming the package when it is not installed; else its import made ready."""
    if importlib.util.find_spec(package) is None:
        raise ModuleError(f"{package}:{name} needs the {package} package: pip install {package}")
    torch_env.ready()


def _unknown(prefix: str, name: str, known: list[str]) -> ModuleError:
    close = get_close_matches(name, known, n=1)
    hint = f" (did you mean {prefix}:{close[0]}?)" if close else ""
    return ModuleError(f"{prefix} has no model {name!r}{hint}")


def _built(prefix: str, name: str, make: Any) -> Any:
    """``make()`` with any exception while building turned into one line naming the model."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. inception_v3's note on its weight init
            return make()
    except Exception as err:  # the libraries raise many kinds on bad arguments
        lines = str(err).strip().splitlines()
        raise ModuleError(f"{prefix}:{name} cannot be built with these arguments: "
                          f"{type(err).__name__}: {lines[0][:200] if lines else ''}") from None


# --- torchvision ----------------------------------------------------------------------------------
def _torchvision(name: str, arguments: dict[str, Any]) -> ModuleSource:
    import torchvision
    from torchvision import models

    known = models.list_models(module=models)
    if name not in known:
        raise _unknown("torchvision", name, known)
    size = torchvision_image_size(name)
    fixed = name.startswith(FIXED_SIZE_PREFIXES)
    dims: tuple[int | str, ...] = (BATCH, 3, size, size) if fixed else (BATCH, 3, "H", "W")
    notes = [f"torchvision.models.{name}(weights=None): no weights loaded",
             f"input x = (B, 3, {size}, {size}), its weights' crop size" + (" (the only size it takes)" if fixed else "")]
    return ModuleSource(
        label=f"torchvision:{name}", origin="torchvision", build=library_builder("torchvision", name),
        arguments=arguments, inputs=(Input("x", dims),), sizes={} if fixed else {"H": size, "W": size},
        loss="cross-entropy", fingerprint=("torchvision", torchvision.__version__, name),
        task="image-classification", notes=tuple(notes))


def torchvision_image_size(name: str) -> int:
    """The crop size of a torchvision classifier's default weights (299 for inception_v3), IMAGE_SIZE without."""
    from torchvision import models

    try:
        weights = models.get_model_weights(name).DEFAULT
    except (ValueError, KeyError, AttributeError):
        return IMAGE_SIZE
    crop = getattr(weights.transforms, "keywords", {}).get("crop_size")
    return int(crop[0] if isinstance(crop, (list, tuple)) else crop) if crop else IMAGE_SIZE


def _torchvision_build(arguments: Mapping[str, Any], *, name: str) -> Any:
    torch_env.ready()
    from torchvision import models

    return _built("torchvision", name, lambda: models.get_model(name, weights=None, **arguments))


# --- timm -----------------------------------------------------------------------------------------
def _timm(name: str, arguments: dict[str, Any]) -> ModuleSource:
    import timm

    if not timm.is_model(name):
        raise _unknown("timm", name, timm.list_models())
    cfg = timm.get_pretrained_cfg(name)
    channels, height, width = (tuple(cfg.input_size) if cfg is not None and cfg.input_size
                               else (3, IMAGE_SIZE, IMAGE_SIZE))
    channels = int(arguments.get("in_chans", channels))
    fixed = bool(cfg is not None and cfg.fixed_input_size) and "img_size" not in arguments
    dims: tuple[int | str, ...] = (BATCH, channels, height, width) if fixed else (BATCH, channels, "H", "W")
    notes = [f"timm.create_model({name!r}, pretrained=False): no weights loaded",
             f"input x = (B, {channels}, {height}, {width}), its pretrained_cfg input_size"
             + (" (fixed_input_size: the only size it takes)" if fixed else "")]
    return ModuleSource(
        label=f"timm:{name}", origin="timm", build=library_builder("timm", name),
        arguments=arguments, inputs=(Input("x", dims),), sizes={} if fixed else {"H": height, "W": width},
        loss="cross-entropy", fingerprint=("timm", timm.__version__, name),
        task="image-classification", notes=tuple(notes))


def _timm_build(arguments: Mapping[str, Any], *, name: str) -> Any:
    torch_env.ready()
    import timm

    return _built("timm", name, lambda: timm.create_model(name, pretrained=False, **arguments))


# --- diffusers ------------------------------------------------------------------------------------
def _diffusers(name: str, config: dict[str, Any]) -> ModuleSource:
    import diffusers

    known = sorted(n for n in diffusers._import_structure.get("models", ()) if n[:1].isupper())
    cls = getattr(diffusers, name, None) if name in known else None
    if not (isinstance(cls, type) and issubclass(cls, diffusers.ModelMixin)):
        raise _unknown("diffusers", name, known)
    resolved = _diffusers_config(cls, name, config)
    inputs, sizes = diffusers_inputs(cls, resolved)
    return ModuleSource(
        label=f"diffusers:{name}", origin="diffusers", build=library_builder("diffusers", name),
        arguments=config, inputs=inputs, sizes=sizes, loss="mse",
        fingerprint=("diffusers", diffusers.__version__, name), task=name,
        notes=(f"diffusers.{name}.from_config: no weights loaded",
               "inputs " + ", ".join(f"{i.name}={_shape(i)}" for i in inputs)))


def _diffusers_config(cls: Any, name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The full config (the class's defaults under the given fields), read from its ``__init__`` signature."""
    params = inspect.signature(cls.__init__).parameters
    unknown = sorted(k for k in config if k not in params and not k.startswith("_"))
    if unknown and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        close = get_close_matches(unknown[0], list(params), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ModuleError(f"diffusers:{name} takes no argument {unknown[0]!r}{hint}")
    defaults = {k: p.default for k, p in params.items()
                if k != "self" and p.default is not inspect.Parameter.empty}
    return {**defaults, **config}


def diffusers_inputs(cls: Any, config: Mapping[str, Any]) -> tuple[tuple[Input, ...], dict[str, int]]:
    """(inputs, default sizes) of a diffusers model's forward, from its parameters and config."""
    params = inspect.signature(cls.forward).parameters
    latent = not cls.__name__.startswith("Autoencoder")
    height, width = ("h", "w") if latent else ("H", "W")
    size = config.get("sample_size") or 64
    rows, cols = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    channels = int(config.get("in_channels") or 4)
    if _square(cls, config):
        width, cols = height, rows
    image = (BATCH, channels, height, width)
    inputs = []
    for key in ("sample", "hidden_states"):
        if key in params:
            inputs.append(Input(key, image))
            break
    else:
        raise ModuleError(f"diffusers:{cls.__name__}'s forward takes no sample or hidden_states input")
    if "timestep" in params:
        inputs.append(Input("timestep", (BATCH,), "int64", int(config.get("num_train_timesteps") or TIMESTEPS)))
    sizes = {height: rows, width: cols}
    cross = config.get("cross_attention_dim")
    if "encoder_hidden_states" in params and cross:
        width_ = int(cross[0] if isinstance(cross, (list, tuple)) else cross)
        inputs.append(Input("encoder_hidden_states", (BATCH, "S", width_)))
        sizes["S"] = TEXT_TOKENS
    classes = config.get("num_embeds_ada_norm") if config.get("norm_type") == "ada_norm_zero" else None
    classes = classes or config.get("num_class_embeds")
    if "class_labels" in params and classes:
        inputs.append(Input("class_labels", (BATCH,), "int64", int(classes)))
    return tuple(inputs), sizes


def _square(cls: Any, config: Mapping[str, Any]) -> bool:
    """Whether the model's forward takes only square latents (one size name for both sides).

    DiT and a patched Transformer2DModel unpatchify with ``height = width = int(tokens ** 0.5)``
    (diffusers 0.42.1, ``models/transformers/dit_transformer_2d.py`` and ``transformer_2d.py``).
    """
    return cls.__name__ in SQUARE and config.get("patch_size") is not None


def _diffusers_build(arguments: Mapping[str, Any], *, name: str) -> Any:
    torch_env.ready()
    import diffusers

    cls = getattr(diffusers, name)
    return _built("diffusers", name, lambda: cls.from_config(dict(arguments)))


def _shape(item: Input) -> str:
    return "(" + ",".join(str(d) for d in item.dims) + ")"
