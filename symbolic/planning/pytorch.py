"""Training activations as PyTorch's autograd keeps them: the plan's terms for ``activations="pytorch"``.

``symbolic.library.activations_pytorch`` writes down, tensor by tensor, what one training step
of the Hugging Face implementation (GPT-2, or the Llama family) saves for backward, measured on
the CPU to the byte (``symbolic validate``). A plan with ``activations="pytorch"`` takes that
formula, ``pytorch.saved.<family>`` with the model's own widths substituted (d_head = H/a and
the like where the config leaves them out), and splits it into the plan's usual terms:

- ``activations``: what the layers keep, L·(one layer), plus the final norm, the LM head's input
  and Llama's rotary tables (shared by the layers);
- ``inputs``: the int64 ids the embeddings keep (token ids; GPT-2's position ids) and GPT-2's
  embedding dropout mask;
- ``logits``: what the loss keeps (the fp32 log-softmax of the upcast logits, the int64 targets,
  a scalar weight); the logits themselves are not kept;
- ``loss_gradients``: the fp32 gradients of ``nll_loss`` and ``log_softmax``, 8·B·S·V, alive with
  everything saved at the start of backward (``pytorch.peak.*``'s backward phase).

``activations + inputs + logits`` is the bytes saved for backward, ``A_saved``: what ``symbolic
validate`` measures and what ``Plan.as_dict`` reports as ``"activation_bytes"``. The model
states (weights, gradients, optimizer states, ZeRO) are the planner's usual terms.

The implementation follows the choices ``attn`` (eager or sdpa), ``device`` (cpu or cuda; CPU
dropout keeps masks in the compute dtype, CUDA a bool, and SDPA picks other kernels) and
``dropout`` (off: none; on: the config's probabilities, the default when it has any), and
``precision`` (pure fp32 or bf16). ``regime.resolve`` rejects what was not measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import sympy

from .. import printing
from ..formula import Formula
from ..library import activations_pytorch as pyacts
from ..library import peak_pytorch as pypeak
from ..symbols import L
from ..term import Term
from .model import ModelShape
from .regime import Regime

# which plan term each of the saved formula's terms belongs to, by the start of its key
INPUT_PREFIXES = ("embedding.",)
LOSS_PREFIXES = ("loss.",)


@dataclass(frozen=True)
class SavedActivations:
    """The saved-for-backward formula a plan's pytorch terms come from, and how it was chosen."""

    family: str  # "gpt2" or "llama": the implementation whose terms apply
    setup: pyacts.Setup  # precision, attn, device, dropout sites, MLP activation
    formula: Formula  # pytorch.saved.<family> with this model's widths
    note: str = ""  # set when the model is not one of the measured families

    def total(self, values: Mapping[str, object]) -> int:
        """Bytes saved for backward at ``values``, rounded up to a whole byte (as ``Plan.total``)."""
        return _whole(self.formula.evaluate(self.formula.restrict(values)).total)

    def as_dict(self, values: Mapping[str, object]) -> dict[str, object]:
        """Plain data for JSON: the family, the setup and the bytes of each saved tensor group."""
        evaluation = self.formula.evaluate(self.formula.restrict(values))
        return {
            "activation_bytes": _whole(evaluation.total), "family": self.family, "formula": self.formula.key,
            "precision": self.setup.precision, "attn": self.setup.attn, "device": self.setup.device,
            "kernel": self.setup.kernel, "dropout": sorted(self.setup.dropout),
            "activation": self.setup.activation, "terms": {t.key: _whole(v) for t, v in evaluation.terms},
            "note": self.note,
        }


def _whole(value: sympy.Expr) -> int:
    """An exact rational rounded up to a whole number of bytes."""
    number = sympy.Rational(value)
    return -(-int(number.p) // int(number.q))


def saved(model: ModelShape, regime: Regime) -> SavedActivations:
    """The saved-tensor model of ``model`` under ``regime`` (its precision, attn, device, dropout)."""
    family, setup, note = pyacts.setup_for(model.config, precision=regime.precision, attn=regime.attn,
                                           device=regime.device)
    if not regime.dropout:
        setup = replace(setup, dropout=frozenset())
    base = pyacts.saved(family, setup).formula
    widths = model.widths()
    terms = [t.replace(expr=t.expr.xreplace(widths)) for t in base.terms]
    formula = Formula(base.key, base.title, terms, source=base.source, name=base.name, note=base.note)
    return SavedActivations(family, setup, formula, note)


def _group(key: str) -> str:
    if key.startswith(INPUT_PREFIXES):
        return "inputs"
    if key.startswith(LOSS_PREFIXES):
        return "logits"
    return "activations"


def _per_layer(expr: sympy.Expr) -> sympy.Expr | None:
    """``expr / L`` when ``expr`` is L times something without L, else None."""
    rest = expr / L
    return rest if expr.has(L) and not rest.has(L) else None


def terms(saved_model: SavedActivations) -> list[Term]:
    """The plan's ``activations``, ``inputs``, ``logits`` and ``loss_gradients`` terms (see the docstring)."""
    groups: dict[str, list[Term]] = {"activations": [], "inputs": [], "logits": []}
    for term in saved_model.formula.terms:
        groups[_group(term.key)].append(term)
    layer = [t for t in groups["activations"] if _per_layer(t.expr) is not None]
    once = [t for t in groups["activations"] if _per_layer(t.expr) is None]
    per = sympy.Add(*(_per_layer(t.expr) for t in layer))
    s = saved_model.setup
    how = f"{saved_model.family} implementation; {s.label(saved_model.family)}"
    key = saved_model.formula.key
    return [
        Term("activations", f"activations: what PyTorch saves for backward, L layers × one layer and the rest ({how})",
             L * per + sympy.Add(*(t.expr for t in once)), "bytes", pyacts.SRC, key,
             f"One layer keeps {printing.text(per)} bytes ({', '.join(t.key for t in layer)}); once: "
             f"{', '.join(t.key for t in once)}. Derivation in symbolic/library/activations_pytorch.py."),
        Term("inputs", "ids the embeddings keep (int64)" + (" and the embedding dropout mask"
                                                            if any("dropout" in t.key for t in groups["inputs"]) else ""),
             sympy.Add(*(t.expr for t in groups["inputs"])), "bytes", pyacts.SRC, key,
             ", ".join(t.key for t in groups["inputs"])),
        Term("logits", "what the loss keeps: fp32 log-softmax of the upcast logits, int64 targets, weight",
             sympy.Add(*(t.expr for t in groups["logits"])), "bytes", pyacts.SRC, key,
             "Hugging Face upcasts the logits to fp32 before cross-entropy; the logits themselves are not kept."),
        Term("loss_gradients", "fp32 gradients of nll_loss and log_softmax at the start of backward (8·B·S·V)",
             pypeak.loss_backward_extra(saved_model.family), "bytes", pypeak.SRC, f"pytorch.peak.{saved_model.family}",
             "Alive with everything saved for backward when the backward pass starts (measured); not saved for "
             "backward, so not in activation_bytes."),
    ]


def notes(regime: Regime, saved_model: SavedActivations) -> list[str]:
    """What a plan with pytorch activations says about them."""
    sites = sorted(saved_model.setup.dropout)
    drop = f"dropout at {', '.join(sites)}" if sites else "no dropout"
    out = [f"activations: what torch.autograd saves in pure {regime.precision} training of the "
           f"{saved_model.family} implementation ({regime.attn}, {regime.device}, {drop}); "
           "symbolic validate checks it against measured steps"]
    if regime.dropout and not saved_model.setup.dropout:
        out.append("dropout on, but the config gives no dropout probability above 0: PyTorch keeps no masks")
    if saved_model.note:
        out.append(saved_model.note)
    return out
