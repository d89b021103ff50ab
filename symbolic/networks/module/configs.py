"""Which Hugging Face configs are planned as a task's torch module, and a VLM's image options (issue 29).

A config goes to ``transformers_task.transformers_source`` when a task is named (``--task``) or
when the class the generic path would build is not a causal LM: its ``architectures`` entry names
a transformers class outside the causal-LM mapping (``T5ForConditionalGeneration``,
``BertForSequenceClassification``, ``Qwen2_5_VLForConditionalGeneration``), or it names none and
its model_type has no causal-LM class (ViT, CLIP). Table families, causal LMs and vision-language
types whose inputs ``vlm`` does not build stay where they were. ``image_sizes`` turns ``--images N
--image-size H,W`` into the source's size values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..generic import probes
from ..generic.network import is_table_family
from . import vlm
from .source import ModuleError, ModuleSource


def wants_task(config: Mapping[str, Any], task: str | None) -> bool:
    """Whether ``config`` is planned as a task's module rather than by a family table or the generic causal path."""
    if task:
        return True
    if is_table_family(config) or not probes.torch_available():
        return False
    causal = probes.causal_lm_classes()
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in probes.known_types():
        return False  # the generic path's own answer (an unknown type is its one-line error)
    if _vision_language(model_type) and model_type not in (*vlm.BUILT, *vlm.ENCODER_DECODER):
        return False  # a VLM whose inputs are not built stays on the generic path (its text model)
    names = config.get("architectures")
    named = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None
    if named is not None and named in _task_class_names():
        return named not in causal.values()
    return model_type not in causal


def _vision_language(model_type: str) -> bool:
    from .transformers_task import task_classes

    return model_type in task_classes("image-text-to-text")


def _task_class_names() -> frozenset[str]:
    """Every class name of the tasks' auto mappings (read from transformers' source, not imported)."""
    from .transformers_task import TASKS, task_classes

    return frozenset(name for task in TASKS for name in task_classes(task).values())


def image_size(text: str) -> tuple[int, int]:
    """``--image-size H,W`` as two positive integers (one line otherwise)."""
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ModuleError(f"--image-size {text!r}: give H,W as two positive integers (e.g. 448,448)")
    return int(parts[0]), int(parts[1])


def image_sizes(source: ModuleSource, images: int | None, size: tuple[int, int] | None) -> dict[str, int]:
    """The sizes ``--images N --image-size H,W`` give ``source``: a VLM's n_img, H_img, W_img, an image model's H, W."""
    names = set(source.size_names)
    out: dict[str, int] = {}
    if images is not None:
        if "n_img" not in names:
            raise ModuleError(f"--images: {source.label} takes no images in its text (a vision-language model does)")
        out["n_img"] = images
    if size is not None:
        keys = next((k for k in (("H_img", "W_img"), ("H", "W")) if set(k) <= names), None)
        if keys is None:
            raise ModuleError(f"--image-size: {source.label} takes no image")
        out.update(zip(keys, size))
    return out
