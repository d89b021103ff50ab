"""The weight format a checkpoint ships in, read from its config's ``quantization_config``.

``read(config)`` gives a ``Quantization`` (a ``symbolic.formats`` weight format, the group size
where the config sets one, and the matrix roles its ``modules_to_not_convert`` / ``ignore`` /
``llm_int8_skip_modules`` keep unquantised) or None when the config has no quantization_config.
The fields read, per ``quant_method`` (as transformers' ``utils/quantization_config.py`` names them):

- ``fp8``: ``weight_block_size`` [b, b] -> ``fp8-block`` (DeepSeek-V3: [128, 128]), else ``fp8``
  (one scale per tensor); ``fmt`` e4m3 or e5m2 and ``activation_scheme`` do not change the bytes;
- ``mxfp4`` (gpt-oss) -> ``mxfp4``;
- ``gptq``: ``bits`` 2/3/4/8 -> ``gptq-int<bits>``, ``group_size`` (-1: one group per row);
  ``desc_act`` only orders the groups (g_idx is stored either way);
- ``awq``: ``bits`` / ``w_bit`` 4 -> ``awq-int4``, ``group_size`` / ``q_group_size``;
- ``bitsandbytes``: ``load_in_4bit`` with ``bnb_4bit_quant_type`` nf4/fp4 and
  ``bnb_4bit_use_double_quant`` -> ``nf4``, ``nf4-dq``, ``fp4``, ``fp4-dq``; ``load_in_8bit`` -> ``bnb-int8``;
- ``compressed-tensors``: one scheme in ``config_groups`` whose ``weights`` say ``type``,
  ``num_bits``, ``strategy`` and ``group_size``: float 8 tensor/channel/block -> ``fp8``,
  ``fp8-channel``, ``fp8-block``; float 4 group 16 -> ``nvfp4``; float 4 group 32 -> ``mxfp4``.

Anything else is kept as a one-line error (``Quantization.error``), raised only when the shipped
format is asked for (``shipped_format``): ``--weights`` still plans such a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import UserError

METHODS = ("fp8", "mxfp4", "gptq", "awq", "bitsandbytes", "compressed-tensors")
_SKIP_KEYS = ("modules_to_not_convert", "ignore", "llm_int8_skip_modules")


class QuantizationConfigError(UserError):
    """A quantization_config this project cannot turn into a stored format: one line, exit 2."""


@dataclass(frozen=True)
class Quantization:
    """What a config's quantization_config says about how the checkpoint stores its weights."""

    format: str | None  # a symbolic.formats weight format (None: see ``error``)
    method: str  # the quant_method as the config says it
    group: int | None = None  # the group size (or block side) the config sets; -1: one group per row
    kept: tuple[str, ...] = ()  # matrix roles (formats.MATRIX_ROLES) the config keeps unquantised
    error: str = ""  # why the config cannot be read, one line

    def describe(self) -> str:
        """'quant_method gptq, group_size 32', for notes."""
        out = f"quant_method {self.method}"
        if self.group:
            out += f", group size {self.group if self.group > 0 else 'one per row'}"
        if self.kept:
            out += f", kept unquantised: {', '.join(self.kept)}"
        return out


def read(config: Mapping[str, Any]) -> Quantization | None:
    """The config's quantization_config as a stored format (None without one; ``error`` set when unreadable)."""
    q = config.get("quantization_config")
    if q is None:
        return None
    method = str(q.get("quant_method", "")) if isinstance(q, Mapping) else ""
    try:
        if not isinstance(q, Mapping):
            raise QuantizationConfigError("quantization_config must be a table of fields")
        fmt, group = _FORMAT_OF.get(method, _unknown)(q)
    except QuantizationConfigError as e:
        return Quantization(None, method, error=f"{config.get('model_type', 'this model')}'s quantization_config: {e}")
    return Quantization(fmt, method, group, _kept_roles(q))


def shipped_format(network: object) -> str | None:
    """The format the network's checkpoint ships in (None: no quantization_config); its one-line error otherwise."""
    q = getattr(network, "quantization_rules", None)
    if q is not None and q.error:
        raise QuantizationConfigError(f"{q.error}; choose a format with --weights")
    return getattr(network, "quantization", None)


# the roles of the matrix names a family table gives (networks.shape._matrices), by their first part
_TABLE_ROLES = {"embedding": "embedding", "positions": "embedding", "token_types": "embedding", "lm_head": "lm_head",
                "attention": "attention", "conv": "other", "dense": "mlp"}


def matrix_role(name: str, moe: bool) -> str:
    """The role (formats.MATRIX_ROLES) of a matrix: a family table's name ('attention.q', 'mlp.up') or a module path."""
    if name == "moe.router":
        return "router"
    first = name.split(".")[0]
    if first == "mlp":  # a family table's MLP: the routed experts of a mixture of experts
        return "experts" if moe else "mlp"
    if first == "moe":
        return "shared"
    if first in _TABLE_ROLES:
        return _TABLE_ROLES[first]
    low, last = name.lower(), name.lower().rsplit(".", 1)[-1]
    for role, words in (("embedding", ("embed", "wte", "wpe")), ("lm_head", ("lm_head",)), ("router", ("router",)),
                        ("shared", ("shared",)), ("attention", ("attn", "attention")), ("experts", ("expert",)),
                        ("mlp", ("mlp", "ffn", "fc"))):
        if any(w in low for w in words) or (role == "router" and last == "gate"):
            return role
    return "other"


def _kept_roles(q: Mapping[str, Any]) -> tuple[str, ...]:
    """The matrix roles a config's skip list names (module paths such as 'model.layers.*.self_attn')."""
    found: list[str] = []
    for key in _SKIP_KEYS:
        names = q.get(key) or ()
        for name in names if isinstance(names, (list, tuple)) else ():
            role = matrix_role(str(name).removeprefix("re:"), moe=False)
            if role != "other" and role not in found:
                found.append(role)
    return tuple(found)


def _int(q: Mapping[str, Any], *keys: str, default: int | None = None) -> int | None:
    for key in keys:
        value = q.get(key)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool):
                raise QuantizationConfigError(f"{key} must be a whole number, got {value!r}")
            return value
    return default


def _fp8(q: Mapping[str, Any]) -> tuple[str, int | None]:
    block = q.get("weight_block_size")
    if block is None:
        return "fp8", None
    if not (isinstance(block, (list, tuple)) and len(block) == 2 and block[0] == block[1]
            and isinstance(block[0], int) and block[0] > 0):
        raise QuantizationConfigError(f"weight_block_size {block!r}: square blocks [b, b] are modelled")
    return "fp8-block", block[0]


def _gptq(q: Mapping[str, Any]) -> tuple[str, int | None]:
    bits = _int(q, "bits", default=4)
    if bits not in (2, 3, 4, 8):
        raise QuantizationConfigError(f"gptq bits {bits}: 2, 3, 4 and 8 are modelled")
    group = _int(q, "group_size", default=128)
    if group == 0 or (group is not None and group < -1):
        raise QuantizationConfigError(f"gptq group_size {group}: a positive size or -1 (one group per row)")
    return f"gptq-int{bits}", group


def _awq(q: Mapping[str, Any]) -> tuple[str, int | None]:
    bits = _int(q, "bits", "w_bit", default=4)
    if bits != 4:
        raise QuantizationConfigError(f"awq bits {bits}: 4 is modelled")
    version = str(q.get("version", "gemm")).lower()
    if version not in ("gemm", "gemv_fast", "gemv", "exllama", "marlin", "ipex"):
        raise QuantizationConfigError(f"awq version {version!r} is not known")
    group = _int(q, "group_size", "q_group_size", default=128)
    if group is None or group < 1:
        raise QuantizationConfigError(f"awq group_size {group}: a positive size")
    return "awq-int4", group


def _bnb(q: Mapping[str, Any]) -> tuple[str, int | None]:
    if q.get("load_in_8bit"):
        return "bnb-int8", None
    if not q.get("load_in_4bit"):
        raise QuantizationConfigError("bitsandbytes without load_in_4bit or load_in_8bit")
    kind = str(q.get("bnb_4bit_quant_type", "fp4"))
    if kind not in ("nf4", "fp4"):
        raise QuantizationConfigError(f"bnb_4bit_quant_type {kind!r}: nf4 or fp4")
    return kind + ("-dq" if q.get("bnb_4bit_use_double_quant") else ""), None


def _compressed(q: Mapping[str, Any]) -> tuple[str, int | None]:
    groups = q.get("config_groups")
    schemes = [g.get("weights") for g in groups.values() if isinstance(g, Mapping)] if isinstance(groups, Mapping) \
        else []
    if len(schemes) != 1 or not isinstance(schemes[0], Mapping):
        raise QuantizationConfigError("compressed-tensors: one weight scheme in config_groups is modelled")
    w = schemes[0]
    kind, bits, strategy = w.get("type"), w.get("num_bits"), w.get("strategy")
    group = w.get("group_size")
    if kind == "float" and bits == 8 and strategy in ("tensor", "channel"):
        return ("fp8" if strategy == "tensor" else "fp8-channel"), None
    if kind == "float" and bits == 8 and strategy == "block":
        return _fp8({"weight_block_size": w.get("block_structure")})
    if kind == "float" and bits == 4 and strategy in ("group", "tensor_group") and group in (16, 32):
        return ("nvfp4" if group == 16 else "mxfp4"), None
    raise QuantizationConfigError(f"compressed-tensors weights type {kind}, num_bits {bits}, strategy {strategy}"
                                  f"{f', group_size {group}' if group else ''} are not modelled (fp8 per tensor, "
                                  "channel or block; fp4 in groups of 16 or 32)")


def _mxfp4(q: Mapping[str, Any]) -> tuple[str, int | None]:
    return "mxfp4", None


def _unknown(q: Mapping[str, Any]) -> tuple[str, int | None]:
    raise QuantizationConfigError(f"unknown quant_method {q.get('quant_method')!r}; known: {', '.join(METHODS)}")


_FORMAT_OF = {"fp8": _fp8, "mxfp4": _mxfp4, "gptq": _gptq, "awq": _awq, "bitsandbytes": _bnb,
              "compressed-tensors": _compressed}
