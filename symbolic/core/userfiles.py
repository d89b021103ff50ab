"""Reading files that users name (config.json, report specifications, templates): bounded, one-line errors.

Only regular files are read: a FIFO, device or socket is refused at once (opening never blocks,
it is non-blocking until the type is checked), and at most ``limit`` + 1 bytes are ever read, so
``/dev/zero`` or a file that grows while read cannot exhaust memory. ``st_size`` alone is not a
bound (devices and ``/proc`` files report 0). ``parse_json`` and ``parse_toml`` turn what the
parsers cannot survive (nesting 100,000 deep: ``RecursionError``; ``MemoryError``) into the
caller's one-line error, and so is an integer longer than Python converts (``sys.get_int_max_str_digits``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import InputFileError


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def file_problem(path: Path, what: str) -> str | None:
    """Why ``path`` cannot be read as ``what`` (missing, a folder, a device, unreadable); None for a regular file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"{path}: no such file (expected {what})"
    except OSError as err:
        return f"{path}: cannot be read ({err.strerror or err})"
    return None if stat.S_ISREG(mode) else f"{path}: is {_kind(mode)}, not {what}"


def read_user_file(path: Path, *, limit: int, what: str, error: type[Exception] = InputFileError) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``; anything else raises ``error`` in one line.

    ``what`` names the expected kind of file for the messages ("a config.json", "a report
    specification").
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{path}: no such file (expected {what})") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, not {what}") from None
    except OSError as err:
        raise error(f"{path}: cannot be read ({err.strerror or err})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{path}: is {_kind(mode)}, not {what}")
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise error(f"{path}: larger than {limit:,} bytes; too large for {what}")
        return b"".join(chunks)
    except OSError as err:
        raise error(f"{path}: cannot be read ({err.strerror or err})") from None
    finally:
        os.close(fd)


def _too_many_digits(err: ValueError) -> bool:
    return "int_max_str_digits" in str(err) or "integer string conversion" in str(err)


def _digits_message(path: object) -> str:
    return f"{path}: a number has more than {sys.get_int_max_str_digits():,} digits"


@contextlib.contextmanager
def _parser_limits(path: object, error: type[Exception], syntax_error: type[Exception]) -> Iterator[None]:
    """What a parser cannot survive (depth, memory, Python's digit limit) as ``error`` in one line.

    ``syntax_error`` and other ``ValueError``s (e.g. a ``parse_constant`` hook's) pass through for
    the caller's own message.
    """
    try:
        yield
    except RecursionError:
        raise error(f"{path}: nested too deeply to read") from None
    except MemoryError:
        raise error(f"{path}: too large to read into memory") from None
    except ValueError as err:
        if not isinstance(err, syntax_error) and _too_many_digits(err):
            raise error(_digits_message(path)) from None
        raise


def parse_json(text: str | bytes, path: object, *, error: type[Exception] = InputFileError, **options: Any) -> Any:
    """``json.loads(text, **options)``; what the parser cannot survive raises ``error`` in one line."""
    import json

    with _parser_limits(path, error, json.JSONDecodeError):
        return json.loads(text, **options)


def parse_toml(text: str, path: object, *, error: type[Exception] = InputFileError) -> dict[str, Any]:
    """``tomllib.loads(text)``; what the parser cannot survive raises ``error`` in one line."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    with _parser_limits(path, error, tomllib.TOMLDecodeError):
        return tomllib.loads(text)
