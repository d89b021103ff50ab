"""The ``symbolic`` command: parse arguments, call the layers below, print or write.

Each group of subcommands lives in its own module with an ``add_commands(subparsers)``
function; this module wires them together and decides the exit code:

- 0: done; 2: bad input (a ``symbolic.core.errors.UserError``, or an ``OSError`` on a path the user
  named), one line on stderr; 3: "does not fit", only with ``--check`` (``common.EXIT_DOES_NOT_FIT``,
  returned by ``common.check_exit``); 1: anything else, which is a bug ("internal error", one
  line, the traceback with ``SYMBOLIC_DEBUG=1``); 130 on Ctrl-C, 143 on SIGTERM (129 on SIGHUP),
  with the temporary files of unfinished atomic writes removed.
- ``--quiet`` and ``--verbose`` are options of the main parser and of every subcommand (so they
  may come before or after it); commands read them with ``common.verbosity``.
- Everything printed is made printable: control characters from user files (``\\x1b[31m``...)
  are shown escaped, never sent to the terminal raw.

Import rule (start-up time): this module imports only the standard library and
``symbolic.core.errors`` at its top, so that Ctrl-C during start-up is handled too. Every command
module is imported to build the parser, for every command, so a command module's top level
imports only the standard library and light project modules (sympy-level: library, formula,
printing). Heavy packages (numpy, matplotlib, weasyprint, ziamath, jinja2, torch,
transformers) are imported inside the handler that needs them. ``tests/test_sweep_cli.py``
checks that ``symbolic list`` loads none of them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..core import collector
from ..core.errors import StdoutError, Terminated, UserError

COMMAND_MODULES = ("formulas", "sweep", "models", "memory", "serve", "timing", "report", "validate", "completion")
SIGNALS = ("SIGTERM", "SIGHUP")

# C0 controls but tab and newline, a CR not ending a line, DEL, C1 controls, surrogates and the
# format characters that reorder or hide text (bidi overrides, zero-width, line separators)
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\u200b-\u200f\u2028-\u202e"
                          "\u2060-\u206f\ufeff]|\r(?!\n)")


def _escape(match: re.Match[str]) -> str:
    char = match.group()  # \x1b, \r for ASCII; \u0085, \u202e beyond, which JSON reads back as the same text
    return ascii(char)[1:-1] if char < "\x80" else f"\\u{ord(char):04x}"


def printable(text: str) -> str:
    """``text`` with control and invisible format characters written as escapes (newline and tab kept)."""
    return _UNPRINTABLE.sub(_escape, text)


class PrintableStream:
    """A text stream that escapes unprintable characters before they reach the terminal (or a pipe).

    With ``name`` set (stdout), a write error other than a closed pipe becomes a ``StdoutError``.
    """

    def __init__(self, stream: Any, name: str = "") -> None:
        self._stream = stream
        self._name = name

    def write(self, text: str) -> int:
        """Write ``text`` with control characters escaped; returns len(text) as a stream should."""
        with self._errors():
            self._stream.write(_UNPRINTABLE.sub(_escape, text) if _UNPRINTABLE.search(text) else text)
        return len(text)

    def flush(self) -> None:
        """Flush the stream underneath (errors as in ``write``)."""
        with self._errors():
            self._stream.flush()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except BrokenPipeError:
            raise
        except OSError as err:
            if not self._name:
                raise
            raise StdoutError(f"cannot write to {self._name}: {err.strerror or err}") from None

    def __getattr__(self, name: str) -> Any:  # flush, buffer, fileno, isatty, encoding...
        return getattr(self._stream, name)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (all subcommands)."""
    import importlib

    from .. import __version__
    from .common import Parser, add_verbosity

    parser = Parser(prog="symbolic", description="Memory of training and serving neural networks as explicit formulas.",
                    epilog="Exit status: 0 done, 2 bad input, 3 does not fit (with --check), 1 internal error.")
    parser.add_argument("--version", action="version", version=f"symbolic {__version__}")
    add_verbosity(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").add_commands(sub)
    for command in sub.choices.values():  # --quiet/--verbose after the subcommand too
        add_verbosity(command, default=argparse.SUPPRESS)
    return parser


_BUILT: dict[Callable[[], argparse.ArgumentParser], argparse.ArgumentParser] = {}


def _parser() -> argparse.ArgumentParser:
    """``build_parser()``, built once per process: in-process callers (the REPL, tests) run many commands.

    Parsing leaves no state in the parser (``Parser`` records the words of each parse afresh), so
    one parser serves every call. Keyed by the builder, so a replaced ``build_parser`` is called.
    """
    builder = build_parser
    parser = _BUILT.get(builder)
    if parser is None:
        parser = builder()
        _BUILT.clear()
        _BUILT[builder] = parser
    return parser


def _current(handler: Callable[[argparse.Namespace], int | None]) -> Callable[[argparse.Namespace], int | None]:
    """The command module's handler as it is now (as a freshly built parser would hold it)."""
    module = sys.modules.get(getattr(handler, "__module__", None) or "")
    name = getattr(handler, "__qualname__", "")
    if module is None or not name.isidentifier():  # a lambda, a method or a local function: as given
        return handler
    return getattr(module, name, handler)


def _raise_terminated(signum: int, frame: object) -> None:
    for name in SIGNALS:  # a second signal while cleaning up must not interrupt the cleanup
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    raise Terminated(signum)


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Terminated`` (so ``finally`` blocks and atomic writes clean up)."""
    saved: dict[int, Any] = {}
    try:
        for name in SIGNALS:
            if hasattr(signal, name):
                number = getattr(signal, name)
                saved[number] = signal.signal(number, _raise_terminated)
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        yield
    finally:
        for number, handler in saved.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(number, handler)


@contextlib.contextmanager
def _printable_streams() -> Iterator[None]:
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = PrintableStream(out, "standard output"), PrintableStream(err)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def _one_line(message: str) -> str:
    from .common import one_line

    return one_line(message)


def _user_paths(argv: Sequence[str]) -> list[Path]:
    """Every argument that could name a path (``--csv=out.csv`` too)."""
    paths = []
    for item in argv:
        for text in (item, item.partition("=")[2]):
            if text and text not in ("-", ".") and "\x00" not in text:
                paths.append(Path(text))
    return paths


def _names_user_path(err: OSError, argv: Sequence[str]) -> bool:
    """Whether ``err`` is about a path the user named (or a file inside a folder the user named)."""
    given = _user_paths(argv)
    for name in (err.filename, err.filename2):
        if name is None or isinstance(name, int):
            continue
        path = Path(os.fsdecode(name))
        if any(path == p or p in path.parents for p in given):
            return True
    return False


def _error(message: str) -> int:
    print(_one_line(f"symbolic: error: {message}"), file=sys.stderr)
    return 2


def _quiet_stdout() -> None:
    """Point fd 1 at /dev/null so that Python's flush at exit does not complain again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # captured stdouts have no fileno


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (0 ok, 2 bad input, 1 internal failure, 130/143 interrupted)."""
    words = list(sys.argv[1:] if argv is None else argv)
    with _signals(), _printable_streams(), collector.opted_in():  # the command owns the process's collector
        try:
            return _main(words)
        finally:
            from ..core import atomic

            atomic.remove_leftovers()


def _main(words: list[str]) -> int:
    try:
        try:
            args = _parser().parse_args(words)
        except SystemExit as exit_:  # argparse has printed its usage error (2), --help or --version (0)
            if exit_.code is None or isinstance(exit_.code, int):
                return exit_.code or 0
            print(exit_.code, file=sys.stderr)  # as the interpreter shows a text exit: the text, then status 1
            return 1
        handler: Callable[[argparse.Namespace], int | None] = _current(args.handler)
        code = handler(args) or 0
        sys.stdout.flush()  # a full disk or closed pipe on stdout is an error, not success
        return code
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: stop quietly, and keep Python from
        # complaining again when it flushes stdout at exit
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:
        print("symbolic: interrupted", file=sys.stderr)
        return 130
    except Terminated as stop:
        print(f"symbolic: terminated by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return 128 + stop.signum
    except UserError as err:
        if isinstance(err, StdoutError):
            _quiet_stdout()
        return _error(str(err) or type(err).__name__)
    except OSError as err:
        if not _names_user_path(err, words):
            return _internal(err)
        return _error(f"{err.filename}: {err.strerror or err}")
    except Exception as err:  # a bug, not bad input
        return _internal(err)


def _internal(err: BaseException) -> int:
    if os.environ.get("SYMBOLIC_DEBUG"):
        import traceback

        traceback.print_exception(err)
    from ..core.errors import shorten

    print(_one_line(f"symbolic: internal error: {type(err).__name__}: {shorten(err, 300)} "
                    "(set SYMBOLIC_DEBUG=1 for a traceback)"), file=sys.stderr)
    return 1


def run() -> None:
    """Console-script entry point."""
    try:
        code = main()
    except KeyboardInterrupt:  # between the handlers above and here
        code = 130
    sys.exit(code)
