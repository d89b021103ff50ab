"""torchtune's loss path: the model returns fp32 logits and the loss takes them as they are (issue 28).

torchtune's ``TransformerDecoder.unembed`` (``torchtune/modules/transformer.py``, 1814feb and bd2a0fc) ends with
``self.output(h).float()``: the 16-bit logits are a temporary of the model's forward, freed when ``.float()``
returns, and the model's output is their fp32 copy. The recipe's ``_loss_step`` passes that copy to the loss and
deletes it (``del logits``), so only what the loss saves outlives it. Hugging Face's ``ForCausalLMLoss`` instead
upcasts inside the loss while the model's 16-bit output is still held (``peak_pytorch.logits_forward_term``).
Measured on the CPU (``tests/torchtune_loss_child.py``: a small decoder written as torchtune's, bf16, at two
(B, S)), each phase to the byte over the weights, states and saved tensors:

- **loss eager** (``full_finetune_single_device`` discards ``compile_loss``'s return value, so a plain
  ``nn.CrossEntropyLoss`` is never compiled there): saved as Hugging Face's (the fp32 log-softmax); forward: the
  fp32 logits beside it, 4·B·S·V (Hugging Face's path: b + 4); backward: the same 8·B·S·V of ``nll_loss`` and
  ``log_softmax`` gradients (the 16-bit cast of the logits' gradient comes later, beside less).
- **loss compiled** (``lora_finetune_single_device`` assigns ``self._loss_fn = training.compile_loss(...)``): the
  partitioner saves the fp32 logits (the graph's input) and two fp32 numbers per token; forward: the 16-bit
  logits beside their fp32 copy before those numbers exist (b·B·S·V − 8·B·S); backward: the logits' fp32
  gradient and one fp32 number per token (``compiled_step.loss_moment`` at 4 bytes). The trained head's moment
  (its weight and input gradients, the b-byte logit gradient in place of the saved fp32 logits) is derived from
  ``compiled_step.head_moment``'s order, not measured where it leads.
"""

from __future__ import annotations

import sympy

from ..core.symbols import B, H, S, V
from ..core.term import Term
from ..math.extrema import maximum
from . import compiled_step

SRC = "torchtune-upcast-logits"
CHOICES = ("loss", "model")  # where the logits are upcast: Hugging Face's loss, or torchtune's model


def saved_terms(act_bytes: int, compiled: bool) -> list[Term]:
    """What the head and loss save for backward: the head's input and the eager log-softmax or the compiled
    loss's fp32 logits and statistics."""
    head = Term("lm_head_input", "final norm output: input of the LM head", act_bytes * S * B * H, "bytes",
                "huggingface")
    if not compiled:
        return [head, Term("log_softmax_fp32", "fp32 log-softmax saved by cross-entropy over the model's fp32 "
                           "logits", 4 * S * B * V, "bytes", SRC, "TransformerDecoder.unembed")]
    return [head,
            Term("logits_compiled", "the model's fp32 logits, kept by the compiled loss (its graph's input)",
                 4 * S * B * V, "bytes", SRC, "TransformerDecoder.unembed + compile_loss",
                 "The partitioner saves the input it recomputes the softmax from (measured with inductor)."),
            Term("loss_stats", "fp32 max and log-sum-exp per token, kept by the compiled loss", 8 * S * B, "bytes",
                 "torch-partitioner", "min_cut_rematerialization_partition")]


def forward_term(act_bytes: int, compiled: bool) -> Term:
    """Beyond the saved tensors in the forward pass: the fp32 logits (eager loss) or the 16-bit ones beside their
    fp32 copy (compiled loss)."""
    if not compiled:
        return Term("logits_forward", "the model's fp32 logits while the loss runs (the 16-bit ones freed when "
                    ".float() returns)", 4 * S * B * V, "bytes", SRC, "TransformerDecoder.unembed",
                    "Alive beside the log-softmax being written; deleted by the recipe once the loss is computed.")
    extra = act_bytes * S * B * V - 8 * S * B if act_bytes != 4 else sympy.Integer(0)
    return Term("logits_forward", f"the model's {act_bytes}-byte logits beside their fp32 copy, before the compiled "
                "loss writes its statistics", extra, "bytes", SRC, "TransformerDecoder.unembed",
                "In fp32 .float() returns the logits themselves: nothing beyond the saved tensors.")


def backward_term(act_bytes: int, compiled: bool, head_trained: bool = True) -> Term:
    """The loss's backward over the saved tensors: eager, the fp32 gradients of nll_loss and log_softmax; compiled,
    the logits' fp32 gradient (or the trained head's moment)."""
    if not compiled:
        return Term("loss_gradients", "fp32 gradients of nll_loss and log_softmax at the start of backward "
                    "(8·B·S·V)", 8 * S * B * V, "bytes", SRC, "nll_loss + log_softmax backward",
                    "As Hugging Face's loss: the 16-bit cast of the logits' gradient comes after, beside less.")
    moments = [compiled_step.loss_moment(4)]
    if head_trained:  # the b-byte gradient in place of the saved fp32 logits, the statistics freed
        moments.append(compiled_step.head_moment(act_bytes) - (4 - act_bytes) * B * S * V)
    return Term("loss_gradients", "compiled loss over fp32 logits, backward: max(the logits' fp32 gradient and 4 "
                "bytes per token" + (" | the LM head's weight and input gradients)" if head_trained else ")"),
                maximum(*moments), "bytes", SRC, "compile_loss backward",
                "The compiled backward writes the gradient in the logits' dtype (fp32); the eager .float()'s "
                "backward casts it to the head's dtype after the saved logits are freed.")
