"""FSDP2 over the dp ranks for a network that measures its own step (a torch module, issue 29).

The table families' FSDP2 terms (``library.fsdp``, applied by ``build``) with the module's own units:
each block of its repeated stack (``Network.checkpoint_blocks``) a ``fully_shard`` group, as timm,
diffusers and torchtitan wrap theirs, and the root holding every other parameter. The step is the
module's measured one with each parameter's gradient dropped as it accumulates (``sharded``: its
backward without the whole model's gradients), and in its place:

- resident: the sharded parameters in the module's own dtype (the copy the optimizer updates) and
  the optimizer's states of that shard, ÷ N_s; buffers stay whole (``fully_shard`` shards parameters);
- forward and backward: the running block and the one prefetched all-gathered (the largest two
  neighbours), or every block with ``--no-reshard-after-forward``; the root unsharded from its
  forward to the end of backward; in forward the kept all-gather outputs beyond the last block's
  activations (``fsdp.all_gather_outputs_term``);
- backward: the root's unsharded gradients as the step holds them (probed with the root's kept, the blocks'
  dropped: the head's beside the blocks' backward, an embedding's at the end); the larger of the blocks' moments
  (the largest block's unsharded gradients, its reduce-scatter input in reduce_dtype and the finished blocks'
  sharded gradients, beyond the saved activations the finished blocks freed, with the largest unit's sizes
  and the smallest block's saved bytes, ``fsdp.block_moments``: inside a block's backward beside the step's own
  peak, at the end of a block's backward and at its copy-in beside the saved tensors only, without the peak's
  transients) and the root's reduce-scatter at the end (``fsdp.root_end_moment``, ``fsdp.backward_term``);
- optimizer: the sharded gradients and the optimizer's temporaries of the shard, ÷ N_s;
- on a CUDA plan (a runtime term): the side streams' cached blocks per phase (``fsdp.stream_pools_term``, as
  ``build._fsdp_pools`` for the table families: the copy-in stream's most and the sharded gradients, less what a
  phase counts of them, the backward's term rebuilt without them).

A pure fp32, bf16 or fp16 step gathers in its own dtype. Under bf16-mixed (fp16-mixed alike) two setups people
run: ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` and no autocast (torchtitan's; the default,
as the table families' ``--fsdp-param-dtype bf16``): fp32 shards and optimizer states, the units gathered in
bf16 and the step computed in bf16 (probed in pure bf16, ``step_precision``); or ``param_dtype`` fp32 with the
user's ``torch.autocast`` in the forward: fp32 gathered, the step probed under autocast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import sympy

from .. import formats
from ..core.symbols import N, n_s
from ..core.term import Term
from ..library import fsdp
from ..library.peak_pytorch import StepModel
from ..math.extrema import maximum
from .regime import Regime, own_param_dtypes

ROOT = "FSDP2 root group unsharded ({dtype}): every parameter outside the blocks"


def gathered(units: tuple[int, ...], reshard: bool) -> int:
    """Parameters unsharded at once: the running block and the next (prefetched), or every block."""
    if not reshard:
        return sum(units)
    return max((a + b for a, b in zip(units, units[1:])), default=max(units, default=0))


def note(blocks: tuple[str, ...], units: tuple[int, ...], total: int) -> str:
    """The units FSDP2 shards, in a sentence."""
    if not blocks:
        return f"fsdp: one fully_shard unit, the root: all {total:,} parameters (no repeated blocks)"
    shown = ", ".join(blocks) if len(blocks) <= 4 else f"{blocks[0]}, {blocks[1]}, ..., {blocks[-1]}"
    sizes = f"{units[0]:,} parameters each" if len(set(units)) == 1 else f"{min(units):,}-{max(units):,} parameters"
    return (f"fsdp: {len(blocks)} blocks each a fully_shard unit ({shown}; {sizes}), then the root with the other "
            f"{total - sum(units):,}, whose gradients stay unsharded to the end of backward")


def _mixed(regime: Regime) -> bool:
    return regime.precision.endswith("-mixed")


def step_precision(regime: Regime) -> str:
    """The precision a module's step is probed in under FSDP2: pure 16-bit where the units are gathered in it
    under a mixed precision (no autocast: MixedPrecisionPolicy casts), else the regime's own."""
    if regime.fsdp and _mixed(regime) and regime.fsdp_param_dtype != "fp32":
        return str(regime.fsdp_param_dtype)
    return regime.precision


def setup_note(regime: Regime) -> str:
    """Which mixed-precision FSDP2 setup was planned, in a sentence ("" for a pure precision)."""
    if not _mixed(regime):
        return ""
    return _setup(regime.precision, str(regime.fsdp_param_dtype), str(regime.fsdp_reduce_dtype))


def search_note(units: tuple[int, ...] | None, options: Mapping[str, object], used: bool) -> str:
    """``setup_note`` for a search whose layouts shard a module with FSDP2 ("" where none does, or pure)."""
    precision = str(options.get("precision") or "")
    if not used or units is None or not precision.endswith("-mixed"):
        return ""
    dtype = options.get("fsdp_param_dtype") or own_param_dtypes(precision)[0]
    return _setup(precision, str(dtype), str(options.get("fsdp_reduce_dtype") or "fp32"))


def _setup(precision: str, dtype: str, reduce: str) -> str:
    if dtype == "fp32":
        return (f"fsdp with {precision}: MixedPrecisionPolicy(reduce_dtype={reduce}) without a param_dtype, "
                "the units gathered in fp32 and the forward under torch.autocast (the step probed under autocast)")
    return (f"fsdp with {precision}: MixedPrecisionPolicy(param_dtype={dtype}, reduce_dtype={reduce}) and no "
            f"autocast (torchtitan's way): fp32 shards and optimizer states, the units gathered and computed in "
            f"{dtype} (the step probed in pure {dtype}); --fsdp-param-dtype fp32 plans autocast over fp32 units")


def freed_by_a_block(blocks: tuple[str, ...], saved: Sequence[Term]) -> sympy.Expr:
    """The saved bytes the smallest repeated block frees when its backward is done (its modules' saved terms)."""
    per_block = [sympy.Add(*(t.expr for t in saved if t.key == name or t.key.startswith(name + "."))) for name in blocks]
    return sympy.Min(*per_block) if per_block else sympy.Integer(0)


def sharded(step: StepModel, units: tuple[int, ...], total: int, regime: Regime,
            values: dict[str, object], freed: sympy.Expr | int = 0,
            last: int = 0) -> tuple[StepModel, dict[str, sympy.Expr]]:
    """``step`` (the module's, the blocks' gradients dropped in backward) with FSDP2's terms (see the module
    docstring), and per phase what FSDP2's side streams keep reserved beyond it (``fsdp.stream_pools_term``)."""
    dtype, kept = str(regime.fsdp_param_dtype), "fp32" if _mixed(regime) else regime.precision
    nbytes, reduce_bytes = int(formats.nbytes(dtype)), int(formats.nbytes(regime.fsdp_reduce_dtype))
    kept_bytes = int(formats.nbytes(kept))
    scale = sympy.Rational(kept_bytes, step.setup.param_bytes)  # the step's states were in its probed dtype
    values["n_s"] = regime.dp // regime.hsdp
    root = total - sum(units)
    params, grads = fsdp.sharded_params_term(N, kept_bytes, kept), fsdp.sharded_grads_term(N, kept_bytes, kept)

    def shard(term: Term) -> Term:
        if term.key == "weights":
            return params
        if term.key == "optimizer_state":
            return fsdp.sharded_states_term(term.replace(expr=term.expr * scale))
        if term.key == "gradients":
            return grads
        if term.key == "optimizer_temporaries":
            return term.replace(expr=term.expr * scale / n_s, title=f"{term.title} (of the shard, ÷ N_s)")
        return term

    blocks = fsdp.unsharded_layers_term(1, nbytes * gathered(units, regime.reshard_after_forward),
                                        regime.reshard_after_forward, dtype)
    whole = fsdp.root_term(sympy.Integer(root), nbytes, dtype).replace(title=ROOT.format(dtype=dtype))
    largest = sympy.Integer(max(units, default=0))
    held = tuple(t for t, on in ((blocks, units), (whole, root)) if on)  # a module without blocks: the root only
    inputs = next((t.expr for items in step.phases.values() for t in items if t.key == "inputs"), sympy.Integer(0))
    others = sympy.Add(*(t.expr for t in (*step.phases["forward"], *held)))
    outputs = (root_output_term(fsdp.all_gather_outputs_term(regime.reshard_after_forward, nbytes * largest, dtype,
                                                             freed),  # the loss's tensors: none counted against it
                                inputs + nbytes * (2 * root + 2 * largest) - others),)
    backward = tuple(shard(t) for t in step.phases["backward"])

    def beyond(side_streams: bool) -> Term:
        """The backward's FSDP2 term (``side_streams`` False: without the sharded gradients, the prefetched block
        and the root's reduce-scatter output, the side streams' tensors)."""
        sharded_block = kept_bytes * largest / n_s if side_streams else 0
        moments = block_moments(len(units), (nbytes * largest, sharded_block), freed, nbytes * largest,
                                reduce_bytes * largest, regime.reshard_after_forward, backward_transients(step),
                                side_streams)
        end = fsdp.root_end_moment(1, kept_bytes * sympy.Integer(sum(units)) / n_s, sympy.Integer(root),
                                   sympy.Integer(last), nbytes, reduce_bytes, side_streams)
        return fsdp.backward_term(moments, 0, 0, 0, inputs + end, sympy.Add(*(t.expr for t in (*backward, *held))),
                                  regime.fsdp_reduce_dtype)

    written = beyond(True).replace(title=GRADS_TITLE.format(reduce=regime.fsdp_reduce_dtype),
                           note=fsdp.WRITTEN_NOTE + BLOCK_NOTE + ROOT_END_NOTE)
    extra = {"forward": (*held, *outputs), "backward": (*held, written)}
    phases = {name: tuple(shard(t) for t in items) + extra.get(name, ()) for name, items in step.phases.items()}
    copy_in = fsdp.copy_in_pool(nbytes * root, nbytes * largest, n_s, len(units))
    prefetched = fsdp.PREFETCH * nbytes * largest if units and regime.reshard_after_forward else 0  # a flat output
    grads_kept = 0 if regime.optimizer_in_backward else grads.expr
    counted = {"forward": prefetched + outputs[0].expr, "backward": prefetched + written.expr - beyond(False).expr,
               "optimizer": grads.expr}  # the side streams' tensors each phase counts
    pools = {name: copy_in + grads_kept - counted.get(name, 0) for name in phases}
    return replace(step, resident=tuple(shard(t) for t in step.resident), phases=phases), pools


def backward_transients(step: StepModel) -> sympy.Expr:
    """What the step's backward peak holds besides the saved tensors and the inputs (a block's gradients in flight,
    its own temporaries); 0 where the step's terms do not say (then the copy-in moments are counted whole)."""
    found = {t.key: t.expr for items in step.phases.values() for t in items}
    if not {"backward_live", "saved", "inputs"} <= set(found):
        return sympy.Integer(0)
    return maximum(0, found["backward_live"] - found["inputs"] - found["saved"])


def root_output_term(outputs: Term, first_copy_out: sympy.Expr) -> Term:
    """Forward: the blocks' kept all-gather outputs, or the root's at the first block's copy-out, the larger."""
    return outputs.replace(expr=maximum(outputs.expr, first_copy_out), note=outputs.note + ROOT_OUTPUT_NOTE)


ROOT_OUTPUT_NOTE = (
    " The root's flat all-gather output is kept too (all_gather_state) until the first block's copy-out: at that "
    "moment the inputs, the root unsharded and its output, the first block's output and its unsharded parameters are "
    "alive, before any block's activations; beyond the forward's other terms where the root is large (a classifier "
    "head of many classes). Measured over two gloo ranks (tests/test_module_fsdp.py).")


def block_moments(layers: int, grads: tuple[sympy.Expr, sympy.Expr], freed: sympy.Expr, gathered: sympy.Expr,
                  rs_input: sympy.Expr, reshard: bool, transients: sympy.Expr,
                  prefetch_held: bool = True) -> sympy.Expr:
    """What FSDP2's block gradient buffers add to the module's measured backward peak (``fsdp.block_moments`` with
    the moments inside a block, beside that peak; 0 without blocks)."""
    if not layers:
        return sympy.Integer(0)
    return fsdp.block_moments(layers, grads, freed, gathered, rs_input, reshard, transients, inside=True,
                              prefetch_held=prefetch_held)


GRADS_TITLE = ("FSDP2 backward beyond the step's own peak: a block's gradients and reduce-scatter input and the "
               "finished blocks' sharded gradients ({reduce}) less the activations they freed; or the root's "
               "reduce-scatter at the end")
ROOT_END_NOTE = (
    " The step is probed with the blocks' gradients dropped as they accumulate and the root's kept (FSDP2 keeps them "
    "unsharded to the root's post_backward): the head's are beside the blocks' backward, an embedding's come last. "
    "At the end of backward the root's post_backward reshards the root and copies its gradients into its "
    "reduce-scatter input (fsdp.root_end_moment: beside every block's sharded gradients and the inputs, every "
    "activation freed); foreach_reduce's loop variable keeps the root's last parameter's gradient to its return, "
    "beside the new reduce-scatter output. The phase is the larger of that moment and the blocks' (fsdp.backward_term "
    "without a loss's moment: a module's loss is inside its measured step). The moments at a block's end and copy-in "
    "are weighed less the step peak's transients beyond its saved tensors, which now hold the root's gradients alive "
    "at that peak too (an underestimate there where those moments lead and the root's gradients are large). Measured "
    "over two gloo ranks where the blocks lead and where the root's end does (tests/test_module_fsdp.py).")


BLOCK_NOTE = (" For a torch module the step's own backward peak lies inside a block's backward (its gradients in "
              "flight, its temporaries), so a third kind of moment is weighed against it: inside block k's backward "
              "(k blocks done: their sharded gradients, the last one's reduce-scatter input, less their activations "
              "and, without resharding, their unsharded parameters); the end of a block's backward and its copy-in "
              "hold none of the peak's transients. Measured over two gloo ranks (tests/test_module_fsdp.py).")
