"""The torch engine: a plain PyTorch serving loop, as the planner models it (``memory --mode infer``).

There is no fixed KV pool: every sequence's cache grows as it runs, so the pool is what the budget
leaves after the weights, the runtime (CUDA context, cuBLAS workspace, allocator) and the working
set of the step with the highest peak. Concurrency at a context is the planner's largest batch
(``fit --for batch``); the longest context at a concurrency its largest sequence.
"""

from __future__ import annotations

import sympy

from .. import formats
from ..core.term import Term
from ..planning import fit_batch, fit_seq, plan
from .flags import Flag
from .result import ServePlan
from .setup import ServeError, ServeSetup

NAME = "torch"
VERSION = "PyTorch eager (the planner's serving model)"
FLAGS: tuple[Flag, ...] = ()
DEFAULT_SEQ = 4096
_WEIGHT_KEYS = ("weights", "weight_scales", "embeddings")


# transformers' GGUF loading (docs: huggingface.co/docs/transformers/gguf): "The GGUF checkpoint is dequantized to
# fp32"; from_pretrained(gguf_file=..., dtype=torch.bfloat16) keeps bf16. A PyTorch loop serves a file's weights so.
DEQUANTIZED = "bf16"


def planned_weights(setup: ServeSetup) -> tuple[str, list[str]]:
    """The weight format PyTorch holds: a GGUF file's own types are dequantized when transformers loads them."""
    if setup.weights in formats.names("weights"):
        return setup.weights, []
    return DEQUANTIZED, [f"transformers dequantizes a GGUF file's weights when it loads them: {setup.weights} is "
                         f"planned as {DEQUANTIZED} (--engine llamacpp serves them as stored)"]


def _options(setup: ServeSetup, weights: str) -> dict[str, object]:
    return {"weights": weights, "kv_dtype": setup.kv_dtype, "tp": setup.tp, "pp": setup.pp}


def serve(setup: ServeSetup) -> ServePlan:
    """Weights, pool, concurrency and context of a PyTorch serving loop on ``setup``'s GPU."""
    fmt, notes = planned_weights(setup)
    net, budget, opts = setup.network, setup.budget, _options(setup, fmt)
    seq = setup.seq or DEFAULT_SEQ
    notes += [] if setup.seq else [f"no --seq given: concurrency is asked at {seq:,} tokens"]
    answer = fit_batch(net, budget, "infer", seq=seq, **opts)
    at = answer.plan if answer.plan is not None else plan(net, "infer", batch=1, seq=seq, **opts)
    one = plan(net, "infer", batch=1, seq=seq, **opts)
    found = at.terms()
    weights = sum(found.get(k, 0) for k in _WEIGHT_KEYS)
    non_kv = at.total - at.cache_bytes
    pool = max(budget.bytes - non_kv, 0)
    per_token = sympy.Rational(one.cache_bytes, seq)
    context = None
    if setup.batch is not None:
        longest = fit_seq(net, budget, "infer", batch=setup.batch, **opts)
        context = longest.value if longest.status == "ok" else 0
    if answer.status == "none":
        notes.append(f"nothing fits {budget.label} at {seq:,} tokens, even one sequence")
    terms = tuple(Term(k, k.replace("_", " "), sympy.Integer(v), "bytes", "pytorch") for k, v in found.items())
    notes.extend(at.notes)
    if per_token <= 0:
        raise ServeError(f"{net.name} keeps no per-token cache: there is no KV pool to size")
    return ServePlan(NAME, VERSION, net.name, budget.gpu.name, setup.gpus, fmt, setup.weights_from,
                     setup.kv_dtype, budget.bytes, weights, pool, int(pool / per_token), non_kv, seq,
                     answer.value or 0, setup.batch, context, terms=terms, notes=tuple(notes))
