"""Engine flags: each engine module lists its own (``FLAGS``), named as the engine's CLI names them.

A flag is plain data: its ``--name``, the keyword ``dest`` the Python API takes, the ``kind`` of
value (how the CLI parses and checks it), its metavar, choices and help. ``serve`` adds every
engine's flags to one parser; a flag given to an engine that does not list it is a one-line error
(``check_flags``), so ``--gpu-memory-utilization`` with ``--engine sglang`` is refused, not ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..core.errors import UserError

KINDS = ("whole", "count", "fraction", "choice", "text", "switch", "list")


class EngineFlagError(UserError):
    """A flag the chosen engine does not take, or a value it refuses: one line, exit 2."""


@dataclass(frozen=True)
class Flag:
    """One engine flag: ``--name`` on the command line, ``dest`` in Python, parsed as ``kind``.

    ``whole``: an integer ≥ 1; ``count``: an integer ≥ 0; ``fraction``: 0 < F ≤ 1; ``choice``: one of
    ``choices``; ``text``: a string; ``switch``: on/off (``--name`` and ``--no-name``); ``list``: numbers
    separated by commas (``--tensor-split 3,1``).
    """

    name: str
    dest: str
    kind: str
    help: str
    metavar: str = ""
    choices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"flag {self.name}: kind must be one of {KINDS}")
        if not self.name.startswith("--") or self.dest != self.name[2:].replace("-", "_"):
            raise ValueError(f"flag {self.name}: dest must be the name without dashes ({self.dest!r})")


def owners(tables: Mapping[str, tuple[Flag, ...]]) -> dict[str, tuple[str, ...]]:
    """For every flag dest, the engines that take it (``tables`` maps engine -> its FLAGS)."""
    out: dict[str, tuple[str, ...]] = {}
    for engine, table in tables.items():
        for flag in table:
            out[flag.dest] = (*out.get(flag.dest, ()), engine)
    return out


def check_flags(engine: str, given: Mapping[str, object], tables: Mapping[str, tuple[Flag, ...]]) -> None:
    """Refuse, in one line, an engine flag that ``engine`` does not take (``given`` holds only set flags)."""
    who = owners(tables)
    for dest in given:
        engines = who.get(dest)
        if engines is None:
            raise EngineFlagError(f"unknown serving option {dest!r}")
        if engine not in engines:
            name = "--" + dest.replace("_", "-")
            raise EngineFlagError(f"{name} is a flag of {' and '.join(engines)}, not of --engine {engine}")
