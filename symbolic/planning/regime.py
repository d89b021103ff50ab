"""The choices a memory plan depends on, their defaults, and which combinations are invalid.

``resolve(model, mode, **options)`` checks every option against the model and returns a
``Regime``: all choices filled in, which ones were defaults, and notes on choices that change
nothing (ZeRO with one data-parallel rank, sequence parallelism without tensor parallelism...).
Invalid combinations raise ``PlanOptionError`` (a ``UserError``, so a ``ValueError``) with one line.

``activations="pytorch"`` (what torch.autograd really saves, ``planning.pytorch``) was measured
for fp32, bf16 and autocast mixed-precision training of one dense model on one device with
AdamW or SGD: its defaults differ (precision bf16, dropout as the config's probabilities say)
and what it does not model is an error (tensor or pipeline parallelism, recompute, experts,
another logits accounting, other optimizers). ``attn``, ``device``, ``use_cache`` and
``dropout_masks`` choose its implementation and matter for it only. Article A's network
(``mlp``, ``mlp-nobias``) is planned with it only, for training, with ``loss`` cross-entropy or mse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields

from .. import formats
from ..library import activations_pytorch as pyacts
from ..library import parallel as par
from ..library import peak_pytorch as pypeak
from ..library import pipeline
from ..library import precision as prec
from ..networks.quantization import shipped_format
from ..networks.shape import ModelShape
from ..options import records
from ..options import table as opts
from ..options.records import (
    FineTuningOptions,
    ImplementationOptions,
    ParallelOptions,
    ServingOptions,
    ShapeOptions,
    TrainingOptions,
)
from ..options.table import PlanOptionError
from . import finetune

# The option lists and their defaults live in ``symbolic.options.table`` (one place for the
# planner, the report specification and the command line); these names are kept for callers.
MODES = opts.MODES
COMMON = opts.COMMON
TRAIN_ONLY = opts.TRAIN_ONLY
INFER_ONLY = opts.INFER_ONLY
# activations="pytorch": the implementation choices and the precisions that were measured
ATTN = opts.get("attn").choices
DEVICES = opts.get("device").choices
# the precisions the PyTorch step models (pure and autocast mixed precision), as the planner names them
PYTORCH_PRECISIONS = tuple(p for p in prec.PRECISIONS if p in pyacts.PRECISIONS)
PYTORCH_OPTIMIZERS = pypeak.OPTIMIZERS  # the optimizers whose PyTorch step was measured
# options that do not apply to a network without a token sequence (article A's: no attention, dropout or cache)
MLP_HIDDEN = ("seq", "flash", "attn", "use_cache", "dropout", "dropout_masks", "logits", "sequence_parallel")
PYTORCH_ONLY = ("attn", "device", "use_cache", "dropout_masks")
FINETUNE_ONLY = ("lora_targets", "lora_dropout", "adapter_dtype", "lora_rank")
FSDP_ONLY = ("fsdp", "fsdp_param_dtype", "fsdp_reduce_dtype", "reshard_after_forward", "hsdp")
DEFAULT_SEQ = opts.DEFAULT_SEQ


@dataclass(frozen=True)
class Regime:
    """Every choice of one plan, one record per concern (see ``DEFAULTS`` in the package docstring).

    ``regime.shape``, ``regime.parallel``, ``regime.training``, ``regime.finetuning``,
    ``regime.serving`` and ``regime.implementation`` are the records (``options.records``);
    every option also reads by its flat name (``regime.tp`` is ``regime.parallel.tp``), a
    read-only property made from the option table below the class. Build one with ``of``
    (flat names) and change it with ``replace``.
    """

    mode: str
    shape: ShapeOptions = ShapeOptions()
    parallel: ParallelOptions = ParallelOptions()
    training: TrainingOptions = TrainingOptions()
    finetuning: FineTuningOptions = FineTuningOptions()
    serving: ServingOptions = ServingOptions()
    implementation: ImplementationOptions = ImplementationOptions()
    sequence: bool = field(default=True, compare=False)  # the network takes a token sequence (Network.sequence)
    # the planned GPU's compute capability where --gpu names one with it: the attention kernels a probed torch
    # module's CUDA step runs (None: sm90 assumed); see planning.on_gpu
    cuda_arch: tuple[int, int] | None = None
    defaulted: tuple[str, ...] = field(default=(), compare=False)
    notes: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def of(cls, mode: str, *, sequence: bool = True, defaulted: tuple[str, ...] = (), notes: tuple[str, ...] = (),
           **options: object) -> Regime:
        """A regime from flat option values (not validated: ``resolve`` checks user input)."""
        return cls(mode, **records.build(options), sequence=sequence, defaulted=defaulted, notes=notes)

    @property
    def gpus(self) -> int:
        """GPUs in the job: dp · tp · pp · cp."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def train(self) -> bool:
        return self.mode == "train"

    @property
    def pytorch(self) -> bool:
        """Whether the plan trains with ``activations="pytorch"`` (the measured PyTorch step)."""
        return self.train and self.activations == "pytorch"

    def options(self) -> dict[str, object]:
        """The options that apply to this mode, by name (for printing and JSON); ``UNLISTED`` says which not."""
        names = COMMON + (TRAIN_ONLY if self.train else INFER_ONLY)
        quiet = {name for names_, rule in UNLISTED if rule(self) for name in names_}
        return {"mode": self.mode, **{n: getattr(self, n) for n in names if n not in quiet}}

    def replace(self, **changes: object) -> Regime:
        """A copy with some choices changed, each routed to its concern's record (not re-validated)."""
        own = {f.name for f in fields(self)} - set(records.RECORDS)  # mode, sequence, defaulted, notes
        top = {name: changes.pop(name) for name in list(changes) if name in own}
        mine = {concern: getattr(self, concern) for concern in records.RECORDS}
        return dataclasses.replace(self, **top, **records.update(mine, changes))  # type: ignore[arg-type]


def _flat(option: opts.Option) -> property:
    """The read-only property ``regime.<option>``: the value in the option's concern's record."""
    concern, name = option.concern, option.name
    return property(lambda self: getattr(getattr(self, concern), name), doc=option.help)


for _option in opts.OPTIONS:
    if _option.name in vars(Regime):  # a field, record or method of its own would be hidden
        raise TypeError(f"option {_option.name!r} would hide Regime.{_option.name}")
    setattr(Regime, _option.name, _flat(_option))


# When an option is left out of ``Regime.options()`` (what the CLI prints, JSON and reports list):
# the names and the rule, each a choice that does not apply to this plan.
UNLISTED: tuple[tuple[tuple[str, ...], Callable[[Regime], bool]], ...] = (
    (("flash",), lambda r: r.pytorch),  # attn decides what attention keeps
    (tuple(n for n in PYTORCH_ONLY if n != "device"), lambda r: not r.pytorch),  # the measured step's only
    (("device",), lambda r: not r.pytorch and (r.train or r.sequence)),  # and a torch module's forward
    (("dropout_masks",), lambda r: r.pytorch and not r.dropout),  # no masks to size
    (MLP_HIDDEN, lambda r: not r.sequence),  # e.g. article A's network: no sequence, attention, dropout, cache
    (("kv_dtype",), lambda r: not r.sequence),  # a torch module's forward: no KV cache
    (("ep",), lambda r: r.ep == 1 and "ep" in r.defaulted),  # listed when asked for (mixtures of experts)
    (FINETUNE_ONLY, lambda r: not r.lora_rank),  # listed when they apply
    (("prefill_chunk",), lambda r: not r.prefill_chunk),
    (("beams",), lambda r: r.beams == 1),  # issue 29: listed for an encoder-decoder's beam search
    (("sample",), lambda r: not r.sample),  # whole prompts: the output says so in its own line
    (("qlora",), lambda r: not r.qlora),
    (("freeze_embeddings",), lambda r: not r.freeze_embeddings),
    (("loss",), lambda r: "loss" in r.defaulted and r.sequence),
    (("recompute_every",), lambda r: r.recompute_every == 1),  # issue 28: listed when it changes something
    (("logit_chunks",), lambda r: r.logits != "chunked"),
    (("logits_upcast",), lambda r: r.logits_upcast == "loss"),  # listed when the model upcasts
    (("layer_impl",), lambda r: r.layer_impl == "korthikanti"),  # listed when another layer's tensors
    (("tp_impl",), lambda r: r.tp == 1),  # listed under tensor parallelism
    (("grad_accum",), lambda r: "grad_accum" in r.defaulted),  # microbatches says the count
    (("optimizer_in_backward",), lambda r: not r.optimizer_in_backward),
    (("offload_activations",), lambda r: not r.offload_activations),
    (("optimizer_impl",), lambda r: r.optimizer != "adam-8bit" or "optimizer_impl" in r.defaulted),
    (("fp8_recipe",), lambda r: r.precision != "fp8"),
    (FSDP_ONLY, lambda r: not r.fsdp),
    (("fp8_all_gather",), lambda r: not r.fp8_all_gather),
    (("cuda_module_loading",), lambda r: r.cuda_module_loading == "lazy"),
    (("cp",), lambda r: r.cp == 1),
    (("pp_schedule",), lambda r: not r.pp_schedule),  # listed when asked for
    (("compile",), lambda r: not r.compile),  # issue 28: listed when on
    (("compile_loss",), lambda r: not r.compile or r.compile_loss),  # listed when the loss stays eager
)


def _checked(name: str, value: object) -> object:
    """``value`` checked as the option table defines ``name`` (its kind, its values)."""
    return opts.get(name).check(value)


def _default(name: str) -> object:
    """The option's default from ``options.table`` (the ones that depend on others are decided here)."""
    return opts.get(name).default


def default_seq(model: ModelShape) -> int:
    """Learned positions cap the context; otherwise 4096 tokens."""
    return min(model.positions, DEFAULT_SEQ) if model.positions else DEFAULT_SEQ


def resolve(model: ModelShape, mode: str = "train", **options: object) -> Regime:
    """Validate ``options`` for ``model`` and fill in the defaults."""
    mode = opts.check_choice("mode", mode, MODES)
    allowed = opts.NAMES
    for name in options:
        if name not in allowed:
            raise PlanOptionError(f"unknown option {name!r}; options are {', '.join(allowed)}")
    given = {k: v for k, v in options.items() if v is not None}
    wrong = TRAIN_ONLY if mode == "infer" else INFER_ONLY
    misplaced = [k for k in given if k in wrong]
    if misplaced:
        other = "train" if mode == "infer" else "infer"
        raise PlanOptionError(f"{', '.join(misplaced)} {'applies' if len(misplaced) == 1 else 'apply'} to mode {other}, "
                         f"not {mode}")
    defaulted: list[str] = []
    notes: list[str] = []

    def pick(name: str, default: object) -> object:
        if name in given:
            return given[name]
        defaulted.append(name)
        return default

    batch = _checked("batch", pick("batch", _default("batch")))
    seq = _checked("seq", pick("seq", default_seq(model)))
    if model.positions and seq > model.positions:
        raise PlanOptionError(f"{model.name} has {model.positions} learned positions; seq {seq} exceeds them")
    dp, tp, pp = (_checked(n, pick(n, _default(n))) for n in ("dp", "tp", "pp"))
    if not model.sequence:
        if mode != "train" and not model.forward_inference:
            raise PlanOptionError(f"{model.name} ({_what(model)}) is planned for training only (--mode train)")
    else:
        _check_tp(model, tp)
        if model.layers % pp and mode != "train":
            raise PlanOptionError(f"pp {pp} must divide the {model.layers} layers of {model.name}")
    ep = _checked("ep", pick("ep", _default("ep")))
    _check_ep(model, ep, dp, tp)
    flash = _checked("flash", pick("flash", _default("flash")))
    runtime = _checked("runtime", pick("runtime", _default("runtime")))
    loading = _checked("cuda_module_loading", pick("cuda_module_loading", _default("cuda_module_loading")))
    data: dict[str, object] = {"batch": batch, "seq": seq, "dp": dp, "tp": tp, "pp": pp, "ep": ep,
                               "flash": flash, "runtime": runtime, "cuda_module_loading": loading}
    if mode == "infer":
        shipped = None if "weights" in given else shipped_format(model)  # the config's quantization_config
        weights = _checked("weights", pick("weights", shipped or _default("weights")))
        if shipped:
            rules = getattr(model, "quantization_rules", None)
            where = (f"its config's quantization_config: {rules.describe()}" if rules is not None
                     else "the file's own tensor types")
            notes.append(f"weights: {shipped}, the format the checkpoint ships in ({where}); --weights chooses another")
        kv_default = formats.get(weights).compute  # a quantised format's 16-bit compute dtype
        data["weights"] = weights
        data["kv_dtype"] = _checked("kv_dtype", pick("kv_dtype", kv_default))
        if "prefill_chunk" in given:
            data["prefill_chunk"] = _checked("prefill_chunk", given["prefill_chunk"])
        data["device"] = _infer_device(model, pick, given)
        data.update(_decoding(model, pick, given))
        if dp > 1:
            notes.append(f"dp {dp}: inference replicas each hold the whole plan; per-GPU memory is unchanged")
    else:
        data.update(_train_options(model, pick, notes, dp, tp, pp, flash, given))
        if ep > 1 and (data["pp_schedule"] or model.layers % (pp * int(data["interleave"]))):  # type: ignore[call-overload]
            raise PlanOptionError(f"uneven pipeline stages and pp_schedule are not modelled with expert parallelism "
                                  f"(ep {ep}); use a pp × interleave that divides the {model.layers} layers")
        if data["fsdp"] and ep > 1:
            raise PlanOptionError(f"--fsdp is not modelled with expert parallelism (ep {ep})")
        chunks = 2 * int(data["cp"])  # type: ignore[call-overload]
        if chunks > 2 and seq % chunks:
            raise PlanOptionError(f"seq {seq} must be divisible by 2·cp = {chunks} (PyTorch's context parallelism "
                                  "cuts each sequence into 2·cp load-balanced chunks)")
    return Regime.of(mode, **data, sequence=model.sequence, defaulted=tuple(defaulted),  # type: ignore[arg-type]
                     notes=tuple(notes))


def _decoding(model: ModelShape, pick: Callable[[str, object], object], given: Collection[str]) -> dict[str, object]:
    """--beams and --sample: how an encoder-decoder's generate decodes; refused where a plan has no generate loop."""
    beams = _checked("beams", pick("beams", _default("beams")))
    sample = _checked("sample", pick("sample", _default("sample")))
    asked = [a for a, on in ((f"beams {beams}", beams != 1), ("sample", sample)) if on]
    if asked and not model.generates:
        raise PlanOptionError(f"{' and '.join(asked)}: {'apply' if len(asked) > 1 else 'applies'} to an "
                              f"encoder-decoder's generation (T5, BART, Whisper: --mode infer); {model.name} "
                              f"({_what(model)}) has no generate loop to plan")
    if sample and beams > 1:  # type: ignore[operator]
        raise PlanOptionError(f"beams {beams} with sample (beam sampling) is not modelled; ask for one of them")
    return {"beams": beams, "sample": sample}


def _infer_device(model: ModelShape, pick: Callable[[str, object], object], given: Collection[str]) -> object:
    """--device in inference: whose attention kernels a torch module's forward runs; refused by a formula's plan."""
    if "device" in given and (model.sequence or not model.forward_inference):
        raise PlanOptionError(f"device applies in mode infer to a torch module's forward; {model.name} "
                              f"({_what(model)}) plans its inference by formula")
    return _checked("device", pick("device", _default("device")))


def _check_ep(model: ModelShape, ep: int, dp: int, tp: int) -> None:
    """Expert parallelism (issue 12): experts split over ep GPUs taken from the dp·tp ranks."""
    if ep == 1:
        return
    if not model.moe:
        raise PlanOptionError(f"ep {ep}: {model.name} has no mixture-of-experts layers to split")
    experts = model.numbers.get("n_exp", 0)
    if experts % ep:
        raise PlanOptionError(f"ep {ep} must divide the {experts} experts of {model.name}")
    if (dp * tp) % ep:
        raise PlanOptionError(f"ep {ep} must divide dp·tp = {dp * tp} (expert-parallel ranks are data- or "
                              "tensor-parallel ranks)")


def _check_tp(model: ModelShape, tp: int) -> None:
    if not model.tensor_parallel:  # e.g. the generic torch path: which matrices split is not known
        if tp > 1:
            raise PlanOptionError(f"tp {tp}: {model.name} ({_what(model)}): tensor parallelism cannot be said without "
                                  "a family table (which of its matrices split over t ranks); plan tp 1")
        return
    if model.heads % tp:
        raise PlanOptionError(f"tp {tp} must divide the {model.heads} attention heads of {model.name}")
    kv = model.kv_head_count
    if kv % tp and tp % kv:
        raise PlanOptionError(f"tp {tp} and the {kv} key/value heads of {model.name} must divide one another")


def _train_options(model: ModelShape, pick: Callable[[str, object], object], notes: list[str], dp: int, tp: int,
                   pp: int, flash: bool, given: Collection[str]) -> dict[str, object]:
    if model.tensor_parallel and tp > model.kv_head_count:
        raise PlanOptionError(f"training with tp {tp} over {model.kv_head_count} key/value heads of {model.name} is not "
                         "modelled (Megatron requires the key/value heads to divide by tp)")
    mlp = not model.sequence  # a network without a token sequence: only its saved-tensor model applies
    activations = _checked("activations", pick("activations", "pytorch" if mlp else _default("activations")))
    pytorch = activations == "pytorch"
    if mlp and not pytorch:
        raise PlanOptionError(f"{model.name} ({_what(model)}) is modelled with activations pytorch only, not "
                              f"{activations}")
    if pytorch:
        _check_pytorch(model, tp, pp)
    precision = _checked("precision", pick("precision", "bf16" if pytorch else _default("precision")))
    if pytorch and precision not in PYTORCH_PRECISIONS:
        raise PlanOptionError(f"activations pytorch models precision {', '.join(PYTORCH_PRECISIONS)} (what was "
                              f"measured), not {precision}")
    optimizer = _checked("optimizer", pick("optimizer", _default("optimizer")))
    optimizer_impl = _checked("optimizer_impl", pick("optimizer_impl", _default("optimizer_impl")))
    if "optimizer_impl" in given and optimizer != "adam-8bit":
        raise PlanOptionError(f"optimizer_impl chooses whose 8-bit AdamW steps (optimizer adam-8bit), not {optimizer}")
    if pytorch and optimizer not in PYTORCH_OPTIMIZERS:
        raise PlanOptionError(f"activations pytorch models the optimizers {', '.join(PYTORCH_OPTIMIZERS)} (what was "
                              f"measured), not {optimizer}")
    try:
        grads = prec.get(precision).grad_choice(pick("grads", None))  # type: ignore[arg-type]
    except ValueError as err:  # the library's one-line message, as a user error
        raise PlanOptionError(str(err)) from None
    if pytorch and precision.endswith("-mixed"):  # autocast: each gradient in its parameter's dtype, fp32
        if "grads" in given and grads != "fp32":
            raise PlanOptionError(f"activations pytorch keeps each gradient in its parameter's dtype: fp32 under "
                                  f"{precision} (autocast over fp32 weights); --grads {grads} applies to the "
                                  "formula activations (korthikanti)")
        grads = "fp32"
    recompute = _checked("recompute", pick("recompute", _default("recompute")))
    dropout_default = (bool(pyacts.dropout_sites(model.config)) and not mlp) if pytorch \
        else model.dropout_default
    dropout = _checked("dropout", pick("dropout", dropout_default))
    zero = _checked("zero", pick("zero", _default("zero")))
    sp = _checked("sequence_parallel", pick("sequence_parallel", _default("sequence_parallel")))
    microbatches, grad_accum = _accumulation(pick, given, pp)
    interleave = _checked("interleave", pick("interleave", _default("interleave")))
    offload = _checked("offload", pick("offload", _default("offload")))
    logits = _checked("logits", pick("logits", _default("logits")))
    recompute_every = _checked("recompute_every", pick("recompute_every", _default("recompute_every")))
    logit_chunks = _checked("logit_chunks", pick("logit_chunks", _default("logit_chunks")))
    _check_saved(model, activations, recompute, recompute_every, logits, "logit_chunks" in given, flash=flash, pp=pp)
    compiled = bool(_checked("compile", pick("compile", _default("compile"))))
    upcast = str(_checked("logits_upcast", pick("logits_upcast", _default("logits_upcast"))))
    if upcast == "model":
        _check_upcast(activations, str(logits), tp)
    layer_impl = str(_checked("layer_impl", pick("layer_impl", _default("layer_impl"))))
    if layer_impl != "korthikanti":
        _check_layer_impl(model, layer_impl, activations, tp, recompute=str(recompute), compiled=compiled,
                          fused=bool(flash) and not dropout, precision=str(precision),
                          every=int(recompute_every))  # type: ignore[arg-type]
    compile_loss = bool(_checked("compile_loss", pick("compile_loss", _default("compile_loss"))))
    if "compile_loss" in given and not compiled:
        raise PlanOptionError("compile_loss applies with compile (the layers compiled); add --compile")
    attn = _checked("attn", pick("attn", _default("attn")))
    device = _checked("device", pick("device", _default("device")))
    if zero not in par.ZERO_STAGES:
        raise PlanOptionError(f"zero must be 0, 1, 2 or 3, got {zero}")
    if zero >= 2 and pp > 1:
        raise PlanOptionError(f"ZeRO stage {zero} cannot be combined with pipeline parallelism (pp {pp}): DeepSpeed "
                         "allows only stages 0 and 1 with pipelines")
    if offload and zero == 0:
        raise PlanOptionError("optimizer offload needs ZeRO stage 1, 2 or 3 (DeepSpeed ZeRO-Offload)")
    schedule, interleave = _schedule(model, given, pick, pp, interleave, microbatches)
    if activations == "article-b" and "a" not in model.numbers:
        raise PlanOptionError(f"article B's activation formula needs the attention heads a, which {model.name} "
                              f"({_what(model)}) does not give; use korthikanti")
    if activations == "article-b" and (tp > 1 or pp > 1):
        raise PlanOptionError("article B's activation formula has no tensor or pipeline parallelism; use korthikanti")
    if pytorch and recompute in ("selective", "ops") and mlp:
        raise PlanOptionError(f"recompute {recompute} drops chosen tensors of a transformer layer the planner knows; "
                              f"{model.name} ({_what(model)}) is planned with its own measured step: recompute full "
                              "checkpoints its repeated blocks whole")
    if pytorch and recompute == "selective":
        raise PlanOptionError("activations pytorch does not model recompute selective (transformers checkpoints "
                              "whole layers: recompute full); use activations korthikanti")
    if pytorch and recompute == "full" and mlp:
        _check_blocks(model, recompute_every)
    if pytorch and logits != "hf":
        raise PlanOptionError(f"activations pytorch counts Hugging Face's loss as PyTorch keeps it; logits {logits} "
                         "is not modelled with it (leave logits at hf)")
    if zero and dp == 1:
        notes.append(f"ZeRO stage {zero} shards over data-parallel ranks; with dp 1 it changes nothing")
    if sp and tp == 1:
        notes.append("sequence parallelism splits over the tensor-parallel ranks; with tp 1 it changes nothing")
    if recompute == "selective" and flash and activations == "korthikanti":
        notes.append("selective recompute drops the s² attention tensors, which FlashAttention never stores: "
                     "no change")
    if activations == "article-b":
        notes.append("article B's activations ignore flash, recompute, dropout and the model's head count")
    if pytorch and "flash" in given:
        notes.append("flash does not apply to activations pytorch: attn (eager or sdpa) and device decide what "
                     "attention keeps")
    use_cache = _checked("use_cache", pick("use_cache", bool(model.config.get("use_cache", True))
                                        and recompute != "full" and not mlp and not compiled))
    if use_cache and mlp:
        raise PlanOptionError(f"{model.name} ({_what(model)}) has no KV cache: use_cache does not apply")
    dropout_masks = _checked("dropout_masks", pick("dropout_masks", "bool" if device == "cuda" else "dtype"))
    loss = _checked("loss", pick("loss", "cross-entropy"))
    if loss != "cross-entropy" and not mlp:
        raise PlanOptionError(f"loss {loss} applies to article A's network (mlp, mlp-nobias); language models use "
                              "Hugging Face's cross-entropy")
    if compiled:
        _check_compile(model, activations, logits, dropout=bool(dropout), flash=flash, use_cache=bool(use_cache),
                       attn=str(attn), precision=str(precision))
    tuning = finetune.resolve(model, pick, notes, activations=activations, precision=precision)
    if optimizer_impl == "torchao" and (tuning.get("lora_rank") or tuning.get("freeze_embeddings")):
        raise PlanOptionError("optimizer_impl torchao is modelled for full training (its step's temporaries are the "
                              "largest weight's); not with lora_rank or freeze_embeddings")
    if compiled and pytorch:
        _check_compiled_pytorch(str(recompute), tuning)
    lifetimes = _lifetimes(pick, notes, pp=pp, zero=zero, offload=offload, recompute=recompute,
                           activations=activations, microbatches=microbatches)
    own_units = pytorch and "fsdp" in given and model.fsdp_units is not None  # a network's own step and units
    sharding = _fsdp_options(pick, notes, given, precision=precision, zero=zero, offload=offload, dp=dp, pp=pp,
                             pytorch=pytorch and not own_units, lora=bool(tuning.get("lora_rank")))
    if own_units and sharding["fsdp"]:
        sharding = _own_fsdp(sharding, given, str(precision), in_backward=bool(lifetimes["optimizer_in_backward"]))
    if pp > 1 and not sharding["fsdp"]:  # FSDP2's stages keep their unsharded gradients in every phase
        notes.append("pp > 1: a stage's gradients count from its first backward to the optimizer step, beside the "
                     "activations still in flight then (PyTorch's pipeline stage accumulates param.grad over the "
                     "micro-batches; Megatron's gradient buffer is alive all step, before it too)")
    context = _cp_options(model, pick, fsdp=bool(sharding["fsdp"]), flash=flash, activations=activations)
    tp_impl = str(_checked("tp_impl", pick("tp_impl", "dtensor" if sharding["fsdp"] else "megatron")))
    if tp_impl == "dtensor" and tp > 1 and compiled and precision == "fp8" and sharding["fp8_recipe"] != "tensorwise":
        raise PlanOptionError(f"tp_impl dtensor with --compile and float8 is modelled for the tensorwise recipe "
                              f"(torchao's float8 TP styles), not {sharding['fp8_recipe']}")
    if not pytorch and any(name in given for name in PYTORCH_ONLY):
        notes.append("attn and device choose the implementation for activations pytorch; with "
                     f"activations {activations} they change nothing")
    return {"precision": precision, "optimizer": optimizer, "optimizer_impl": optimizer_impl, "grads": grads, "recompute": recompute,
            "dropout": dropout, "zero": zero, "sequence_parallel": sp, "microbatches": microbatches,
            "interleave": interleave, "pp_schedule": schedule, "offload": offload, "logits": logits, "activations": activations,
            "recompute_every": recompute_every, "logit_chunks": logit_chunks,
            "attn": attn, "device": device, "use_cache": use_cache, "dropout_masks": dropout_masks, "loss": loss,
            "grad_accum": grad_accum, "compile": compiled, "compile_loss": compile_loss, "logits_upcast": upcast,
            "layer_impl": layer_impl, "tp_impl": tp_impl, **tuning, **lifetimes, **sharding, **context}


def _schedule(model: ModelShape, given: Collection[str], pick: Callable[[str, object], object], pp: int,
              interleave: int, microbatches: int) -> tuple[str, int]:
    """(pp_schedule, v): the schedule asked for ("" when not: Megatron's count) and its stages per GPU."""
    schedule = str(_checked("pp_schedule", pick("pp_schedule", None))) if "pp_schedule" in given else ""
    if interleave > 1 and pp == 1:
        raise PlanOptionError("interleave (virtual pipeline stages) needs pp > 1")
    if schedule and pp == 1:
        raise PlanOptionError(f"pp_schedule {schedule} needs pp > 1")
    if schedule in pipeline.SINGLE_STAGE and interleave > 1:
        raise PlanOptionError(f"pp_schedule {schedule} runs one stage per GPU; interleave {interleave} needs "
                              "interleaved or zbv")
    if schedule == "zbv" and interleave not in (1, 2):
        raise PlanOptionError(f"pp_schedule zbv runs exactly 2 stages per GPU (PyTorch's ScheduleZBVZeroBubble), "
                              f"not interleave {interleave}")
    if schedule in ("interleaved", "zbv") and interleave == 1:
        interleave = pipeline.DEFAULT_STAGES_PER_RANK  # torchtitan's default for multi-stage schedules
    if schedule == "interleaved":
        rounds = max(1, microbatches // pp)
        if microbatches % rounds:
            raise PlanOptionError(f"pp_schedule interleaved needs the {microbatches} micro-batches to be a multiple of "
                                  f"the rounds ({rounds}: PyTorch's ScheduleInterleaved1F1B)")
    if pp == 1 or not model.sequence:
        return schedule, interleave
    if model.layers % (pp * interleave) or schedule:
        try:
            pipeline.stage_layers(model.layers, pp * interleave)
        except ValueError as err:
            raise PlanOptionError(str(err)) from None
    return schedule, interleave


def one_count(grad_accum: object, microbatches: object) -> str:
    """The refusal of a grad_accum and a microbatches that differ (one count under two names)."""
    return (f"grad_accum {grad_accum} and microbatches {microbatches} are one count (micro-batches per optimizer "
            "step); give one of them")


def _accumulation(pick: Callable[[str, object], object], given: Collection[str], pp: int) -> tuple[int, int]:
    """(microbatches, grad_accum): one count, micro-batches per optimizer step (``plan``'s grad_accum, time's m).

    ``grad_accum`` sets it, or ``microbatches`` (default pp: fills the pipeline); both given must agree.
    """
    if "grad_accum" not in given:
        microbatches = _checked("microbatches", pick("microbatches", pp))
        return microbatches, _checked("grad_accum", pick("grad_accum", microbatches))  # type: ignore[return-value]
    count = _checked("grad_accum", pick("grad_accum", None))
    # grad_accum sets the count: microbatches is not a default then (the options line would star it)
    microbatches = _checked("microbatches", pick("microbatches", count)) if "microbatches" in given else count
    if microbatches != count:
        raise PlanOptionError(one_count(count, microbatches))
    return microbatches, count  # type: ignore[return-value]


def _lifetimes(pick: Callable[[str, object], object], notes: list[str], *, pp: int, zero: int, offload: bool,
               recompute: str, activations: str, microbatches: int) -> dict[str, object]:
    """The step's lifetimes (issue 28): the optimizer in backward and activation offloading, and their refusals."""
    in_backward = _checked("optimizer_in_backward", pick("optimizer_in_backward", _default("optimizer_in_backward")))
    offloading = _checked("offload_activations", pick("offload_activations", _default("offload_activations")))
    if in_backward and microbatches > 1:
        raise PlanOptionError(f"optimizer_in_backward steps each parameter as its gradient arrives: it cannot "
                              f"accumulate {microbatches} micro-batches (torchtune refuses it too); use grad_accum 1")
    if in_backward and (zero or offload):
        raise PlanOptionError("optimizer_in_backward is modelled without ZeRO or optimizer offload (torchtune's "
                              "single-device recipe); use zero 0")
    if offloading and recompute != "full":
        raise PlanOptionError("offload_activations offloads the checkpointed layer inputs: it needs recompute full "
                              "(torchtune's recipe refuses it without activation checkpointing)")
    if offloading and (activations != "korthikanti" or pp > 1):
        raise PlanOptionError("offload_activations is modelled with activations korthikanti and pp 1 (torchtune's "
                              "single-device full_finetune and lora_finetune recipes)")
    if pp == 1 and microbatches > 1:
        notes.append(f"grad_accum {microbatches}: the gradients of the earlier micro-batches are alive through the "
                     "forward and backward of each later one; activations are per micro-batch")
    return {"optimizer_in_backward": in_backward, "offload_activations": offloading}


def _check_saved(model: ModelShape, activations: str, recompute: str, every: int, logits: str, chunks_given: bool,
                 *, flash: bool, pp: int) -> None:
    """The rules of --recompute ops, --recompute-every and --logit-chunks (issue 28), each a one-line refusal."""
    if recompute == "ops":
        if activations != "korthikanti":
            raise PlanOptionError(f"recompute ops is modelled with activations korthikanti (torchtitan's layer), not "
                                  f"{activations}")
        if not flash or model.moe:
            raise PlanOptionError("recompute ops models torchtitan's dense layer with a fused attention kernel (its "
                                  "save list has the flash and memory-efficient SDPA ops): use flash and a dense model")
    if every > 1:
        if recompute != "full":
            raise PlanOptionError(f"recompute-every {every} needs recompute full (every N-th layer checkpointed)")
        if activations != "korthikanti" and (model.sequence or not model.checkpoint_blocks):
            raise PlanOptionError(f"recompute-every is modelled with activations korthikanti, not {activations}")
        if pp > 1:
            raise PlanOptionError("recompute-every is modelled without pipeline parallelism (pp 1): which layers a "
                                  "stage checkpoints depends on the framework's count across stages")
    if chunks_given and logits != "chunked":
        raise PlanOptionError(f"logit-chunks applies to logits chunked, not {logits}")


def _own_fsdp(sharding: dict[str, object], given: Collection[str], precision: str, *,
              in_backward: bool) -> dict[str, object]:
    """FSDP2 over a network's own step (a torch module): param_dtype the step's own, or under mixed precision the
    16-bit dtype (no autocast, torchtitan's default) or fp32 (autocast in the forward); anything else refused."""
    allowed = own_param_dtypes(precision)
    asked = sharding["fsdp_param_dtype"]
    if "fsdp_param_dtype" in given and asked not in allowed:
        if len(allowed) == 1:
            raise PlanOptionError(f"fsdp_param_dtype {asked}: a torch module's step is measured in pure {precision}, "
                                  f"so FSDP2 gathers its parameters in {precision} (leave --fsdp-param-dtype out)")
        raise PlanOptionError(f"fsdp_param_dtype {asked} with precision {precision}: FSDP2 gathers a torch module "
                              f"in {allowed[0]} (computing in it, no autocast) or fp32 (the forward under autocast)")
    if in_backward:
        raise PlanOptionError("optimizer_in_backward is not modelled with --fsdp for a torch module")
    return {**sharding, "fsdp_param_dtype": asked if "fsdp_param_dtype" in given else allowed[0]}


def own_param_dtypes(precision: str) -> tuple[str, ...]:
    """FSDP2's param_dtype for a torch module's step, the default first: bf16-mixed gathers bf16 (as the table
    families' default) or fp32; a pure precision gathers itself."""
    half = precision.removesuffix("-mixed")
    return (half, "fp32") if half != precision else (precision,)


def _check_blocks(model: ModelShape, every: int) -> None:
    """recompute full for a network without a token sequence: its own repeated blocks checkpointed, or refused."""
    blocks = model.checkpoint_blocks
    if not blocks:
        raise PlanOptionError(f"{model.name} ({_what(model)}) has no layers to checkpoint (no repeated blocks: an "
                              "nn.ModuleList or nn.Sequential of two or more modules of one class): recompute full "
                              "does not apply")
    if every > len(blocks):
        raise PlanOptionError(f"recompute-every {every}: {model.name} has {len(blocks)} repeated blocks, so no block "
                              "would be checkpointed")


def _fsdp_options(pick: Callable[[str, object], object], notes: list[str], given: Collection[str], *,
                  precision: str, zero: int, offload: bool, dp: int, pp: int, pytorch: bool,
                  lora: bool) -> dict[str, object]:
    """float8 training and FSDP2/HSDP (issue 28): their options checked against each other and the rest."""
    fp8 = precision == "fp8"
    if "fp8_recipe" in given and not fp8:
        raise PlanOptionError(f"fp8_recipe applies to precision fp8 (torchao float8 training), not {precision}")
    recipe = _checked("fp8_recipe", pick("fp8_recipe", "tensorwise"))
    fsdp = _checked("fsdp", pick("fsdp", _default("fsdp")))
    loose = [name for name in FSDP_ONLY[1:] if name in given]
    if loose and not fsdp:
        raise PlanOptionError(f"{', '.join(loose)} {'applies' if len(loose) == 1 else 'apply'} with --fsdp (FSDP2)")
    all_gather = _checked("fp8_all_gather", pick("fp8_all_gather", _default("fp8_all_gather")))
    if all_gather and not (fsdp and fp8):
        raise PlanOptionError("fp8_all_gather needs --fsdp and --precision fp8 (FSDP2 all-gathers torchao's float8 "
                              "weights)")
    if all_gather and recipe != "tensorwise":
        raise PlanOptionError(f"fp8_all_gather supports the tensorwise recipe only, not {recipe} (torchao's "
                              "Float8LinearConfig refuses it)")
    hsdp = _checked("hsdp", pick("hsdp", _default("hsdp")))
    reshard = _checked("reshard_after_forward", pick("reshard_after_forward", _default("reshard_after_forward")))
    out: dict[str, object] = {"fp8_recipe": recipe, "fsdp": fsdp, "fp8_all_gather": all_gather, "hsdp": hsdp,
                              "reshard_after_forward": reshard,
                              "fsdp_param_dtype": _checked("fsdp_param_dtype", pick("fsdp_param_dtype", "bf16")),
                              "fsdp_reduce_dtype": _checked("fsdp_reduce_dtype", pick("fsdp_reduce_dtype", "fp32"))}
    if not fsdp:
        return out
    refused = [what for what, on in (("--zero (FSDP2 is the sharding)", zero), ("--offload", offload),
                                     ("activations pytorch", pytorch), ("LoRA", lora)) if on]
    if refused:
        raise PlanOptionError(f"--fsdp is not modelled with {', '.join(refused)}")
    if dp % hsdp:
        raise PlanOptionError(f"hsdp {hsdp} must divide dp {dp} (R replicas of a shard group of dp/R ranks)")
    if dp // hsdp == 1 and pick("cp", 1) == 1:
        notes.append(f"fsdp: a shard group of one rank (dp {dp}, hsdp {hsdp}) shards nothing")
    if "grads" in given:
        notes.append("fsdp: gradients are sharded in the sharded parameters' dtype; --grads changes nothing")
    if pp > 1:
        notes.append("fsdp with pp: each stage's blocks stay unsharded and their gradients accumulate unsharded in "
                     "reduce_dtype until the last micro-batch's backward (PyTorch's pipeline stage syncs only then; "
                     "torchtitan sets reshard_after_forward False under pp), so reshard_after_forward changes "
                     "nothing")
    return out


def _cp_options(model: ModelShape, pick: Callable[[str, object], object], *, fsdp: bool, flash: bool,
                activations: str) -> dict[str, object]:
    """Context parallelism (issue 28): torchtitan's ring attention, refused where torchtitan or this model cannot."""
    cp = _checked("cp", pick("cp", _default("cp")))
    if cp == 1:
        return {"cp": cp}
    refused = [what for what, on in (("--no-flash (the ring needs SDPA's flash or efficient kernel)", not flash),
                                     (f"activations {activations}", activations != "korthikanti"),
                                     (f"{model.name} ({_what(model)}): no attention over a sequence",
                                      not (model.sequence and model.has_attention))) if on]
    if refused:
        raise PlanOptionError(f"--cp is not modelled with {', '.join(refused)}")
    if not fsdp:
        raise PlanOptionError(f"--cp {cp} needs --fsdp (torchtitan applies FSDP over the dp × cp ranks whenever "
                              "cp > 1)")
    return {"cp": cp}


def _check_compile(model: ModelShape, activations: str, logits: str, *, dropout: bool, flash: bool, use_cache: bool,
                   attn: str, precision: str) -> None:
    """The rules of --compile (issue 28): what was measured under inductor, each a one-line refusal."""
    if activations not in ("korthikanti", "pytorch"):
        raise PlanOptionError(f"compile is modelled with activations korthikanti or pytorch, not {activations}")
    if model.kind == "generic" or not model.sequence or model.moe:
        raise PlanOptionError(f"compile is modelled for the dense transformer families (llama, gpt2 and their "
                              f"tables), not {model.name} ({_what(model)})")
    if dropout:
        raise PlanOptionError("compile is modelled without dropout (inductor replaces the masks by recomputed "
                              "random numbers, not measured): add --no-dropout")
    fused = attn == "sdpa" if activations == "pytorch" else flash
    if not fused:
        raise PlanOptionError("compile is modelled with a fused attention kernel (flash, or attn sdpa with "
                              "activations pytorch)")
    if activations == "pytorch" and (use_cache or precision.endswith("-mixed")):
        raise PlanOptionError("compile with activations pytorch is measured without a KV cache and autocast: use "
                              "--no-use-cache and fp32 or bf16")
    if logits not in ("hf", "fused", "chunked"):
        raise PlanOptionError(f"compile models the compiled Hugging Face-style loss (logits hf), torchtune's chunked "
                              f"one (logits chunked) or a fused kernel (logits fused), not logits {logits}")


def _check_upcast(activations: str, logits: str, tp: int) -> None:
    """--logits-upcast model (torchtune's fp32 logits): modelled for the one-rank Hugging Face-style loss."""
    if activations != "korthikanti":
        raise PlanOptionError(f"logits_upcast model is modelled with activations korthikanti, not {activations}")
    if logits != "hf":
        raise PlanOptionError(f"logits_upcast model applies to logits hf (torchtune's chunked output upcasts each "
                              f"chunk in the loss), not {logits}")
    if tp > 1:
        raise PlanOptionError("logits_upcast model is modelled on one tensor-parallel rank (tp 1)")


def _check_layer_impl(model: ModelShape, impl: str, activations: str, tp: int, *, recompute: str,
                      compiled: bool, fused: bool, precision: str, every: int) -> None:
    """--layer-impl torchtune: torchtune's dense gated layer on one tensor-parallel rank, eager or compiled, with full
    checkpointing or none (measured so: tests/test_torchtune_loss.py, tests/test_torchtune_layer.py)."""
    if activations != "korthikanti":
        raise PlanOptionError(f"layer_impl {impl} is modelled with activations korthikanti, not {activations}")
    if recompute not in ("none", "full") or every > 1:
        every_nth = f" every {every}" if every > 1 else ""
        raise PlanOptionError(f"layer_impl {impl} is measured with recompute none or full (torchtune's "
                              f"checkpoint_wrapper around every layer), not {recompute}{every_nth}")
    if compiled and precision == "fp8":
        raise PlanOptionError(f"layer_impl {impl} is measured compiled in bf16, not with float8 linears")
    if not fused:
        raise PlanOptionError(f"layer_impl {impl} is modelled with a fused attention kernel (flash) and no dropout")
    if tp > 1 or model.moe or not model.gated:
        raise PlanOptionError(f"layer_impl {impl} is modelled for a dense gated layer on one tensor-parallel rank")


def _check_compiled_pytorch(recompute: str, tuning: Mapping[str, object]) -> None:
    """compile with activations pytorch holds for full training without recompute only (measured on the CPU with
    inductor, tests/test_compile_step.py): the eager adjustments for checkpointing and adapters miss the compiled
    blocks' backward (tiny bf16 Llama and GPT-2, two points each, docs/accuracy.md: recompute full −1.9 to +10 %
    at the backward peak, LoRA up to +8 %), so each is refused in one line."""
    adjusted = [what for what, on in (("recompute full", recompute == "full"), ("LoRA", tuning.get("lora_rank")),
                                      ("frozen embeddings", tuning.get("freeze_embeddings"))) if on]
    if adjusted:
        raise PlanOptionError(f"compile with activations pytorch is measured for full training without recompute, not "
                              f"with {' or '.join(adjusted)} (the eager step's adjustments miss the compiled blocks' "
                              "backward by up to 10 % on the CPU): use activations korthikanti or drop --compile")


def _what(model: ModelShape) -> str:
    """What the network is, in an error's parentheses ("article A's network")."""
    return model.label or model.kind


def _check_pytorch(model: ModelShape, tp: int, pp: int) -> None:
    """What ``activations="pytorch"`` does not model, as one-line errors (see the module docstring)."""
    missing = [f"{what} ({name} {degree})" for what, name, degree in
               (("tensor parallelism", "tp", tp), ("pipeline parallelism", "pp", pp)) if degree > 1]
    if missing:
        raise PlanOptionError(f"activations pytorch does not model {' or '.join(missing)}: what PyTorch saves was "
                         "measured on one device; use activations korthikanti")
    if model.pytorch_family is None:
        raise PlanOptionError(f"activations pytorch has no saved-tensor model of {model.name} ({_what(model)}): it "
                              "was measured on GPT-2, Llama-family and article A's networks; use activations korthikanti")
    if model.moe:
        raise PlanOptionError(f"activations pytorch does not model mixture-of-experts layers ({model.name}): it was "
                         "measured on GPT-2 and Llama-family dense models; use activations korthikanti")
