"""The time half of a capacity plan: FLOPs, step time, throughput, time to train and cost, as Formulas.

API (keyword options as in ``planning.plan``; every figure is a ``Formula`` with its values)::

    from symbolic.planning import time as ptime

    fl = ptime.flops("llama-3-8b", seq=8192, recompute="full")   # Flops: .forward, .train Formulas
    tp = ptime.train_time("llama-3-8b", "h100-80gb", gpus=64, tokens=10**12, mfu=0.4,
                          batch=1, seq=8192, tp=8, microbatches=8, price=2.5)
    tp.formulas["step_seconds"]        # Formula t_step: compute, bubble, tp_comm, dp_comm, pp_comm
    tp.figures["train_seconds"]        # float, from the exact evaluation of its Formula
    tp.as_dict(formulas=True)          # what `symbolic time --json --formula` prints
    ip = ptime.infer_time("llama-3-8b", "h100-80gb", batch=8, seq=4096, mfu=0.5)
    ip.figures["prefill_seconds"], ip.figures["decode_tokens_per_second"]

Training: tokens per step = dp · batch · microbatches · seq (``microbatches`` are the
micro-batches per optimizer step: gradient accumulation, and the pipeline's m). With ``mfu``
the step is the roofline model of ``library.timing``; with ``achieved_tflops`` it is FLOPs /
(GPUs · X) and nothing else. ``gpus`` sets dp = gpus / (tp · pp) when dp is not given.

Serving (one replica of tp · pp GPUs; dp replicas multiply the throughput): prefill of
batch × seq prompt tokens is compute-bound, F_fwd · B · S / (t · p · F_peak · η); one decode
step of B sequences at context seq is max(F_fwd · B / (t · F_peak · η), p · (weights + KV cache
read) / HBM bandwidth), the bytes taken from the memory plan of the same options.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING

import sympy

from .. import formats
from ..catalogs import GPU, Budget, as_budget, make_budget
from ..core.errors import UserError
from ..core.symbols import B, F_step, L, L_conv, L_dense, N, N_gpu, S, a, n_d, n_mb, p, t, t_dec  # noqa: F401  (F_step: time.F_step)
from ..core.term import Term
from ..library import flops as fl
from ..library import flops_trained as ft
from ..library import pipeline as pipe
from ..library import precision as prec
from ..library import timing as tm
from ..math.formula import Formula, to_plain
from ..networks.network import load as load_shape
from ..networks.shape import ModelShape
from . import pytorch
from .build import Plan, framework_pipeline

if TYPE_CHECKING:  # pragma: no cover
    from ..networks.transformer import ModelSpec

DTYPES = formats.RATE_KEYS  # the GPU rate keys a --compute-dtype may name
# Per-layer parameter terms that are weight matrices (2 FLOPs per weight per token): every attention,
# MLP, MoE or mixer term but biases and norms; a new family's projection terms count without a change here.
_MATMUL_PREFIXES = ("attention.", "mlp.", "moe.", "mixer.", "ssm.", "cross_attention")
_NOT_MATMUL = ("bias", "norm", "sinks")  # sinks: one logit per head, no matmul


_SEQUENCE_TRAFFIC = ("tp_comm", "pp_comm")  # step terms in a token sequence's widths (B·S·H per layer)


def _is_matmul(key: str) -> bool:
    return key.startswith(_MATMUL_PREFIXES) and not any(word in key for word in _NOT_MATMUL)


# --- FLOPs of a real model ----------------------------------------------------------------------
@dataclass(frozen=True)
class Flops:
    """Forward and training FLOPs per token of one model at one sequence length, as Formulas."""

    forward: Formula
    train: Formula
    values: dict[str, int]
    parts: tuple[dict[str, object], ...] = ()  # per module: forward and backward FLOPs (a network's own count)
    notes: tuple[str, ...] = ()  # what the count cannot say (a plan's notes)
    _cache: dict[str, sympy.Rational] = field(default_factory=dict, compare=False, repr=False)

    def per_token(self, train: bool = True) -> float:
        """FLOPs per token (training: forward + backward + recompute)."""
        return float(self.exact(train))

    def exact(self, train: bool = True) -> sympy.Rational:
        """FLOPs per token as an exact number (cached: a Flops is immutable)."""
        key = "train" if train else "forward"
        if key not in self._cache:
            f = self.train if train else self.forward
            self._cache[key] = f.evaluate(f.restrict(self.values)).total
        return self._cache[key]


def _spec(model: object) -> ModelSpec | ModelShape:
    """The ModelSpec of a family table (its FLOPs come from its layer formulas); any other network itself."""
    from ..networks import transformer as architectures

    if isinstance(model, architectures.ModelSpec):
        return model
    if isinstance(model, str):
        model = load_shape(model)
    if isinstance(model, ModelShape):
        return model.spec if model.spec is not None else model
    raise TypeError(f"expected a model name, a config path or a ModelSpec, not {type(model).__name__}")


def flops(model: object, *, seq: int = 4096, recompute: str = "none", trained: ft.Trained | None = None,
          early_stop: bool = False, every: int = 1) -> Flops:
    """FLOPs per token of ``model``: matmul by matmul from its own weight matrices (see ``library.flops``).

    ``trained``: what the step trains when not every weight (LoRA, frozen embeddings: ``library.flops_trained``,
    ``trained_of`` builds it from a plan); None: full training. ``early_stop``: full recompute under torch's
    non-reentrant checkpoint, which does not run each layer's last matmul again (``early_stop_of`` says it of a
    plan); False: the whole forward again (Megatron's reentrant checkpoint, Narayanan et al. 2021). Under recompute
    ops likewise: False (torchtitan's SelectiveAC, early_stop=False) reruns an even-counted last matmul, True (9dec370;
    compiled) not (``library.flops.OPS_EARLY_STOP_NOTE``). ``every``: full
    recompute checkpoints every N-th layer only (``--recompute-every``, torchtitan's ``selective_ac_option N``), and
    only those ⌊L/N⌋ layers run again (``library.flops.checkpointed_share``; layers of different kinds each where the
    config puts it, ``library.flops.checkpointed_forward``).
    """
    source = _spec(model)
    early_stop = early_stop and recompute in ("full", "ops")
    every = every if recompute == "full" else 1
    if isinstance(source, ModelShape):  # no layer formulas: the matrices the network shows
        return _matrix_flops(source, seq, recompute, trained, early_stop, every)
    return _flops(source, seq, recompute, trained, early_stop, every)


def early_stop_of(regime: object) -> bool:
    """Whether a plan's full recompute is torch's non-reentrant checkpoint with early stop (``library.flops``).

    torchtune's layers (``--layer-impl torchtune``: ptd_checkpoint_wrapper(use_reentrant=False), torchtune/training/
    activations.py at bd2a0fc) and transformers' gradient checkpointing (``--activations pytorch`` and the fine-tuning
    regimes, peft's: use_reentrant False, transformers 5.24.0 modeling_utils.py line 3158) stop early. The default
    layer is Megatron's (a reentrant checkpoint) and torchtitan's FullAC passes early_stop=False (since 25413d2,
    2025-08-29; torchtitan/distributed/activation_checkpoint.py at b5bcd76): the whole forward again.

    Per-op recompute (``ops``) is torchtitan's policy alone, which it checkpoints with early_stop=False (SelectiveAC,
    b5bcd76): no early stop, unless compiled (``--compile``: the partitioner recomputes only what backward reads).
    """
    from . import finetune

    recompute = getattr(regime, "recompute", "none")
    if recompute == "ops":
        return bool(getattr(regime, "compile", False))
    if recompute != "full":
        return False
    return bool(getattr(regime, "layer_impl", "korthikanti") != "korthikanti" or getattr(regime, "pytorch", False)
                or finetune.active(regime))


EARLY_STOP_PLAN_NOTE = ("full recompute as torch's non-reentrant checkpoint (transformers', peft's, torchtune's): "
                        "early stop, each layer's last matmul (its MLP down projection) not run again")
REENTRANT_PLAN_NOTE = ("full recompute as a reentrant checkpoint (Megatron's; torchtitan's FullAC, early_stop=False): "
                       "every layer's whole forward again, Narayanan et al. 2021's count")
EVERY_PLAN_NOTE = ("recompute every {n}: only the checkpointed layers run their forward again, ⌊L/{n}⌋ of L (torchtitan "
                   "checkpoints block k, counted from 1, when k % {n} == 0; the last L mod {n} layers never)")
KINDS_PLACED = ("; layers of different kinds (dense and MoE, attention and convolution) each counted where the config "
                "puts them")
KINDS_AVERAGED = ("; layers of different kinds counted as the average layer ({why}): ⌊L/{n}⌋/L of the whole rerun, "
                  "not the checkpointed layers' own")
MATRIX_EARLY_STOP_NOTE = ("full recompute counted as the whole forward again (this network's matrices do not say which "
                          "matmul ends a layer, which torch's non-reentrant checkpoint does not run again)")


def _matrix_flops(network: ModelShape, seq: int, recompute: str, trained: ft.Trained | None = None,
                  early_stop: bool = False, every: int = 1) -> Flops:
    """FLOPs per token of a network from its matrices (``Network.flop_parts``): 2 per weight, the output layer."""
    if recompute == "ops":  # as its memory: the order of its matmuls, which the policy alternates over, is unknown
        raise UserError(f"recompute ops: {network.name} has no family table (the order of its matmuls, which "
                        "torchtitan's policy alternates over, is not known); use a family table")
    matmuls, output = network.flop_parts()  # type: ignore[attr-defined]
    terms = [term for term in fl.forward_terms(matmuls, sympy.Integer(0), output)
             if not term.key.startswith("attention.")]  # no score width: the network cannot say them
    values = {**network.numbers, "S": seq}
    name = network.name
    notes = [network.cannot_say.get("flops", "")]
    if early_stop:
        notes.append(MATRIX_EARLY_STOP_NOTE)
    if trained is not None and trained.lora:  # its matrices do not say where the adapters sit in a layer's dataflow
        notes.append(MATRIX_LORA_NOTE)
        trained = None
    if trained is not None:
        trained = replace(trained, frozen_head=trained.frozen_head and output is not None)
        notes.append("frozen embeddings: every matmul's input gradient counted (the network's matrices do not say "
                     "which read the frozen embedding's output)")
    note = " ".join(n for n in notes if n)
    forward = Formula(f"flops.{name}.forward", f"Forward FLOPs per token of {name}", terms, source="project",
                      name="F_fwd", example=values, note=note)
    out_flops = 2 * _sym("V") * output if output is not None else sympy.Integer(0)
    train_terms = (fl.train_terms(fl.F_fwd, out_flops, sympy.Integer(0), recompute, every=every) if trained is None
                   else ft.train_terms([(m[0], m[1], m[2], m[3] if len(m) > 3 else L) for m in matmuls],
                                       (sympy.Integer(0), sympy.Integer(0)), output, (), trained, recompute, fl.F_fwd,
                                       every=every))
    train = Formula(f"flops.{name}.train", f"Training FLOPs per token of {name} (recompute {recompute})",
                    train_terms, source="project", name="F_tok", definitions={fl.F_fwd: forward}, example=values,
                    note=note)
    return Flops(forward, train, {k: v for k, v in values.items() if isinstance(v, int)})


MATRIX_LORA_NOTE = ("FLOPs with LoRA: counted as full training (this network's matrices do not say where the adapters sit in a "
                    "layer, nor which inputs need a gradient)")


@lru_cache(maxsize=128)
def _flops(spec: ModelSpec, seq: int, recompute: str, trained: ft.Trained | None = None,
           early_stop: bool = False, every: int = 1) -> Flops:
    shape = load_shape(spec)
    matmuls, q_width, v_width = _layers(spec, shape)
    emb = _emb(spec)
    extra = []
    if spec.embed_dim is not None and spec.embed_dim != spec.hidden:
        extra.append(("projections", "project_in d_emb → H and project_out H → d_emb", 2 * emb * _sym("H")))
    if spec.mlm_transform:
        extra.append(("mlm_transform", "MLM head transform H → H", _sym("H") ** 2))
    output = emb if spec.lm_head else None
    terms = fl.forward_terms(matmuls, q_width, output, extra, v_width)
    if trained is not None:
        terms += ft.adapter_forward(trained)
    values = {**spec.numbers(), "S": seq}
    forward = Formula(f"flops.{spec.name}.forward", f"Forward FLOPs per token of {spec.name}", terms, source="project",
                      name="F_fwd", example=values,
                      note="Matmuls of the model's own weight matrices (MoE: router and the k active experts), the "
                           "attention scores and values over S positions, the output layer. Norms, biases, softmax "
                           "and rotary embeddings left out.")
    out_flops = 2 * _sym("V") * emb if spec.lm_head else sympy.Integer(0)
    checkpointed = (_checkpointed(spec, terms, matmuls, every, early_stop)
                    if recompute == "full" and (trained is None or not trained.adapters) else None)
    if trained is None:
        train_terms = fl.train_terms(fl.F_fwd, out_flops, fl.attention_core(q_width, v_width), recompute,
                                     _ops(spec, recompute, early_stop),
                                     fl.last_matmuls(matmuls) if early_stop and recompute == "full" else None, every,
                                     checkpointed)
    else:
        train_terms = ft.train_terms(matmuls, (q_width, v_width if v_width is not None else q_width), output, extra,
                                     trained, recompute, fl.F_fwd, _ops(spec, recompute, early_stop), early_stop, every,
                                     checkpointed)
    train = Formula(f"flops.{spec.name}.train", f"Training FLOPs per token of {spec.name} (recompute {recompute})",
                    train_terms, source="project", name="F_tok", definitions={fl.F_fwd: forward}, example=values)
    return Flops(forward, train, {k: v for k, v in values.items() if isinstance(v, int)})


def _checkpointed(spec: ModelSpec, terms: list[Term], matmuls: list[tuple[str, str, sympy.Expr, sympy.Expr]],
                  every: int, early_stop: bool) -> sympy.Expr | None:
    """The forward FLOPs per token of exactly the checkpointed layers (``library.flops.checkpointed_forward``) when
    every N-th layer is checkpointed and the layers' kinds differ (dense and MoE MLPs, attention and convolution
    mixers), less their last matmuls under early stop; None when the layers are alike (⌊L/N⌋/L of the rerun is then
    exact) or where the kinds' positions are not known."""
    kinds = _placed_kinds(spec) if every > 1 else None
    if not kinds:
        return None
    counts = fl.checkpointed_counts(spec.layers, every, kinds)
    layer_keys = {m[0] for m in matmuls} | {"attention.scores", "attention.values"}
    rerun = fl.checkpointed_forward([term.expr for term in terms if term.key in layer_keys], counts)
    return rerun - fl.last_matmuls(matmuls).subs(counts) if early_stop else rerun


def _placed_kinds(spec: ModelSpec) -> dict[sympy.Symbol, tuple[int, ...]] | None:
    """Where the config puts each layer kind (dense layers of a mixture of experts, convolution layers of a hybrid);
    None when the layers are alike or the positions are not known."""
    from ..networks.transformer import formulas as arch

    if not arch.mixed(spec):
        return None
    given = [(L_dense, spec.dense_at, spec.dense_layers if spec.is_moe else 0), (L_conv, spec.conv_at, spec.conv_layers)]
    if any(len(at) != count for _, at, count in given):
        return None
    return {symbol: at for symbol, at, count in given if count}


def _every_note(model: object, every: int, trained: ft.Trained | None) -> str:
    """The plan's line on recompute every N, saying how layers of different kinds were counted."""
    from ..networks.transformer import formulas as arch

    note = EVERY_PLAN_NOTE.format(n=every)
    spec = _spec(model)
    if isinstance(spec, ModelShape) or not arch.mixed(spec):
        return note
    if trained is not None and trained.adapters:
        return note + KINDS_AVERAGED.format(why="adapters trained", n=every)
    if _placed_kinds(spec) is None:
        return note + KINDS_AVERAGED.format(why="their positions are not in the config", n=every)
    return note + KINDS_PLACED


def trained_of(model: ModelShape, regime: object) -> ft.Trained | None:
    """What a plan's step trains, for its FLOPs: None for full training (``library.flops_trained.Trained``)."""
    from . import finetune

    if not finetune.active(regime):
        return None
    recompute = getattr(regime, "recompute", "none")
    # a fused kernel (flash; sdpa under activations pytorch) computes the attention core's three gradients together
    fused = getattr(regime, "attn", "sdpa") != "eager" if getattr(regime, "pytorch", False) else \
        bool(getattr(regime, "flash", True))
    if not getattr(regime, "lora_rank", 0):  # frozen embeddings: the head too when tied to them
        return ft.Trained(frozen_head=model.head == 0, frozen_embeddings=True, fused_attention=fused)
    try:
        found = finetune.adapters(model, regime)
    except UserError:  # no layout of adapters: the matrix path says so
        return ft.Trained(rank=int(regime.lora_rank), frozen_head=True, fused_attention=fused)
    return ft.Trained(rank=found.rank, adapters=ft.adapters_of(found), frozen_head=True,
                      first_input_grad=recompute == "full", frozen_embeddings=True, fused_attention=fused)


def plan_flops(memory: Plan, model: object) -> Flops:
    """The FLOPs of a training plan: the network's own count, else ``flops`` of ``model`` with what the plan trains."""
    r = memory.regime
    trained = trained_of(memory.model, r)
    own = _own_flops(memory)
    if own is not None:  # counted on its own step: with LoRA, peft's adapters on the frozen module
        return own if trained is None or trained.lora else replace(own, notes=(OWN_TRAINED_NOTE,))
    early = early_stop_of(r) and not getattr(r, "dropout", False)  # a dropout mask after it needs its output
    every = int(getattr(r, "recompute_every", 1))
    found = flops(model, seq=r.seq, recompute=r.recompute, trained=trained, early_stop=early, every=every)
    if trained is not None and trained.lora and not trained.adapters:
        return replace(found, notes=(MATRIX_LORA_NOTE,))
    if r.recompute == "full" and not found.notes:
        notes = (_rerun_note(found, early_stop_of(r)),) + ((_every_note(model, every, trained),) if every > 1 else ())
        return replace(found, notes=notes)
    return found


def _rerun_note(found: Flops, torch_checkpoint: bool) -> str:
    """The plan's line on what its full recompute runs again (``early_stop_of``)."""
    if any(term.key == "recompute" and term.source == "pytorch-checkpoint" for term in found.train.terms):
        return EARLY_STOP_PLAN_NOTE
    if torch_checkpoint:
        return ("full recompute: every layer's whole forward again, torch's non-reentrant checkpoint included (a "
                "dropout mask, or a MoE layer's weighted sum of experts, saves what follows the last matmul; or the "
                "network does not say which matmul is last)")
    return REENTRANT_PLAN_NOTE


OWN_TRAINED_NOTE = ("FLOPs: the network's own count of a full-training step (the frozen embedding's weights are "
                    "counted as trained)")


def _ops(spec: ModelSpec, recompute: str, early_stop: bool = False) -> sympy.Expr | None:
    """What recompute ops runs again (``library.flops.ops_recompute``); refused for MoE, as memory refuses it."""
    return fl.ops_recompute(spec.gated_mlp, spec.is_moe, early_stop) if recompute == "ops" else None


def _layers(spec: ModelSpec, shape: ModelShape) -> tuple[list[tuple[str, str, sympy.Expr, sympy.Expr]],
                                                        sympy.Expr, sympy.Expr | None]:
    """(matmuls with the layers that have them, score width, value width) of ``spec``'s layers.

    Groups of layers (``networks.transformer.formulas.kinds``: attention on all L layers, experts on the
    MoE layers, a dense MLP on the others) each count on their own number of layers.
    """
    from ..networks.transformer import formulas as arch

    groups = getattr(arch, "kinds", None)
    if groups is None:  # one kind of layer
        kinds = [("layers", "", L, 0, list(arch.layer_formula(spec, active=True).terms))]
    else:
        kinds = groups(spec, active=True)
    matmuls = [(term.key, term.title, term.expr, count) for _, _, count, _, terms in kinds for term in terms
               if _is_matmul(term.key)]
    if getattr(spec, "is_latent", False):  # DeepSeek MLA: scores over d_nope + d_rope, values over d_v
        return matmuls, _sym("a") * (_sym("d_nope") + _sym("d_rope")), _sym("a") * _sym("d_v")
    return matmuls, _q_width(shape), None


def _sym(name: str) -> sympy.Symbol:
    from ..core.symbols import lookup

    return lookup(name)


def _q_width(shape: ModelShape) -> sympy.Expr:
    return _sym("a") * shape.head_dim


def _emb(spec: ModelSpec) -> sympy.Expr:
    return _sym("H") if spec.embed_dim is None else _sym("d_emb")


# --- results ------------------------------------------------------------------------------------
@dataclass
class TimePlan:
    """Every figure of one time plan: its Formula, the values it is evaluated at, and the number."""

    mode: str
    model: str
    gpu: GPU
    memory: Plan
    formulas: dict[str, Formula]
    values: dict[str, object]
    figures: dict[str, float | int]
    notes: list[str] = field(default_factory=list)
    budget: Budget | None = None  # what the memory was checked against (None: all of ``gpu``)
    flops_by_module: tuple[dict[str, object], ...] = ()  # a network's own count per module (Flops.parts)

    @property
    def limit(self) -> Budget:
        """The budget the memory was checked against: the whole GPU unless a fraction or reservations were given."""
        return self.budget if self.budget is not None else as_budget(self.gpu)

    def evaluate(self, key: str) -> sympy.Expr:
        """The exact value of one figure's Formula."""
        f = self.formulas[key]
        return f.evaluate(f.restrict(self.values)).total

    def as_dict(self, formulas: bool = False) -> dict[str, object]:
        """Plain data for JSON: the figures, the step's terms, the layout and the rates used."""
        data: dict[str, object] = {"model": self.model, "mode": self.mode, "gpu": self.gpu.name,
                                   "gpus": self.figures.get("gpus"), **self.figures,
                                   "options": self.memory.options(),
                                   "memory_bytes": self.memory.total, "fits": self.memory.total <= self.limit.bytes,
                                   "values": {k: _plain(v) for k, v in self.values.items()},
                                   "notes": list(self.notes)}
        step = self.formulas.get("step_seconds") or self.formulas.get("decode_seconds")
        if step is not None:
            ev = step.evaluate(step.restrict(self.values))
            data["step_terms"] = {tm_.key: float(v) for tm_, v in ev.terms}
        if self.limit.notes or not self.limit.whole:
            data["budget"] = self.limit.as_dict()
        if self.flops_by_module:
            data["flops_by_module"] = [{k: str(v) if isinstance(v, sympy.Basic) else v for k, v in row.items()}
                                       for row in self.flops_by_module]
        if formulas:
            data["formulas"] = {k: {"key": f.key, "text": str(f), "latex": f.latex(equation=True),
                                    "terms": {tm_.key: str(tm_.expr) for tm_ in f.terms}}
                                for k, f in self.formulas.items()}
        return data


def _plain(value: object) -> object:
    if isinstance(value, sympy.Basic):
        return to_plain(sympy.Rational(value))
    return value


def _chain(formulas: dict[str, Formula], values: dict[str, object], figures: dict[str, float | int],
           defines: dict[str, str]) -> None:
    """Evaluate the figures in order; a figure that defines a symbol (F_tok, t_step) is then given by value.

    Giving the exact value of a defined symbol keeps later formulas from re-expanding it (the same
    number, far less algebra); ``values`` keeps these derived values, so ``TimePlan.evaluate`` agrees.
    """
    for key, f in formulas.items():
        total = f.evaluate(f.restrict(values)).total
        figures[key] = float(total)
        if key in defines:
            values[defines[key]] = total


# --- rates --------------------------------------------------------------------------------------
def compute_dtype(regime_dtype: str, given: str | None) -> str:
    """The dtype whose peak applies: the one asked for, else the training (or weight) dtype."""
    if given is not None:
        if given not in DTYPES:
            raise UserError(f"unknown compute dtype {given!r}; choose from {', '.join(DTYPES)}")
        return given
    return regime_dtype


def train_rate(precision: str, given: str | None) -> str:
    """The rate a training step's matmuls run at: its precision's (fp8: the fp8 rate); one precision per job.

    ``--compute-dtype`` may name the precision's own rate only where it differs from the training
    dtype's (fp8 matmuls are ``--precision fp8``, not a rate on top of a bf16 job).
    """
    own = formats.get(prec.get(precision).compute_rate).rate
    dtype = compute_dtype(own, given)
    if dtype == "fp8" and own != "fp8":
        raise UserError(f"--compute-dtype fp8 with precision {precision}: float8 training is --precision fp8 (one "
                        "precision per job: the memory and the time of the same step)")
    return dtype


def weights_rate(weights: str, given: str | None) -> str:
    """The rate a serving plan's matmuls run at: the weights format's (``symbolic.formats``), or ``given``
    when the format can run at it (GPTQ/AWQ int8 and int4 dequantise to 16 bits: bf16 or fp16 only)."""
    fmt = formats.get(weights)
    dtype = compute_dtype(fmt.rate, given)
    if dtype not in fmt.runs_at:
        raise UserError(f"--compute-dtype {dtype} does not apply to {weights} weights: they are dequantised to "
                        f"{fmt.compute} for each matmul, which runs at {' or '.join(fmt.runs_at)}")
    return dtype


def link(gpu: GPU, span: int, what: str) -> float:
    """Bandwidth per GPU and direction for a group spanning ``span`` consecutive GPUs."""
    if span <= 1:
        return float(gpu.nvlink_bandwidth or gpu.network_bandwidth or 1)
    if span <= gpu.gpus_per_node and gpu.nvlink_bandwidth:
        return float(gpu.nvlink_bandwidth)
    if span > gpu.gpus_per_node and gpu.network_bandwidth:
        return float(gpu.network_bandwidth)
    where = "NVLink" if span <= gpu.gpus_per_node else "network"
    raise UserError(f"{gpu.name} has no {where} bandwidth in the catalogue, which the {what} group of {span} GPUs "
                    "needs; give a custom GPU file (--gpu FILE.toml)")


def _rate(value: float | None, gpu: GPU, what: str) -> float:
    if not value:
        raise UserError(f"{gpu.name} has no {what} in the catalogue; give a custom GPU file (--gpu FILE.toml)")
    return float(value)


def _efficiency(mfu: object, achieved_tflops: object) -> tuple[str, float]:
    if (mfu is None) == (achieved_tflops is None):
        raise UserError("give exactly one of mfu (efficiency of the compute alone) or achieved_tflops "
                        "(end-to-end FLOP/s per GPU)")
    if mfu is not None:
        value = _positive_float(mfu, "mfu")
        if value > 1:
            raise UserError(f"mfu is a fraction of the peak, at most 1, got {value}")
        return "mfu", value
    return "achieved", _positive_float(achieved_tflops, "achieved_tflops") * 10**12


def _positive_float(value: object, name: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a number, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise UserError(f"{name} must be positive, got {value!r}")
    return number


def _whole(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name} must be a whole number ≥ 1, got {value!r}")
    return value


# GPUs in one job: the largest training clusters reported hold some 10**5 GPUs, so 2**20 (about a
# million) leaves room above them while a search over every count up to it stays bounded.
MAX_GPUS = 2**20


def gpu_count(value: object, name: str = "gpus") -> int:
    """A number of GPUs in a job: a whole number from 1 to MAX_GPUS."""
    count = _whole(value, name)
    if count > MAX_GPUS:
        raise UserError(f"{name} must be at most {MAX_GPUS:,} (2**20, above the largest GPU clusters), got {count:,}")
    return count


# --- training -----------------------------------------------------------------------------------
def train_time(model: object, gpu: GPU | Budget | str, *, gpus: int | None = None, tokens: int | None = None,
               mfu: float | None = None, achieved_tflops: float | None = None, price: float | None = None,
               compute: str | None = None, **options: object) -> TimePlan:
    """Step time, throughput, time to train, GPU-hours and cost of training ``model`` on ``gpu`` (or a Budget)."""
    budget = to_budget(gpu)
    how, rate = _efficiency(mfu, achieved_tflops)
    memory, fl_, step, values = train_parts(model, budget.gpu, how, rate, compute, _layout_options(gpus, options))
    return _finish("train", memory, budget, fl_.train, step, values, tokens, price, how, fl_.parts, fl_.notes)


def to_budget(gpu: GPU | Budget | str) -> Budget:
    """A Budget from a GPU, a Budget, or a name, size or custom GPU file (``catalogs.make_budget``)."""
    return make_budget(gpu) if isinstance(gpu, str) else as_budget(gpu)


def budget_notes(budget: Budget) -> list[str]:
    """The budget's lines as notes of a result: none for a whole GPU given by name."""
    return [f"budget: {line}" for line in budget.lines()]


def train_parts(model: object, gpu: GPU, how: str, rate: float, compute: str | None,
                options: dict[str, object], spec: ModelSpec | None = None, memory: Plan | None = None
                ) -> tuple[Plan, Flops, Formula, dict[str, object]]:
    """The memory plan, FLOPs, step-time Formula and values of one training layout (nothing evaluated).

    ``model`` may be an already loaded ``ModelShape`` when ``spec`` (its ModelSpec) is given; ``memory``: its plan
    for ``options`` already built (the search builds a split pipeline's end ranks once).
    """
    from . import plan as memory_plan

    if memory is None:
        memory = memory_plan(model, "train", gpu, **options)  # its compute capability: a module's attention kernels
    r = memory.regime
    if r.recompute not in fl.RECOMPUTE:  # a recompute memory models whose recomputed FLOPs are not counted
        raise UserError(f"time does not model recompute {r.recompute}'s recomputed FLOPs; plan its memory with "
                        "'symbolic memory'")
    fl_ = plan_flops(memory, spec if spec is not None else model)
    step = step_formula(memory, fl_, how)
    values = _train_values(memory, fl_, gpu, how, rate, compute)
    return memory, fl_, step, values


def _own_flops(memory: Plan) -> Flops | None:
    """The network's own FLOPs per sample at the plan's micro-batch (``Network.own_flops``), or None."""
    r = memory.regime
    lora = ((r.lora_rank, tuple(r.lora_targets), r.lora_dropout, r.adapter_dtype, r.qlora)
            if getattr(r, "lora_rank", 0) else ())  # its step with peft's adapters, counted
    own = memory.model.own_flops(r.batch, r.precision, pytorch.own_recompute(memory.model, r), lora)
    if own is None:
        return None
    return Flops(own.forward, own.train, dict(own.values), tuple(own.modules))


def sequence_length(memory: Plan) -> int:
    """Tokens per sequence of the plan; 1 for a network without a token sequence (a token is then a sample)."""
    return memory.regime.seq if memory.model.sequence else 1


def _layout_options(gpus: int | None, options: dict[str, object]) -> dict[str, object]:
    options = {k: v for k, v in options.items() if v is not None}
    if gpus is None:
        return options
    gpus = gpu_count(gpus)
    tp, pp = int(options.get("tp", 1)), int(options.get("pp", 1))  # type: ignore[call-overload]
    cp = int(options.get("cp", 1))  # type: ignore[call-overload]
    if "dp" in options:
        if int(options["dp"]) * tp * pp * cp != gpus:  # type: ignore[call-overload]
            raise UserError(f"gpus {gpus} ≠ dp {options['dp']} × tp {tp} × pp {pp} × cp {cp}; give gpus or dp, or "
                            "make them agree")
        return options
    if gpus % (tp * pp * cp):
        raise UserError(f"gpus {gpus} is not a multiple of tp × pp × cp = {tp * pp * cp}")
    return {**options, "dp": gpus // (tp * pp * cp)}


def step_formula(memory: Plan, fl_: Flops, how: str = "mfu") -> Formula:
    """Seconds per training step of ``memory``'s layout (roofline terms, or FLOPs / (GPUs · X))."""
    r = memory.regime
    defs = {fl.F_tok: fl_.train}
    if how == "achieved":
        return tm.step_formula(f"time.{memory.model.name}.step", f"Seconds per step of {memory.model.name} "
                               "at an achieved rate", [tm.achieved_step_term(r.cp > 1)], definitions=defs)
    held = N_gpu if N_gpu in memory.formula.definitions else N
    defs[tm.P_gpu] = memory.formula.definitions[held]
    pr = prec.get(r.precision)
    trained = trained_states(memory, defs[tm.P_gpu])
    if trained is not None:
        trained, defs[tm.P_tr], defs[tm.M_tr] = trained
    states = prec.bytes_per_param(r.precision, r.optimizer, r.grads)
    terms = tm.step_terms(params=tm.P_gpu, zero=r.zero, recompute=r.recompute, sequence_parallel=r.sequence_parallel,
                          act_bytes=pr.activation_bytes, weight_bytes=pr.weight_bytes,
                          grad_bytes=pr.grad_bytes(r.grads),
                          state_bytes=states if states is not None else sympy.Integer(16),
                          cp_width=a * memory.model.head_dim / t if r.cp > 1 else None,
                          schedule=r.pp_schedule, slowest=slowest_stage(memory, fl_),
                          stage_layers=slowest_layers(memory, fl_), trained=trained,
                          checkpointed=checkpointed_share(memory), pass_bytes=qlora_pass_bytes(memory, tm.P_gpu))
    if not memory.model.sequence:  # tp and pp move B·S·H per layer; such a network is planned at tp 1, pp 1 only
        terms = [term for term in terms if term.key not in _SEQUENCE_TRAFFIC]
    return tm.step_formula(f"time.{memory.model.name}.step", f"Seconds per training step of {memory.model.name}",
                           terms, definitions=defs,
                           note="No overlap of communication with compute (an upper bound); links at the "
                                "catalogue's per-direction bandwidth.")


def qlora_pass_bytes(memory: Plan, params: sympy.Expr) -> sympy.Expr | None:
    """The weight bytes one pass of a QLoRA plan moves (``finetune.pass_bytes``, the memory plan's NF4 split); None
    otherwise (``weight_bytes`` × ``params``)."""
    from . import finetune

    if not getattr(memory.regime, "qlora", False) or not getattr(memory.regime, "lora_rank", 0):
        return None
    return finetune.pass_bytes(memory.model, memory.regime, params)


def checkpointed_share(memory: Plan) -> sympy.Expr:
    """The share of layers a plan's full recompute runs again: 1, or ⌊L/N⌋/L with ``--recompute-every N`` (a network's
    own step counts its own blocks: 1 here)."""
    r = memory.regime
    if r.recompute != "full" or pytorch.own_recompute(memory.model, r):
        return sympy.Integer(1)
    return fl.checkpointed_share(int(getattr(r, "recompute_every", 1)))


def trained_states(memory: Plan, held: Formula) -> tuple[tm.Trained, Formula, Formula] | None:
    """What a fine-tuning plan's optimizer steps and data parallelism reduces: (``timing.Trained``, the Formulas of
    P_tr and M_tr); None for full training.

    LoRA: the adapters (``flops_trained.Trained.params``, Σ count·r·(in + out); a torch module: the tensors peft
    adds to it), their weights, gradients and optimizer state in the adapter dtype (``finetune.state_terms``, the
    memory plan's own); frozen embeddings alone: P_gpu (``held`` defines it) less the token embedding, at the
    precision's bytes.
    """
    from . import finetune

    params = tm.P_gpu
    model, r = memory.model, memory.regime
    trained = trained_of(model, r)
    if trained is None:
        return None
    name = model.name
    defs = None
    if trained.lora:
        found = _adapter_states(model, r, trained)
        if found is None:
            return None
        count, element, kept, title = found
        how = tm.Trained(grad_bytes=element, weight_bytes=element, what="the adapters")
        counted = tm.adapters_counted_term(count, title)
    else:
        emb = finetune.embedding_params(model)
        pr = prec.get(r.precision)
        how = tm.Trained(grad_bytes=pr.grad_bytes(r.grads), weight_bytes=pr.weight_bytes,
                         what="every weight but the frozen token embedding")
        counted = tm.unfrozen_counted_term(params, emb)
        kept = [t for t in finetune.state_terms(model, r, params) if t.key != "weights"]  # weights: the table too
        kept.append(tm.trained_weights_term(pr.dtype, pr.weight_bytes, params - emb))
        defs = {params: held}
    p_tr = Formula(f"time.{name}.trained_params", f"Parameters {name}'s step trains", (counted,), source="project",
                   name="P_tr", definitions=defs)
    m_tr = Formula(f"time.{name}.trained_states", f"Model-state bytes of the parameters {name}'s step trains",
                   tuple(kept), source="project", name="M_tr", definitions=defs)
    return how, p_tr, m_tr


def _adapter_states(model: ModelShape, r: object, trained: ft.Trained
                    ) -> tuple[sympy.Expr, int, list[Term], str] | None:
    """(adapter parameters, bytes per element, their state terms, a title) of a LoRA plan; None where no layout of
    adapters is known (a network's matrices alone: the step then counts every parameter, as its FLOPs do)."""
    from ..library import optimizers as optim
    from . import finetune

    opt = optim.get(str(r.optimizer))  # type: ignore[attr-defined]
    if trained.adapters:  # a family table's layers: the memory plan's own adapter states
        ad = finetune.adapters(model, r)
        kept = [t for t in finetune.state_terms(model, r, tm.P_gpu) if t.key != "weights"]  # not the frozen base
        return trained.params(), ad.element_bytes, kept, f"{ad.describe()}: Σ count·r·(in + out)"
    own = getattr(model, "lora_adapters", None)
    if own is None:
        return None
    from ..networks.module import lora as module_lora

    spec = module_lora.Spec(int(r.lora_rank), tuple(r.lora_targets), float(r.lora_dropout),  # type: ignore[attr-defined]
                            str(r.adapter_dtype), bool(r.qlora))  # type: ignore[attr-defined]
    found = own(spec)
    count, element = sympy.Integer(found.total), spec.element_bytes
    kept = tm.adapter_state_terms(count, element, opt.title, opt.state_expr(count, element), opt.source, opt.where)
    return count, element, kept, f"peft's tensors on {', '.join(found.modules)}"


def slowest_stage(memory: Plan, fl_: Flops) -> sympy.Rational | int:
    """p × the slowest pipeline rank's share of the FLOPs per token, under torchtitan's split (1: an even split).

    A rank computes its stages' layers (each the average layer's FLOPs: F_tok less the head's, over L) and, on the
    last stage, the output head (forward and backward, never recomputed); the embedding lookup has no matmul.
    """
    found = _slowest_rank(memory, fl_)
    return 1 if found is None else found[0]


def slowest_layers(memory: Plan, fl_: Flops) -> int | None:
    """The transformer layers of the rank ``slowest_stage`` takes (its tp and ring traffic is per layer); None when
    the stages split the layers evenly (L/p each)."""
    found = _slowest_rank(memory, fl_)
    return None if found is None else found[1]


def _slowest_rank(memory: Plan, fl_: Flops) -> tuple[sympy.Rational, int] | None:
    """(p × the slowest rank's share of the FLOPs per token, its layers) under torchtitan's split; None when even."""
    model, r = memory.model, memory.regime
    if not framework_pipeline(model, r):
        return None
    total = fl_.exact()
    head = _head_flops(fl_)
    layer = (total - head) / model.layers
    schedule = r.pp_schedule or ("interleaved" if r.interleave > 1 else "1f1b")
    ranks = rank_layers(model.layers, r.pp, r.interleave, schedule)
    work, layers = max((own * layer + (head if has_head else 0), own) for own, has_head in ranks)
    return sympy.Rational(r.pp * work, total), layers


def _head_flops(fl_: Flops) -> sympy.Rational:
    """The output head's training FLOPs per token (3 × its forward), once per Flops (evaluated exactly)."""
    if "head" not in fl_._cache:
        fl_._cache["head"] = 3 * sum((value for term, value in fl_.forward.evaluate(fl_.forward.restrict(
            fl_.values)).terms if term.key == "output"), sympy.Integer(0))
    return fl_._cache["head"]


@lru_cache(maxsize=1024)
def rank_layers(layers: int, pp: int, v: int, schedule: str) -> tuple[tuple[int, bool], ...]:
    """Per pipeline rank, (its layers, whether it holds the head), as ``build.pipeline_stage`` splits them.

    What a rank computes does not depend on the micro-batches, so the schedule is not simulated (its peak is
    memory's), and one split serves every m of a search.
    """
    split = pipe.stage_layers(layers, pp * v)
    out = []
    for rank in range(pp):
        held = pipe.rank_stages(rank, pp, v, pipe.style(schedule))
        out.append((sum(split[i] for i in held), len(split) - 1 in held))
    return tuple(out)


def _train_values(memory: Plan, fl_: Flops, gpu: GPU, how: str, rate: float, compute: str | None) -> dict[str, object]:
    r = memory.regime
    values: dict[str, object] = {**memory.model.numbers, **fl_.values, "B": r.batch, "S": sequence_length(memory),
                                 "n_d": r.dp,
                                 "t": r.tp, "p": r.pp, "n_mb": r.microbatches, "v_pp": r.interleave,
                                 "n_gpu": r.gpus}
    if r.cp > 1:
        values["c_p"] = r.cp
    if how == "achieved":
        values["X"] = rate
        return values
    dtype = train_rate(r.precision, compute)
    values.update(F_peak=gpu.peak_flops(dtype), mfu=rate, W_hbm=_rate(gpu.hbm_bandwidth, gpu, "HBM bandwidth"),
                  W_tp=link(gpu, r.tp, "tensor-parallel"), W_dp=link(gpu, r.tp * r.cp * r.dp, "data-parallel"),
                  W_pp=link(gpu, r.gpus if r.pp > 1 else 1, "pipeline"))
    if r.cp > 1:  # torchtitan's mesh: tp innermost, then cp (its ring spans t·c_p consecutive GPUs)
        values["W_cp"] = link(gpu, r.tp * r.cp, "context-parallel")
    return values


def _finish(mode: str, memory: Plan, budget: Budget, per_token: Formula, step: Formula, values: dict[str, object],
            tokens: int | None, price: float | None, how: str, parts: tuple[dict[str, object], ...] = (),
            flops_notes: tuple[str, ...] = ()) -> TimePlan:
    name = memory.model.name
    per_step = tm.step_flops_formula(f"flops.{name}.step", f"Training FLOPs per optimizer step of {name}", per_token)
    formulas = {"flops_per_token": per_token, "flops_per_step": per_step, "step_seconds": step,
                "tokens_per_second": tm.throughput_formula(f"time.{name}.throughput", step)}
    notes = ["efficiency: " + ("mfu (compute only; communication and bubble modelled on top)" if how == "mfu" else
                               "achieved FLOP/s per GPU (end to end, nothing modelled on top)")]
    if tokens is not None:
        values["T"] = _whole(tokens, "tokens")
        train = tm.train_formula(f"time.{name}.train", step)
        formulas["train_seconds"] = train
        formulas["gpu_hours"] = tm.gpu_hours_formula(f"time.{name}.gpu_hours", train)
        if price is not None:
            values["c_gpu"] = _positive_float(price, "price")
            formulas["cost"] = tm.cost_formula(f"time.{name}.cost", train)
    elif price is not None:
        raise UserError("price needs tokens (the cost is of training on T tokens)")
    figures: dict[str, float | int] = {"gpus": memory.regime.gpus,
                                       "tokens_per_step": int(memory.regime.dp * memory.regime.batch
                                                              * memory.regime.microbatches
                                                              * sequence_length(memory))}
    _chain(formulas, values, figures, {"flops_per_token": "F_tok", "step_seconds": "t_step",
                                       "train_seconds": "t_train"})
    figures["train_days"] = figures["train_seconds"] / 86400 if "train_seconds" in figures else None  # type: ignore[assignment]
    achieved = figures["flops_per_step"] / (memory.regime.gpus * figures["step_seconds"])
    figures["achieved_tflops"] = achieved / 10**12
    if "F_peak" in values:
        figures["mfu_end_to_end"] = achieved / float(values["F_peak"])  # type: ignore[arg-type]
    if figures["train_days"] is None:
        del figures["train_days"]
    fits = memory.total <= budget.bytes
    if not fits:
        notes.append(f"the per-GPU memory ({memory.total:,} bytes) does not fit {budget.label}")
    kept_notes = ([n for n in memory.notes if not n.startswith("microbatches matter only")] + _cannot_count(memory)
                  + list(flops_notes))
    if memory.model.sequence:
        notes.append(f"tokens per step = dp × batch × microbatches × seq = {figures['tokens_per_step']:,} "
                     "(microbatches: gradient-accumulation steps, and the pipeline's m)")
    else:
        notes.append(f"{name} takes no token sequence: a token is one sample, tokens per step = dp × batch × "
                     f"microbatches = {figures['tokens_per_step']:,}")
    return TimePlan(mode, name, budget.gpu, memory, formulas, values, figures,
                    notes + kept_notes + budget_notes(budget), budget, parts)


# --- serving ------------------------------------------------------------------------------------
def infer_time(model: object, gpu: GPU | Budget | str, *, gpus: int | None = None, tokens: int | None = None,
               mfu: float | None = None, achieved_tflops: float | None = None, price: float | None = None,
               compute: str | None = None, **options: object) -> TimePlan:
    """Prefill time, decode time per token, tokens per second and the largest concurrency that fits."""
    from . import fit_batch
    from . import plan as memory_plan

    budget = to_budget(gpu)
    gpu = budget.gpu
    how, rate = _efficiency(mfu, achieved_tflops)
    options = _layout_options(gpus, options)
    memory = memory_plan(model, "infer", **options)
    if not memory.model.sequence:  # prefill and decode are steps over a token sequence
        raise UserError(f"time --mode infer times prefill and decode over a token sequence; {memory.model.name} takes "
                        "none (its forward's memory: 'symbolic memory --mode infer'; its FLOPs per module: "
                        "'symbolic time' in training)")
    r = memory.regime
    fl_ = flops(model, seq=r.seq)
    name = memory.model.name
    eff = tm.mfu if how == "mfu" else tm.X
    peak = tm.F_peak if how == "mfu" else 1
    prefill = tm.prefill_formula(f"time.{name}.prefill", f"Prefill seconds of {name}: B·S prompt tokens, "
                                 "compute-bound", fl_.forward, peak, eff)
    terms = memory.terms()
    kv_read = sum(v for k, v in terms.items() if k == "kv_cache" or k.startswith("kv_cache."))  # every layer kind
    decode = tm.decode_formula(f"time.{name}.decode", f"Seconds per decode step of {name} (B sequences at context S)",
                               fl_.forward, peak, eff, kv_cache=bool(kv_read))  # no KV cache: only weights are read
    per_seq = tm.decode_rate_formula(f"time.{name}.decode_rate", f"Decode tokens per second of one replica of {name}",
                                     decode)
    kept = terms.get("embeddings", 0)
    table = int(memory.model.value(memory.model.first_stage) * formats.get(r.weights).kept_bytes / r.tp)
    weights_read = terms.get("weights", 0) - _idle_experts(model, memory, terms.get("weights", 0)) + max(kept - table, 0)
    values: dict[str, object] = {**memory.model.numbers, **fl_.values, "B": r.batch, "S": r.seq, "t": r.tp, "p": r.pp,
                                 "M_w": weights_read, **({"M_kv": kv_read} if kv_read else {}),
                                 "W_hbm": _rate(gpu.hbm_bandwidth, gpu, "HBM bandwidth"),
                                 "n_gpu": r.gpus}
    if how == "mfu":
        values.update(F_peak=gpu.peak_flops(weights_rate(r.weights, compute)), mfu=rate)
    else:
        values["X"] = rate
    formulas = {"flops_per_token": fl_.forward, "prefill_seconds": prefill, "decode_seconds": decode,
                "decode_tokens_per_second": per_seq}
    figures: dict[str, float | int] = {"gpus": r.gpus}
    _chain(formulas, values, figures, {"decode_seconds": "t_dec"})
    figures["tokens_per_second"] = figures["decode_tokens_per_second"] * r.dp
    figures["decode_seconds_per_token"] = figures["decode_seconds"]
    bound = float(values["W_hbm"]) / (r.pp * (weights_read + kv_read))  # type: ignore[arg-type]
    figures["bandwidth_bound_tokens_per_second"] = bound * r.batch
    answer = fit_batch(model, budget, "infer", **{k: v for k, v in options.items() if k != "batch"})
    figures["max_concurrency"] = answer.value if answer.value is not None else 0
    notes = ["decode at context S reads the whole KV cache of S tokens every step (the end of generation: an "
             "upper bound on the step)", "prefill counts the attention scores over all S positions"]
    weights = formats.get(r.weights)
    if how == "mfu" and weights.compute != weights.name:
        notes.append(f"{r.weights} weights are dequantised to {weights.compute} for each matmul: FLOPs at the "
                     f"{weights_rate(r.weights, compute)} peak, weight reads at {r.weights}'s bytes")
    if memory.model.moe:
        notes.append("MoE decode reads the experts B tokens are expected to pick under uniform routing: "
                     "1 − ((n − k)/n)^B of the experts' bytes")
    if tokens is not None:
        values["T"] = _whole(tokens, "tokens")
        values["n_d"] = r.dp
        total = tm.generate_formula(f"time.{name}.generate", f"Seconds to generate T tokens with {name} (dp replicas)",
                                    decode)
        more = {"total_seconds": total, "gpu_hours": tm.gpu_hours_formula(f"time.{name}.gpu_hours", total)}
        if price is not None:
            values["c_gpu"] = _positive_float(price, "price")
            more["cost"] = tm.cost_formula(f"time.{name}.cost", total)
        formulas.update(more)
        _chain(more, values, figures, {"total_seconds": "t_train"})
    elif price is not None:
        raise UserError("price needs tokens (the cost is of generating T tokens)")
    if memory.total > budget.bytes:
        notes.append(f"the per-GPU memory ({memory.total:,} bytes) does not fit {budget.label}")
    return TimePlan("infer", name, gpu, memory, formulas, values, figures,
                    notes + list(memory.notes) + _cannot_count(memory) + budget_notes(budget), budget)


def _cannot_count(memory: Plan) -> list[str]:
    """The network's one line on the FLOPs it cannot say (none for a family table)."""
    line = memory.model.cannot_say.get("flops")
    return [line] if line else []


def _idle_experts(model: object, memory: Plan, weight_bytes: int) -> int:
    """Bytes of routed experts a decode step of B tokens is expected not to read (uniform routing).

    Each token picks k of n experts, so one expert is skipped by all B tokens with probability
    ((n − k)/n)^B; that share of the experts' bytes is not read. Dense models: 0.
    """
    shape = memory.model
    if not shape.moe:
        return 0
    from ..networks.transformer import formulas as arch

    spec = _spec(model)
    if isinstance(spec, ModelShape):  # no layer formulas: the routed experts the network shows
        experts = shape.value(shape.experts)
    else:
        groups = getattr(arch, "kinds", None)
        kinds = groups(spec, active=False) if groups else [("layers", "", L, 0, arch.layer_formula(spec).terms)]
        experts = sum(shape.value(count * term.expr) for _, _, count, _, terms in kinds for term in terms
                      if term.key == "moe.experts")
    total = int(shape.params.evaluate(shape.params.restrict(shape.numbers)).total)
    rest = total - int(shape.value(shape.first_stage)) - int(shape.value(shape.head))
    n, k = shape.numbers["n_exp"], shape.numbers["k_exp"]
    idle = sympy.Rational(n - k, n) ** memory.regime.batch
    return int(sympy.floor(weight_bytes * experts / rest * idle))


def time_plan(model: object, gpu: GPU | Budget | str, mode: str = "train", **options: object) -> TimePlan:
    """``train_time`` or ``infer_time`` by ``mode``."""
    if mode == "train":
        return train_time(model, gpu, **options)  # type: ignore[arg-type]
    if mode == "infer":
        return infer_time(model, gpu, **options)  # type: ignore[arg-type]
    raise UserError(f"unknown mode {mode!r}; choose from train, infer")
