"""The one interface everything above the library takes from a model: ``Network`` (issue 26).

A network says what the planner, ``fit``, ``time``, ``plan``, ``predict``, ``validate`` and the
reports need, so that none of them branches on a model's name or type string:

- who it is: ``name``, ``model_type`` (shown, never compared), ``kind`` (which implementation:
  ``"transformer"``, ``"generic"``, ``"article-a"``; shown in output), ``source``, ``config``;
- its parameters: ``params`` (the formula N), ``numbers`` (every symbol's value), ``total`` and
  ``active`` counts, ``first_stage`` and ``head`` (what pipeline stages and serving keep apart),
  ``experts`` (the routed experts' parameters);
- its layers: ``layer_kinds`` (kind -> how many layers), ``matrices`` (name, rows, columns, how
  many: LoRA, FLOPs, ZeRO-3's gathered module, Adafactor, weight formats);
- its capabilities: ``sequence`` (a token sequence: seq, attention, dropout and cache options
  apply), ``has_attention``, ``moe``, ``dropout_default``, ``pytorch_family`` (the library's
  saved-tensor model of it, or None), ``lora_layout``, ``lora_modules`` (the modules peft wraps
  for given targets) and ``lora_targets``, ``attention_bias``, ``checkpoint_blocks`` (the repeated
  blocks a network measuring its own step checkpoints under recompute full; () for the table
  families, whose layers the planner checkpoints itself) and ``fsdp_units`` (their parameters,
  FSDP2's units below the root; None for the table families);
- its terms: ``layer_activations`` and ``activations_label`` (one layer's bytes saved for backward, per phase the planner
  composes), ``serving_width`` (one layer's working set while serving), ``cache_terms`` (the
  serving cache), ``flop_parts`` (matmuls for ``time``), ``own_flops`` (a network's own counted FLOPs
  per sample and per module, which ``time`` takes instead: a torch module's), ``own_loss`` (the loss
  a torch module brings, shown in place of the planner's ``loss`` option);
- a forward of its own: ``forward_inference`` and ``inference_terms`` (inference as one forward pass,
  a probed torch module; None: the serving terms), ``generates`` (an encoder-decoder's generate loop),
  ``input_sizes`` and ``varying`` (the input sizes ``fit`` may grow, a module's H, W or S);
- its own symbols: ``scope`` (a generic model's config fields, outside the symbol table; None for
  the others);
- positions: ``positions`` (learned rows: a hard limit) and ``trained_context`` (a soft one);
- ``cannot_say``: by topic (``TOPICS``), one line for what it knows it cannot say there and why
  (the planner shows the training or serving line as a note, ``time`` the FLOPs line).

Three implementations: ``networks.shape.ModelShape`` (the transformer family tables),
``networks.generic.network.GenericNetwork`` (any transformers model type, from the real module
tree with torch) and article A's network (``networks.shape.article_a_shape``). All three are
``ModelShape``s: the planner also reads fields of ``ModelShape`` the protocol does not list (``heads``,
``kv_head_count``, ``tensor_parallel``, ``label``, ``spec``...) and ``time`` a spec-less network's
``flop_parts``, so a new kind of network subclasses ``ModelShape`` (as ``GenericNetwork`` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import sympy

from ..core.symbols import SymbolScope
from ..core.term import Term
from ..math.formula import Formula
from .gguf import load_network
from .gguf_config import is_gguf
from .shape import ARTICLE_A_MODELS, ModelShape
from .shape import load as shape_load

# the implementations, as ``Network.kind`` names them (output only: nothing compares them)
KINDS = ("transformer", "generic", "article-a")
# what ``Network.cannot_say`` is keyed by
TOPICS = ("activations", "serving", "flops")


@runtime_checkable
class Network(Protocol):
    """What every layer above the library reads from a model (see the module docstring)."""

    name: str
    model_type: str
    kind: str
    source: str
    numbers: dict[str, int]
    params: Formula
    first_stage: sympy.Expr
    head: sympy.Expr
    experts: sympy.Expr
    matrices: tuple[tuple[str, sympy.Expr, sympy.Expr, sympy.Expr], ...]
    positions: int
    config: Mapping[str, Any]
    sequence: bool
    has_attention: bool
    moe: bool
    gated: bool
    dropout_default: bool
    cannot_say: Mapping[str, str]

    @property
    def total(self) -> int: ...

    @property
    def active(self) -> int | None: ...

    @property
    def layer_kinds(self) -> dict[str, int]: ...

    @property
    def trained_context(self) -> int | None: ...

    @property
    def pytorch_family(self) -> str | None: ...

    @property
    def own_loss(self) -> str | None: ...

    @property
    def checkpoint_blocks(self) -> tuple[str, ...]: ...

    @property
    def fsdp_units(self) -> tuple[int, ...] | None: ...

    @property
    def fsdp_root_last(self) -> int: ...

    @property
    def forward_inference(self) -> bool: ...

    @property
    def generates(self) -> bool: ...

    @property
    def input_sizes(self) -> tuple[str, ...]: ...

    def inference_terms(self, regime: Any) -> Any: ...

    def varying(self, names: tuple[str, ...], regime: Any) -> Any: ...

    @property
    def lora_targets(self) -> tuple[str, ...]: ...

    @property
    def attention_bias(self) -> bool: ...

    def lora_layout(self) -> str: ...

    def lora_modules(self, targets: tuple[str, ...]) -> tuple[tuple[str, ...], bool]: ...

    def layer_activations(self, variant: Any, recompute: str, tp: sympy.Expr | int, sp: bool) -> sympy.Expr: ...

    def activations_label(self, variant: Any) -> str: ...

    def serving_width(self, tp: sympy.Expr | int) -> sympy.Expr: ...

    def cache_terms(self, tp: sympy.Expr | int, element: sympy.Expr, dtype: str,
                    pp: sympy.Expr | int) -> list[Term]: ...

    def value(self, expr: sympy.Expr) -> sympy.Rational: ...

    def widths(self) -> dict[sympy.Symbol, sympy.Expr]: ...

    @property
    def scope(self) -> SymbolScope | None: ...


def load(model: object) -> ModelShape:
    """The Network of a preset name, a config path, a GGUF file, a model type, a ModelSpec or a Network.

    "mlp" and "mlp-nobias" are article A's network and a config whose type has a family table a
    ``ModelShape`` of its ``ModelSpec`` (``shape.load``); a ``.gguf`` file that network carrying the
    file's tensors (``networks.gguf``); any other config is the generic torch path's
    (``networks.generic.network``: a one-line error without torch).
    """
    if isinstance(model, str) and is_gguf(model):  # a GGUF file: the table network, with the file's tensors
        return load_network(model)
    if isinstance(model, str) and model not in ARTICLE_A_MODELS:
        from . import transformer as architectures
        from .generic.network import generic_network, is_table_family

        name, config = architectures.resolve_config(model)
        if not is_table_family(config):  # the generic torch path: the real module tree (needs torch)
            return generic_network(name, config)
        return ModelShape.from_spec(architectures.load(model), config)  # the config read once, not again
    return shape_load(model)
