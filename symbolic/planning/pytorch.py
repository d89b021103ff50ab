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
  a scalar weight); the logits themselves are not kept.

``activations + inputs + logits`` is the bytes saved for backward, ``A_saved``: what ``symbolic
validate`` measures and what ``Plan.as_dict`` reports as ``"activation_bytes"``.

``layout`` builds the plan's phases from ``library.peak_pytorch.step`` (contract S): its resident
terms (weights, ``optimizer_states``, frozen weights) and its phases (forward: the saved tensors
and ``logits_forward``; backward: ``backward_live``, the saved tensors and the loss's first gradients
(``pytorch.peak.*``); optimizer: ``gradients``, ``optimizer_temporaries``, ``step_inputs``), with the
model's widths substituted, N the model's parameter formula, and ZeRO sharding of the model-state terms.

The implementation follows the choices ``attn`` (eager or sdpa), ``device`` (cpu or cuda; CPU
dropout keeps masks in the compute dtype, CUDA a bool, and SDPA picks other kernels) and
``dropout`` (off: none; on: the config's probabilities, the default when it has any),
``dropout_masks``, ``use_cache``, ``precision`` (fp32, bf16 or autocast mixed precision) and the
``optimizer``. ``regime.resolve`` rejects what was not measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import sympy

from ..core.memo import BoundedMemo
from ..core.symbols import L, N
from ..core.term import Term
from ..library import activations_pytorch as pyacts
from ..library import peak_pytorch as pypeak
from ..math import extrema
from ..math.formula import Formula
from ..networks.module import cuda_attention
from ..networks.shape import ModelShape
from ..text import printing
from . import finetune, own_fsdp
from .phases import Layout
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
    network: str = ""  # what the network is in a sentence when it has no token sequence (Network.label), else ""

    def total(self, values: Mapping[str, object]) -> int:
        """Bytes saved for backward at ``values``, rounded up to a whole byte (as ``Plan.total``)."""
        return _whole(self.formula.evaluate(self.formula.restrict(values)).total)

    def as_dict(self, values: Mapping[str, object]) -> dict[str, object]:
        """Plain data for JSON: the family, the setup and the bytes of each saved tensor group."""
        evaluation = self.formula.evaluate(self.formula.restrict(values))
        return {
            "activation_bytes": _whole(evaluation.total), "family": self.family, "formula": self.formula.key,
            "precision": self.setup.precision, "attn": self.setup.attn, "device": self.setup.device,
            "kernel": self.setup.kernel, "cuda_arch": _arch_text(self.setup.cuda_arch), "dropout": sorted(self.setup.dropout),
            "activation": self.setup.activation, "terms": {t.key: _whole(v) for t, v in evaluation.terms},
            "note": self.note,
        }


def _arch_text(arch: tuple[int, int] | None) -> str | None:
    """A compute capability as NVIDIA writes it ("8.9"); None where the plan assumed none (sm90 for modules)."""
    return None if arch is None else f"{arch[0]}.{arch[1]}"


def _whole(value: sympy.Expr) -> int:
    """An exact rational rounded up to a whole number of bytes."""
    number = sympy.Rational(value)
    return -(-int(number.p) // int(number.q))


def saved(model: ModelShape, regime: Regime) -> SavedActivations:
    """The saved-tensor model of ``model`` under ``regime`` (precision, attn, device, dropout, masks, cache)."""
    options = {"precision": regime.precision, "device": regime.device}
    if regime.fsdp and model.fsdp_units is not None:  # FSDP2 gathering a module in 16 bits under mixed: a pure step
        options["precision"] = own_fsdp.step_precision(regime)
    if not model.sequence:  # e.g. article A's network: no attention, dropout or cache
        family, setup, note = str(model.pytorch_family), pyacts.Setup(**options), ""
    else:
        family, setup, note = pyacts.setup_for(model.config, attn=regime.attn, dropout_masks=regime.dropout_masks,
                                               use_cache=regime.use_cache, **options)
    if not regime.dropout:
        setup = replace(setup, dropout=frozenset())
    if regime.compile:  # issue 28: compiled blocks and loss (the regime checked the setup)
        setup = replace(setup, compile=True, compile_loss=regime.compile_loss)
    if regime.cuda_arch is not None and regime.device == "cuda":  # the planned GPU's attention kernels
        setup = replace(setup, cuda_arch=regime.cuda_arch)
    own = model.pytorch_saved(_with_lora(setup, regime), _refused(model, regime),
                              recompute=own_recompute(model, regime), sharded="blocks" if regime.fsdp else False)
    if own is not None:  # a network with its own saved-tensor model (a probed torch module)
        said = "; ".join(n for n in (note or arch_note(own.setup), getattr(own, "note", "")) if n)
        return SavedActivations(family, own.setup, own.formula, said, model.label)
    model_saved = pyacts.saved(family, setup, loss="cross-entropy" if model.sequence else regime.loss)
    if _adjusted(regime):  # LoRA, frozen embeddings, gradient checkpointing: contract F's saved model
        model_saved = finetune.saved_model(model, regime, plain_saved(model, regime))
    base = model_saved.formula
    widths = model.widths()
    terms = [t.replace(expr=extrema.substitute(t.expr, widths)) for t in base.terms]
    formula = Formula(base.key, base.title, terms, source=base.source, name=base.name, note=base.note)
    return SavedActivations(family, model_saved.setup, formula, note, "" if model.sequence else model.label)


def _with_lora(setup: pyacts.Setup, regime: Regime) -> pyacts.Setup:
    """The setup with the regime's LoRA settings, for a network that measures its own LoRA step (a torch module)."""
    if not regime.lora_rank:
        return setup
    return replace(setup, lora=(regime.lora_rank, tuple(regime.lora_targets), regime.lora_dropout,
                                regime.adapter_dtype, regime.qlora))


def arch_note(setup: pyacts.Setup) -> str:
    """What a probed module's attention assumed of the GPU named with --gpu (its compute capability); "" for sm90."""
    arch = setup.cuda_arch
    if arch is None or setup.device != "cuda" or tuple(arch) == cuda_attention.SM90:
        return ""
    return (f"attention as on sm{arch[0]}{arch[1]}, the compute capability of the GPU given with --gpu: "
            f"{cuda_attention.rules(arch)}; so the saved tensors depend on --gpu (sm90 without it)")


def _refused(model: ModelShape, regime: Regime) -> tuple[str, ...]:
    """The regime's adjustments of the library's saved model, named (what a network's own model refuses)."""
    named = (("LoRA", regime.lora_rank), ("frozen embeddings", regime.freeze_embeddings),
             (f"recompute {regime.recompute}", regime.recompute != "none" and not own_recompute(model, regime)))
    return tuple(name for name, on in named if on)


def own_recompute(model: ModelShape, regime: Regime) -> int:
    """N where a network checkpoints its own repeated blocks (``Network.checkpoint_blocks``) under recompute full,
    every N-th of them (``recompute_every``); 0 otherwise (the library's models, or no recompute)."""
    if regime.recompute != "full" or not model.checkpoint_blocks:
        return 0
    return int(regime.recompute_every)


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
    """The plan's ``activations``, ``inputs`` and ``logits`` terms: the saved tensors grouped (see the docstring)."""
    groups: dict[str, list[Term]] = {"activations": [], "inputs": [], "logits": []}
    for term in saved_model.formula.terms:
        groups[_group(term.key)].append(term)
    layer = [t for t in groups["activations"] if _per_layer(t.expr) is not None]
    once = [t for t in groups["activations"] if _per_layer(t.expr) is None]
    per = sympy.Add(*(_per_layer(t.expr) for t in layer))
    s = saved_model.setup
    mlp = bool(saved_model.network)  # no token sequence: what the loss keeps is listed by name
    how = f"{saved_model.family} implementation; {s.label(saved_model.family)}"
    key = saved_model.formula.key
    return [
        Term("activations", f"activations: what PyTorch saves for backward, L layers × one layer and the rest ({how})",
             L * per + sympy.Add(*(t.expr for t in once)), "bytes", pyacts.SRC, key,
             (f"Kept: {', '.join(t.key for t in once)}." if mlp else
              f"One layer keeps {printing.text(per)} bytes ({', '.join(t.key for t in layer)}); once: "
              f"{', '.join(t.key for t in once)}.") + " Derivation in symbolic/library/activations_pytorch.py."),
        Term("inputs", "ids the embeddings keep (int64)" + (" and the embedding dropout mask"
                                                            if any("dropout" in t.key for t in groups["inputs"]) else ""),
             sympy.Add(*(t.expr for t in groups["inputs"])), "bytes", pyacts.SRC, key,
             ", ".join(t.key for t in groups["inputs"])),
        Term("logits", "what the loss keeps: " + (", ".join(t.key for t in groups["logits"]) if mlp else
                                                  "fp32 log-softmax of the upcast logits, int64 targets, weight"),
             sympy.Add(*(t.expr for t in groups["logits"])), "bytes", pyacts.SRC, key,
             "; ".join(t.title for t in groups["logits"]) if mlp else
             "Hugging Face upcasts the logits to fp32 before cross-entropy; the logits themselves are not kept."),
    ]


# the step's term keys (contract S) that the plan shows under another name: its own groups of the
# saved tensors are "activations", "inputs" and "logits", and ZeRO shards "optimizer_states"
RENAMED = {"logits": "logits_forward", "logits_fp32": "logits_forward_fp32", "inputs": "step_inputs",
           "optimizer_state": "optimizer_states"}
OPTIMIZERS = {"adamw": "adamw", "sgd-momentum": "sgd-momentum", "sgd": "sgd"}


def step_model(model: ModelShape, regime: Regime, saved_model: SavedActivations) -> pypeak.StepModel:
    """The step of ``library.peak_pytorch`` (contract S) for this model and regime."""
    if regime.optimizer not in OPTIMIZERS:
        from ..options.table import PlanOptionError

        raise PlanOptionError(f"activations pytorch models the optimizers {', '.join(OPTIMIZERS)} (what was "
                              f"measured), not {regime.optimizer}")
    own = model.pytorch_step(saved_model.setup, saved_model, optimizer=OPTIMIZERS[regime.optimizer],
                             accumulate=regime.microbatches, in_backward=regime.optimizer_in_backward,
                             recompute=own_recompute(model, regime), sharded="blocks" if regime.fsdp else False)
    if own is not None:  # a network with its own step (a probed torch module)
        return own
    kwargs: dict[str, object] = {"optimizer": OPTIMIZERS[regime.optimizer], "loss": regime.loss,
                                 "accumulate": regime.microbatches, "in_backward": regime.optimizer_in_backward}
    if not model.sequence:
        kwargs["bias"] = bool(model.config.get("bias", True))
    else:
        kwargs["tied"] = model.head == 0
        kwargs["bias"] = model.attention_bias if saved_model.family == "llama" else None
    if finetune.active(regime):
        kwargs.update(finetune.step_arguments(model, regime, plain_saved(model, regime)))
    elif _adjusted(regime):
        kwargs["saved_override"] = finetune.saved_model(model, regime, plain_saved(model, regime))
    return pypeak.step(saved_model.family, saved_model.setup, **kwargs)  # type: ignore[arg-type]


def plain_saved(model: ModelShape, regime: Regime) -> SavedActivations:
    """The full-training saved model of the same setup: no adapters, frozen embeddings or recomputation."""
    return saved(model, regime.replace(lora_rank=0, freeze_embeddings=False, recompute="none"))


def _adjusted(regime: Regime) -> bool:
    """Whether contract F's saved model applies: fine-tuning, or recompute full (gradient checkpointing)."""
    return finetune.active(regime) or regime.recompute == "full"


_AT_WIDTHS: BoundedMemo[tuple[sympy.Basic, frozenset[tuple[sympy.Basic, sympy.Basic]]], sympy.Expr] = BoundedMemo(4096)


def _at_widths(expr: object, widths: dict[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """``expr`` with the model's widths put in, remembered per process (the last 4096).

    Every plan of one model (another batch, sequence, ZeRO stage, the planner's layouts, a fit's
    steps) puts the same widths into mostly the same step terms, and with a max inside SymPy
    compares its arguments again on every rebuild; expressions are immutable, so one answer serves.
    """
    expr = sympy.sympify(expr)
    key = (expr, frozenset(widths.items()))
    found = _AT_WIDTHS.get(key)
    if found is None:
        found = _AT_WIDTHS[key] = extrema.substitute(expr, widths)
    return found


def layout(model: ModelShape, regime: Regime, saved_model: SavedActivations, params: sympy.Expr,
           values: dict[str, object], notes_out: list[str]) -> Layout:
    """The plan's phases from the PyTorch step: its terms with this model's widths, saved tensors grouped."""
    step = step_model(model, regime, saved_model)
    pools: dict[str, sympy.Expr] = {}  # FSDP2's side streams per phase (``own_fsdp.sharded``)
    if regime.fsdp and model.fsdp_units is not None:  # a network's own step under FSDP2 (the regime checked it)
        freed = own_fsdp.freed_by_a_block(model.checkpoint_blocks, saved_model.formula.terms)
        step, pools = own_fsdp.sharded(step, model.fsdp_units, model.total, regime, values, freed,
                                       model.fsdp_root_last)
        notes_out.append(own_fsdp.note(model.checkpoint_blocks, model.fsdp_units, model.total))
        notes_out += [n for n in (own_fsdp.setup_note(regime),) if n]
    widths = model.widths()
    if params != N:
        widths = {**widths, N: params}
    # activations, inputs, logits: the saved tensors as the plan shows them (a group with nothing in it left out)
    grouped = [g for g in terms(saved_model) if g.expr != 0]

    def mine(items: tuple[Term, ...]) -> list[Term]:
        out: list[Term] = []
        for term in items:
            if term.key == "saved":
                out += grouped
                continue
            out.append(term.replace(key=RENAMED.get(term.key, term.key), expr=_at_widths(term.expr, widths)))
        return out

    resident = mine(step.resident)
    phases = {name: tuple(mine(items)) for name, items in step.phases.items()}
    # a network that checkpoints its own blocks measured its backward's recompute with the rest of its step; only
    # recompute full adds phases: the full-training saved model is not built otherwise (a module would probe it)
    extra = (finetune.extra_phases(model, regime, plain_saved(model, regime))
             if regime.recompute == "full" and not own_recompute(model, regime) else {})
    taken = {t.key: t.expr for items in (resident, *phases.values()) for t in items}
    for name, items in extra.items():  # e.g. "recompute": the last layer rebuilt in backward (checkpointing)
        added = []
        for term in mine(items):
            if term.key in taken and taken[term.key] != term.expr:  # the same name for another number
                term = term.replace(key=f"{name}.{term.key}")
            added.append(term)
        phases[name] = tuple(added)
    if regime.zero:
        values["n_d"] = regime.dp
        resident = _shard(resident, regime.zero)
        phases = {name: tuple(_shard(list(items), regime.zero)) for name, items in phases.items()}
    notes_out.append(f"step: {step.formula().term('phase').note}")
    return Layout(tuple(resident), phases, {p: _at_widths(e, widths) for p, e in pools.items() if p in phases})


def _shard(items: list[Term], zero: int) -> list[Term]:
    """ZeRO sharding of the model-state terms among ``items`` (the others stay whole)."""
    from ..core.symbols import n_d
    from ..library import parallel as par

    known = [t for t in items if t.key in par.SHARDED_FROM]
    sharded = {t.key: t for t in par.shard_terms(known, zero, n_d)}
    return [sharded.get(t.key, t) for t in items]


def notes(regime: Regime, saved_model: SavedActivations) -> list[str]:
    """What a plan with pytorch activations says about them."""
    sites = sorted(saved_model.setup.dropout)
    drop = f"dropout at {', '.join(sites)}" if sites else "no dropout"
    precision = saved_model.setup.precision  # a module's pure 16-bit step under FSDP2's param_dtype (own_fsdp)
    kind = "autocast" if precision.endswith("-mixed") else "pure"
    what = (saved_model.network if saved_model.network else f"the {saved_model.family} implementation "
            f"({regime.attn}, {drop}, use_cache {'on' if regime.use_cache else 'off'})")
    out = [f"activations: what torch.autograd saves in {kind} {precision} training of {what} on "
           f"{regime.device}; checked against measured CPU steps ('symbolic validate' for the table families and "
           "article A's network, docs/accuracy.md for torch modules)"]
    if regime.dropout and not saved_model.setup.dropout:
        out.append("dropout on, but the config gives no dropout probability above 0: PyTorch keeps no masks")
    if saved_model.note:
        out.append(saved_model.note)
    return out
