"""Helpers shared by the subcommands: one-line errors, --set parsing, JSON and tables, the CLI conventions.

Conventions every command follows (issue 14):

- a typo'd flag or subcommand is a one-line error with "did you mean" and the command's help
  (``Parser``);
- ``--quiet`` / ``--verbose`` are global (before or after the subcommand): commands read them with
  ``verbosity(args)`` (-1, 0, 1);
- whole-number flags (batch, sequence, degrees, counts) share one parser and one message
  (``whole``, ``whole_list``) with the planner's bounds;
- ``--check`` makes "does not fit" exit with ``EXIT_DOES_NOT_FIT`` (3), via ``check_exit``;
- ``-`` as an input file is standard input, read with the same bound as a file (``read_stdin``).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, NoReturn

from ..core.errors import QUOTE_LIMIT, UserError, quote, single_line
from ..core.values import parse_assignment

if TYPE_CHECKING:
    from ..catalogs import Budget
    from ..math.formula import Formula


MAX_MESSAGE = 1000  # characters of one error line; what the user typed is quoted shorter still
LONG_WORD = 200  # a "word" longer than this (no path is) is user text echoed in full: cut it
_LONG_WORD = re.compile(rf"\S{{{LONG_WORD + 1},}}")


def one_line(message: str) -> str:
    """``message`` as one short printable line: control characters escaped, huge words and lines cut."""
    text = single_line(message)
    text = _LONG_WORD.sub(lambda m: f"{m.group()[:QUOTE_LIMIT]}… ({len(m.group()):,} characters)", text)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "…"


class CliError(UserError):
    """A user error: printed as one line, exit code 2."""


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
    """": did you mean '--batch'?" when ``word`` is close to one of ``candidates`` (difflib), else ""."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f": did you mean {close[0]!r}?" if close else ""


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string ``parser`` takes (``--batch``, ``-o``...), in definition order."""
    return [o for action in parser._actions for o in action.option_strings]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subparsers of ``parser`` by name (empty for a parser without subcommands)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump), "did you mean" for typos, and exit code 2."""

    def error(self, message: str) -> NoReturn:
        hint = self._typo_hint() if "arguments are required" in message else ""
        print(one_line(f"{self.prog}: error: {message}{hint} (see '{self.prog} --help')"), file=sys.stderr)
        sys.exit(2)

    def _parse_known_args(self, arg_strings: list[str], *rest: Any, **options: Any) -> Any:
        self._words = list(arg_strings)  # for _typo_hint: a required flag "missing" is often a typo'd one
        return super()._parse_known_args(arg_strings, *rest, **options)

    def _typo_hint(self) -> str:
        """"; '--gpuu' is not an option: did you mean '--gpu'?" for the first unknown flag given."""
        flags = option_strings(self)
        for word in getattr(self, "_words", ()):
            name = word.split("=", 1)[0]
            if not name.startswith("-") or name == "-" or name[1:2].isdigit() or name in flags:
                continue
            if name.startswith("--") and any(f.startswith(name) for f in flags):  # argparse's abbreviations
                continue
            return f"; {name!r} is not an option{did_you_mean(name, flags)}"
        return ""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """An invalid choice (a subcommand, ``--mode trian``) names the closest valid one."""
        choices = action.choices
        if choices is None or value in choices:
            return
        names = [str(c) for c in choices]
        hint = did_you_mean(str(value), names)
        raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint} (choose from {', '.join(names)})")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """Parse; an unknown flag is reported by the subcommand it was given to, with the closest flag."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            commands = subcommands(self)
            owner = commands.get(getattr(parsed, "command", None) or "", self)
            flags = option_strings(owner) + [o for o in option_strings(self) if o not in ("-h", "--help")]
            word = next((e for e in extras if e.startswith("-") and e != "-"), extras[0])
            hint = did_you_mean(word.split("=", 1)[0], flags) if word.startswith("-") else ""
            if not hint and owner is self and not word.startswith("-"):
                hint = did_you_mean(word, list(commands))
            label = "unrecognized argument" if len(extras) == 1 else "unrecognized arguments"
            owner.error(f"{label} {' '.join(repr(e) for e in extras)}{hint}")
        if getattr(parsed, "quiet", False) and getattr(parsed, "verbose", False):
            self.error("--quiet and --verbose contradict each other; give one")
        return parsed


# --- verbosity ----------------------------------------------------------------------------------
QUIET_HELP = "print only the essential line (or nothing but errors); anywhere on the command line"
VERBOSE_HELP = "print more detail (formulas, notes, every row); anywhere on the command line"


def add_verbosity(parser: argparse.ArgumentParser, default: object = False) -> None:
    """``-q/--quiet`` and ``-v/--verbose`` on ``parser``; subparsers get ``default=SUPPRESS``.

    The main parser holds the defaults (False); a subcommand's copy only sets what was given,
    so the flags work before or after the subcommand.
    """
    parser.add_argument("-q", "--quiet", action="store_true", default=default, help=QUIET_HELP)
    parser.add_argument("-v", "--verbose", action="store_true", default=default, help=VERBOSE_HELP)


def verbosity(args: argparse.Namespace) -> int:
    """-1 with --quiet, 1 with --verbose, 0 otherwise: how much a command prints."""
    if getattr(args, "quiet", False):
        return -1
    return 1 if getattr(args, "verbose", False) else 0


def quiet(args: argparse.Namespace) -> bool:
    """Whether --quiet was given (print the essential line only, or nothing but errors)."""
    return verbosity(args) < 0


def verbose(args: argparse.Namespace) -> bool:
    """Whether --verbose was given (print more detail)."""
    return verbosity(args) > 0


# --- exit code for scripts ----------------------------------------------------------------------
EXIT_DOES_NOT_FIT = 3  # with --check: the plan does not fit (0 fits, 2 bad input, 1 a bug)
CHECK_HELP = f"exit with status {EXIT_DOES_NOT_FIT} when it does not fit (0 when it fits), for scripts"


def add_check(parser: argparse.ArgumentParser) -> None:
    """``--check``: a command that judges a fit exits ``EXIT_DOES_NOT_FIT`` when it does not fit."""
    parser.add_argument("--check", action="store_true", help=CHECK_HELP)


def check_exit(args: argparse.Namespace, fits: bool) -> int:
    """The exit code of a fit verdict: ``EXIT_DOES_NOT_FIT`` with --check when it does not fit, else 0.

    Without ``--check`` the answer is in the output and the exit code stays 0, as before.
    """
    return EXIT_DOES_NOT_FIT if getattr(args, "check", False) and not fits else 0


# --- whole numbers: one parser, one message, the planner's bounds --------------------------------
MAX_WHOLE = 2**40  # the planner's bound on sizes and degrees (planning.regime)
_WHOLE = re.compile(r"[0-9]{1,16}(?:\.[0-9]{1,16})?(?:[eE]\+?[0-9]{1,2})?")


def whole(text: str, low: int = 1, high: int = MAX_WHOLE) -> int:
    """A whole number from "8", "4096", "3e11" or "1.5e3" within ``low``..``high``; one message for every flag.

    Raises ``argparse.ArgumentTypeError`` (argparse prefixes "argument --batch: ").
    """
    item = text.strip()
    value = None
    if _WHOLE.fullmatch(item):
        mantissa, _, exponent = item.lower().partition("e")
        number = Fraction(mantissa) * 10 ** int(exponent or 0)
        value = int(number) if number.denominator == 1 else None
    shown = quote(text)
    if value is None or value < low:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ {low}, got {shown}")
    if value > high:
        raise argparse.ArgumentTypeError(f"expected a whole number ≤ {high:,}, got {shown}")
    return value


def whole_type(low: int = 1, high: int = MAX_WHOLE) -> Callable[[str], int]:
    """An argparse ``type=`` for whole numbers in ``low``..``high`` (named for argparse's messages)."""
    def parse(text: str) -> int:
        return whole(text, low, high)

    parse.__name__ = "whole number"
    return parse


def whole_list(text: str, flag: str, low: int = 1, high: int = MAX_WHOLE) -> tuple[int, ...]:
    """Whole numbers from "1,2,4" (each as ``whole``); a ``CliError`` naming ``flag`` otherwise."""
    items = [x for x in text.split(",") if x.strip()]
    if not items:
        raise CliError(f"argument {flag}: expected whole numbers ≥ {low} separated by commas, e.g. 1,2")
    try:
        return tuple(whole(x, low, high) for x in items)
    except argparse.ArgumentTypeError as err:
        raise CliError(f"argument {flag}: {err}") from None


# --- standard input as a file -------------------------------------------------------------------
def read_stdin(limit: int, what: str, error: type[Exception] = UserError) -> bytes:
    """At most ``limit`` bytes of standard input (for ``-`` as a file name); larger input is refused.

    The same bound as ``userfiles.read_user_file`` puts on a file; a terminal is refused rather
    than waited on.
    """
    stream = sys.stdin
    if stream is None:
        raise error(f"-: no standard input to read {what} from")
    if stream.isatty():
        raise error(f"-: standard input is a terminal; pipe {what} in (e.g. '< spec.toml')")
    source = getattr(stream, "buffer", None)
    try:
        data = source.read(limit + 1) if source is not None else stream.read(limit + 1).encode("utf-8")
    except OSError as err:
        raise error(f"-: standard input cannot be read ({err.strerror or err})") from None
    if len(data) > limit:
        raise error(f"-: larger than {limit:,} bytes; too large for {what}")
    return data


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
    from ..math.userterms import parse_cli_term

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
    from ..math.userterms import with_terms

    return with_terms(formula, terms)


def warn_context(args: argparse.Namespace, config: Mapping[str, Any], name: str, seq: int, positions: int = 0) -> None:
    """On stderr (not with --quiet): ``seq`` is beyond the context the model was trained for, as the report says."""
    from ..networks.shape import context_warning

    message = context_warning(config, name, seq, positions)
    if message and not quiet(args):
        print(f"symbolic: warning: {message}", file=sys.stderr)


def budget_of(args: argparse.Namespace) -> Budget | None:
    """The Budget --gpu, --gpu-fraction and --reserve give (None without --gpu)."""
    from ..catalogs.budget import make_budget, parse_reserve

    fraction, reserve = getattr(args, "gpu_fraction", None), getattr(args, "reserve", None) or []
    if not args.gpu:
        if fraction is not None or reserve:
            raise CliError(f"{'--gpu-fraction' if fraction is not None else '--reserve'} needs --gpu (the GPU whose "
                           "memory it divides)")
        return None
    return make_budget(args.gpu, 1 if fraction is None else fraction, [parse_reserve(r) for r in reserve],
                       source="given on the command line")


def print_budget(budget: Budget) -> None:
    """The budget's own lines under an answer: how its bytes follow from the GPU, and each rounding."""
    for line in budget.lines():
        print(f"  budget: {line}")
