"""Atomic output: write to a temporary file in the target's folder, then rename over it.

An interrupted or failed write leaves either the old file or none, never a truncated one:
the temporary file is removed on any exception (including KeyboardInterrupt), and a process
killed outright leaves at most a hidden ``.NAME.*.tmp`` file beside an untouched target.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, BinaryIO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` only when the ``with`` block succeeds."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot write {target}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise OSError(f"cannot write {target}: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.strerror:
            raise OSError(f"cannot write {target}: {err.strerror}") from None
        raise


@contextlib.contextmanager
def atomic_text_open(path: str | os.PathLike[str]) -> Iterator[IO[str]]:
    """A UTF-8 text file (newlines untranslated, as csv wants) that replaces ``path`` only on success."""
    with atomic_open(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        try:
            yield text
        finally:
            text.flush()
            text.detach()


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    with atomic_open(path) as handle:
        handle.write(data)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically; returns the path."""
    return write_bytes(path, text.encode("utf-8"))
