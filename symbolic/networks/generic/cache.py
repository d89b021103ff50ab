"""Serving cache of any transformers model: a prefill on the meta device, the cache object measured.

``cache_formula(config)`` builds the model in bfloat16 on the ``meta`` device, runs
``model(input_ids, use_cache=True)`` for a B × S batch at a few (B, S) points, adds up the bytes of
the floating-point tensors the returned cache holds (keys, values, latents, recurrent and
convolution states) and recovers bytes = B·(c_0 + c_S·S + c_W·min(S, K)) from two lengths below
the config's window and two beyond it: attention caches grow with S, recurrent states do not, and
sliding-window (or chunked) layers stop growing at their cap K. The formula is checked at two
independent points (below and beyond the window) against a real prefill; a cache that does not
follow that form is reported as unverified, never guessed. A model whose forward cannot run on the
meta device and is too large for the CPU runs there with its vocabulary, FFN widths and expert
counts cut (no cache tensor is sized by them; two different cuts must give the same bytes); a type
whose forward takes no cache argument and returns none (OpenAI GPT) keeps 0 bytes, said in a note.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import sympy

from ... import formats
from ...core.symbols import B, S
from ...core.term import Term
from .probes import SOURCE, GenericError, _first_line, _quiet, built_model, config_object

POINTS = ((1, 8), (1, 16))
CHECK = (3, 24)
WINDOW_KEYS = ("sliding_window", "attention_chunk_size", "sliding_window_size", "local_window_size")
MAX_PROBE = 2**17  # the longest prefill measured (meta device: only shapes are computed)
MEASURED_IN = "bf16"  # the cache is measured with the model in bfloat16
BYTES_PER_ELEMENT = formats.nbytes(MEASURED_IN)


@dataclass(frozen=True)
class CacheFormula:
    """The measured serving cache of one config: bytes = B·(per_sequence + per_token·S)."""

    model_type: str
    cache_class: str
    per_sequence: sympy.Rational  # bytes per sequence that do not grow with S (recurrent states)
    per_token: sympy.Rational  # bytes per sequence and token of the layers that keep every token
    verified: bool
    measured: dict[str, int]  # "BxS" -> bytes of the real cache object
    windowed: sympy.Rational = sympy.Integer(0)  # bytes per token of the layers that keep at most ``cap`` tokens
    cap: int = 0
    note: str = ""  # how it was measured where that is not the plain meta-device prefill

    @property
    def expr(self) -> sympy.Expr:
        """Cache bytes in B and S."""
        window = self.windowed * sympy.Min(S, self.cap) if self.windowed and self.cap else 0
        return sympy.expand(B * (self.per_sequence + self.per_token * S)) + B * window

    def term(self) -> Term:
        """The cache as a Term (bytes, bfloat16 elements)."""
        if not self.measured:
            return Term("kv_cache", "serving cache (none kept)", self.expr, "bytes", SOURCE, note=self.note)
        return Term("kv_cache", "serving cache (measured after a prefill)", self.expr, "bytes", SOURCE,
                    note=f"{self.cache_class} after a prefill, bfloat16, from {len(POINTS)} (B, S) points"
                         + ("" if self.verified else "; not confirmed at a further point")
                         + (f"; {self.note}" if self.note else ""))

    def bytes_at(self, batch: int, seq: int) -> int:
        """Cache bytes at B = batch, S = seq."""
        return int(self.expr.xreplace({B: batch, S: seq}))


def cache_bytes_of(cache: Any) -> int:
    """Bytes of the floating-point tensors a transformers cache object holds (each tensor once)."""
    import torch

    seen: set[int] = set()
    total = 0

    def walk(obj: Any, depth: int) -> None:
        nonlocal total
        if isinstance(obj, torch.Tensor):
            if id(obj) not in seen and obj.is_floating_point():
                seen.add(id(obj))
                total += obj.numel() * obj.element_size()
            return
        if depth > 4 or obj is None or isinstance(obj, (int, float, str, bool)):
            return
        if isinstance(obj, (list, tuple)):
            for x in obj:
                walk(x, depth + 1)
        elif isinstance(obj, dict):
            for x in obj.values():
                walk(x, depth + 1)
        elif hasattr(obj, "__dict__"):
            for x in vars(obj).values():
                walk(x, depth + 1)

    walk(cache, 0)
    return total


CPU_LIMIT = 3 * 2**30  # bytes of bfloat16 weights a CPU fallback may allocate (uninitialised)
CPU_WINDOW = 512  # the longest window probed on the CPU (not with a cut config: too slow there, left unconfirmed)
CACHE_KEYS = ("cache", "past_key_values", "cache_params", "state")


NO_CACHE_NOTE = "transformers keeps no cache for this type: its forward takes no cache argument and returns none"


class NoCache(GenericError):
    """The model's output holds no cache object."""


_GIVEN_CACHE: weakref.WeakSet[Any] = weakref.WeakSet()  # models that fill a cache they are given (XLM)


def _prefill(model: Any, batch: int, seq: int) -> tuple[int, str]:
    import torch

    device = next(model.parameters()).device
    ids = torch.zeros((batch, seq), dtype=torch.long, device=device)
    cache = None
    if model not in _GIVEN_CACHE:
        with _quiet(), torch.no_grad():
            out = model(input_ids=ids, use_cache=True)
            cache = next((out[k] for k in CACHE_KEYS if k in out and out[k] is not None), None)
    if cache is None and "cache" in _forward_args(model):  # XLM fills a cache it is given, returns none
        from transformers import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
        with _quiet(), torch.no_grad():
            model(input_ids=ids, use_cache=True, cache=cache)
        _GIVEN_CACHE.add(model)  # later prefills of this model go straight to a given cache
    if cache is None:
        raise NoCache("the model returned no cache object")
    return cache_bytes_of(cache), type(cache).__name__


CACHE_ARGS = ("past_key_values", "cache", "cache_params", "mems", "use_mems", "use_cache", "past_buckets_states",
              "cache_position", "past")


def _forward_args(model: Any) -> set[str]:
    """The named parameters of the model's forward."""
    import inspect

    return set(inspect.signature(model.forward).parameters)


def keeps_no_cache(model: Any) -> bool:
    """True when the forward takes no cache argument at all (and, checked by the caller, returns none)."""
    return not _forward_args(model) & set(CACHE_ARGS)


def _measure(model: Any) -> tuple[dict[tuple[int, int], int], str]:
    measured = {}
    cls = ""
    for b, s in POINTS:
        measured[(b, s)], cls = _prefill(model, b, s)
    return measured, cls


def _runnable(data: Mapping[str, Any], architecture: str | None) -> tuple[Any, Any, dict[tuple[int, int], int], str, str]:
    """(model, config, measurements, cache class, note): on the meta device, else on the CPU; as a decoder if needed.

    BERT-style ``ForCausalLM`` classes keep a cache only with ``is_decoder=True`` (which adds no
    tensor); models whose forward reads tensor values (``.item()``) run on the CPU, their weights
    allocated but not initialised (``no_init_weights``), when those fit in ``CPU_LIMIT``; a larger
    one runs with the fields no cache tensor is sized by (vocabulary, FFN widths, expert counts)
    shrunk, at two different shrinks that must give the same cache bytes.
    """

    model, config = built_model(config_object(data), architecture)
    cls = type(model)
    if getattr(config, "languages", None) and hasattr(model, "set_default_language"):  # X-MOD's adapters
        config.default_language = config.default_language or config.languages[0]
    decoder_too = getattr(config, "is_decoder", True) is False
    size = sum(p.numel() for p in model.parameters()) * 2
    failure: Exception = GenericError("no prefill ran")
    for device in ("meta", "cpu"):
        for decoder in (False, True) if decoder_too else (False,):
            config.is_decoder = decoder or not decoder_too
            try:
                if device == "cpu" and size > CPU_LIMIT:
                    return _shrunk_run(cls, config, size)
                model = _on(cls, config, device)
                return (model, config, *_measure(model), "")
            except Exception as err:  # the next way to run it, or the last error reported
                failure = err
        if not isinstance(failure, NoCache) or device == "cpu":
            continue
        if keeps_no_cache(model):  # OpenAI GPT: no cache argument in, no cache object out
            return model, config, {}, "", NO_CACHE_NOTE
        raise failure  # the meta run worked but no cache object came back, decoder or not: the CPU won't differ
    raise failure


SHRINK_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TOP_K = ("num_experts_per_tok", "top_k", "moe_topk", "num_experts_per_token", "moe_k")
SHRINK_WIDTHS = ("intermediate_size", "ffn_dim", "ffn_hidden_size", "d_ff", "n_inner")


def shrunk_config(config: Any, scale: int) -> tuple[Any, list[str]]:
    """A copy with vocabularies, FFN widths and expert counts cut (``scale`` 1 or 2), and the fields cut.

    None of these sizes a cache tensor (keys, values and states are sized by layers, heads, head
    and state widths, all kept); ``_shrunk_run`` checks that two shrinks give the same cache.
    """
    import copy

    out = copy.deepcopy(config)
    changed: list[str] = []

    def cut(cfg: Any, prefix: str) -> None:
        items = dict(vars(cfg))
        top_k = next((items[k] for k in TOP_K if type(items.get(k)) is int and items[k] > 0), 1)
        for key, value in items.items():
            if hasattr(value, "to_dict") and hasattr(value, "model_type"):
                cut(value, f"{prefix}{key}.")
                continue
            if type(value) is not int:
                continue
            if "vocab" in key:
                new = 512 * scale
            elif any(w in key for w in SHRINK_WIDTHS):
                new = 64 * scale
            elif key in SHRINK_EXPERTS:
                new = top_k * scale
            else:
                continue
            if new < value:
                setattr(cfg, key, new)
                changed.append(prefix + key)
        vocab = getattr(cfg, "vocab_size", None)
        for key, value in items.items():  # special tokens stay inside a cut vocabulary
            if key.endswith("token_id") and type(value) is int and type(vocab) is int and value >= vocab:
                setattr(cfg, key, vocab - 1)

    cut(out, "")
    return out, changed


def _shrunk_run(cls: Any, config: Any, size: int) -> tuple[Any, Any, dict[tuple[int, int], int], str, str]:
    """The CPU prefill of ``config`` with its cache-free sizes cut, confirmed unchanged by a second cut."""
    runs = []
    for scale in (1, 2):
        small, changed = shrunk_config(config, scale)
        model = _on(cls, small, "meta")
        small_size = sum(p.numel() for p in model.parameters()) * 2
        if small_size > CPU_LIMIT or not changed:
            raise GenericError(f"its forward cannot run on the meta device and its {size / 2**30:.1f} GiB of "
                               "weights are too large for a CPU prefill, even with its vocabulary and FFN widths cut")
        model = _on(cls, small, "cpu")
        runs.append((model, small, *_measure(model)))
    (model, small, measured, name), (_, _, again, _) = runs
    if measured != again:
        raise GenericError("its cache changes with the vocabulary or FFN widths, so a cut config does not measure it")
    note = f"measured on the CPU with {', '.join(changed)} cut (two cuts give the same cache)"
    return model, small, measured, name, note


def _on(cls: Any, config: Any, device: str) -> Any:
    import torch
    from transformers.initialization import no_init_weights

    with _quiet(), torch.device(device), no_init_weights():  # buffers (position ids) built, weights not initialised
        return cls._from_config(config, dtype=formats.torch_dtype(torch, MEASURED_IN)).eval()


def cache_formula(data: Mapping[str, Any], architecture: str | None = None) -> CacheFormula:
    """The measured cache formula of a config dict (see the module docstring); needs torch."""
    try:
        model, config, measured, cls, note = _runnable(data, architecture)
    except GenericError as err:
        raise GenericError(f"no prefill of this model: {err}") from None
    except Exception as err:
        raise GenericError(f"a prefill of this model fails: {_first_line(err)}") from None
    if note == NO_CACHE_NOTE:  # every decode step recomputes the whole prefix: no cache bytes to count
        zero = sympy.Integer(0)
        return CacheFormula(str(config.model_type), "none", zero, zero, True, {}, note=note)
    (b1, s1), (_, s2) = POINTS
    slope = (Fraction(measured[(b1, s2)]) - measured[(b1, s1)]) / (b1 * (s2 - s1))
    base = Fraction(measured[(b1, s1)], b1) - slope * s1
    window = _window(config)
    full, windowed, cap = slope, Fraction(0), 0
    checks = [CHECK]
    on_meta = next(model.parameters()).device.type == "meta"
    probed = bool(window) and (on_meta or (not note and window <= CPU_WINDOW))
    if probed:
        try:
            far = {w: _prefill(model, 1, w)[0] for w in (window + 8, window + 16)}
        except Exception:  # beyond the window the model cannot run: the formula holds below it only
            far = {}
        probed = bool(far)
        if far:
            full = Fraction(far[window + 16] - far[window + 8], 8)
            windowed = slope - full
            offset = Fraction(far[window + 8]) - full * (window + 8)  # base + windowed·cap
            if windowed:
                k = (offset - base) / windowed
                cap = int(k) if k.denominator == 1 and k > 0 else -1
            measured.update({(1, w): v for w, v in far.items()})
            checks.append((3, window + 40))
    formula = CacheFormula(str(config.model_type), cls, _rational(base), _rational(full), False,
                           {f"{b}x{s}": v for (b, s), v in measured.items()}, _rational(windowed), max(cap, 0))
    verified = cap >= 0 and base >= 0 and full >= 0 and windowed >= 0 and (probed or not window)
    if window and not probed:
        note = "; ".join(filter(None, [note, f"not measured beyond its {window}-token window"]))
    for point in checks if verified else []:
        try:
            got, _ = _prefill(model, *point)
        except Exception:  # a failing extra prefill leaves the formula unconfirmed
            verified = False
            break
        formula.measured[f"{point[0]}x{point[1]}"] = got
        verified = verified and got == formula.bytes_at(*point)
    return CacheFormula(formula.model_type, cls, formula.per_sequence, formula.per_token, verified, formula.measured,
                        formula.windowed, formula.cap, note)


def _rational(x: Fraction) -> sympy.Rational:
    return sympy.Rational(x.numerator, x.denominator)


def _window(config: Any) -> int | None:
    """The config's (or its text config's) sliding window or attention chunk (tokens), when below MAX_PROBE."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    for cfg in (config, text):
        for key in WINDOW_KEYS:
            value = getattr(cfg, key, None)
            if type(value) is int and 16 < value < MAX_PROBE:
                return value
    return None


@lru_cache(maxsize=64)
def default_cache(model_type: str) -> CacheFormula:
    """The cache formula of a model type's default config (cached per type)."""
    return cache_formula({"model_type": model_type})


def survey_cache(model_type: str) -> dict[str, object]:
    """Coverage row entries for one type: whether a prefill runs and the formula is confirmed."""
    try:
        c = default_cache(model_type)
    except GenericError as err:
        return {"cache_built": False, "cache_verified": False, "cache_error": str(err)[:160]}
    return {"cache_built": True, "cache_verified": c.verified, "cache_class": c.cache_class,
            "cache_per_token": str(c.per_token), "cache_per_sequence": str(c.per_sequence),
            "cache_windowed": str(c.windowed), "cache_cap": c.cap} | ({"cache_note": c.note} if c.note else {})
