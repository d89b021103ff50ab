"""Report specifications: a TOML file read with tomllib, checked field by field.

Every problem is one line that names the file (and the line, where it can be found): unknown
keys get the closest valid name suggested, malformed TOML gets tomllib's line and column.
Values are checked here; nothing in a specification is ever evaluated as code.

```toml
title = "Llama-3-8B fine-tuning on one H100"
author = "Capacity planning"
model = "llama-3-8b"          # a preset, a path to config.json (relative to this file),
                              # or the source articles' networks "article-a" / "article-b"
mode = "train"                # or "infer"
notes = "Free text."
gpus = ["h100-80gb", { name = "My card", memory = "24GiB" }]
# a budget: a fraction of a GPU and/or memory reserved, e.g.
# gpus = [{ name = "l4", fraction = 0.9, reserve = { other-process = "1GiB" } }]

[regime]
batch = 1                     # the memory planner's options: batch, seq, precision, optimizer,
seq = 4096                    # recompute, flash, zero, dp, tp, pp, weights, kv_dtype, ...
precision = "bf16"
optimizer = "adam-8bit"

[sweep]
batch = [1, 2, 4, 8, 16]
seq = { from = 512, to = 32768 }   # powers of two from .. to
```
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import sympy

from ..catalogs import GPU
from ..catalogs.budget import Budget, Reservation, as_fraction, reservation
from ..core import symbols as symtab
from ..core import values as vals
from ..core.errors import UserError
from ..core.units import SizeError, floor_size
from ..core.userfiles import file_problem, parse_toml, read_user_file
from ..math.userterms import CustomTerm, CustomTermError
from ..options import table as opts
from . import plan_section, serve_section

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MODES = opts.MODES
FORMULAS = ("article-a", "article-b", "library")
ARTICLE_MODELS = ("article-a", "article-b")

# The regime's keys are the memory planner's options, with their kinds and choices, from the one
# list in symbolic.options.table.
REGIME_KEYS = opts.NAMES
SIZE_KEYS = opts.names(kind="size")
DEGREE_KEYS = opts.names(kind="degree")
FLAG_KEYS = opts.names(kind="flag")
STAGE_KEYS = opts.names(kind="stage")
NAMES_KEYS = opts.names(kind="names")
FRACTION_KEYS = opts.names(kind="fraction")
CHOICES: dict[str, tuple[str, ...]] = {o.name: tuple(map(str, o.choices)) for o in opts.OPTIONS if o.kind == "choice"}

TOP_KEYS = ("title", "author", "date", "notes", "model", "formulas", "mode", "regime", "gpus", "sweep", "values",
            "terms", "plan", "serve", "module")
MODULE_KEYS = ("arguments", "inputs", "loss", "sizes", "checkpoint_modules")
TERM_KEYS = ("name", "expr", "unit", "title", "note", "implicit")
MAX_TERMS = 16
GPU_KEYS = ("name", "memory", "fraction", "reserve")
MAX_RESERVATIONS = 8
SWEEP_KEYS = ("batch", "seq")
RANGE_KEYS = ("from", "to")

MAX_TEXT = {"title": 200, "author": 200, "date": 60, "notes": 5000}
MAX_GPUS = 8
MAX_SWEEP = 40
MAX_SIZE = 2**24  # batch (a sequence length has the planner's bound, options.table.MAX_SEQ)
MAX_DEGREE = 2**16  # dp, tp, pp
MAX_FILE = 256 * 1024


def _high(key: str) -> int:
    """The largest value of a size key: the planner's bound for a sequence length, ``MAX_SIZE`` for a batch."""
    return opts.MAX_SEQ if key == "seq" else MAX_SIZE


class ReportSpecError(UserError):
    """A problem with a report specification, as one line."""


@dataclass(frozen=True)
class ModelRef:
    """The model a report is about: a name (preset or article network) or a config file."""

    name: str
    path: Path | None = None
    module: str | None = None  # a torch module: PATH.py:NAME (PATH resolved) or a library's prefix:NAME
    arguments: tuple[tuple[str, Any], ...] = ()  # its [module] table: constructor arguments,
    inputs: tuple[str, ...] = ()  # forward inputs (NAME=D1,D2,...[:DTYPE]),
    loss: str | None = None  # the loss applied to its output,
    sizes: tuple[tuple[str, int], ...] = ()  # and its input sizes' values
    checkpoint: tuple[str, ...] = ()  # the blocks --checkpoint-modules names (recompute full, FSDP2's units)

    @property
    def is_article(self) -> bool:
        return self.path is None and self.module is None and self.name in ARTICLE_MODELS

    @property
    def runs_code(self) -> bool:
        """Whether planning it imports a user's Python file (building the report then needs --trust-code)."""
        from ..networks.module.files import is_file_model

        return self.module is not None and is_file_model(self.module)


@dataclass(frozen=True)
class GpuRef:
    """A GPU to compare: a catalogue name, or a name with its own capacity in bytes."""

    name: str
    memory: int | None = None
    fraction: Fraction | None = None  # of the capacity a plan may use (a Budget, catalogs.budget)
    reserve: tuple[Reservation, ...] = ()  # memory something else holds
    notes: tuple[str, ...] = ()  # how a size that was not whole bytes was rounded

    def budget(self, path: Path | None = None) -> Budget:
        """What a plan on this GPU is checked against: its capacity (inline or the catalogue's) × fraction −
        reservations; a catalogue name unknown, or reservations that leave nothing, are one-line errors."""
        from ..catalogs import get

        where = f"{path}: gpus: " if path else "gpus: "
        try:
            gpu = get(self.name) if self.memory is None else GPU(self.name, self.name, "", self.memory, "spec",
                                                                  "the specification")
        except UserError as err:
            raise ReportSpecError(f"{where}{err}") from None
        try:
            return Budget(gpu, self.fraction or Fraction(1), self.reserve, self.notes)
        except UserError as err:
            raise ReportSpecError(f"{where}{self.name}: {err}") from None


@dataclass(frozen=True)
class RegimeOptions:
    """How the model runs: the options the specification's ``[regime]`` gives (the planner's names).

    Only what the file says; ``planning.regime.Regime`` is the planner's resolved set of choices.

    ``regime.batch`` and the like read one option; None means "not given: the default".
    """

    options: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        if name in REGIME_KEYS:
            return self.options.get(name)
        raise AttributeError(name)


@dataclass(frozen=True)
class Sweep:
    """Batch sizes and sequence lengths to plot memory against (empty: chosen automatically)."""

    batch: tuple[int, ...] = ()
    seq: tuple[int, ...] = ()


@dataclass(frozen=True)
class ReportSpec:
    """A validated report specification."""

    title: str
    model: ModelRef
    formulas: str
    mode: str = "train"
    author: str = ""
    date: str = ""
    notes: str = ""
    regime: RegimeOptions = field(default_factory=RegimeOptions)
    gpus: tuple[GpuRef, ...] = ()
    sweep: Sweep = field(default_factory=Sweep)
    values: dict[str, sympy.Rational] = field(default_factory=dict)
    terms: tuple[CustomTerm, ...] = ()
    path: Path | None = None
    plan: dict[str, Any] | None = None  # the [plan] table (issue 15; report/plan_section.py)
    serve: dict[str, Any] | None = None  # the [serve] table (issue 27; report/serve_section.py)

    def with_extras(self, terms: tuple[CustomTerm, ...] = (), values: dict[str, object] | None = None) -> ReportSpec:
        """This specification plus terms and values from the command line (``--term``, ``--set``)."""
        checker = _Checker(None, "")
        taken = {t.name for t in self.terms}
        for term in terms:
            if term.name in taken:
                raise ReportSpecError(f"--term {term.name}: the specification already defines a term {term.name!r}")
            term.to_term()
            taken.add(term.name)
        extra = checker.values(dict(values or {}), where=("--set",))
        return replace(self, terms=self.terms + tuple(terms), values={**self.values, **extra})


def load(path: str | Path) -> ReportSpec:
    """Read and validate the specification at ``path``."""
    file = Path(path)
    if not file.exists():
        raise ReportSpecError(f"report specification not found: {file}")
    return loads(read_user_file(file, limit=MAX_FILE, what="a report specification", error=ReportSpecError), file)


def loads(raw: bytes, origin: Path) -> ReportSpec:
    """Validate the specification in ``raw`` (a file's or stdin's bytes); messages name ``origin``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ReportSpecError(f"{origin}:{line}: not UTF-8 text") from None
    try:
        data = parse_toml(text, origin, error=ReportSpecError)
    except tomllib.TOMLDecodeError as err:
        raise ReportSpecError(_toml_message(origin, err)) from None
    return parse(data, origin=origin, text=text)


def _toml_message(file: Path, err: Exception) -> str:
    message = str(err).splitlines()[0] if str(err) else "malformed TOML"
    match = re.search(r"\s*\(at line (\d+), column (\d+)\)", message)
    if match:
        message = message[: match.start()] + message[match.end():]
        return f"{file}:{match.group(1)}:{match.group(2)}: malformed TOML: {message.strip()}"
    match = re.search(r"\s*\(at end of document\)", message)
    if match:
        lines = max(1, len(err.doc.splitlines())) if hasattr(err, "doc") else 1  # type: ignore[attr-defined]
        return f"{file}:{lines}: malformed TOML: {message[: match.start()].strip()} (at end of file)"
    return f"{file}: malformed TOML: {message}"


def parse(data: dict[str, Any], origin: Path | None = None, text: str = "") -> ReportSpec:
    """Validate a specification already read into a dict (``origin`` resolves relative paths)."""
    checker = _Checker(origin, text)
    return checker.spec(data)


class _Checker:
    """Field-by-field validation with file-and-line error messages."""

    def __init__(self, origin: Path | None, text: str) -> None:
        self.origin = origin
        self.lines = text.splitlines()

    # --- errors ----------------------------------------------------------------------------
    def fail(self, where: tuple[str, ...], message: str) -> ReportSpecError:
        """A one-line error naming the file, the line (when found) and the key."""
        key = ".".join(k if re.fullmatch(r"[A-Za-z0-9_\-]+", k) else json.dumps(k) for k in where)
        if where and where[0].startswith("--"):  # a command-line option, not a file
            text = f"{where[0]} {key[len(where[0]) + 1:]}: {message}"
        else:
            name = str(self.origin) if self.origin else "report specification"
            line = self._line_of(where)
            place = f"{name}:{line}" if line else name
            text = f"{place}: {key}: {message}" if key else f"{place}: {message}"
        return ReportSpecError(text.replace("\r", "\\r").replace("\n", "\\n"))

    def _line_of(self, where: tuple[str, ...]) -> int | None:
        """The line that sets ``where`` (best effort: plain and dotted keys, [table] headers)."""
        if not where or not self.lines:
            return None
        table: tuple[str, ...] = ()
        arrays: dict[tuple[str, ...], int] = {}
        header = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\s\"']+?)\s*\]\]?\s*(#.*)?$")
        for number, line in enumerate(self.lines, 1):
            match = header.match(line)
            if match:
                table = tuple(part.strip().strip("\"'") for part in match.group(2).split("."))
                if match.group(1) == "[[":  # the n-th [[name]] is entry n of the array "name"
                    arrays[table] = arrays.get(table, -1) + 1
                    table = table + (str(arrays[table]),)
                if table == where:
                    return number
                continue
            stripped = line.strip()
            for split in range(len(where)):
                if table != where[:split]:
                    continue
                dotted = r"\s*\.\s*".join(re.escape(k) for k in where[split:])
                if re.match(rf"^[\"']?{dotted}[\"']?\s*=", stripped):
                    return number
        # an entry inside an inline table or array: the line of its parent key
        return self._line_of(where[:-1]) if len(where) > 1 else None

    def unknown(self, where: tuple[str, ...], key: str, allowed: tuple[str, ...]) -> ReportSpecError:
        hint = symtab.suggest(key, allowed)
        return self.fail(where + (key,), f"unknown key{hint}; valid keys: {', '.join(allowed)}")

    def keys(self, table: dict[str, Any], allowed: tuple[str, ...], where: tuple[str, ...]) -> None:
        for key in table:
            if key not in allowed:
                raise self.unknown(where, key, allowed)

    # --- scalars -------------------------------------------------------------------------
    def text(self, value: Any, where: tuple[str, ...], limit: int) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"expected text in quotes, got {_kind(value)}")
        if len(value) > limit:
            raise self.fail(where, f"too long ({len(value)} characters; at most {limit})")
        if "\x00" in value:
            raise self.fail(where, "contains a NUL character")
        return value

    def choice(self, value: Any, where: tuple[str, ...], options: tuple[str, ...]) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"expected one of {', '.join(options)}, got {_kind(value)}")
        if value not in options:
            hint = symtab.suggest(value, options)
            raise self.fail(where, f"{value!r} is not one of {', '.join(options)}{hint}")
        return value

    def count(self, value: Any, where: tuple[str, ...], low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected a whole number, got {_kind(value)}")
        if value > high == opts.MAX_SEQ:  # a sequence length: the planner's bound and why
            raise self.fail(where, opts.seq_too_long(value))
        if not low <= value <= high:
            raise self.fail(where, f"{value} is out of range ({low} to {high:,})")
        return value

    def flag(self, value: Any, where: tuple[str, ...]) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"expected true or false, got {_kind(value)}")
        return value

    def table(self, value: Any, where: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a table, got {_kind(value)}")
        return value

    # --- sections ------------------------------------------------------------------------
    def spec(self, data: dict[str, Any]) -> ReportSpec:
        self.keys(data, TOP_KEYS, ())
        if "title" not in data:
            raise self.fail((), "missing the required key 'title'")
        if "model" not in data:
            raise self.fail((), "missing the required key 'model' (a preset such as 'llama-3-8b', a path to a "
                                "config.json, or 'article-a' / 'article-b')")
        texts = {k: self.text(data[k], (k,), MAX_TEXT[k]) if k in data else "" for k in MAX_TEXT}
        if not texts["title"].strip():
            raise self.fail(("title",), "must not be empty")
        model = self.module_options(self.model(data["model"]), data.get("module"))
        default = model.name if model.is_article else "library"
        formulas = self.choice(data.get("formulas", default), ("formulas",), FORMULAS)
        if formulas == "article-a" and model.name != "article-a":
            raise self.fail(("formulas",), "article A's formulas describe its own network: use model = 'article-a'")
        if formulas == "library" and model.is_article:
            raise self.fail(("formulas",), f"model {model.name!r} is a source article's network; "
                                           f"use formulas = {model.name!r}")
        if model.name == "article-a" and formulas != "article-a":
            raise self.fail(("formulas",), "model 'article-a' needs formulas = 'article-a'")
        mode = self.choice(data.get("mode", "train"), ("mode",), MODES)
        regime = self.regime(data.get("regime", {}))
        if model.checkpoint and not (regime.recompute == "full" or regime.fsdp or data.get("plan") is not None):
            raise self.fail(("module", "checkpoint_modules"), "names the blocks recompute 'full' checkpoints and "
                                                              "fsdp shards: give one of them in [regime] (alone it "
                                                              "changes nothing)")
        gpus = self.gpus(data.get("gpus", []))
        sweep = self.sweep(data.get("sweep", {}))
        terms = self.terms(data.get("terms", []))
        values = self.values(data.get("values", {}))
        return ReportSpec(title=texts["title"], model=model, formulas=formulas, mode=mode, author=texts["author"],
                          date=texts["date"], notes=texts["notes"], regime=regime, gpus=gpus, sweep=sweep,
                          values=values, terms=terms, path=self.origin,
                          plan=plan_section.check(data.get("plan"), self.fail),
                          serve=serve_section.check(data.get("serve"), self.fail))

    def model(self, value: Any) -> ModelRef:
        where = ("model",)
        name = self.text(value, where, 1000).strip()
        if not name:
            raise self.fail(where, "must not be empty")
        from ..networks.module import files, resolve

        if resolve.is_module_model(name):
            if not files.is_file_model(name):
                return ModelRef(name, module=name)
            file, _, attr = name.rpartition(":")
            path = Path(file).expanduser()
            if not path.is_absolute() and self.origin is not None:
                path = self.origin.parent / path
            return ModelRef(name, module=f"{path}:{attr}")
        if name.endswith(".json") or "/" in name or "\\" in name:
            path = Path(name).expanduser()
            if not path.is_absolute() and self.origin is not None:
                path = self.origin.parent / path
            if not path.is_file():  # a folder, a FIFO or an unreadable path is not "not found"
                problem = file_problem(path, "a config.json") if os.path.lexists(path) else None
                raise self.fail(where, problem or f"config file not found: {path}")
            return ModelRef(path.stem if path.name != "config.json" else path.parent.name or "config", path.resolve())
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,99}", name):
            raise self.fail(where, f"{name!r} is not a model name (letters, digits, '.', '_', '-') "
                                   "or a path to a config.json")
        return ModelRef(name)

    def module_options(self, model: ModelRef, value: Any) -> ModelRef:
        """The [module] table of a torch module model: arguments, inputs, loss, sizes (checked, never evaluated)."""
        where = ("module",)
        if value is None:
            return model
        if model.module is None:
            raise self.fail(where, "applies to a torch module model (PATH.py:NAME, torchvision:NAME, ...)")
        table = self.table(value, where)
        self.keys(table, MODULE_KEYS, where)
        arguments = self.table(table.get("arguments", {}), where + ("arguments",))
        for key, item in arguments.items():
            if not isinstance(item, (bool, int, float, str)):
                raise self.fail(where + ("arguments", key), f"expected a number, true/false or a string, got "
                                                              f"{_kind(item)}")
        inputs = table.get("inputs", [])
        if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
            raise self.fail(where + ("inputs",), "expected a list of strings NAME=D1,D2,...[:DTYPE]")
        loss = table.get("loss")
        if loss is not None:
            from ..networks.module.source import LOSSES

            loss = self.choice(loss, where + ("loss",), LOSSES)
        sizes = self.table(table.get("sizes", {}), where + ("sizes",))
        counted = tuple((k, self.count(v, where + ("sizes", k), 1, MAX_SIZE)) for k, v in sizes.items())
        named = table.get("checkpoint_modules", [])
        if not isinstance(named, list) or not all(isinstance(n, str) and n.strip() for n in named):
            raise self.fail(where + ("checkpoint_modules",), "expected a list of qualified names or class names")
        return replace(model, arguments=tuple(arguments.items()), inputs=tuple(inputs), loss=loss, sizes=counted,
                       checkpoint=tuple(dict.fromkeys(n.strip() for n in named)))

    def regime(self, value: Any) -> RegimeOptions:
        where = ("regime",)
        table = self.table(value, where)
        self.keys(table, REGIME_KEYS, where)
        out: dict[str, Any] = {}
        for key, item in table.items():
            at = where + (key,)
            if key in SIZE_KEYS:
                out[key] = self.count(item, at, 1, _high(key))
            elif key in DEGREE_KEYS:
                out[key] = self.count(item, at, 1, MAX_DEGREE)
            elif key in STAGE_KEYS:
                stages = [int(stage) for stage in opts.get(key).choices]  # type: ignore[call-overload]
                out[key] = self.count(item, at, min(stages), max(stages))
            elif key in FLAG_KEYS:
                out[key] = self.flag(item, at)
            elif key in NAMES_KEYS or key in FRACTION_KEYS:
                parse = opts.parse_names if key in NAMES_KEYS else opts.parse_fraction
                try:
                    out[key] = parse(key, item)
                except opts.PlanOptionError as err:
                    raise self.fail(at, str(err)) from None
            else:
                out[key] = self.choice(item, at, CHOICES[key])
        return RegimeOptions(out)

    def gpus(self, value: Any) -> tuple[GpuRef, ...]:
        where = ("gpus",)
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list of GPU names or {{ name = ..., memory = ... }} tables, "
                                   f"got {_kind(value)}")
        if len(value) > MAX_GPUS:
            raise self.fail(where, f"at most {MAX_GPUS} GPUs per report, got {len(value)}")
        out: list[GpuRef] = []
        for index, item in enumerate(value):
            at = where + (str(index),)
            if isinstance(item, str):
                name = self.text(item, at, 100).strip()
                if not name:
                    raise self.fail(at, "empty GPU name")
                out.append(GpuRef(name))
                continue
            out.append(self.gpu_table(item, at, index))
        names = [g.name for g in out]
        shown = [(g.name, g.fraction, tuple(r.name for r in g.reserve)) for g in out]  # one GPU, two budgets: two rows
        for name, row in zip(names, shown):
            if shown.count(row) > 1:
                raise self.fail(where, f"{name!r} is listed twice")
        return tuple(out)

    def gpu_table(self, item: Any, at: tuple[str, ...], index: int) -> GpuRef:
        """{ name, memory } or a catalogue name with a budget: { name, fraction, reserve = { NAME = SIZE } }."""
        table = self.table(item, at)
        self.keys(table, GPU_KEYS, at)
        budgeted = "fraction" in table or "reserve" in table
        if "name" not in table or ("memory" not in table and not budgeted):
            raise self.fail(at, "a GPU table needs both name and memory, e.g. { name = \"My card\", "
                                "memory = \"24GiB\" } (or a catalogue name with fraction or reserve)")
        name = self.text(table["name"], at + ("name",), 100).strip()
        if not name and "memory" not in table:
            raise self.fail(at + ("name",), "empty GPU name")
        size, notes = None, ()
        if "memory" in table:
            memory = table["memory"]
            if isinstance(memory, bool) or not isinstance(memory, (str, int)):
                raise self.fail(at + ("memory",), f"expected a size such as \"80GiB\", \"80GB\" or 8e10, "
                                                  f"got {_kind(memory)}")
            try:
                size, note = floor_size(str(memory))  # "20.24GiB": rounded down to whole bytes, with a note
            except SizeError as err:
                raise self.fail(at + ("memory",), str(err)) from None
            notes = (note,) if note else ()
        fraction, reserve = self.gpu_budget(table, at)
        return GpuRef(name or f"GPU {index + 1}", size, fraction, tuple(r for r, _ in reserve),
                      notes + tuple(n for _, n in reserve if n))

    def gpu_budget(self, table: dict[str, Any], at: tuple[str, ...]
                   ) -> tuple[Fraction | None, list[tuple[Reservation, str]]]:
        """A GPU entry's fraction (0 < f ≤ 1) and reservations ({ NAME = SIZE }), each checked."""
        fraction = None
        if "fraction" in table:
            value = table["fraction"]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.fail(at + ("fraction",), f"expected a number above 0 and at most 1, got {_kind(value)}")
            try:
                fraction = as_fraction(value, "fraction")
            except UserError as err:
                raise self.fail(at + ("fraction",), str(err)) from None
        reserve = self.table(table.get("reserve", {}), at + ("reserve",))
        if len(reserve) > MAX_RESERVATIONS:
            raise self.fail(at + ("reserve",), f"at most {MAX_RESERVATIONS} reservations, got {len(reserve)}")
        out = []
        for key, size in reserve.items():
            try:
                out.append(reservation(key, size, "the specification"))
            except UserError as err:
                raise self.fail(at + ("reserve", str(key)), str(err)) from None
        return fraction, out

    def sweep(self, value: Any) -> Sweep:
        where = ("sweep",)
        table = self.table(value, where)
        self.keys(table, SWEEP_KEYS, where)
        return Sweep(**{key: self.points(item, where + (key,), _high(key)) for key, item in table.items()})

    def points(self, value: Any, where: tuple[str, ...], high: int = MAX_SIZE) -> tuple[int, ...]:
        if isinstance(value, dict):
            self.keys(value, RANGE_KEYS, where)
            if set(value) != set(RANGE_KEYS):
                raise self.fail(where, "a range needs both from and to, e.g. { from = 1, to = 64 }")
            low = self.count(value["from"], where + ("from",), 1, high)
            top = self.count(value["to"], where + ("to",), 1, high)
            if top < low:
                raise self.fail(where, f"to ({top}) is smaller than from ({low})")
            points = [low]
            while points[-1] * 2 <= top:
                points.append(points[-1] * 2)
            if points[-1] != top:
                points.append(top)
        elif isinstance(value, list):
            points = [self.count(v, where + (str(i),), 1, high) for i, v in enumerate(value)]
            if len(points) < 2:
                raise self.fail(where, "give at least two points")
        else:
            raise self.fail(where, f"expected a list such as [1, 2, 4, 8] or {{ from = 1, to = 64 }}, "
                                   f"got {_kind(value)}")
        if len(points) > MAX_SWEEP:
            raise self.fail(where, f"at most {MAX_SWEEP} points, got {len(points)}")
        return tuple(sorted(set(points)))

    def terms(self, value: Any) -> tuple[CustomTerm, ...]:
        """User-defined terms ([[terms]] tables), parsed without eval by symbolic.text.parsing."""
        where = ("terms",)
        if not isinstance(value, list):
            raise self.fail(where, f"expected [[terms]] tables, got {_kind(value)}")
        if len(value) > MAX_TERMS:
            raise self.fail(where, f"at most {MAX_TERMS} terms, got {len(value)}")
        out: list[CustomTerm] = []
        for index, item in enumerate(value):
            at = where + (str(index),)
            table = self.table(item, at)
            self.keys(table, TERM_KEYS, at)
            if "name" not in table or "expr" not in table:
                raise self.fail(at, 'a term needs name and expr, e.g. { name = "lora", expr = "2*r*H*L*k" }')
            texts = {k: self.text(table[k], at + (k,), 2000 if k in ("expr", "note") else 200)
                     for k in ("name", "expr", "unit", "title", "note") if k in table}
            implicit = self.flag(table["implicit"], at + ("implicit",)) if "implicit" in table else False
            try:
                term = CustomTerm(texts["name"], texts["expr"], texts.get("unit", "bytes"), texts.get("title", ""),
                                  texts.get("note", ""), implicit)
                term.to_term()  # parse now (never evaluated), so that errors name this file and line
            except CustomTermError as err:
                raise self.fail(at + ("expr",), str(err)) from None
            if term.name in {t.name for t in out}:
                raise self.fail(at + ("name",), f"{term.name!r} is defined twice")
            out.append(term)
        return tuple(out)

    def values(self, value: Any, where: tuple[str, ...] = ("values",)) -> dict[str, sympy.Rational]:
        table = self.table(value, where)
        out: dict[str, sympy.Rational] = {}
        names = [s.name for s in symtab.all_symbols()]
        for key, item in table.items():
            if key not in names:
                raise self.fail(where + (key,), f"unknown symbol{symtab.suggest(key, names)}; "
                                                "'symbolic symbols' lists them")
            if isinstance(item, bool) or not isinstance(item, (int, float, str)):
                raise self.fail(where + (key,), f"expected a number, got {_kind(item)}")
            try:
                out[key] = vals.validate(key, item)
            except ValueError as err:
                raise self.fail(where + (key,), str(err)) from None
        return out


def _kind(value: Any) -> str:
    names = {bool: "true/false", int: "a number", float: "a number", str: "text", list: "a list",
             dict: "a table"}
    return names.get(type(value), type(value).__name__)
