"""Activation offloading as torchtune does it: saved tensors copied to pinned host memory in the forward pass.

torchtune's ``OffloadActivations`` (torchtune/training/_activation_offloading.py, commit bd2a0fc,
source ``torchtune-offload``) is a ``saved_tensors_hooks`` pair around the model's forward pass:

- the pack hook copies every saved tensor of at least ``min_offload_size`` = 1024 bytes that is
  on the GPU and is not a parameter or buffer into a pinned host tensor (``torch.empty_like(...,
  pin_memory=True, device="cpu")``); smaller tensors stay on the GPU;
- with ``use_streams`` (the default) the copy runs on a second stream and the GPU tensor is kept
  in a forward stash until ``max_fwd_stash_size`` = 5 newer tensors have been packed; the last
  ones are still stashed when the forward pass ends, and backward takes them from the stash;
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
MAX_FWD_STASH = 5  # tensors: OffloadActivations(max_fwd_stash_size=5), kept on the GPU until newer ones are packed


def offloaded_term(expr: sympy.Expr) -> Term:
    """Host memory per GPU process: every checkpointed layer input, copied to pinned host memory."""
    return Term("offloaded_activations", "checkpointed layer inputs offloaded to pinned host memory", expr, "bytes", SRC,
                "OffloadActivations.pack_tensor",
                "torch.empty_like(activation, pin_memory=True, device='cpu') for each saved tensor of at least "
                f"{MIN_OFFLOAD_SIZE} bytes; brought back to the GPU in backward.")


def stash_term(per_layer: sympy.Expr, layers: int) -> Term:
    """What stays on the GPU of the offloaded inputs: the forward stash, the last min(5, layers) of them."""
    kept = min(MAX_FWD_STASH, layers)
    return Term("activations", f"the forward stash: the last {kept} checkpointed layer inputs, still on the GPU "
                "(activation offloading)", kept * per_layer, "bytes", SRC, "OffloadActivations.fwd_stash",
                f"With use_streams the GPU tensor is kept until {MAX_FWD_STASH} newer tensors are packed; the last "
                "ones are alive at the end of the forward pass and backward takes them from the stash.")
