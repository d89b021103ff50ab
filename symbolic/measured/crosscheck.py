"""Predicted vs measured: build real models, measure training steps, compare with the formulas.

(``symbolic validate`` runs this module; validation of user *values* is ``symbolic.core.values``.)

Optional: needs the ``torch`` extra (torch, and transformers for Hugging Face configs). Both are
imported inside functions. Models are built from configs with random weights; nothing is
downloaded. Targets:

- ``mlp`` / ``mlp-nobias``: article A's network (``ArticleANet``), with or without biases;
- a preset name (``gpt2``, ``llama-3-8b``, ...) or a path to a ``config.json``: the class named
  in its ``architectures`` (``GPT2LMHeadModel``, ``LlamaForCausalLM``...), its layers set per
  grid point, any ``overrides`` (e.g. a smaller ``vocab_size``) applied to the config first, and
  ``use_cache`` as ``run`` says (default: the config's, as transformers follows it; ``build``
  alone turns it off unless told).

Each point runs one setup: precision (fp32, bf16, or bf16/fp16 autocast with fp32 weights),
attention, the optimizer (``optimizer_factory``), the dropout mask element (``dropout_masks``:
bool masks on the CPU through ``torch.native_dropout``) and article A's loss.

Each grid point compares, on the CPU (or CUDA when asked and present):

- the bytes saved for backward (``symbolic.measured.measure.saved_tensors``) with ``pytorch.saved.*``
  (``symbolic.library.activations_pytorch``), in total and per module type, and with the seed
  formulas: article A's ``mlp.activations``, article B's ``llm.activations`` and Korthikanti's
  per-layer row times L plus his output-layer term;
- the peak of each phase of whole training steps (``symbolic.measured.measure.step_peak``) with
  ``peak_pytorch.step(...).phase_exprs()``, and the step's peak with their maximum.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import sympy

from .. import formats
from ..core.errors import UserError
from ..library import activations_pytorch as act
from ..library import article_a, registry
from ..library import peak_pytorch as peakmod
from ..networks.shape import ARTICLE_A_MODELS
from . import measure

MLP_TARGETS = ARTICLE_A_MODELS  # article A's network with and without biases: the planner's one list
MLP_SIZES = dict(article_a.NETWORK)
DTYPES = ("fp32", "bf16", "bf16-mixed", "fp16-mixed")
OPTIMIZERS = peakmod.OPTIMIZERS
TOLERANCE_SAVED = 0.005
TOLERANCE_PEAK = 0.01


@dataclass(frozen=True)
class Grid:
    """The grid of one validation run (a family ignores what it has no use for)."""

    batch: tuple[int, ...] = (1, 2)
    seq: tuple[int, ...] = (64, 128)
    layers: tuple[int, ...] = (1, 2)
    dtype: tuple[str, ...] = ("fp32", "bf16")
    attn: tuple[str, ...] = ("eager", "sdpa")

    def __post_init__(self) -> None:
        for name in ("batch", "seq", "layers"):
            values = getattr(self, name)
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise UserError(f"{name}: give positive whole numbers")
        if not self.dtype or set(self.dtype) - set(DTYPES):
            raise UserError(f"dtype: choose from {', '.join(DTYPES)}")
        if not self.attn or set(self.attn) - set(act.ATTENTION):
            raise UserError(f"attn: choose from {', '.join(act.ATTENTION)}")


@dataclass
class Target:
    """What to build: article A's network or a Hugging Face config (after overrides)."""

    name: str
    family: str
    config: dict[str, Any]
    note: str = ""
    bias: bool = True

    @property
    def is_mlp(self) -> bool:
        return self.family == article_a.SAVED_FAMILY  # article A's network: no sequence, attention or cache

    @property
    def tied(self) -> bool:
        """Whether the LM head shares the embedding (default as in transformers: GPT-2 yes, Llama no)."""
        return not self.is_mlp and bool(self.config.get("tie_word_embeddings", self.family == "gpt2"))


@dataclass
class Point:
    """One grid point: inputs, measurements, predictions."""

    model: str
    family: str
    B: int
    S: int
    L: int
    dtype: str
    attn: str
    device: str
    values: dict[str, int]
    params: int
    saved_measured: int
    saved_predicted: int
    modules_measured: dict[str, int]
    modules_predicted: dict[str, int]
    seeds: dict[str, int]
    terms_predicted: dict[str, int] = field(default_factory=dict)
    note: str = ""
    peak_measured: int | None = None
    peak_predicted: int | None = None
    peak_phase: str = ""
    peak_seeds: dict[str, int] = field(default_factory=dict)
    phases_predicted: dict[str, int] = field(default_factory=dict)
    phases_measured: dict[str, int] = field(default_factory=dict)
    optimizer: str = "adamw"
    foreach: bool = False
    use_cache: bool = False
    dropout_masks: str = ""
    loss: str = "cross-entropy"
    seconds: float = 0.0

    @property
    def saved_error(self) -> float:
        return error(self.saved_predicted, self.saved_measured)

    @property
    def peak_error(self) -> float | None:
        if self.peak_measured is None or self.peak_predicted is None:
            return None
        return error(self.peak_predicted, self.peak_measured)

    def phase_errors(self) -> dict[str, float]:
        """Each phase's predicted peak against its measured one."""
        return {k: error(v, self.phases_measured[k]) for k, v in self.phases_predicted.items()
                if self.phases_measured.get(k)}

    @property
    def predicted_phase(self) -> str:
        """The phase the formulas say sets the peak."""
        return max(self.phases_predicted, key=self.phases_predicted.__getitem__) if self.phases_predicted else ""

    def seed_errors(self) -> dict[str, float]:
        return {name: error(value, self.saved_measured) for name, value in self.seeds.items()}

    def peak_seed_errors(self) -> dict[str, float]:
        if self.peak_measured is None:
            return {}
        return {name: error(value, self.peak_measured) for name, value in self.peak_seeds.items()}

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["saved_error"] = self.saved_error
        out["peak_error"] = self.peak_error
        out["saved_ratio"] = self.saved_predicted / self.saved_measured if self.saved_measured else None
        out["peak_ratio"] = (self.peak_predicted / self.peak_measured
                             if self.peak_measured and self.peak_predicted is not None else None)
        out["seed_errors"] = self.seed_errors()
        out["peak_seed_errors"] = self.peak_seed_errors()
        out["phase_errors"] = self.phase_errors()
        out["predicted_phase"] = self.predicted_phase
        return out


def error(predicted: int, measured: int) -> float:
    """Relative error (predicted − measured) / measured."""
    return (predicted - measured) / measured if measured else float("inf")


# --- targets -----------------------------------------------------------------------------------
def parse_overrides(items: Iterable[str]) -> dict[str, int]:
    """{'vocab_size': 8192} from ['vocab_size=8192']: config keys set to whole numbers only."""
    out: dict[str, int] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key.replace("_", "").isalnum() or not value.isdigit():
            raise UserError(f"override {item!r}: write KEY=N with a config key and a whole number")
        out[key] = int(value)
    return out


def load_target(name: str, overrides: Mapping[str, int] | None = None, dropout: str = "config") -> Target:
    """The model to validate: 'mlp', 'mlp-nobias', a preset name or a config.json path.

    ``dropout="off"`` sets every dropout probability of the config to 0.
    """
    overrides = dict(overrides or {})
    if name in MLP_TARGETS:
        unknown = set(overrides) - set(MLP_SIZES)
        if unknown:
            raise UserError(f"{name}: overrides must be among {', '.join(MLP_SIZES)}")
        return Target(name, article_a.SAVED_FAMILY, {**MLP_SIZES, **overrides}, bias=MLP_TARGETS[name])
    config = _read_config(name)
    unknown = set(overrides) - set(config) - {"num_hidden_layers", "n_layer", "intermediate_size", "n_inner"}
    if unknown:
        raise UserError(f"{name}: the config has no {', '.join(sorted(unknown))}")
    config.update(overrides)
    if dropout == "off":
        config.update({key: 0.0 for key in act.dropout_keys()})
    elif dropout != "config":
        raise UserError(f"dropout: choose config or off, not {dropout!r}")
    family, note = act.family_for(config)
    bias = bool(config.get("attention_bias", config.get("model_type") == "qwen2"))
    return Target(name, family, config, note, bias=bias)


def _read_config(name: str) -> dict[str, Any]:
    """A preset's or a file's config dict (without ``_source``), resolved like ``symbolic params``."""
    from ..networks.transformer import resolve_config

    _, data = resolve_config(name)
    data = {k: v for k, v in data.items() if k not in ("_source", "auto_map", "_name_or_path")}
    if "model_type" not in data:
        raise UserError(f"{name}: the config has no model_type")
    return data


def symbol_values(target: Target, layers: int) -> dict[str, int]:
    """The numbers of the architecture symbols (H, L, a, a_kv, d_head, d_ff, V, n_pos)."""
    if target.is_mlp:
        return {k: int(v) for k, v in target.config.items()}
    config = _with_layers(target.config, layers)
    from ..networks.transformer import spec_from_config

    values = spec_from_config(config, name=target.name).numbers()
    return {k: int(v) for k, v in values.items() if k in ("H", "L", "a", "a_kv", "d_head", "d_ff", "V", "n_pos")}


def _with_layers(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    out = dict(config)
    key = "n_layer" if out.get("model_type") == "gpt2" else "num_hidden_layers"
    out[key] = layers
    return out


# --- building models ---------------------------------------------------------------------------
@lru_cache(maxsize=1)
def article_a_class() -> type:
    """``ArticleANet``, defined once torch is importable."""
    torch = measure.require_torch()
    from torch import nn
    from torch.nn import functional as F

    class ArticleANet(nn.Module):
        """Article A's network: gat, up, down, out; ReLUs, a residual and a softmax output."""

        def __init__(self, d_in: int = 2048, d_h: int = 4096, n_out: int = 10, bias: bool = True) -> None:
            super().__init__()
            self.gat = nn.Linear(d_in, d_h, bias=bias)
            self.up = nn.Linear(d_h, d_h, bias=bias)
            self.down = nn.Linear(d_h, d_in, bias=bias)
            self.out = nn.Linear(d_in, n_out, bias=bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            g = F.relu(self.gat(x))
            u = F.relu(self.up(g))
            g = F.relu(g + u)
            g = F.relu(self.down(g))
            g = g + x
            return F.softmax(self.out(g), dim=-1)

    return ArticleANet


def torch_dtype(name: str) -> Any:
    """The torch dtype of the weights: fp32 under autocast ("bf16-mixed", "fp16-mixed")."""
    torch = measure.require_torch()
    return formats.torch_dtype(torch, _weights(name))


def _weights(dtype: str) -> str:
    return "fp32" if dtype.endswith("-mixed") else dtype


def autocast_dtype(dtype: str) -> str | None:
    """The autocast dtype of a precision ("bf16" for "bf16-mixed"), None for pure precisions."""
    return dtype.removesuffix("-mixed") if dtype.endswith("-mixed") else None


def build(target: Target, layers: int, dtype: str, attn: str, device: str = "cpu", *,
          use_cache: bool | None = False) -> Any:
    """The real model with random weights, in training mode (fp32 weights for a "-mixed" dtype).

    ``use_cache``: the config's ``use_cache`` is set to it (None keeps the config's own, whose
    default is true): transformers then builds a KV cache during the training forward pass.
    """
    torch = measure.require_torch()
    torch.manual_seed(0)
    if target.is_mlp:
        c = target.config
        model = article_a_class()(c["d_in"], c["d_h"], c["n_out"], bias=target.bias)
    else:
        import transformers
        from transformers import AutoConfig

        level = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()  # for this build only: the caller's level comes back
        try:
            cfg = _with_layers(target.config, layers)
            model_type = cfg.pop("model_type")
            architectures = cfg.get("architectures") or []
            config = AutoConfig.for_model(model_type, **cfg)
            if use_cache is not None:
                config.use_cache = use_cache
            config._attn_implementation = attn
            cls = getattr(transformers, architectures[0]) if architectures else transformers.AutoModelForCausalLM
            model = cls(config) if architectures else cls.from_config(config)
        finally:
            transformers.logging.set_verbosity(level)
    return model.to(device=device, dtype=torch_dtype(dtype)).train()


def inputs_for(target: Target, batch: int, seq: int, dtype: str, device: str = "cpu",
               loss: str = "cross-entropy") -> tuple[Any, Any]:
    """(inputs, loss_fn) for one step: random ids with labels = ids, or x and class targets.

    Article A's network takes ``loss``: cross-entropy of its softmax output, or "mse" to the
    one-hot targets in the output's dtype.
    """
    torch = measure.require_torch()
    gen = torch.Generator().manual_seed(1)
    if target.is_mlp:
        x = torch.randn(batch, target.config["d_in"], generator=gen).to(device=device, dtype=torch_dtype(dtype))
        y = torch.randint(0, target.config["n_out"], (batch,), generator=gen).to(device)
        functional = torch.nn.functional
        n_out = target.config["n_out"]

        def loss_fn(probs: Any) -> Any:
            if loss == "mse":
                return functional.mse_loss(probs, functional.one_hot(y, n_out).to(probs.dtype))
            return functional.cross_entropy(probs, y)

        loss_fn.held = (y,)  # type: ignore[attr-defined]  # measure counts y like the inputs
        return x, loss_fn
    ids = torch.randint(0, int(target.config["vocab_size"]), (batch, seq), generator=gen).to(device)
    return {"input_ids": ids, "labels": ids}, lambda out: out.loss


def optimizer_factory(name: str, foreach: bool | None = None) -> Any:
    """Builds the named optimizer (adamw lr 1e-4; sgd-momentum lr 1e-2, momentum 0.9; sgd lr 1e-2)."""
    torch = measure.require_torch()
    if name not in OPTIMIZERS:
        raise UserError(f"optimizer: choose from {', '.join(OPTIMIZERS)}")
    if name == "adamw":
        return lambda params: torch.optim.AdamW(params, lr=1e-4, foreach=foreach)
    momentum = 0.9 if name == "sgd-momentum" else 0.0
    return lambda params: torch.optim.SGD(params, lr=1e-2, momentum=momentum, foreach=foreach)


@contextmanager
def dropout_masks(kind: str, device: str) -> Iterator[None]:
    """Makes ``F.dropout`` keep ``kind`` masks: "bool" uses ``torch.native_dropout`` (CUDA's fused
    dropout, whose backward keeps a bool mask) on the CPU too; "dtype" and the device's own
    default change nothing. SDPA's internal dropout (its math fallback) is not affected."""
    torch = measure.require_torch()
    functional = torch.nn.functional
    original = functional.dropout
    if kind != "bool" or device != "cpu":
        yield
        return

    def native(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:  # noqa: A002
        if not training or p == 0:
            return input
        return torch.native_dropout(input, p, True)[0]

    functional.dropout = native
    try:
        yield
    finally:
        functional.dropout = original


# --- predictions -----------------------------------------------------------------------------
def target_setup(target: Target, dtype: str, attn: str, device: str, **options: Any) -> act.Setup:
    """The ``pytorch.saved`` setup of one measured target (``library.activations_pytorch.setup_for``
    reads a config; this also covers article A's network). ``options``: more Setup fields
    (dropout_masks, use_cache; use_cache None follows the config)."""
    options = {k: v for k, v in options.items() if v is not None}
    if target.is_mlp:
        options.pop("use_cache", None)
        return act.Setup(precision=dtype, device=device, **options)
    return act.setup_for(target.config, precision=dtype, attn=attn, device=device, **options)[1]


def seed_predictions(target: Target, values: Mapping[str, int], dtype: str) -> dict[str, int]:
    """The seed formulas at the same point: article A or article B, and Korthikanti."""
    b = act.element_bytes(dtype)
    if target.is_mlp:
        return {"article A": _eval("mlp.activations", {**values, "b": b})}
    out = {"article B": _eval("llm.activations", values)}
    # Korthikanti's table counts 2-byte activations (and 1-byte masks); scaled to this run's
    # element size so that an fp32 run is compared like for like (its masks are then over-counted).
    per_layer = registry.get("act.korthikanti.none").expr * sympy.Rational(b, 2)
    outputs = sum((t.expr for t in registry.get("act.logits.megatron").terms), sympy.Integer(0))
    from ..core.symbols import L

    out["Korthikanti"] = int(_at(L * per_layer + outputs, values))
    return out


def peak_seed_predictions(target: Target, values: Mapping[str, int], dtype: str) -> dict[str, int]:
    """The seed articles' whole-step totals, each with its own parameter formula for N.

    Article A: M = P + G + O + A (``mlp.total``, AdamW, element size b). Article B: M_peak =
    16N + 8BD + M_act + 4BSV (``llm.peak``, fp32 weights and states by construction, D = S).
    """
    if target.is_mlp:
        return {"article A": _eval("mlp.total", {**values, "b": act.element_bytes(dtype)})}
    return {"article B": _eval("llm.peak", {**values, "D": values["S"]})}


def _eval(key: str, values: Mapping[str, int]) -> int:
    f = registry.get(key)
    return int(f.evaluate(f.restrict(values)).total)


def _at(expr: sympy.Expr, values: Mapping[str, int]) -> sympy.Expr:
    from ..core import symbols

    return expr.xreplace({symbols.lookup(k): v for k, v in values.items() if k in {s.name for s in expr.free_symbols}})


def point_values(target: Target, batch: int, seq: int, layers: int) -> dict[str, int]:
    values = symbol_values(target, layers)
    values["B"] = batch
    if not target.is_mlp:
        values["S"] = seq
    return values


# --- the run ---------------------------------------------------------------------------------
def _allocated(device: str) -> int:
    """CUDA bytes still allocated before a point is built (0 on the CPU), after freeing garbage.

    A warm-up matmul in each dtype first makes cuBLAS allocate its workspaces, which the caching
    allocator keeps for the life of the process: they count here, not in the first point's peak.
    """
    if not device.startswith("cuda"):
        return 0
    import gc

    torch = measure.require_torch()
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.ones(64, 64, device=device, dtype=dtype)
        (x @ x).sum().item()
    gc.collect()
    torch.cuda.empty_cache()
    return int(torch.cuda.memory_allocated(device))


def measure_point(target: Target, batch: int, seq: int, layers: int, dtype: str, attn: str, *,
                  device: str = "cpu", peak: bool = True, method: str | None = None, optimizer: str = "adamw",
                  foreach: bool | None = None, use_cache: bool | None = None, masks: str = "",
                  loss: str = "cross-entropy") -> Point:
    """Build, measure and predict one grid point (see ``run`` for the options)."""
    start = time.perf_counter()
    before = _allocated(device)
    setup = target_setup(target, dtype, attn, device, dropout_masks=masks, use_cache=use_cache)
    model = build(target, layers, dtype, attn, device, use_cache=setup.use_cache)
    inputs, loss_fn = inputs_for(target, batch, seq, dtype, device, loss)
    with dropout_masks(setup.masks, device):
        measured = measure.measure(model, inputs, loss_fn, peak=peak, method=method,
                                   optimizer=optimizer_factory(optimizer, foreach), autocast=autocast_dtype(dtype))
    values = point_values(target, batch, seq, layers)
    saved_model = act.saved(target.family, setup, loss=loss)
    evaluation = saved_model.formula.evaluate(saved_model.formula.restrict(values))
    predicted = evaluation.total
    step_model = peakmod.step(target.family, setup, optimizer=optimizer, foreach=foreach, bias=target.bias,
                              tied=target.tied, loss=loss)
    point = Point(
        model=target.name, family=target.family, B=batch, S=seq if not target.is_mlp else 0,
        L=layers if not target.is_mlp else 0, dtype=dtype, attn=attn if not target.is_mlp else "",
        device=device, values=values, params=measured.parameters,
        saved_measured=measured.saved.total_bytes, saved_predicted=int(predicted),
        modules_measured=measured.saved.by_module, modules_predicted=saved_model.by_module(values),
        seeds=seed_predictions(target, values, _weights(dtype)), note=target.note,
        terms_predicted={t.key: int(v) for t, v in evaluation.terms}, optimizer=optimizer,
        foreach=step_model.foreach, use_cache=setup.use_cache, dropout_masks=setup.masks, loss=loss)
    if measured.peak is not None:
        at = {**values, "N": measured.parameters}
        point.peak_measured = measured.peak.peak_bytes - (before if measured.peak.method == "cuda" else 0)
        point.phases_predicted = {k: int(_at(v, at)) for k, v in step_model.phase_exprs().items()}
        point.peak_predicted = int(_at(step_model.peak(), at))
        point.peak_phase = measured.peak.phase
        point.phases_measured = {k: v - (before if measured.peak.method == "cuda" else 0)
                                 for k, v in measured.peak.phases.items() if k in point.phases_predicted}
        point.peak_seeds = peak_seed_predictions(target, values, _weights(dtype))
    point.seconds = time.perf_counter() - start
    return point


def run(name: str, grid: Grid | None = None, *, device: str = "cpu", peak: bool = True,
        overrides: Mapping[str, int] | None = None, method: str | None = None, dropout: str = "config",
        optimizer: str = "adamw", foreach: bool | None = None, use_cache: bool | None = None, masks: str = "",
        loss: str = "cross-entropy") -> list[Point]:
    """Every point of the grid for one model (the MLP ignores S, L and the attention choice).

    ``optimizer`` (adamw, sgd-momentum, sgd) and ``foreach`` (None: PyTorch's default on the
    device); ``use_cache`` (None: the config's, transformers' default true); ``masks``: the
    dropout mask element ("bool", "dtype"; empty: the device's); ``loss``: article A's
    network's loss (cross-entropy or mse).
    """
    grid = grid or Grid()
    target = load_target(name, overrides, dropout)
    if loss != "cross-entropy" and not target.is_mlp:
        raise UserError(f"--loss {loss} applies to article A's network (mlp, mlp-nobias), not {name}")
    points = []
    if target.is_mlp:
        combos = [(bt, 0, 0, dt, "") for dt in grid.dtype for bt in grid.batch]
    else:
        positions = symbol_values(target, min(grid.layers)).get("n_pos")
        if positions is not None and max(grid.seq) > positions:
            raise UserError(f"{name}: sequence length {max(grid.seq)} exceeds its {positions} learned positions")
        combos = [(bt, s, n, dt, at) for dt in grid.dtype for at in grid.attn for n in grid.layers
                  for bt in grid.batch for s in grid.seq]
    for batch, seq, layers, dtype, attn in combos:
        points.append(measure_point(target, batch, seq, layers, dtype, attn or "sdpa", device=device, peak=peak,
                                    method=method, optimizer=optimizer, foreach=foreach, use_cache=use_cache,
                                    masks=masks, loss=loss))
    return points


def environment() -> dict[str, str]:
    """Versions of what was measured with."""
    torch = measure.require_torch()
    out = {"torch": torch.__version__}
    try:
        import transformers

        out["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover
        pass
    return out


def summarize(points: list[Point]) -> dict[str, Any]:
    """Worst and mean absolute errors over the points, ours and the seeds'."""
    def stats(errors: list[float]) -> dict[str, float]:
        absolute = [abs(e) for e in errors]
        return {"max_abs": max(absolute), "mean_abs": sum(absolute) / len(absolute), "min": min(errors),
                "max": max(errors)}

    out: dict[str, Any] = {"points": len(points), "saved": stats([p.saved_error for p in points])}
    for seed in points[0].seeds if points else ():
        out[seed] = stats([p.seed_errors()[seed] for p in points])
    peaks = [p.peak_error for p in points if p.peak_error is not None]
    if peaks:
        out["peak"] = stats(peaks)
        names = sorted({k for p in points for k in p.phase_errors()}, key=peakmod.PHASES.index)
        out["phases"] = {k: stats([p.phase_errors()[k] for p in points if k in p.phase_errors()]) for k in names}
        out["peak_phase_agrees"] = sum(p.predicted_phase == p.peak_phase for p in points if p.peak_measured)
        for seed in points[0].peak_seeds:
            out[f"peak {seed}"] = stats([p.peak_seed_errors()[seed] for p in points])
    out["within_targets"] = (out["saved"]["max_abs"] <= TOLERANCE_SAVED
                             and (not peaks or out["peak"]["max_abs"] <= TOLERANCE_PEAK))
    return out
