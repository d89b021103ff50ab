"""FLOPs of training and serving as terms: the field's named rules and this project's exact count.

Every count is in FLOPs (one multiply-add = 2 FLOPs, the convention of Kaplan et al. 2020 and
Narayanan et al. 2021). Named variants, none replacing another:

- ``flops.train.kaplan`` 6·N per token (Kaplan et al. 2020 §2.1; Chinchilla's C ≈ 6·N·D):
  2·N forward, 4·N backward, the attention scores left out.
- ``flops.train.palm`` 6·N + 12·L·a·d_head·S (Chowdhery et al. 2022, PaLM, Appendix B): the
  attention scores and the attention over values added (Hoffmann et al. 2022, Appendix F,
  counts the same two matmuls).
- ``flops.iteration.narayanan`` 96·B·S·L·H²·(1 + S/6H + V/16LH) (Narayanan et al. 2021, eq. 3,
  full recompute), and its no-recompute form with 72 and V/12LH.
- ``flops.forward`` / ``flops.train``: this project's exact count, matmul by matmul, for a
  Llama-style layer (GQA projections with their head width, gated MLP, output layer); the
  planner builds the same terms for any model from its own parameter terms
  (``forward_terms``).

What the exact count leaves out: norms, biases, activations, softmax, residual adds and rotary
embeddings (O(H) per token per layer, well under 1 % for any model larger than GPT-2 small);
the causal mask is not exploited (the scores are counted for all S positions, as the papers
above and MFU conventions do; FlashAttention's causal kernels do about half that work);
sliding-window layers are counted as full attention.

Full recompute reruns every layer's forward (a reentrant checkpoint: Megatron's, Narayanan's
count), or all of it but each layer's last matmul under torch's non-reentrant checkpoint, which
stops early (``last_matmuls``, ``EARLY_STOP_NOTE``; ``planning.time.early_stop_of`` says which a
plan's stack uses). With torchtitan's every-N-th-layer checkpointing only ⌊L/N⌋ of the L layers
are checkpointed, and only they run again (``checkpointed_share``, ``EVERY_NOTE``; layers of different
kinds each where it sits: ``checkpointed_forward``, ``KINDS_NOTE``). Per-op recompute (``ops``) runs
the even-counted matmuls again, a GeLU layer's last one too under torchtitan's early_stop=False
(``OPS_EARLY_STOP_NOTE``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sympy

from ..core import sources
from ..core.symbols import B, F_fwd, F_tok, H, L, N, S, T, V, a, a_kv, d_ff, d_head  # noqa: F401  (F_tok: flops.F_tok)
from ..core.term import Term
from ..math.formula import Formula
from . import activations
from .registry import register

for _id, _citation, _url in (
    ("kaplan2020", "J. Kaplan et al., \"Scaling Laws for Neural Language Models\", 2020", "https://arxiv.org/abs/2001.08361"),
    ("hoffmann2022", "J. Hoffmann et al., \"Training Compute-Optimal Large Language Models\" (Chinchilla), 2022",
     "https://arxiv.org/abs/2203.15556"),
    ("chowdhery2022", "A. Chowdhery et al., \"PaLM: Scaling Language Modeling with Pathways\", 2022, Appendix B",
     "https://arxiv.org/abs/2204.02311"),
    ("dubey2024", "A. Dubey et al., \"The Llama 3 Herd of Models\", 2024", "https://arxiv.org/abs/2407.21783"),
    ("pytorch-checkpoint", "PyTorch 2.13.0, torch/utils/checkpoint.py: non-reentrant checkpoint's early_stop "
     "(default True, lines 477-481; _recomputation_hook.pack_hook raises _StopRecomputationError once every saved "
     "tensor is rebuilt, lines 1128-1131); the reentrant variant \"always recomputes function in its entirety\" "
     "(lines 402-406)", "https://github.com/pytorch/pytorch/blob/main/torch/utils/checkpoint.py"),
):
    if _id not in sources.SOURCES:
        sources.register(_id, _citation, _url)

RECOMPUTE = ("none", "selective", "full", "ops")
# The matmul key of a dense layer's last matmul (the MLP's down projection): its output only enters the residual sum
LAST_MATMUL = "mlp.down"
EARLY_STOP_NOTE = ("torch.utils.checkpoint(use_reentrant=False) stops recomputing once every tensor the backward "
                   "saved is rebuilt (early_stop, default True; torch 2.13.0 torch/utils/checkpoint.py lines 402-406 "
                   "and 1128-1131): an op's inputs are saved before it runs, and the layer's last matmul (its MLP down "
                   "projection) saves its input and weight, then only feeds the residual sum, so it is not run again. "
                   "Measured with FlopCounterMode on a tiny Llama (tests/test_time_torch.py). Megatron's reentrant "
                   "checkpoint and torchtitan's FullAC (early_stop=False since 25413d2) rerun the whole forward.")
EVERY_NOTE = ("torchtitan's layer-frequency checkpointing (selective_ac_option N) counts the blocks it wraps from 1 "
              "and checkpoints block k when k % N == 0 (parallelize_llama.py lines 279-283 at 9dec370, a counter on "
              "ptd_checkpoint_wrapper; _layer_sac_count, activation_checkpoint.py lines 24 and 37-40 at 1f02964; "
              "apply_ac passes model.layers in order): layers N, 2N, ..., ⌊L/N⌋ of them, the last L mod N never. "
              "Only those run their forward again: ⌊L/N⌋/L of the average layer's when the layers are alike, else each "
              "kind where it sits (``KINDS_NOTE``). torchtitan removed the option in 114151ad4 (2026-03); b5bcd76 has "
              "FullAC and per-op SAC only.")
KINDS_NOTE = ("Layers of different kinds (a mixture of experts' dense layers, a hybrid's convolution layers) are "
              "counted where the config puts them (first_k_dense_replace, decoder_sparse_step, mlp_only_layers, "
              "moe_layers, layer_types): the recompute is the forward of the checkpointed layers of each kind. Measured "
              "with FlopCounterMode on a tiny Qwen3-MoE with dense and MoE layers alternating (tests/test_time_torch.py).")
_MATMUL = "2 FLOPs per weight per token (one multiply-add)"
_OPS_SAVED = ("torchtitan's save list keeps every odd-counted mm output of a layer and SDPA's outputs, so the even-counted "
             "matmuls run again (gated: wk, wo, w3) and the attention core does not. Elementwise ops run again (norms, "
             "rotary, SiLU, the product) are not counted: this count is matmuls only.")
OPS_EARLY_STOP_NOTE = ("torchtitan's SelectiveAC checkpoints with early_stop=False (since 25413d2, 2025-08-29; b5bcd76 "
                       "torchtitan/distributed/activation_checkpoint.py, SelectiveAC._wrap_block), so eager the whole "
                       "layer runs again but the saved ops: an even-counted last matmul (a GeLU layer's fc2) too. "
                       "9dec370 left torch's default, early stop, which stops before it (backward does not read its "
                       "output), and compiled (--compile) the partitioner recomputes only what backward reads: not it (its rule, not "
                       "measured here). "
                       "The gated layer's w2 is odd-counted, saved either way. Measured on the CPU "
                       "(tests/saved_for_backward_child.py).")
_OPS_NOTE = f"{_OPS_SAVED} {OPS_EARLY_STOP_NOTE}"


def _t(key: str, title: str, expr: sympy.Expr, source: str = "project", where: str = "", note: str = "") -> Term:
    return Term(key, title, expr, "flops", source, where, note)


# --- the exact count -------------------------------------------------------------------------
def forward_terms(matmuls: Iterable[tuple[str, str, sympy.Expr] | tuple[str, str, sympy.Expr, sympy.Expr]],
                  q_width: sympy.Expr, output_width: sympy.Expr | None,
                  extra: Iterable[tuple[str, str, sympy.Expr]] = (), v_width: sympy.Expr | None = None) -> list[Term]:
    """Forward FLOPs per token: 2 × each per-layer weight matrix, the two attention matmuls, the output layer.

    ``matmuls`` are (key, title, parameters of that matrix in one layer[, layers that have it:
    L unless given]); ``q_width`` is a·d_head, the width the scores are computed over, and
    ``v_width`` the values' (q_width unless given: latent attention differs); ``output_width`` the
    output layer's input width (None: no output layer); ``extra`` are matmuls outside the layers
    (OPT's projections), 2 FLOPs per weight too.
    """
    terms = [_t(m[0], f"{m[1]}: {_MATMUL}", (m[3] if len(m) > 3 else L) * 2 * m[2], where="matmul")  # type: ignore[misc]
             for m in matmuls]
    terms.append(_t("attention.scores", "attention scores Q·Kᵀ over S positions", L * 2 * S * q_width, "chowdhery2022",
                    "Appendix B", "Counted for all S positions (the causal mask is not exploited)."))
    terms.append(_t("attention.values", "attention over values softmax·V", L * 2 * S * (v_width or q_width),
                    "chowdhery2022", "Appendix B"))
    terms += [_t(key, f"{title}: {_MATMUL}", 2 * expr, where="matmul") for key, title, expr in extra]
    if output_width is not None:
        terms.append(_t("output", "output layer H → V (logits)", 2 * V * output_width, where="matmul",
                        note="The matmul runs whether or not the head is tied to the embedding."))
    return terms


def attention_core(q_width: sympy.Expr, v_width: sympy.Expr | None = None) -> sympy.Expr:
    """Forward FLOPs per token of Q·Kᵀ and softmax·V: what selective recompute runs again."""
    return L * 2 * S * (q_width + (v_width if v_width is not None else q_width))


def ops_recompute(gated: bool, moe: bool = False, early_stop: bool = False) -> sympy.Expr:
    """Forward FLOPs per token torchtitan's per-op policy runs again: 2 per weight of its unsaved matmuls, L layers.

    The matmuls are the memory model's (``activations.ops_recomputed``, one ordering): gated wk, wo and
    w3; a GeLU layer wk, wo and fc2, or wk and wo with ``early_stop`` (``OPS_EARLY_STOP_NOTE``). MoE is
    refused there, as memory refuses it.
    """
    variant = activations.LayerVariant(flash=True, gated=gated, dropout=False, moe=moe)
    return L * 2 * sympy.Add(*(weights for _, weights in activations.ops_recomputed(variant, early_stop)))


def last_matmuls(matmuls: Iterable[tuple[str, str, sympy.Expr, sympy.Expr]]) -> sympy.Expr:
    """Forward FLOPs per token of every dense layer's last matmul (``LAST_MATMUL``, on the layers that have it).

    What torch's non-reentrant checkpoint with early stop does not run again (``EARLY_STOP_NOTE``); a layer without
    one (MoE: the experts' outputs are saved by the weighted sum that combines them) has none.
    """
    return sympy.Add(*(n * 2 * w for key, _, w, n in matmuls if key == LAST_MATMUL))


def checkpointed_share(every: int = 1) -> sympy.Expr:
    """The share of the L layers full recompute runs again: 1, or ⌊L/N⌋/L checkpointing every N-th (``EVERY_NOTE``)."""
    if every < 1:
        raise ValueError(f"recompute every must be at least 1, got {every}")
    return sympy.Integer(1) if every == 1 else sympy.floor(L / every) / L


def checkpointed_blocks(layers: int, every: int) -> tuple[int, ...]:
    """The 0-based layers torchtitan checkpoints every N-th: block k counted from 1 when k % N == 0 (``EVERY_NOTE``)."""
    if every < 1:
        raise ValueError(f"recompute every must be at least 1, got {every}")
    return tuple(range(every - 1, layers, every))


def checkpointed_counts(layers: int, every: int, kinds: Mapping[sympy.Symbol, Iterable[int]]) -> dict[sympy.Symbol, int]:
    """The layer counts of a forward's terms at the checkpointed layers only: L → ⌊L/N⌋, and each kind's count symbol
    (L_dense, L_conv: ``kinds`` maps it to the layers of that kind) → its layers among the checkpointed ones."""
    blocks = set(checkpointed_blocks(layers, every))
    return {L: len(blocks), **{symbol: len(blocks.intersection(at)) for symbol, at in kinds.items()}}


def checkpointed_forward(layer_terms: Iterable[sympy.Expr], counts: Mapping[sympy.Symbol, int]) -> sympy.Expr:
    """Forward FLOPs per token of the checkpointed layers, kind by kind: each per-layer term (its count L, L − L_dense,
    L_dense, ...) at the checkpointed layers' counts (``checkpointed_counts``), exact where the kinds differ."""
    return sympy.Add(*(sympy.sympify(expr).subs(dict(counts)) for expr in layer_terms))


def full_recompute(rerun: sympy.Expr, every: int, title: str, source: str, where: str, note: str,
                   checkpointed: sympy.Expr | None = None) -> Term:
    """The full recompute term: ``rerun`` (every layer's forward again, as its checkpoint reruns it) × the share of
    layers checkpointed (``checkpointed_share``); ``checkpointed``: instead the exact rerun of the checkpointed layers
    (``checkpointed_forward``: layers of different kinds, each counted where it sits)."""
    if every == 1:
        return _t("recompute", title, rerun, source, where, note)
    if checkpointed is not None:
        return _t("recompute", f"{title}; only the ⌊L/{every}⌋ checkpointed layers (every {every}-th), kind by kind",
                  checkpointed, source, where, f"{note} {EVERY_NOTE} {KINDS_NOTE}".strip())
    return _t("recompute", f"{title}; only the ⌊L/{every}⌋ checkpointed layers (every {every}-th)",
              checkpointed_share(every) * rerun, source, where, f"{note} {EVERY_NOTE}".strip())


def train_terms(forward: sympy.Expr, output: sympy.Expr, core: sympy.Expr, recompute: str,
                ops: sympy.Expr | None = None, last: sympy.Expr | None = None, every: int = 1,
                checkpointed: sympy.Expr | None = None) -> list[Term]:
    """Training FLOPs per token: forward, backward (twice the forward), and the recomputed forward share.

    ``forward`` is the forward count (or F_fwd), ``output`` its output-layer part (never
    recomputed), ``core`` the attention core (``attention_core``), ``ops`` what the per-op policy runs
    again (``ops_recompute``; needed for recompute ops). ``last``: under full recompute, what torch's
    non-reentrant checkpoint with early stop does not run again (``last_matmuls``); None: the whole
    forward again (Megatron's reentrant checkpoint, Narayanan et al.'s count). ``every``: full recompute
    checkpoints every N-th layer only (torchtitan's ``selective_ac_option N``): ⌊L/N⌋/L of that rerun, or
    ``checkpointed``, the rerun of exactly the checkpointed layers (``checkpointed_forward``, less their last matmuls
    under early stop) where the layers' kinds differ.
    """
    if recompute not in RECOMPUTE:
        raise ValueError(f"unknown recompute {recompute!r}; choose from {', '.join(RECOMPUTE)}")
    terms = [_t("forward", "forward pass", forward, "narayanan2021", "§5.1"),
             _t("backward", "backward pass: gradients of inputs and of weights, 2 × forward", 2 * forward,
                "narayanan2021", "§5.1", "Each matmul's backward is two matmuls of the same size.")]
    if recompute == "full" and last is not None and last != 0:
        terms.append(full_recompute(forward - output - last, every, "full recompute, torch's non-reentrant checkpoint: "
                                    "every layer's forward again but its last matmul (not the output layer)",
                                    "pytorch-checkpoint", "early_stop", EARLY_STOP_NOTE, checkpointed))
    elif recompute == "full":
        terms.append(full_recompute(forward - output, every, "full recompute: every layer's forward again (not the "
                                    "output layer)", "narayanan2021", "§5.1", "Eq. 3's factor 4 = 1 + 2 + 1 (a "
                                    "reentrant checkpoint: Megatron's; torchtitan's FullAC with early_stop=False "
                                    "alike).", checkpointed))
    elif recompute == "selective":
        terms.append(_t("recompute", "selective recompute: the attention core Q·Kᵀ, softmax·V again", core,
                        "korthikanti2022", "§5", "Korthikanti et al. recompute the softmax, dropout and attention "
                        "over values (and the scores they need)."))
    elif recompute == "ops":
        if ops is None:
            raise ValueError("recompute ops needs the recomputed matmuls (ops_recompute)")
        terms.append(_t("recompute", "per-op recompute: the matmuls the policy did not save, again", ops,
                        "torchtitan-ac", "_custom_policy", _OPS_NOTE))
    return terms


# Llama-style generic layer (the symbols the memory terms use): q a·d_head, k and v a_kv·d_head.
_Q = a * d_head
_GENERIC = (("attention.q", "query projection H → a·d_head", H * _Q),
            ("attention.k", "key projection H → a_kv·d_head", H * a_kv * d_head),
            ("attention.v", "value projection H → a_kv·d_head", H * a_kv * d_head),
            ("attention.o", "output projection a·d_head → H", _Q * H),
            ("mlp", "gated MLP: gate, up and down H ↔ d_ff", 3 * H * d_ff))
_LLAMA3_8B = {"H": 4096, "L": 32, "a": 32, "a_kv": 8, "d_head": 128, "d_ff": 14336, "V": 128256, "S": 8192}

FORWARD = register(Formula(
    "flops.forward", "Forward FLOPs per token, exact count of a Llama-style decoder", forward_terms(_GENERIC, _Q, H),
    source="project", name="F_fwd", example=_LLAMA3_8B,
    note="Matmuls only: norms, biases, softmax and rotary embeddings left out. The planner builds these terms "
         "for each model from its own weight matrices (MoE: the router and the k active experts)."))
for _r in RECOMPUTE:
    register(Formula(
        "flops.train" + ("" if _r == "none" else f".{_r}"),
        f"Training FLOPs per token, exact count, recompute {_r}",
        train_terms(F_fwd, 2 * V * H, attention_core(_Q), _r, ops_recompute(gated=True)), source="project",
        name="F_tok",
        definitions={F_fwd: FORWARD}, example=_LLAMA3_8B))

# --- named rules of the field --------------------------------------------------------------------
register(Formula(
    "flops.train.kaplan", "Training FLOPs per token ≈ 6N (Kaplan et al.; Chinchilla's C ≈ 6ND)",
    (_t("forward", "forward: 2N", 2 * N, "kaplan2020", "§2.1"),
     _t("backward", "backward: 4N", 4 * N, "kaplan2020", "§2.1")),
    source="kaplan2020", where="§2.1, eq. 2.1", name="F_tok", example={"N": 8_030_261_248},
    note="Leaves out the attention scores (2·L·S·d_attn forward per token), small while S ≪ 12·H."))
register(Formula(
    "flops.total.kaplan", "Training FLOPs of a run ≈ 6·N·T (Chinchilla's C ≈ 6ND)",
    (_t("forward", "forward: 2NT", 2 * N * T, "hoffmann2022", "§3, C ≈ 6ND"),
     _t("backward", "backward: 4NT", 4 * N * T, "hoffmann2022", "§3, C ≈ 6ND")),
    source="hoffmann2022", name="C", example={"N": 405_000_000_000, "T": 15_600_000_000_000},
    note="Llama 3 405B (Dubey et al. 2024 §3.2.1): 15.6T tokens, 3.8 × 10^25 FLOPs."))
register(Formula(
    "flops.train.palm", "Training FLOPs per token: 6N + 12·L·a·d_head·S (PaLM's MFU count)",
    (_t("weights", "6N: forward and backward through every weight", 6 * N, "chowdhery2022", "Appendix B"),
     _t("attention", "attention scores and values, forward and backward", 12 * L * a * d_head * S, "chowdhery2022",
        "Appendix B")),
    source="chowdhery2022", where="Appendix B", name="F_tok",
    example={"N": 8_030_261_248, "L": 32, "a": 32, "d_head": 128, "S": 8192},
    note="Hoffmann et al. 2022 (Appendix F) count the same two attention matmuls."))
register(Formula(
    "flops.iteration.narayanan", "FLOPs per iteration with full recompute, Narayanan et al. 2021 eq. 3",
    (_t("iteration", "96·B·S·L·H²·(1 + S/6H + V/16LH)", 96 * B * S * L * H**2 * (1 + S / (6 * H) + V / (16 * L * H)),
        "narayanan2021", "§5.1, eq. 3"),),
    source="narayanan2021", where="eq. 3", name="F_iter",
    example={"B": 1536, "S": 2048, "L": 96, "H": 12288, "V": 51200},
    note="GPT-style layer (4H MLP, multi-head attention); B is the global batch in sequences."))
register(Formula(
    "flops.iteration.narayanan.no_recompute", "FLOPs per iteration without recompute (eq. 3 with 72 and V/12LH)",
    (_t("iteration", "72·B·S·L·H²·(1 + S/6H + V/12LH)", 72 * B * S * L * H**2 * (1 + S / (6 * H) + V / (12 * L * H)),
        "narayanan2021", "§5.1"),),
    source="narayanan2021", where="§5.1", name="F_iter",
    example={"B": 1536, "S": 2048, "L": 96, "H": 12288, "V": 51200},
    note="Without the recomputed forward the layer factor is 3 instead of 4; the logits keep 6·B·S·H·V."))
