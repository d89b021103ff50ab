"""What one PyTorch training step keeps alive, phase by phase, and its peak, as terms (contract S).

The step is ``zero_grad(set_to_none=True)``; ``loss = loss_fn(model(x))`` (under ``torch.autocast``
for "bf16-mixed"/"fp16-mixed"); ``loss.backward()``; ``opt.step()``, in the steady state (step 2
onwards, when the optimizer's state exists). ``step(...)`` returns a ``StepModel``: ``resident``
terms alive the whole step (the trainable weights, fp32 under autocast; frozen weights; AdamW's
two moments or SGD's momentum buffer, in the weights' dtype) and, per phase, what is alive at
that phase's peak moment besides them. Measured on the CPU with ``symbolic.measured.measure.step_peak``,
which reads the live bytes at every operator and keeps each phase's peak:

- ``forward``: everything saved for backward (``A_saved``, which includes the input ids or x)
  plus the loss's inputs at the moment ``log_softmax`` writes its output: the logits, their
  fp32 copy, the padded labels; under autocast the fp32 last hidden state the model's output
  still holds and autocast's cached 16-bit copies no matmul keeps (biases); with the KV cache
  the copies attention does not keep. Article A's network under autocast peaks earlier, at its
  softmax (before the loss keeps anything), with the fp32 input and the fp32 residual sum.
- ``backward``: the larger of two moments. At the start, inside the loss's backward, autograd
  has freed nothing and the loss's fp32 gradients of ``nll_loss`` and ``log_softmax`` are the
  largest buffers: A_saved + 8·B·S·V (article A's network: two B·n_out tensors in the compute
  dtype). At the end, every gradient exists and the saved tensors are gone: the gradients, the
  inputs and, with a tied embedding, its own gradient beside the head's (buffered until then)
  and their sum, 2·V·H·b more. Article A's network has two more candidate moments, measured:
  at ``up``'s weight gradient (three B·d_h gradients in flight) and at ``gat``'s, where under
  autocast the 16-bit gradient of a weight copy sits beside its fp32 cast.
- ``optimizer``: every gradient, the inputs the caller still holds, and the optimizer's
  temporaries. PyTorch's default AdamW on the CPU is the single-tensor loop: its
  ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` holds two temporaries the
  size of the parameter being updated while the previous parameter's ``denom`` is still alive:
  max over consecutive parameters of (previous + 2 · current) elements, in ``named_parameters()``
  order. The ``foreach`` implementation (CUDA's default; ``foreach=True`` on the CPU) makes one
  temporary per parameter at once with ``_foreach_sqrt``: T·b. SGD, with or without momentum,
  works in place (``mul_``/``add_``, ``_foreach_mul_``/``_foreach_add_``): none.

The peak is the largest phase: ``StepModel.peak()`` = ``maximum(*phase_exprs().values())``.

With the blocks and the loss compiled (``Setup.compile`` and ``compile_loss``), forward holds the saved tensors
only and backward's first moments are the compiled loss's and the LM head's (``library.compiled_step``, measured
with inductor); the rest is as above.

GPT-2 (fp32 and 16 bit, not under autocast) has a third candidate moment in backward, just
after the LM head, inside the last layer's gelu backward (``_head_moment``): the saved tensors
less the loss's, the head's, ln_f's and that layer's c_proj input and dropout mask, beside the
head's V·H gradient, ln_f's and c_proj's gradients and four in-flight tensors (B·S·H + 3·B·S·d_ff).
It leads when B·S is small beside H and the saved tensors exceed the weights (the tests' tiny
GPT-2 at B = 1, S = 32: 1.8 % above the other two, measured to 8 bytes). Not modelled: the same
moment for Llama and under autocast. AdamW's per-parameter step counters (4 bytes each) count on the CPU only
(``step_counters_term``: without ``capturable`` or ``fused`` they are CPU tensors, host memory beside a GPU
step). Not counted: the loss scalar, and on CUDA the allocator's rounding to 512-byte blocks and its
workspaces (cuBLAS, attention kernels), which ``torch.cuda.max_memory_allocated`` includes
(``library/runtime.py`` has them as terms of their own).

The maxima are built by ``extrema.maximum``, not ``sympy.Max``: SymPy compares every pair of
arguments through its assumption system (about 110 ms at import for the registered formulas),
where for these polynomials in nonnegative symbols ``maximum`` makes the same proofs from the
coefficients of each difference (about 10 ms); the expressions are identical
(``tests/test_activations_pytorch.py`` checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import sympy

from ..core.errors import UnknownNameError
from ..core.symbols import B, H, L, N, S, V, a, a_kv, d_ff, d_h, d_head, d_in, n_out, n_pos
from ..core.term import Term
from ..math.extrema import maximum
from ..math.formula import Formula
from . import activations_pytorch as act
from . import compiled_step
from .registry import register

SRC = "pytorch"


@dataclass(frozen=True)
class PeakModel:
    """The peak formula of one family and setup, its saved-tensor model and its two phases."""

    saved: act.SavedModel
    formula: Formula
    tied: bool
    backward: sympy.Expr
    optimizer: sympy.Expr

    def phases(self) -> dict[str, sympy.Expr]:
        """The two candidate peaks as whole-step totals: early backward and the optimizer step."""
        base = sympy.Add(*(t.expr for t in self.formula.terms if t.key != "phase"))  # the resident terms
        return {"backward": base + self.backward, "optimizer": base + self.optimizer}


def _tensor_groups(family: str, bias: bool, tied: bool) -> tuple[list[sympy.Expr], list[sympy.Expr], list[sympy.Expr]]:
    """Elements of the parameter tensors before the repeated layers, of one layer, and after them."""
    if family == "mlp":
        weights = [d_in * d_h, d_h**2, d_h * d_in, d_in * n_out]
        biases = [d_h, d_h, d_in, n_out]
        return [x for w, c in zip(weights, biases) for x in ((w, c) if bias else (w,))], [], []
    if family == "gpt2":
        layer = [H, H, 3 * H**2, 3 * H, H**2, H, H, H, H * d_ff, d_ff, d_ff * H, H]
        return [V * H, n_pos * H], layer, [H, H]
    q, kv = a * d_head, a_kv * d_head
    attn = [q * H, q, kv * H, kv, kv * H, kv] if bias else [q * H, kv * H, kv * H]
    return [V * H], [*attn, H * q, H * d_ff, H * d_ff, d_ff * H, H, H], [H, *([] if tied else [V * H])]


def parameter_tensors(family: str, *, bias: bool = True, tied: bool = True) -> list[sympy.Expr]:
    """Elements of each parameter tensor in ``named_parameters()`` order, one layer as repeated: the layer
    listed twice (every pair of neighbours, which ``adamw_cpu_temporaries`` needs), not L times
    (``parameter_tensor_count`` counts them all).

    ``bias``: the MLP's ``nn.Linear`` biases, or Llama-family q/k/v projection biases (Qwen2).
    """
    before, layer, after = _tensor_groups(family, bias, tied)
    return [*before, *layer, *layer, *after]


def parameter_tensor_count(family: str, *, bias: bool = True, tied: bool = True) -> sympy.Expr:
    """How many parameter tensors ``named_parameters()`` yields: every one of the L layers'."""
    before, layer, after = _tensor_groups(family, bias, tied)
    return len(before) + L * len(layer) + len(after)


ADAMW_STEP_BYTES = 4  # torch/optim/adam.py _init_group: torch.tensor(0.0, dtype=_get_scalar_dtype()), float32 0-dim


def adamw_step_counters(tensors: sympy.Expr | int) -> sympy.Expr:
    """Bytes of AdamW's per-parameter ``state["step"]``: one float32 0-dim tensor per trainable tensor.

    Without ``capturable`` or ``fused`` (torch 2.13's defaults) they live on the CPU whatever the
    parameters' device: host memory on a GPU, the step's own memory on the CPU."""
    return ADAMW_STEP_BYTES * sympy.sympify(tensors)


def step_counters_term(tensors: sympy.Expr | int, where: str) -> Term:
    """AdamW's step counters on the CPU (``adamw_step_counters``); a GPU step leaves them in host memory."""
    return _term("optimizer_steps", "AdamW's step counters: a float32 0-dim tensor per trainable tensor",
                 adamw_step_counters(tensors), where,
                 "torch/optim/adam.py _init_group: torch.tensor(0.0) per parameter without capturable or fused "
                 "(torch 2.13's defaults, foreach or not): on the CPU, so a CPU step holds them and a GPU step "
                 "does not (its plan leaves them out: host memory).")


def adamw_cpu_temporaries(sizes: Sequence[sympy.Expr]) -> sympy.Expr:
    """Elements alive in the single-tensor AdamW loop: max of previous + 2 · current."""
    sizes = list(sizes)
    pairs = {2 * sizes[0]} | {prev + 2 * cur for prev, cur in zip(sizes, sizes[1:])}
    return maximum(*pairs)


def loss_backward_extra(family: str) -> sympy.Expr:
    """Gradients alive with all saved tensors at the start of backward (see the docstring)."""
    if family == "mlp":
        return 2 * B * n_out  # times b: cross-entropy runs in the compute dtype
    return 8 * B * S * V


def input_bytes(family: str, b: int) -> sympy.Expr:
    """The step's inputs: x (b bytes: the weights' dtype) and int64 targets, or the int64 ids (labels are the
    same tensor)."""
    return b * B * d_in + 8 * B if family == "mlp" else 8 * B * S


OPTIMIZERS = ("adamw", "sgd-momentum", "sgd")
LOSSES = act.LOSSES
PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class StepModel:
    """What one training step keeps alive, phase by phase (contract S; see the module docstring).

    ``resident`` is alive the whole step (weights, optimizer state); ``phases`` maps "forward",
    "backward" and "optimizer" to what is alive at that phase's peak moment besides it.
    """

    family: str
    setup: act.Setup
    saved: act.SavedModel
    resident: tuple[Term, ...]
    phases: dict[str, tuple[Term, ...]]
    optimizer: str = "adamw"
    foreach: bool = False
    tied: bool = False
    bias: bool = False
    loss: str = "cross-entropy"

    def phase_exprs(self) -> dict[str, sympy.Expr]:
        """Whole-step bytes at each phase's peak: resident terms plus that phase's terms."""
        base = sympy.Add(*(t.expr for t in self.resident))
        return {name: base + sympy.Add(*(t.expr for t in terms)) for name, terms in self.phases.items()}

    def peak(self) -> sympy.Expr:
        """The step's peak: the largest phase (``maximum``, a ``sympy.Max`` where undecided)."""
        return maximum(*self.phase_exprs().values())

    def phase_extras(self) -> dict[str, sympy.Expr]:
        """Each phase's own terms, summed (without the resident ones)."""
        return {name: sympy.Add(*(t.expr for t in terms)) for name, terms in self.phases.items()}

    def formula(self) -> Formula:
        """``pytorch.peak.<family>``: the resident terms and one term, the largest phase's own."""
        s = self.setup
        phase = Term("phase", "the largest phase: " + " | ".join(
            f"{name}: " + " + ".join(t.key for t in terms) for name, terms in self.phases.items()),
            maximum(*self.phase_extras().values()), "bytes", SRC, "peak", _OPTIMIZER_NOTES[self._opt_key()])
        terms = (*self.resident, phase)
        names = {x.name for t in terms for x in t.expr.free_symbols}
        example = {k: v for k, v in {**act.EXAMPLES[self.family], **_EXAMPLE_N[self.family]}.items() if k in names}
        title = {"adamw": "AdamW", "sgd-momentum": "SGD with momentum", "sgd": "SGD"}[self.optimizer]
        return Formula(
            f"pytorch.peak.{self.family}",
            f"Peak memory of one {title} training step of {act.TITLES[self.family]} ({s.label(self.family)})",
            terms, source=SRC, name="M_peak", example=example,
            note="Steady state (optimizer state exists); measured with symbolic.measured.measure.step_peak per phase.")

    def _opt_key(self) -> str:
        return f"{self.optimizer}-{'foreach' if self.foreach else 'single'}"


_OPTIMIZER_NOTES = {
    "adamw-single": "AdamW single-tensor loop (PyTorch's CPU default): the previous parameter's denominator and "
                    "two temporaries the size of the current one.",
    "adamw-foreach": "AdamW foreach (PyTorch's CUDA default): _foreach_sqrt makes one temporary per parameter, "
                     "T·b, at once.",
    "sgd-momentum-single": "SGD with momentum, single-tensor loop: buf.mul_(momentum).add_(grad) in place, "
                           "no temporaries.",
    "sgd-momentum-foreach": "SGD with momentum, foreach: _foreach_mul_/_foreach_add_ in place, no temporaries.",
    "sgd-single": "plain SGD: param.add_(grad, alpha=-lr) in place, no temporaries.",
    "sgd-foreach": "plain SGD: _foreach_add_ in place, no temporaries.",
}


def _term(key: str, title: str, expr: sympy.Expr | int, where: str, note: str = "") -> Term:
    return Term(key, title, sympy.sympify(expr), "bytes", SRC, where, note)


def step(family: str, setup: act.Setup | None = None, *, optimizer: str = "adamw", foreach: bool | None = None,
         bias: bool | None = None, tied: bool | None = None, loss: str = "cross-entropy",
         trainable: Sequence[sympy.Expr] | None = None, frozen_bytes: sympy.Expr = 0,
         saved_override: act.SavedModel | None = None, trainable_count: sympy.Expr | None = None,
         trainable_bytes: int | None = None, accumulate: int = 1, in_backward: bool = False,
         trainable_tensors: sympy.Expr | int | None = None) -> StepModel:
    """What one steady-state training step of ``family`` keeps alive, by phase (contract S).

    ``optimizer``: adamw, sgd-momentum (momentum 0.9) or sgd. ``foreach``: PyTorch's
    implementation choice (None: its default, foreach on CUDA, the single-tensor loop on the
    CPU). ``tied``/``bias``: see ``parameter_tensors`` (default: GPT-2 tied, the MLP with
    biases). ``loss``: the MLP's loss, cross-entropy of its softmax output or mse to one-hot
    targets. ``trainable``: element counts of the trainable tensors in ``named_parameters()``
    order, one layer as repeated (as ``parameter_tensors``; None: all of them);
    ``trainable_count``: their total (default N without ``trainable``, else its sum);
    ``trainable_bytes``: their element size (default the setup's parameter bytes, fp32 under
    autocast); ``trainable_tensors``: how many (default every parameter tensor without ``trainable``; with
    it and no count AdamW's CPU step counters are left out). ``frozen_bytes``: bytes of frozen (no-gradient)
    weights. ``saved_override``: a
    saved model to use instead of ``pytorch.saved.<family>`` (LoRA's). ``accumulate`` K and
    ``in_backward``: the gradients' lifetime (``lifetime_phases``). N, the exact parameter count,
    stays a symbol.
    """
    if optimizer not in OPTIMIZERS:
        raise UnknownNameError(f"unknown optimizer {optimizer!r}; choose from {', '.join(OPTIMIZERS)}")
    if loss not in LOSSES:
        raise UnknownNameError(f"unknown loss {loss!r}; choose from {', '.join(LOSSES)}")
    model = saved_override or act.saved(family, setup, loss=loss)
    s = model.setup
    b, pb = s.b, s.param_bytes
    tied = (family == "gpt2") if tied is None else tied
    bias = (family == "mlp") if bias is None else bias
    foreach = (s.device == "cuda") if foreach is None else foreach
    sizes = list(trainable) if trainable is not None else parameter_tensors(family, bias=bias, tied=tied)
    count = trainable_count if trainable_count is not None else (N if trainable is None else sympy.Add(*sizes))
    tb = pb if trainable_bytes is None else trainable_bytes
    where = f"pytorch.step.{family}"
    resident = [_term("weights", "trainable weights", tb * count, where,
                      "fp32 master weights under autocast (the weights themselves)." if s.mixed else
                      "Parameters in the compute dtype.")]
    if frozen_bytes != 0:
        resident.append(_term("frozen_weights", "frozen weights (no gradient, no optimizer state)",
                              sympy.sympify(frozen_bytes), where))
    if optimizer == "adamw":
        resident.append(_term("optimizer_state", "AdamW moments exp_avg and exp_avg_sq", 2 * tb * count, where,
                              "torch.zeros_like(param): the parameters' dtype."))
        tensors = parameter_tensor_count(family, bias=bias, tied=tied) if trainable is None else trainable_tensors
        if s.device == "cpu" and tensors is not None:
            resident.append(step_counters_term(tensors, where))
    elif optimizer == "sgd-momentum":
        resident.append(_term("optimizer_state", "SGD momentum buffers", tb * count, where,
                              "torch.clone(grad) at the first step: the parameters' dtype."))
    saved_expr = model.formula.expr
    compiled = s.compile and s.compile_loss and family != "mlp"
    saved_term = _term("saved", "tensors saved for backward (A_saved)", saved_expr, where,
                       f"pytorch.saved.{family}")
    if family == "mlp" and s.mixed:
        # under autocast the network's forward pass peaks at its softmax, before the loss keeps anything
        before = saved_expr - sympy.Add(*(t.expr for t in model.formula.terms if t.key.startswith("loss.")))
        forward = [_term("saved_before_loss", "tensors saved for backward before the loss (A_saved less the loss's)",
                         before, where), *_forward_transients(family, s, loss, bias)]
    elif compiled:  # issue 28: the compiled loss and blocks keep no transients beside what they save
        forward = [saved_term]
    else:
        forward = [saved_term, *_forward_transients(family, s, loss, bias)]
    moments = compiled_step.backward_moments(s.b, trainable is None) if compiled else [_loss_gradients(family, s, loss)]
    early = maximum(*(saved_expr + m for m in moments))
    # the end of backward: every gradient, the inputs, and with a tied head the embedding's own
    # gradient beside the head's (buffered until then) and their sum, 2·V·H more
    tied_end = 2 * tb * V * H if tied and family != "mlp" and trainable is None else 0
    late = tb * count + input_bytes(family, s.param_bytes) + tied_end
    if family == "mlp" and trainable is None:
        # gat's weight gradient is the last: the gradient at its output is still alive (and under
        # autocast the 16-bit gradient of its weight copy beside the fp32 one)
        if s.mixed:  # gat's 16-bit weight gradient beside its fp32 cast (and before it, the gradient in flight
            # at gat's output and the saved 16-bit copy of x, without the fp32 cast)
            gat = d_in * d_h
            late = maximum(late + b * gat, late + (b - tb) * gat + b * B * (d_h + d_in))
        else:
            late = late + b * B * d_h
        late = maximum(late, _mlp_up_moment(s, tb, bias))
    head = _head_moment(family, model, tb) if trainable is None and not compiled else None
    backward = [_term("backward_live", "the larger of: everything saved + the loss's first gradients (start of "
                                       "backward) | every gradient + the inputs"
                      + (" + the tied embedding's two V·H gradients" if tied_end else "") + " (end of backward)",
                      maximum(early, late) if head is None else maximum(early, late, head), where,
                      compiled_step.note() if compiled else
                      "At the start, autograd has freed nothing and the loss's gradients are the largest buffers; at "
                      "the end, every gradient exists and the saved tensors are gone.")]
    if optimizer == "adamw":
        x_opt = tb * (count if foreach else adamw_cpu_temporaries(sizes))
    else:
        x_opt = sympy.Integer(0)
    opt_terms = [_term("gradients", "gradients of the trainable weights", tb * count, where),
                 _term("optimizer_temporaries", "the optimizer step's temporaries", x_opt, where,
                       _OPTIMIZER_NOTES[f"{optimizer}-{'foreach' if foreach else 'single'}"]),
                 _term("inputs", "the step's inputs, still held by the caller", input_bytes(family, s.param_bytes),
                       where)]
    phases = {"forward": tuple(forward), "backward": tuple(backward), "optimizer": tuple(opt_terms)}
    if accumulate > 1 or in_backward:
        step_moment = tb * maximum(*sizes) * (1 + _temporaries_per_element(optimizer, foreach)) \
            + input_bytes(family, s.param_bytes) + tied_end
        phases = lifetime_phases(phases, accumulate, in_backward, maximum(early, step_moment))
    return StepModel(family, s, model, tuple(resident), phases, optimizer, foreach, tied, bias, loss)


def _head_moment(family: str, model: act.SavedModel, tb: int) -> sympy.Expr | None:
    """GPT-2 in backward inside the last layer's activation backward, just after the LM head (fp32 and 16 bit).

    Autograd has freed the loss's, the head's and the final norm's saved tensors and the last
    layer's MLP c_proj input and dropout mask; the rest of ``A_saved`` is alive beside the head's
    V·H weight gradient (the tied embedding's), ln_f's two and c_proj's weight and bias
    gradients, the residual stream's gradient (B·S·H, kept for the skip connection) and three
    B·S·d_ff tensors: c_proj's input gradient and two products of gelu_new's backward (one for
    the other activations' single backward op). None where it is not modelled (autocast, Llama).
    """
    s = model.setup
    if family != "gpt2" or s.mixed:
        return None
    terms = {t.key: t.expr for t in model.formula.terms}
    freed = sympy.Add(*(e for k, e in terms.items() if k.split(".")[0] in ("loss", "lm_head", "ln_f")))
    last = sympy.Add(*(terms.get(k, 0) for k in ("mlp.c_proj.input", "mlp.dropout_mask"))) / L
    tensors = 2 if act.ACTIVATION_TENSORS.get(s.activation or "gelu_new", 1) == 4 else 1
    grads = tb * (V * H + 2 * H + d_ff * H + H)
    return sympy.expand(model.formula.expr - freed - last + grads + s.b * B * S * (H + (1 + tensors) * d_ff))


def _mlp_up_moment(s: act.Setup, tb: int, bias: bool) -> sympy.Expr:
    """Article A's network in backward at ``up``'s weight gradient: the gradients of out, down and up,
    its input relu1 and three B·d_h gradients in flight (the residual's two branches and up's input).
    Under autocast up's gradient is first the 16-bit one of its weight copy, then its fp32 cast beside it."""
    b = s.b
    done = d_in * n_out + d_h * d_in + ((n_out + d_in) if bias else 0)  # out's and down's, in the weights' dtype
    current = d_h**2 + (d_h if bias else 0)  # up's: under autocast still the 16-bit gradient of its copy
    inputs = input_bytes("mlp", s.param_bytes)
    if not s.mixed:
        return tb * (done + current) + 4 * b * B * d_h + inputs
    # up's saved weight copy and gat's saved copy of x; then the cast of up's gradient to fp32, beside
    # the 16-bit one, with two B·d_h tensors left (relu1's output and the gradient summed for it)
    before = tb * done + b * current + 4 * b * B * d_h + inputs + b * (d_h**2 + B * d_in)
    cast = tb * (done + current) + b * d_h**2 + 2 * b * B * d_h + b * B * d_in + inputs
    return maximum(before, cast)


def _loss_gradients(family: str, s: act.Setup, loss: str) -> sympy.Expr:
    """The loss's first gradients, alive with everything saved at the start of backward."""
    if family == "mlp":
        return 2 * s.b * B * n_out
    return 8 * B * S * V


def _forward_transients(family: str, s: act.Setup, loss: str, bias: bool) -> list[Term]:
    """What is alive at the forward pass's peak besides the saved tensors (and the resident state).

    Language models peak inside the loss, where Hugging Face's ``ForCausalLMLoss`` holds the
    logits, their fp32 copy and the padded labels while ``log_softmax`` writes its output;
    under autocast the model's output still holds the fp32 last hidden state, and autocast's
    cache the 16-bit copies of weights no matmul keeps (biases; article A's first weight). With
    ``use_cache`` and Llama's eager attention, the cache's K and V copies are alive unsaved.
    """
    b = s.b
    where = f"pytorch.step.{family}"
    out: list[Term] = []
    if family == "mlp":
        if s.mixed:
            out.append(_term("inputs_fp32", "the fp32 input x (autocast keeps its 16-bit copy)", 4 * B * d_in, where))
            out.append(_term("residual_fp32", "g + x in fp32 (16-bit g plus the fp32 input), alive until forward returns",
                             4 * B * d_in, where, "out keeps its 16-bit copy"))
            out.append(_term("logits", "the 16-bit logits, beside their softmax", b * B * n_out, where))
            cache = d_in * d_h + ((2 * d_h + d_in + n_out) if bias else 0)
            out.append(_term("autocast_cache", "autocast's 16-bit copies no matmul keeps: gat's weight"
                             + (" and the biases" if bias else ""), b * cache, where,
                             "The weight cache lives until the autocast region ends, after the loss."))
        return out
    out.append(_term("logits", "the logits, alive while the loss is computed", b * B * S * V, where))
    if b != 4:
        out.append(_term("logits_fp32", "their fp32 copy (Hugging Face upcasts before cross-entropy)",
                         4 * B * S * V, where))
    out.append(_term("labels_padded", "the labels padded by one position (int64), before the shift",
                     8 * B * (S + 1), where, "With B = 1 the shifted labels are a view of them (saved already)."))
    if s.mixed:
        out.append(_term("hidden_fp32", "the fp32 last hidden state the model's output still holds", 4 * B * S * H,
                         where, "Under autocast the final norm's output is fp32; the head keeps a 16-bit copy."))
        biases = (5 * H + d_ff) * L if family == "gpt2" else ((a + 2 * a_kv) * d_head * L if bias else 0)
        if biases != 0:
            out.append(_term("autocast_cache", "autocast's 16-bit copies of the biases (cached, not kept by a matmul)",
                             b * biases, where, "The weight cache lives until the autocast region ends."))
    if s.use_cache and family == "gpt2" and s.kernel == "math":
        out.append(_term("kv_cache", "the KV cache's K and V copies SDPA's math fallback does not keep",
                         L * 4 * B * S * H, where,
                         "use_cache with the CPU's math fallback (attention dropout): it keeps fp32 copies of its own; "
                         "4·B·S·H per layer measured in fp32 (one copy) and 16-bit (both)."))
    if s.use_cache and family == "llama":
        kv = B * S * a_kv * d_head
        # under autocast the rotated K is fp32 (q·cos with fp32 cos) and so is its cache copy; the 16-bit
        # copy autocast makes for attention is the saved one
        k_bytes = 4 if s.mixed else b
        unsaved = (k_bytes + b) * kv if s.kernel != "fused" else (4 * kv if s.mixed else 0)
        if unsaved != 0:
            out.append(_term("kv_cache", "the KV cache's K and V copies that attention does not keep",
                             L * unsaved, where,
                             "use_cache: alive until the model's output is dropped, after the loss; eager attention "
                             "keeps repeat_kv's copies instead, SDPA under autocast a 16-bit copy of the fp32 K."))
    return out


def peak(family: str, setup: act.Setup | None = None, *, tied: bool | None = None, bias: bool | None = None,
         **options: object) -> PeakModel:
    """The AdamW step of ``step`` as the older two-phase model (backward and optimizer phases)."""
    s = replace(setup or act.Setup(), **options) if options else setup
    model = step(family, s, tied=tied, bias=bias)
    extras = model.phase_extras()
    return PeakModel(model.saved, model.formula(), model.tied, extras["backward"], extras["optimizer"])


_EXAMPLE_N = {"mlp": {"N": 33_585_162}, "gpt2": {"N": 124_439_808, "n_pos": 1024}, "llama": {"N": 8_030_261_248}}
for _family, _setup in act.CANONICAL.items():
    register(step(_family, _setup).formula())


# --- transients of a training step (the planner's forward, backward and optimizer phases) --------
def logits_forward_term(act_bytes: int, tp: sympy.Expr | int = 1) -> Term:
    """Hugging Face's loss in the forward pass: the logits (``act_bytes`` each) and their fp32 upcast, on one GPU."""
    upcast = 4 if act_bytes != 4 else 0
    return Term("logits_forward", f"the model's logits ({act_bytes} bytes) and their fp32 upcast while the loss runs",
                (act_bytes + upcast) * S * B * V / tp, "bytes", "huggingface", "ForCausalLMLoss",
                "logits.float() before cross-entropy; both are released when the forward pass ends (only the "
                "fp32 log-softmax is saved)."
                + ("" if upcast else " In fp32 the upcast is the logits themselves."))


LOSS_PARALLEL = "pytorch-loss-parallel"


def loss_parallel_forward_term(act_bytes: int, tp: sympy.Expr) -> Term:
    """PyTorch's loss_parallel in the forward pass: the logits' shard, its fp32 upcast and log-softmax's temporary."""
    upcast = 4 if act_bytes != 4 else 0
    return Term("logits_forward", f"the logits' vocabulary shard ({act_bytes} bytes), its fp32 upcast and "
                "log-softmax's shifted copy (x − max, then exp(x − max)) while the loss runs",
                (act_bytes + upcast + 4) * S * B * V / tp, "bytes", LOSS_PARALLEL, "_log_softmax",
                "Under tensor parallelism the loss runs on logits sharded over the vocabulary (torchtitan enables "
                "loss_parallel whenever tp > 1): its log-softmax is decomposed, so x − max and its exp are fp32 "
                "tensors of their own beside the upcast, where the one-device kernel writes only its output.")


def loss_parallel_gradients_term(tp: sympy.Expr) -> Term:
    """PyTorch's loss_parallel backward: zeros_like, exp(x) (or the product) and their sum, fp32 shards at once."""
    return Term("loss_gradients", "fp32 shards of loss_parallel's backward: zeros_like(x), exp(x) and their sum "
                "(12·B·S·V/t)", 12 * S * B * V / tp, "bytes", LOSS_PARALLEL, "_nll_loss_and_log_softmax_backward",
                "grad_input = zeros_like(x) stays alive while (grad_input + exp(x)) and its product with grad_output "
                "are written: three fp32 shards beside the saved log-softmax.")


def chunked_logits_forward_term(act_bytes: int, chunks: int, tp: sympy.Expr | int = 1) -> Term:
    """torchtune's chunked loss in the forward pass: every chunk's logits and one chunk's fp32 upcast (measured)."""
    upcast = 4 if act_bytes != 4 else 0
    return Term("logits_forward", f"every chunk's logits ({act_bytes} bytes) and one chunk's fp32 upcast (1/{chunks}) "
                "while the loss runs", (act_bytes * S * B * V + upcast * S * B * V / chunks) / tp, "bytes",
                "torchtune-chunked-ce", "CEWithChunkedOutputLoss.forward",
                "logits_chunk.float() one chunk at a time; the chunks' logits are the model's output until the loss "
                "is computed. (With B > 1 the head copies each non-contiguous sequence chunk of its input; the copies "
                "replace that input once the model's forward returns.)")


def chunked_loss_gradients_term(chunks: int, tp: sympy.Expr | int = 1) -> Term:
    """The fp32 gradients of nll_loss and log_softmax of one chunk at a time in backward (measured)."""
    return Term("loss_gradients", f"fp32 gradients of nll_loss and log_softmax, one chunk of {chunks} (8·B·S·V/N)",
                loss_backward_extra("gpt2") / (tp * chunks), "bytes", "torchtune-chunked-ce",
                "CEWithChunkedOutputLoss.forward",
                "Backward runs the chunks' loss branches one after another: one chunk's gradients at a time.")


def compiled_loss_gradient_term(act_bytes: int, tp: sympy.Expr | int = 1, head_trained: bool = True) -> Term:
    """The compiled loss and head's backward over what is saved: the larger of ``compiled_step``'s moments."""
    head = " | the LM head's weight and input gradients" if head_trained else ""
    return Term("loss_gradients", f"compiled loss, backward: max(the logits' gradient ({act_bytes} bytes) and 4 bytes "
                f"per token{head})", maximum(*compiled_step.backward_moments(act_bytes, head_trained, tp)), "bytes",
                "torch-partitioner", "min_cut_rematerialization_partition",
                "The compiled backward recomputes the softmax from the saved logits and statistics and writes the "
                "gradient in the logits' dtype (no fp32 B·S·V tensor); a trained head's weight gradient then "
                "follows, after the saved logits are freed (library.compiled_step: measured on the CPU with "
                "inductor; not on a GPU).")


def loss_gradients_term(tp: sympy.Expr | int = 1) -> Term:
    """The fp32 gradients of nll_loss and log_softmax alive when backward starts, on one GPU (measured)."""
    return Term("loss_gradients", "fp32 gradients of nll_loss and log_softmax at the start of backward (8·B·S·V)",
                loss_backward_extra("gpt2") / tp, "bytes", SRC, "pytorch.peak.gpt2",
                "Alive with everything saved for backward when the backward pass starts (measured with PyTorch "
                "on GPT-2 and Llama); not saved for backward.")


def adamw_temporaries_term(expr: sympy.Expr) -> Term:
    """AdamW's foreach temporaries: ``expr`` bytes, one temporary per parameter it updates (in its dtype)."""
    return Term("optimizer_temporaries", "AdamW's foreach temporaries: one per parameter it updates", expr, "bytes",
                SRC, "torch.optim.AdamW (foreach)",
                "_foreach_sqrt(exp_avg_sq) makes one temporary per parameter, in the optimizer's dtype (fp32 with "
                "mixed precision), over the parameters this rank updates (its ZeRO shard). Fused implementations "
                "(fused=True, apex or DeepSpeed FusedAdam) keep none: an upper bound for them.")


# --- the gradients' lifetime: gradient accumulation and the optimizer in backward (issue 28) -----
OPTIM_IN_BWD_SRC = "torchtune-optim-in-bwd"


def _temporaries_per_element(optimizer: str, foreach: bool) -> int:
    """Temporaries of one parameter's AdamW step, per element: foreach's sqrt, or the single-tensor loop's two."""
    if optimizer != "adamw":
        return 0
    return 1 if foreach else 2


def lifetime_phases(phases: dict[str, tuple[Term, ...]], accumulate: int, in_backward: bool,
                    step_backward: sympy.Expr) -> dict[str, tuple[Term, ...]]:
    """The step's phases with the gradients' real lifetime (measured on the CPU, ``measure.step_peak``).

    ``accumulate`` K > 1: the gradients of the earlier micro-batches are alive through the forward
    and backward passes of every later one (``AccumulateGrad`` adds each new gradient in place), so
    the ``gradients`` term joins those phases; the optimizer phase is unchanged. ``in_backward``
    (torchtune's ``optimizer_in_bwd``): each parameter is stepped and its gradient freed in a
    post-accumulate-grad hook, so no phase holds every gradient: backward is the larger of its start
    and ``step_backward`` (the largest parameter's gradient and its step's temporaries at the end of
    backward), and the optimizer phase holds only the caller's inputs.
    """
    if in_backward:
        live = phases["backward"][0]
        moment = live.replace(title=live.title + " | the largest parameter's gradient and its step in backward",
                              expr=step_backward)
        inputs = tuple(t for t in phases["optimizer"] if t.key == "inputs")
        return {**phases, "backward": (moment, *phases["backward"][1:]), "optimizer": inputs}
    gradients = tuple(t for t in phases["optimizer"] if t.key == "gradients")
    return {**phases, "forward": (*phases["forward"], *gradients), "backward": (*phases["backward"], *gradients)}


def step_in_backward_terms(grad_bytes: sympy.Expr | int, temp_bytes: sympy.Expr | int,
                           largest: sympy.Expr) -> list[Term]:
    """The optimizer in backward at its largest moment: one parameter's gradient and its step's temporaries.

    torchtune's ``register_optim_in_bwd_hooks`` (torchtune/training/memory.py) steps one optimizer
    per parameter in ``register_post_accumulate_grad_hook`` and zeroes its gradient; so at most one
    parameter's gradient (the largest, ``largest`` elements) and its AdamW temporaries are alive
    beyond what backward holds, instead of every gradient.
    """
    return [Term("gradients", "the largest parameter's gradient, stepped and freed in backward", grad_bytes * largest,
                 "bytes", OPTIM_IN_BWD_SRC, "register_optim_in_bwd_hooks",
                 "Optimizer in backward: each gradient is freed by the post-accumulate-grad hook after its step."),
            Term("optimizer_temporaries", "that parameter's optimizer temporaries (one tensor's foreach step)",
                 temp_bytes * largest, "bytes", OPTIM_IN_BWD_SRC, "register_optim_in_bwd_hooks",
                 "AdamW over one tensor: _foreach_sqrt's one temporary (CUDA); none for SGD.")]
