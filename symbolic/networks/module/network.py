"""Any ``nn.Module`` as a ``Network`` (issue 29): a ``ModuleSource`` probed, planned as article A's network is.

``module_network(source)`` probes the module (``probe``: parameters in its integer arguments, one
training step's saved and live bytes as polynomials in B and the input sizes), caches the result
(``cache``) and returns a ``ModuleNetwork``: a ``ModelShape`` without a token sequence, planned
with ``activations pytorch`` only, whose saved-tensor model and training step are its own
(``pytorch_saved``, ``pytorch_step``: the planner asks every network, never its kind). Input sizes
other than the batch take their values from the source (``--set SIZE=N``); the plan varies B.

What the step holds (the same phases as ``library.peak_pytorch``, measured by the same rule as
``measured.measure.step_peak``): resident, the weights, their optimizer state and the buffers;
forward, the inputs and the live bytes at the forward's peak (saved tensors, the loss's
transients); backward, the inputs and the live bytes at its peak (saved tensors and gradients in
flight, the parameters' gradients as they accumulate); optimizer, every gradient, the inputs and
AdamW's temporaries (the single-tensor loop's previous + 2 × current parameter on the CPU, one per
parameter with foreach). Mixed precision (bf16-mixed, fp16-mixed) is ``torch.autocast`` over fp32
weights: the forward and the loss probed under autocast's own cast policy (``autocast.py``: the CPU's
for ``--device cpu``, CUDA's otherwise), the weights, gradients and optimizer state fp32. Under
``--recompute full`` the repeated blocks (``checkpoint_blocks``, ``checkpointing``) run under
non-reentrant checkpointing in the probe itself; under ``--fsdp`` the step is probed with each gradient
dropped as it accumulates and ``planning.own_fsdp`` adds FSDP2's terms over the blocks (``fsdp_units``).
LoRA (``--lora-rank``, ``--lora-targets``): peft's adapters injected on the meta-built module (``lora.py``),
the step measured as for full training; the adapters train in ``--adapter-dtype``, the base is frozen.
``--qlora`` (with ``--precision bf16``, or bf16-mixed: peft's prepare_model_for_kbit_training, the rest fp32): the
linears bitsandbytes' NF4 ``Linear4bit`` (``qlora.py``), the frozen base ``library.lora.nf4_base_bytes``. AdamW's step counters count on the CPU (``--device cpu``); on a GPU
they stay in host memory. What is not modelled is refused in one line: frozen embeddings, selective and per-op
recomputation, tensor and pipeline parallelism.

Inference (``inference_terms``): one forward under ``torch.no_grad()`` in eval mode (``inference``):
resident, the weights in ``--weights`` fp32/bf16/fp16 and the buffers; the forward phase, the inputs
and the live bytes at the forward's peak; an encoder-decoder's is generation with its KV caches
(``generation``: the encoder, prompt and last decode step as phases). ``varying`` makes the sizes
``fit`` grows unit · k_size, each unit on the size's stride (``inference.Fit.steps``; 1 in a
generation), so ``Plan.solve`` finds the largest k.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import sympy

from ...core import symbols as symtab
from ...core.errors import UserError
from ...core.symbols import B, N
from ...core.term import Term
from ...formats import table as formats
from ...library import activations_pytorch as act
from ...library import lora as peft_lora
from ...library import peak_pytorch as pypeak
from ...math.extrema import maximum
from ...math.formula import Formula
from ..shape import ModelShape
from . import autocast, cache, checkpointing, flops, generation, inference, probe, qlora
from . import lora as adapters
from .kernels import KERNELS, cuda_kernels
from .source import ModuleError, ModuleSource

FAMILY = "module"  # the saved-tensor model's key (pytorch.saved.module, pytorch.peak.module)
SRC = "torch-meta"
REFUSED = ("{what}: {name} is a torch module probed on the meta device; its step is measured in fp32, bf16, fp16 or "
           "autocast (bf16-mixed, fp16-mixed) training on one device only")


def _version() -> str:
    from ... import __version__

    return f"torch {cache.package_version('torch')}; symbolic {__version__}"


# --- plain data for the cache -------------------------------------------------------------------
def _poly_data(p: probe.Poly) -> list[list[Any]]:
    return [[list(e), str(c)] for e, c in p.coefs]


def _poly(data: Sequence[Any]) -> probe.Poly:
    return probe.Poly(tuple((tuple(int(x) for x in e), cache.fraction(c)) for e, c in data))


def _expr_data(expr: sympy.Expr, names: Sequence[str]) -> list[list[Any]]:
    syms = [sympy.Symbol(n) for n in names]  # plain names: the arguments' symbols carry assumptions
    plain = expr.xreplace({s: sympy.Symbol(s.name) for s in expr.free_symbols})
    if not syms:
        return [[[], str(int(plain))]]
    return [[list(e), str(c)] for e, c in sympy.Poly(plain, *syms).terms()]


def _expr(data: Sequence[Any], syms: Sequence[sympy.Symbol]) -> sympy.Expr:
    out = []
    for exps, coef in data:
        c = cache.fraction(coef)
        out.append(sympy.Rational(c.numerator, c.denominator) * sympy.Mul(*(s**int(k) for s, k in zip(syms, exps))))
    return sympy.Add(*out)


def _params_data(p: probe.Params) -> dict[str, Any]:
    names = list(p.values)
    return {"names": names, "values": p.values, "total": p.total, "tensors": list(p.tensors),
            "matrices": [list(m) for m in p.matrices], "buffers": p.buffers, "unexplained": list(p.unexplained),
            "terms": [_term_data(t, names, p.values) for t in p.terms]}


def _term_data(term: Term, names: Sequence[str], values: Mapping[str, int]) -> dict[str, Any]:
    """A parameter term as cache data; one not polynomial in the arguments (a ViT's (image/patch)²) as its number."""
    try:
        return {"key": term.key, "note": term.note, "expr": _expr_data(term.expr, names)}
    except sympy.PolynomialError:
        count = int(term.expr.xreplace({s: values[s.name] for s in term.expr.free_symbols}))
        return {"key": term.key, "note": term.note or probe.NOTE_MEASURED, "expr": [[[0] * len(names), str(count)]]}


def _params(data: Mapping[str, Any], scope: symtab.SymbolScope) -> probe.Params:
    names = [str(n) for n in data["names"]]
    syms = list(probe.argument_symbols(names, scope).values())
    terms = tuple(Term(str(t["key"]), str(t["key"]), _expr(t["expr"], syms), "params", SRC, note=str(t["note"]))
                  for t in data["terms"])
    return probe.Params(terms, int(data["total"]), tuple(int(x) for x in data["tensors"]),
                        {str(k): int(v) for k, v in data["values"].items()},
                        tuple((str(m[0]), int(m[1]), int(m[2]), int(m[3])) for m in data["matrices"]),
                        int(data["buffers"]), tuple(str(u) for u in data["unexplained"]))


def _fit_data(f: probe.StepFit, buffers: int) -> dict[str, Any]:
    return {"names": list(f.names), "saved": [[m, _poly_data(p)] for m, p in f.saved],
            "forward": [_poly_data(p) for p in f.forward], "backward": [_poly_data(p) for p in f.backward],
            "inputs": _poly_data(f.inputs), "buffers": buffers, "shifted": f.shifted}


def _fit(data: Mapping[str, Any]) -> tuple[probe.StepFit, int]:
    return (probe.StepFit(tuple(str(n) for n in data["names"]), tuple((str(m), _poly(p)) for m, p in data["saved"]),
                          tuple(_poly(p) for p in data["forward"]), tuple(_poly(p) for p in data["backward"]),
                          _poly(data["inputs"]), bool(data.get("shifted", False))), int(data["buffers"]))


def _infer_data(f: inference.Fit, buffers: int) -> dict[str, Any]:
    return {"names": list(f.names), "forward": [_poly_data(p) for p in f.forward], "inputs": _poly_data(f.inputs),
            "steps": list(f.steps), "buffers": buffers, "shifted": f.shifted}


def _infer(data: Mapping[str, Any]) -> tuple[inference.Fit, int]:
    return (inference.Fit(tuple(str(n) for n in data["names"]), tuple(_poly(p) for p in data["forward"]),
                          _poly(data["inputs"]), tuple(int(s) for s in data["steps"]), bool(data["shifted"])),
            int(data["buffers"]))


def _source_key(source: ModuleSource) -> list[Any]:
    inputs = [[i.name, list(i.dims), i.dtype, i.high] for i in source.inputs]
    return [list(source.fingerprint), source.label, dict(source.arguments), inputs, source.loss, _version()]


STRIDE_NOTE = ("; exact where the input sizes are multiples of the network's total stride (32 for a ResNet, the "
               "patch size for a ViT), which keeps every output size a polynomial in them")
SHIFTED_NOTE = ("; fitted at 2, 3 and 4 times the input sizes: at the sizes themselves the forward runs a few "
                "other operators (a ViT at its own image size does not interpolate its position embeddings)")


INFER_NOTE = ("inference: one forward pass under torch.no_grad() in eval mode (weights, buffers, the inputs and "
              "what the forward holds at its peak, measured on the meta device); no generation loop or KV cache")
INFER_REFUSED = ("{what}: {name} is a torch module probed on the meta device; its forward is measured with fp32, bf16 "
                 "or fp16 weights on one device only")
GROWN = "k_size"  # the symbol fit of an input size solves for (``ModuleNetwork.varying``)
AUTOCAST_NOTE = ("; the forward and the loss under torch.autocast({dtype}) with fp32 weights, gradients and optimizer "
                 "state, cast as autocast's {device} policy casts (aten/src/ATen/autocast_mode.cpp){checked}")
QLORA_PRECISIONS = ("bf16", "bf16-mixed")  # QLoRA as loaded in bf16, or prepared for k-bit training under autocast
QLORA_MIXED_NOTE = (" Under bf16-mixed, as peft's prepare_model_for_kbit_training leaves it: every parameter but the NF4 "
                    "weights cast to fp32, the forward under torch.autocast(bfloat16), the 4-bit matmuls in their "
                    "compute dtype bf16.")
AUTOCAST_CHECKED = {"cpu": ", checked against real CPU autocast steps",
                    "cuda": ": derived from PyTorch's source, not measured on a GPU"}


def step_dtypes(precision: str) -> tuple[str, str | None]:
    """The torch dtype a step's weights and inputs are built in, and its autocast dtype (None: pure precision)."""
    if precision.endswith("-mixed") and precision.removesuffix("-mixed") in autocast.DTYPES:
        return "float32", autocast.DTYPES[precision.removesuffix("-mixed")]
    if precision not in probe.DTYPES:
        raise UserError(f"precision {precision}: a torch module's step is probed in fp32, bf16, fp16, bf16-mixed or "
                        "fp16-mixed")
    return probe.DTYPES[precision], None


def autocast_note(precision: str, device: str | None) -> str:
    """What the plan says about a mixed-precision step's casts ("" for a pure precision)."""
    _, dtype = step_dtypes(precision)
    if dtype is None:
        return ""
    policy = "cpu" if device == "cpu" else "cuda"
    return AUTOCAST_NOTE.format(dtype=dtype, device=policy.upper(), checked=AUTOCAST_CHECKED[policy])


# --- the network --------------------------------------------------------------------------------
GRADS_SAID = {False: "the parameters' gradients so far)", True: "no parameter gradient)",
              "blocks": "the root's gradients, no block's: FSDP2 counts those apart)"}


@dataclass(frozen=True)
class ModuleNetwork(ModelShape):
    """A torch module as the planner sees it (see the module docstring)."""

    module_source: Any = field(default=None, compare=False, repr=False)  # the ModuleSource
    probed: Any = field(default=None, compare=False, repr=False)  # probe.Params
    symbols: Any = field(default=None, compare=False, repr=False)  # the arguments' SymbolScope
    from_cache: bool = field(default=False, compare=False)
    varied: Any = field(default=None, compare=False, repr=False)  # (symbol, {size: unit}): sizes fit grows
    _fits: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def total(self) -> int:
        return int(self.probed.total)

    @property
    def scope(self) -> symtab.SymbolScope:
        return self.symbols

    @property
    def active(self) -> int | None:
        return None

    @property
    def layers(self) -> int:
        return 1

    @property
    def layer_kinds(self) -> dict[str, int]:
        return {"module": 1}

    @property
    def pytorch_family(self) -> str | None:
        return FAMILY

    @property
    def own_loss(self) -> str:
        """The module's loss: --loss's, or what its forward returns."""
        return self.module_source.loss or "its forward's"

    def lora_layout(self) -> str:
        """No table family's layer names: a module's LoRA is peft's own adapters on its measured step (``lora.py``)."""
        raise UserError(f"{self.name} is a torch module: its LoRA step is measured with peft's own adapters, not "
                        "planned from a table family's layer names")

    def lora_modules(self, targets: tuple[str, ...]) -> tuple[tuple[str, ...], bool]:
        """The modules peft wraps for ``targets`` in this module (``lora.py``); a module has no peft default."""
        if not targets:
            raise UserError(f"LoRA on {self.name}: peft has no default target_modules for a torch module; give "
                            "--lora-targets NAME[,NAME...] (its modules' names, or all-linear)")
        return self.lora_adapters(adapters.Spec(1, tuple(targets))).modules, False

    def lora_adapters(self, spec: adapters.Spec) -> adapters.Adapters:
        """What peft adds for ``spec`` on the meta-built module (injected once, then cached on disk)."""
        key = ("lora", spec)
        if key not in self._fits:
            source = adapters.adapted(self.module_source, spec)
            data, _ = cache.cached(cache.key("lora", _source_key(source)),
                                   lambda: adapters.adapters_of(probe.build(source)).to_data())
            self._fits[key] = adapters.Adapters.from_data(data)
        return self._fits[key]

    def _lora(self, setup: Any) -> adapters.Spec | None:
        """The setup's LoRA settings (``planning.pytorch`` puts the regime's there), or None."""
        if not getattr(setup, "lora", ()):
            return None
        return self._lora_spec(setup.lora, setup.precision)

    def _lora_spec(self, lora: tuple[Any, ...], precision: str) -> adapters.Spec:
        """The Spec of a regime's (rank, targets, dropout, adapter dtype, qlora), its precision checked for QLoRA."""
        rank, targets, dropout, dtype, nf4 = lora
        if nf4 and precision not in QLORA_PRECISIONS:
            raise UserError(f"qlora with precision {precision}: {self.name}, a torch module, is measured with "
                            "its linears in NF4 and the rest bf16 (as transformers loads it with torch_dtype bfloat16), "
                            "or fp32 under bf16 autocast (peft's prepare_model_for_kbit_training): use --precision bf16 "
                            "or bf16-mixed")
        return adapters.Spec(int(rank), tuple(targets), float(dropout), str(dtype), bool(nf4))

    def sizes(self) -> dict[str, int]:
        """The input sizes' values the plan uses (the source's, with --set's)."""
        return {n: int(v) for n, v in self.module_source.sizes.items()}

    def step_fit(self, dtype: str, device: str | None = None, arch: tuple[int, int] | None = None,
                 mixed: str | None = None, recompute: int = 0, sharded: bool | str = False,
                 lora: adapters.Spec | None = None) -> tuple[probe.StepFit, int, bool]:
        """One step's fitted bytes in ``dtype`` (probed once, then cached on disk), its buffers' bytes, from cache.

        ``device`` "cpu" or "cuda": attention as that device's kernels run it (``kernels.py``, ``cuda_attention.py``:
        a GPU of compute capability ``arch``, sm90 when None); else the reference path. ``mixed``: the autocast
        dtype of a mixed-precision step ("bfloat16", "float16"; ``dtype`` then float32), its own cache entry.
        ``recompute`` N > 0: every N-th of ``checkpoint_blocks`` checkpointed (``--recompute full``,
        ``--recompute-every N``); ``sharded``: the parameters' gradients dropped as they accumulate, or (``"blocks"``,
        ``--fsdp``) the repeated blocks' only (FSDP2's own terms count theirs; the root keeps its to the end). ``lora``: a LoRA step, peft's adapters on the frozen module
        (``lora.adapted``: its own cache entry).
        """
        kernels = device if device in KERNELS else None
        if kernels == "cuda":  # the cache key holds the arch where it is not sm90 ("cuda-sm89")
            kernels = cuda_kernels(arch)
        if (dtype, kernels, mixed, recompute, sharded, lora) not in self._fits:
            source = self.module_source if lora is None else adapters.adapted(self.module_source, lora)
            blocks = self.checkpointed(recompute)  # peft wraps layers inside the blocks: their names stay

            def make() -> dict[str, Any]:
                freed = self.checkpoint_blocks if sharded == "blocks" else bool(sharded)
                fit = probe.fit_step(source, dtype, kernels, mixed, blocks, freed)
                module = probe.build(source, dtype=dtype)
                return _fit_data(fit, sum(int(b.untyped_storage().nbytes()) for b in module.buffers()))

            parts = ((dtype,) if kernels is None else (dtype, kernels)) + ((f"autocast-{mixed}",) if mixed else ())
            if blocks:  # the key of before, without checkpointing
                parts = (*parts, "checkpointed", list(blocks))
            if sharded:
                parts = (*parts, "block-gradients-freed" if sharded == "blocks" else "gradients-freed")
            name = cache.key("step", _source_key(source), dict(source.sizes), *parts)
            data, hit = cache.cached(name, make)
            self._fits[(dtype, kernels, mixed, recompute, sharded, lora)] = (*_fit(data), hit)
        return self._fits[(dtype, kernels, mixed, recompute, sharded, lora)]

    @property
    def checkpoint_blocks(self) -> tuple[str, ...]:
        """The repeated blocks ``--recompute full`` checkpoints (``checkpointing.repeated``; found once, cached)."""
        return self._blocks()[0]

    @property
    def fsdp_units(self) -> tuple[int, ...]:
        """The parameters of each ``fully_shard`` unit below the root: the blocks of ``checkpoint_blocks``."""
        return self._blocks()[1]

    @property
    def fsdp_root_last(self) -> int:
        """The elements of the root unit's last parameter (``foreach_reduce``'s loop keeps its gradient)."""
        return self._blocks()[2]

    def _blocks(self) -> tuple[tuple[str, ...], tuple[int, ...], int]:
        """The repeated blocks and their parameter counts (found once on the meta-built module, cached on disk)."""
        if "blocks" not in self._fits:
            source = self.module_source

            def make() -> dict[str, Any]:
                module = probe.build(source)
                blocks = (checkpointing.named(module, source.checkpoint) if source.checkpoint
                          else checkpointing.repeated(module))
                return {"blocks": list(blocks), "units": list(checkpointing.units(module, blocks)),
                        "last": checkpointing.root_last(module, blocks)}

            data, _ = cache.cached(cache.key("repeated-units", _source_key(source), list(source.checkpoint)), make)
            self._fits["blocks"] = (tuple(str(b) for b in data["blocks"]), tuple(int(u) for u in data["units"]),
                                    int(data["last"]))
        return self._fits["blocks"]

    def checkpointed(self, recompute: int) -> tuple[str, ...]:
        """The blocks checkpointed with every ``recompute``-th one wrapped (0: none)."""
        return checkpointing.every(self.checkpoint_blocks, recompute) if recompute else ()

    def checkpoint_note(self, recompute: int) -> str:
        """What ``--recompute full`` checkpointed, in a sentence ("" without it)."""
        if not recompute:
            return ""
        blocks = self.checkpointed(recompute)
        shown = ", ".join(blocks) if len(blocks) <= 4 else f"{blocks[0]}, {blocks[1]}, ..., {blocks[-1]}"
        which = "every block" if recompute == 1 else f"every {recompute}-th block (positions {recompute}, " \
                f"{2 * recompute}, ...)"
        stack = "the modules named with --checkpoint-modules" if self.module_source.checkpoint else "the repeated stack"
        return (f"recompute full: {which} of {stack} checkpointed, {len(blocks)} of "
                f"{len(self.checkpoint_blocks)} ({shown}), each under torch.utils.checkpoint(use_reentrant=False) as "
                "timm, diffusers and transformers checkpoint theirs: its inputs saved, its inside rebuilt in backward "
                "(measured on the meta device)")

    def flop_fit(self, dtype: str, lora: adapters.Spec | None = None) -> flops.FlopFit:
        """One step's FLOPs per module in ``dtype`` (counted once, then cached on disk beside the step's bytes).

        ``lora``: the step with peft's adapters on the frozen module (``lora.adapted``), as autograd runs it."""
        key = f"flops.{dtype}" if lora is None else f"flops.{dtype}.{lora.key()!r}"
        if key not in self._fits:
            source = self.module_source if lora is None else adapters.adapted(self.module_source, lora)
            name = cache.key("flops", _source_key(source), dict(source.sizes), dtype)
            data, _ = cache.cached(name, lambda: flops.to_data(flops.fit(source, dtype)))
            self._fits[key] = flops.from_data(data)
        return self._fits[key]

    def own_flops(self, batch: int, precision: str, recompute: int = 0, lora: tuple[Any, ...] = ()) -> flops.OwnFlops:
        """FLOPs per sample, per module, counted on the meta device (``module.flops``); what ``time`` reads.

        ``recompute`` N > 0: every N-th repeated block checkpointed, its forward counted again. ``lora``: the
        regime's (rank, targets, dropout, adapter dtype, qlora), the step with peft's adapters (none: full training;
        QLoRA counted as LoRA: the same matmuls on the dequantized weights)."""
        dtype, mixed = step_dtypes(precision)  # under autocast the matmuls run in its 16-bit dtype
        spec = self._lora_spec(lora, precision) if lora else None
        if spec is not None and spec.qlora:  # bitsandbytes' gemm_4bit, a custom op FlopCounterMode does not see,
            spec = replace(spec, qlora=False)  # runs the 16-bit matmul's multiply-adds on the dequantized weight
        result = self.flop_fit(mixed or dtype, spec)
        return flops.own_flops(self.name, result, self.sizes(), batch, self.checkpointed(recompute))

    def _at(self, poly: probe.Poly, names: Sequence[str]) -> sympy.Expr:
        return poly.expr([B, *(self._size(n) for n in names)])

    def _size(self, name: str) -> sympy.Expr:
        """An input size as the plan has it: its value, or unit · the grown symbol (``varying``)."""
        if self.varied and name in self.varied[1]:
            return self.varied[1][name] * self.varied[0]
        return sympy.Integer(self.sizes()[name])

    # --- inference: one forward under torch.no_grad() ----------------------------------------------
    @property
    def forward_inference(self) -> bool:
        return True

    @property
    def generates(self) -> bool:
        """An encoder-decoder served by generating (``generation.generates``): --beams and --sample apply."""
        return generation.generates(self.module_source)

    @property
    def input_sizes(self) -> tuple[str, ...]:
        """The forward's input size names besides the batch (what ``fit`` may grow)."""
        return tuple(self.module_source.size_names)

    def infer_fit(self, dtype: str, device: str | None = None) -> tuple[inference.Fit, int, bool]:
        """The forward's fitted bytes in ``dtype`` (probed once, then cached on disk), its buffers' bytes, from cache.

        ``device`` "cpu" or "cuda": attention as that device's kernels run it (as ``step_fit``); else the
        reference path (the cache key of before the kernels, keeping its meaning).
        """
        kernels = device if device in KERNELS else None
        name = f"infer:{dtype}" if kernels is None else f"infer:{dtype}:{kernels}"
        if name not in self._fits:
            source = self.module_source

            def make() -> dict[str, Any]:
                fit = inference.fit(source, dtype, kernels)
                module = inference.build(source, dtype)
                return _infer_data(fit, sum(int(b.untyped_storage().nbytes()) for b in module.buffers()))

            parts = (dtype,) if kernels is None else (dtype, kernels)
            data, hit = cache.cached(cache.key("infer", _source_key(source), dict(source.sizes), *parts), make)
            self._fits[name] = (*_infer(data), hit)
        return self._fits[name]

    def inference_terms(self, regime: Any) -> tuple[list[Term], dict[str, tuple[Term, ...]], list[str]]:
        """Weights, buffers, and the forward's phase: the inputs and the live bytes at its peak (fitted in B)."""
        if regime.weights not in probe.DTYPES:
            raise UserError(INFER_REFUSED.format(what=f"weights {regime.weights}", name=self.name))
        split = [f"{k} {v}" for k, v in (("tp", regime.tp), ("pp", regime.pp), ("ep", regime.ep)) if v > 1]
        if split or regime.prefill_chunk:
            raise UserError(INFER_REFUSED.format(what=", ".join(split) or "prefill-chunk", name=self.name))
        if generation.generates(self.module_source):  # an encoder-decoder: generation with its KV caches
            return self._generation_terms(regime)
        fit, buffers, _ = self.infer_fit(probe.DTYPES[regime.weights], regime.device)
        tb = formats.nbytes(regime.weights)
        where = f"inference.{FAMILY}"

        def term(key: str, title: str, expr: sympy.Expr, note: str = "") -> Term:
            return Term(key, title, sympy.sympify(expr), "bytes", SRC, where, note)

        resident = [term("weights", f"weights ({regime.weights})", tb * N)]
        if buffers:
            resident.append(term("buffers", "the module's buffers (running statistics)", sympy.Integer(buffers)))
        live = maximum(*(self._at(p, fit.names) for p in fit.forward))
        forward = (term("inputs", "the forward's inputs", self._at(fit.inputs, fit.names)),
                   term("forward_live", "what the forward holds at its peak (intermediates and its output)", live,
                        "Live bytes after every operator of one forward under torch.no_grad() on the meta device, "
                        "fitted in B and the input sizes."))
        note = (STRIDE_NOTE if fit.names else "") + (SHIFTED_NOTE if fit.shifted else "")
        return resident, {"forward": forward}, [f"inference: the forward fitted in B and the input sizes{note}"] if note else []

    def generate_fit(self, dtype: str, device: str | None = None, beams: int = 1,
                     sample: bool = False) -> generation.GenerationFit:
        """An encoder-decoder's generation fitted in ``dtype`` (``generation.fit``; probed once, then cached on disk)."""
        kernels = device if device in KERNELS else None
        decoding = generation.decoding_key(beams, sample)  # () for greedy: its cache keys as before
        name = f"generate:{dtype}:{kernels}" + "".join(f":{d}" for d in decoding)
        if name not in self._fits:
            source = self.module_source
            key = cache.key("generate", _source_key(source), dict(source.sizes), dtype, kernels, *decoding)
            data, _ = cache.cached(key, lambda: generation.to_data(generation.fit(source, dtype, kernels, beams,
                                                                                  sample)))
            self._fits[name] = generation.from_data(data)
        return self._fits[name]

    def _generation_terms(self, regime: Any) -> tuple[list[Term], dict[str, tuple[Term, ...]], list[str]]:
        """Weights, and the generation's phases: the encoder pass, the prompt's pass, the last decode step."""
        if "kv_dtype" not in regime.defaulted and regime.kv_dtype != regime.weights:
            raise UserError(f"kv-dtype {regime.kv_dtype}: {self.name} generates with transformers' DynamicCache, "
                            f"which keeps K and V in the weights' dtype ({regime.weights})")
        positions = generation.decoder_positions(self.module_source)
        grown = self.varied is not None and "T" in self.varied[1]
        steps = int(self.varied[1]["T"] * self.numbers[GROWN]) if grown else self.sizes()["T"]
        if positions and steps > positions:
            fits = f" (fit: every T up to {positions} fits)" if grown else ""
            raise UserError(f"T {steps}: {self.name}'s decoder has {positions} learned positions{fits}")
        result = self.generate_fit(probe.DTYPES[regime.weights], regime.device, regime.beams, regime.sample)
        weights = Term("weights", f"weights ({regime.weights})", formats.nbytes(regime.weights) * N, "bytes", SRC,
                       f"inference.{FAMILY}")
        resident = [weights]
        if result.buffers:
            resident.append(Term("buffers", "the model's buffers", sympy.Integer(result.buffers), "bytes", SRC,
                                 f"inference.{FAMILY}"))
        phases = generation.phases(result, lambda p: self._at(p, result.names))
        return resident, phases, [generation.note(self.sizes(), regime.beams, regime.sample)]

    def varying(self, names: tuple[str, ...], regime: Any) -> tuple[ModuleNetwork, str, dict[str, int]]:
        """This network with input sizes ``names`` grown together by one symbol in steps that keep their ratio.

        Each size moves in multiples of its step (``inference.Fit.steps``: a strided network's total
        stride); the unit of size i is value_i / g, g the gcd of value_i / step_i, so the ratio
        holds exactly and every size stays on its stride. Returns the network (the symbol at g),
        the symbol's name and each size's unit.
        """
        unknown = [n for n in names if n not in self.input_sizes]
        if unknown or not names:
            have = ", ".join(self.input_sizes) or "none"
            raise UserError(f"{self.name}: no input size {', '.join(unknown) or '(none named)'} to grow (its input "
                            f"sizes: {have}; name them with --vary NAME[,NAME])")
        dtype = regime.weights if not regime.train else regime.precision
        if generation.generates(self.module_source) and not regime.train:  # exact at every S and T
            steps = dict.fromkeys(self.input_sizes, 1)
        else:
            fit, _, _ = self.infer_fit(probe.DTYPES.get(dtype, "float32"), regime.device)
            steps = dict(zip(fit.names, fit.steps))
        values = self.sizes()
        g = math.gcd(*(values[n] // steps[n] for n in names))
        units = {n: values[n] // g for n in names}
        symbol = self.scope.info(GROWN).symbol if GROWN in self.scope else self.scope.declare(
            GROWN, r"k_{\mathrm{size}}", "steps of the input sizes fit grows (each size = its unit · k_size)", "count")
        grown = replace(self, numbers={**self.numbers, GROWN: g}, varied=(symbol, {n: sympy.Integer(u)
                                                                                   for n, u in units.items()}))
        return grown, GROWN, units

    def pytorch_saved(self, setup: Any, refused: Sequence[str] = (), recompute: int = 0,
                      sharded: bool | str = False) -> Any:
        """The saved-tensor model: one term per module that saves (the loss's as ``loss.``), in B.

        ``recompute`` N > 0: every N-th repeated block checkpointed (``checkpoint_blocks``); ``sharded``: as
        ``step_fit`` (the same saved tensors, from the fit the step reads)."""
        self._refuse(setup, refused)
        spec = self._lora(setup)
        fit, _, _ = self.step_fit(*self._step_dtype(setup), recompute=recompute, sharded=sharded, lora=spec)
        terms, saved_by = [], {}
        for name, poly in fit.saved:
            key = "loss.outside" if name == probe.TOP else name
            terms.append(Term(key, f"saved by {name}" if name != probe.TOP else "saved by the loss (outside the module)",
                              self._at(poly, fit.names), "bytes", SRC, f"saved by {name}"))
            saved_by[key] = name
        if not terms:
            terms.append(Term("nothing", "nothing saved", sympy.Integer(0), "bytes", SRC))
            saved_by["nothing"] = ""
        formula = Formula(f"pytorch.saved.{FAMILY}", f"Bytes saved for backward by one training step of {self.name} "
                          f"({setup.precision}{', LoRA' if spec else ''})", terms, source=SRC, name="A_saved",
                          note="Measured on the meta device with saved_tensors_hooks at several batch sizes and input "
                               "sizes, fitted exactly and checked at a further point (symbolic/networks/module)"
                               + autocast_note(setup.precision, setup.device).replace(";", ",", 1) + ".")
        return ModuleSaved(FAMILY, setup, formula, saved_by, self.checkpoint_note(recompute))

    def _step_dtype(self, setup: Any) -> tuple[str, str | None, tuple[int, int] | None, str | None]:
        """``step_fit``'s arguments for a setup: the weights' dtype, the device, its arch, the autocast dtype."""
        dtype, mixed = step_dtypes(setup.precision)
        return dtype, setup.device, setup.cuda_arch, mixed

    def _refuse(self, setup: Any, refused: Sequence[str]) -> None:
        if getattr(setup, "lora", ()):  # LoRA with its settings in the setup: measured (``lora.py``)
            refused = [r for r in refused if r != "LoRA"]
        if refused:
            raise UserError(REFUSED.format(what=", ".join(refused), name=self.name))

    def pytorch_step(self, setup: Any, saved: Any, *, optimizer: str, accumulate: int = 1,
                     in_backward: bool = False, recompute: int = 0, sharded: bool | str = False) -> Any:
        """The training step's phases (contract S) from the fitted live bytes (see the module docstring);
        ``sharded``: backward without the parameters' gradients, or (``"blocks"``) the blocks' (``own_fsdp``)."""
        spec = self._lora(setup)
        if spec is not None and sharded:
            raise UserError(f"LoRA with --fsdp is not modelled for {self.name}, a torch module (FSDP2 would shard the "
                            "frozen base and the adapters apart): plan LoRA without --fsdp")
        fit, buffers, _ = self.step_fit(*self._step_dtype(setup), recompute=recompute, sharded=sharded, lora=spec)
        tb = setup.param_bytes  # fp32 under autocast: the weights, their gradients and optimizer state
        foreach = setup.device == "cuda"
        where = f"pytorch.step.{FAMILY}"

        def term(key: str, title: str, expr: sympy.Expr, note: str = "") -> Term:
            return Term(key, title, sympy.sympify(expr), "bytes", SRC, where, note)

        weights_note = ("fp32 weights under autocast (their 16-bit copies are the forward's)." if setup.mixed else
                        "Parameters in the compute dtype.")
        if spec is None:
            trained, tensors, lora_note = N, self.probed.tensors, ""
            resident = [term("weights", "trainable weights", tb * N, weights_note)]
        else:  # LoRA: the adapters train, in their own dtype; the base is frozen (no gradient, no optimizer state)
            found = self.lora_adapters(spec)
            trained, tensors, lora_note = sympy.Integer(found.total), found.tensors, self._lora_note(spec, found)
            tb = spec.element_bytes
            resident = [term("weights", f"trainable weights: the LoRA adapters ({spec.dtype})", tb * trained,
                             f"peft's lora_A and lora_B on {len(found.modules)} modules, {found.total:,} parameters."),
                        self._frozen(spec, found, setup.param_bytes, weights_note, term)]
        if buffers:
            resident.append(term("buffers", "the module's buffers (running statistics)", sympy.Integer(buffers)))
        if optimizer == "adamw":
            resident.append(term("optimizer_state", "AdamW moments exp_avg and exp_avg_sq", 2 * tb * trained))
            if setup.device == "cpu":  # on a GPU the counters stay in host memory (step_counters_term)
                resident.append(pypeak.step_counters_term(len(tensors), where))
        elif optimizer == "sgd-momentum":
            resident.append(term("optimizer_state", "SGD momentum buffers", tb * trained))
        inputs = self._at(fit.inputs, fit.names)
        saved_expr = saved.formula.expr
        forward = maximum(*(self._at(p, fit.names) for p in fit.forward))
        backward = maximum(*(self._at(p, fit.names) for p in fit.backward))
        sizes = [sympy.Integer(n) for n in tensors]
        if optimizer == "adamw" and sizes:
            temporaries = tb * (trained if foreach else pypeak.adamw_cpu_temporaries(sizes))
        else:
            temporaries = sympy.Integer(0)
        phases = {
            "forward": (term("saved", "tensors saved for backward (A_saved)", saved_expr),
                        term("forward_transients", "the inputs and what the forward and the loss hold besides the saved "
                             "tensors at the forward's peak", inputs + forward - saved_expr,
                             "Live bytes after every operator on the meta device, fitted in B and the input sizes.")),
            "backward": (term("backward_live", "the inputs and everything alive at backward's peak (saved tensors, "
                              "gradients in flight, " + GRADS_SAID[sharded], inputs + backward,
                              "Live bytes after every operator of backward on the meta device."),),
            "optimizer": (term("gradients", "gradients of the trainable weights", tb * trained),
                          term("optimizer_temporaries", "the optimizer step's temporaries", temporaries,
                               "AdamW single-tensor loop (CPU): previous + 2 × current parameter; foreach (CUDA): one "
                               "per parameter." if optimizer == "adamw" else "in place: none"),
                          term("inputs", "the step's inputs, still held by the caller", inputs)),
        }
        if accumulate > 1 or in_backward:
            per = 1 if foreach else 2
            largest = max(tensors) if tensors else 0
            moment = tb * largest * (1 + (per if optimizer == "adamw" else 0)) + inputs
            phases = pypeak.lifetime_phases(phases, accumulate, in_backward, maximum(inputs + backward, moment))
        return ModuleStep(FAMILY, setup, saved, tuple(resident), phases, optimizer, foreach, False, False, "module",
                          (STRIDE_NOTE if fit.names else "") + (SHIFTED_NOTE if fit.shifted else "")
                          + autocast_note(setup.precision, setup.device) + lora_note)

    def _frozen(self, spec: adapters.Spec, found: adapters.Adapters, nbytes: int, note: str, term: Any) -> Term:
        """The frozen base: the weights in the step's dtype, or under QLoRA its linears in NF4 and the rest bf16."""
        if not spec.qlora:
            return term("frozen_weights", "frozen weights (no gradient, no optimizer state)", nbytes * N, note)
        return term("frozen_weights", f"frozen base: {len(found.quantized)} linears in NF4 (blockwise absmax per "
                    f"{qlora.BLOCK}, double quantization), their biases bf16, the rest {'fp32' if nbytes == 4 else 'bf16'}",
                    peft_lora.nf4_base_bytes([(1, n) for n in found.quantized], N - found.biases,
                                             sympy.Integer(nbytes)) + 2 * found.biases,
                    "bitsandbytes' Linear4bit (quant_type nf4, bnb_4bit_use_double_quant, compute dtype bf16): every "
                    "nn.Linear but a transformers model's skipped modules (transformers' replace_with_bnb_linear)."
                    + (QLORA_MIXED_NOTE if nbytes == 4 else ""))

    def _lora_note(self, spec: adapters.Spec, found: adapters.Adapters) -> str:
        """What the step says about its adapters: trainable against frozen parameters."""
        drop = f", lora_dropout {spec.dropout:g}" if spec.dropout else ""
        count = f"{len(found.modules)} module" + ("s" if len(found.modules) != 1 else "")
        base = (f"frozen, {len(found.quantized)} linears of them in NF4 (QLoRA: bitsandbytes' Linear4bit, its "
                "dequantized bf16 weight a transient of each matmul)" if spec.qlora else "frozen")
        return (f"; LoRA rank {spec.rank} on {count} ({', '.join(spec.targets)}{drop}), injected "
                f"with peft on the meta device: {found.total:,} trainable parameters ({spec.dtype}), {self.total:,} "
                + base)

    def layer_activations(self, variant: Any, recompute: str, tp: sympy.Expr | int, sp: bool) -> sympy.Expr:
        raise UserError(f"{self.name} is planned with activations pytorch only (its saved tensors are measured)")

    def activations_label(self, variant: Any) -> str:
        return "what the module saves for backward, measured"

    def params_table(self) -> list[tuple[str, sympy.Expr, int, str]]:
        """(group, formula, count, note) per parameter group: what ``symbolic params`` prints."""
        values = {s: self.numbers[s.name] for t in self.probed.terms for s in t.expr.free_symbols}
        return [(t.key, t.expr, int(t.expr.xreplace(values)), t.note) for t in self.probed.terms]

    def saved_formula(self, precision: str = "fp32") -> sympy.Expr:
        """The bytes saved for backward as a polynomial in B and the input sizes (their own symbols)."""
        dtype, mixed = step_dtypes(precision)
        fit, _, _ = self.step_fit(dtype, mixed=mixed)
        return fit.saved_total().expr([B, *(sympy.Symbol(n, positive=True, integer=True) for n in fit.names)])


@dataclass(frozen=True)
class ModuleSaved(act.SavedModel):
    """A module's saved-tensor model: ``activations_pytorch.SavedModel`` with what it checkpointed, in a sentence."""

    note: str = ""


@dataclass(frozen=True)
class ModuleStep(pypeak.StepModel):
    """A module's training step: ``library.peak_pytorch.StepModel`` with its own ``formula``."""

    fit_note: str = ""  # what the probe's fit says about its input sizes (STRIDE_NOTE, SHIFTED_NOTE)

    def formula(self) -> Formula:
        """``pytorch.peak.module``: the resident terms and the largest phase's own."""
        phase = Term("phase", "the largest phase: " + " | ".join(
            f"{n}: " + " + ".join(t.key for t in ts) for n, ts in self.phases.items()),
            maximum(*self.phase_extras().values()), "bytes", SRC, "peak",
            "the module's step: forward and backward measured on the meta device; the optimizer's temporaries as "
            "PyTorch's " + self.optimizer + (" foreach" if self.foreach else " single-tensor loop") + " keeps them"
            + self.fit_note)
        return Formula(f"pytorch.peak.{FAMILY}", "Peak memory of one training step of a torch module",
                       (*self.resident, phase), source=SRC, name="M_peak")


def module_network(source: ModuleSource) -> ModuleNetwork:
    """The Network of a module source: parameters probed (or read from the cache) on the meta device."""
    scope = symtab.SymbolScope()
    name = cache.key("params", _source_key(source))
    data, hit = cache.cached(name, lambda: _params_data(probe.parameters(source, scope)))
    params = _params(data, scope)
    numbers = dict(params.values)
    if not params.terms:
        raise ModuleError(f"{source.label} has no parameters: there is nothing to train")
    formula = Formula("module.params", f"Parameters of {source.label}", params.terms, source=SRC, name="N",
                      note="Probed on the meta device from the constructor's integer arguments.")
    matrices = tuple((m, sympy.Integer(r), sympy.Integer(c), sympy.Integer(n)) for m, r, c, n in params.matrices)
    one = sympy.Integer(1)
    return ModuleNetwork(
        name=source.label, model_type="module", numbers=numbers, params=formula, head_dim=one, kv_heads=one,
        ffn=one, gated=False, moe=False, first_stage=sympy.Integer(0), head=sympy.Integer(0), matrices=matrices,
        positions=0, source=f"{source.origin}: {source.label}, probed on the meta device", cache_kinds=(),
        config={"model_type": "module"}, kind="module", label=f"the torch module {source.label}", sequence=False,
        has_attention=False, tensor_parallel=False, saved_family=FAMILY,
        cannot_say={"serving": generation.GENERATE_NOTE if generation.generates(source) else INFER_NOTE},
        module_source=source, probed=params, symbols=scope, from_cache=hit)
