"""The 8-bit Adam step's temporaries, per implementation (issue 28: torchtune's "+ 8-bit AdamW" row).

Both implementations keep the same states (``optimizers``: 8-bit codes, one fp32 absmax per 256-element
block); they differ in what one parameter's step allocates beside them:

- ``bitsandbytes`` (0.50.2, ``Optimizer2State.update_step`` → ``functional.optimizer_update_8bit_blockwise``
  → ``backends/cuda/ops.py`` ``_optimizer_update_8bit_blockwise_impl``): one CUDA kernel
  (``kOptimizer2State_8bit_blockwise``) given the pointers of the parameter, its gradient, the codes and the
  absmax, updating them in place: no temporaries. (Its CPU backend, ``backends/cpu/ops.py``, dequantizes to
  fp32 copies instead, 24 bytes an element measured: a CPU fallback, not the GPU's step.)
- ``torchao`` (0.18.0, ``torchao/optim/adam.py``): ``AdamW8bit.step`` runs ``single_param_adam`` compiled
  (``torch.compile(fullgraph=True, dynamic=False)``) one parameter at a time. It dequantizes both states to
  fp32, updates them, and writes them back through ``OptimState8bit``'s ``copy_`` (``scale_tensor``: the
  amax of each 256-element block, then ``quantize_8bit_with_qmap``). Inductor realizes the two updated fp32
  states (they feed both the block amax and the parameter's update) and the two new absmax vectors: 2·4 +
  2·4/256 bytes per element of the parameter stepped, freed when it returns. Measured on the CPU with
  inductor at two sizes, to the byte (``tests/adam_8bit_step_child.py``); inductor's Triton kernels on
  CUDA are not measured here.

Parameters are stepped one after another, so the step's moment holds the largest parameter's.
"""

from __future__ import annotations

import sympy

from ..core.term import Term
from .optimizers import BLOCK_8BIT

IMPLS = ("bitsandbytes", "torchao")
DEFAULT_IMPL = "bitsandbytes"
SRC = "adam-8bit-step"

# bytes per element of the parameter stepped: the two fp32 states and their fp32 absmax per block
_PER_ELEMENT = {"bitsandbytes": sympy.Integer(0),
                "torchao": 2 * 4 + 2 * sympy.Rational(4, BLOCK_8BIT)}


def temporaries_per_element(impl: str) -> sympy.Rational:
    """Bytes one 8-bit Adam step allocates per element of the parameter it steps, by implementation."""
    return _PER_ELEMENT[impl]


def temporaries_term(impl: str, largest: sympy.Expr) -> Term:
    """The 8-bit Adam step's temporaries at its largest moment: those of the largest parameter's step."""
    notes = {"bitsandbytes": "bitsandbytes' CUDA kernel updates the parameter, codes and absmax in place: none.",
             "torchao": "torchao's compiled single_param_adam: the two dequantized fp32 states and their new "
                        "absmax per 256-element block, 8 + 1/32 bytes an element (measured with inductor on the CPU)."}
    return Term("optimizer_temporaries", f"8-bit Adam's step temporaries ({impl}): the largest parameter's",
                temporaries_per_element(impl) * largest, "bytes", SRC, f"{impl} 8-bit AdamW step", notes[impl])
