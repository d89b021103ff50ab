"""Fine-tuning regimes of a plan: LoRA and QLoRA adapters on a frozen base, frozen embeddings.

``resolve`` checks the options (``lora_rank``, ``lora_targets``, ``lora_dropout``,
``adapter_dtype``, ``qlora``, ``freeze_embeddings``) and fills in their defaults. Contract F of
issue 13, for the plan builder:

- ``adapters(model, regime)``: the LoRA targets as peft resolves them and their tensors;
- ``state_terms(model, regime, params)``: the model states (frozen base in 16 bits or NF4,
  adapter weights, their gradients and optimizer state; or full training with frozen embeddings),
  with the keys of ``library.precision.STATE_KINDS`` plus ``adapter_weights``;
- ``step_arguments(model, regime, found)``: the keyword arguments of ``peak_pytorch.step`` for
  ``activations="pytorch"`` (trainable tensors, frozen bytes, the saved-tensor model of
  ``library.lora.saved``).

The terms and their measurements are in ``symbolic/library/lora.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy

from ..core.errors import UserError
from ..core.symbols import N
from ..core.term import Term
from ..library import activations_pytorch as pyacts
from ..library import lora
from ..library import optimizers as optim
from ..library import peak_pytorch as pypeak
from ..library import precision as prec
from ..networks.shape import ModelShape
from ..options import table as opts
from ..options.table import PlanOptionError

QLORA_PRECISIONS = ("bf16", "bf16-mixed")

Pick = Callable[[str, object], object]


def resolve(model: ModelShape, pick: Pick, notes: list[str], *, activations: str, precision: str) -> dict[str, object]:
    """The fine-tuning choices of a training plan, checked (``regime.resolve`` calls this)."""
    rank = pick("lora_rank", None)
    wanted = rank is not None
    targets = pick("lora_targets", None)
    dropout = pick("lora_dropout", None)
    dtype = pick("adapter_dtype", None)
    qlora = pick("qlora", False)
    frozen_embeddings = pick("freeze_embeddings", False)
    for flag in ("qlora", "freeze_embeddings"):
        value = qlora if flag == "qlora" else frozen_embeddings
        if not isinstance(value, bool):
            raise PlanOptionError(f"{flag} must be true or false, got {value!r}")
    if not wanted:
        given = [name for name, value in (("lora_targets", targets), ("lora_dropout", dropout),
                                          ("adapter_dtype", dtype)) if value is not None]
        if qlora:
            given.insert(0, "qlora")
        if given:
            raise PlanOptionError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} lora_rank "
                                  "(LoRA adapters)")
        return {"lora_rank": 0, "lora_targets": (), "lora_dropout": 0.0, "adapter_dtype": "fp32", "qlora": False,
                "freeze_embeddings": frozen_embeddings}
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= 65536:
        raise PlanOptionError(f"lora_rank must be a whole number from 1 to 65536, got {rank!r}")
    names = opts.parse_names("lora_targets", targets) if targets is not None else ()
    p = opts.parse_fraction("lora_dropout", dropout) if dropout is not None else 0.0
    dtype = "fp32" if dtype is None else str(dtype)
    if dtype not in opts.ADAPTER_DTYPES:
        raise PlanOptionError(f"unknown adapter_dtype {dtype!r}; choose from {', '.join(opts.ADAPTER_DTYPES)}")
    if qlora and precision not in QLORA_PRECISIONS:
        raise PlanOptionError(f"qlora computes in bf16 (bnb_4bit_compute_dtype); use precision "
                              f"{' or '.join(QLORA_PRECISIONS)}, not {precision}")
    if model.moe:
        raise PlanOptionError(f"LoRA on mixture-of-experts layers ({model.name}) is not modelled")
    try:
        resolved, defaulted = model.lora_modules(names)
        names = names or model.lora_targets  # peft's default for the model type, shown as such
    except UserError as err:
        raise PlanOptionError(str(err)) from None
    shown = ", ".join(resolved) if len(resolved) <= 8 else f"{len(resolved)} modules ({', '.join(resolved[:4])}, ...)"
    notes.append(f"LoRA: rank {rank} on {shown}" + (f" (peft's default for {model.model_type})"
                 if defaulted else "") + f"; adapters in {dtype}, every base weight frozen"
                 + ("; base linear layers in 4-bit NF4 with double quantization (QLoRA)" if qlora else ""))
    if frozen_embeddings:
        notes.append("freeze_embeddings: with LoRA every base weight is frozen already")
    return {"lora_rank": rank, "lora_targets": names, "lora_dropout": p, "adapter_dtype": dtype, "qlora": qlora,
            "freeze_embeddings": frozen_embeddings}


def active(regime: object) -> bool:
    """Whether a plan trains only part of the weights (LoRA, QLoRA or frozen embeddings)."""
    return bool(getattr(regime, "lora_rank", 0) or getattr(regime, "freeze_embeddings", False))


def _layout(model: ModelShape) -> str:
    """'gpt2' or 'llama': whose module names the model's linear layers have (a PlanOptionError otherwise)."""
    try:
        return model.lora_layout()
    except UserError as err:
        raise PlanOptionError(str(err)) from None


def adapters(model: ModelShape, regime: object) -> lora.Adapters:
    """The LoRA adapters of a plan: targets resolved as peft does, their tensors in the model's widths."""
    rank = int(getattr(regime, "lora_rank", 0))
    if not rank:
        raise PlanOptionError("no LoRA adapters: lora_rank is not set")
    defaulted = "lora_targets" in getattr(regime, "defaulted", ())
    targets = () if defaulted else tuple(getattr(regime, "lora_targets", ()))
    return lora.adapters(_layout(model), model.model_type, rank, targets,
                         dtype=str(getattr(regime, "adapter_dtype", "fp32")),
                         dropout=float(getattr(regime, "lora_dropout", 0.0)), widths=model.widths())


def embedding_params(model: ModelShape) -> sympy.Expr:
    """Parameters of the token embedding (the head too when tied: one tensor)."""
    keys = {t.key: t for t in model.params.terms}
    return keys["embedding"].expr if "embedding" in keys else sympy.Integer(0)


def _check_layout(regime: object) -> None:
    for name in ("tp", "pp"):
        if int(getattr(regime, name, 1)) > 1:
            raise PlanOptionError(f"fine-tuning (LoRA, QLoRA, frozen embeddings) is modelled without tensor or "
                                  f"pipeline parallelism ({name} {getattr(regime, name)})")


def frozen_base_bytes(model: ModelShape, regime: object, params: sympy.Expr) -> sympy.Expr:
    """Bytes of the frozen base of a LoRA plan: 16-bit (the precision's weights) or QLoRA's NF4."""
    wb = prec.get(str(getattr(regime, "precision", "bf16-mixed"))).weight_bytes
    if getattr(regime, "qlora", False):
        return lora.qlora_base_bytes(_layout(model), params, model.widths())
    return wb * params


def pass_bytes(model: ModelShape, regime: object, params: sympy.Expr) -> sympy.Expr | None:
    """Weight bytes one forward or backward pass of a QLoRA plan moves (``lora.qlora_pass_bytes``: the NF4 base read,
    dequantized and read again in bf16); None when the plan is not QLoRA or its layers' layout is not known."""
    if not getattr(regime, "qlora", False):
        return None
    try:
        family = model.lora_layout()
    except UserError:
        return None
    return lora.qlora_pass_bytes(family, params, model.widths())


def state_terms(model: ModelShape, regime: object, params: sympy.Expr) -> list[Term]:
    """Model-state terms of a fine-tuning plan (keys of ``precision.STATE_KINDS`` and ``adapter_weights``).

    LoRA: ``weights`` the frozen base, ``adapter_weights``, ``gradients`` and ``optimizer_states`` of
    the adapters, all in the adapter dtype (no master copy: fp32 adapters are their own). Frozen
    embeddings alone: full training of everything but the token embedding, which keeps only its weights.
    """
    _check_layout(regime)
    precision = str(getattr(regime, "precision", "bf16-mixed"))
    optimizer = str(getattr(regime, "optimizer", "adamw"))
    if not getattr(regime, "lora_rank", 0):
        emb = embedding_params(model)
        entries = model.factored_entries() - sum((r + c) * n for name, r, c, n in model.matrices if name == "embedding")
        terms = prec.state_terms(precision, optimizer, getattr(regime, "grads", None), params=params - emb,
                                 factored_entries=entries if optim.get(optimizer).factored else None)
        wb = prec.get(precision).weight_bytes
        return [t.replace(expr=wb * params, title=t.title + " (the frozen token embedding included)",
                          note=t.note + " The token embedding is frozen: no gradient, master copy or optimizer "
                          "state for it.") if t.key == "weights" else t for t in terms]
    ad = adapters(model, regime)
    count, ba = ad.params(), ad.element_bytes
    opt = optim.get(optimizer)
    qlora = bool(getattr(regime, "qlora", False))
    base = frozen_base_bytes(model, regime, params)
    base_title = ("frozen base: NF4 linear layers (blockwise absmax, double quantization), the rest bf16" if qlora
                  else f"frozen base weights ({prec.get(precision).dtype})")
    base_note = ("bitsandbytes Linear4bit: n/2 bytes of codes, a uint8 absmax per 64, an fp32 absmax per 256 "
                 "blocks and 1092 bytes of codes and offset per tensor (measured, symbolic/library/lora.py)."
                 if qlora else "No gradient and no optimizer state: peft freezes every base weight.")
    dtype = ad.dtype
    return [
        Term("weights", base_title, base, "bytes", "bitsandbytes" if qlora else lora.SRC, "", base_note),
        Term("adapter_weights", f"LoRA adapters ({ad.describe()})", ba * count, "bytes", lora.SRC, "LoraConfig",
             "lora_A (r × in) and lora_B (out × r) per target; peft keeps them in fp32 on a 16-bit base "
             "(autocast_adapter_dtype)."),
        Term("gradients", f"{dtype} gradients of the adapters", ba * count, "bytes", "pytorch", "",
             "Only the adapters get gradients."),
        Term("optimizer_states", f"{opt.title} states of the adapters ({dtype})",
             opt.state_expr(count, ba, ad.factored_entries() if opt.factored else None), "bytes", opt.source,
             opt.where, "torch.zeros_like(param): the adapters' dtype. " + opt.note),
    ]


def saved_model(model: ModelShape, regime: object, found: Any) -> pyacts.SavedModel:
    """What one step of a plan with ``activations="pytorch"`` saves for backward: full training,
    fine-tuning (``library.lora.saved``), and with ``recompute="full"`` under transformers' gradient
    checkpointing (``library.lora.checkpointed``). ``found`` is the full-training saved model of the
    same setup (``planning.pytorch.saved`` without adapters or recomputation)."""
    full = pyacts.saved(found.family, found.setup)
    out = pyacts.SavedModel(found.family, found.setup, found.formula, dict(full.saved_by))
    if active(regime):
        out = lora.saved(out, adapters(model, regime) if getattr(regime, "lora_rank", 0) else None,
                         frozen_embeddings=bool(getattr(regime, "freeze_embeddings", False)))
    if getattr(regime, "recompute", "none") == "full":
        out = lora.checkpointed(out)
    return out


def step_arguments(model: ModelShape, regime: object, found: Any) -> dict[str, object]:
    """Keyword arguments of ``peak_pytorch.step`` for a fine-tuning plan with ``activations="pytorch"``
    (``found``: the full-training saved model, as for ``saved_model``)."""
    _check_layout(regime)
    saved = saved_model(model, regime, found)
    family = saved.family
    widths = model.widths()
    if not getattr(regime, "lora_rank", 0):
        bias = model.attention_bias
        tied = family == "gpt2" or bool(model.config.get("tie_word_embeddings", False))
        sizes = [x.xreplace(widths) for x in pypeak.parameter_tensors(family, bias=bias, tied=tied)]
        emb = embedding_params(model)
        tensors = pypeak.parameter_tensor_count(family, bias=bias, tied=tied) - 1  # the token embedding frozen
        return {"trainable": sizes[1:], "trainable_count": N - emb, "trainable_tensors": tensors,
                "frozen_bytes": saved.setup.param_bytes * emb, "saved_override": saved}
    ad = adapters(model, regime)
    return {"trainable": ad.layer_tensors(), "trainable_count": ad.params(), "trainable_bytes": ad.element_bytes,
            "trainable_tensors": ad.tensor_count(), "frozen_bytes": frozen_base_bytes(model, regime, N),
            "saved_override": saved}


def extra_phases(model: ModelShape, regime: object, found: Any, step: object = None) -> dict[str, tuple[Term, ...]]:
    """Phases, or phases with more terms, than ``peak_pytorch.step`` gives, for ``recompute="full"``
    (transformers' gradient checkpointing): the ``recompute`` moment, when the last layer is rebuilt in
    backward (``library.lora.recompute_phase``), and, given the ``step`` (a ``StepModel``), its forward
    and backward phases with ``library.lora.checkpoint_leaf`` (a tensor the graph holds, not saved).

    Merge them into the step's phases: ``dataclasses.replace(step, phases={**step.phases, **extra})``.
    Checked for LoRA (no base gradients) and full training (``full_gradients``). ``found`` is the
    full-training saved model, as for ``saved_model``.
    """
    if getattr(regime, "recompute", "none") != "full":
        return {}
    plain = saved_model(model, regime.replace(recompute="none"), found)  # type: ignore[attr-defined]
    checkpointed = saved_model(model, regime, found)
    grads = 0 if active(regime) else full_gradients(model, plain, checkpointed)
    out = {"recompute": lora.recompute_phase(plain, checkpointed, grads)}
    leaf = lora.checkpoint_leaf(plain)
    phases = getattr(step, "phases", None)
    if phases and leaf != 0:
        term = Term("checkpoint.leaf", "the token embedding's output, a leaf the graph holds (enable_input_require_"
                    "grads)", leaf, "bytes", "transformers", "gradient_checkpointing_enable")
        out.update({name: (*phases[name], term) for name in ("forward", "backward") if name in phases})
    return out


def full_gradients(model: ModelShape, plain: pyacts.SavedModel, checkpointed: pyacts.SavedModel) -> sympy.Expr:
    """Full training under checkpointing: the parameter gradients alive at the recompute moment, less
    what backward has freed with them, at the larger of two moments (measured with ``measure.step_peak``).

    In a layer's MLP backward the down projection's weight gradient is done and its input freed. At
    the last layer, the head's (the tied embedding's), the final norm's and that gradient exist; at
    the first layer, rebuilt last, every gradient but the embeddings' (GPT-2's position embedding;
    an untied token embedding) and the first layer's own, with the later layers' kept inputs freed.
    """
    from ..core.symbols import H, L, V, d_ff, n_pos

    family, tb = plain.family, plain.setup.param_bytes
    tied = family == "gpt2" or bool(model.config.get("tie_word_embeddings", False))
    if family == "gpt2":
        sizes = pypeak.parameter_tensors("gpt2")
        layer, down, norm, later = sympy.Add(*sizes[2:14]), d_ff * H + H, 2 * H, n_pos * H
    else:
        bias = model.attention_bias
        sizes = pypeak.parameter_tensors("llama", bias=bias, tied=tied)
        per_layer = (len(sizes) - (2 if tied else 3)) // 2  # [embedding, layer, layer, norm(, head)]
        layer, down, norm, later = sympy.Add(*sizes[1:1 + per_layer]), d_ff * H, H, 0 if tied else V * H
    once = {t.key: t.expr for t in plain.formula.terms}
    kept = {t.key: t.expr for t in checkpointed.formula.terms}
    down_input = once.get("mlp.c_proj.input", once.get("mlp.down.input", 0)) / L
    last = tb * (V * H + norm + down)
    first = tb * (N - later - layer + down) - (L - 1) / L * kept.get("checkpoint.layer_input", 0)
    return sympy.expand(pypeak.maximum(last, first) - down_input)
