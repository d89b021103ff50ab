"""Formula: an ordered collection of terms whose sum is a total.

A formula keeps the author's order of its terms (SymPy's ``Add`` would reorder them) and may
let a symbol stand for another formula's total (``N`` for the parameter count): ``composed()``
expands such symbols, and evaluation derives their values when they are not given.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sympy

from . import algebra, printing
from . import symbols as symtab
from . import values as vals
from .algebra import Sensitivity
from .term import Term
from .units import format_bytes, format_count

if TYPE_CHECKING:  # pragma: no cover
    from .compiled import CompiledFormula

Values = Mapping[object, object]


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
            raise ValueError(f"formula {key!r} has no terms")
        units = {t.unit for t in terms}
        if len(units) != 1:
            raise ValueError(f"formula {key!r} mixes units {sorted(units)}")
        keys = [t.key for t in terms]
        if len(set(keys)) != len(keys):
            raise ValueError(f"formula {key!r} has duplicate term keys")
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
        raise KeyError(f"formula {self.key!r} has no term {key!r}")

    def __iter__(self) -> Iterator[Term]:
        return iter(self.terms)

    def __len__(self) -> int:
        return len(self.terms)

    # --- algebraic forms -----------------------------------------------------------------
    def composed(self) -> sympy.Expr:
        """The total with every defined symbol replaced by its formula, recursively."""
        return self.expr.xreplace(self._expansions(frozenset()))

    def _expansions(self, given: frozenset[sympy.Symbol]) -> dict[sympy.Symbol, sympy.Expr]:
        return {s: f.composed() for s, f in self.definitions.items() if s not in given}

    def expanded(self, composed: bool = False) -> sympy.Expr:
        """Fully multiplied out."""
        return sympy.expand(self.composed() if composed else self.expr)

    def simplified(self, composed: bool = False) -> sympy.Expr:
        """SymPy's simplest form of the total."""
        return sympy.simplify(self.composed() if composed else self.expr)

    def collected(self, symbol: sympy.Symbol | str, composed: bool = False) -> sympy.Expr:
        """The expanded total grouped by powers of one symbol."""
        x = self._symbol(symbol, composed)
        return sympy.collect(self.expanded(composed), x)

    # --- calculus ------------------------------------------------------------------------
    def diff(self, symbol: sympy.Symbol | str, composed: bool = True) -> sympy.Expr:
        """∂total/∂symbol, through the definitions (N, E) unless ``composed=False``."""
        x = self._symbol(symbol, composed)
        return sympy.diff(self._expr_for(x, composed), x)

    def elasticity(self, symbol: sympy.Symbol | str, at: Values | None = None,
                   composed: bool = True) -> sympy.Expr:
        """x/M · ∂M/∂x, symbolically, or exactly at a point when ``at`` is given."""
        if at is None:
            x = self._symbol(symbol, composed)
            return algebra.elasticity(self._expr_for(x, composed), x)
        return self.sensitivity(at, [symbol])[0].elasticity

    def sensitivity(self, at: Values, symbols: list[sympy.Symbol | str] | None = None) -> list[Sensitivity]:
        """Derivative and elasticity at a point for each input (or the ones named)."""
        point, derived = self._resolve(at)
        expr = self.expr.xreplace(self._expansions(frozenset(point)))
        chosen = [self._symbol(s, True) for s in symbols] if symbols else symtab.ordered(expr.free_symbols)
        return algebra.sensitivities(expr, point, chosen)

    # --- numbers -------------------------------------------------------------------------
    def evaluate(self, values: Values | None = None, **kwargs: object) -> Evaluation:
        """Exact total and per-term values; defined symbols are derived when not given."""
        point, derived = self._resolve({**(values or {}), **kwargs})
        full = {**point, **derived}
        terms = tuple((t, algebra.at_point(t.expr, full)) for t in self.terms)
        total = sympy.Add(*(v for _, v in terms))
        return Evaluation(self, point, derived, terms, total)

    def restrict(self, values: Values) -> dict[object, object]:
        """Only the entries of ``values`` that name this formula's inputs (for shared examples)."""
        names = {s.name for s in self.inputs}
        return {k: v for k, v in values.items() if (k if isinstance(k, str) else getattr(k, "name", k)) in names}

    def subs(self, values: Values | None = None, **kwargs: object) -> sympy.Expr:
        """The total with some symbols replaced by validated numbers (others stay symbolic)."""
        point = vals.bind({**(values or {}), **kwargs}, self.inputs, f"formula {self.key!r}")
        given = frozenset(point)
        return self.expr.xreplace(self._expansions(given)).xreplace(point)

    def solve(self, symbol: sympy.Symbol | str, budget: object, values: Values | None = None,
              **kwargs: object) -> algebra.Solution:
        """Largest whole value of ``symbol`` for which the total is at most ``budget``."""
        x = self._symbol(symbol, True)
        given = {**(values or {}), **kwargs}
        if x.name in {k if isinstance(k, str) else getattr(k, "name", k) for k in given}:
            raise ValueError(f"{x.name} is what is solved for; do not also give it a value")
        point = vals.bind(given, self.inputs, f"formula {self.key!r}")
        expr = self.expr.xreplace(self._expansions(frozenset(point))).xreplace(point)
        missing = expr.free_symbols - {x}
        if missing:
            names = ", ".join(s.name for s in symtab.ordered(missing))
            raise ValueError(f"values missing for {names}")
        limit = vals.to_number(budget, "budget")
        if limit <= 0:
            raise ValueError("budget must be positive")
        return algebra.solve_max(expr, x, limit)

    def compile(self, form: str = "composed", *, keep: tuple[str, ...] = ()) -> CompiledFormula:
        """The total as cached vectorised NumPy code over keyword arrays (see ``symbolic.compiled``)."""
        from .compiled import compile_formula  # NumPy is imported only when something is compiled

        return compile_formula(self, form, keep)

    def _resolve(self, given: Values) -> tuple[dict[sympy.Symbol, sympy.Rational], dict[sympy.Symbol, sympy.Rational]]:
        point = vals.bind(given, self.inputs, f"formula {self.key!r}")
        derived: dict[sympy.Symbol, sympy.Rational] = {}
        for symbol, definition in self.definitions.items():
            if symbol in point or symbol not in self.expr.free_symbols:
                continue
            sub = {s: v for s, v in point.items() if s in set(definition.inputs)}
            try:
                derived[symbol] = definition.evaluate(sub).total
            except ValueError as err:
                raise ValueError(f"{err} (needed for {symbol.name} = {definition.key}), "
                                 f"or give {symbol.name} directly") from None
        missing = self.expr.free_symbols - set(point) - set(derived)
        if missing:
            names = ", ".join(s.name for s in symtab.ordered(missing))
            raise ValueError(f"values missing for {names}")
        return point, derived

    def _symbol(self, symbol: sympy.Symbol | str, composed: bool) -> sympy.Symbol:
        name = symbol if isinstance(symbol, str) else symbol.name
        pool = self.inputs if composed else self.symbols
        for s in pool:
            if s.name == name:
                return s
        raise symtab.UnknownSymbolError(name, [s.name for s in pool], f"formula {self.key!r}")

    def _expr_for(self, x: sympy.Symbol, composed: bool) -> sympy.Expr:
        return self.composed() if composed else self.expr

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
            raise ValueError(f"unknown form {form!r}; choose from {', '.join(forms)}")
        body = forms[form]()
        return f"{self.name_latex} = {body}" if equation else body

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
        raise ValueError(f"unknown format {spec!r} for Formula: use 'L' for LaTeX or '' for text")

    def __str__(self) -> str:
        return f"{self.name} = {self.text()}"

    def __repr__(self) -> str:
        return f"<Formula {self.key}: {self.text()}>"
