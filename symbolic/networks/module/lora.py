"""LoRA fine-tuning of a torch module, with peft's own code (issue 29).

A LoRA step is probed as a full step is (``probe.fit_step``), on a source whose module gets its
adapters from ``peft.inject_adapter_in_model(LoraConfig(r, target_modules, lora_dropout))`` after
it is built on the meta device and cast to the step's dtype (``ModuleSource.adapt``): peft picks
the targets (a module whose full name is a target or ends with "." + it; ``all-linear`` every
``nn.Linear`` but a transformers model's output embeddings, its LM head), wraps Linear, Conv and
Embedding layers, and freezes every base parameter. The adapters are then cast to
``--adapter-dtype`` (fp32 by default, as ``get_peft_model``'s ``autocast_adapter_dtype`` keeps
them on a 16-bit base). ``LoraConfig``'s other settings are peft's defaults (``lora_alpha`` 8). What autograd saves and what is live are measured, as for full training;
the adapters' tensors (``Adapters``) are read off the adapted module.

A target that matches nothing, or a module peft cannot wrap, is one line naming the module's
layers (peft's ValueError never reaches the user).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...formats import table as formats
from .. import torch_env
from . import cache, qlora
from .source import ModuleError, ModuleSource

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # --adapter-dtype -> torch dtype
SHOWN = 12  # module names an error lists before "..."


@dataclass(frozen=True)
class Spec:
    """The LoRA settings of a step: rank, peft's ``target_modules``, ``lora_dropout``, the adapters' dtype."""

    rank: int
    targets: tuple[str, ...]
    dropout: float = 0.0
    dtype: str = "fp32"
    qlora: bool = False  # the base's linears in NF4 (``qlora.py``)

    def key(self) -> list[Any]:
        """What a cached probe of this step is keyed by besides the source (a LoRA key of before without QLoRA)."""
        return ["lora", self.rank, list(self.targets), self.dropout, self.dtype] + (["qlora"] if self.qlora else [])

    @property
    def element_bytes(self) -> int:
        """Bytes per adapter element (fp32 4, bf16 and fp16 2)."""
        return int(formats.nbytes(self.dtype))


@dataclass(frozen=True)
class Adapters:
    """What peft added: the modules it wrapped and the adapters' tensors (elements, ``named_parameters`` order);
    under QLoRA the elements of each weight stored in NF4 (``quantized``)."""

    modules: tuple[str, ...]
    tensors: tuple[int, ...]
    quantized: tuple[int, ...] = ()
    biases: int = 0  # elements of the NF4 linears' biases (bf16 under QLoRA whatever the rest is)

    @property
    def total(self) -> int:
        return sum(self.tensors)

    def to_data(self) -> dict[str, Any]:
        return {"modules": list(self.modules), "tensors": list(self.tensors), "quantized": list(self.quantized),
                "biases": self.biases}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Adapters:
        return cls(tuple(str(m) for m in data["modules"]), tuple(int(t) for t in data["tensors"]),
                   tuple(int(q) for q in data.get("quantized", ())), int(data.get("biases", 0)))


@contextlib.contextmanager
def _peft() -> Iterator[Any]:
    """peft, imported quietly (bitsandbytes logs its missing kernels at import) with torchvision made importable."""
    with torch_env.quiet_imports():
        import peft

        yield peft


def inject(module: Any, spec: Spec, label: str = "the module") -> Any:
    """``module`` with peft's LoRA adapters (in ``spec.dtype``) on its targets, every base weight frozen."""
    import torch

    layers = _layers(module)
    with _peft() as peft:
        config = peft.LoraConfig(r=spec.rank, lora_alpha=spec.rank, lora_dropout=spec.dropout,
                                 target_modules=_target_modules(spec.targets))
        device = next((p.device for p in module.parameters()), torch.device("cpu"))
        try:
            with torch.device(device):
                module = peft.inject_adapter_in_model(config, module)
        except (ValueError, TypeError, RuntimeError) as err:
            raise ModuleError(_no_match(label, spec.targets, layers, err)) from None
    wrapped = adapters_of(module).modules
    missing = [t for t in spec.targets if t != "all-linear" and not any(_matches(t, name) for name in wrapped)]
    if missing:  # peft ignores a target that matches nothing when another matches
        raise ModuleError(_no_match(label, missing, layers, ValueError("not found in the base model")))
    dtype = getattr(torch, DTYPES[spec.dtype])
    for p in module.parameters():
        if p.requires_grad and p.dtype != dtype:
            p.data = p.data.to(dtype)
    return module


def _matches(target: str, name: str) -> bool:
    """peft's rule for a list of names: the module's full name is ``target`` or ends with '.' + target."""
    return name == target or name.endswith("." + target)


def _target_modules(targets: Sequence[str]) -> list[str] | str:
    """peft's ``target_modules``: the string ``all-linear`` alone, else the list of names."""
    return "all-linear" if tuple(targets) == ("all-linear",) else list(targets)


def _layers(module: Any) -> list[str]:
    """The short names of the layers peft can wrap (Linear, Conv, Embedding), in order, each once."""
    import torch

    kinds = (torch.nn.Linear, torch.nn.modules.conv._ConvNd, torch.nn.Embedding)
    seen: dict[str, None] = {}
    for name, sub in module.named_modules():
        if name and isinstance(sub, kinds):
            seen.setdefault(name.rsplit(".", 1)[-1], None)
    return list(seen)


def _no_match(label: str, targets: Sequence[str], layers: Sequence[str], err: BaseException) -> str:
    """One line for targets peft refuses: what matched nothing (or peft's own first line), and the layers there are."""
    shown = ", ".join(layers[:SHOWN]) + (", ..." if len(layers) > SHOWN else "")
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if "not found in the base model" in text:
        what = f"no module of {label} matches LoRA target {', '.join(map(repr, targets))}"
    else:
        what = f"LoRA targets {', '.join(targets)} of {label}: peft refused them ({text})"
    return f"{what}; its Linear, Conv and Embedding layers are {shown or 'none'} (or all-linear)"


def adapters_of(module: Any) -> Adapters:
    """The wrapped modules and the trainable tensors of an adapted module."""
    wrapped = tuple(name for name, sub in module.named_modules() if hasattr(sub, "lora_A") and name)
    layers = qlora.linear4bit_layers(module)
    return Adapters(wrapped, tuple(int(p.numel()) for p in module.parameters() if p.requires_grad),
                    tuple(n for _, n in layers), qlora.linear4bit_biases(module) if layers else 0)


def adapted(source: ModuleSource, spec: Spec) -> ModuleSource:
    """The source whose built module gets peft's adapters (``ModuleSource.adapt``), keyed by the LoRA settings and peft."""
    def adapt(module: Any) -> Any:
        if spec.qlora:
            module = qlora.quantize(module, source.label)
        return inject(module, spec, source.label)

    version = f"peft {cache.package_version('peft')}"  # peft's version decides what it wraps and how
    if spec.qlora:  # and bitsandbytes' how its 4-bit layers quantize and compute
        version += f"; bitsandbytes {cache.package_version('bitsandbytes')}; biases counted"
    return replace(source, adapt=adapt, fingerprint=(*source.fingerprint, repr(spec.key()), version))
