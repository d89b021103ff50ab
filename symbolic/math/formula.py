"""Formula: an ordered collection of terms whose sum is a total.

A formula keeps the author's order of its terms (SymPy's ``Add`` would reorder them) and may
let a symbol stand for another formula's total (``N`` for the parameter count, ``E = B·S·H``).

One rule decides what such a *defined symbol* is, in every method and command: a defined
symbol that the caller names (gives a value for, differentiates by, solves for, sweeps over,
keeps when compiling) is an input; every other one is expanded into its formula, recursively.
``expr_for(names)`` applies the rule; ``composed()`` is the case where nothing is named.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import sympy

from ..core import symbols as symtab
from ..core import values as vals
from ..core.errors import UnknownNameError, UserError, quote
from ..core.term import Term
from ..core.units import format_bytes, format_count
from ..text import display, printing
from . import algebra, extrema, quantities
from .algebra import Sensitivities, Sensitivity  # noqa: F401 (symbolic.Sensitivity is this name)

if TYPE_CHECKING:  # pragma: no cover
    from .compiled import CompiledFormula

Values = Mapping[object, object]
display.init_printing()  # inside IPython: derived expressions typeset with the table's names


class FormulaError(UserError):
    """A formula that cannot be built or asked this (mixed units, missing values, bad budget)."""


def _require(missing: set[sympy.Symbol]) -> None:
    """A one-line error naming the symbols that have no value, if any."""
    if missing:
        raise FormulaError(f"values missing for {', '.join(s.name for s in symtab.ordered(missing))}")


def _name(key: object) -> str:
    """The symbol name of a values key (a name or a SymPy symbol)."""
    return key if isinstance(key, str) else str(getattr(key, "name", key))


@dataclass(frozen=True)
class Evaluation:
    """A formula's total and per-term values at one point; every number is exact."""

    formula: Formula
    values: dict[sympy.Symbol, sympy.Rational]
    derived: dict[sympy.Symbol, sympy.Rational]
    terms: tuple[tuple[Term, sympy.Rational], ...]
    total: sympy.Rational

    @property
    def unit(self) -> str:
        return self.formula.unit

    def human(self, value: sympy.Rational | None = None) -> str:
        """The total (or ``value``) as text: IEC bytes or a grouped count."""
        number = self.total if value is None else value
        return format_bytes(number) if self.unit == "bytes" else format_count(number)

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON: exact integers where values are whole, else decimals."""
        return {
            "key": self.formula.key,
            "unit": self.unit,
            "total": to_plain(self.total),
            "total_human": self.human(),
            "terms": {t.key: to_plain(v) for t, v in self.terms},
            "values": {s.name: to_plain(v) for s, v in self.values.items()},
            "derived": {s.name: to_plain(v) for s, v in self.derived.items()},
        }

    # --- display (symbolic.text.display renders) ----------------------------------------------
    def table(self) -> display.Table:
        """The per-term values and total as plain table data (for HTML and pandas)."""
        fmt = display.unit_format(self.unit)
        rows = tuple((t.key, t.title, printing.text(t.expr), v, v) for t, v in self.terms)
        at = display.point_text((s.name, v) for s, v in self.values.items())
        return display.Table(f"{self.formula.key} at {at}", (("term", ""), ("title", ""), ("formula", ""),
                             ("value", self.unit), ("shown", "IEC" if fmt == "bytes" else "")), rows,
                             ("", "", "", "count", fmt), ("total", self.formula.title, "", self.total, self.total))

    def _repr_html_(self) -> str:
        return display.html(self.table())

    def _repr_latex_(self) -> str:
        return display.math(f"{self.formula.name_latex} = {printing.number_latex(self.total)}"
                            + (r"\ \mathrm{B}" if self.unit == "bytes" else ""))

    def to_frame(self):  # noqa: ANN201 (pandas is optional)
        """The per-term values as a pandas DataFrame (needs pandas)."""
        return display.frame(self.table())

    def quantity(self, registry: object = None):  # noqa: ANN201 (pint is optional)
        """The total as a pint Quantity (bytes, or a dimensionless count) with an exact magnitude (needs pint)."""
        return quantities.quantity(self.total, self.unit, registry)

    def __repr__(self) -> str:
        return display.short("Evaluation", self.formula.key, f"total={to_plain(self.total)} {self.unit}"
                             + (f" ({self.human()})" if self.unit == "bytes" else ""), f"{len(self.terms)} terms",
                             f"at {display.point_text((s.name, v) for s, v in self.values.items())}")


def to_plain(value: sympy.Expr) -> int | float:
    """An int for whole numbers, a float otherwise (for JSON and tables)."""
    return int(value) if value.is_Integer else float(value)


class Formula:
    """A named total: ordered terms, a unit, a source and optional symbol definitions."""

    def __init__(
        self,
        key: str,
        title: str,
        terms: tuple[Term, ...] | list[Term],
        *,
        source: str,
        where: str = "",
        note: str = "",
        name: str | None = None,
        definitions: Mapping[sympy.Symbol, Formula] | None = None,
        example: Mapping[str, int | str] | None = None,
    ) -> None:
        terms = tuple(terms)
        if not terms:
            raise FormulaError(f"formula {key!r} has no terms")
        units = {t.unit for t in terms}
        if len(units) != 1:
            raise FormulaError(f"formula {key!r} mixes units {sorted(units)}")
        keys = [t.key for t in terms]
        if len(set(keys)) != len(keys):
            raise FormulaError(f"formula {key!r} has duplicate term keys")
        self.key = key
        self.title = title
        self.terms = terms
        self.unit = units.pop()
        self.source = source
        self.where = where
        self.note = note
        self.name = name or key
        self.definitions: dict[sympy.Symbol, Formula] = dict(definitions or {})
        self.example: dict[str, int | str] = dict(example or {})

    # --- structure -----------------------------------------------------------------------
    @property
    def expr(self) -> sympy.Expr:
        """The total as one SymPy expression (defined symbols such as N left in place)."""
        return sympy.Add(*(t.expr for t in self.terms))

    @property
    def symbols(self) -> list[sympy.Symbol]:
        """Free symbols of the total, in symbol-table order."""
        return symtab.ordered(self.expr.free_symbols)

    @property
    def inputs(self) -> list[sympy.Symbol]:
        """Every symbol a value may be given for: the free ones and those of definitions."""
        found = set(self.expr.free_symbols)
        for definition in self.definitions.values():
            found |= set(definition.inputs)
        return symtab.ordered(found)

    @property
    def base_inputs(self) -> list[sympy.Symbol]:
        """The symbols the fully composed total depends on."""
        return symtab.ordered(self.composed().free_symbols)

    def term(self, key: str) -> Term:
        """The term with this key (the full key or the part after the formula's key)."""
        for t in self.terms:
            if t.key == key or t.key == f"{self.key}.{key}":
                return t
        raise UnknownNameError(f"formula {self.key!r} has no term {quote(key)}")

    def __iter__(self) -> Iterator[Term]:
        return iter(self.terms)

    def __len__(self) -> int:
        return len(self.terms)

    # --- the one rule for defined symbols ------------------------------------------------
    @property
    def defined(self) -> dict[sympy.Symbol, Formula]:
        """Every defined symbol of this formula and of its definitions (the outermost wins)."""
        table: dict[sympy.Symbol, Formula] = {}
        pending = [self]
        seen: set[int] = set()
        while pending:
            f = pending.pop(0)
            if id(f) in seen:
                continue
            seen.add(id(f))
            for symbol, definition in f.definitions.items():
                table.setdefault(symbol, definition)
                pending.append(definition)
        return table

    def kept(self, names: Iterable[object] = ()) -> frozenset[sympy.Symbol]:
        """The defined symbols among ``names`` (names or symbols): by the one rule they stay inputs."""
        wanted = {_name(n) for n in names}
        return frozenset(s for s in self.defined if s.name in wanted)

    def expr_for(self, names: Iterable[object] = ()) -> sympy.Expr:
        """The total under the one rule: defined symbols in ``names`` stay, all others are expanded."""
        return self._expand(self.expr, self.kept(names))

    def _expand(self, expr: sympy.Expr, kept: frozenset[sympy.Symbol]) -> sympy.Expr:
        table = {s: f for s, f in self.defined.items() if s not in kept}
        for _ in range(len(table) + 1):
            hit = expr.free_symbols & table.keys()
            if not hit:
                return expr
            expr = extrema.substitute(expr, {s: table[s].expr for s in hit})
        raise FormulaError(f"formula {self.key!r}: definitions of "
                           f"{', '.join(s.name for s in symtab.ordered(hit))} refer to each other")

    # --- algebraic forms -----------------------------------------------------------------
    def composed(self) -> sympy.Expr:
        """The total with every defined symbol replaced by its formula, recursively."""
        return self.expr_for(())

    def expanded(self, composed: bool = False) -> sympy.Expr:
        """Fully multiplied out."""
        return sympy.expand(self.composed() if composed else self.expr)

    def simplified(self, composed: bool = False) -> sympy.Expr:
        """SymPy's simplest form of the total."""
        return sympy.simplify(self.composed() if composed else self.expr)

    def collected(self, symbol: sympy.Symbol | str, composed: bool = False) -> sympy.Expr:
        """The expanded total grouped by powers of one symbol (a defined one stays, by the rule)."""
        x = self._symbol(symbol, composed)
        return sympy.collect(sympy.expand(self._expr_for(x, composed)), x)

    # --- calculus ------------------------------------------------------------------------
    def diff(self, symbol: sympy.Symbol | str, composed: bool = True) -> sympy.Expr:
        """∂total/∂symbol, through the definitions (N, E) unless ``composed=False`` or the symbol is N or E."""
        x = self._symbol(symbol, composed)
        return sympy.diff(self._expr_for(x, composed), x)

    def elasticity(self, symbol: sympy.Symbol | str, at: Values | None = None,
                   composed: bool = True) -> sympy.Expr:
        """x/M · ∂M/∂x, symbolically, or exactly at a point when ``at`` is given."""
        if at is None:
            x = self._symbol(symbol, composed)
            return algebra.elasticity(self._expr_for(x, composed), x)
        return self.sensitivity(at, [symbol])[0].elasticity

    def sensitivity(self, at: Values, symbols: list[sympy.Symbol | str] | None = None) -> Sensitivities:
        """Derivative and elasticity at a point for each input (or the ones named).

        Defined symbols given in ``at`` or listed in ``symbols`` are inputs (a listed one that
        is not given takes its derived value); every other one is expanded.
        """
        chosen = [self._symbol(s, True) for s in symbols] if symbols else []
        self.evaluate(at)  # every term a usable amount at the point (else a one-line error naming it)
        point = vals.bind(at, self.inputs, f"formula {self.key!r}")
        kept = self.kept([*point, *chosen])
        expr = self._expand(self.expr, kept)
        derived = self._derive([s for s in symtab.ordered(kept) if s not in point], point)
        _require(expr.free_symbols - set(point) - set(derived))
        full = {**point, **derived}
        found = algebra.sensitivities(expr, full, chosen or symtab.ordered(expr.free_symbols))
        return Sensitivities(found, key=self.key, unit=self.unit, name=self.name,
                             total=algebra.at_point(expr, full), point=dict(point))

    # --- numbers -------------------------------------------------------------------------
    def evaluate(self, values: Values | None = None, **kwargs: object) -> Evaluation:
        """Exact total and per-term values; defined symbols are derived when not given.

        A term that is negative, or not a real number, at the point is an error naming it
        (``algebra.term_value``): a total is never a sum with such a term in it.
        """
        quantities.register()  # pint imported since: SymPy results must not turn into Floats with its units
        point, derived = self._resolve({**(values or {}), **kwargs})
        full = {**point, **derived}
        terms = tuple((t, algebra.term_value(t.key, t.expr, full)) for t in self.terms)
        total = sympy.Add(*(v for _, v in terms))
        return Evaluation(self, point, derived, terms, total)

    def restrict(self, values: Values) -> dict[object, object]:
        """Only the entries of ``values`` that name this formula's inputs (for shared examples)."""
        names = {s.name for s in self.inputs}
        return {k: v for k, v in values.items() if _name(k) in names}

    def subs(self, values: Values | None = None, **kwargs: object) -> sympy.Expr:
        """The total with some symbols replaced by validated numbers (others stay symbolic)."""
        point = vals.bind({**(values or {}), **kwargs}, self.inputs, f"formula {self.key!r}")
        return extrema.substitute(self.expr_for(point), point)

    def subs_terms(self, values: Values | None = None, keep: Iterable[object] = ()) -> dict[str, sympy.Expr]:
        """Each term as ``subs`` writes the total (defined symbols in ``values`` or ``keep`` stay), by key:
        what ``algebra.solve_max`` checks term by term. A term the values make a number is checked here
        (``algebra.term_value``), so that an error names the values it was given."""
        point = vals.bind(dict(values or {}), self.inputs, f"formula {self.key!r}")
        kept = self.kept([*point, *keep])
        out = {}
        for t in self.terms:
            expr = self._expand(t.expr, kept)
            out[t.key] = (algebra.term_value(t.key, expr, point) if expr.free_symbols <= point.keys()
                          else algebra.substitute_term(t.key, expr, point))
        return out

    def solve(self, symbol: sympy.Symbol | str, budget: object, values: Values | None = None,
              **kwargs: object) -> algebra.Solution:
        """Largest whole value of ``symbol`` for which the total is at most ``budget``."""
        x = self._symbol(symbol, True)
        given = {**(values or {}), **kwargs}
        if x.name in {_name(k) for k in given}:
            raise FormulaError(f"{x.name} is what is solved for; do not also give it a value")
        point = vals.bind(given, self.inputs, f"formula {self.key!r}")
        terms = self.subs_terms(point, [x])  # first: a term that cannot take these values is named
        expr = extrema.substitute(self.expr_for([x, *point]), point)
        missing = expr.free_symbols - {x}
        if missing:
            names = ", ".join(s.name for s in symtab.ordered(missing))
            raise FormulaError(f"values missing for {names}")
        limit = quantities.budget(budget, self.unit)
        if limit <= 0:
            raise FormulaError("budget must be positive")
        return replace(algebra.solve_max(expr, x, limit, terms=terms), unit=self.unit, key=self.key)

    def compile(self, form: str = "composed", *, keep: tuple[str, ...] = ()) -> CompiledFormula:
        """The total as cached vectorised NumPy code over keyword arrays (see ``symbolic.math.compiled``).

        ``keep`` names defined symbols that stay inputs (the one rule, decided before any value
        is given); calling the result with a value for another defined symbol keeps that one too.
        """
        from .compiled import compile_formula  # NumPy is imported only when something is compiled

        return compile_formula(self, form, keep)

    def _resolve(self, given: Values) -> tuple[dict[sympy.Symbol, sympy.Rational], dict[sympy.Symbol, sympy.Rational]]:
        """Validated values, and the values of the total's defined symbols that are not given."""
        point = vals.bind(given, self.inputs, f"formula {self.key!r}")
        needed = symtab.ordered(self.expr.free_symbols & self.defined.keys())
        derived = self._derive([s for s in needed if s not in point], point)
        _require(self.expr.free_symbols - set(point) - set(derived))
        return point, derived

    def _derive(self, symbols: Iterable[sympy.Symbol], point: Mapping[sympy.Symbol, sympy.Rational]
                ) -> dict[sympy.Symbol, sympy.Rational]:
        """Each defined symbol's value at ``point``, from its definition expanded by the same rule
        (so a defined symbol given inside it is used as given)."""
        table, kept = self.defined, frozenset(point)
        derived: dict[sympy.Symbol, sympy.Rational] = {}
        for symbol in symbols:
            definition = table[symbol]
            expr = self._expand(definition.expr, kept)
            missing = expr.free_symbols - set(point)
            if missing:
                names = ", ".join(s.name for s in symtab.ordered(missing))
                raise FormulaError(f"values missing for {names} (needed for {symbol.name} = {definition.key}), "
                                   f"or give {symbol.name} directly")
            derived[symbol] = algebra.at_point(expr, point)
        return derived

    def _symbol(self, symbol: sympy.Symbol | str, composed: bool) -> sympy.Symbol:
        name = symbol if isinstance(symbol, str) else symbol.name
        pool = self.inputs if composed else self.symbols
        for s in pool:
            if s.name == name:
                return s
        raise symtab.UnknownSymbolError(name, [s.name for s in pool], f"formula {self.key!r}")

    def _expr_for(self, x: sympy.Symbol, composed: bool) -> sympy.Expr:
        """The total a question about ``x`` is asked of: by the rule, or as written."""
        return self.expr_for([x]) if composed else self.expr

    # --- display -------------------------------------------------------------------------
    @property
    def name_latex(self) -> str:
        """The left-hand side as LaTeX, e.g. M_{\\mathrm{peak}}."""
        head, _, sub = self.name.partition("_")
        return f"{head}_{{\\mathrm{{{sub}}}}}" if sub else head

    def latex(self, form: str = "terms", *, dot: bool = False, equation: bool = False) -> str:
        """LaTeX of the total: 'terms' (author's order), 'expanded', 'simplified' or 'composed'."""
        forms = {
            "terms": lambda: printing.join_latex([t.expr for t in self.terms], dot=dot),
            "expanded": lambda: printing.latex(self.expanded(), dot=dot),
            "simplified": lambda: printing.latex(self.simplified(), dot=dot),
            "composed": lambda: printing.latex(self.composed(), dot=dot),
        }
        if form not in forms:
            raise FormulaError(f"unknown form {form!r}; choose from {', '.join(forms)}")
        body = forms[form]()
        return f"{self.name_latex} = {body}" if equation else body

    def display(self, expr: object) -> display.Expression:
        """``expr`` (e.g. ``f.diff("S")``) wrapped to typeset with the project's symbol names."""
        return display.Expression(expr)

    def text(self) -> str:
        """Plain one-line text of the total in the author's order."""
        return printing.join_text([t.expr for t in self.terms])

    def _repr_latex_(self) -> str:
        return f"$\\displaystyle {self.latex(equation=True)}$"

    def __format__(self, spec: str) -> str:
        if spec == "L":
            return self.latex(equation=True)
        if spec == "":
            return str(self)
        raise FormulaError(f"unknown format {spec!r} for Formula: use 'L' for LaTeX or '' for text")

    def __str__(self) -> str:
        return f"{self.name} = {self.text()}"

    def __repr__(self) -> str:
        return f"<Formula {self.key}: {self.text()}>"
