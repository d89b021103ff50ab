"""The one family of user errors: raised wherever input is judged, mapped by the CLI to exit 2.

Anything else that escapes a command is a bug (exit 1, traceback under ``SYMBOLIC_DEBUG=1``).
``UserError`` subclasses ``ValueError`` so that Python callers catching ``ValueError`` keep
working; ``UnknownNameError`` is also a ``LookupError`` for the same reason (``KeyError``'s
message quoting is avoided on purpose).
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user (a value, a name, a file, a spec): one line, exit code 2."""


class UnknownNameError(UserError, LookupError):
    """A name the user gave (formula key, symbol, model, GPU) that does not exist."""


class InputFileError(UserError):
    """A file or stream the user named cannot be read as what it should be."""


class OutputError(UserError):
    """An output the user named cannot be written."""


class StdoutError(OutputError):
    """Standard output cannot be written (a full disk, a device error); not a closed pipe."""


class Terminated(BaseException):
    """The process got SIGTERM or SIGHUP: unwinds like KeyboardInterrupt, so temporary files are removed."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"terminated by signal {signum}")


QUOTE_LIMIT = 60


def shorten(text: object, limit: int = QUOTE_LIMIT) -> str:
    """``text`` cut to ``limit`` characters (with its full length said), so messages stay one short line."""
    value = str(text)
    if len(value) <= limit:
        return value
    return f"{value[:limit]}… ({len(value):,} characters)"


def single_line(text: object) -> str:
    """``text`` with line breaks, tabs and other unprintable characters escaped (``\\n``): names stay one line."""
    value = str(text)
    return value if value.isprintable() else "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in value)


def quote(text: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr`` of a short prefix of what the user typed: messages never echo huge input in full."""
    value = str(text)
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value):,} characters)"
