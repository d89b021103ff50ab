"""Activation offloading as torchtune does it: saved tensors copied to pinned host memory in the forward pass.

torchtune's ``OffloadActivations`` (torchtune/training/_activation_offloading.py, commit bd2a0fc,
source ``torchtune-offload``) is a ``saved_tensors_hooks`` pair around the model's forward pass:

- the pack hook copies every saved tensor of at least ``min_offload_size`` = 1024 bytes that is
  on the GPU and is not a parameter or buffer into a pinned host tensor (``torch.empty_like(...,
  pin_memory=True, device="cpu")``); smaller tensors stay on the GPU;
- with ``use_streams`` (the default) the copy runs on a second stream and the GPU tensor is kept
  in a forward stash until ``max_fwd_stash_size`` = 5 newer pack calls: ``get_tensor_id`` counts every
  saved tensor the hook sees, offloaded or not (parameters, tensors under 1024 bytes). After the last
  checkpointed layer's input the model's final norm, eager (outside the checkpointed and compiled
  layers), saves 6 tensors (an RMSNorm: its fp32 input for ``pow`` and for the product, 1/rms twice, the
  normalized copy and the scale), so when the forward pass ends the stash holds the final norm's tensors
  and no layer input (checked on the CPU, ``tests/test_torchtune_loss.py``); backward takes them from it;
- ``get_act_offloading_ctx_manager`` puts the output head under a ``NoOpManager``: its saved
  tensors stay on the GPU, and the loss runs outside the context (the recipe's ``_loss_step``);
- the recipe refuses offloading without activation checkpointing, so what is packed is each
  checkpointed layer's input (``_NoopSaveInputs`` of ``torch.utils.checkpoint``): one tensor per
  layer, of B·S·H elements, which is never below 1024 bytes for a real model.

PyTorch's ``torch.autograd.graph.save_on_cpu`` is the same without the size threshold and the
stash: every saved tensor is copied.
"""

from __future__ import annotations

import sympy

from ..core.term import Term

SRC = "torchtune-offload"
MIN_OFFLOAD_SIZE = 1024  # bytes: OffloadActivations(min_offload_size=1024)
MAX_FWD_STASH = 5  # pack calls: OffloadActivations(max_fwd_stash_size=5), kept on the GPU until newer ones are packed
FINAL_NORM_PACKS = 6  # saved tensors of the eager final RMSNorm, packed after the last layer's input


def offloaded_term(expr: sympy.Expr) -> Term:
    """Host memory per GPU process: every checkpointed layer input, copied to pinned host memory."""
    return Term("offloaded_activations", "checkpointed layer inputs offloaded to pinned host memory", expr, "bytes", SRC,
                "OffloadActivations.pack_tensor",
                "torch.empty_like(activation, pin_memory=True, device='cpu') for each saved tensor of at least "
                f"{MIN_OFFLOAD_SIZE} bytes; brought back to the GPU in backward.")


def stashed_layers(layers: int) -> int:
    """Checkpointed layer inputs still in the forward stash when the forward pass ends: those among the last
    ``MAX_FWD_STASH`` pack calls, after the final norm's ``FINAL_NORM_PACKS`` (one call per layer at most)."""
    return max(0, min(layers, MAX_FWD_STASH - FINAL_NORM_PACKS))


def stash_term(per_layer: sympy.Expr, layers: int) -> Term:
    """What stays on the GPU of the offloaded inputs: the layer inputs left in the forward stash (none after the
    final norm's pack calls)."""
    kept = stashed_layers(layers)
    return Term("activations", f"the forward stash: {kept} checkpointed layer inputs still on the GPU (activation "
                "offloading)", kept * per_layer, "bytes", SRC, "OffloadActivations.fwd_stash",
                f"With use_streams a packed GPU tensor is kept until {MAX_FWD_STASH} newer pack calls; the final "
                f"norm's {FINAL_NORM_PACKS} saved tensors come after the last layer's input, so the stash ends the "
                "forward pass holding the final norm's tensors (alive on the GPU with or without offloading).")
