"""Helpers shared by the subcommands: one-line errors, --set parsing, JSON and tables."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ..errors import QUOTE_LIMIT, UserError
from ..values import parse_assignment

if TYPE_CHECKING:
    from ..formula import Formula


MAX_MESSAGE = 1000  # characters of one error line; what the user typed is quoted shorter still
LONG_WORD = 200  # a "word" longer than this (no path is) is user text echoed in full: cut it
_LONG_WORD = re.compile(rf"\S{{{LONG_WORD + 1},}}")


def one_line(message: str) -> str:
    """``message`` as one short printable line: control characters escaped, huge words and lines cut."""
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in message)
    text = _LONG_WORD.sub(lambda m: f"{m.group()[:QUOTE_LIMIT]}… ({len(m.group()):,} characters)", text)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "…"


class CliError(UserError):
    """A user error: printed as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        print(one_line(f"{self.prog}: error: {message} (see '{self.prog} --help')"), file=sys.stderr)
        sys.exit(2)


def parse_sets(items: Sequence[str] | None) -> dict[str, str]:
    """{'B': '8'} from ['B=8']; a repeated name is an error."""
    out: dict[str, str] = {}
    for item in items or ():
        name, value = parse_assignment(item)
        if name in out:
            raise CliError(f"{name} is set twice")
        out[name] = value
    return out


def print_json(data: Any) -> None:
    """Pretty, stable JSON on stdout."""
    print(json.dumps(data, indent=2, ensure_ascii=False))


def table(rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A plain text table; ``align`` holds one of '<' or '>' per column (default left)."""
    if not rows:
        return ""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            how = align[i] if i < len(align) else "<"
            cells.append(f"{cell:{how}{widths[i]}}")
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def add_term_options(parser: argparse.ArgumentParser) -> None:
    """--term NAME[:UNIT]=EXPR (repeatable) and --implicit, for commands that take custom terms."""
    parser.add_argument("--term", action="append", metavar="NAME[:UNIT]=EXPR",
                        help="add a user-defined term to the total, e.g. lora:params=2*r*H*L (bytes unless a unit "
                             "is given: B, KiB, MiB, GiB, kB, MB, GB, params); new symbols take values with --set")
    parser.add_argument("--implicit", action="store_true",
                        help="read --term formulas in article notation: 14E + 4BSS means 14*E + 4*B*S*S")


def cli_terms(args: argparse.Namespace) -> list:
    """The CustomTerm objects named by --term (parsed lazily: most commands have none)."""
    if not getattr(args, "term", None):
        return []
    from ..custom import parse_cli_term

    terms = [parse_cli_term(text) for text in args.term]
    if args.implicit:
        from dataclasses import replace

        terms = [replace(t, implicit=True) for t in terms]
    return terms


def with_cli_terms(formula: Formula, args: argparse.Namespace) -> Formula:
    """``formula`` with the --term terms appended (unchanged when there are none)."""
    terms = cli_terms(args)
    if not terms:
        return formula
    from ..custom import with_terms

    return with_terms(formula, terms)
