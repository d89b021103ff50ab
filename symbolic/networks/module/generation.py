"""An encoder-decoder's generation with a KV cache, probed on the meta device (issue 29: T5, BART, Whisper, TrOCR).

A transformers encoder-decoder (a source whose forward takes ``decoder_input_ids``) is served by
generating: the encoder runs once, its output is kept for the whole generation, and the decoder
runs token by token with an ``EncoderDecoderCache`` of two ``DynamicCache``s (what ``generate``
makes in transformers 5.24): per decoder layer, the cross-attention K and V computed once from the
encoder output (B × S positions) and the self-attention K and V grown by one position per step.
``trace`` runs what ``generate(num_beams=1, do_sample=False)``'s loop runs, on the meta device:

1. ``encoder``: the encoder pass over the inputs (its output kept);
2. ``prefill``: the decoder over its one-token prompt (the start token), which fills the
   cross-attention cache, then the loop's fp32 copy of the last logits, its argmax, the ids grown;
3. ``decode``: the last step, with the self-attention cache at T − 1 positions: one token in, the
   cache grown to T (``torch.cat``: the old and the new copy of one layer's K or V alive together),
   the logits' fp32 copy beside the previous step's, the ids grown. The state before it (the cache
   at T − 1, the ids, the previous logits) is built by one decoder pass over T − 1 tokens whose own
   moments are not counted: it leaves exactly the tensors the loop's T − 2 steps would.

``--beams N`` (``generate(num_beams=N)``, ``GenerationMixin._beam_search``): the encoder runs over B
samples and its output is expanded to B·N rows (``_expand_inputs_for_generation``: ``repeat_interleave``,
the B rows freed), both caches hold B·N rows, and each step runs the loop's own helpers (the fp32
logits' log-softmax over B·N × V, the top 2·N continuations over N·V, the running and finished
sequences, scores and beam indices) and reorders both caches by ``index_select`` (one layer's K or V
copied at a time). ``--sample`` (``do_sample=True``, ``GenerationMixin._sample``): the processors sampling
adds (top-k at 50: a B × V mask and a masked copy), the softmax's probabilities, the multinomial draw.

Whisper's own ``generate`` (``WhisperGenerationMixin``) feeds the encoder a copy of each sample's
input window, kept throughout: made here too and counted with the caller's inputs.

T is the decoder's length at the last step: ``generate(max_new_tokens=T)`` from the one-token
prompt ends with T positions in each self-attention layer (the last token generated is not fed
back). The live bytes after every operator (``probe._Live``: each storage once; weights, buffers
and the caller's inputs not new) at each phase's moments, the encoder output's and the caches'
bytes are fitted exactly as polynomials in B and the input sizes (``probe.grid``, degree 1 in B
and 2 in each size) and checked at an independent point (``probe.CHECK``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from ...core.term import Term
from ...math.extrema import maximum
from . import cache, probe
from .kernels import following
from .source import ModuleError, ModuleSource, make_inputs

SRC = "torch-meta"
WHERE = "inference.module.generate"
GENERATE_NOTE = ("inference: generation with a KV cache, as transformers' generate runs it (greedy; --beams N: beam "
                 "search, --sample: sampling) (the encoder once, its output kept; the decoder token by token from one "
                 "start token, each layer's "
                 "cross-attention K/V computed once and its self-attention K/V grown to T positions), measured on "
                 "the meta device")
DECODER = ("decoder_input_ids", "labels")  # the forward's inputs the generation loop makes itself
PHASES = ("encoder", "prefill", "decode")
STATE = ("inputs", "encoder_output", "cross_cache", "self_cache")
POSITIONS = ("max_target_positions", "max_position_embeddings")  # a decoder's learned positions (Whisper; BART)


def decoder_positions(source: ModuleSource) -> int | None:
    """The decoder's learned positions where the config states them (Whisper's, BART's); None for T5's relative ones."""
    for field in POSITIONS:
        value = source.arguments.get(field)
        if type(value) is int and value > 0:
            return value
    return None


def generates(source: ModuleSource) -> bool:
    """Whether ``source`` is a transformers encoder-decoder whose inference is generation with a KV cache."""
    return source.origin == "transformers" and any(i.name == "decoder_input_ids" for i in source.inputs)


@dataclass
class GenerationTrace:
    """One generation at one (B, sizes...): the live bytes at each phase's moments and the state's bytes."""

    encoder: list[int]
    prefill: list[int]
    decode: list[int]
    inputs: int  # the encoder's inputs (the caller holds them throughout; Whisper's generate a copy too)
    encoder_output: int
    cross_cache: int  # every decoder layer's cross-attention K and V
    self_cache: int  # every decoder layer's self-attention K and V at T positions


@dataclass(frozen=True)
class GenerationFit:
    """The generation's bytes as polynomials in (B, sizes...): each phase's candidate moments, the state's parts."""

    names: tuple[str, ...]
    encoder: tuple[probe.Poly, ...]
    prefill: tuple[probe.Poly, ...]
    decode: tuple[probe.Poly, ...]
    inputs: probe.Poly
    encoder_output: probe.Poly
    cross_cache: probe.Poly
    self_cache: probe.Poly
    buffers: int = 0  # the model's buffers' bytes (resident)

    def peak(self, phase: str, point: probe.Point) -> Any:
        return max(p.at(point) for p in getattr(self, phase))


def _cache_bytes(cache_obj: Any) -> int:
    """Bytes of a DynamicCache's tensors (each layer's keys and values)."""
    return sum(int(t.untyped_storage().nbytes()) for layer in cache_obj.layers
               for t in (layer.keys, layer.values) if t is not None)


def _new_cache(model: Any) -> Any:
    """The cache ``generate`` makes for an encoder-decoder: self-attention and cross-attention DynamicCaches."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    return EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))


def _segmented(model: Any) -> bool:
    """Whether the model's own generate is Whisper's, which cuts each sample's 30 s window from the input features
    and concatenates them (``WhisperGenerationMixin.generate``, generation_whisper.py: ``segment_input``): a copy."""
    return any(c.__name__ == "WhisperGenerationMixin" for c in type(model).__mro__)


def _warpers(model: Any) -> list[Any]:
    """The processors sampling adds (``_get_logits_processor``: top-k at the generation config's top_k, else 50).

    Whisper's own generate passes its processors and adds none of them (measured, transformers 5.24).
    """
    from transformers.generation.logits_process import TopKLogitsWarper

    top_k = model.generation_config.top_k
    return [] if _segmented(model) or top_k == 0 else [TopKLogitsWarper(top_k=top_k or 50)]


class _Loop:
    """What generate's greedy or sampling loop holds between steps: the ids, the last logits' fp32 copy and
    (sampling) its processed scores and their probabilities (``GenerationMixin._sample``, transformers 5.24)."""

    def __init__(self, ids: Any, warpers: list[Any] | None = None) -> None:
        self.ids = ids
        self.logits: Any = None
        self.warpers = warpers  # None: greedy

    def step(self, model: Any, encoder: Any, cache_obj: Any, tokens: Any) -> None:
        """One decoder pass over ``tokens``, then the loop's fp32 copy of the last logits, its argmax (or its
        processors, softmax and multinomial draw), the ids grown."""
        import torch

        out = model(encoder_outputs=encoder, decoder_input_ids=tokens, cache=cache_obj, use_cache=True)
        self.logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)  # the previous copy freed here
        if self.warpers is None:
            nxt = torch.argmax(self.logits, dim=-1)
        else:
            self.scores = self.logits
            for warper in self.warpers:
                self.scores = warper(self.ids, self.scores)
            self.probs = torch.nn.functional.softmax(self.scores, dim=-1)
            nxt = torch.multinomial(self.probs, num_samples=1).squeeze(1)
        self.ids = torch.cat([self.ids, nxt[:, None]], dim=-1)
        del out, nxt


class _Beams:
    """What generate's beam-search loop holds between steps (``GenerationMixin._beam_search``, transformers 5.24).

    The model's own helpers run as its loop runs them; each attribute is one of the loop's locals,
    assigned in its order, so that an old value is freed where the loop frees it: the running and
    finished sequences (B × N × (1 + T) int64) and beam indices (B × N × T int32), the scores, the
    fp32 logits and their log-softmax over B·N × V, the top continuations over N·V (``beams_to_keep``: 2·N
    with at most one end-of-sequence token in the generation config), and the caches reordered by
    ``index_select`` after each step.
    """

    def __init__(self, model: Any, batch: int, beams: int, steps: int, ids: Any) -> None:
        import torch
        from transformers.generation.stopping_criteria import MaxLengthCriteria, StoppingCriteriaList

        self.model, self.batch, self.beams, self.length = model, batch, beams, steps + 1  # max_length
        eos = model.generation_config.eos_token_id
        self.keep = max(2, 1 + (len(eos) if isinstance(eos, list) else eos is not None)) * beams  # beams_to_keep
        self.stopping = StoppingCriteriaList([MaxLengthCriteria(max_length=self.length)])
        meta = {"device": "meta"}
        self.mask = torch.cat((torch.ones(beams, dtype=torch.bool), torch.zeros(self.keep - beams, dtype=torch.bool))
                              ).to("meta")
        self.running = torch.full((batch, beams, self.length), 0, dtype=torch.int64, **meta)
        self.running[:, :, :1] = model._unflatten_beam_dim(ids, batch, beams)
        self.sequences = self.running.detach().clone()
        self.running_scores = torch.zeros((batch, beams), dtype=torch.float, **meta)
        self.running_scores[:, 1:] = -1e9
        self.scores = torch.full((batch, beams), fill_value=-1e9, dtype=torch.float, **meta)
        self.finished = torch.zeros((batch, beams), dtype=torch.bool, **meta)
        self.open = torch.ones((batch, 1), dtype=torch.bool, **meta)
        self.hits = torch.zeros((batch, beams), dtype=torch.bool, **meta)
        self.running_indices = torch.full((batch, beams, self.length - 1), fill_value=-1, dtype=torch.int32, **meta)
        self.indices = self.running_indices.detach().clone()
        self.flat = ids

    def step(self, encoder: Any, cache_obj: Any, cur_len: int, whole: bool = False) -> None:
        """One iteration at ``cur_len`` tokens: the decoder over the last token (``whole``: over all of them)."""
        import torch

        m, b, n = self.model, self.batch, self.beams
        if cur_len > 1:
            self.flat = m._flatten_beam_dim(self.running[:, :, :cur_len])
        tokens = self.flat if whole or cur_len == 1 else self.flat[:, -1:]
        out = m(encoder_outputs=encoder, decoder_input_ids=tokens, cache=cache_obj, use_cache=True)
        del tokens
        self.logits = out.logits[:, -1, :].to(copy=True, dtype=torch.float32)
        self.log_probs = torch.nn.functional.log_softmax(self.logits, dim=-1)
        del out
        self.log_probs = m._unflatten_beam_dim(self.log_probs, b, n)
        self.log_probs = self.log_probs + self.running_scores[:, :, None]
        self.log_probs = torch.reshape(self.log_probs, (b, -1))
        self.top_scores, self.top_sequences, self.top_indices = m._get_top_k_continuations(
            accumulated_log_probs=self.log_probs, running_sequences=self.running,
            running_beam_indices=self.running_indices, cur_len=cur_len, decoder_prompt_len=1, do_sample=False,
            beams_to_keep=self.keep, num_beams=n, batch_size=b)
        self.hits = self.stopping(m._flatten_beam_dim(self.top_sequences[:, :, :cur_len + 1]), None)
        self.hits = m._unflatten_beam_dim(self.hits, b, self.keep)
        self.running, self.running_scores, self.running_indices = m._get_running_beams_for_next_iteration(
            topk_log_probs=self.top_scores, topk_running_sequences=self.top_sequences,
            topk_running_beam_indices=self.top_indices, next_token_hits_stopping_criteria=self.hits, num_beams=n)
        self.sequences, self.scores, self.indices, self.finished = m._update_finished_beams(
            sequences=self.sequences, topk_running_sequences=self.top_sequences, beam_scores=self.scores,
            topk_log_probs=self.top_scores, beam_indices=self.indices, topk_running_beam_indices=self.top_indices,
            is_early_stop_heuristic_unsatisfied=self.open, is_sent_finished=self.finished,
            next_token_hits_stopping_criteria=self.hits, top_num_beam_mask=self.mask, num_beams=n, cur_len=cur_len,
            decoder_prompt_len=1, length_penalty=1.0, early_stopping=False)
        self.beam_idx = m._flatten_beam_dim(self.running_indices[..., cur_len - 1])
        cache_obj.reorder_cache(self.beam_idx)
        self.open = m._check_early_stop_heuristic(
            is_early_stop_heuristic_unsatisfied=self.open, running_beam_scores=self.running_scores,
            beam_scores=self.scores, is_sent_finished=self.finished, cur_len=cur_len + 1, max_length=self.length,
            decoder_prompt_len=1, early_stopping=False, length_penalty=1.0)
        self.unfinished = m._beam_search_has_unfinished_sequences(self.open, self.finished, self.hits, False)


@contextlib.contextmanager
def _tracing(source: ModuleSource, batch: int, sizes: Mapping[str, int], live: Any,
             kernels: str | None) -> Iterator[None]:
    """A generate loop's passes on the meta device: no gradients, every storage tracked, the kernels followed; any
    failure of the model's own code said in one line naming the module."""
    import torch

    from .transformers_task import _meta_masks

    try:
        with torch.no_grad(), probe._tracking(live.track), probe._quiet(), following(kernels), _meta_masks():
            yield
    except ModuleError:
        raise
    except Exception as err:
        raise ModuleError(probe._forward_error(source, batch, sizes, err)) from None


def trace(source: ModuleSource, batch: int, sizes: Mapping[str, int], dtype: str, model: Any,
          kernels: str | None = None, beams: int = 1, sample: bool = False) -> GenerationTrace:
    """Encoder, prompt and the last decode step on the meta device (see the module docstring)."""
    import torch

    steps = int({**source.sizes, **sizes}["T"])
    if steps < 2:
        raise ModuleError(f"{source.label}: generation needs T ≥ 2 decoder tokens (the start token and one more)")
    if beams > 1:
        return _beam_trace(source, batch, sizes, dtype, model, kernels, beams)
    inputs, tensors, live, keep = _setup(source, batch, sizes, dtype, model)

    def since(start: int) -> list[int]:
        return live.moments[start:] + [live.current]

    with _tracing(source, batch, sizes, live, kernels):
        encoder = model.get_encoder()(**inputs)
        encoder_moments = since(0)
        encoder_output = int(encoder.last_hidden_state.untyped_storage().nbytes())
        start = len(live.moments)
        warpers = _warpers(model) if sample else None
        loop = _Loop(torch.zeros((batch, 1), dtype=torch.int64, device="meta"), warpers)
        prompt = _new_cache(model)
        loop.step(model, encoder, prompt, loop.ids)
        prefill_moments = since(start)
        cross = _cache_bytes(prompt.cross_attention_cache)
        del loop, prompt
        # the state of the last step: the cache at T - 1 positions, the ids at T, the previous logits' copy
        loop = _Loop(torch.zeros((batch, steps - 1), dtype=torch.int64, device="meta"), warpers)
        state = _new_cache(model)
        loop.step(model, encoder, state, loop.ids)
        start = len(live.moments)
        loop.step(model, encoder, state, loop.ids[:, -1:])
        decode_moments = since(start)
        self_cache = _cache_bytes(state.self_attention_cache)
    del keep, state, loop, encoder
    return GenerationTrace(encoder_moments, prefill_moments, decode_moments,
                           sum(int(t.untyped_storage().nbytes()) for t in tensors), encoder_output, cross, self_cache)


def _setup(source: ModuleSource, batch: int, sizes: Mapping[str, int], dtype: str,
           model: Any) -> tuple[dict[str, Any], list[Any], probe._Live, list[Any]]:
    """The encoder's inputs on the meta device, the caller's tensors, the live-bytes tracker, the weights' storages."""
    import torch

    made = make_inputs(source, batch, sizes, device="meta", float_dtype=getattr(torch, dtype))
    inputs = {k: v for k, v in made.items() if k not in DECODER}
    tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
    if _segmented(model):  # the encoder reads generate's copy of each sample's window, kept throughout
        inputs = {k: torch.cat([v[i:i + 1] for i in range(batch)]) if k == "input_features" else v
                  for k, v in inputs.items()}
        tensors.append(inputs["input_features"])
    live = probe._Live()
    keep = [t.untyped_storage() for t in (*model.parameters(), *model.buffers())]  # their ids stay theirs
    for t in (*model.parameters(), *model.buffers(), *tensors):
        live.known(t)
    return inputs, tensors, live, keep


def _beam_trace(source: ModuleSource, batch: int, sizes: Mapping[str, int], dtype: str, model: Any,
                kernels: str | None, beams: int) -> GenerationTrace:
    """``trace`` for ``generate(num_beams=beams)``: the encoder output expanded to B·N, the beam loop's state."""
    import torch

    steps = int({**source.sizes, **sizes}["T"])
    inputs, tensors, live, keep = _setup(source, batch, sizes, dtype, model)

    def since(start: int) -> list[int]:
        return live.moments[start:] + [live.current]

    with _tracing(source, batch, sizes, live, kernels):
        encoder = model.get_encoder()(**inputs)  # _expand_inputs_for_generation: repeat_interleave, old freed
        encoder.last_hidden_state = encoder.last_hidden_state.repeat_interleave(beams, dim=0)
        ids = torch.zeros((batch, 1), dtype=torch.int64, device="meta").repeat_interleave(beams, dim=0)
        loop = _Beams(model, batch, beams, steps, ids)
        del ids
        encoder_moments = since(0)
        encoder_output = int(encoder.last_hidden_state.untyped_storage().nbytes())
        start, prompt = len(live.moments), _new_cache(model)
        loop.step(encoder, prompt, 1)
        prefill_moments = since(start)
        cross = _cache_bytes(prompt.cross_attention_cache)
        del loop, prompt
        # the state of the last step: the iteration at T - 1 tokens (one pass over them), then the last one
        ids = torch.zeros((batch * beams, 1), dtype=torch.int64, device="meta")
        loop, state = _Beams(model, batch, beams, steps, ids), _new_cache(model)
        del ids
        loop.step(encoder, state, steps - 1, whole=True)
        start = len(live.moments)
        loop.step(encoder, state, steps)
        decode_moments = since(start)
        self_cache = _cache_bytes(state.self_attention_cache)
    del keep, state, loop, encoder
    return GenerationTrace(encoder_moments, prefill_moments, decode_moments,
                           sum(int(t.untyped_storage().nbytes()) for t in tensors), encoder_output, cross, self_cache)


def fit(source: ModuleSource, dtype: str = "float32", kernels: str | None = None, beams: int = 1,
        sample: bool = False) -> GenerationFit:
    """Fit the generation's bytes (generate's num_beams, do_sample) at ``probe.grid``'s points; checked at
    ``probe.CHECK``'s."""
    from .inference import build

    names = source.size_names
    base = [int(source.sizes[n]) for n in names]
    exps = probe.monomials(len(names))
    model = build(source, dtype)
    points = probe.grid(base)
    traces = [trace(source, p[0], dict(zip(names, p[1:])), dtype, model, kernels, beams, sample) for p in points]
    inv = probe.inverse(points, exps)

    def fitted(values: Sequence[int]) -> probe.Poly:
        return probe.Poly.of(probe.solve(inv, values), exps)

    result = GenerationFit(tuple(names), *(probe._moments(traces, phase, fitted) for phase in PHASES),
                           *(fitted([getattr(t, part) for t in traces]) for part in STATE),
                           sum(int(b.untyped_storage().nbytes()) for b in model.buffers()))
    point = (probe.CHECK[0], *(probe.CHECK[1] * v for v in base))
    _check(source, result, trace(source, point[0], dict(zip(names, point[1:])), dtype, model, kernels, beams, sample), point)
    return result


def _check(source: ModuleSource, result: GenerationFit, check: GenerationTrace, point: probe.Point) -> None:
    """The fit against a generation at an independent point: a one-line error where it disagrees."""
    wrong = [f"{phase} peak {max(getattr(check, phase)):,} measured, {result.peak(phase, point)} fitted"
             for phase in PHASES if result.peak(phase, point) != max(getattr(check, phase))]
    wrong += [f"{part} {getattr(check, part):,} measured, {getattr(result, part).at(point)} fitted"
              for part in STATE if getattr(result, part).at(point) != getattr(check, part)]
    if wrong:
        shown = ", ".join(f"{n}={v}" for n, v in zip((probe.BATCH, *result.names), point))
        raise ModuleError(f"{source.label}: its generation's bytes are not a polynomial of degree 1 in {probe.BATCH} "
                          f"and 2 in each input size (checked at {shown}: {'; '.join(wrong)})")


# --- plain data for the cache -------------------------------------------------------------------
def _poly_data(p: probe.Poly) -> list[list[Any]]:
    return [[list(e), str(c)] for e, c in p.coefs]


def _poly(data: Sequence[Any]) -> probe.Poly:
    return probe.Poly(tuple((tuple(int(x) for x in e), cache.fraction(c)) for e, c in data))


def to_data(f: GenerationFit) -> dict[str, Any]:
    return {"names": list(f.names), **{p: [_poly_data(x) for x in getattr(f, p)] for p in PHASES},
            **{p: _poly_data(getattr(f, p)) for p in STATE}, "buffers": f.buffers}


def from_data(data: Mapping[str, Any]) -> GenerationFit:
    return GenerationFit(tuple(str(n) for n in data["names"]),
                         *(tuple(_poly(x) for x in data[p]) for p in PHASES), *(_poly(data[p]) for p in STATE),
                         int(data["buffers"]))


# --- the plan's terms ---------------------------------------------------------------------------
def _term(key: str, title: str, expr: Any, note: str = "") -> Term:
    return Term(key, title, sympy.sympify(expr), "bytes", SRC, WHERE, note)


def phases(f: GenerationFit, at: Callable[[probe.Poly], sympy.Expr]) -> dict[str, tuple[Term, ...]]:
    """The generation's phases as named terms (``at``: a fitted polynomial -> its expression in the plan's sizes)."""
    inputs = _term("inputs", "the encoder's inputs, held by the caller throughout (with Whisper's generate, its copy "
                   "of each sample's window too)", at(f.inputs))
    state = {p: at(getattr(f, p)) for p in ("encoder_output", "cross_cache", "self_cache")}
    held = sum(state.values())
    return {
        "encoder": (inputs, _term("encoder_live", "what the encoder pass holds at its peak (its output included)",
                                  maximum(*(at(p) for p in f.encoder)))),
        "prefill": (inputs, _term("encoder_output", "the encoder's output, kept for the whole generation",
                                  state["encoder_output"]),
                    _term("prefill_live", "what the prompt's pass holds at its peak besides the encoder output (the "
                          "cross-attention cache it fills, its logits)",
                          maximum(*(at(p) for p in f.prefill)) - state["encoder_output"])),
        "decode": (inputs,
                   _term("encoder_output", "the encoder's output, kept for the whole generation", state["encoder_output"]),
                   _term("cross_cache", "cross-attention cache: every decoder layer's K and V of the encoder output",
                         state["cross_cache"], "2 · decoder layers · B · S · k/v width · bytes, computed once"),
                   _term("self_cache", "self-attention cache: every decoder layer's K and V at T positions",
                         state["self_cache"], "2 · decoder layers · B · T · k/v width · bytes, grown one position "
                         "per step"),
                   _term("decode_transient", "what the last decode step holds besides the caches and the encoder "
                         "output (a layer's K/V while the cache grows, its logits and their fp32 copies, the ids; "
                         "with beams, their scores, sequences and a layer's reordered copy)",
                         maximum(*(at(p) for p in f.decode)) - held)),
    }


def decoding_key(beams: int, sample: bool) -> tuple[str, ...]:
    """The decoding's part of a fit's cache key: () for greedy (its keys as before beams and sampling)."""
    return (f"beams={beams}",) * (beams > 1) + ("sample",) * sample


def decoding(beams: int, sample: bool) -> str:
    """How generate decodes, in words."""
    if beams > 1:
        return (f"beam search with {beams} beams (num_beams={beams}: the encoder output and both caches held for "
                f"B·{beams} rows, reordered by index_select each step)")
    return "sampling (do_sample=True: the processors' copies, softmax and multinomial)" if sample else "greedy"


def note(sizes: Mapping[str, int], beams: int = 1, sample: bool = False) -> str:
    """What the plan assumed: the decoding (--beams, --sample), T the decoder's length at the last step."""
    shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
    return (f"generation at {shown}, {decoding(beams, sample)}: T = max_new_tokens from the one-token decoder prompt "
            "(--set T=N), no end-of-sequence stop")
