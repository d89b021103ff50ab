"""Subcommands that write documents: ``report`` (PDF, HTML, LaTeX) and ``latex`` (a paste-ready snippet).

The report machinery (jinja2, WeasyPrint, ziamath, matplotlib) is imported inside the handlers,
never at parser-building time (see the import rule in ``cli/__init__.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import library
from ..core.errors import single_line
from ..math.formula import Formula
from ..report import latex_layout
from .common import CliError, parse_sets, quiet, read_stdin, verbose

FORMS = ("terms", "expanded", "simplified", "composed")


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this module's subcommands."""
    p = sub.add_parser("report", help="build a capacity-planning report (PDF, HTML, LaTeX) from a TOML specification",
                       description="Build a report from SPEC (a TOML file; see reports/). Without SPEC, the default "
                                   "example; '-' reads it from standard input. Without -o/--html/--tex, writes "
                                   "SPEC's name with .pdf (report.pdf for '-') in the current folder. An output's name "
                                   "ends in its format's extension (.pdf; .html or .htm; .tex) or has none "
                                   "(/dev/null). --quiet: no progress, only the paths written; --verbose: also each "
                                   "file's size.")
    p.add_argument("spec", nargs="?", metavar="SPEC",
                   help="report specification (.toml; '-': read it from standard input, relative paths in it taken "
                        "from the current folder); default: the example")
    p.add_argument("-o", "--output", "--pdf", dest="pdf", metavar="OUT.pdf", help="write the PDF here ('-': stdout)")
    p.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML page here ('-': stdout)")
    p.add_argument("--tex", metavar="OUT.tex", help="write a standalone LaTeX document here (pdflatex; '-': stdout)")
    p.add_argument("--templates", metavar="DIR", help="use report.html.j2 / report.css / report.tex.j2 from DIR "
                                                      "(files it lacks come from the built-in templates)")
    p.add_argument("--term", action="append", metavar="NAME[:UNIT]=EXPR",
                   help="add a custom term to the total, e.g. lora=2*r*H*L*k (bytes unless a unit is given)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="value of a symbol a custom term introduces")
    p.add_argument("--trust-code", action="store_true", help="allow a specification whose model is a Python file "
                                                             "(PATH.py:NAME): building the report runs its code")
    p.set_defaults(handler=cmd_report)

    p = sub.add_parser("latex", help="library formulas as LaTeX equations, ready to paste into a paper",
                       description="Print each KEY's total as a LaTeX equation (amsmath for multline, align and "
                                   "split). With --width, long totals are broken at their top-level terms, in the "
                                   "author's order, to fit that width.")
    p.add_argument("keys", nargs="+", metavar="KEY", help="formula key(s) (see 'symbolic list')")
    p.add_argument("--form", choices=FORMS, default="terms", help="which form of the total (default: the author's terms)")
    p.add_argument("--inline", action="store_true", help="print $...$ instead of an equation environment")
    p.add_argument("--label", metavar="LABEL", help="\\label{...} to add (default eq:KEY; only with one KEY)")
    p.add_argument("--width", metavar="LENGTH",
                   help="fit this width: 8.4cm, 240pt, \\columnwidth (229.5pt, a two-column article), 0.9\\linewidth")
    p.add_argument("--env", choices=latex_layout.ENVIRONMENTS,
                   help="environment (default: equation if it fits the width, else split inside equation)")
    p.add_argument("--document", action="store_true", help="wrap the equations in a minimal document for pdflatex")
    p.set_defaults(handler=cmd_latex)


def snippet(formula: Formula, form: str = "terms", label: str | None = None, inline: bool = False,
            width: str | None = None, env: str | None = None) -> str:
    """A paste-ready LaTeX equation for ``formula``, broken at its top-level terms to fit ``width`` if given."""
    if inline:
        if width is not None or env is not None:
            raise CliError("--inline is one line of running text; it takes neither --width nor --env")
        return f"${formula.latex(form, equation=True)}$"
    label = label if label is not None else f"eq:{formula.key}"
    if not all(c.isalnum() or c in ".:-_" for c in label):
        raise CliError(f"label {label!r} may contain only letters, digits and . : - _")
    points = None if width is None else latex_layout.parse_width(width)
    if env in ("multline", "align", "split") and points is None:
        points = latex_layout.COLUMNWIDTH  # breaking needs a width: a two-column article's column
    if points is None:
        body = f"\\begin{{equation}}\n  {formula.latex(form, equation=True)}\n  \\label{{{label}}}\n\\end{{equation}}" \
            if label else f"\\begin{{equation}}\n  {formula.latex(form, equation=True)}\n\\end{{equation}}"
    else:
        parts = latex_layout.body_parts(formula, form)
        if env is None:
            env = "equation" if latex_layout.fits(formula.name_latex, parts, points) else "split"
        body = latex_layout.display(formula.name_latex, parts, env, points, label or None)
    where = f", {formula.where}" if formula.where else ""
    head = f"% {formula.key}: {formula.title} [{formula.source}{where}]".replace("\n", " ")
    return f"{head}\n{body}"


def cmd_latex(args: argparse.Namespace) -> int:
    if args.label is not None and len(args.keys) > 1:
        raise CliError("--label names one equation; give one KEY with it (each KEY gets eq:KEY otherwise)")
    formulas = [library.get(key) for key in args.keys]
    snippets = [snippet(f, args.form, args.label, args.inline, args.width, args.env) for f in formulas]
    if args.document:
        if args.inline:
            raise CliError("--document wraps display equations; drop --inline")
        points = None if args.width is None else latex_layout.parse_width(args.width)
        print(latex_layout.document(snippets, points), end="")
    else:
        print("\n\n".join(snippets) if not args.inline else "\n".join(snippets))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    try:
        from ..report import Outputs, build
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise CliError(_missing(err)) from None
    spec = read_spec_stdin() if args.spec == STDIN else Path(args.spec) if args.spec else None
    to_stdout = [flag for flag, value in (("-o", args.pdf), ("--html", args.html), ("--tex", args.tex)) if value == "-"]
    if len(to_stdout) > 1:
        raise CliError(f"{' and '.join(to_stdout)} both write to stdout ('-'); give all but one a file name")
    outputs = Outputs(pdf=_output(args.pdf, "PDF"), html=_output(args.html, "HTML"), tex=_output(args.tex, "LaTeX"))
    if outputs.pdf is None and outputs.html is None and outputs.tex is None:
        from ..report.build import default_spec

        outputs.pdf = Path((spec if isinstance(spec, Path) else default_spec() if spec is None
                            else Path(STDIN_NAME)).stem + ".pdf")
    templates = Path(args.templates) if args.templates else None
    # one line each: a model folder's or a file's name may hold a line break
    progress = None if quiet(args) else (lambda message: print(f"symbolic report: {single_line(message)}",
                                                               file=sys.stderr))
    from ..math.userterms import parse_cli_term

    terms = tuple(parse_cli_term(text) for text in args.term or ())
    try:
        done = build(spec, outputs, templates, progress, terms, parse_sets(args.set), trust_code=args.trust_code)
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise CliError(_missing(err)) from None
    for path in done.written:
        if str(path) != "-":  # the document itself is on stdout
            print(f"{single_line(path)} ({path.stat().st_size:,} bytes)" if verbose(args) else single_line(path))
    return 0


STDIN = "-"
STDIN_NAME = "report"  # what a specification read from stdin is called: report.pdf by default
STDIN_LABEL = "standard input"  # where the report says it was built from


def read_spec_stdin() -> object:
    """The report specification piped on standard input, bounded like a file; relative paths from the current folder."""
    from dataclasses import replace

    from ..report import spec as report_spec

    raw = read_stdin(report_spec.MAX_FILE, "a report specification", report_spec.ReportSpecError)
    # "<stdin>": its parent, '.', is the current folder, where relative paths resolve
    return replace(report_spec.loads(raw, Path("<stdin>")), path=Path(STDIN_LABEL))  # colophon, messages


def _missing(err: ImportError) -> str:
    """The one-line error when a report dependency is absent (a broken install: they are dependencies)."""
    return (f"reports need {err.name}, which is missing from this environment: "
            "pip install --force-reinstall symbolic-memory (or, in a checkout, pip install -e .)")


EXTENSIONS = {"PDF": (".pdf",), "HTML": (".html", ".htm"), "LaTeX": (".tex",)}


def _output(text: str | None, kind: str) -> Path | None:
    """Where to write a ``kind`` document: '-', a name without an extension (/dev/null) or with the kind's own.

    ``-o x.docx`` would otherwise write a PDF named .docx; refused before any work.
    """
    if not text:
        return None
    path = Path(text)
    suffix = path.suffix.lower()
    if text != STDIN and suffix and suffix not in EXTENSIONS[kind]:
        allowed = " or ".join(EXTENSIONS[kind])
        raise CliError(f"{text}: a {kind} document's name ends in {allowed} (or has no extension, or is '-' for "
                       f"standard output), not {path.suffix}")
    return path
