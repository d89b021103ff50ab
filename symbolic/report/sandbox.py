"""The jinja2 sandbox that report templates run in, bounded so that a template cannot exhaust memory or time.

jinja2's ``ImmutableSandboxedEnvironment`` keeps a template away from Python's internals, not from
building gigabytes: ``'a' * 10**12``, ``'%0999999999d'|format(1)`` (5 GB over a minute) or
``'x'.center(10**9)``. ``BoundedSandbox`` refuses, before the work where it can, anything past
these limits, with a one-line ``TemplateLimit``:

- ``MAX_TEXT`` characters in one string, and in all the text one render produces: the document,
  which is rendered as a stream and counted as it grows, and what macros, ``{% set %}`` and
  ``{% filter %}`` blocks build before placing it (counted where built and again where placed);
- ``MAX_ITEMS`` items in one list, ``MAX_BITS`` bits in one integer, jinja2's ``MAX_RANGE`` items
  in a ``range``;
- ``MAX_STEPS`` steps of work per render: loop iterations, and the items walked to size a list or
  dict that is printed.

The hooks are the sandbox's own (``intercepted_binops``/``call_binop`` for ``*``, ``**``, ``%`` and
``+``; ``call`` for functions, macros and string methods; ``finalize`` for printed values), the
filters (wrapped), and a code generator whose output buffers are counted lists, whose ``~``
checks its parts before joining them and whose ``for`` loops count their iterations.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.sandbox import MAX_RANGE, ImmutableSandboxedEnvironment, safe_range
from jinja2.utils import Namespace

from ..core.errors import UserError

MAX_TEXT = 64 << 20  # characters: the largest example report's HTML is 2.5 MB, its templates produce about 5 MB
MAX_ITEMS = 1_000_000  # items in one list built by a template
MAX_BITS = 10_000  # bits of one integer (about 3,000 digits)
MAX_STEPS = 10_000_000  # loop iterations and walked items per render: a few seconds of work at most
PADDING = ("ljust", "rjust", "center", "zfill")  # str methods whose first argument is the result's width
MATERIALIZING = ("list", "sort", "unique", "reverse", "batch", "slice", "groupby", "join", "sum")  # one item a character
_PRINTF = re.compile(r"%(\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?([a-zA-Z%])")
_DIGITS = re.compile(r"\d+")
_CONTAINERS = (list, tuple, set, frozenset, type({}.keys()), type({}.values()))


class TemplateLimit(UserError):
    """A template asked for more text, items, digits or work than a report may take."""


class Budget:
    """The text and work one render has used so far."""

    def __init__(self) -> None:
        self.text = 0
        self.steps = 0

    def spend_text(self, characters: int) -> None:
        """Count ``characters`` of produced text; TemplateLimit past ``MAX_TEXT``."""
        self.text += characters
        if self.text > MAX_TEXT:
            raise TemplateLimit(f"the rendered text passes {MAX_TEXT >> 20} MiB, the cap of a report")

    def step(self, count: int = 1) -> None:
        """Count ``count`` steps of work; TemplateLimit past ``MAX_STEPS``."""
        self.steps += count
        if self.steps > MAX_STEPS:
            raise TemplateLimit(f"more than {MAX_STEPS:,} loop iterations or items walked in one render")


class CountedBuffer(list):  # type: ignore[type-arg]
    """The output buffer of a macro or block: every string appended is counted as produced text."""

    __slots__ = ("_budget",)

    def __init__(self, budget: Budget) -> None:
        super().__init__()
        self._budget = budget

    def append(self, item: Any) -> None:
        self._budget.spend_text(len(item))
        super().append(item)

    def extend(self, items: Iterable[Any]) -> None:
        items = tuple(items)
        self._budget.spend_text(sum(len(item) for item in items))
        super().extend(items)


class BoundedGenerator(CodeGenerator):
    """jinja2's code generator with counted buffers, checked ``~`` and counted ``for`` loops."""

    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.counted_buffer()")

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:  # as jinja2's, parts checked first
        if frame.eval_ctx.volatile:
            func_name = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            func_name = "markup_join"
        else:
            func_name = "str_join"
        self.write(f"{func_name}(environment.concat_parts((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write(")))")

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        where = {"lineno": node.lineno, "environment": self.environment}
        counted = nodes.Call(nodes.EnvironmentAttribute("counted_loop", **where), [node.iter], [], None, None, **where)
        super().visit_For(nodes.For(node.target, counted, node.body, node.else_, node.test, node.recursive, **where),
                          frame)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox with the limits of this module; ``budget`` is reset for each render."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    code_generator_class = BoundedGenerator

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        inner = kwargs.pop("finalize", None)
        super().__init__(*args, finalize=self._finalizer(inner), **kwargs)
        self.budget = Budget()
        self.globals["range"] = bounded_range
        self.globals["lipsum"] = self._lipsum(self.globals["lipsum"])
        self.filters = {name: self.bounded_filter(name, func) for name, func in self.filters.items()}

    # --- what generated code calls --------------------------------------------------------------
    def counted_buffer(self) -> CountedBuffer:
        """A macro's or block's output buffer, counted against the render's text."""
        return CountedBuffer(self.budget)

    def counted_loop(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """``iterable`` with each iteration counted as a step."""
        step = self.budget.step
        for item in iterable:
            step()
            yield item

    def concat_parts(self, parts: tuple[Any, ...]) -> tuple[Any, ...]:
        """The parts of a ``~``, refused if their text together passes ``MAX_TEXT``."""
        _limit_text(sum(self.weight(part) for part in parts), "a ~ concatenation")
        return parts

    # --- the sandbox's hooks --------------------------------------------------------------------
    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        """``*``, ``**``, ``%`` and ``+``, refused before the work when the result would pass a limit."""
        for value in (left, right):
            _limit_int(value)
        if operator == "*":
            _limit_repeat(left, right)
            _limit_repeat(right, left)
        elif operator == "+" and isinstance(left, (str, list, tuple)) and type(left) is type(right):
            _limit_size(left, len(left) + len(right), "a + of two values")
        elif operator == "**" and _is_int(left) and _is_int(right) and abs(left) > 1 and right > 0:
            if right * left.bit_length() > MAX_BITS:
                raise TemplateLimit(f"{left} ** {right} has more than {MAX_BITS:,} bits")
        elif operator == "%" and isinstance(left, str):
            self._limit_printf(left, right)
        return super().call_binop(context, operator, left, right)

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        """A call from a template: string methods that pad, repeat or format are checked first, results after."""
        for value in (*args, *kwargs.values()):
            _limit_int(value)
        method = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format in a function of its own
        owner = getattr(method, "__self__", None)
        if isinstance(owner, str):
            name = getattr(method, "__name__", "")
            if name == "join" and args:  # materialized here, so that its size is known before the join
                items = self._items(args[0])
                _limit_text(sum(self.weight(i) for i in items) + len(owner) * max(len(items) - 1, 0), "str.join")
                args = (items, *args[1:])
            else:
                self._limit_str_method(owner, name, args, kwargs)
        result = super().call(context, obj, *args, **kwargs)
        _limit_result(result)
        return result

    # --- filters, printing, sizes ---------------------------------------------------------------
    def bounded_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        """``func`` (the filter ``name``) with its arguments checked before and its result after."""
        offset = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0  # context, environment or eval_ctx

        @functools.wraps(func)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            value, rest = args[offset] if len(args) > offset else None, args[offset + 1:]
            args = (*args[:offset], self._filter_value(name, value, rest, kwargs), *rest)
            result = func(*args, **kwargs)
            _limit_result(result)
            return result

        return bounded

    def weight(self, value: Any) -> int:
        """About how many characters ``str(value)`` has; the items of lists and dicts walked are steps of work."""
        if isinstance(value, str):
            return len(value)
        total, stack = 0, [value]
        while stack and total <= MAX_TEXT:
            item = stack.pop()
            if isinstance(item, str):
                total += len(item) + 2
            elif isinstance(item, dict):
                self.budget.step(len(item))
                total += 2 + 4 * len(item)
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, _CONTAINERS) or type(item) is type({}.items()):
                self.budget.step(len(item))
                total += 2 + 2 * len(item)
                stack.extend(item)
            elif isinstance(item, Namespace):
                stack.append(item._Namespace__attrs)  # what its repr prints
            elif _is_int(item):
                total += item.bit_length() // 3 + 2
            else:
                total += 24
        return total

    def _finalizer(self, inner: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
        def finalize(value: Any) -> Any:
            if not isinstance(value, str):
                _limit_text(self.weight(value), "a printed value")
            return inner(value) if inner is not None else value

        return finalize

    def _filter_value(self, name: str, value: Any, rest: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A filter's value, checked against what the filter ``name`` would build from it (a join's materialized)."""
        for arg in (*rest, *kwargs.values()):
            _limit_int(arg)
        if not isinstance(value, str):
            _limit_text(self.weight(value), f"the value of |{name}")
        elif name in MATERIALIZING:
            _limit_size([], len(value), f"|{name} of a string")
        if name == "format" and isinstance(value, str):
            self._limit_printf(value, kwargs or rest)
        elif name == "center":
            _limit_width(_argument(rest, kwargs, 0, "width", 80), "|center")
        elif name == "indent":
            width = _argument(rest, kwargs, 0, "width", 4)
            per_line = len(width) if isinstance(width, str) else width if _is_int(width) else 0
            _limit_text(len(str(value)) + (str(value).count("\n") + 1) * per_line, "|indent")
        elif name == "replace" and len(rest) >= 2:
            _limit_replace(str(value), str(rest[0]), str(rest[1]), _argument(rest, kwargs, 2, "count", None))
        elif name in ("batch", "slice"):
            _limit_size([], _argument(rest, kwargs, 0, "linecount" if name == "batch" else "slices", 0), f"|{name}")
        elif name in ("join", "sum") and value is not None:
            items = self._items(value)
            if name == "join":
                joint = _argument(rest, kwargs, 0, "d", "")
                _limit_text(sum(self.weight(i) for i in items) + len(str(joint)) * max(len(items) - 1, 0), "|join")
            elif any(isinstance(i, (str, list, tuple)) for i in items):
                _limit_size([], sum(len(i) for i in items if isinstance(i, (str, list, tuple))), "|sum")
            return items
        return value

    def _items(self, iterable: Any) -> list[Any]:
        """``iterable`` as a list, each item a step, at most ``MAX_ITEMS``."""
        items = []
        for item in self.counted_loop(iterable):
            items.append(item)
            if len(items) > MAX_ITEMS:
                raise TemplateLimit(f"more than {MAX_ITEMS:,} items in one list")
        return items

    def _limit_str_method(self, text: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if name in PADDING:
            _limit_width(_argument(args, kwargs, 0, "width", 0), f"str.{name}")
        elif name == "expandtabs":
            tab = _argument(args, kwargs, 0, "tabsize", 8)
            _limit_text(len(text) + text.count("\t") * (tab if _is_int(tab) else 0), "str.expandtabs")
        elif name == "replace" and len(args) >= 2:
            _limit_replace(text, str(args[0]), str(args[1]), _argument(args, kwargs, 2, "count", None))
        elif name == "translate" and args and isinstance(args[0], dict):
            longest = max((self.weight(v) for v in args[0].values()), default=1)
            _limit_text(len(text) * max(longest, 1), "str.translate")
        elif name in ("format", "format_map"):
            _limit_format(text)
            _limit_text(len(text) + sum(self.weight(v) for v in (*args, *kwargs.values())), f"str.{name}")

    def _limit_printf(self, text: str, values: Any) -> None:
        """A ``%`` format: its widths and precisions (``*`` ones too) and its values together within ``MAX_TEXT``."""
        given = list(values) if isinstance(values, tuple) else [values]
        total, position = len(text), 0
        for match in _PRINTF.finditer(text):
            if match.group(4) == "%" and not match.group(2):
                continue
            for field in (match.group(2), match.group(3)):
                if field == "*":
                    size = given[position] if position < len(given) else 0
                    position += 1
                else:
                    size = int(field) if field else 0
                total += size if _is_int(size) and size > 0 else 0
            position += 0 if match.group(1) else 1
        _limit_text(total + sum(self.weight(v) for v in given), "a % format")

    def _lipsum(self, lipsum: Callable[..., str]) -> Callable[..., str]:
        @functools.wraps(lipsum)
        def bounded(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002 - jinja2's names
            if _is_int(n) and _is_int(max) and n * max > MAX_ITEMS:
                raise TemplateLimit(f"lipsum of {n:,} paragraphs of up to {max:,} words")
            return lipsum(n, html, min, max)

        return bounded


def bounded_range(*args: int) -> range:
    """jinja2's ``safe_range`` (at most ``MAX_RANGE`` items), its OverflowError a TemplateLimit."""
    try:
        return safe_range(*args)
    except OverflowError:
        raise TemplateLimit(f"range() of more than {MAX_RANGE:,} items") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str, default: Any) -> Any:
    return args[index] if len(args) > index else kwargs.get(name, default)


def _limit_int(value: Any) -> None:
    if _is_int(value) and value.bit_length() > MAX_BITS:
        raise TemplateLimit(f"an integer of more than {MAX_BITS:,} bits")


def _limit_text(characters: int, what: str) -> None:
    if characters > MAX_TEXT:
        raise TemplateLimit(f"{what} would make more than {MAX_TEXT >> 20} MiB of text")


def _limit_size(value: Any, size: int, what: str) -> None:
    """``size`` characters for a string ``value``, else items: within ``MAX_TEXT`` or ``MAX_ITEMS``."""
    if isinstance(value, str):
        _limit_text(size, what)
    elif _is_int(size) and size > MAX_ITEMS:
        raise TemplateLimit(f"{what} would make more than {MAX_ITEMS:,} items")


def _limit_width(width: Any, what: str) -> None:
    if _is_int(width) and width > MAX_TEXT:
        raise TemplateLimit(f"{what} of width {width:,}: more than {MAX_TEXT >> 20} MiB of text")


def _limit_repeat(sequence: Any, times: Any) -> None:
    """``sequence * times``: a string's or a list's length times the count, before it is built."""
    if isinstance(sequence, (str, list, tuple)) and _is_int(times):
        _limit_size(sequence, len(sequence) * times, "a * repetition")


def _limit_replace(text: str, old: str, new: str, count: Any) -> None:
    found = len(text) + 1 if old == "" else text.count(old)
    if _is_int(count) and count >= 0:
        found = min(found, count)
    _limit_text(len(text) + found * (len(new) - len(old)), "a replace")


def _limit_format(text: str) -> None:
    """A ``str.format`` string: its widths and precisions together within ``MAX_TEXT``; no nested fields in a spec."""
    total = 0
    for _, _, spec, _ in string.Formatter().parse(text):
        if spec and "{" in spec:
            raise TemplateLimit("a replacement field inside a format specification ('{:{width}}') is not allowed")
        total += sum(int(number) for number in _DIGITS.findall(spec or ""))
    _limit_text(total, "a format")


def _limit_result(result: Any) -> None:
    if isinstance(result, str):
        _limit_text(len(result), "a call")
    elif isinstance(result, (list, tuple)):
        _limit_size(result, len(result), "a call")
    else:
        _limit_int(result)
