"""The torch engine: a plain PyTorch serving loop, as the planner models it (``memory --mode infer``).

There is no fixed KV pool: every sequence's cache grows as it runs, so the pool is what the budget
leaves after everything else at the answer's batch: the weights, the runtime (CUDA context, cuBLAS
workspace, allocator) and the working set of the phase with the highest peak. Concurrency at a
context is the planner's largest batch (``fit --for batch``); the longest context at a concurrency
its largest sequence (``fit --for seq``). The terms are the planner's own, each with its formula
and source.

Prefill runs in chunks of ``DEFAULT_PREFILL_CHUNK`` tokens unless ``--prefill-chunk`` says
otherwise (0: whole prompts at once, the planner's ``memory`` default). 8192 is what the engines
people serve with run: vLLM's ``max_num_batched_tokens`` for its OpenAI server on a GPU of 70 GiB
or more, and SGLang's ``chunked_prefill_size`` on 80 GB cards; a whole-prompt prefill caps the
concurrency by activations no such engine holds.
"""

from __future__ import annotations

import sympy

from ..library.inference import prefill_text
from ..planning import Plan, fit_batch, fit_seq, plan
from .flag_table import DEFAULT_PREFILL_CHUNK, TABLES
from .flags import Flag
from .result import ServePlan
from .setup import ServeError, ServeSetup

NAME = "torch"
VERSION = "PyTorch eager (the planner's serving model)"
FLAGS: tuple[Flag, ...] = TABLES[NAME]
DEFAULT_SEQ = 4096
_WEIGHT_KEYS = ("weights", "weight_scales", "embeddings")


# transformers' GGUF loading (docs: huggingface.co/docs/transformers/gguf): "The GGUF checkpoint is dequantized to
# fp32"; from_pretrained(gguf_file=..., dtype=torch.bfloat16) keeps bf16. A PyTorch loop serves a file's weights so.
DEQUANTIZED = "bf16"


def planned_weights(setup: ServeSetup) -> tuple[str, list[str]]:
    """The weight format PyTorch holds: a GGUF file's own types are dequantized when transformers loads them."""
    if not setup.weights.startswith("gguf"):
        return setup.weights, []
    return DEQUANTIZED, [f"transformers dequantizes a GGUF file's weights when it loads them: {setup.weights} is "
                         f"planned as {DEQUANTIZED} (--engine llamacpp serves them as stored)"]


def prefill_chunk(setup: ServeSetup) -> int | None:
    """The chunk the plan assumes: ``--prefill-chunk`` (0: None, whole prompts), else the default."""
    chunk = setup.option("prefill_chunk", DEFAULT_PREFILL_CHUNK)
    return int(chunk) or None  # type: ignore[call-overload]


def _options(setup: ServeSetup, weights: str) -> dict[str, object]:
    return {"weights": weights, "kv_dtype": setup.kv_dtype, "tp": setup.tp, "pp": setup.pp,
            "prefill_chunk": prefill_chunk(setup)}


def peak_terms(at: Plan) -> tuple:
    """The planner's terms that make up ``at``'s peak: the resident ones and the peak phase's, as the planner wrote them."""
    if at.layout is None:
        return tuple(t for t in at.formula.terms)
    return (*at.layout.resident, *at.layout.phases[at.peak_phase])


def _values(at: Plan) -> dict[sympy.Symbol, object]:
    """Every symbol's value at ``at`` (the given ones and the defined ones, such as N)."""
    evaluation = at.evaluate_terms()
    return {**evaluation.values, **evaluation.derived}


def serve(setup: ServeSetup) -> ServePlan:
    """Weights, pool, concurrency and context of a PyTorch serving loop on ``setup``'s GPU."""
    fmt, notes = planned_weights(setup)
    net, budget, opts = setup.network, setup.budget, _options(setup, fmt)
    seq = setup.seq or DEFAULT_SEQ
    notes += [] if setup.seq else [f"no --seq given: concurrency is asked at {seq:,} tokens"]
    answer = fit_batch(net, budget, "infer", seq=seq, **opts)
    at = answer.plan if answer.plan is not None else plan(net, "infer", batch=1, seq=seq, **opts)
    batch = at.regime.batch
    if at.cache_bytes <= 0:
        raise ServeError(f"{net.name} keeps no per-token cache: there is no KV pool to size")
    found = at.terms()
    weights = sum(found.get(k, 0) for k in _WEIGHT_KEYS)
    non_kv = at.total - at.cache_bytes
    pool = max(budget.bytes - non_kv, 0)
    per_token = sympy.Rational(at.cache_bytes, batch * seq)
    context = None
    if setup.batch is not None:
        longest = fit_seq(net, budget, "infer", batch=setup.batch, **opts)
        context = longest.value if longest.status == "ok" and longest.value is not None else 0
    if answer.status != "none":
        notes.append(f"the pool is the budget less everything else at {batch} sequences of {seq:,} tokens "
                     f"(the {at.peak_phase} phase sets the peak)")
    notes.extend(n for n in at.notes if not n.startswith("prefill:"))
    chunk = prefill_chunk(setup)
    figures = {"prefill": prefill_text(chunk), "prefill_chunk": chunk, "peak_phase": at.peak_phase}
    return ServePlan(NAME, VERSION, net.name, budget.gpu.name, setup.gpus, fmt, setup.weights_from,
                     setup.kv_dtype, budget.bytes, weights, pool, int(pool / per_token), non_kv, seq,
                     answer.value or 0, setup.batch, context, terms=peak_terms(at), values=_values(at),
                     figures=figures, notes=tuple(notes))
