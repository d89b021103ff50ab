"""The options of a memory plan, each written once: name, mode, kind, allowed values, default, help, concern.

The planner (``planning.regime``) resolves and checks them (``Option.check``) and keeps them in
one small record per concern (``options.records``: shape, parallel, training, finetuning,
serving, implementation), the report specification (``report.spec``) validates its ``[regime]``
table from them, and the command line (``cli.memory``) builds its flags from them. A new option
(say ``cp``) is one entry of ``OPTIONS``, which gives it its flag, its report key, its Python
keyword and its field in its concern's record (``regime.cp`` reads it), plus what the planner
does with it (its rules in ``planning.regime.resolve``). Allowed values come from the library
modules that define what each choice means (precision, optimizers, activations, inference,
LoRA), so they are never copied. This module sits low in the layers (it imports the library
only), so the CLI can import it at start-up.

``default`` is the planner's default when it does not depend on anything else; ``None`` means
it does (``grads`` follows the precision, ``dropout`` the model type, ``microbatches`` the
pipeline degree, ``kv_dtype`` the weights): ``planning.regime.resolve`` decides those, and
``fallback`` is what a plan holds where the option does not apply (the other mode's options,
LoRA's without a rank).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import formats as _formats
from ..core.errors import UnknownNameError, UserError, quote
from ..library import activations as _acts
from ..library import activations_pytorch as _pyacts
from ..library import adam_8bit_step as _adam8
from ..library import fsdp as _fsdp
from ..library import inference as _infer
from ..library import optimizers as _optim
from ..library import pipeline as _pipeline
from ..library import precision as _prec
from ..library import runtime as _runtime
from ..library import upcast_logits as _upcast

MODES = ("train", "infer")
DEFAULT_MODE = "train"
DEFAULT_SEQ = 4096
# The longest sequence a plan takes: 2**27 = 134,217,728 tokens. The longest context a published
# model supports is Llama 4 Scout's 10M tokens (Meta's model card, April 2025); the bound is more
# than ten times that, so no real plan meets it, while a length past it is a slip (1e9 tokens
# answers in PiB) or a unit mistake, and the planner refuses it instead of answering.
MAX_SEQ = 2**27
# kinds: a size (batch, seq) or a degree (parallelism, micro-batches) is a whole number ≥ 1,
# a stage one of ``choices`` (whole numbers), a flag true or false, a choice one of ``choices``,
# names a comma-separated list of module names (LoRA targets), a fraction a probability 0 ≤ p < 1
KINDS = ("size", "degree", "stage", "flag", "choice", "names", "fraction")
# dropout mask elements with --activations pytorch: a bool (CUDA's fused dropout) or the compute dtype (CPU)
DROPOUT_MASKS = _pyacts.DROPOUT_MASKS
LOSSES = _pyacts.LOSSES  # article A's network: cross-entropy or mse
ADAPTER_DTYPES = _formats.names("adapter")  # the formats LoRA adapters are sized in
# the CLI's argument groups, by the mode an option applies to ("both", "train", "infer")
GROUPS = {"both": "shape and parallelism (both modes)", "train": "training (--mode train)",
          "infer": "inference (--mode infer)"}
# what each option is about; a plan keeps each concern's options in one record (options.records),
# whose name on the planner's Regime is the concern's key (so no key may be an option's name)
CONCERNS = {"shape": "what one step processes: batch and sequence",
            "parallel": "how the work is split over GPUs: data, tensor, pipeline and expert parallelism, ZeRO",
            "training": "how the model is trained: precision, optimizer, recomputation, activation model, loss",
            "finetuning": "which weights are trained: LoRA and QLoRA adapters, frozen embeddings",
            "serving": "how the model is served: weight and KV-cache dtypes, chunked prefill",
            "implementation": "how the step runs: attention kernels, device, CUDA runtime, cache and dropout masks"}
# the Python type a resolved value of each kind has (a record's field type)
KIND_TYPES: dict[str, type] = {"size": int, "degree": int, "stage": int, "flag": bool, "choice": str, "names": tuple,
                               "fraction": float}
MAX_WHOLE = 2**40  # the largest size or degree a plan takes (a sequence has MAX_SEQ)


class PlanOptionError(UserError):
    """An option value, or a combination of options, that the planner refuses (one line)."""


@dataclass(frozen=True)
class Option:
    """One choice of a plan: its keyword name (also the report's key), where it applies, its values."""

    name: str
    mode: str  # "both", "train" or "infer"
    kind: str  # one of KINDS
    default: object
    help: str
    choices: tuple[object, ...] = ()
    concern: str = ""  # one of CONCERNS
    fallback: object = None  # held where the option does not apply, when ``default`` is None

    @property
    def flag(self) -> str:
        """The command-line flag: ``--sequence-parallel`` for ``sequence_parallel``."""
        return "--" + self.name.replace("_", "-")

    @property
    def values(self) -> tuple[object, ...]:
        """The allowed values when they are a fixed set (flags: True and False), else ``()``."""
        return (True, False) if self.kind == "flag" else self.choices

    @property
    def value_type(self) -> type:
        """The Python type of a resolved value (the field type in its concern's record)."""
        return KIND_TYPES[self.kind]

    @property
    def initial(self) -> object:
        """What a plan's record holds before the planner decides: the default, else the fallback."""
        return self.fallback if self.default is None else self.default

    def check(self, value: object) -> object:
        """``value`` as this option's kind holds it (``"4"`` → 4), or a one-line ``PlanOptionError``.

        The planner's own limits that depend on the model or on other options are checked in
        ``planning.regime.resolve``, not here.
        """
        if self.kind in ("size", "degree"):
            whole = check_whole(self.name, value)
            return check_seq(whole) if self.name == "seq" else whole
        if self.kind == "stage":
            stages = [int(stage) for stage in self.choices]  # type: ignore[call-overload]
            return check_whole(self.name, value, min(stages), max(stages))
        if self.kind == "flag":
            return check_flag(self.name, value)
        if self.kind == "names":
            return parse_names(self.name, value)
        if self.kind == "fraction":
            return parse_fraction(self.name, value)
        return check_choice(self.name, value, self.choices)


OPTIONS: tuple[Option, ...] = (
    Option("batch", "both", "size", 1, "micro-batch per GPU; concurrent sequences when serving (default 1)",
           concern="shape"),
    Option("seq", "both", "size", DEFAULT_SEQ, "sequence length / context in tokens (default 4096, or the model's "
                                               f"learned positions if fewer; at most {MAX_SEQ:,})", concern="shape"),
    Option("dp", "both", "degree", 1, "data-parallel degree (default 1)", concern="parallel"),
    Option("tp", "both", "degree", 1, "tensor-parallel degree (must divide the heads; default 1)", concern="parallel"),
    Option("pp", "both", "degree", 1, "pipeline-parallel degree (serving: must divide the layers; training: "
           "uneven stages as torchtitan splits them; default 1)",
           concern="parallel"),
    Option("ep", "both", "degree", 1, "expert-parallel degree: a mixture of experts' routed experts split over ep "
                                      "of the dp·tp GPUs (must divide the experts and dp·tp; default 1)",
           concern="parallel"),
    Option("flash", "both", "flag", True, "FlashAttention: no s² attention tensors (default on)",
           concern="implementation"),
    Option("runtime", "both", "flag", True, "count the CUDA runtime's own memory on each GPU (context and "
                                            "kernels, cuBLAS workspaces, allocator rounding, NCCL buffers); "
                                            "--no-runtime leaves it out (default on)", concern="implementation"),
    # issue 28: the CUDA context as CUDA_MODULE_LOADING loads kernels
    Option("cuda_module_loading", "both", "choice", "lazy", "the CUDA context as CUDA_MODULE_LOADING loads "
           "kernels: lazy (PyTorch's default since 1.13, about 400 MB) or eager (every kernel at start-up, "
           "more than 1000 MB) (default lazy)", tuple(_runtime.CONTEXT_BY_LOADING), concern="implementation"),
    Option("device", "both", "choice", "cuda", "with --activations pytorch: where the step runs, which changes what "
                                               "autograd keeps; a torch module's forward in --mode infer: whose "
                                               "attention kernels it runs (default cuda)", tuple(_pyacts.DEVICES),
           concern="implementation"),
    Option("precision", "train", "choice", "bf16-mixed", "default bf16-mixed", tuple(_prec.PRECISIONS),
           concern="training"),
    Option("optimizer", "train", "choice", "adamw", "default adamw", tuple(_optim.OPTIMIZERS), concern="training"),
    Option("grads", "train", "choice", None, "gradient dtype (default: fp32 for bf16-mixed, 16bit for fp16-mixed)",
           tuple(_prec.GRADS), concern="training", fallback="fp32"),
    Option("recompute", "train", "choice", "none", "activation recomputation (default none): selective is Korthikanti "
           "et al.'s (drops the s² attention scores: no change with flash), full checkpoints whole layers (their "
           "inputs kept), ops is torchtitan's per-op policy (saves every other matmul output and the attention "
           "output)", tuple(_acts.RECOMPUTE), concern="training"),
    Option("dropout", "train", "flag", None, "count dropout masks (default on for gpt2/bert, off otherwise)",
           concern="training", fallback=False),
    Option("zero", "train", "stage", 0, "ZeRO stage over the dp ranks (default 0)", (0, 1, 2, 3), concern="parallel"),
    Option("sequence_parallel", "train", "flag", False,
           "Megatron sequence parallelism over the tp ranks (default off)", concern="parallel"),
    Option("tp_impl", "train", "choice", None, "whose tensor parallelism the layer follows (default dtensor with "
           "--fsdp, which composes only with it, else megatron): megatron saves each norm's output sequence-split "
           "under --sequence-parallel and gathers it again in backward; dtensor is PyTorch's (torchtitan's plan), "
           "whose column-parallel linears save the all-gathered B·S·H input (float8 with --precision fp8)",
           tuple(_acts.TP_IMPLS), concern="parallel", fallback="megatron"),
    Option("microbatches", "train", "degree", None, "micro-batches per step (default pp: fills the pipeline)",
           concern="parallel", fallback=1),
    Option("interleave", "train", "degree", 1, "virtual pipeline stages per GPU (default 1)", concern="parallel"),
    Option("offload", "train", "flag", False, "ZeRO-Offload: optimizer states to host memory (needs --zero ≥ 1)",
           concern="parallel"),
    Option("logits", "train", "choice", "hf", "byte accounting of logits and loss (default hf; fused: a fused linear + "
                                              "cross-entropy kernel, no logits kept; chunked: torchtune's chunked "
                                              "cross-entropy, see --logit-chunks)", tuple(_acts.LOGITS),
           concern="training"),
    Option("layer_impl", "train", "choice", "korthikanti", "with --activations korthikanti: whose layer's saved "
           "tensors (default korthikanti; torchtune: torchtune's eager layer, each RMSNorm keeping its fp32 upcast and "
           "normalized copy, K and V expanded to every query head, the final norm's too; torchtune-packed: also the "
           "RoPE cache rows each call gathers by packed positions; with --compile the compiled layer: K and V "
           "expanded, the rest recomputed); dense gated layers, flash, tp 1, recompute none or full",
           _acts.LAYER_IMPLS, concern="training"),
    Option("logits_upcast", "train", "choice", "loss", "where the 16-bit logits become fp32 (default loss: inside "
           "the loss, Hugging Face's ForCausalLMLoss; model: the model's forward returns fp32 logits, as torchtune's "
           "TransformerDecoder (self.output(h).float()), and the loss, eager or --compile'd, takes them; with "
           "--logits hf, one tp rank)", _upcast.CHOICES, concern="training"),
    Option("activations", "train", "choice", "korthikanti",
           "activation model (default korthikanti; pytorch: what torch.autograd saves, pure fp32/bf16, one device)",
           tuple(_acts.MODELS), concern="training"),
    Option("attn", "train", "choice", "sdpa", "with --activations pytorch: attention implementation (default sdpa)",
           tuple(_pyacts.ATTENTION), concern="implementation"),
    Option("use_cache", "train", "flag", None, "with --activations pytorch: transformers keeps every layer's K and V "
                                               "during training (default: the config's use_cache, true unless "
                                               "recompute full, i.e. gradient checkpointing)",
           concern="implementation", fallback=False),
    Option("dropout_masks", "train", "choice", None, "with --activations pytorch: dropout mask element, bool (1 byte) "
                                                     "or the compute dtype (default: bool on cuda, dtype on cpu)",
           DROPOUT_MASKS, concern="implementation", fallback="bool"),
    Option("loss", "train", "choice", None, "loss of article A's network (mlp, mlp-nobias): cross-entropy of its "
                                            "softmax output (default) or mse to one-hot targets; of a PATH.py:NAME "
                                            "module whose forward returns no scalar loss: also sum or mean of its "
                                            "output", _pyacts.PLAN_LOSSES,
           concern="training", fallback="cross-entropy"),
    Option("lora_rank", "train", "size", None, "LoRA rank r: train low-rank adapters on a frozen base, as peft "
                                               "does (default: no LoRA, all weights trained)",
           concern="finetuning", fallback=0),
    Option("lora_targets", "train", "names", None, "modules that get adapters, as peft's target_modules: "
                                                   "q_proj,v_proj, c_attn or all-linear (default: peft's for the "
                                                   "model type)", concern="finetuning", fallback=()),
    Option("lora_dropout", "train", "fraction", None, "LoRA dropout probability (default 0)",
           concern="finetuning", fallback=0.0),
    Option("adapter_dtype", "train", "choice", None, "dtype of the LoRA adapters (default fp32, as peft keeps them "
                                                     "on a 16-bit base)", ADAPTER_DTYPES,
           concern="finetuning", fallback="fp32"),
    Option("qlora", "train", "flag", False, "QLoRA: 4-bit NF4 base weights with blockwise scales and double "
                                            "quantization, bf16 compute, as bitsandbytes stores them (needs "
                                            "--lora-rank)", concern="finetuning"),
    Option("freeze_embeddings", "train", "flag", False, "frozen input embeddings: no gradient or optimizer state "
                                                        "for them", concern="finetuning"),
    # issue 28, what is saved for backward: layer-frequency checkpointing and torchtune's chunked loss
    Option("recompute_every", "train", "degree", 1, "with --recompute full: checkpoint every N-th layer (layers N, "
                                                    "2N, ...; torchtitan's selective_ac_option N), the others keep "
                                                    "all their activations (default 1: every layer)",
           concern="training"),
    Option("logit_chunks", "train", "degree", 8, "with --logits chunked: chunks of the sequence the LM head and the "
                                                 "fp32 loss run on one at a time (torchtune's "
                                                 "CEWithChunkedOutputLoss; default 8)", concern="training"),
    # issue 28, the step's lifetimes: gradient accumulation, the optimizer in backward, activation offloading
    Option("grad_accum", "train", "degree", None, "gradient accumulation: micro-batches per optimizer step, each a "
                                                  "forward and backward of --batch sequences; the gradients of the "
                                                  "earlier ones stay alive through the later ones (the count plan "
                                                  "calls grad_accum and --microbatches; default 1)",
           concern="parallel", fallback=1),
    Option("optimizer_in_backward", "train", "flag", False, "torchtune's optimizer_in_bwd: each parameter stepped "
                                                           "and its gradient freed in a post-accumulate-grad hook, "
                                                           "so no phase holds every gradient (not with "
                                                           "--grad-accum > 1; default off)", concern="training"),
    Option("optimizer_impl", "train", "choice", _adam8.DEFAULT_IMPL, "with --optimizer adam-8bit: whose 8-bit "
           "AdamW steps, bitsandbytes (one in-place CUDA kernel: no temporaries) or torchao (AdamW8bit: each parameter's compiled "
           "step holds its two states in fp32, 8 + 1/32 bytes an element) (default bitsandbytes)",
           _adam8.IMPLS, concern="training"),
    Option("offload_activations", "train", "flag", False, "torchtune's activation offloading: the checkpointed layer "
                                                         "inputs go to pinned host memory, the last 5 stay on the GPU "
                                                         "(needs --recompute full; default off)", concern="training"),
    # --- issue 28: float8 training, FSDP2 and HSDP -----------------
    Option("fp8_recipe", "train", "choice", None, "with --precision fp8: torchao's float8 scaling recipe, "
           "tensorwise (one scale per tensor) or rowwise (one per row) (default tensorwise)",
           tuple(_fsdp.RECIPES), concern="training", fallback="tensorwise"),
    Option("fp8_all_gather", "train", "flag", False, "with --precision fp8 --fsdp: FSDP2 all-gathers the linear "
           "weights in float8 (torchao's enable_fsdp_float8_all_gather; tensorwise only) (default off)",
           concern="parallel"),
    Option("fsdp", "train", "flag", False, "FSDP2 (fully_shard) over the dp ranks: sharded fp32 parameters, "
           "gradients and optimizer states, each block gathered in --fsdp-param-dtype as it runs (default off; "
           "instead of --zero)", concern="parallel"),
    Option("fsdp_param_dtype", "train", "choice", None, "with --fsdp: MixedPrecisionPolicy.param_dtype, the "
           "dtype blocks are gathered and computed in (default bf16)", _fsdp.PARAM_DTYPES,
           concern="parallel", fallback="bf16"),
    Option("fsdp_reduce_dtype", "train", "choice", None, "with --fsdp: MixedPrecisionPolicy.reduce_dtype, the "
           "dtype gradients are reduce-scattered in (default fp32, as torchtitan)", _fsdp.REDUCE_DTYPES,
           concern="parallel", fallback="fp32"),
    Option("reshard_after_forward", "train", "flag", True, "with --fsdp: free each block after its forward and "
           "gather it again for backward; --no-reshard-after-forward keeps every block unsharded from its "
           "forward to its backward (default on)", concern="parallel"),
    Option("hsdp", "train", "degree", 1, "with --fsdp: HSDP, R replicas of a shard group: parameters shard "
           "over dp/R ranks and gradients are all-reduced over R (must divide dp; default 1)",
           concern="parallel"),
    # --- issue 28: context parallelism (torchtitan's ring attention) -----------------
    Option("cp", "train", "degree", 1, "context-parallel degree: each rank holds S/cp tokens (2·cp load-balanced "
           "chunks; cp·2 must divide the sequence), attention runs as PyTorch's ring (K/V all-gathered, as "
           "torchtitan's default), and --fsdp shards over dp × cp ranks; needs --fsdp (default 1)",
           concern="parallel"),
    # issue 28 (pipeline schedules): torch.distributed.pipelining's schedules, torchtitan's uneven stages
    Option("pp_schedule", "train", "choice", None, "pipeline schedule (torch.distributed.pipelining): gpipe, "
           "1f1b, interleaved (--interleave v stages per GPU, default 2) or zbv (zero-bubble V, 2 stages per GPU; "
           "time takes its own bubble); "
           "stages split as torchtitan splits them (default: 1F1B, interleaved with --interleave, as Megatron "
           "counts them)", _pipeline.SCHEDULES, concern="parallel", fallback=""),
    # issue 28: torch.compile per block (torchtitan's apply_compile) and of the loss (torchtune's compile_loss)
    Option("compile", "train", "flag", False, "torch.compile each layer and the loss: what the min-cut partitioner "
           "saves (norms, activations and the fp32 loss recomputed in backward; measured with inductor, torch "
           "2.13.0 on the CPU); needs a fused attention kernel and no dropout (default off)", concern="training"),
    Option("compile_loss", "train", "flag", True, "with --compile: the loss compiled too, as torchtune's "
           "compile_loss; --no-compile-loss leaves it eager, as torchtitan at 9dec370 and torchtune's "
           "full_finetune_single_device for a plain cross-entropy (fp32 logits, log-softmax and their gradient) "
           "(default on)", concern="training"),
    Option("weights", "infer", "choice", "bf16", "weight format as stored (int8/int4: fp16 scales per 128; fp8, "
           "fp8-block, mxfp4, nvfp4, gptq-int4, awq-int4, nf4, ...: as their libraries store each matrix; default: "
           "the config's quantization_config, else bf16)",
           tuple(_infer.WEIGHT_DTYPES), concern="serving"),
    Option("kv_dtype", "infer", "choice", None, "KV-cache dtype (default: the weights' 16-bit dtype)",
           tuple(_infer.KV_DTYPES), concern="serving", fallback="bf16"),
    Option("prefill_chunk", "infer", "size", None, "chunked prefill: one step prefills at most this many tokens "
                                                   "while the cache holds B·S (default: whole prompts at once)",
           concern="serving", fallback=0),
    # issue 29: an encoder-decoder's generation (transformers' generate) with beam search or sampling
    Option("beams", "infer", "size", 1, "beam search: an encoder-decoder's generate(num_beams=N), its caches and "
           "encoder output held for B·N beams (default 1: greedy)", concern="serving"),
    Option("sample", "infer", "flag", False, "an encoder-decoder's generate(do_sample=True): sampling's "
           "probabilities and its top-k copies (default off: greedy)", concern="serving"),
)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def seq_too_long(seq: int) -> str:
    """The one-line refusal of a sequence length beyond ``MAX_SEQ``."""
    return (f"a sequence of {seq:,} tokens is beyond the planner's bound of {MAX_SEQ:,} (2^27), more than ten times "
            "the longest context any published model supports (Llama 4 Scout: 10M tokens)")


def check_seq(seq: int) -> int:
    """``seq`` when it is at most ``MAX_SEQ``; a ``PlanOptionError`` (one line) beyond it."""
    if seq > MAX_SEQ:
        raise PlanOptionError(seq_too_long(seq))
    return seq


def names(mode: str | None = None, kind: str | None = None, concern: str | None = None) -> tuple[str, ...]:
    """Option names in order, those of one mode ("both", "train", "infer"), one kind and/or one concern."""
    return tuple(o.name for o in OPTIONS if (mode is None or o.mode == mode) and (kind is None or o.kind == kind)
                 and (concern is None or o.concern == concern))


def check_whole(name: str, value: object, low: int = 1, high: int = MAX_WHOLE) -> int:
    """A whole number from ``low`` to ``high`` (digits in text too), or a one-line ``PlanOptionError``."""
    if isinstance(value, bool) or not isinstance(value, int):
        text = str(value).strip()
        if not text.isdecimal():  # what int() reads ("²" is a digit, not a decimal)
            raise PlanOptionError(f"{name} must be a whole number, got {value!r}")
        value = int(text)
    if not low <= value <= high:
        raise PlanOptionError(f"{name} must be between {low} and {high}, got {value}")
    return value


def check_choice(name: str, value: object, choices: tuple[object, ...]) -> str:
    """One of ``choices``, or a one-line ``PlanOptionError`` that lists them."""
    if value not in choices:
        raise PlanOptionError(f"unknown {name} {value!r}; choose from {', '.join(map(str, choices))}")
    return str(value)


def check_flag(name: str, value: object) -> bool:
    """True or false, or a one-line ``PlanOptionError``."""
    if not isinstance(value, bool):
        raise PlanOptionError(f"{name} must be true or false, got {value!r}")
    return value


def get(name: str) -> Option:
    """The option called ``name`` (a ``KeyError`` names the valid ones)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise UnknownNameError(f"unknown option {quote(name)}; options are {', '.join(NAMES)}") from None


def defaults() -> dict[str, object]:
    """``mode`` and every option's default (``None``: it depends on other choices or the model)."""
    return {"mode": DEFAULT_MODE, **{o.name: o.default for o in OPTIONS}}


def choices() -> dict[str, tuple[object, ...]]:
    """The allowed values of ``mode`` and of every option with a fixed set of them."""
    return {"mode": MODES, **{o.name: o.values for o in OPTIONS if o.values}}


# Option names grouped by where they apply (the planner's and the report's lists).
COMMON = names("both")
TRAIN_ONLY = names("train")
INFER_ONLY = names("infer")


# --- values of the kinds that are not numbers or choices -----------------------------------------
ALL_LINEAR = "all-linear"
MAX_NAMES = 64
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,63}")
_FRACTION = re.compile(r"(0|1)?(\.[0-9]{1,12})?")


def parse_names(name: str, value: object) -> tuple[str, ...]:
    """Module names from "q_proj,v_proj" (or a list of them); "all-linear" stands alone, as in peft."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    names = tuple(str(item).strip() for item in items if str(item).strip())
    if not names or len(names) > MAX_NAMES:
        raise PlanOptionError(f"{name}: give 1 to {MAX_NAMES} module names separated by commas, e.g. q_proj,v_proj")
    if ALL_LINEAR in names:
        if len(names) > 1:
            raise PlanOptionError(f"{name}: {ALL_LINEAR} stands alone (it already names every linear layer)")
        return names
    for item in names:
        if not isinstance(item, str) or not _NAME.fullmatch(item):
            raise PlanOptionError(f"{name}: {quote(item)} is not a module name (letters, digits, '_', '.')")
    return names


def parse_fraction(name: str, value: object) -> float:
    """A probability 0 ≤ p < 1 from a number or a short decimal text ("0.05")."""
    if isinstance(value, bool):
        raise PlanOptionError(f"{name} must be a number from 0 to below 1, got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        text = str(value).strip()
        if not text or not _FRACTION.fullmatch(text) or text in (".", "1."):
            raise PlanOptionError(f"{name} must be a number from 0 to below 1, got {quote(text)}")
        number = float(text)
    if not 0 <= number < 1:
        raise PlanOptionError(f"{name} must be a number from 0 to below 1, got {number:g}")
    return number
