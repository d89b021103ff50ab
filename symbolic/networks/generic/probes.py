"""Any model type transformers can build: exact count from the real module tree, formula from probes.

With the ``torch`` extra installed, ``analyse(config)`` builds the model on the ``meta``
device (no memory, no weights), counts ``sum(p.numel() for p in model.parameters())`` and
recovers a formula in the config's own fields: every integer field is doubled once, the model
rebuilt, and each parameter tensor's instance count and dimensions are fitted as products of
fields (``H·d_ff``, ``a·d_head``, ``H/a``) or, where a product does not fit, as a common factor
times a sum of products (fused QKV: ``H·(1 + 2·a_kv/a)``; fields of equal summands are told apart
by doubling two at once). Probes run on a copy with ``PROBE_LAYERS`` layers (fast to build, a
multiple of the usual layer patterns), or ``SMALL_LAYERS`` when every layer is alike, or
``HALF_LAYERS`` when the pattern repeats within that half (the whole copy then a fallback); for a layer
pattern, fields that only change tensor dimensions are probed on a copy with fewer layers that
has every parameter group with the same shapes. The formula must then give every tensor of the
real config and of an independent point (every field it uses doubled at once), each a real build;
that check, not the copy, is what a verified formula rests on.
A tensor whose size does not follow from the fields keeps its number, with a note saying so;
the formula evaluated at ``values`` is always the exact total. Field values are read as
integers and symbols built from them directly: no config string is ever parsed.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any

import sympy

from ...core import collector
from ...core import symbols as symtab
from ...core.errors import UserError
from ...core.symbols import H, L, V, a, a_kv, d_exp, d_ff, d_head, d_shared, k_exp, n_exp, n_pos, n_shared, n_type
from ...core.term import Term
from ...math.formula import Formula
from .. import torch_env
from ..transformer.spec import too_many_layers

SOURCE = "transformers"
EXTRA = "torch"  # the pyproject extra that installs torch and transformers
INSTALL_EXTRA = f"pip install 'symbolic-memory[{EXTRA}]'"  # the distribution's name (the import package is symbolic)

# Config fields that hold one of the project's own symbols.
KNOWN: dict[str, sympy.Symbol] = {
    "hidden_size": H, "n_embd": H, "d_model": H, "hidden_dim": H, "dim": H,
    "num_hidden_layers": L, "n_layer": L, "num_layers": L, "n_layers": L,
    "num_attention_heads": a, "n_head": a, "num_heads": a, "n_heads": a,
    "num_key_value_heads": a_kv, "num_kv_heads": a_kv, "multi_query_group_num": a_kv,
    "head_dim": d_head, "intermediate_size": d_ff, "n_inner": d_ff, "ffn_dim": d_ff, "ffn_hidden_size": d_ff,
    "vocab_size": V, "max_position_embeddings": n_pos, "n_positions": n_pos,
    "num_local_experts": n_exp, "num_experts": n_exp, "n_routed_experts": n_exp, "moe_num_experts": n_exp,
    "moe_intermediate_size": d_exp, "n_shared_experts": n_shared, "num_shared_experts": n_shared,
    "shared_expert_intermediate_size": d_shared, "type_vocab_size": n_type, "num_experts_per_tok": k_exp,
}
TOP_K_FIELDS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "moe_top_k", "moe_k", "top_k",
                "num_selected_experts")
# Integer fields that never size a tensor (ids, generation settings, seeds): not probed.
SKIP = re.compile(r"(_id|_ids|_idx|_index|seed|length|beams|beam_groups|return_sequences|ngram_size|_eps|"
                  r"epsilon|chunk_size_feed_forward|num_labels|_every|_interval|_step|_steps)$")
FIELD_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")
MAX_FIELD = 2**40
NOTE_CONSTANT = "size not expressed in the config's fields: the number measured on the meta device"
FIELD_DOC = "transformers config field {!r} (a size the generic torch path found in parameter shapes)"


class GenericError(UserError):
    """A config the generic torch path cannot build or count; the message is one line."""


def torch_available() -> bool:
    """Whether torch and transformers are installed (the ``torch`` extra); nothing is imported."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


@lru_cache(maxsize=1)
def transformers_types() -> tuple[str, ...]:
    """Every model_type transformers knows (its CONFIG_MAPPING), sorted; imports transformers."""
    torch_env.ready()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return tuple(sorted(CONFIG_MAPPING_NAMES))


@lru_cache(maxsize=1)
def causal_lm_classes() -> dict[str, str]:
    """model_type -> causal-LM class name (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), in transformers' order."""
    return _auto_names("modeling_auto.py", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES")


@lru_cache(maxsize=1)
def known_types() -> frozenset[str]:
    """Every model_type transformers knows, read from its source without importing it (empty without it).

    Its config table (``CONFIG_MAPPING_NAMES``) is in ``auto_mappings.py`` in transformers 5,
    in ``configuration_auto.py`` before. ``transformers_types`` gives the same by importing it.
    """
    names: set[str] = set()
    for module in ("auto_mappings.py", "configuration_auto.py"):
        tree = _auto_tree(module)
        if tree is not None:
            names |= _mapping_keys(tree, "CONFIG_MAPPING_NAMES")
    return frozenset(names)


def _auto_tree(module: str) -> Any:
    """The ``ast`` of a module of transformers' auto package (None without transformers or that module)."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "models" / "auto" / module
    return ast.parse(path.read_text(encoding="utf-8")) if path.is_file() else None


def _mapping_keys(tree: Any, name: str) -> set[str]:
    """The string keys a module gives the mapping ``name``: ``name = OrderedDict([(k, v), ...], **{k: v})``
    and ``name.update({k: v, ...})``, literals only."""
    import ast

    keys: set[str] = set()

    def literal_keys(node: ast.AST) -> None:
        if isinstance(node, (ast.List, ast.Tuple)):
            keys.update(e.elts[0].value for e in node.elts if isinstance(e, ast.Tuple) and e.elts
                        and isinstance(e.elts[0], ast.Constant) and isinstance(e.elts[0].value, str))
        elif isinstance(node, ast.Dict):
            keys.update(k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        target = node.func
        if isinstance(target, ast.Attribute) and target.attr == "update" and isinstance(target.value, ast.Name) \
                and target.value.id == name:
            for arg in node.args:
                literal_keys(arg)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets) \
                and isinstance(node.value, ast.Call):
            for arg in [*node.value.args, *(k.value for k in node.value.keywords if k.arg is None)]:
                literal_keys(arg)
    return keys


def generic_hint(model_type: str) -> str:
    """" ('mamba' is a transformers model type without a family table: ...)" for a type transformers knows, else "".

    A close spelling among the tables ("llama" for "mamba") is no suggestion for a type that exists.
    """
    if model_type not in known_types():
        return ""
    need = "" if torch_available() else f", with the '{EXTRA}' extra ({INSTALL_EXTRA})"
    return (f" ({model_type!r} is a transformers model type without a family table: 'symbolic params' counts it and "
            f"'memory', 'fit', 'time', 'plan' and reports plan it through the generic torch path{need})")


def causal_lm_types() -> tuple[str, ...]:
    """The causal-LM model types, in transformers' order."""
    return tuple(causal_lm_classes())


def _auto_names(module: str, name: str) -> dict[str, str]:
    """A name table of transformers' auto module, read from its source with ``ast`` (importing it imports torch)."""
    import ast

    tree = _auto_tree(module)
    if tree is None:
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            call = node.value
            if isinstance(call, ast.Call) and call.args:
                pairs = ast.literal_eval(call.args[0])
                return {str(k): (v if isinstance(v, str) else str(v[0])) for k, v in pairs}
    return {}


# --- building on the meta device ------------------------------------------------------------
Shapes = dict[str, tuple[int, ...]]


_QUIET = threading.local()  # per thread: how deep in _quiet() calls (a probe inside an analysis) it is


@contextlib.contextmanager
def _quiet() -> Any:
    """Silence transformers' warnings and prints while probing (once for nested uses: each
    verbosity change clears every logger's cache, a noticeable share of a small probe)."""
    depth = getattr(_QUIET, "depth", 0)
    if depth:
        yield
        return
    torch_env.ready()
    import transformers

    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    _QUIET.depth = depth + 1
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        _QUIET.depth = depth
        transformers.logging.set_verbosity(level)


def config_object(data: Mapping[str, Any]) -> Any:
    """A transformers config of ``data['model_type']`` from plain config.json fields."""
    from transformers import AutoConfig

    model_type = data.get("model_type")
    if not isinstance(model_type, str):
        raise GenericError("no 'model_type' field")
    if model_type not in transformers_types():
        raise GenericError(f"model_type {model_type!r} is not known to transformers")
    _check_layers(data)
    fields = {k: v for k, v in data.items() if k not in ("model_type", "transformers_version", "_source")}
    try:
        with _quiet():
            return AutoConfig.for_model(model_type, **fields)
    except Exception as err:  # transformers validates configs with many exception types
        raise GenericError(f"transformers rejects this {model_type} config: {_first_line(err)}") from None


def _check_layers(data: Mapping[str, Any]) -> None:
    """Refuse a layer count above MAX_LAYERS before transformers builds per-layer lists and modules of it."""
    levels = [data] + [v for k, v in data.items()
                       if isinstance(k, str) and k.endswith("_config") and isinstance(v, dict)]
    for level in levels:
        for key, value in level.items():
            if KNOWN.get(key) is L and type(value) is int:
                problem = too_many_layers(key, value)
                if problem:
                    raise GenericError(problem)


def built_model(config: Any, architecture: str | None = None) -> tuple[Any, Any]:
    """(model on the meta device, the config it was built from): the named class, else the causal LM, else base."""
    import transformers
    from transformers import AutoModel, AutoModelForCausalLM

    names = [architecture] if architecture else list(getattr(config, "architectures", None) or [])
    for name in names:
        cls = getattr(transformers, name, None) if isinstance(name, str) and name.isidentifier() else None
        if isinstance(cls, type) and hasattr(cls, "_from_config"):
            return _built(lambda c=cls: build(config, c), config)
    errors = []
    for auto in (AutoModelForCausalLM, AutoModel):
        if type(config) not in auto._model_mapping:
            continue
        try:
            return _built(lambda a=auto: _auto_build(a, config), config)
        except GenericError as err:
            errors.append(str(err))
    if errors:
        raise GenericError(errors[0])
    raise GenericError(f"transformers has no model class for model_type {config.model_type!r}")


def _auto_build(auto: Any, config: Any) -> Any:
    import torch

    with _quiet(), torch.device("meta"), _no_init():
        return auto.from_config(config)


@contextlib.contextmanager
def _no_init() -> Iterator[None]:
    """``torch.nn.init``'s in-place initialisers as no-ops while a model is built on the meta device.

    Shapes do not depend on initial values, and these calls are about half of a meta build's time
    (each one goes through the device context's ``__torch_function__``). Unlike transformers'
    ``no_init_weights``, ``PreTrainedModel.init_weights`` is left alone: it also ties the weights.
    """
    from torch.nn import init

    names = [n for n in dir(init) if n.endswith("_") and not n.startswith("_") and callable(getattr(init, n))]
    with _swapped(init, dict.fromkeys(names, _keep)):
        yield


def _keep(tensor: Any, *args: Any, **kwargs: Any) -> Any:
    return tensor


@contextlib.contextmanager
def _no_generation_config() -> Iterator[None]:
    """A built model gets transformers' default ``GenerationConfig`` instead of one derived from its config.

    For a probe that only reads parameter shapes: deriving it copies the whole config, about a
    tenth of a small meta build. A plain ``GenerationConfig()`` is also what ``PreTrainedModel``
    falls back to when a config cannot give one; models that derive one themselves get it too.
    """
    from transformers import GenerationConfig

    with _swapped(GenerationConfig, {"from_model_config": classmethod(_default_generation_config)}):
        yield


def _default_generation_config(cls: Any, config: Any) -> Any:
    return cls()


_SWAP_LOCK = threading.Lock()
_SWAPS: dict[tuple[int, str], list[Any]] = {}  # (id(owner), name) -> [users inside, original, owner (keeps the id)]
_ABSENT = object()


@contextlib.contextmanager
def _swapped(owner: Any, replacements: Mapping[str, Any]) -> Iterator[None]:
    """``owner``'s attributes replaced while any thread is inside: the first entry saves, the last exit restores.

    Building on the meta device patches module and class attributes for the whole process; counted
    per attribute, two threads that overlap cannot leave a replacement behind.
    """
    with _SWAP_LOCK:
        for name, value in replacements.items():
            entry = _SWAPS.get((id(owner), name))
            if entry is None:
                original = vars(owner).get(name, _ABSENT)  # own attribute only: an inherited one is deleted again
                _SWAPS[(id(owner), name)] = entry = [0, original, owner]
                setattr(owner, name, value)
            entry[0] += 1
    try:
        yield
    finally:
        with _SWAP_LOCK:
            for name in replacements:
                entry = _SWAPS[(id(owner), name)]
                entry[0] -= 1
                if entry[0] == 0:
                    del _SWAPS[(id(owner), name)]
                    if entry[1] is _ABSENT:
                        delattr(owner, name)
                    else:
                        setattr(owner, name, entry[1])


def _built(make: Callable[[], Any], config: Any) -> tuple[Any, Any]:
    try:
        model = make()
    except Exception as err:
        raise GenericError(f"transformers cannot build model_type {config.model_type!r} from this config: "
                           f"{_first_line(err)}") from None
    return model, model.config


def build(config: Any, cls: Any) -> Any:
    """``cls`` built from ``config`` on the meta device (no weights are allocated)."""
    import torch

    with _quiet(), torch.device("meta"), _no_init():
        return cls._from_config(config)


def shapes(config: Any, cls: Any) -> Shapes:
    """Name -> shape of every parameter tensor (tied tensors once, as ``model.parameters()``)."""
    with _no_generation_config():
        model = build(config, cls)
    return {name: tuple(int(s) for s in p.shape) for name, p in model.named_parameters()}


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200]}" if text else type(err).__name__


# --- fields and symbols -------------------------------------------------------------------------
Path = tuple[str, ...]


def int_fields(data: Mapping[str, Any]) -> dict[Path, int]:
    """Every positive integer field of a config dict (and of its ``*_config`` sub-dicts) that may size a tensor."""
    out: dict[Path, int] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not FIELD_NAME.fullmatch(key):
            continue  # a field name becomes a symbol name: only plain identifiers
        if type(value) is int and 0 < value <= MAX_FIELD and not SKIP.search(key):
            out[(key,)] = value
        elif isinstance(value, dict) and key.endswith("_config"):
            for sub, v in value.items():
                if isinstance(sub, str) and FIELD_NAME.fullmatch(sub) and type(v) is int and 0 < v <= MAX_FIELD \
                        and not SKIP.search(sub):
                    out[(key, sub)] = v
    return out


def _symbol_name(path: Path) -> str:
    """A symbol name for a config field: the field's own name, sub-configs prefixed (vision_hidden_size)."""
    if len(path) == 1 or path[0] == "text_config":
        return path[-1]
    return f"{path[0].removesuffix('_config')}_{path[-1]}"


def field_symbol(name: str, scope: symtab.SymbolScope | None = None) -> sympy.Symbol:
    """The symbol of a config field without a project symbol, declared once in the model's ``scope``
    (a new one if none is given); ``cfg_`` is put before a name the symbol table already has."""
    scope = symtab.SymbolScope() if scope is None else scope
    doc = FIELD_DOC.format(name)
    for candidate in (name, f"cfg_{name}"):
        if symtab.in_table(candidate) or (candidate in scope and scope.info(candidate).description != doc):
            continue  # a project (or user) symbol's name, or one of this scope's with another meaning
        latex = r"\mathrm{" + candidate.replace("_", r"\_") + "}"
        return scope.declare(candidate, latex, doc, "count")
    raise GenericError(f"config field {name!r} clashes with the symbol table")  # pragma: no cover


def symbols_for(paths: list[Path], scope: symtab.SymbolScope | None = None) -> dict[Path, sympy.Symbol]:
    """One distinct symbol per field: the project's symbol where the field maps onto one, else one of
    the model's ``scope`` (a new one if none is given)."""
    scope = symtab.SymbolScope() if scope is None else scope
    out: dict[Path, sympy.Symbol] = {}
    taken: set[sympy.Symbol] = set()
    ordered = sorted(paths, key=lambda p: (len(p) > 1 and p[0] != "text_config", len(p), p))
    for path in ordered:
        top = len(path) == 1 or path[0] == "text_config"
        sym = KNOWN.get(path[-1]) if top else None
        if sym is None or sym in taken:
            sym = field_symbol(_symbol_name(path), scope)
            if sym in taken:
                sym = field_symbol("_".join(path), scope)
        taken.add(sym)
        out[path] = sym
    return out


def _index_list(value: object, n: int) -> bool:
    """Whether ``value`` lists layer indices (strictly increasing integers below n)."""
    return (isinstance(value, list) and bool(value) and all(type(x) is int for x in value)
            and all(0 <= x < n for x in value) and all(x < y for x, y in zip(value, value[1:])))


def _per_layer(target: dict[str, Any], old: int, new: int) -> None:
    """Resize the per-layer lists (length ``old``) and layer-index lists of a config level to ``new`` layers."""
    for key, v in list(target.items()):
        if _index_list(v, old):
            if new < old:
                target[key] = [x for x in v if x < new]
            elif new % old == 0:
                target[key] = [x + k * old for k in range(new // old) for x in v]
        elif isinstance(v, list) and len(v) == old and old > 1:
            if new < old:
                target[key] = v[:new]
            elif new % old == 0:
                target[key] = v * (new // old)


def _copy(value: Any) -> Any:
    """A deep copy of a config dict's JSON-like values (several times faster than ``copy.deepcopy``)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    import copy

    return copy.deepcopy(value)


def _set(data: dict[str, Any], path: Path, value: int, old: int) -> dict[str, Any]:
    """A copy of ``data`` with one field changed; per-layer lists of length ``old`` follow it."""
    out = _copy(data)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    if KNOWN.get(path[-1]) is L:
        _per_layer(target, old, value)
    return out


# --- fitting ------------------------------------------------------------------------------------
Unit = tuple[str, int]  # (name pattern, which distinct shape of it)
_INDEX = re.compile(r"\.\d+(?=\.|$)")


def units(shape_map: Shapes) -> dict[Unit, tuple[int, tuple[int, ...]]]:
    """Parameters grouped by name pattern (layer indices as ``*``) and shape: unit -> (count, shape)."""
    seen: dict[str, list[tuple[int, ...]]] = {}
    counts: dict[tuple[str, tuple[int, ...]], int] = {}
    for name, shape in shape_map.items():
        pattern = _INDEX.sub(".*", name)
        kinds = seen.setdefault(pattern, [])
        if shape not in kinds:
            kinds.append(shape)
        counts[(pattern, shape)] = counts.get((pattern, shape), 0) + 1
    return {(p, i): (counts[(p, s)], s) for p, kinds in seen.items() for i, s in enumerate(kinds)}


def _quantities(u: Mapping[Unit, tuple[int, tuple[int, ...]]]) -> dict[tuple[Unit, int], int]:
    """(unit, -1) -> instance count, (unit, i) -> dimension i."""
    out: dict[tuple[Unit, int], int] = {}
    for key, (count, shape) in u.items():
        out[(key, -1)] = count
        for i, s in enumerate(shape):
            out[(key, i)] = s
    return out


def _power_of_two(ratio: Fraction) -> int | None:
    for e in range(-3, 4):
        if ratio == Fraction(2) ** e:
            return e
    return None


def _monomial(v0: int, responses: Mapping[Path, int | None], value: Mapping[Path, int],
              sym: Mapping[Path, sympy.Symbol]) -> sympy.Expr | None:
    """v0 as c·Π f^e when every doubled field multiplies it by a power of two, else None."""
    expr: sympy.Expr = sympy.Integer(1)
    scale = Fraction(1)
    for path, v in responses.items():
        if v is None or v == v0:
            continue
        e = _power_of_two(Fraction(v, v0))
        if e is None:
            return None
        expr *= sym[path] ** e
        scale *= Fraction(value[path]) ** e
    c = Fraction(v0) / scale
    return sympy.Rational(c.numerator, c.denominator) * expr


def _separable(v0: int, doubled: Mapping[Path, int | None], quadrupled: Mapping[Path, int | None],
               value: Mapping[Path, int], sym: Mapping[Path, sympy.Symbol],
               joint: Callable[[Path, Path], int | None] | None = None) -> sympy.Expr | None:
    """v0 as common factor × (c0 + Σ c_r·r^e_r), exponents from doubling and quadrupling each r."""
    common: dict[Path, int] = {}
    rest: list[Path] = []
    for path, v in doubled.items():
        if v is None or v == v0:
            continue
        e = _power_of_two(Fraction(v, v0))
        if e is not None and quadrupled.get(path) == v0 * Fraction(4) ** e:
            common[path] = e
        else:
            rest.append(path)
    if not rest:
        return None
    factor_value = Fraction(1)
    factor: sympy.Expr = sympy.Integer(1)
    for path, e in common.items():
        factor_value *= Fraction(value[path]) ** e
        factor *= sym[path] ** e
    q0 = Fraction(v0) / factor_value
    # each summand's value at the base point, from its response to doubling r (exponent from quadrupling)
    found: dict[Fraction, dict[Path, int]] = {}
    for path in rest:
        d2, d4 = doubled[path], quadrupled.get(path)
        if d2 is None:
            return None
        t2 = Fraction(d2) / factor_value - q0
        if d4 is None:  # no build at 4×: take the summand as linear and let the independent check decide
            exponent: int | None = 1
        else:
            t4 = Fraction(d4) / factor_value - q0
            exponent = next((e for e in (1, -1, 2, 3, -2)
                             if t4 * (Fraction(2) ** e - 1) == t2 * (Fraction(4) ** e - 1)), None)
        if exponent is None:
            return None
        found.setdefault(t2 / (Fraction(2) ** exponent - 1), {})[path] = exponent
    groups: list[tuple[Fraction, dict[Path, int]]] = []
    for term_value, powers in found.items():  # equal summand values: one product, or separate summands?
        groups.extend((term_value, g) for g in _split(term_value, powers, q0, factor_value, joint))
    total: sympy.Expr = sympy.Integer(0)
    explained = Fraction(0)
    for term_value, powers in groups:
        base = Fraction(1)
        monomial: sympy.Expr = sympy.Integer(1)
        for path, exponent in powers.items():
            base *= Fraction(value[path]) ** exponent
            monomial *= sym[path] ** exponent
        c = term_value / base
        explained += term_value
        total += sympy.Rational(c.numerator, c.denominator) * monomial
    c0 = q0 - explained
    total += sympy.Rational(c0.numerator, c0.denominator)
    return sympy.factor_terms(factor * total)


def _split(term_value: Fraction, powers: dict[Path, int], q0: Fraction, factor_value: Fraction,
           joint: Callable[[Path, Path], int | None] | None) -> list[dict[Path, int]]:
    """Fields whose summands have the same value, grouped into products by doubling two at once."""
    paths = list(powers)
    if len(paths) == 1 or joint is None:
        return [powers]
    parent = {p: p for p in paths}

    def root(p: Path) -> Path:
        while parent[p] != p:
            p = parent[p]
        return p

    for i, p in enumerate(paths):
        for q in paths[i + 1:]:
            got = joint(p, q)
            if got is None:
                continue
            change = Fraction(got) / factor_value - q0
            together = term_value * (Fraction(2) ** (powers[p] + powers[q]) - 1)
            if change == together and root(p) != root(q):
                parent[root(q)] = root(p)
    out: dict[Path, dict[Path, int]] = {}
    for p in paths:
        out.setdefault(root(p), {})[p] = powers[p]
    return list(out.values())


@dataclass(frozen=True)
class GenericModel:
    """What the generic torch path found for one config: exact total, formula terms, status."""

    name: str
    model_type: str
    architecture: str
    total: int
    terms: tuple[Term, ...]
    values: dict[str, int]
    fields: dict[str, str]  # symbol name -> config field path ("text_config.hidden_size")
    active: int | None = None
    active_terms: tuple[Term, ...] = ()
    unexplained: tuple[str, ...] = ()  # parameter patterns whose size is a measured number
    verified: bool = False  # formula checked against a real build at an independent point
    notes: tuple[str, ...] = field(default_factory=tuple)
    symbols: symtab.SymbolScope = field(default_factory=symtab.SymbolScope, compare=False, repr=False)  # its fields'
    # the weight matrices of the real build: (name pattern, in features, out features, instances, routed expert)
    matrices: tuple[tuple[str, int, int, int, bool], ...] = ()
    embedding: int = 0  # parameters of the input embedding
    head: int = 0  # parameters of an output layer that is not tied to the embedding (0 when tied or absent)
    sizes: dict[str, int] = field(default_factory=dict)  # the project's symbols the config sets (H, L, V, a...)

    @property
    def is_moe(self) -> bool:
        """Whether some tensors are routed experts (``active`` is then the per-token count)."""
        return self.active is not None

    @property
    def in_fields(self) -> bool:
        """Whether every term is written in config fields (no measured constants)."""
        return not self.unexplained

    def params_formula(self, active: bool = False) -> Formula:
        """Total (or per-token active) parameters as a Formula; at ``values`` it is the exact count."""
        terms = self.active_terms if active and self.is_moe else self.terms
        note = "; ".join(self.notes)
        title = f"{'Active parameters' if active else 'Parameters'} of {self.name} (generic torch path)"
        return Formula("model.params.active" if active else "model.params", title, terms, source=SOURCE,
                       where=f"{self.architecture} built on the meta device", note=note, name="N")

    def formula_values(self, active: bool = False) -> dict[str, int]:
        """The values of exactly the symbols the formula uses."""
        names = {s.name for s in self.params_formula(active).inputs}
        return {k: v for k, v in self.values.items() if k in names}


def _fit(base: Mapping[tuple[Unit, int], int], doubled: Mapping[Path, Mapping[tuple[Unit, int], int] | None],
         quadrupled: Mapping[Path, Mapping[tuple[Unit, int], int] | None], value: Mapping[Path, int],
         sym: Mapping[Path, sympy.Symbol],
         pair: Callable[[Path, Path], Mapping[tuple[Unit, int], int] | None] | None = None,
         ) -> dict[tuple[Unit, int], sympy.Expr | None]:
    out: dict[tuple[Unit, int], sympy.Expr | None] = {}
    for q, v0 in base.items():
        # a field whose change makes the tensor vanish (or split) says nothing about its size: ignored,
        # and the check at an independent point decides
        responses = {p: (None if d is None else d.get(q)) for p, d in doubled.items()}
        expr = _monomial(v0, responses, value, sym)
        if expr is None:
            quadruples = {p: (None if d is None else d.get(q)) for p, d in quadrupled.items()}
            joint = None if pair is None else (lambda p1, p2, q=q: _get(pair(p1, p2), q))
            expr = _separable(v0, responses, quadruples, value, sym, joint)
        out[q] = expr
    return out


def _get(quantities: Mapping[tuple[Unit, int], int] | None, q: tuple[Unit, int]) -> int | None:
    return None if quantities is None else quantities.get(q)


def _unit_expr(unit: Unit, shape: tuple[int, ...], fitted: Mapping[tuple[Unit, int], sympy.Expr | None]) -> sympy.Expr | None:
    parts = [fitted.get((unit, -1))] + [fitted.get((unit, i)) for i in range(len(shape))]
    if any(p is None for p in parts):
        return None
    return sympy.Mul(*parts)


def _evaluate(expr: sympy.Expr, point: Mapping[sympy.Symbol, int]) -> sympy.Rational:
    return sympy.Rational(expr.xreplace({s: sympy.Integer(point[s]) for s in expr.free_symbols}))


def analyse(data: Mapping[str, Any], name: str = "", architecture: str | None = None,
            progress: Callable[[str], None] | None = None) -> GenericModel:
    """The GenericModel of a config dict (see the module docstring); needs torch."""
    if not torch_available():
        raise GenericError(f"this model type needs the '{EXTRA}' extra ({INSTALL_EXTRA})")
    with _quiet(), collector.when_opted_in(collector.paused):  # builds make no cycles to collect
        spec = _analyse(data, name, architecture)
    if progress:
        progress(f"{spec.model_type}: {spec.total} parameters, {len(spec.unexplained)} measured terms")
    return spec


def _analyse(data: Mapping[str, Any], name: str, architecture: str | None) -> GenericModel:
    model, config = built_model(config_object(data), architecture)
    cls = type(model)
    real_shapes = {n: tuple(int(s) for s in p.shape) for n, p in model.named_parameters()}
    real_data = config.to_dict()
    config_class = type(config)
    make_config = _config_maker(config_class)

    probed: dict[bytes, Shapes | None] = {}

    def probe(d: dict[str, Any]) -> Shapes | None:
        try:  # two routes to one config build it once (pickle tells 1 from "1" and 1.0, lists from tuples)
            key = pickle.dumps(d, protocol=5)
        except Exception:
            return _probe(d)
        if key not in probed:
            probed[key] = _probe(d)
        return probed[key]

    def _probe(d: dict[str, Any]) -> Shapes | None:
        try:
            with _quiet():
                cfg = make_config(d)
            return shapes(cfg, cls)
        except Exception:
            return None

    fields = int_fields(real_data)
    scope = symtab.SymbolScope()  # the model's own field symbols, kept by the GenericModel
    sym = symbols_for(list(fields), scope)
    real_point = {sym[p]: v for p, v in fields.items()}
    real_units = units(real_shapes)
    total = sum(_numel(s) for s in real_shapes.values())
    # Probe at a shrunk copy (few layers: fast to build) when it rebuilds; else at the config itself.
    base_data = _shrink(real_data, fields)
    base_shapes = probe(base_data) if base_data != real_data else None
    if base_shapes is None:
        base_data = real_data
        base_shapes = probe(real_data)
        if base_shapes != real_shapes:
            base_shapes = None
    exprs: dict[Unit, sympy.Expr | None] = {u: None for u in real_units}
    verified = False
    if base_shapes is not None:
        exprs, verified = _best_fit(_fewer_layers(base_data, base_shapes, probe), sym, probe, real_units, real_point)
    terms, unexplained = _terms(exprs, real_units)
    active, active_terms = _active(terms, sym, fields, model)
    used = {s for t in terms + active_terms for s in t.expr.free_symbols}
    # equal, not identical: SymPy's cache may hand back an earlier model's equal symbol inside an expression
    values = {s.name: fields[p] for s in symtab.ordered(used) for p in sym if sym[p] == s}
    paths = {s.name: ".".join(p) for s in symtab.ordered(used) for p in sym if sym[p] == s}
    notes = [] if base_shapes is not None else ["the config does not rebuild from its own dict; no field was probed"]
    embedding, head = _embeddings(model)
    spec = GenericModel(name=name or str(data.get("model_type")), model_type=str(config.model_type),
                        architecture=cls.__name__, total=total, terms=terms, values=values, fields=paths,
                        active=active, active_terms=active_terms, unexplained=tuple(unexplained),
                        verified=verified and not unexplained, notes=tuple(notes), symbols=scope,
                        matrices=_matrices(model, active_terms, terms), embedding=embedding, head=head,
                        sizes=_sizes(fields))
    return spec


def _sizes(fields: Mapping[Path, int]) -> dict[str, int]:
    """The project's symbols (``KNOWN``) the config's top-level fields set, by symbol name."""
    out: dict[str, int] = {}
    for path in sorted(fields, key=len):
        symbol = KNOWN.get(path[-1])
        if symbol is not None and symbol.name not in out:
            out[symbol.name] = fields[path]
    return out


def _embeddings(model: Any) -> tuple[int, int]:
    """(input embedding parameters, untied output layer parameters) of a built model."""
    def numel(module: Any) -> int:
        return sum(p.numel() for p in module.parameters()) if module is not None else 0

    inputs = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    try:
        output = model.get_output_embeddings()
    except Exception:  # a model without an output layer
        output = None
    tied = output is not None and inputs is not None and output.weight is inputs.weight
    return int(numel(inputs)), 0 if tied else int(numel(output))


def _matrices(model: Any, active_terms: tuple[Term, ...], terms: tuple[Term, ...]
              ) -> tuple[tuple[str, int, int, int, bool], ...]:
    """The weight matrices of a built model: nn.Linear layers and stacked expert tensors (out × in slices).

    The output layer is left out (the planner counts it with the logits); a routed expert's
    matrices are flagged (a token passes k of n of them).
    """
    import torch

    try:
        head = model.get_output_embeddings()
    except Exception:  # a model without an output layer
        head = None
    routed = {t.key for t, full in zip(active_terms, terms) if t.expr != full.expr} if active_terms else set()
    modules = dict(model.named_modules())
    found: dict[tuple[str, int, int, bool], int] = {}
    for name, module in modules.items():
        if isinstance(module, torch.nn.Linear) and module is not head:
            pattern = _INDEX.sub(".*", name)
            key = (pattern, int(module.in_features), int(module.out_features), pattern + ".weight" in routed)
            found[key] = found.get(key, 0) + 1
    for name, tensor in model.named_parameters():
        owner = modules.get(name.rpartition(".")[0])
        if owner is not None and type(owner).__name__.endswith("Experts") and tensor.dim() == 3:
            pattern = _INDEX.sub(".*", name)
            key = (pattern, int(tensor.shape[2]), int(tensor.shape[1]), pattern in routed)
            found[key] = found.get(key, 0) + int(tensor.shape[0])
    return tuple((p, i, o, n, r) for (p, i, o, r), n in found.items())


def _config_maker(config_class: Any) -> Callable[[dict[str, Any]], Any]:
    """``config_class.from_dict`` for a probe's dict: the class itself where ``from_dict`` is the base one.

    The base ``from_dict`` without keyword arguments is ``cls(**d)`` plus a log line that formats
    the whole config even when nothing is logged; a class that overrides it (timm's wrapper, which
    maps ``num_classes`` to labels) keeps its own.
    """
    from transformers import PretrainedConfig

    own = getattr(config_class.from_dict, "__func__", None)
    if own is getattr(PretrainedConfig.from_dict, "__func__", object()):
        return lambda d: config_class(**d)
    return config_class.from_dict


PROBE_LAYERS = 24  # a multiple of the usual layer patterns (every 2nd, 3rd, 4th, 6th, 8th layer)


SMALL_LAYERS = 4  # the probe base of a model whose layers are all alike
DIMS_LAYERS = (4, 8, 12)  # candidate layer counts of a patterned model's base for probing tensor dimensions
HALF_LAYERS = PROBE_LAYERS // 2  # a patterned model's base when its pattern repeats within it


def _shrink(data: dict[str, Any], fields: Mapping[Path, int], layers: int = PROBE_LAYERS) -> dict[str, Any]:
    """A copy with every layer-count field above ``layers`` set to it (per-layer lists cut to match)."""
    out = data
    for path, v in fields.items():
        if KNOWN.get(path[-1]) is L and v > layers:
            out = _set(out, path, layers, v)
    return out


Base = tuple[dict[str, Any], Shapes, tuple[dict[str, Any], Shapes] | None]  # (config, shapes, smaller copy or None)


def _fewer_layers(data: dict[str, Any], shapes_at: Shapes, probe: Callable[[dict[str, Any]], Shapes | None]
                  ) -> list[Base]:
    """The probe bases to fit at, in order: each (config, its shapes, a smaller copy for the
    dimensions of a patterned model or None); a later one is fitted only when an earlier one
    leaves a tensor unexplained or fails its check (``_best_fit`` picks).

    Every probe rebuilds the model, and a build costs about its layer count. When one layer-count
    field changes, from n to m, and every parameter group either stays (embeddings, head) or is in
    every layer (n instances, then m), the SMALL_LAYERS-layer copy is the base. Any layer pattern
    (every 2nd MoE, the first k dense, attention every 8th) keeps a base of PROBE_LAYERS layers,
    because a pattern found at few layers may hold there only; its instance counts are fitted
    there. That base is halved (``_repeating_half``) when the pattern repeats within its first
    half, with the whole one as the fallback: a layer pattern's period field, doubled twice,
    may need more layers than the half has (every 8th layer of 12). A copy with fewer layers
    (DIMS_LAYERS) that holds every parameter group with the same shapes is returned beside the
    base: fields that change only tensor dimensions there are probed on it (``_fit_units``). Two
    kinds of layer whose tensors share names and shapes look alike on such a copy even when it
    lacks one of them; a field that then changes only the missing kind is answered wrongly
    there, and the joint check at an independent point (``_verify``) leaves that tensor
    unexplained.
    """
    fields = int_fields(data)
    big = units(shapes_at)
    for layers in sorted({SMALL_LAYERS, *DIMS_LAYERS}):
        small = _shrink(data, fields, layers)
        if small == data:
            break  # no layer count above this one
        got = probe(small)
        if got is None:
            continue
        few = units(got)
        if not _same_groups(big, few):
            continue  # some layer kind (or its first-seen order) is missing at this many layers
        changed = list(_changed(fields, small).values())
        if layers == SMALL_LAYERS and len(changed) == 1 and all(
                big[u][0] == few[u][0] or (big[u][0], few[u][0]) == changed[0] for u in big):
            return [(small, got, None)]
        whole: Base = (data, shapes_at, (small, got))
        half = _repeating_half(data, fields, big, probe, layers, few) if layers < HALF_LAYERS else None
        return [whole] if half is None else [(*half, (small, got)), whole]
    return [(data, shapes_at, None)]


Fit = tuple[dict[Unit, sympy.Expr | None], bool]  # (each unit's expression or None, checked at a second point)


def _best_fit(bases: list[Base], sym: Mapping[Path, sympy.Symbol], probe: Callable[[dict[str, Any]], Shapes | None],
              real_units: Mapping[Unit, tuple[int, tuple[int, ...]]], real_point: Mapping[sympy.Symbol, int]) -> Fit:
    """The fit at the first base that explains every tensor and checks, else at the last base (the
    whole one) unless an earlier fit is as checked and leaves no more tensors unexplained.

    Every expression must give the real config's size (``real_units`` at ``real_point``), or it is None.
    """
    fits: list[Fit] = []
    for data_at, shapes_at, small in bases:
        found, ok = _fit_units(shapes_at, data_at, int_fields(data_at), sym, probe, small)
        fits.append(({u: e if (e := found.get(u)) is not None and _evaluate(e, real_point) == c * _numel(shape)
                      else None for u, (c, shape) in real_units.items()}, ok))
        if ok and None not in fits[-1][0].values():
            return fits[-1]  # a base later in the list is only a fallback
    return next(f for f in fits if _covers(f, fits[-1]))


def _covers(fit: Fit, than: Fit) -> bool:
    """Whether ``fit`` is checked wherever ``than`` is and leaves no more tensors unexplained."""
    return fit[1] >= than[1] and sum(e is None for e in fit[0].values()) <= sum(e is None for e in than[0].values())


def _same_groups(big: Mapping[Unit, tuple[int, tuple[int, ...]]], few: Mapping[Unit, tuple[int, tuple[int, ...]]]
                 ) -> bool:
    """Whether two builds have the same parameter groups (name patterns, in order) with the same shapes."""
    return set(big) == set(few) and all(big[u][1] == few[u][1] for u in big)


def _changed(fields: Mapping[Path, int], copy: dict[str, Any]) -> dict[Path, tuple[int, int]]:
    """Every field that ``copy`` changes: path -> (value, value in ``copy``)."""
    copy_fields = int_fields(copy)
    return {p: (v, copy_fields[p]) for p, v in fields.items() if copy_fields.get(p) != v}


def _repeating_half(data: dict[str, Any], fields: Mapping[Path, int], big: Mapping[Unit, tuple[int, tuple[int, ...]]],
                    probe: Callable[[dict[str, Any]], Shapes | None], layers: int,
                    few: Mapping[Unit, tuple[int, tuple[int, ...]]]) -> tuple[dict[str, Any], Shapes] | None:
    """The HALF_LAYERS-layer copy of a patterned base, when its instance counts are affine in the layers.

    ``few`` are the groups of the copy with ``layers`` layers (fewer than HALF_LAYERS, with every
    group and shape of the base). The pattern repeats within the half when one layer-count field
    changes, the half's per-layer lists doubled are the base's (``layer_types`` of a period that
    divides HALF_LAYERS, or none), and every group has the same shapes at HALF_LAYERS too, with
    instance counts on one line through the three layer counts (the first 3 layers dense: 1, 9,
    21 MoE layers at 4, 12, 24; attention every 2nd: 2, 6, 12; not attention every 8th from the
    4th: 1, 2, 3). Its probes then cost about half, and its doubled layer count is the base it
    replaces. The formulas found there still have to give the real config and the independent
    point of ``_verify``.
    """
    half_data = _shrink(data, fields, HALF_LAYERS)
    changed = list(_changed(fields, half_data))
    if len(changed) != 1 or _set(half_data, changed[0], fields[changed[0]], HALF_LAYERS) != data:
        return None  # another field changes too, or the per-layer lists do not repeat their first half
    half_shapes = probe(half_data)
    if half_shapes is None:
        return None
    mid = units(half_shapes)
    if not _same_groups(big, mid) or any((big[u][0] - mid[u][0]) * (HALF_LAYERS - layers)
                                         != (mid[u][0] - few[u][0]) * (PROBE_LAYERS - HALF_LAYERS) for u in big):
        return None
    return half_data, half_shapes


def _fit_units(base_shapes: Shapes, base_data: dict[str, Any],
               fields: Mapping[Path, int], sym: Mapping[Path, sympy.Symbol],
               probe: Callable[[dict[str, Any]], Shapes | None],
               small: tuple[dict[str, Any], Shapes] | None = None) -> tuple[dict[Unit, sympy.Expr | None], bool]:
    """Each unit's size as an expression in fields (None where none fits), and whether a joint probe agrees.

    With ``small`` (a base with fewer layers and the same parameter groups and shapes, from
    ``_fewer_layers``), a change of fields is probed there first: when it changes tensor dimensions
    and no instance count, those dimensions are the base's answer and the base itself is not
    rebuilt. Layer counts, and fields that change no dimension or some count there (a layer
    pattern's period), are probed at the base; those that change nothing on ``small`` are probed
    there together first, and one by one only if the joint build differs from the base.
    """
    base_units = units(base_shapes)
    base_q = _quantities(base_units)
    respond = _responder(base_q, base_data, fields, probe, small)
    doubled = _doubled(base_q, base_shapes, base_data, fields, probe, respond)
    quadrupled = {path: respond({path: 4}) for path in _needs_quadruple(base_q, doubled)}
    pairs: dict[frozenset[Path], dict[tuple[Unit, int], int] | None] = {}

    def pair(p1: Path, p2: Path) -> dict[tuple[Unit, int], int] | None:
        key = frozenset((p1, p2))
        if key not in pairs:
            pairs[key] = respond({p1: 2, p2: 2})
        return pairs[key]

    fitted = _fit(base_q, doubled, quadrupled, fields, sym, pair)
    exprs = {u: _unit_expr(u, shape, fitted) for u, (_, shape) in base_units.items()}
    point = {sym[p]: v for p, v in fields.items()}
    for u, expr in exprs.items():
        count, shape = base_units[u]
        if expr is not None and _evaluate(expr, point) != count * _numel(shape):
            exprs[u] = None
    wrong = _verify(exprs, fields, sym, base_data, probe)
    if wrong is None:
        return exprs, False
    return {u: (None if u in wrong else e) for u, e in exprs.items()}, True


Quantities = dict[tuple[Unit, int], int]
UNCHANGED = "unchanged"  # what a probe on the small base says when a change of fields alters no tensor there


def _scaled(data: dict[str, Any], values: Mapping[Path, int], change: Mapping[Path, int]) -> dict[str, Any]:
    """A copy of ``data`` with each field of ``change`` multiplied by its factor."""
    for path, factor in change.items():
        data = _set(data, path, factor * values[path], values[path])
    return data


def _responder(base_q: Quantities, base_data: dict[str, Any], fields: Mapping[Path, int],
               probe: Callable[[dict[str, Any]], Shapes | None], small: tuple[dict[str, Any], Shapes] | None,
               ) -> Callable[..., Quantities | str | None]:
    """fields -> factor, to the base's quantities with those fields scaled (None: it does not build).

    With ``defer=True`` a change that alters nothing on the small base gives ``UNCHANGED`` instead
    of a rebuild of the base (the caller probes such fields together).
    """
    small_data, small_shapes = small if small else ({}, {})
    small_q = _quantities(units(small_shapes))
    small_fields = int_fields(small_data)

    def respond(change: Mapping[Path, int], defer: bool = False) -> Quantities | str | None:
        if small and all(KNOWN.get(p[-1]) is not L and small_fields.get(p) == fields[p] for p in change):
            got = probe(_scaled(small_data, small_fields, change))
            q = None if got is None else _quantities(units(got))
            if defer and got == small_shapes:
                return UNCHANGED
            if q is not None and q.keys() == small_q.keys() and any(q[k] != small_q[k] for k in q) and all(
                    q[k] == small_q[k] for k in q if k[1] == -1):
                return {k: (v if k[1] == -1 else q[k]) for k, v in base_q.items()}
        got = probe(_scaled(base_data, fields, change))
        return None if got is None else _quantities(units(got))

    return respond


def _doubled(base_q: Quantities, base_shapes: Shapes, base_data: dict[str, Any], fields: Mapping[Path, int],
             probe: Callable[[dict[str, Any]], Shapes | None],
             respond: Callable[..., Quantities | str | None]) -> dict[Path, Quantities | None]:
    """Each field's doubling, as the base's quantities; fields inert on the small base are first rebuilt together."""
    found = {path: respond({path: 2}, defer=True) for path in fields}
    inert = [p for p, q in found.items() if q == UNCHANGED]
    if inert:  # the same parameters, name by name, with all of them doubled: none of them sizes anything
        together = probe(_scaled(base_data, fields, {p: 2 for p in inert})) == base_shapes
        for p in inert:
            found[p] = dict(base_q) if together else respond({p: 2})
    return found  # type: ignore[return-value]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _needs_quadruple(base_q: Mapping[tuple[Unit, int], int],
                  doubled: Mapping[Path, Mapping[tuple[Unit, int], int] | None]) -> list[Path]:
    """Fields whose doubling changes some quantity by a factor that is not a power of two."""
    out: list[Path] = []
    for path, d in doubled.items():
        if d is None:
            continue
        for q, v0 in base_q.items():
            v = d.get(q)
            if v is not None and v != v0 and _power_of_two(Fraction(v, v0)) is None:
                out.append(path)
                break
    if not out:
        return out
    # also the power-of-two factors of those quantities, to tell a common factor from a summand
    mixed = {q for q, v0 in base_q.items() for p in out if (d := doubled[p]) is not None and d.get(q) not in (None, v0)
             and _power_of_two(Fraction(d[q], v0)) is None}
    for path, d in doubled.items():
        if d is not None and path not in out and any(d.get(q) not in (None, base_q[q]) for q in mixed):
            out.append(path)
    return out


def _verify(exprs: Mapping[Unit, sympy.Expr | None], fields: Mapping[Path, int], sym: Mapping[Path, sympy.Symbol],
            base_data: dict[str, Any], probe: Callable[[dict[str, Any]], Shapes | None]) -> set[Unit] | None:
    """Rebuild with every field the formula uses doubled at once: the units it mispredicts (None: no build)."""
    by_symbol = {s: p for p, s in sym.items()}
    used = {s for e in exprs.values() if e is not None for s in e.free_symbols}
    if not used:
        return set()
    point = {s: fields[by_symbol[s]] * (2 if s in used else 1) for s in sym.values()}
    got = probe(_scaled(base_data, fields, {by_symbol[s]: 2 for s in used}))
    if got is None:
        return None
    measured = {u: c * _numel(s) for u, (c, s) in units(got).items()}
    return {u for u, e in exprs.items() if e is not None and measured.get(u) != _evaluate(e, point)}


def _terms(exprs: Mapping[Unit, sympy.Expr | None],
           base_units: Mapping[Unit, tuple[int, tuple[int, ...]]]) -> tuple[tuple[Term, ...], list[str]]:
    """One term per name pattern (its shapes summed); unfitted sizes kept as their measured number."""
    grouped: dict[str, list[sympy.Expr]] = {}
    unexplained: list[str] = []
    for (pattern, _), expr in exprs.items():
        count, shape = base_units[(pattern, _)]
        if expr is None:
            if pattern not in unexplained:
                unexplained.append(pattern)
            expr = sympy.Integer(count * _numel(shape))
        grouped.setdefault(pattern, []).append(expr)
    terms = []
    for pattern, parts in grouped.items():
        note = NOTE_CONSTANT if pattern in unexplained else ""
        terms.append(Term(pattern, pattern, sympy.Add(*parts), "params", SOURCE, note=note))
    return tuple(terms), unexplained


EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_LISTED_EXPERT = re.compile(r"^(.*(?:^|\.)experts)\.(\d+)\.")  # a ModuleList of experts: ...experts.3.w1.weight


def routed_experts(model: Any, experts: int) -> set[str] | None:
    """Name patterns (layer and expert indices as ``*``) of the routed experts' tensors, read from the module tree.

    A routed expert's tensors are those of a ``ModuleList`` named ``experts`` (one module per expert)
    or those a module whose class is named ``...Experts`` holds stacked, with a leading dimension of
    one slice per expert (``MixtralExperts.gate_up_proj``: experts × 2·d_exp × H); shared experts
    (a name with "shared") are always active. None when the tree's experts do not come in
    ``experts`` slices (LongCat-Flash stacks its zero-computation experts too): their share per
    token is then unknown.
    """
    modules = dict(model.named_modules())
    found: set[str] = set()
    listed: dict[str, set[str]] = {}
    for name, tensor in model.named_parameters():
        if "shared" in name.lower():
            continue
        owner = modules.get(name.rpartition(".")[0])
        in_list = _LISTED_EXPERT.match(name)
        if in_list:
            listed.setdefault(in_list.group(1), set()).add(in_list.group(2))
        elif owner is not None and type(owner).__name__.endswith("Experts"):
            if not tensor.shape or int(tensor.shape[0]) != experts:
                return None
        else:
            continue
        found.add(_INDEX.sub(".*", name))
    if any(len(indices) != experts for indices in listed.values()):
        return None
    return found


def _field(fields: Mapping[Path, int], names: tuple[str, ...]) -> Path | None:
    """The first config field (top level first) whose name is one of ``names``."""
    return next((p for p in sorted(fields, key=len) if p[-1] in names), None)


def _active(terms: tuple[Term, ...], sym: Mapping[Path, sympy.Symbol], fields: Mapping[Path, int],
            model: Any) -> tuple[int | None, tuple[Term, ...]]:
    """Per-token parameters: the total less the inactive experts', each routed-expert term scaled by top-k / experts.

    The experts and the experts per token come from the config's fields (``EXPERT_FIELDS``,
    ``TOP_K_FIELDS``), which tensors are routed experts from the module tree (``routed_experts``).
    """
    experts_path, top_path = _field(fields, EXPERT_FIELDS), _field(fields, TOP_K_FIELDS)
    if experts_path is None or top_path is None or fields[top_path] > fields[experts_path]:
        return None, ()
    patterns = routed_experts(model, fields[experts_path])
    if not patterns:
        return None, ()
    experts, top = sym[experts_path], sym[top_path]
    out = tuple(t.replace(expr=t.expr * top / experts) if t.key in patterns else t for t in terms)
    point = {s: fields[p] for p, s in sym.items()}
    active = sum(_evaluate(t.expr, point) for t in out)
    if not active.is_integer:  # experts of unequal sizes: no whole share per token
        return None, ()
    return int(active), out


@lru_cache(maxsize=256)
def _cached(model_type: str) -> GenericModel:
    return analyse({"model_type": model_type}, name=model_type)


def default_model(model_type: str) -> GenericModel:
    """The GenericModel of a model type's default config (cached per type)."""
    return _cached(model_type)
