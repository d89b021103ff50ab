"""Safe output: regular files are replaced atomically, devices and FIFOs written directly, ``-`` is stdout.

- A regular file (or a path that does not exist yet) is written to a temporary file in the
  target's folder, flushed to disk and renamed over the target: an interrupted or failed write
  leaves either the old file or none, never a truncated one. The temporary file is removed on
  any exception (KeyboardInterrupt and the CLI's SIGTERM included); a process killed outright
  leaves at most a hidden ``.NAME.*.tmp`` file beside an untouched target. A symlink to a
  regular file is written through (the link stays a link).
- A character device or FIFO (``/dev/null``, ``/dev/stdout``, a named pipe) is opened and
  written directly: renaming over it would replace the device with a regular file. So is an
  alias of an open descriptor (``/dev/stdout`` redirected to a file, ``/dev/fd/N``), through
  that very descriptor, so that nothing else written to it is overwritten.
- A folder, socket, block device or anything else is refused with an ``OutputError``.
- ``-`` writes to standard output.

Every write error (ENOSPC on ``/dev/full``, EACCES, a missing folder) is an ``OutputError``
naming the target, never a silent success.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, BinaryIO

from .errors import OutputError, StdoutError

STDOUT = "-"
_live: set[str] = set()  # temporary files being written now (removed by remove_leftovers)
_stuck: list[IO[str]] = []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fail(target: object, err: OSError) -> OutputError:
    return OutputError(f"cannot write {target}: {err.strerror or err}")


def target_kind(path: str | os.PathLike[str]) -> str:
    """'stdout', 'new', 'regular' or 'stream' for an output path; OutputError for anything unwritable."""
    if str(path) == STDOUT:
        return "stdout"
    target = Path(path)
    try:
        mode = os.stat(target).st_mode  # follows symlinks: a link to /dev/null is a device
    except FileNotFoundError:
        folder = target.parent if str(target.parent) else Path(".")
        if not folder.is_dir():
            raise OutputError(f"cannot write {target}: folder {folder} does not exist") from None
        return "new"
    except OSError as err:
        raise _fail(target, err) from None
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or (stat.S_ISREG(mode) and _names_open_file(target)):
        return "stream"
    if stat.S_ISREG(mode):
        return "regular"
    what = ("a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a block device" if stat.S_ISBLK(mode) else "not a regular file")
    raise OutputError(f"cannot write {target}: it is {what}")


def descriptor_of(path: str | os.PathLike[str]) -> int | None:
    """The descriptor a path aliases (``/dev/stdout`` 1, ``/dev/stderr`` 2, ``/dev/fd/N``, ``/proc/self/fd/N``)."""
    text = os.path.normpath(os.path.abspath(path))
    named = {"/dev/stdout": 1, "/dev/stderr": 2}
    if text in named:
        return named[text]
    for prefix in ("/dev/fd/", "/proc/self/fd/", f"/proc/{os.getpid()}/fd/"):
        if text.startswith(prefix) and text[len(prefix):].isdigit():
            return int(text[len(prefix):])
    return None


def _names_open_file(path: Path) -> bool:
    """Whether ``path`` reaches an open descriptor or another /proc entry: never renamed over."""
    return descriptor_of(path) is not None or os.path.realpath(path).startswith("/proc/")


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary output for ``path``: atomic for regular files, direct for devices and FIFOs, stdout for '-'."""
    kind = target_kind(path)
    if kind == "stdout":
        with _stdout() as handle:
            yield handle
    elif kind == "stream" and descriptor_of(path) == 1:
        with _stdout() as handle:  # the same descriptor as print(): one offset, nothing overwritten
            yield handle
    elif kind == "stream":
        with _direct(Path(path)) as handle:
            yield handle
    else:
        with _replacing(Path(path)) as handle:
            yield handle


@contextlib.contextmanager
def _stdout() -> Iterator[BinaryIO]:
    """Standard output as bytes; a write error other than a closed pipe is an OutputError."""
    with contextlib.suppress(OSError):
        sys.stdout.flush()  # text printed before stays before
    raw = getattr(sys.stdout, "buffer", None)
    if raw is None:  # pragma: no cover - a text-only stdout (some IDEs): encode through it
        raise OutputError("cannot write binary output to this standard output; give a file name instead of '-'")
    try:
        yield raw
        raw.flush()
    except BrokenPipeError:
        raise
    except OSError as err:
        raise StdoutError(f"cannot write to standard output: {err.strerror or err}") from None


@contextlib.contextmanager
def _direct(target: Path) -> Iterator[BinaryIO]:
    """A device or FIFO opened for writing as it is (no temporary file, no rename, no fsync)."""
    number = descriptor_of(target)
    try:
        if number is not None:  # share the descriptor (and its offset): reopening would truncate it
            handle = os.fdopen(os.dup(number), "wb")
        else:
            handle = open(target, "wb")  # noqa: SIM115 - closed below, errors on close matter
    except OSError as err:
        raise _fail(target, err) from None
    try:
        yield handle
        handle.flush()
    except OSError as err:
        raise _fail(target, err) from None
    finally:
        with contextlib.suppress(OSError):
            handle.close()


@contextlib.contextmanager
def _replacing(target: Path) -> Iterator[BinaryIO]:
    """A temporary file beside ``target`` that is renamed over it only when the block succeeds."""
    if target.is_symlink():
        target = Path(os.path.realpath(target))  # write through the link, keep the link
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise _fail(target, err) from None
    _live.add(tmp)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        if target_kind(target) == "stream":  # became a device or FIFO meanwhile: never rename over it
            raise OutputError(f"cannot write {target}: it is no longer a regular file")
        os.replace(tmp, target)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise _fail(target, err) from None
        raise
    finally:
        _live.discard(tmp)


def remove_leftovers() -> None:
    """Remove the temporary files of writes still in progress (for signal handlers and exit paths)."""
    for tmp in list(_live):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _live.discard(tmp)


@contextlib.contextmanager
def atomic_text_open(path: str | os.PathLike[str]) -> Iterator[IO[str]]:
    """A UTF-8 text output (newlines untranslated, as csv wants) with ``atomic_open``'s rules.

    For ``-`` this is ``sys.stdout`` itself (its text layer stays usable afterwards).
    """
    if str(path) == STDOUT:
        try:
            yield sys.stdout
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as err:
            raise StdoutError(f"cannot write to standard output: {err.strerror or err}") from None
        return
    with atomic_open(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="")  # type: ignore[type-var]
        try:
            yield text
        finally:
            try:
                text.flush()
            finally:
                try:
                    text.detach()
                except OSError:
                    _stuck.append(text)  # never collected: its close would close ``raw`` under the caller


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` (see ``atomic_open``); returns the path."""
    with atomic_open(path) as handle:
        handle.write(data)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` (see ``atomic_open``); returns the path."""
    return write_bytes(path, text.encode("utf-8"))
