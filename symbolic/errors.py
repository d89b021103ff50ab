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
