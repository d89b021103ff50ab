"""FSDP2 (``torch.distributed.fsdp.fully_shard``) and torchao float8 training, as named terms per GPU.

FSDP2 is not ZeRO-3 byte for byte (PyTorch 2.13.0, ``torch/distributed/fsdp/_fully_shard/``):

- each parameter is a DTensor sharded over the ``n_s`` ranks of the shard group (dim 0, padded),
  kept in the model's own dtype (fp32 under mixed precision): that sharded copy *is* what the
  optimizer updates, so there is no separate master copy and no resident 16-bit copy;
- the sharded gradients are in the same dtype (``foreach_reduce`` casts the reduce-scatter output
  back to the parameter's dtype), and the optimizer's states are per shard;
- each ``fully_shard`` group (torchtitan: every transformer block, and the root with the
  embeddings, the final norm and the head) is all-gathered in ``MixedPrecisionPolicy.param_dtype``
  (bf16) just before it runs and, with ``reshard_after_forward=True``, freed after its forward; the
  next group is prefetched (one all-gather in flight, forward and backward: ``_prefetch_unshard``),
  so two blocks are unsharded at a time; with ``reshard_after_forward=False`` every block stays
  unsharded from its forward to its backward. The root is not resharded after forward
  (``FSDPState._lazy_init``: its parameters would be gathered again at once for backward);
- in backward, once a block's backward is done, ``post_backward`` reshards it, drops the previous
  block's reduce-scatter input (``reduce_scatter_max_input_buffers`` 1), then copies the block's
  unsharded gradients (param dtype) into one flat reduce-scatter input in ``reduce_dtype``
  (``foreach_reduce``), kept until the next block's ``post_backward``; the root's gradients (the
  head's first) wait for the root's own reduce-scatter at the end of backward;
- the reduce-scatter output (reduce_dtype, cast to the parameter's dtype) is viewed as the block's sharded
  gradients (``foreach_reduce``: ``torch.as_strided`` of it becomes ``sharded_param.grad``), the unsharded
  gradients are dropped right after the copy-in (``unsharded_grads.clear()``), so the sharded gradients
  accumulate block by block over the backward while each finished block's saved activations are freed
  (measured on the CPU over two gloo ranks: ``tests/test_fsdp_step.py``);
- HSDP (a 2-D mesh, R replicas of a shard group): shards over ``n_s = dp/R`` ranks, then
  all-reduces over the R replicas (``foreach_reduce``'s ``all_reduce_group``);
- streams: the flat all-gather outputs and their copy-ins are allocated on the all-gather copy-in stream, the
  reduce-scatter output (the sharded gradients) on the reduce-scatter stream, the rest on the compute stream; the
  caching allocator serves a stream only from its own cached blocks, so max reserved holds those side streams'
  blocks beside the compute stream's peak (``stream_pools_term``, a runtime term; measured with a CPU step's
  stream-tagged allocations replayed per stream: ``tests/test_fsdp_streams.py``).

torchao float8 training (``torchao/float8/float8_linear.py``, ``matmul_with_hp_or_float8_args``)
casts a linear layer's input and weight to float8 for each matmul (``hp_tensor_to_float8_dynamic``:
e4m3, an fp32 scale per tensor for ``tensorwise``, per row for ``rowwise``), and in backward casts
``grad_output`` twice (for grad_input and grad_weight) and the weight and input again. What it
saves for backward is ``input_hp`` and ``weight_hp_t`` (``ctx.save_for_backward``): the casts are
transient in eager mode, the master weights, gradients and optimizer states stay high precision,
and the non-linear ops run in bf16. An eager cast is ``tensor.to(float32) * scale``, clamped, then
``.to(float8)`` (``_ToFloat8ConstrFunc.forward``): 9 bytes an element in flight. Measured on the CPU with
torchao 0.18.0 (``tests/test_float8.py``): the saved bytes, each linear's casts and the step's phases. Under
torch.compile inductor fuses each cast into one kernel that writes only the float8 result (1 byte an element,
measured with inductor on the CPU: ``tests/test_float8_compile.py``). With ``enable_fsdp_float8_all_gather`` (tensorwise only:
``Float8LinearConfig.__post_init__``) FSDP2 all-gathers the linear weights' fp8 data with one fp32
scale each (``WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather``), so the unsharded weights
are 1 byte each; ``precompute_float8_dynamic_scale_for_fsdp`` computes all the scales in one
all-reduce after the optimizer step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sympy

from ..core.symbols import B, S, n_s
from ..core.term import Term
from ..math.extrema import maximum

SRC = "pytorch-fsdp2"
TITAN_SRC = "torchtitan-fsdp"
LAST_BLOCK_NOTE = ("torchtitan's apply_fsdp (parallelize_llama.py at 9dec370) leaves the last block unsharded after "
                   "forward (reshard_after_forward = layer_id < L − 1: FSDP2 would prefetch it at once for backward), "
                   "so it is gathered at the loss's moment (measured: tests/test_fsdp_step.py, one block more there "
                   "than with every block resharded).")
FP8_SRC = "torchao-float8"
RECIPES = {"tensorwise": "one fp32 scale per tensor (cuBLAS tensorwise kernel); the default recipe",
           "rowwise": "one fp32 scale per row (CUTLASS rowwise kernel), scales rounded down to powers of two"}
PARAM_DTYPES = ("bf16", "fp16", "fp32")  # MixedPrecisionPolicy.param_dtype: what blocks are gathered in
REDUCE_DTYPES = ("fp32", "bf16")  # MixedPrecisionPolicy.reduce_dtype: what gradients are reduce-scattered in
PREFETCH = 1  # groups all-gathered ahead of the running one, forward and backward (FSDP2's implicit prefetch)
SCALE_BYTES = 4  # an fp32 scale


def sharded_params_term(params: sympy.Expr, nbytes: int, dtype: str) -> Term:
    """The sharded parameters one rank keeps: the optimizer's copy (no separate master)."""
    return Term("weights", f"FSDP2 sharded parameters ({dtype}, ÷ N_s): the copy the optimizer updates",
                nbytes * params / n_s, "bytes", SRC, "FSDPParam._init_sharded_param",
                "Each parameter a DTensor sharded on dim 0 over the shard group, in the model's dtype; the "
                "optimizer steps it directly, so no master copy and no resident 16-bit copy exist.")


def sharded_grads_term(params: sympy.Expr, nbytes: int, dtype: str) -> Term:
    """The sharded gradients: the reduce-scatter output cast to the sharded parameters' dtype."""
    return Term("gradients", f"FSDP2 sharded gradients ({dtype}, ÷ N_s)", nbytes * params / n_s, "bytes", SRC,
                "foreach_reduce", "The reduce-scatter output, cast to the sharded parameter's dtype.")


def sharded_states_term(states: Term) -> Term:
    """The optimizer's states of the shard this rank holds."""
    return states.replace(expr=states.expr / n_s, title=f"{states.title} (÷ N_s, FSDP2)",
                          note="Per sharded parameter. " + states.note)


def unsharded_layers_term(layers: sympy.Expr | int, layer_bytes: sympy.Expr, reshard: bool, what: str) -> Term:
    """The blocks gathered whole: the running one and the prefetched one, or every block without resharding."""
    how = ("the running block and the one prefetched" if reshard
           else "every block, kept from its forward to its backward (reshard_after_forward=False)")
    return Term("fsdp_unsharded_layers", f"FSDP2 unsharded blocks ({what}): {how}", layers * layer_bytes, "bytes",
                SRC, "FSDPParamGroup.unshard, _prefetch_unshard",
                "All-gathered in MixedPrecisionPolicy.param_dtype just before a block runs and freed after it "
                "(reshard_after_forward=True) or after its backward; one all-gather is prefetched ahead in the "
                "forward and backward passes.")


def last_block_term(block_bytes: sympy.Expr, what: str) -> Term:
    """Backward, with resharding: the last block, which torchtitan does not reshard after forward, at the loss's
    moment (the prefetched block comes in the head's backward: ``backward_term``)."""
    return Term("fsdp_last_block", f"FSDP2 unsharded last block ({what}): not resharded after forward (torchtitan)",
                block_bytes, "bytes", TITAN_SRC, "apply_fsdp", LAST_BLOCK_NOTE)


def all_gather_outputs_term(reshard: bool, block_bytes: sympy.Expr, what: str, freed_block: sympy.Expr,
                            loss: sympy.Expr | int = 0) -> Term:
    """Forward: the flat all-gather outputs FSDP2 keeps beside the unsharded blocks, beyond the activations not made
    yet when they are (``forward_outputs``)."""
    how = ("the running block's, kept until the next block's copy-out" if reshard
           else "the two last gathered blocks', each kept until the next block's copy-out")
    return Term("fsdp_all_gather_outputs", f"FSDP2 all-gather outputs in forward ({what}): {how}, beyond the last "
                "block's activations", forward_outputs(reshard, block_bytes, freed_block, loss), "bytes", SRC,
                "FSDPParamGroup.wait_for_unshard (implicit forward prefetch)",
                "In forward a block's flat all-gather output outlives its copy-out into the unsharded parameters: "
                "it is kept in comm_ctx.all_gather_state (to overlap the copy-out with the next all-gather) and "
                "freed in the next block's wait_for_unshard, whose local reference holds it through that block's "
                "copy-out. So a block's copy-out holds the previous block's output, its own and its new unsharded "
                "parameters; with resharding the previous block's parameters are freed by then (one output beyond "
                "the running and prefetched blocks), without it they stay (two). That moment comes at the last "
                "block's copy-out at the latest, before its activations are made: only the excess over them counts. "
                "The last block's output is freed at the root's post-forward (FSDPState._post_forward), before the "
                "loss: without resharding it lies beside every block then. Backward frees each output right after its copy-out. Measured on the CPU over two gloo ranks "
                "(tests/test_fsdp_step.py, tests/test_module_fsdp.py).")


def root_term(root_params: sympy.Expr, nbytes: int, dtype: str) -> Term:
    """The root group (embeddings, final norm, head): unsharded from the forward to the end of backward."""
    return Term("fsdp_root_unsharded", f"FSDP2 root group unsharded ({dtype}): embeddings, final norm, head",
                nbytes * root_params, "bytes", SRC, "FSDPState._lazy_init",
                "The root fully_shard group is not resharded after forward (its parameters would be gathered "
                "again at once for backward).")


def backward_buffers_term(layer_params: sympy.Expr, root_grads: sympy.Expr, grad_bytes: int, reduce_bytes: int,
                          reduce: str, with_block: bool = True) -> Term:
    """Backward: one block's unsharded gradients, the reduce-scatter input kept from the block after, the root's
    (``with_block`` False: the root's only; the block's are ``written_grads_term``'s, weighed against the
    activations the finished blocks freed)."""
    block = (grad_bytes + reduce_bytes) * layer_params if with_block else 0
    expr = block + grad_bytes * root_grads
    what = f"a block's unsharded gradients, the {reduce} reduce-scatter input, " if with_block else ""
    return Term("fsdp_reduce_scatter", f"FSDP2 backward buffers: {what}the head's unsharded gradients", expr,
                "bytes", SRC,
                "foreach_reduce, reduce_scatter_max_input_buffers",
                "Autograd writes a block's gradients unsharded in param_dtype; foreach_reduce copies them into "
                "one flat reduce-scatter input in reduce_dtype, kept until the next block's reduce-scatter is "
                "issued (one buffer). The root's gradients (the head's, produced first) wait for the root's "
                "reduce-scatter at the end of backward. The reduce-scatter output in fp32 becomes the sharded "
                "gradient (counted there).")


def written_grads_term(layers: sympy.Expr | int, grads: tuple[sympy.Expr, sympy.Expr], freed_block: sympy.Expr,
                       gathered_block: sympy.Expr, rs_input: sympy.Expr, reshard: bool) -> Term:
    """Backward: a block's unsharded gradients, its reduce-scatter input and the finished blocks' sharded gradients,
    beyond the saved activations the finished blocks freed (``grads``: one block's unsharded, its sharded)."""
    expr = block_moments(layers, grads, freed_block, gathered_block, rs_input, reshard)
    return Term("fsdp_backward_grads", "FSDP2 gradients in backward: a block's unsharded gradients and reduce-scatter "
                "input, the finished blocks' sharded gradients, beyond the activations those blocks freed", expr,
                "bytes", SRC, "FSDPParamGroup.post_backward, foreach_reduce", WRITTEN_NOTE)


WRITTEN_NOTE = (
    "Block k's backward (k blocks done before it) writes its unsharded gradients in param_dtype; when it is done (its "
    "saved activations freed) post_backward reshards the block, drops the previous block's reduce-scatter input "
    "(reduce_scatter_max_input_buffers 1), then foreach_reduce copies the unsharded gradients into one flat "
    "reduce-scatter input in reduce_dtype and frees them, and reduce-scatters into a new output that becomes the "
    "block's sharded param.grad (a view, kept until the optimizer's zero_grad). Two moments per block: its backward's "
    "end, with all its unsharded gradients, the previous block's input (k ≥ 1) and the block itself still gathered, "
    "and the copy-in after the reshard (one block fewer held, its own input new); both with k + 1 blocks' activations "
    "freed and k blocks' sharded gradients alive. The backward's other terms (every block's activations, the running "
    "and prefetched blocks) hold for k ≤ L−2, the prefetched block is gone at k = L−1 and, without resharding, each "
    "finished block's unsharded parameters are freed too: the largest excess over k = 0 … L−1 (block_moments), zero "
    "where the blocks free more activations than this takes (activation-heavy steps: full recompute at long "
    "sequences, vision models). Measured on the CPU over two gloo ranks (tests/test_fsdp_step.py, "
    "tests/test_module_fsdp.py).")


def root_end_moment(layers: sympy.Expr | int, sharded_block: sympy.Expr, root: sympy.Expr, last: sympy.Expr,
                    grad_bytes: int, reduce_bytes: int, side_streams: bool = True,
                    later: int | None = None) -> sympy.Expr:
    """The root's ``post_backward`` at the end of backward (every block's sharded gradients alive, every activation
    and gathered parameter freed): the larger of its copy-in and the moment after it (``side_streams`` False: the
    compute stream's tensors only, without the sharded gradients and the root's reduce-scatter output).

    ``later`` (a later micro-batch, ``ACCUMULATION_NOTE``): its new output's bytes an element (``output_bytes``),
    beside the accumulated sharded gradients, which the phase counts apart (``layers`` 0)."""
    copied = (grad_bytes + reduce_bytes) * root
    out = (reduce_bytes if later is None else later) if side_streams else 0
    cleared = grad_bytes * last + reduce_bytes * root + out * root / n_s
    return (layers * sharded_block if side_streams else 0) + maximum(copied, cleared)


def output_bytes(reduce_bytes: int, grad_bytes: int) -> int:
    """A later micro-batch's reduce-scatter output an element at its largest: reduce_dtype, and its cast to the
    sharded gradients' dtype beside it when the two differ (``foreach_reduce``'s ``_to_dtype_if_needed``)."""
    return reduce_bytes + (grad_bytes if reduce_bytes != grad_bytes else 0)


def backward_term(blocks: sympy.Expr, head: sympy.Expr, gathered: sympy.Expr, loss: sympy.Expr,
                  root_end: sympy.Expr, held: sympy.Expr, reduce: str, later: bool = False) -> Term:
    """Backward: FSDP2's gradient buffers beyond the loss's moment (``LOSS_APART``), the larger of the blocks' moments
    and the root's reduce-scatter at the end.

    ``blocks``: ``block_moments`` (over the activations and gathered blocks held); ``head``: the head's unsharded
    gradients; ``gathered``: the blocks gathered in the blocks' backward but not at the loss's moment; ``loss``: what
    the loss's moment holds that the blocks' do not (its gradients, the head's and loss's saved tensors);
    ``root_end``: ``root_end_moment``; ``held``: what the phase's other terms count, all freed by then; ``later``:
    a later micro-batch's moments (``ACCUMULATION_NOTE``), the sharded gradients counted apart."""
    expr = maximum(0, head + gathered + blocks - loss, root_end - held)
    grown = ("new reduce-scatter outputs beside the accumulated sharded gradients" if later
             else "the finished blocks' sharded gradients")
    return Term("fsdp_backward_grads", "FSDP2 backward beyond the loss's moment: the head's unsharded gradients, the "
                f"gathered blocks, a block's gradients and reduce-scatter input ({reduce}) and {grown} less the "
                "activations they freed, once the loss's gradients are freed; or the root's reduce-scatter at the end",
                expr, "bytes", SRC, "FSDPParamGroup.pre_backward, post_backward, foreach_reduce",
                WRITTEN_NOTE + LOSS_APART + (" " + ACCUMULATION_NOTE if later else ""))


LOSS_APART = (
    " The loss's moment (its fp32 gradients at the start of backward, beside every activation, the head's input and "
    "the log-softmax output) comes before the root's pre_backward: no head gradient exists yet and, with resharding, "
    "only the block torchtitan leaves unsharded after forward (the last) is gathered; the prefetch is issued in the "
    "head's backward. By the end of the last "
    "block's backward the loss's gradients, the head's input and the log-softmax output are freed, and the blocks' "
    "moments hold the head's unsharded gradients instead (the head's own backward between the two, the logits' "
    "gradient in param_dtype beside the head's new gradients and the prefetch, is not counted apart: it read below "
    "the larger of the two in every measured step). At the end of backward "
    "the root's post_backward reshards the root, then copies its unsharded gradients into its reduce-scatter input "
    "(reduce_dtype) and clears them; foreach_reduce's loop variable keeps the last one (the head's) until it returns, "
    "beside the new reduce-scatter output (÷ N_s) and every block's sharded gradients. So the phase is the largest "
    "of the three moments, never their sum. Measured on the CPU over two gloo ranks, by part of the backward (the "
    "loss's and the head's, then the blocks' and the root's), where the loss leads, where the blocks do and where "
    "the root does (tests/test_fsdp_step.py).")


def block_moments(layers: sympy.Expr | int, grads: tuple[sympy.Expr, sympy.Expr], freed: sympy.Expr,
                  gathered: sympy.Expr, rs_input: sympy.Expr, reshard: bool, transients: sympy.Expr | int = 0,
                  inside: bool = False, prefetch_held: bool = True, output: sympy.Expr | None = None) -> sympy.Expr:
    """What FSDP2's gradient buffers add to the backward phase's other terms: max(0, …) over k = 0 … L−1 (each
    moment linear in k between its ends, 1, L−2 where the prefetched block goes, and L−1) of

    - end(k) = [k ≥ 1]·input + unsharded + k·sharded − (k + 1)·freed: block k's backward done, before
      post_backward (the previous block's reduce-scatter input, the block still gathered);
    - copy(k) = input + unsharded + k·sharded − (k + 1)·freed: its copy-in, after the reshard (one block fewer
      held) and with its own input;
    - with ``inside`` (a torch module, whose measured backward peak lies inside a block's backward), inner(k) =
      [k ≥ 1]·input + k·(sharded − freed), beside that peak;

    each less the gathered blocks no longer held (without resharding each finished block's parameters, and nothing
    prefetched; with it the prefetched block at k = L−1), and end and copy less ``transients``: what the phase's
    peak holds that neither moment does (a module's backward transients; 0 for the table families).
    ``prefetch_held`` False: the held blocks leave the prefetched one out (the compute stream's share: it is the
    copy-in stream's flat output until its copy-out), so it is not released at k = L−1. ``output`` (a later
    micro-batch, whose sharded gradients the phase counts apart: ``grads`` (…, 0)): out(k) = input + output −
    (k + 1)·freed, the block's new reduce-scatter output beside its input once its unsharded gradients are freed,
    less the same released blocks and transients as copy(k) (``ACCUMULATION_NOTE``)."""
    unsharded, sharded = grads
    last = layers - 1

    def released(k: sympy.Expr | int, copied: bool) -> sympy.Expr:
        """Gathered blocks the held term counts that are gone: finished (and, at the copy-in, the running) blocks
        without resharding; with it the running block at its copy-in and the prefetched one at k = L−1."""
        if not reshard:
            return (k + int(copied)) * gathered
        return (int(copied) + int(k == last and prefetch_held)) * gathered

    def started(k: sympy.Expr | int) -> int:
        return int(k != 0)

    def end(k: sympy.Expr | int) -> sympy.Expr:
        return started(k) * rs_input + unsharded + k * sharded - (k + 1) * freed - released(k, False) - transients

    def copy(k: sympy.Expr | int) -> sympy.Expr:
        return rs_input + unsharded + k * sharded - (k + 1) * freed - released(k, True) - transients

    def inner(k: sympy.Expr | int) -> sympy.Expr:
        return rs_input + k * (sharded - freed) - released(k, False)

    if isinstance(layers, int):
        ends: list[sympy.Expr | int] = sorted({k for k in (0, 1, layers - 2, last) if 0 <= k <= last})
    else:  # a symbolic L, taken to be at least 3
        ends = [0, 1, layers - 2, last]
    inners = [inner(k) for k in ends if k != 0] if inside else []
    outs = [] if output is None else [copy(k) - unsharded + output for k in ends]
    return maximum(0, *inners, *(end(k) for k in ends), *(copy(k) for k in ends), *outs)


def forward_outputs(reshard: bool, block_bytes: sympy.Expr, freed_block: sympy.Expr,
                    loss: sympy.Expr | int) -> sympy.Expr:
    """The kept all-gather outputs beyond what the held blocks' term counts: at the last block's copy-out (its
    activations not made yet) one more output with resharding, two without; without resharding also the last
    block's output, freed at the root's post-forward, beside every block (the loss's tensors not made yet)."""
    if reshard:
        return maximum(0, block_bytes - freed_block)
    return maximum(0, 2 * block_bytes - freed_block, block_bytes - loss)


def _worse(extra: Callable[..., sympy.Expr], recipe: str, tp: sympy.Expr | int, width: sympy.Expr,
           hidden: sympy.Expr, fp8_weights: bool) -> sympy.Expr:
    """``extra`` of the up projection (hidden → width/tp) or the down one (width/tp → hidden), whichever is larger."""
    return maximum(*(extra(recipe, rows, cols, B * S, fp8_weights)
                     for rows, cols in ((hidden, width / tp), (width / tp, hidden))))


def fp8_forward_term(recipe: str, tp: sympy.Expr | int, width: sympy.Expr, hidden: sympy.Expr,
                     fp8_weights: bool, compiled: bool = False) -> Term:
    """What one linear's float8 casts add to its forward peak, the worse of the up and down projections."""
    if compiled:
        return _fused_term("forward", _worse(_fused_forward_extra, recipe, tp, width, hidden, fp8_weights), recipe)
    expr = _worse(_forward_extra, recipe, tp, width, hidden, fp8_weights)
    return Term("fp8_casts", f"float8 casts of one linear's operands in forward ({recipe}, eager)", expr, "bytes",
                FP8_SRC, "matmul_with_hp_or_float8_args.forward, _ToFloat8ConstrFunc.forward",
                "hp_tensor_to_float8_dynamic casts the input, then the weight: tensor.to(float32) * scale, clamped, "
                "then .to(e4m3), so a cast in flight holds its fp32 scaled and clamped copies and its float8 result "
                "(9 bytes an element); the casts stay referenced until the matmul returns (backward saves input_hp "
                "and weight_hp_t, not the casts). Counted over the bf16 linear's own peak, its output; measured on "
                "the CPU (tests/float8_child.py). " + RECIPES[recipe] + ".")


def fp8_backward_term(recipe: str, tp: sympy.Expr | int, width: sympy.Expr, hidden: sympy.Expr,
                      fp8_weights: bool, compiled: bool = False) -> Term:
    """What one linear's float8 casts add to its backward peak, the worse of the up and down projections."""
    if compiled:
        return _fused_term("backward", _worse(_fused_backward_extra, recipe, tp, width, hidden, fp8_weights), recipe)
    expr = _worse(_backward_extra, recipe, tp, width, hidden, fp8_weights)
    return Term("fp8_casts", f"float8 casts of one linear's operands in backward ({recipe}, eager)", expr, "bytes",
                FP8_SRC, "matmul_with_hp_or_float8_args.backward, _ToFloat8ConstrFunc.forward",
                "grad_output is cast for grad_input, the weight for grad_input, grad_output again and the saved "
                "input for grad_weight, each cast in flight at 9 bytes an element (fp32 scaled and clamped copies, "
                "the e4m3/e5m2 result); every cast stays referenced until the linear's backward returns. Counted "
                "over the bf16 linear's own backward peak (grad_input and grad_weight); measured on the CPU "
                "(tests/float8_child.py). " + RECIPES[recipe] + ".")


def beyond(term: Term, loss: sympy.Expr) -> Term:
    """The casts' term over the loss's transients of the same phase: the two never coincide (the head is not
    converted, and the casts are dropped when their linear returns), so the phase holds the larger of the two."""
    if loss == 0:
        return term
    return term.replace(expr=maximum(term.expr, loss) - loss, title=f"{term.title}, beyond the loss's transients",
                        note=term.note + " They never coincide with the loss's transients (measured on the CPU: a "
                        "tiny Llama's phase peaks are the bf16 model's), so only their excess over those counts.")


IN_FLIGHT = 9  # bytes an element of a cast in flight: fp32 scaled copy, fp32 clamped copy, the float8 result
BF16 = 2  # the matmul outputs and gradients of a bf16 model


def _forward_extra(recipe: str, k: sympy.Expr, n: sympy.Expr, tokens: sympy.Expr, fp8_weights: bool) -> sympy.Expr:
    """A (tokens × k) @ (k × n) linear's forward peak in float8 less its bf16 peak (the output): the input's
    cast in flight, the weight's with the input's result, or the matmul with both results."""
    x, w, out = tokens * k, (0 if fp8_weights else k * n), BF16 * tokens * n
    s_x, s_w = _scale(recipe, tokens), (0 if fp8_weights else _scale(recipe, n))
    moments = [IN_FLIGHT * x + s_x, x + w + out + s_x + s_w]
    if not fp8_weights:
        moments.append(x + IN_FLIGHT * w + s_x + s_w)
    return maximum(*moments) - out


def _backward_extra(recipe: str, k: sympy.Expr, n: sympy.Expr, tokens: sympy.Expr, fp8_weights: bool) -> sympy.Expr:
    """The linear's backward peak in float8 less its bf16 peak (grad_input and grad_weight): the moments of
    ``matmul_with_hp_or_float8_args.backward`` in its order, every earlier cast still referenced."""
    g, x, w = tokens * n, tokens * k, (0 if fp8_weights else k * n)
    grad_in, grad_w = BF16 * tokens * k, BF16 * k * n
    s_g0, s_w = _scale(recipe, tokens), (0 if fp8_weights else _scale(recipe, k))
    s_g1, s_x = _scale(recipe, n), _scale(recipe, k)
    moments = [g + w + grad_in + IN_FLIGHT * g + s_g0 + s_w + s_g1,  # grad_output cast again, for grad_weight
               2 * g + w + grad_in + IN_FLIGHT * x + s_g0 + s_w + s_g1 + s_x,  # the saved input cast
               2 * g + w + x + grad_in + grad_w + s_g0 + s_w + s_g1 + s_x]  # the grad_weight matmul
    if not fp8_weights:
        moments.append(g + IN_FLIGHT * w + s_g0 + s_w)  # the weight cast for grad_input
    return maximum(*moments) - grad_in - grad_w


FUSED_NOTES = {
    "forward": "Inductor fuses each cast (amax, scale, clamp, .to(e4m3)) into one kernel that writes the float8 result "
               "only, so at the matmul the input's and the weight's casts are 1 byte an element with their fp32 scales, "
               "no fp32 copies.",
    "backward": "Inductor fuses the casts; at the linear's backward peak, beyond its bf16 gradients, only one float8 "
                "cast of grad_output (1 byte an element) is alive, with its scales (rowwise: an fp32 scale per column "
                "of grad_output and a bf16 amax per row of the weight).",
}


def _fused_term(phase: str, expr: sympy.Expr, recipe: str) -> Term:
    """The float8 casts of one linear in ``phase`` under torch.compile (inductor), measured on the CPU."""
    return Term("fp8_casts", f"float8 casts of one linear's operands in {phase} ({recipe}, fused by torch.compile)",
                expr, "bytes", FP8_SRC, "matmul_with_hp_or_float8_args, hp_tensor_to_float8_dynamic under inductor",
                FUSED_NOTES[phase] + " Counted over the bf16 linear's own compiled peak; measured on the CPU with "
                "inductor (tests/float8_compile_child.py), each ATen call's scratch left out (the CPU's _scaled_mm "
                "dequantizes to fp32, which cuBLAS does not). " + RECIPES[recipe] + ".")


def _fused_forward_extra(recipe: str, k: sympy.Expr, n: sympy.Expr, tokens: sympy.Expr,
                         fp8_weights: bool) -> sympy.Expr:
    """A compiled float8 linear's forward peak less the compiled bf16 one's: both float8 operands at the matmul."""
    w, s_w = (0, 0) if fp8_weights else (k * n, _scale(recipe, n))
    return tokens * k + w + _scale(recipe, tokens) + s_w


def _fused_backward_extra(recipe: str, k: sympy.Expr, n: sympy.Expr, tokens: sympy.Expr,
                          fp8_weights: bool) -> sympy.Expr:
    """A compiled float8 linear's backward peak less the compiled bf16 one's: one float8 cast of grad_output."""
    amax = 0 if recipe == "tensorwise" else BF16 * k  # rowwise: the weight's per-row amax, bf16
    return tokens * n + _scale(recipe, n) + amax


def _scale(recipe: str, rows: sympy.Expr) -> sympy.Expr | int:
    """fp32 scales of one cast: one per tensor, or one per row (per column) of the axis it is scaled along."""
    return SCALE_BYTES if recipe == "tensorwise" else SCALE_BYTES * rows


def accumulated_grads_term(params: sympy.Expr, nbytes: int, dtype: str) -> Term:
    """Under pipeline parallelism: a stage's gradients, unsharded, accumulated over its micro-batches."""
    return Term("fsdp_accumulated_grads", f"FSDP2 unsharded gradients accumulated over the micro-batches ({dtype}): "
                "every parameter of this rank's stages", nbytes * params, "bytes", SRC,
                "FSDPParam.to_accumulated_grad_if_needed, _PipelineStageBase.backward_maybe_with_nosync",
                "PyTorch's pipeline stage turns gradient sync off for every micro-batch but the last, so FSDP2 "
                "keeps each block unsharded (reshard_after_backward False) and its gradient unsharded, cast to "
                "reduce_dtype and accumulated, until the last micro-batch's backward reduce-scatters it.")


ACCUMULATION_NOTE = (
    "Gradient accumulation (K micro-batches a step, gradient sync on every one, as torchtitan's train_step runs it: "
    "no set_requires_gradient_sync(False) outside its chunked loss's head): a later micro-batch's post_backward "
    "reduce-scatters each group again while the earlier sharded gradients are alive; foreach_reduce allocates a new "
    "output on the reduce-scatter stream (cast to the parameters' dtype there when reduce_dtype differs), adds it "
    "into the existing sharded gradient (sharded_param.grad._local_tensor += new_sharded_grad) and drops it when it "
    "returns (returned only under HSDP's all-reduce), one group at a time: that stream's pool grows by the largest "
    "group's output (the root's: embeddings and head) beyond the sharded gradients, in one expandable segment (its "
    "freed tail extended); without expandable segments the largest block's output keeps a segment of its own beside "
    "the root's (accumulation_pool; measured: tests/test_fsdp_streams.py). Every sharded gradient is alive through a "
    "later micro-batch (the phases' gradients term, counted once), so its backward moments hold no growth of them: a "
    "block's moments its unsharded gradients and reduce-scatter input as in one micro-batch's, and its new output "
    "beside the input once the unsharded gradients are freed (block_moments' output); the root's end its copy-in, or "
    "the head's unsharded gradients, its reduce-scatter input and its new output (root_end_moment's later), beside "
    "the accumulated sharded gradients: the step's peak with two and three micro-batches (measured to 0.01 %, "
    "tests/test_fsdp_streams.py; with one micro-batch the root's output is its sharded gradients, so a later "
    "micro-batch's root end holds the root's output more). With gradient sync turned off for the "
    "earlier micro-batches FSDP2 keeps the unsharded gradients instead (to_accumulated_grad_if_needed): not what "
    "the plan assumes.")
PIPELINE_NOTE = (
    "Pipeline schedules (PyTorch 2.13.0 pipelining/schedules.py): ScheduleInterleaved1F1B and ScheduleZBVZeroBubble "
    "are _PipelineScheduleRuntime schedules, lowered by _add_unshard_reshard (the next three stages a rank computes "
    "kept unsharded, so both of its stages from the step's start), whose UNSHARD action calls unshard(async_op=True) "
    "on every FSDP module of the stage; get_all_gather_streams returns the current (compute) stream for async_op, so "
    "in the training steps the copy-ins and flat all-gather outputs are compute-stream tensors, each freed right "
    "after its group's copy-out (wait_for_unshard before the stage's first compute: async_op, never kept in "
    "all_gather_state), and FSDP2's own pre-forward finds the groups unsharded (FSDPParamGroup.unshard returns at "
    "is_unsharded; torchtitan does not reshard after forward under pipeline parallelism). The flat outputs stand in "
    "for the stage's unsharded parameters not yet copied out (counted whole from the step's start), one group beyond "
    "them at its copy-out, before any activation or accumulated gradient of the step exists: below the forward "
    "phase, whose accumulated gradients (reduce_dtype, every parameter of the rank's stages) alone exceed any group's "
    "flat output. The copy-in stream is still used once: torchtitan builds each PipelineStage without example inputs "
    "(pipeline_parallel.py at b5bcd76), so the first step infers the stages' metadata with a real forward and "
    "backward (_PipelineSchedule._initialize_stages, stage.py _forward_metadata_inference), through FSDP2's own "
    "pre-forward all-gathers on the copy-in stream, and its blocks stay cached there. Every stage is a fully_shard "
    "root of its own (torchtitan parallelizes each model chunk apart: pipeline_parallel.py), with its own "
    "FSDPCommContext and streams (FSDPCommContext.lazy_init draws new ones), so each stage a rank holds keeps its "
    "own copy-in pool (its root's output: the embeddings on the first stage, the norm and head on the last) and its "
    "own reduce-scatter pool (its sharded gradients: together the rank's). Measured on the CPU over four gloo ranks "
    "(pp 2 × dp 2, tests/pipeline_fsdp_streams_child.py): under ScheduleInterleaved1F1B every all-gather of the "
    "steps on the compute stream, each stage's copy-in stream allocating only in the first step. Schedule1F1B and "
    "ScheduleGPipe (PipelineScheduleSingle) issue no unshard: each step's first forward gathers through FSDP2's "
    "pre-forward on the copy-in stream, one stage and one pool a rank.")


def stage_copy_in_pools(stages: Sequence[tuple[sympy.Expr, int]], block_bytes: sympy.Expr,
                        shards: sympy.Expr | int) -> sympy.Expr:
    """Under pipeline parallelism: each stage's own copy-in pool (``copy_in_pool``; ``stages``: each held stage's root
    bytes and blocks), summed over the stages a rank holds (``PIPELINE_NOTE``)."""
    return sympy.Add(*(copy_in_pool(root, block_bytes, shards, blocks) for root, blocks in stages))


def accumulation_pool(groups: Sequence[sympy.Expr], reduce_bytes: int, grad_bytes: int) -> sympy.Expr:
    """Gradient accumulation: what the reduce-scatter stream keeps beyond the sharded gradients, the largest group's
    new output (``groups``: each group's parameters on this rank before sharding; ``ACCUMULATION_NOTE``)."""
    return maximum(*(output_bytes(reduce_bytes, grad_bytes) * g / n_s for g in groups))


STREAMS_NOTE = (
    "The caching allocator keeps every block on the stream it was allocated on and hands a free block only to a "
    "request of that stream (c10/cuda/CUDACachingAllocator.cpp: BlockComparatorSize orders free blocks by stream "
    "first; get_free_block returns none when the candidate's stream differs; segments go back to CUDA only on an "
    "out-of-memory retry or empty_cache). FSDP2 allocates on two side streams (PyTorch 2.13.0 _fsdp_collectives.py): "
    "foreach_reduce allocates the reduce-scatter output on the reduce-scatter stream and, with reduce_dtype the "
    "parameters' dtype (torchtitan: fp32), views it as the block's sharded gradients, which the optimizer's "
    "zero_grad frees at the next step's start: back to that stream's blocks, so from the second step the "
    "reduce-scatter stream keeps all the sharded gradients reserved through the forward and backward; "
    "foreach_all_gather allocates each group's flat all-gather output and its copy-in (the shard cast to "
    "param_dtype) on the all-gather copy-in stream, the root's first, kept in all_gather_state until the first "
    "block's copy-out, so that stream keeps the root's output and a block's reserved. The unsharded parameters "
    "(copy-out), the reduce-scatter input and the activations are the compute stream's. What a phase already counts "
    "of the side streams' tensors is not counted again; in the backward, moment by moment (backward_term): the "
    "blocks' moments count the prefetched block (a flat output until its copy-out) and the finished blocks' sharded "
    "gradients, the root's end every sharded gradient, the loss's moment none of them." + " " + ACCUMULATION_NOTE + " "
    + PIPELINE_NOTE)


def copy_in_pool(root_bytes: sympy.Expr | int, block_bytes: sympy.Expr, shards: sympy.Expr | int,
                 blocks: int = 2) -> sympy.Expr:
    """The most the all-gather copy-in stream holds at once: the root's flat output and its copy-in, or the root's
    output kept beside the first block's copy-in and output, or (``blocks`` ≥ 2) one block's kept beside the next's
    (``foreach_all_gather``, ``FSDPParamGroup.wait_for_unshard``)."""
    moments = [root_bytes * (1 + sympy.Integer(1) / shards), root_bytes + block_bytes * (1 + sympy.Integer(1) / shards)]
    if blocks >= 2:
        moments.append(block_bytes * (2 + sympy.Integer(1) / shards))
    return maximum(*moments)


def stream_pools_term(extras: dict[str, sympy.Expr], pools: dict[str, sympy.Expr]) -> Term:
    """What max reserved holds beyond the plan's peak tensors: each phase's tensors plus what FSDP2's side streams keep
    reserved beyond the side-stream tensors that phase counts (``pools``), the largest, less the largest phase."""
    with_pools = maximum(*(extras[p] + pools.get(p, 0) for p in extras))
    return Term("fsdp_stream_pools", "FSDP2 side streams' cached blocks (reduce-scatter: the sharded gradients; "
                "all-gather copy-in: the root's and a block's flat outputs), beyond the peak's tensors (net: gradients a "
                "phase already counts, as with grad_accum, are not counted again)",
                with_pools - maximum(*extras.values()), "bytes", SRC,
                "get_free_block (stream match), foreach_reduce, foreach_all_gather", STREAMS_NOTE)
