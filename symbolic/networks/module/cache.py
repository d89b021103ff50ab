"""Probed module formulas on disk, so that asking again takes under a second (issue 29).

One JSON file per probe under ``<user cache>/symbolic/modules/``, named by a hash of what the
probe depends on: the source's fingerprint (its file's text, the library and its version), its
arguments, inputs, sizes and loss, the precision, and torch's and this package's versions. What is
stored is plain data this module wrote: polynomials as lists of exponents and coefficients written
as the strings of exact integers and fractions, read back with ``fractions.Fraction`` — nothing
from the cache is evaluated or parsed as an expression. At most ``LIMIT`` files are kept (the oldest
removed); deleting the folder is always safe (the next ask probes again).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

LIMIT = 256
VERSION = 5  # 5: --device cpu saves the normalizations' statistics in the CPU's dtypes; 4: nn.MultiheadAttention's SDPA follows the device's kernels; 3: a freed saved storage's id reused


def folder() -> Path:
    """``$SYMBOLIC_CACHE`` or ``$XDG_CACHE_HOME/symbolic`` (``~/.cache/symbolic``), then ``modules``."""
    explicit = os.environ.get("SYMBOLIC_CACHE")
    if explicit:
        return Path(explicit).expanduser() / "modules"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "symbolic" / "modules"


def package_version(name: str) -> str:
    """An installed package's version from its metadata (the package is not imported)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def key(*parts: Any) -> str:
    """A file name for what a probe depends on (a hash of its JSON)."""
    text = json.dumps([VERSION, *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def read(name: str) -> dict[str, Any] | None:
    """The stored data, or None (absent, unreadable or not this version: probe again)."""
    path = folder() / f"{name}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: the last to be removed
    return data


def write(name: str, data: Mapping[str, Any]) -> None:
    """Store ``data`` (best effort: a cache that cannot be written only costs time), then bound the folder."""
    where = folder()
    try:
        where.mkdir(parents=True, exist_ok=True)
        tmp = where / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({**data, "version": VERSION}, sort_keys=True), encoding="utf-8")
        os.replace(tmp, where / f"{name}.json")
        files = sorted(where.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in files[:max(0, len(files) - LIMIT)]:
            old.unlink(missing_ok=True)
    except OSError:
        return


def cached(name: str, make: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """The stored data or ``make()``'s (then stored), and whether it came from the cache."""
    found = read(name)
    if found is not None:
        return found, True
    data = make()
    write(name, data)
    return data, False


def fraction(text: object) -> Fraction:
    """A stored coefficient: an integer or 'p/q' string, read by ``Fraction`` (never evaluated)."""
    if not isinstance(text, str) or len(text) > 200:
        raise ValueError("not a stored coefficient")
    return Fraction(text)
