"""The vocabulary: every symbol the library uses, with its meaning, display name and unit.

Printers take display names from this table and no other module invents symbol names, so
``B`` is the same SymPy object wherever it appears.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from difflib import get_close_matches

import sympy

from .errors import UnknownNameError, quote


@dataclass(frozen=True)
class SymbolInfo:
    """One entry of the symbol table."""

    name: str
    latex: str
    description: str
    unit: str  # "count", "bytes", "bytes/element", "ratio"
    integer: bool = True
    symbol: sympy.Symbol | None = None

    def __post_init__(self) -> None:
        if self.symbol is None:
            sym = sympy.Symbol(self.name, positive=True, integer=self.integer or None)
            object.__setattr__(self, "symbol", sym)


_TABLE: dict[str, SymbolInfo] = {}


def declare(name: str, latex: str, description: str, unit: str = "count", *, integer: bool = True) -> sympy.Symbol:
    """Add a symbol to the table (once) and return its SymPy object."""
    if name in _TABLE:
        info = _TABLE[name]
        if (info.latex, info.description, info.unit, info.integer) != (latex, description, unit, integer):
            raise ValueError(f"symbol {name!r} is already declared differently")
        return info.symbol  # type: ignore[return-value]
    info = SymbolInfo(name, latex, description, unit, integer)
    _TABLE[name] = info
    return info.symbol  # type: ignore[return-value]


class ScopedSymbol(sympy.Symbol):
    """A symbol of one ``SymbolScope``: it carries its own entry, so printers and compilers find it
    without the table holding it (one object per declaration: SymPy's symbol cache is bypassed).

    Equal name and assumptions make equal symbols, as for SymPy's own: an expression from SymPy's
    cache may hold an equal symbol of an earlier scope, so match them with ``==``, not ``is``.
    """

    entry: SymbolInfo
    position: int  # its place among its scope's symbols (the order ``ordered`` keeps)

    def __new__(cls, name: str, **assumptions: bool | None) -> ScopedSymbol:
        cls._sanitize(assumptions, cls)
        return sympy.Symbol.__xnew__(cls, name, **assumptions)  # type: ignore[attr-defined,no-any-return]

    def __copy__(self) -> ScopedSymbol:
        return self  # immutable, and its entry refers back to it

    def __deepcopy__(self, memo: dict[int, object]) -> ScopedSymbol:
        return self

    def __reduce_ex__(self, protocol: object) -> tuple[object, tuple[object, ...]]:
        e = self.entry
        return _scoped_again, (e.name, e.latex, e.description, e.unit, e.integer, self.position)

    @classmethod
    def class_key(cls) -> tuple[int, int, str]:
        """A plain Symbol's: printers order the factors of a product the same way (L·d_ff, not d_ff·L)."""
        return sympy.Symbol.class_key()  # type: ignore[no-any-return]


def _scoped_again(name: str, latex: str, description: str, unit: str, integer: bool, position: int) -> ScopedSymbol:
    """A scoped symbol read back from a pickle: the same entry, in a scope of its own."""
    sym = ScopedSymbol(name, positive=True, integer=integer or None)
    sym.entry, sym.position = SymbolInfo(name, latex, description, unit, integer, sym), position
    return sym


class SymbolScope:
    """Symbols one model adds to the vocabulary (a generic model's config fields), apart from the table.

    The table holds the project's vocabulary for the whole process; a model found at run time
    declares its own names here instead, in an object its caller keeps (``GenericModel.symbols``).
    Its symbols carry their entries, so ``info(symbol)``, the printers and the compiler know them
    while they are in use, and nothing outlives the model; a lookup by name asks the scope
    explicitly (``scope.lookup(name)`` or ``lookup(name, scope)``).
    """

    def __init__(self) -> None:
        self._entries: dict[str, SymbolInfo] = {}

    def declare(self, name: str, latex: str, description: str, unit: str = "count", *,
                integer: bool = True) -> sympy.Symbol:
        """Add a symbol to this scope (once) and return it; a name of the table is refused."""
        if name in _TABLE:
            raise ValueError(f"symbol {name!r} is in the symbol table")
        if name in self._entries:
            entry = self._entries[name]
            if (entry.latex, entry.description, entry.unit, entry.integer) != (latex, description, unit, integer):
                raise ValueError(f"symbol {name!r} is already declared differently")
            return entry.symbol  # type: ignore[return-value]
        sym = ScopedSymbol(name, positive=True, integer=integer or None)
        entry = SymbolInfo(name, latex, description, unit, integer, sym)
        sym.entry, sym.position = entry, len(self._entries)
        self._entries[name] = entry
        return sym

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def info(self, name: str) -> SymbolInfo:
        """The entry of ``name``: the table's, else this scope's; a clear error if neither has it."""
        return info(name, self)

    def lookup(self, name: str) -> sympy.Symbol:
        """The SymPy symbol called ``name`` in the table or this scope."""
        return lookup(name, self)

    def symbols(self) -> list[SymbolInfo]:
        """This scope's entries, in declaration order."""
        return list(self._entries.values())


def info(symbol: sympy.Symbol | str, scope: SymbolScope | None = None) -> SymbolInfo:
    """The entry of a symbol or symbol name (the table's, a scoped symbol's own, or ``scope``'s)."""
    if isinstance(symbol, ScopedSymbol):
        return symbol.entry
    name = symbol if isinstance(symbol, str) else symbol.name
    found = _TABLE.get(name)
    if found is None and scope is not None:
        found = scope._entries.get(name)
    if found is None:
        raise UnknownSymbolError(name, [*_TABLE, *(scope._entries if scope is not None else ())])
    return found


def lookup(name: str, scope: SymbolScope | None = None) -> sympy.Symbol:
    """The SymPy symbol called ``name`` (in the table, or in ``scope`` when one is given)."""
    return info(name, scope).symbol  # type: ignore[return-value]


def in_table(name: str) -> bool:
    """Whether the table has a symbol called ``name``."""
    return name in _TABLE


def all_symbols() -> list[SymbolInfo]:
    """Every declared symbol, in declaration order."""
    return list(_TABLE.values())


def ordered(symbols: Iterable[sympy.Symbol]) -> list[sympy.Symbol]:
    """Symbols in table order (stable, meaningful), then scoped ones in their scope's order, unknown ones last by name."""
    position = {name: i for i, name in enumerate(_TABLE)}

    def key(s: sympy.Symbol) -> tuple[int, int, str]:
        if s.name in position and not isinstance(s, ScopedSymbol):
            return (0, position[s.name], s.name)
        return (1, s.position, s.name) if isinstance(s, ScopedSymbol) else (2, 0, s.name)

    return sorted(symbols, key=key)


def suggest(name: str, candidates: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest candidate, or ''."""
    if len(name) > 64:  # no identifier is this long; comparing would only cost time
        return ""
    match = get_close_matches(name, list(candidates), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


class UnknownSymbolError(UnknownNameError, KeyError):
    """A name that is not in the symbol table (or not in a formula)."""

    def __init__(self, name: str, candidates: Iterable[str], where: str = "") -> None:
        self.name = name
        place = f" in {where}" if where else ""
        self.message = f"unknown symbol {quote(name)}{place}{suggest(name, candidates)}"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


# --- training shape -------------------------------------------------------------------
B = declare("B", "B", "batch size (sequences or samples per step)")
S = declare("S", "S", "sequence length in tokens")
D = declare("D", "D", "input dimension: int64 values per sample (article B; D = S for token ids)")

# --- transformer architecture ---------------------------------------------------------
H = declare("H", "H", "hidden size d_model (article B writes d in its parameter formulas)")
L = declare("L", "L", "number of transformer layers (article B writes n)")
a = declare("a", "a", "attention heads (article B writes h)")
V = declare("V", "V", "vocabulary size")
d_ff = declare("d_ff", r"d_{\mathrm{ff}}", "feed-forward inner size (usually 4H)")
E = declare("E", "E", "activation elements of one layer output, E = B·S·H (article B)")

# --- counts and element sizes -----------------------------------------------------------
N = declare("N", "N", "number of model parameters")
b = declare("b", "b", "bytes per element of the stored tensors (fp32 4, fp16/bf16 2, int8 1, int4 1/2)",
            "bytes/element", integer=False)

# --- article A's network ----------------------------------------------------------------
d_in = declare("d_in", r"d_{\mathrm{in}}", "input width of article A's network (2048)")
d_h = declare("d_h", r"d_{\mathrm{h}}", "hidden width of article A's network (4096)")
n_out = declare("n_out", r"n_{\mathrm{out}}", "output classes of article A's network (10)")

# --- real architectures (issue: real models) ---------------------------------------------
a_kv = declare("a_kv", r"a_{\mathrm{kv}}", "key/value heads (a for multi-head, 1 for multi-query, else grouped-query)")
d_head = declare("d_head", r"d_{\mathrm{head}}", "dimension of one attention head (H/a unless the config says otherwise)")
n_pos = declare("n_pos", r"n_{\mathrm{pos}}", "rows of a learned position-embedding table")
n_exp = declare("n_exp", r"n_{\mathrm{exp}}", "experts per mixture-of-experts layer")
k_exp = declare("k_exp", r"k_{\mathrm{exp}}", "experts each token is routed to (top-k)")

# --- parallelism -------------------------------------------------------------------------
t = declare("t", "t", "tensor-parallel degree")
p = declare("p", "p", "pipeline-parallel degree")
n_d = declare("n_d", r"N_{d}", "data-parallel degree (ZeRO shards over it)")
n_s = declare("n_s", r"N_{s}", "FSDP shard group: the data-parallel ranks one parameter is sharded over (dp/R with HSDP)")
c_p = declare("c_p", r"c_{p}", "context-parallel degree: each rank holds S/c_p tokens of every sequence")

# --- real architectures: extra sizes (issue 3: Hugging Face configs and presets) -----------
n_type = declare("n_type", r"n_{\mathrm{type}}", "rows of a token-type (segment) embedding table (BERT)")
d_emb = declare("d_emb", r"d_{\mathrm{emb}}", "width of the word embedding when it is not H (OPT's word_embed_proj_dim)")
d_exp = declare("d_exp", r"d_{\mathrm{exp}}", "feed-forward inner size of one routed expert when it is not d_ff")
n_shared = declare("n_shared", r"n_{\mathrm{shared}}", "shared (always active) experts per mixture-of-experts layer")
d_shared = declare("d_shared", r"d_{\mathrm{shared}}", "feed-forward inner size of one shared expert")
n_cls = declare("n_cls", r"n_{\mathrm{cls}}", "outputs of a classification head (labels)")
# layer kinds, latent attention and expert parallelism (issue 12)
L_dense = declare("L_dense", r"L_{\mathrm{dense}}", "layers of a mixture-of-experts model whose MLP is dense")
L_swa = declare("L_swa", r"L_{\mathrm{swa}}", "sliding-window (or chunked) attention layers")
W = declare("W", "W", "attention window of the sliding-window layers, in tokens")
r_q = declare("r_q", r"r_{\mathrm{q}}", "query low-rank width of latent attention (DeepSeek q_lora_rank)")
r_kv = declare("r_kv", r"r_{\mathrm{kv}}", "compressed key/value latent width (DeepSeek kv_lora_rank)")
d_rope = declare("d_rope", r"d_{\mathrm{rope}}", "rotary part of a latent-attention query/key head (qk_rope_head_dim)")
d_nope = declare("d_nope", r"d_{\mathrm{nope}}", "non-rotary part of a latent-attention query/key head")
d_v = declare("d_v", r"d_{\mathrm{v}}", "value head width of latent attention (v_head_dim)")
L_conv = declare("L_conv", r"L_{\mathrm{conv}}", "short-convolution mixer layers of a hybrid (LFM2), instead of attention")
k_conv = declare("k_conv", r"k_{\mathrm{conv}}", "kernel length of a short convolution (the tokens its state keeps)")
e_p = declare("e_p", r"e_{\mathrm{p}}", "expert-parallel degree (routed experts split over e_p GPUs)")

# --- memory planning (issue 4: precision, optimizers, parallelism, KV cache, fit) ----------
# Element sizes of the tensor classes are written into the planner's terms as numbers chosen by
# the regime (2·N for bf16 weights, 4·N for fp32 master weights ...); the symbols below are the
# ones a published formula keeps symbolic.
K = declare("K", "K", "optimizer-state bytes per parameter (ZeRO paper's K; 12 for mixed-precision Adam)",
            "bytes/element", integer=False)
b_kv = declare("b_kv", r"b_{\mathrm{kv}}", "bytes per KV-cache element (fp16/bf16 2, fp8/int8 1, int4 1/2)",
               "bytes/element", integer=False)
b_s = declare("b_s", r"b_{\mathrm{s}}", "bytes per quantization scale (fp16 2, fp32 4)", "bytes/element", integer=False)
C_p = declare("C_p", r"C_{\mathrm{p}}", "tokens prefilled in one serving step (chunked prefill's chunk)")
g_q = declare("g_q", r"g_{\mathrm{q}}", "quantization group size: consecutive weights sharing one scale")
n_mat = declare("n_mat", r"n_{\mathrm{mat}}", "number of weight matrices (for Adafactor's factored second moment)")
N_gpu = declare("N_gpu", r"N_{\mathrm{gpu}}", "parameters held by one GPU: the most loaded tensor/pipeline shard")
n_mb = declare("n_mb", "m", "micro-batches per optimizer step (the pipeline's in-flight limit)")
v_pp = declare("v_pp", "v", "model chunks per GPU in the interleaved pipeline schedule")

# --- images of vision-language models (issue 29) ---------------------------------------------------
H_img = declare("H_img", r"H_{\mathrm{img}}", "image height in pixels as the vision tower sees it (after the processor's resize)")
W_img = declare("W_img", r"W_{\mathrm{img}}", "image width in pixels as the vision tower sees it (after the processor's resize)")
n_img = declare("n_img", r"n_{\mathrm{img}}", "images per sequence (--images)")
n_tile = declare("n_tile", r"n_{\mathrm{tile}}", "tiles one image is cut into (LLaVA-NeXT's grid, Llama-3.2-Vision's canvas)")

# --- compute and time (issue 15: time beside memory) ------------------------------------------
T = declare("T", "T", "tokens trained on in the whole run")
F_fwd = declare("F_fwd", r"F_{\mathrm{fwd}}", "forward FLOPs per token", "flops", integer=False)
F_tok = declare("F_tok", r"F_{\mathrm{tok}}", "training FLOPs per token (forward, backward, recompute)", "flops",
                integer=False)
F_peak = declare("F_peak", r"F_{\mathrm{peak}}", "peak dense FLOP/s of one GPU in the compute dtype (datasheet)",
                 "flop/s", integer=False)
mfu = declare("mfu", r"\eta", "model FLOP utilisation of the compute alone (--mfu)", "ratio", integer=False)
X = declare("X", "X", "achieved FLOP/s per GPU, every overhead included (--achieved-tflops)", "flop/s",
            integer=False)
n_gpu = declare("n_gpu", r"n_{\mathrm{gpu}}", "GPUs in the job")
W_hbm = declare("W_hbm", r"W_{\mathrm{hbm}}", "HBM bandwidth of one GPU", "bytes/s", integer=False)
W_tp = declare("W_tp", r"W_{\mathrm{tp}}", "link bandwidth per GPU and direction in the tensor-parallel group",
               "bytes/s", integer=False)
W_dp = declare("W_dp", r"W_{\mathrm{dp}}", "link bandwidth per GPU and direction in the data-parallel group",
               "bytes/s", integer=False)
W_pp = declare("W_pp", r"W_{\mathrm{pp}}", "link bandwidth per GPU and direction between pipeline stages",
               "bytes/s", integer=False)
W_cp = declare("W_cp", r"W_{\mathrm{cp}}", "link bandwidth per GPU and direction in the context-parallel group",
               "bytes/s", integer=False)
t_step = declare("t_step", r"t_{\mathrm{step}}", "seconds per optimizer step", "seconds", integer=False)
t_train = declare("t_train", r"t_{\mathrm{train}}", "seconds to train on T tokens", "seconds", integer=False)
c_gpu = declare("c_gpu", r"c_{\mathrm{gpu}}", "price of one GPU-hour (USD)", "usd", integer=False)
P_gpu = declare("P_gpu", r"P_{\mathrm{gpu}}", "parameters one GPU computes with (N, or N_gpu under tensor and "
                "pipeline parallelism; before ZeRO sharding; may be fractional)", "count", integer=False)
P_tr = declare("P_tr", r"P_{\mathrm{tr}}", "parameters one GPU trains: what the optimizer steps and data parallelism "
               "reduces (LoRA: the adapters; frozen embeddings: P_gpu less the embedding)", "count", integer=False)
M_tr = declare("M_tr", r"M_{\mathrm{tr}}", "model-state bytes of the trained parameters (weights, gradients, optimizer "
               "state) before ZeRO sharding", "bytes", integer=False)
M_w = declare("M_w", r"M_{\mathrm{w}}", "weight bytes one GPU reads per decode step", "bytes", integer=False)
M_kv = declare("M_kv", r"M_{\mathrm{kv}}", "KV-cache bytes one GPU reads per decode step", "bytes", integer=False)
t_dec = declare("t_dec", r"t_{\mathrm{dec}}", "seconds per decode step of B sequences", "seconds", integer=False)
F_step = declare("F_step", r"F_{\mathrm{step}}", "training FLOPs per optimizer step", "flops", integer=False)
