"""Subcommands that write documents: ``report`` (PDF, HTML, LaTeX) and ``latex`` (a paste-ready snippet).

The report machinery (jinja2, WeasyPrint, ziamath, matplotlib) is imported inside the handlers,
never at parser-building time (see the import rule in ``cli/__init__.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import library
from ..formula import Formula
from .common import CliError, parse_sets

FORMS = ("terms", "expanded", "simplified", "composed")


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this module's subcommands."""
    p = sub.add_parser("report", help="build a capacity-planning report (PDF, HTML, LaTeX) from a TOML specification",
                       description="Build a report from SPEC (a TOML file; see reports/). Without SPEC, the default "
                                   "example. Without -o/--html/--tex, writes SPEC's name with .pdf in the current "
                                   "folder.")
    p.add_argument("spec", nargs="?", metavar="SPEC", help="report specification (.toml); default: the example")
    p.add_argument("-o", "--output", "--pdf", dest="pdf", metavar="OUT.pdf", help="write the PDF here")
    p.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML page here")
    p.add_argument("--tex", metavar="OUT.tex", help="write a standalone LaTeX document here (pdflatex)")
    p.add_argument("--templates", metavar="DIR", help="use report.html.j2 / report.css / report.tex.j2 from DIR "
                                                      "(files it lacks come from the built-in templates)")
    p.add_argument("--term", action="append", metavar="NAME[:UNIT]=EXPR",
                   help="add a custom term to the total, e.g. lora=2*r*H*L*k (bytes unless a unit is given)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="value of a symbol a custom term introduces")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(handler=cmd_report)

    p = sub.add_parser("latex", help="a library formula as a LaTeX equation, ready to paste into a paper")
    p.add_argument("key", help="formula key (see 'symbolic list')")
    p.add_argument("--form", choices=FORMS, default="terms", help="which form of the total (default: the author's terms)")
    p.add_argument("--inline", action="store_true", help="print $...$ instead of an equation environment")
    p.add_argument("--label", metavar="LABEL", help="\\label{...} to add (default eq:KEY)")
    p.set_defaults(handler=cmd_latex)


def snippet(formula: Formula, form: str = "terms", label: str | None = None, inline: bool = False) -> str:
    """A paste-ready LaTeX equation for ``formula`` (amsmath not needed)."""
    body = formula.latex(form, equation=True)
    if inline:
        return f"${body}$"
    label = label if label is not None else f"eq:{formula.key}"
    if not all(c.isalnum() or c in ".:-_" for c in label):
        raise CliError(f"label {label!r} may contain only letters, digits and . : - _")
    where = f", {formula.where}" if formula.where else ""
    lines = [
        f"% {formula.key}: {formula.title} [{formula.source}{where}]".replace("\n", " "),
        "\\begin{equation}",
        f"  {body}",
    ]
    if label:
        lines.append(f"  \\label{{{label}}}")
    lines.append("\\end{equation}")
    return "\n".join(lines)


def cmd_latex(args: argparse.Namespace) -> int:
    print(snippet(library.get(args.key), args.form, args.label, args.inline))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    try:
        from ..report import Outputs, build
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise CliError(f"reports need the 'report' extra ({err.name} is missing): pip install 'symbolic[report]'") from None
    spec = Path(args.spec) if args.spec else None
    outputs = Outputs(pdf=_path(args.pdf), html=_path(args.html), tex=_path(args.tex))
    if outputs.pdf is None and outputs.html is None and outputs.tex is None:
        from ..report.build import default_spec

        outputs.pdf = Path((spec or default_spec()).stem + ".pdf")
    templates = Path(args.templates) if args.templates else None
    progress = None if args.quiet else (lambda message: print(f"symbolic report: {message}", file=sys.stderr))
    from ..custom import parse_cli_term

    terms = tuple(parse_cli_term(text) for text in args.term or ())
    try:
        done = build(spec, outputs, templates, progress, terms, parse_sets(args.set))
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise CliError(f"reports need the 'report' extra ({err.name} is missing): pip install 'symbolic[report]'") from None
    for path in done.written:
        print(path)
    return 0


def _path(text: str | None) -> Path | None:
    return Path(text) if text else None
