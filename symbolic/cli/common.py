"""Helpers shared by the subcommands: one-line errors, --set parsing, JSON and tables."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from ..values import parse_assignment


class CliError(Exception):
    """A user error: printed as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
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
