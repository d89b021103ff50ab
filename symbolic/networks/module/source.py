"""What a module network is made from: how to build the module and what its forward takes (issue 29).

A ``ModuleSource`` is the one thing every way in produces (a user's ``PATH.py:NAME``, a library
model such as ``torchvision:resnet50``, a transformers config with its task): a builder called
with keyword arguments under ``torch.device("meta")``, the arguments (their integers are the sizes
the probes vary), the forward's inputs, and what the loss is. The probes (saved tensors, the
step's peak) and the ``Network`` read only this, never where it came from.

An input's dimensions are numbers or size names: ``"B"`` is the batch (``--batch``); any other
name (``"S"``, ``"H"``, ``"W"``, ``"T"``...) is an input size whose value ``sizes`` holds and the
probes vary. Nothing here parses a user string into an expression: names are matched, numbers
read as integers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.errors import UserError

BATCH = "B"
SIZE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
# the torch dtype names an input may carry (``--input NAME=D1,D2:DTYPE``)
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")
INTEGER_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "bool")
# what ``loss`` may name when the forward does not return the loss itself
LOSSES = ("sum", "mean", "mse", "cross-entropy")


class ModuleError(UserError):
    """A module source that cannot be built, given inputs or run; the message is one line."""


@dataclass(frozen=True)
class Input:
    """One input of the forward: its keyword name, dimensions (numbers or size names) and dtype.

    ``dtype`` None is a floating input in the compute precision; ``high`` bounds an integer
    input's values (token ids below the vocabulary, class labels below the class count).
    """

    name: str
    dims: tuple[int | str, ...]
    dtype: str | None = None
    high: int | None = None

    def shape(self, batch: int, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """The concrete shape at a batch and input sizes (an unknown size name is a ModuleError)."""
        out = []
        for dim in self.dims:
            if isinstance(dim, int):
                out.append(dim)
            elif dim == BATCH:
                out.append(batch)
            elif dim in sizes:
                out.append(int(sizes[dim]))
            else:
                raise ModuleError(f"input {self.name!r}: size {dim!r} has no value (give it with --set {dim}=N)")
        return tuple(out)

    @property
    def size_names(self) -> tuple[str, ...]:
        """The size names other than the batch this input's shape depends on."""
        return tuple(d for d in self.dims if isinstance(d, str) and d != BATCH)


@dataclass(frozen=True)
class ModuleSource:
    """How to build a module and feed it: the one thing the module probes and network read.

    - ``label``: as shown ("net.py:MLP", "torchvision:resnet50", "t5 (T5ForConditionalGeneration)");
    - ``origin``: where it came from, shown only ("file", "torchvision", "timm", "diffusers", "transformers");
    - ``build``: arguments -> the module, called under ``torch.device("meta")`` (and on the CPU to measure);
    - ``arguments``: the keyword arguments (nested mappings allowed, as a transformers config's);
      their integer leaves are the sizes the parameter probes vary;
    - ``inputs``: the forward's keyword inputs; ``sizes``: the default value of each size name;
    - ``loss``: None when the forward returns the loss (a scalar tensor, or an output with a ``loss``),
      else one of ``LOSSES`` applied to the output;
    - ``fingerprint``: what a cached probe is keyed by besides the arguments (a hash of the source
      file, the library and its version);
    - ``task``: the model class or task said in the output (transformers' ``--task``), or None;
    - ``notes``: lines the output shows (the class chosen, defaults taken from the config);
    - ``extra``: (batch, sizes, device) -> keyword arguments besides ``inputs``: constants (CLIP's
      ``return_loss=True``) and values the forward reads (a VLM's token ids with its image
      placeholders, Qwen2-VL's ``image_grid_thw`` as a CPU tensor); None for none;
    - ``extra_sizes``: size names the ``extra`` inputs read besides those of ``inputs`` (a VLM's
      ``S``, ``n_img``, ``H_img``, ``W_img``, whose inputs are all built by ``extra``);
    - ``checkpoint``: the modules ``--recompute full`` checkpoints and FSDP2 shards, by qualified name or
      class name (``--checkpoint-modules``); () for the repeated stack ``checkpointing.repeated`` finds.
    - ``adapt``: module -> module, applied after the probes build and cast it (LoRA's adapters,
      ``lora.adapted``); None for none.
    """

    label: str
    origin: str
    build: Callable[[Mapping[str, Any]], Any]
    arguments: Mapping[str, Any]
    inputs: tuple[Input, ...]
    sizes: Mapping[str, int] = field(default_factory=dict)
    loss: str | None = None
    fingerprint: tuple[str, ...] = ()
    task: str | None = None
    notes: tuple[str, ...] = ()
    extra: Callable[[int, Mapping[str, int], str], Mapping[str, Any]] | None = None
    extra_sizes: tuple[str, ...] = ()
    checkpoint: tuple[str, ...] = ()
    adapt: Callable[[Any], Any] | None = None

    @property
    def size_names(self) -> tuple[str, ...]:
        """Every size name the inputs use besides the batch, in order of first use."""
        seen: dict[str, None] = {}
        for item in self.inputs:
            for name in item.size_names:
                seen.setdefault(name, None)
        for name in self.extra_sizes:
            seen.setdefault(name, None)
        return tuple(seen)


def make_inputs(source: ModuleSource, batch: int, sizes: Mapping[str, int] | None = None, *,
                device: str = "meta", float_dtype: Any = None) -> dict[str, Any]:
    """The forward's keyword inputs at a batch and sizes, on a device (integers zeros; floats in float_dtype)."""
    import torch

    values = {**source.sizes, **(sizes or {})}
    floating = float_dtype if float_dtype is not None else torch.float32
    out: dict[str, Any] = {}
    for item in source.inputs:
        shape = item.shape(batch, values)
        dtype = getattr(torch, item.dtype) if item.dtype else floating
        if dtype.is_floating_point:
            out[item.name] = (torch.empty(shape, dtype=dtype, device=device) if device == "meta"
                              else torch.randn(shape, dtype=dtype, device=device))
        elif device == "meta":
            out[item.name] = torch.empty(shape, dtype=dtype, device=device)
        else:
            high = item.high if item.high else 2
            out[item.name] = torch.randint(0, high, shape, dtype=dtype, device=device)
    if source.extra is not None:
        out.update(source.extra(batch, values, device))
    return out


def loss_of(output: Any, loss: str | None) -> Any:
    """The scalar loss of a forward's output: the output itself, its ``loss``, or ``loss`` applied to it."""
    import torch

    if loss is None:
        if isinstance(output, torch.Tensor) and output.dim() == 0:
            return output
        value = getattr(output, "loss", None)
        if value is None and isinstance(output, Mapping):
            value = output.get("loss")
        if isinstance(value, torch.Tensor) and value.dim() == 0:
            return value
        raise ModuleError("the forward does not return a scalar loss: name one with --loss "
                          f"({', '.join(LOSSES)}), or return the loss from the module")
    tensor = _first_tensor(output)
    if loss == "sum":
        return tensor.float().sum() if not tensor.dtype.is_floating_point else tensor.sum()
    if loss == "mean":
        return tensor.mean()
    if loss == "mse":
        return torch.nn.functional.mse_loss(tensor, torch.zeros_like(tensor))
    if loss == "cross-entropy":
        logits = tensor.reshape(-1, tensor.shape[-1])
        target = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
        return torch.nn.functional.cross_entropy(logits, target)
    raise ModuleError(f"unknown loss {loss!r}; choose from {', '.join(LOSSES)}")


def _first_tensor(output: Any) -> Any:
    """The output tensor a named loss applies to: the tensor, a model output's logits or first tensor."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    for key in ("logits", "last_hidden_state", "sample", "prediction_logits"):
        value = getattr(output, key, None)
        if value is None and isinstance(output, Mapping):
            value = output.get(key)
        if isinstance(value, torch.Tensor):
            return value
    items = output.values() if isinstance(output, Mapping) else output if isinstance(output, (tuple, list)) else ()
    for value in items:
        if isinstance(value, torch.Tensor):
            return value
    raise ModuleError(f"the forward returns {type(output).__name__}, not a tensor a loss can apply to")
