"""QLoRA for a torch module (issue 29): bitsandbytes' NF4 ``Linear4bit`` under peft's adapters.

What users run (transformers' ``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)``, then peft): every linear
layer becomes ``bnb.nn.Linear4bit`` (NF4 codes, one absmax per 64 numbers, the absmax quantized
again per 256), the rest of the module stays bf16, and peft's LoRA wraps the targets in its own
``lora.bnb.Linear4bit``. Which linears: transformers' ``replace_with_bnb_linear`` rule, every module
whose type is exactly ``nn.Linear`` (a subclass such as nn.MultiheadAttention's out_projection is
left alone); for a transformers model less ``get_keys_to_not_convert`` (tied weights, an LM's
output embeddings, the last parameter's name: "classifier.bias" names no module, so a classifier's
head is quantized too), matched by transformers' ``should_convert_module``. A user's module has no
head name: every ``nn.Linear`` is quantized.

On the meta device bitsandbytes' own ``quantize_4bit`` runs (its fake kernels give the codes and
the nested statistics their shapes), so the module holds real ``Linear4bit`` layers with meta data
and peft dispatches its 4-bit wrapper (which clones the base output). Their forward reaches
``bitsandbytes::gemm_4bit``, whose fake kernel makes only the output; ``expanding`` runs that op as
its CPU kernel does (``backends.default.ops._gemm_4bit_default_impl``: the nested absmax
dequantized to fp32, the bf16 weight dequantized, ``F.linear``), so the transient dequantized
weight is seen. ``MatMul4Bit`` saves nothing through ``save_for_backward`` (the packed weight in a
``ctx`` attribute, not its input); its backward dequantizes the weight again (``F.dequantize_4bit``)
and multiplies: both run as they are on the meta device.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from .. import torch_env
from .source import ModuleError

BLOCK = 64  # bnb_4bit's blocksize (Params4bit's default)


def _bnb() -> Any:
    """bitsandbytes; one line when it is not installed."""
    try:
        with torch_env.quiet_imports():
            import bitsandbytes
    except ImportError:
        raise ModuleError("--qlora needs bitsandbytes (pip install bitsandbytes)") from None
    return bitsandbytes


def skipped(module: Any) -> list[str]:
    """The modules transformers keeps unquantized in a transformers model (none in any other module)."""
    loaded = sys.modules.get("transformers")  # a module built from transformers' classes has imported it
    if loaded is None or not isinstance(module, loaded.PreTrainedModel):
        return []
    with torch_env.quiet_imports():  # its quantizers import torchao, which prints on stderr
        from transformers.quantizers.base import get_keys_to_not_convert
    return list(get_keys_to_not_convert(module))


def quantized_names(module: Any) -> list[str]:
    """The linears QLoRA stores in 4 bits: type exactly nn.Linear, less transformers' skipped modules."""
    import torch

    skip = skipped(module)
    if skip:
        from transformers.quantizers.quantizers_utils import should_convert_module
    else:
        def should_convert_module(name: str, patterns: Any) -> bool:
            return True
    return [name for name, sub in module.named_modules()
            if name and type(sub) is torch.nn.Linear and should_convert_module(name, skip)]


def quantize(module: Any, label: str = "the module") -> Any:
    """``module`` with its linears (``quantized_names``) replaced by NF4 ``Linear4bit``s quantized from their weights."""
    bnb = _bnb()
    names = quantized_names(module)
    if not names:
        raise ModuleError(f"--qlora on {label}: it has no nn.Linear layer to store in 4 bits")
    with _maps_kept(bnb.functional):
        for name in names:
            _replace(module, name, bnb)
    module.is_loaded_in_4bit = True  # as transformers marks a 4-bit model: peft then wraps with its lora.bnb.Linear4bit
    return module


@contextlib.contextmanager
def _maps_kept(functional: Any) -> Iterator[None]:
    """bitsandbytes' cache of quantization maps as it was: it keeps a map on the device of its first use
    (``functional.name2qmap``), and one made on the meta device would break a later real quantization."""
    before = dict(functional.name2qmap)
    try:
        yield
    finally:
        functional.name2qmap.clear()
        functional.name2qmap.update(before)


def _replace(module: Any, name: str, bnb: Any) -> None:
    """The linear ``name`` of ``module`` replaced by an NF4 ``Linear4bit`` quantized from its weight."""
    import torch

    old = module.get_submodule(name)
    new = bnb.nn.Linear4bit(old.in_features, old.out_features, old.bias is not None, torch.bfloat16,
                            compress_statistics=True, quant_type="nf4", device="meta")
    weight = old.weight.data.to(torch.bfloat16).contiguous()  # as transformers loads it: its quant_state bf16
    codes, state = bnb.functional.quantize_4bit(weight, blocksize=BLOCK,
                                                compress_statistics=True, quant_type="nf4",
                                                quant_storage=torch.uint8)
    new.weight = bnb.nn.Params4bit(codes, requires_grad=False, quant_state=state, blocksize=BLOCK,
                                   compress_statistics=True, quant_type="nf4", quant_storage=torch.uint8,
                                   module=new, bnb_quantized=True)
    new.quant_state = state
    if old.bias is not None:  # in the compute dtype, as Linear4bit.forward leaves it (``bias.data = bias.data.to(...)``)
        new.bias = torch.nn.Parameter(old.bias.data.to(torch.bfloat16), requires_grad=False)
    new.requires_grad_(False)
    new.train(old.training)
    module.set_submodule(name, new)


def linear4bit_biases(module: Any) -> int:
    """Elements of the ``Linear4bit`` layers' biases: bf16 whatever the rest is (the forward casts them, see ``_replace``)."""
    import bitsandbytes as bnb

    return sum(int(sub.bias.numel()) for _, sub in module.named_modules()
               if isinstance(sub, bnb.nn.Linear4bit) and sub.bias is not None)


def linear4bit_layers(module: Any) -> list[tuple[str, int]]:
    """(name, weight elements) of each ``Linear4bit`` in ``module`` (peft's wrapper's base layer named as peft has it)."""
    if "bitsandbytes" not in sys.modules:
        return []
    import bitsandbytes as bnb

    return [(name, int(sub.in_features) * int(sub.out_features)) for name, sub in module.named_modules()
            if isinstance(sub, bnb.nn.Linear4bit)]


@contextlib.contextmanager
def expanding(module: Any) -> Iterator[None]:
    """``bitsandbytes::gemm_4bit`` run as its CPU kernel runs it (see the module docstring), where ``module`` has one."""
    if not linear4bit_layers(module):
        yield
        return
    import torch
    from bitsandbytes.backends.default.ops import _gemm_4bit_default_impl
    from torch.utils._python_dispatch import TorchDispatchMode

    gemm = torch.ops.bitsandbytes.gemm_4bit.default

    class _Expand(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            if func is gemm:
                return _gemm_4bit_default_impl(*args, **(kwargs or {}))
            return func(*args, **(kwargs or {}))

    with _Expand():
        yield
