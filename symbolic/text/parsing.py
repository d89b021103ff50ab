"""Safe parsing of user-written arithmetic formulas into SymPy expressions.

User text never reaches an evaluator: this module does not call ``sympify``,
``parse_expr``, ``eval``, ``exec`` or ``lambdify``.  Instead the text goes
through four fixed stages, each of which rejects anything it does not know:

1. a length check and a small lexer with an ASCII character whitelist
   (letters, digits, ``_``, space, tab and ``+ - * / ^ ( ) . ,``);
2. optional implicit multiplication for article notation (``implicit=True``),
   and ``^`` rewritten to ``**`` (``^`` always means power, never XOR);
3. ``ast.parse(..., mode="eval")``, which only builds a syntax tree;
4. a walk over that tree that accepts only the node types in
   ``_NODE_HANDLERS`` and the functions in ``_FUNCTIONS``, and builds the
   SymPy expression itself, checking size limits before any costly step.

Grammar: numbers (``3``, ``0.5``, ``1e3``; built exactly as SymPy rationals),
names, ``+ - * / ** ^``, unary ``+``/``-``, parentheses and calls of
``ceil``, ``floor``, ``max``, ``min``, ``log2`` and ``sqrt``.  An exponent must
evaluate to a rational number no larger than ``ParseLimits.max_exponent`` in
absolute value, so ``9**9**7`` and ``2**x`` are rejected.

With ``implicit=True`` the article notation ``L(14E + 4BSS) + 6BSV`` means
``L*(14*E + 4*B*S*S) + 6*B*S*V``: a ``*`` is inserted between number and
name, name and name, number or name and ``(`` (unless the name is a function)
and after ``)`` before a number, name or ``(``.  A run of letters that is not
a known symbol, function or Python keyword is split into one-letter names;
runs containing digits or ``_`` (``x2``, ``d_model``) are kept whole.  In this
mode ``e``/``E`` after a number is a name, so ``1e3`` is not scientific notation.

SymPy evaluates eagerly, and some evaluations effectively never finish:
deciding whether ``sqrt(2) + sqrt(3) - sqrt(5 + 2*sqrt(6))`` is zero, ``floor``
of a huge irrational, roots of 30-digit fractions, or the sign of
``x**4096 - 2*x + 2`` (done by factoring).  So the walk refuses, *before*
SymPy sees them: powers whose result would exceed ``max_result_digits``;
inexact roots of numbers above 2**30; division by an exact zero; fractional
powers of negative constants; ``ceil``/``floor``/``max``/``min`` of irrational
constants; and, in every intermediate result, sums with a power of one name
above ``max_degree`` and constants other than sums of rational multiples of
roots of small rationals (``1 + sqrt(2)/2`` is fine, ``log2(3)`` or
``sqrt(1 + sqrt(2))`` are not).  ``ceil``/``floor`` evaluate constant
arguments only and ``max``/``min`` only fold rational arguments (and flatten
nesting), because SymPy's symbolic evaluation of them runs many sign tests.
The sign of symbolic expressions is not analysed: ``sqrt(x - y)`` is accepted.

``to_text`` (in ``symbolic.text.printing``, re-exported here) prints an accepted
expression back in this grammar (``log2``, ``ceil``, ``max``, ``min``; ``Abs(u)``
as ``sqrt(u**2)``).  Parsing that text
with the same symbols gives an equal expression, provided the printed text
fits the limits: constant folding can produce longer numbers, or larger
exponents (``x**64*x**64``), than the input limits allow.
"""

from __future__ import annotations

import ast
import difflib
import keyword
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

import sympy

from ..core.errors import UserError
from .printing import to_text  # re-exported: the grammar's printer lives with the other printers

__all__ = [
    "DEFAULT_LIMITS",
    "FUNCTION_NAMES",
    "ParseError",
    "ParseLimits",
    "parse_expression",
    "to_text",
]


# --------------------------------------------------------------------------
# Public types
# --------------------------------------------------------------------------


class ParseError(UserError):
    """A rejected formula; ``column`` is 1-based in the user's text.

    ``str()`` is one line, e.g.
    ``unexpected '__import__' at column 3: names must match ...``.
    ``token`` is the offending text (``""`` means end of input).
    """

    def __init__(self, reason: str, column: int, token: str) -> None:
        self.reason = " ".join(reason.split())  # force a single line
        self.column = column
        self.token = token
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.token == "":
            what = "end of input"
        else:
            shown = self.token if len(self.token) <= 40 else self.token[:37] + "..."
            what = repr(shown)
        return f"unexpected {what} at column {self.column}: {self.reason}"

    def __reduce__(self) -> tuple[type[ParseError], tuple[str, int, str]]:
        return (type(self), (self.reason, self.column, self.token))


@dataclass(frozen=True)
class ParseLimits:
    """Bounds that keep parsing fast and memory-safe on hostile input."""

    max_length: int = 500  # characters of input
    max_depth: int = 30  # nesting; a chain like a+b-c counts as one level
    max_nodes: int = 300  # syntax-tree nodes visited
    max_int_digits: int = 30  # digits in one number literal (and |e| in 1e5)
    max_exponent: int = 64  # |exponent| of a power; must be a rational number
    max_result_digits: int = 200  # digits of any number the result may hold
    max_degree: int = 8  # highest power of one name inside a sum, like x**8 + 1


DEFAULT_LIMITS = ParseLimits()


# --------------------------------------------------------------------------
# Whitelists
# --------------------------------------------------------------------------


class _Function(NamedTuple):
    """How to build one allowed function call, and how many arguments it takes."""

    build: Callable[..., sympy.Expr] | None  # None: the call is ``arg**exponent``
    min_args: int
    max_args: int | None  # None: no upper bound
    rational_constants: bool  # constant arguments must be rational numbers
    exponent: sympy.Rational | None = None  # sqrt is a power, checked like one


def _log2(arg: sympy.Expr) -> sympy.Expr:
    """Base-2 logarithm as plain SymPy (``log(x)/log(2)``)."""
    return sympy.log(arg, 2)


def _rounding(cls: type[sympy.ceiling] | type[sympy.floor]) -> Callable[[sympy.Expr], sympy.Expr]:
    """Build ``ceiling``/``floor``, evaluated only for constant arguments.

    For symbolic arguments SymPy's evaluation runs many sign tests on the
    argument, each potentially slow; ``ceil(x/2)`` is kept as written.
    """

    def build(arg: sympy.Expr) -> sympy.Expr:
        return cls(arg) if arg.is_number else cls(arg, evaluate=False)

    return build


def _extremum(cls: type[sympy.Max] | type[sympy.Min]) -> Callable[..., sympy.Expr]:
    """Build ``Max``/``Min`` without SymPy's pairwise symbolic comparisons.

    Evaluated ``Max`` compares every pair of arguments through the assumption
    system, which takes seconds for a few dozen symbolic arguments.  Here
    nested calls are flattened, rational arguments collapse to the extreme
    one, and the rest is kept as written (deduplicated, canonically ordered).
    """
    pick = max if cls is sympy.Max else min

    def build(*args: sympy.Expr) -> sympy.Expr:
        flat = [part for arg in args for part in (arg.args if isinstance(arg, cls) else (arg,))]
        numbers = [arg for arg in flat if isinstance(arg, sympy.Rational)]
        rest = [arg for arg in flat if not isinstance(arg, sympy.Rational)]
        if numbers:
            rest.append(pick(numbers))
        return cls(*rest, evaluate=False)

    return build


_FUNCTIONS: dict[str, _Function] = {
    "ceil": _Function(_rounding(sympy.ceiling), 1, 1, rational_constants=True),
    "floor": _Function(_rounding(sympy.floor), 1, 1, rational_constants=True),
    "max": _Function(_extremum(sympy.Max), 1, None, rational_constants=True),
    "min": _Function(_extremum(sympy.Min), 1, None, rational_constants=True),
    "log2": _Function(_log2, 1, 1, rational_constants=False),
    "sqrt": _Function(None, 1, 1, rational_constants=False, exponent=sympy.Rational(1, 2)),
}

FUNCTION_NAMES: frozenset[str] = frozenset(_FUNCTIONS)

_NAME_RULE = "names must match [A-Za-z][A-Za-z0-9_]{0,31} without leading, trailing or double underscores"
_NEW_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
_NAME_RUN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER_SCI = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_NUMBER_PLAIN = re.compile(r"\d+\.?\d*|\.\d+")
_SPACE = re.compile(r"[ \t]+")
_OPERATOR_CHARS = frozenset("+-*/^(),")

# Nodes that are refused, with a friendlier reason than the class name.
_REJECTED: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access is not allowed",
    ast.Subscript: "indexing is not allowed",
    ast.Compare: "comparisons are not allowed",
    ast.BoolOp: "'and'/'or' are not allowed",
    ast.IfExp: "conditional expressions are not allowed",
    ast.Lambda: "lambda is not allowed",
    ast.Tuple: "tuples are not allowed; use commas only between function arguments",
    ast.List: "lists are not allowed",
    ast.Set: "sets are not allowed",
    ast.Dict: "dicts are not allowed",
    ast.Starred: "starred arguments are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.JoinedStr: "strings are not allowed",
    ast.NamedExpr: "assignment expressions are not allowed",
    ast.Await: "await is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
}


# --------------------------------------------------------------------------
# Stage 1-2: lexing, implicit products, rendering for ast.parse
# --------------------------------------------------------------------------


class _Token(NamedTuple):
    """One lexical token; ``column`` is 1-based in the user's text."""

    kind: str  # "num", "name", "op" or "space"
    text: str
    column: int


def _bad_char_reason(char: str) -> str:
    """Explain why a character is refused."""
    if char in "\r\n":
        return "the formula must be a single line"
    if char == ".":
        return "'.' is only allowed inside numbers such as 0.5"
    if ord(char) > 127:
        return f"character U+{ord(char):04X} is not allowed; use plain ASCII"
    return "only letters, digits, spaces and + - * / ^ ( ) , are allowed"


def _valid_new_name(name: str) -> bool:
    """Whether ``name`` may become a new symbol."""
    return _NEW_NAME.fullmatch(name) is not None and not name.endswith("_") and "__" not in name


def _check_number(token: _Token, limits: ParseLimits) -> None:
    """Bound the size of one number literal before anything converts it."""
    mantissa, _, exponent = token.text.lower().partition("e")
    if sum(ch.isdigit() for ch in mantissa) > limits.max_int_digits:
        raise ParseError(f"numbers may have at most {limits.max_int_digits} digits", token.column, token.text)
    if exponent and abs(int(exponent)) > limits.max_int_digits:
        raise ParseError(
            f"the exponent in scientific notation must be at most {limits.max_int_digits}",
            token.column,
            token.text,
        )


def _lex(text: str, *, implicit: bool, is_known: Callable[[str], bool], limits: ParseLimits) -> list[_Token]:
    """Split text into tokens, refusing (left to right) any character outside
    the whitelist, oversized numbers and malformed unknown names."""
    number = _NUMBER_PLAIN if implicit else _NUMBER_SCI
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char in _OPERATOR_CHARS:
            tokens.append(_Token("op", char, pos + 1))
            pos += 1
            continue
        for kind, pattern in (("space", _SPACE), ("num", number), ("name", _NAME_RUN)):
            match = pattern.match(text, pos)
            if match:
                token = _Token(kind, match.group(), pos + 1)
                if kind == "num":
                    _check_number(token, limits)
                elif (
                    kind == "name"
                    and not is_known(token.text)
                    # In implicit mode unknown letter runs become one-letter names.
                    and not (implicit and token.text.isalpha() and not keyword.iskeyword(token.text))
                    and not _valid_new_name(token.text)
                ):
                    raise ParseError(_NAME_RULE, token.column, token.text)
                tokens.append(token)
                pos = match.end()
                break
        else:
            raise ParseError(_bad_char_reason(char), pos + 1, char)
    return tokens


def _needs_product(prev: _Token, nxt: _Token) -> bool:
    """Whether article notation implies a ``*`` between two tokens."""
    if prev.kind == "num":
        return nxt.kind == "name" or nxt.text == "("
    if prev.kind == "name":
        return nxt.kind == "name" or (nxt.text == "(" and prev.text not in _FUNCTIONS)
    if prev.text == ")":
        return nxt.kind in ("num", "name") or nxt.text == "("
    return False


def _insert_products(tokens: list[_Token], is_known: Callable[[str], bool]) -> list[_Token]:
    """Split unknown letter runs into letters and insert implicit ``*``."""
    out: list[_Token] = []
    prev: _Token | None = None
    for token in tokens:
        if (
            token.kind == "name"
            and not is_known(token.text)
            and token.text.isalpha()
            and not keyword.iskeyword(token.text)  # `a if b else c` stays a (refused) IfExp
        ):
            pieces = [_Token("name", ch, token.column + i) for i, ch in enumerate(token.text)]
        else:
            pieces = [token]
        for piece in pieces:
            if piece.kind == "space":
                out.append(piece)
                continue
            if prev is not None and _needs_product(prev, piece):
                out.append(_Token("op", "*", piece.column))
            out.append(piece)
            prev = piece
    return out


def _check_tokens(tokens: list[_Token], limits: ParseLimits, *, implicit: bool) -> None:
    """Validate parentheses and operator adjacency before parsing."""
    open_parens: list[_Token] = []
    prev: _Token | None = None
    for token in tokens:
        if token.text == "(":
            open_parens.append(token)
            if len(open_parens) > limits.max_depth:
                raise ParseError(f"parentheses may nest at most {limits.max_depth} deep", token.column, "(")
        elif token.text == ")":
            if not open_parens:
                raise ParseError("this ')' has no matching '('", token.column, ")")
            open_parens.pop()
        if not implicit and prev is not None and prev.kind == "num" and token.kind in ("num", "name"):
            raise ParseError(
                "missing operator after a number; write '*' (or use implicit=True)",
                token.column,
                token.text,
            )
        prev = token if token.kind != "space" else None
    if open_parens:
        raise ParseError("this '(' is never closed", open_parens[-1].column, "(")


def _render(tokens: list[_Token]) -> tuple[str, list[int]]:
    """Join tokens into Python source; also return each character's user column."""
    chars: list[str] = []
    columns: list[int] = []
    for token in tokens:
        if token.kind == "space" and not chars:
            continue  # leading blanks would be an "unexpected indent"
        piece = "**" if token.text == "^" else token.text
        for i, char in enumerate(piece):
            chars.append(char)
            columns.append(token.column + (i if piece == token.text else 0))
    return "".join(chars), columns


# --------------------------------------------------------------------------
# Stage 4: the whitelisted tree walk
# --------------------------------------------------------------------------


def _magnitude_bits(expr: sympy.Basic) -> float:
    """Upper estimate of log2 of the largest number ``expr`` would evaluate."""
    if isinstance(expr, sympy.Rational):
        return float(max(abs(expr.p).bit_length(), expr.q.bit_length()))
    if isinstance(expr, sympy.Pow) and isinstance(expr.exp, sympy.Rational):
        return _magnitude_bits(expr.base) * abs(float(expr.exp))
    return max((_magnitude_bits(arg) for arg in expr.args), default=0.0)


_UNDEFINED = (sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)
_LOG_OF_2 = sympy.log(2)
_MAX_RADICAND = 2**30  # SymPy fully factors radicands this small (trial division to 2**15)


def _is_exact_root(number: sympy.Rational, degree: int) -> bool:
    """Whether ``number`` is the ``degree``-th power of a rational."""
    return bool(sympy.integer_nthroot(abs(number.p), degree)[1] and sympy.integer_nthroot(number.q, degree)[1])


def _is_simple_constant(expr: sympy.Basic) -> bool:
    """Whether a symbol-free ``expr`` is a constant SymPy handles cheaply.

    Allowed: sums of products of rationals, roots of small positive rationals
    (``sqrt(2)``, ``3**(1/5)``) and ``log(2)`` (which ``log2`` introduces).
    Roots of distinct square-free rationals are linearly independent, so such
    a sum is zero essentially only when SymPy already sees it cancel, and sign
    tests and comparisons stay quick numerical checks (SymPy's products of
    roots are not fully canonical, but the zero tests that leaves are small).
    Nested roots, products of sums and other logarithms can hide an exact zero,
    e.g. ``sqrt(2) + sqrt(3) - sqrt(5 + 2*sqrt(6))``; SymPy then falls back to
    minimal polynomials or ``simplify``, which may not finish.
    """
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        return all(not isinstance(arg, sympy.Add) and _is_simple_constant(arg) for arg in expr.args)
    if isinstance(expr, sympy.Rational) or expr == _LOG_OF_2:
        return True
    if isinstance(expr, sympy.Pow) and isinstance(expr.exp, sympy.Rational):
        base = expr.base
        if base == _LOG_OF_2:
            return True
        small_positive = isinstance(base, sympy.Rational) and 0 < base.p <= _MAX_RADICAND
        return small_positive and base.q <= _MAX_RADICAND
    return False


class _Walker:
    """Builds a SymPy expression from a syntax tree, node type by node type."""

    def __init__(
        self,
        *,
        text: str,
        source: str,
        columns: list[int],
        symbols: Mapping[str, sympy.Symbol],
        allow_new: bool,
        new_symbol: Callable[[str], sympy.Symbol],
        limits: ParseLimits,
    ) -> None:
        self.text = text
        self.source = source
        self.columns = columns
        self.symbols = symbols
        self.allow_new = allow_new
        self.new_symbol = new_symbol
        self.limits = limits
        self.nodes = 0
        self.created: dict[str, sympy.Symbol] = {}
        self.number_bound = 10**limits.max_result_digits

    # -- error helpers ------------------------------------------------------

    def column(self, offset: int) -> int:
        """User column of a 0-based offset into the rendered source."""
        return self.columns[offset] if offset < len(self.columns) else len(self.text) + 1

    def error(self, node: ast.AST, reason: str) -> ParseError:
        """A ParseError pointing at ``node`` in the user's text."""
        start = getattr(node, "col_offset", 0)
        end = getattr(node, "end_col_offset", None) or start + 1
        first, last = self.column(start), self.column(end - 1)
        return ParseError(reason, first, self.text[first - 1 : last])

    # -- traversal ----------------------------------------------------------

    def count(self, node: ast.AST, depth: int) -> None:
        """Enforce the node-count and depth limits."""
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise self.error(node, f"formula has more than {self.limits.max_nodes} parts")
        if depth > self.limits.max_depth:
            raise self.error(node, f"formula nests more than {self.limits.max_depth} levels deep")

    def visit(self, node: ast.AST, depth: int) -> sympy.Expr:
        """Dispatch to the handler for ``node``'s type, or refuse it."""
        self.count(node, depth)
        handler = _NODE_HANDLERS.get(type(node))
        if handler is None:
            reason = _REJECTED.get(type(node), f"{type(node).__name__} is not allowed")
            raise self.error(node, reason)
        return handler(self, node, depth)

    def checked(self, expr: sympy.Expr, node: ast.AST) -> sympy.Expr:
        """Refuse undefined, non-real, oversized or unsupported results."""
        self._check_tree(expr, node)
        return expr

    def _check_tree(self, expr: sympy.Basic, node: ast.AST) -> dict[sympy.Symbol, float] | None:
        """Check ``expr`` bottom-up.

        Returns ``None`` for a constant, else the degree of ``expr`` in each of
        its symbols (``sqrt(x)*y**2`` -> ``{x: 0.5, y: 2}``; functions count
        like their arguments).
        """
        if isinstance(expr, sympy.Symbol):
            return {expr: 1.0}
        if expr in _UNDEFINED:
            raise self.error(node, "division by zero or undefined result")
        if expr is sympy.I or isinstance(expr, (sympy.NumberSymbol, sympy.Float)):
            raise self.error(node, "result is not a real number")
        if isinstance(expr, sympy.Rational):
            if abs(expr.p) > self.number_bound or expr.q > self.number_bound:
                digits = self.limits.max_result_digits
                raise self.error(node, f"numbers may have at most {digits} digits")
            return None
        parts = [self._check_tree(arg, node) for arg in expr.args]
        if all(part is None for part in parts):
            if isinstance(expr, sympy.Pow) and not expr.exp.is_integer and expr.base.is_negative:
                raise self.error(node, "fractional power of a negative value")
            if not _is_simple_constant(expr):
                shown = str(expr) if len(str(expr)) <= 40 else str(expr)[:37] + "..."
                raise self.error(
                    node,
                    f"the constant {shown} is not supported; constants must be sums of "
                    "rational multiples of roots, such as 1 + sqrt(2)/2",
                )
            return None
        degrees: dict[sympy.Symbol, float] = {}
        if isinstance(expr, sympy.Pow):
            scale = abs(float(expr.exp)) if isinstance(expr.exp, sympy.Rational) else 1.0
            degrees = {symbol: degree * scale for symbol, degree in (parts[0] or {}).items()}
        else:
            combine = (lambda a, b: a + b) if isinstance(expr, sympy.Mul) else max
            for part in parts:
                for symbol, degree in (part or {}).items():
                    degrees[symbol] = combine(degrees.get(symbol, 0.0), degree)
        if isinstance(expr, sympy.Add) and max(degrees.values()) > self.limits.max_degree:
            # SymPy decides the sign of a sum in one symbol by finding the real
            # roots of its derivative; for high degrees that takes minutes.
            raise self.error(
                node,
                f"sums may contain powers of a name up to degree {self.limits.max_degree}",
            )
        return degrees

    # -- node handlers --------------------------------------------------------

    def expression(self, node: ast.Expression, depth: int) -> sympy.Expr:
        """Top-level wrapper produced by ``mode="eval"``."""
        return self.visit(node.body, depth + 1)

    def constant(self, node: ast.Constant, depth: int) -> sympy.Expr:
        """A number, rebuilt exactly from its literal text (never from a float)."""
        if type(node.value) not in (int, float):
            raise self.error(node, "only numbers are allowed as constants")
        literal = self.source[node.col_offset : node.end_col_offset]
        if _NUMBER_SCI.fullmatch(literal) is None:
            raise self.error(node, "malformed number")
        if literal.isdigit():
            return sympy.Integer(int(literal))
        fraction = Fraction(literal)
        return sympy.Rational(fraction.numerator, fraction.denominator)

    def name(self, node: ast.Name, depth: int) -> sympy.Expr:
        """A known symbol, or a new one when ``allow_new`` is set."""
        name = node.id
        if name in self.symbols:
            return self.symbols[name]
        if name in self.created:
            return self.created[name]
        if name in _FUNCTIONS:
            raise self.error(node, f"{name} is a function; call it like {name}(x)")
        if not _valid_new_name(name):
            raise self.error(node, _NAME_RULE)
        if not self.allow_new:
            raise self.error(node, _unknown_name_reason(name, self.symbols))
        symbol = self.new_symbol(name)
        self.created[name] = symbol
        return symbol

    def unary(self, node: ast.UnaryOp, depth: int) -> sympy.Expr:
        """Unary plus and minus."""
        operand = self.visit(node.operand, depth + 1)
        if isinstance(node.op, ast.USub):
            return -operand
        if isinstance(node.op, ast.UAdd):
            return operand
        raise self.error(node, "only unary + and - are allowed")

    def binary(self, node: ast.BinOp, depth: int) -> sympy.Expr:
        """Binary operators; a left-leaning chain of + - or * / is one level."""
        group = _CHAIN_GROUP.get(type(node.op))
        chain = [node]
        left = node.left
        while group is not None and isinstance(left, ast.BinOp) and _CHAIN_GROUP.get(type(left.op)) == group:
            self.count(left, depth)
            chain.append(left)
            left = left.left
        value = self.visit(left, depth + 1)
        for link in reversed(chain):
            apply = _BINARY_OPS.get(type(link.op))
            if apply is None:
                raise self.error(link, "operator not allowed; use + - * / ^")
            right = self.visit(link.right, depth + 1)
            value = self.checked(apply(self, value, right, link), link)
        return value

    def call(self, node: ast.Call, depth: int) -> sympy.Expr:
        """A call of one of the whitelisted functions, positional arguments only."""
        if not isinstance(node.func, ast.Name):
            raise self.error(node.func, "only the functions " + _function_list() + " can be called")
        name = node.func.id
        function = _FUNCTIONS.get(name)
        if function is None:
            hint = ""
            if name in self.symbols or (self.allow_new and _valid_new_name(name)):
                hint = f"; for a product write {name}*(...)"
            raise self.error(node.func, f"unknown function; allowed: {_function_list()}{hint}")
        if node.keywords:
            raise self.error(node.keywords[0], "keyword arguments are not allowed")
        count = len(node.args)
        too_many = function.max_args is not None and count > function.max_args
        if count < function.min_args or too_many:
            expected = (
                str(function.min_args) if function.min_args == function.max_args else f"at least {function.min_args}"
            )
            raise self.error(node, f"{name} takes {expected} argument(s), got {count}")
        args = [self.visit(arg, depth + 1) for arg in node.args]
        if function.rational_constants:
            for arg, arg_node in zip(args, node.args, strict=True):
                if arg.is_number and not isinstance(arg, sympy.Rational):
                    raise self.error(arg_node, f"{name} of an irrational constant is not supported")
        if function.exponent is not None:
            return self.checked(self.power(args[0], function.exponent, node, node), node)
        assert function.build is not None
        return self.checked(function.build(*args), node)

    # -- binary operations ----------------------------------------------------

    def power(self, base: sympy.Expr, exponent: sympy.Expr, node: ast.AST, exponent_node: ast.AST) -> sympy.Expr:
        """``base**exponent``, refused before SymPy computes anything large."""
        limit = self.limits.max_exponent
        if not isinstance(exponent, sympy.Rational):
            raise self.error(exponent_node, "exponents must be numbers such as 2, -1 or 1/2")
        if abs(exponent) > limit:
            raise self.error(exponent_node, f"exponents must be at most {limit} in absolute value")
        if base == 0 and exponent.is_negative:
            raise self.error(node, "division by zero")
        if not exponent.is_integer:
            # Only constants are sign-tested: for symbolic sums SymPy's sign
            # test can be slow, and sqrt(x - y) is legitimate anyway.
            if base.is_number and base.is_negative:
                raise self.error(node, "fractional power of a negative value")
            # SymPy factors the number it takes a root of (after raising it to
            # the exponent's numerator), which is slow for large numbers.
            coeff = base.as_coeff_Mul()[0]
            if max(abs(coeff.p), coeff.q) > _MAX_RADICAND and not _is_exact_root(coeff, exponent.q):
                raise self.error(node, "roots of numbers above 2**30 must be exact, like (10**30)**(1/2)")
        digits_bits = self.limits.max_result_digits * 3.33
        if _magnitude_bits(base) * abs(float(exponent)) > digits_bits:
            raise self.error(node, f"result would have more than {self.limits.max_result_digits} digits")
        return sympy.Pow(base, exponent)


def _add(walker: _Walker, left: sympy.Expr, right: sympy.Expr, node: ast.BinOp) -> sympy.Expr:
    """``left + right``."""
    return sympy.Add(left, right)


def _sub(walker: _Walker, left: sympy.Expr, right: sympy.Expr, node: ast.BinOp) -> sympy.Expr:
    """``left - right``."""
    return sympy.Add(left, -right)


def _mul(walker: _Walker, left: sympy.Expr, right: sympy.Expr, node: ast.BinOp) -> sympy.Expr:
    """``left * right``."""
    return sympy.Mul(left, right)


def _div(walker: _Walker, left: sympy.Expr, right: sympy.Expr, node: ast.BinOp) -> sympy.Expr:
    """``left / right``, refusing a divisor that is exactly zero."""
    if right == 0 or (right.is_number and right.is_zero):
        raise walker.error(node, "division by zero")
    return sympy.Mul(left, sympy.Pow(right, -1))


def _pow(walker: _Walker, left: sympy.Expr, right: sympy.Expr, node: ast.BinOp) -> sympy.Expr:
    """``left ** right`` with exponent checks."""
    return walker.power(left, right, node, node.right)


_BinaryOp = Callable[[_Walker, sympy.Expr, sympy.Expr, ast.BinOp], sympy.Expr]

_BINARY_OPS: dict[type[ast.operator], _BinaryOp] = {
    ast.Add: _add,
    ast.Sub: _sub,
    ast.Mult: _mul,
    ast.Div: _div,
    ast.Pow: _pow,
}

# Operators that form one flat, left-associative chain (for the depth limit).
_CHAIN_GROUP: dict[type[ast.operator], str] = {
    ast.Add: "sum",
    ast.Sub: "sum",
    ast.Mult: "product",
    ast.Div: "product",
}

_NODE_HANDLERS: dict[type[ast.AST], Callable[[_Walker, Any, int], sympy.Expr]] = {
    ast.Expression: _Walker.expression,
    ast.BinOp: _Walker.binary,
    ast.UnaryOp: _Walker.unary,
    ast.Constant: _Walker.constant,
    ast.Name: _Walker.name,
    ast.Call: _Walker.call,
}


def _function_list() -> str:
    """Allowed function names, for messages."""
    return ", ".join(sorted(_FUNCTIONS))


def _unknown_name_reason(name: str, symbols: Mapping[str, sympy.Symbol]) -> str:
    """Explain an unknown name, suggesting the closest known one."""
    close = difflib.get_close_matches(name, list(symbols), n=1)
    if close:
        return f"unknown name; did you mean {close[0]!r}?"
    if not symbols:
        return "unknown name; no names are defined"
    known = sorted(symbols)
    shown = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "")
    return f"unknown name; known names: {shown}"


def _syntax_error(exc: SyntaxError, text: str, columns: list[int]) -> ParseError:
    """Translate Python's SyntaxError into a ParseError on the user's text."""
    offset = (exc.offset or 0) - 1  # Python reports 0 for "ran out of input"
    column = columns[offset] if 0 <= offset < len(columns) else len(text) + 1
    token = text[column - 1] if column <= len(text) else ""
    match = _NAME_RUN.match(text, column - 1) or _NUMBER_SCI.match(text, column - 1)
    if match:
        token = match.group()
    message = exc.msg or ""
    if "leading zeros" in message:
        reason = "numbers must not start with 0"
    elif message.startswith("invalid syntax") or not message:
        reason = "invalid syntax"
    else:
        reason = message
    return ParseError(reason, column, token)


def _default_new_symbol(name: str) -> sympy.Symbol:
    """New names are positive symbols, as sizes and counts are."""
    return sympy.Symbol(name, positive=True)


# --------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------


def parse_expression(
    text: str,
    *,
    symbols: Mapping[str, sympy.Symbol],
    allow_new: bool = False,
    new_symbol: Callable[[str], sympy.Symbol] | None = None,
    implicit: bool = False,
    limits: ParseLimits = DEFAULT_LIMITS,
) -> sympy.Expr:
    """Parse a user-written formula into a SymPy expression, safely.

    ``symbols`` maps the names the user may write to SymPy symbols.  Unknown
    names are an error (with a suggestion) unless ``allow_new`` is set, in
    which case ``new_symbol(name)`` creates them (default: a positive
    ``Symbol``).  ``implicit`` enables article notation such as ``2BSH``.
    Raises ``ParseError`` for any text outside the grammar or the limits.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    if len(text) > limits.max_length:
        cut = limits.max_length
        raise ParseError(f"formula is longer than {limits.max_length} characters", cut + 1, text[cut : cut + 10])

    def is_known(name: str) -> bool:
        return name in symbols or name in _FUNCTIONS

    tokens = _lex(text, implicit=implicit, is_known=is_known, limits=limits)
    if implicit:
        tokens = _insert_products(tokens, is_known)
    _check_tokens(tokens, limits, implicit=implicit)
    if all(token.kind == "space" for token in tokens):
        raise ParseError("expected a formula", len(text) + 1, "")
    source, columns = _render(tokens)
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise _syntax_error(exc, text, columns) from None
    except (MemoryError, RecursionError):
        raise ParseError("formula is nested too deeply", 1, text[:10]) from None
    walker = _Walker(
        text=text,
        source=source,
        columns=columns,
        symbols=symbols,
        allow_new=allow_new,
        new_symbol=new_symbol or _default_new_symbol,
        limits=limits,
    )
    return walker.checked(walker.visit(tree, 0), tree.body)
