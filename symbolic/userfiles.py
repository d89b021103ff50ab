"""Reading files that users name (config.json, report specifications): size-capped, one-line errors."""

from __future__ import annotations

from pathlib import Path


def read_user_file(path: Path, *, limit: int, what: str, error: type[Exception]) -> bytes:
    """The bytes of ``path``; a missing, unreadable or oversized file raises ``error`` in one line.

    ``what`` names the expected kind of file for the messages ("a config.json", "a report
    specification").
    """
    try:
        if path.stat().st_size > limit:
            raise error(f"{path}: larger than {limit:,} bytes; too large for {what}")
        return path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: no such file (expected {what})") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, not {what}") from None
    except OSError as err:
        raise error(f"{path}: cannot be read ({err.strerror or err})") from None
