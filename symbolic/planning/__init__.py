"""Memory planning: per-GPU training and inference memory of a real model as one Formula.

API (plain functions with keyword options; the CLI's ``symbolic memory`` and ``symbolic fit``
and the report call exactly these)::

    from symbolic import planning

    plan = planning.plan("llama-3-8b", mode="train", batch=1, seq=4096,
                         precision="bf16-mixed", optimizer="adamw")
    plan.formula          # Formula "plan.llama-3-8b.train", the peak of a step: the resident terms
                          # (weights, master_weights, optimizer_states, runtime terms) + "peak",
                          # the maximum of the phases' extras; N (and N_gpu) are defined by the
                          # model's own parameter formula
    plan.phases           # {"forward": Formula, "backward": ..., "optimizer": ...} (serving:
                          # prefill, decode): resident terms + what that phase adds
    plan.phase_bytes()    # {"forward": ..., "backward": ..., "optimizer": ...} in whole bytes
    plan.peak_phase, plan.peak_lead   # "optimizer", its lead in bytes over the runner-up
    plan.values           # {"H": 4096, "L": 32, ..., "B": 1, "S": 4096}: every input's number
    plan.total            # per-GPU bytes at the peak (int, each term rounded up to a whole byte)
    plan.terms()          # every term, resident and of each phase: {"weights": 16060522496, ...}
    plan.runtime_bytes    # the CUDA runtime's share (context, cuBLAS workspaces, allocator, NCCL)
    plan.evaluate()       # the exact Evaluation (sympy Rationals)
    plan.fit(planning.gpu("h100-80gb"))   # Fit(gpu, total, fits, headroom)
    plan.as_dict(gpu, formulas=True)      # JSON-ready dict (what `symbolic memory --json` prints)
    plan.regime           # every choice resolved; .defaulted names the ones left at defaults;
                          # .tp, .lora_rank, ... read each option, .parallel, .finetuning, ... each
                          # concern's record (symbolic.options.records)
    plan.host             # host-memory Formula per GPU process with offload=True, else None
    plan.activation_bytes # with activations="pytorch": bytes saved for backward, else None
    plan.formula.diff("S"), plan.formula.latex(), plan.solve("B", "80GiB")
    plan, plan.to_frame() # in Jupyter a table of the terms (_repr_html_); a pandas DataFrame

    planning.fit_batch("llama-3-8b", "h100-80gb", mode="train", seq=4096)    # Answer
    planning.fit_seq("llama-3-8b", "h100-80gb", mode="infer", batch=8)
    planning.fit_gpus("llama-3-70b", "h100-80gb", over="dp")                # ZeRO-3 by default
    planning.fit_batch("llama-3-8b", "80GiB", seq=4096)   # a capacity instead of a catalogue GPU
    planning.fit_batch("llama-3-8b", planning.budget("l4", fraction=0.9, reserve={"other": "1GiB"}),
                       mode="infer")   # a Budget: 90 % of an L4 less 1 GiB (plan.fit, time, search take one too)
    planning.gpu("h100-80gb"), planning.gpus()                               # the catalogue

``model`` is a preset name, a path to a ``config.json``, a ``ModelSpec`` or a ``ModelShape``.
Options and defaults (``DEFAULTS``, allowed values in ``CHOICES``; ``None`` or omitted means the
default; invalid values or combinations raise ``ValueError`` with a one-line message):

- both modes: ``batch`` 1 (micro-batch per GPU; concurrent sequences when serving), ``seq`` 4096
  (or the model's learned positions if fewer), ``dp``/``tp``/``pp`` 1, ``flash`` True;
- training: ``precision`` "bf16-mixed" (fp32, bf16-mixed, fp16-mixed, bf16), ``optimizer``
  "adamw" (sgd, sgd-momentum, adamw, adam-8bit, lion, adafactor), ``grads`` the precision's
  default (16bit, fp32, 16bit+fp32), ``recompute`` "none" (selective, full), ``dropout``
  (on for gpt2/bert, whose configs use 0.1), ``zero`` 0 (1, 2, 3), ``sequence_parallel`` False,
  ``microbatches`` pp, ``interleave`` 1 (virtual pipeline stages), ``offload`` False,
  ``logits`` "hf" (megatron, fused), ``activations`` "korthikanti" (article-b, pytorch);
- with ``activations="pytorch"`` (one PyTorch step of the Hugging Face implementation, measured;
  ``planning.pytorch`` over ``library.peak_pytorch.step``): ``attn`` "sdpa" (eager), ``device``
  "cuda" (cpu), ``use_cache`` the config's, ``dropout_masks`` bool on cuda and dtype on cpu, and
  different defaults: ``precision`` "bf16" (fp32, bf16, bf16-mixed, fp16-mixed), ``optimizer``
  adamw, sgd-momentum or sgd, ``dropout`` on when the config has dropout probabilities (off:
  none kept). Its terms are ``activations``, ``inputs``, ``logits`` (together the bytes saved
  for backward, ``plan.activation_bytes``), ``loss_gradients`` and the step's own. Not modelled
  with it, a ``ValueError``: tp or pp > 1, recompute, mixture-of-experts models, logits other
  than "hf". ``attn`` and ``device`` change nothing with the other activation models (a note
  says so). Article A's network is the model "mlp" (or "mlp-nobias"), trained with it only,
  ``loss`` cross-entropy or mse (the planner asks ``Network.sequence``, never the name);
- ``runtime`` (both modes, default on): the CUDA runtime's terms (``library.runtime``) on every
  GPU, not with ``device="cpu"``;
- inference: ``weights`` "bf16" (fp32, fp16, bf16, int8, int4), ``kv_dtype`` the weights' dtype
  for 16/32-bit weights, else "bf16" (fp32, fp16, bf16, fp8, int8, int4).

Every term has a source and a note (``plan.formula.terms``); ``plan.notes`` lists choices that
change nothing and what the plan leaves out. Approximations are named where they are made
(``library.activations``, ``library.optimizers``, ``library.inference``, ``build``).
"""

from __future__ import annotations

from ..catalogs import GPU, GPUS, Budget, as_budget
from ..catalogs import get as gpu
from ..catalogs import make_budget as budget
from ..networks.network import Network, load
from ..networks.shape import ModelShape
from ..options import table as _options
from ..options.table import PlanOptionError
from . import fit as _fit
from .build import Fit, Plan, build
from .fit import OVER, QUESTIONS, Answer
from .pytorch import SavedActivations
from .regime import ATTN, DEFAULT_SEQ, DEVICES, MODES, Regime, resolve  # noqa: F401 (ATTN, DEVICES, DEFAULT_SEQ: kept)

# Defaults and allowed values of every option, from the one list in symbolic.options.table.
DEFAULTS: dict[str, object] = _options.defaults()
CHOICES: dict[str, tuple[object, ...]] = _options.choices()


def plan(model: object, mode: str = "train", gpu: object = None, **options: object) -> Plan:
    """Per-GPU memory of ``model`` under the given choices (see the module docstring).

    ``gpu`` (a catalogue name, GPU or Budget): the GPU planned for, whose compute capability decides a
    probed torch module's attention kernels (``on_gpu``); the fit against it stays ``plan.fit(gpu)``.
    """
    shape = load(model)
    return build(shape, on_gpu(resolve(shape, mode, **options), gpu))


def on_gpu(regime: Regime, gpu: object) -> Regime:
    """``regime`` on ``gpu``: its compute capability kept where it has one (None, a capacity: sm90 stays)."""
    if gpu is None:
        return regime
    arch = as_budget(_gpu(gpu)).gpu.compute_capability
    return regime if arch is None else regime.replace(cuda_arch=arch)


def _maker(mode: str, gpu: object = None):  # noqa: ANN202
    def make(shape: ModelShape, **options: object) -> Plan:
        return build(shape, on_gpu(resolve(shape, mode, **options), gpu))
    return make


def _gpu(value: object) -> GPU | Budget:
    """A GPU of the catalogue (or its name), a Budget of one, or just a capacity: "80GiB", bytes, a pint quantity."""
    from ..core.errors import UnknownNameError
    from ..math import quantities

    if isinstance(value, (GPU, Budget)):
        return value
    if isinstance(value, str):
        try:
            return gpu(value)
        except UnknownNameError:
            if not value.strip()[:1].isdigit():
                raise
    limit = quantities.budget(value)  # a capacity given as a size
    if not limit.is_Integer or limit <= 0:
        raise PlanOptionError(f"a GPU capacity must be a positive whole number of bytes, not {limit}")
    size = int(limit)
    from ..core.units import format_bytes

    shown = format_bytes(size)
    return GPU(f"{shown} GPU", f"a GPU with {shown} of memory", str(value), size, "given", "given in Python")


def fit_batch(model: object, gpu_name: object, mode: str = "train", **options: object) -> Answer:
    """Largest batch (micro-batch per GPU, or concurrent sequences when serving) that fits."""
    shape = load(model)
    return _fit.largest(_maker(mode, gpu_name), shape, _gpu(gpu_name), "batch", options)


def fit_seq(model: object, gpu_name: object, mode: str = "train", **options: object) -> Answer:
    """Largest sequence length (context) that fits."""
    shape = load(model)
    return _fit.largest(_maker(mode, gpu_name), shape, _gpu(gpu_name), "seq", options)


def fit_size(model: object, gpu_name: object, names: tuple[str, ...], mode: str = "train", question: str = "size",
             **options: object) -> Answer:
    """Largest input sizes ``names`` (a module's S, or H and W keeping their ratio) that fit, on their stride."""
    shape = load(model)
    return _fit.largest_size(_maker(mode, gpu_name), shape, _gpu(gpu_name), names, mode, question, options)


def fit_gpus(model: object, gpu_name: object, mode: str = "train", over: str = "auto",
             **options: object) -> Answer:
    """Fewest GPUs: over data parallel with ZeRO (stage 3 unless given), or the tp/pp degree."""
    shape = load(model)
    return _fit.fewest(_maker(mode, gpu_name), shape, _gpu(gpu_name), over, mode, options)


def gpus() -> list[GPU]:
    """The GPU catalogue, in order."""
    return list(GPUS.values())


__all__ = ["CHOICES", "DEFAULTS", "MODES", "OVER", "QUESTIONS", "Answer", "Budget", "Fit", "GPU", "ModelShape", "Network",
           "Plan", "Regime", "SavedActivations", "budget", "build", "fit_batch", "fit_gpus", "fit_seq", "gpu", "gpus", "load",
           "plan", "resolve"]
