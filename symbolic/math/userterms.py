"""User-defined terms: text parsed safely into a Term and added to a formula.

A custom term is written as text (``2*r*H*L*k``; with ``implicit`` also article notation such
as ``14E + 4BSS``), parsed by :mod:`symbolic.text.parsing` (no ``eval``), and joins a formula's total
like a built-in term: it appears in evaluation, sensitivities, solving, LaTeX and reports.
Names it introduces become symbols of the table, to be given values like any other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import sympy

from ..core import symbols as symtab
from ..core.errors import UserError, quote
from ..core.term import Term
from ..text.parsing import ParseError, parse_expression
from .formula import Formula

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
BYTE_UNITS = {
    "B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
    "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
}
COUNT_UNITS = ("params", "elements")
RESERVED = frozenset({"total"})  # a table's own rows and columns: a term or symbol so named would be a second one
UNITS = tuple(BYTE_UNITS) + COUNT_UNITS


class CustomTermError(UserError):
    """A custom term that cannot be used (bad name, unit or formula)."""


@dataclass(frozen=True)
class CustomTerm:
    """A user's term as written: name, formula text, unit and optional title and note."""

    name: str
    expr: str
    unit: str = "bytes"
    title: str = ""
    note: str = ""
    implicit: bool = False

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.name) or "__" in self.name or self.name.endswith("_"):
            raise CustomTermError(f"term name {quote(self.name)} must match [A-Za-z][A-Za-z0-9_]{{0,31}} "
                                  "without double or trailing underscores")
        check_not_reserved(self.name, "term")
        if self.unit not in UNITS:
            raise CustomTermError(f"term {self.name!r}: unknown unit {quote(self.unit)}"
                                  f"{symtab.suggest(self.unit, UNITS)}; use one of {', '.join(UNITS)}")

    @property
    def kind(self) -> str:
        """The Term unit this becomes: 'bytes', 'params' or 'elements'."""
        return "bytes" if self.unit in BYTE_UNITS else self.unit

    def to_term(self) -> Term:
        """Parse the text (never evaluating it) into a Term; new names join the symbol table."""
        known = {s.name: s.symbol for s in symtab.all_symbols()}
        try:
            expr = parse_expression(self.expr, symbols=known, allow_new=True, new_symbol=declare_user_symbol,
                                    implicit=self.implicit)
        except ParseError as err:
            raise CustomTermError(f"term {self.name!r}: {err}") from None
        if expr.is_nonpositive:
            raise CustomTermError(f"term {self.name!r}: {quote(self.expr)} is never positive; memory terms add bytes "
                                  "(or parameters) to a total")
        scale = BYTE_UNITS.get(self.unit, 1)
        return Term(self.name, self.title or f"{self.name} (user-defined)", expr * scale, self.kind, "user",
                    note=self.note or f"{self.name} = {self.expr}" + (f" {self.unit}" if self.unit != "bytes" else ""))


def check_not_reserved(name: str, what: str) -> None:
    """Refuse names that every table already uses for itself ('total'), in any letter case."""
    if name.lower() in RESERVED:
        raise CustomTermError(f"{what} name {name!r} is reserved (every table has its own {name.lower()!r} row); "
                              "choose another name")


def declare_user_symbol(name: str) -> sympy.Symbol:
    """A new symbol introduced by a custom term: positive, not necessarily whole."""
    check_not_reserved(name, "symbol")
    return symtab.declare(name, name if len(name) == 1 else rf"\mathrm{{{name}}}".replace("_", r"\_"),
                          "user-defined symbol (introduced by a custom term)", "user", integer=False)


def parse_cli_term(text: str) -> CustomTerm:
    """``NAME=EXPR`` or ``NAME:UNIT=EXPR`` from the command line."""
    head, sep, expr = text.partition("=")
    if not sep or not head.strip() or not expr.strip():
        raise CustomTermError(f"malformed --term {quote(text)}: expected NAME=EXPR or NAME:UNIT=EXPR, e.g. lora=2*r*H*L")
    name, _, unit = head.strip().partition(":")
    return CustomTerm(name.strip(), expr.strip(), unit.strip() or "bytes")


def with_terms(formula: Formula, terms: Iterable[CustomTerm]) -> Formula:
    """A copy of ``formula`` with the custom terms appended to its total."""
    extra = []
    taken = {t.key for t in formula.terms}
    for custom in terms:
        if custom.name in taken:
            raise CustomTermError(f"term {custom.name!r} already exists in {formula.key}")
        term = custom.to_term()
        if term.unit != formula.unit:
            raise CustomTermError(f"term {custom.name!r} is in {custom.unit} but {formula.key} counts {formula.unit}; "
                                  f"give it a {'byte unit' if formula.unit == 'bytes' else formula.unit} unit")
        taken.add(custom.name)
        extra.append(term)
    if not extra:
        return formula
    return Formula(formula.key, formula.title, formula.terms + tuple(extra), source=formula.source,
                   where=formula.where, note=formula.note, name=formula.name, definitions=formula.definitions,
                   example=formula.example)
