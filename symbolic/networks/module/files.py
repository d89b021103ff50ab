"""A user's own module, ``PATH.py:NAME``, as a ``ModuleSource`` (issue 29), and the flags that feed it.

The file is imported the way Python runs a script: its folder is first on ``sys.path`` while it is
imported (so it may import its neighbours), under a module name of its own (no clash with an
installed package or another file of the same name). Importing it runs its code: this happens only
when the file is named on the command line (a report specification that names one needs
``--trust-code``). ``NAME`` is an ``nn.Module`` subclass or a function returning a module;
``--arg KEY=VALUE`` gives its keyword arguments (an int, a float, true/false, else the string:
never evaluated), ``--input NAME=D1,D2,...[:DTYPE]`` the forward's inputs (a dimension a number,
``B`` the batch, or a size name), ``--loss`` the loss when the forward does not return one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .cache import package_version
from .source import BATCH, DTYPES, LOSSES, SIZE_NAME, Input, ModuleError, ModuleSource

ARG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
INTEGER = re.compile(r"^[+-]?[0-9]{1,18}$")
FLOAT = re.compile(r"^[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?$")
DEFAULT_SIZE = 32  # an input size's value when neither the default nor --set gives one
MAX_DIM = 2**31


def is_file_model(model: str) -> bool:
    """Whether ``model`` names a user's module: ``PATH.py:NAME``."""
    path, sep, name = model.rpartition(":")
    return bool(sep) and path.endswith(".py") and bool(name)


def parse_value(text: str) -> int | float | bool | str:
    """An --arg value: an int, a float, true/false, else the string itself (never evaluated)."""
    if INTEGER.fullmatch(text):
        return int(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if FLOAT.fullmatch(text):
        return float(text)
    return text


def parse_args(items: Sequence[str] | None) -> dict[str, Any]:
    """``--arg KEY=VALUE`` items as keyword arguments (a later KEY replaces an earlier one)."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not ARG_NAME.fullmatch(key):
            raise ModuleError(f"--arg {item!r}: expected KEY=VALUE with KEY a Python identifier")
        out[key] = parse_value(value.strip())
    return out


def parse_input(item: str) -> Input:
    """One ``--input NAME=D1,D2,...[:DTYPE]``: its name, dimensions (numbers or size names) and dtype."""
    name, sep, rest = item.partition("=")
    name = name.strip()
    if not sep or not ARG_NAME.fullmatch(name):
        raise ModuleError(f"--input {item!r}: expected NAME=D1,D2,...[:DTYPE] with NAME a keyword of the forward")
    dims_text, _, dtype = rest.partition(":")
    dtype = dtype.strip() or None
    if dtype is not None and dtype not in DTYPES:
        raise ModuleError(f"--input {item!r}: unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    dims: list[int | str] = []
    for part in dims_text.split(","):
        part = part.strip()
        if part.isdigit() and 0 < int(part) < MAX_DIM:
            dims.append(int(part))
        elif SIZE_NAME.fullmatch(part):
            dims.append(part)
        else:
            raise ModuleError(f"--input {item!r}: dimension {part!r} is neither a positive number nor a size name "
                              f"({BATCH} is the batch)")
    return Input(name, tuple(dims), dtype)


def parse_inputs(items: Sequence[str] | None) -> tuple[Input, ...]:
    """Every ``--input``, in order; a name given twice is an error."""
    out = [parse_input(item) for item in items or ()]
    names = [i.name for i in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ModuleError(f"--input {twice[0]!r} is given twice")
    return tuple(out)


def _import(path: Path) -> Any:
    """The file imported as a script is: its folder on sys.path meanwhile, a module name of its own."""
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    name = f"_symbolic_user_{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModuleError(f"{path}: cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        sys.modules.pop(name, None)
        raise
    except BaseException as err:  # the user's file: whatever it raises (SystemExit too) is one line
        sys.modules.pop(name, None)
        raise ModuleError(f"{path}: importing it raised {first_line(err)}") from None
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    return module


def first_line(err: BaseException) -> str:
    """'TypeError: the message's first line' (at most 200 characters), for a one-line error."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200]}" if text else type(err).__name__


def fingerprint(path: Path) -> tuple[str, ...]:
    """What a cached probe of the file is keyed by: its text, its folder's other .py files, torch's version.

    Read without importing the file or torch, so that a cached ask runs none of the user's code.
    """
    digest = hashlib.sha256(path.read_bytes())
    for other in sorted(path.parent.glob("*.py")):
        if other != path and other.is_file():
            digest.update(other.name.encode() + b"\0" + other.read_bytes())
    return ("file", digest.hexdigest(), f"torch {package_version('torch')}")


def _target(path: Path, text: str, name: str) -> Any:
    """NAME in the file (imported now: its code runs): a Module subclass or a function returning one."""
    from .. import torch_env

    torch_env.ready()
    import torch

    found = getattr(_import(path), name, None)
    if found is None:
        raise ModuleError(f"{text} does not define {name!r}")
    is_class = inspect.isclass(found)
    if (is_class and not issubclass(found, torch.nn.Module)) or (not is_class and not inspect.isfunction(found)):
        raise ModuleError(f"{text}:{name} is {type(found).__name__}, not a torch.nn.Module subclass or a function "
                          "returning one")
    return found


def _builder(path: Path, text: str, name: str, label: str) -> Any:
    """arguments -> module: the file imported on the first build (never for a cached ask), NAME called."""

    def build(arguments: Mapping[str, Any]) -> Any:
        import torch

        target = _target(path, text, name)
        try:
            module = target(**dict(arguments))
        except ModuleError:
            raise
        except Exception as err:  # the user's constructor: whatever it raises is one line
            raise ModuleError(f"{label}({_shown(arguments)}) raised {first_line(err)}") from None
        if not isinstance(module, torch.nn.Module):
            raise ModuleError(f"{label} returned {type(module).__name__}, not a torch.nn.Module")
        return module

    return build


def _shown(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in arguments.items())


def file_source(model: str, arguments: Mapping[str, Any] | None = None, inputs: Sequence[Input] = (),
                loss: str | None = None, sizes: Mapping[str, int] | None = None, *,
                check: bool = True) -> ModuleSource:
    """The ModuleSource of ``PATH.py:NAME``; with ``check`` the file is imported (its code runs) to check NAME.

    Without ``check`` the file is imported only when the module is first built, so that an ask the
    cache answers runs none of the user's code (a cached probe was made from this very text).
    """
    text, _, name = model.rpartition(":")
    path = Path(text).expanduser()
    if not path.is_file():
        raise ModuleError(f"{text}: no such file")
    if loss is not None and loss not in LOSSES:
        raise ModuleError(f"unknown loss {loss!r}; choose from {', '.join(LOSSES)}")
    if not ARG_NAME.fullmatch(name):
        raise ModuleError(f"{text} does not define {name!r}")
    path = path.resolve()
    if check:
        _target(path, text, name)
    if not inputs:
        raise ModuleError(f"{text}:{name}: give the forward's inputs with --input NAME=D1,D2,...[:DTYPE] "
                          f"(e.g. --input x={BATCH},784)")
    label = f"{path.name}:{name}"
    values = {n: DEFAULT_SIZE for item in inputs for n in item.size_names}
    values.update(sizes or {})
    return ModuleSource(label=label, origin="file", build=_builder(path, text, name, label),
                        arguments=dict(arguments or {}), inputs=tuple(inputs), sizes=values, loss=loss,
                        fingerprint=fingerprint(path))
