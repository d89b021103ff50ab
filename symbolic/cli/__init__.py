"""The ``symbolic`` command: parse arguments, call the layers below, print or write.

Each group of subcommands lives in its own module with an ``add_commands(subparsers)``
function; this module wires them together and turns every expected failure into a one-line
error with exit code 2.

Import rule (start-up time): every command module is imported to build the parser, for every
command, so a command module's top level imports only the standard library and light project
modules (sympy-level: library, formula, printing). Heavy packages (numpy, matplotlib,
weasyprint, ziamath, jinja2, torch, transformers) are imported inside the handler that needs
them. ``tests/test_sweep_cli.py`` checks that ``symbolic list`` loads none of them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from .common import CliError, Parser, one_line

COMMAND_MODULES = ("formulas", "sweep", "models", "memory", "report", "validate")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (all subcommands)."""
    import importlib

    parser = Parser(prog="symbolic", description="Memory of training and serving neural networks as explicit formulas.")
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"symbolic {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (0 ok, 2 bad input, 1 internal failure)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        handler: Callable[[argparse.Namespace], int | None] = args.handler
        return handler(args) or 0
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: stop quietly, and keep Python from
        # complaining again when it flushes stdout at exit
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("symbolic: interrupted", file=sys.stderr)
        return 130
    except CliError as err:
        print(one_line(f"symbolic: error: {err}"), file=sys.stderr)
        return 2
    except (ValueError, KeyError, OSError) as err:
        if isinstance(err, OSError) and err.strerror:
            message = f"{err.filename}: {err.strerror}" if err.filename else err.strerror
        else:
            message = getattr(err, "message", None) or (str(err.args[0]) if err.args else str(err))
        print(one_line(f"symbolic: error: {message or type(err).__name__}"), file=sys.stderr)
        return 2
    except Exception as err:  # a bug, not bad input: still one line unless debugging
        import os

        if os.environ.get("SYMBOLIC_DEBUG"):
            raise
        print(one_line(f"symbolic: internal error: {type(err).__name__}: {err} (set SYMBOLIC_DEBUG=1 for a traceback)"),
              file=sys.stderr)
        return 1


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
