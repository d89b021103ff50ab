"""Build a report: specification -> scenario -> context -> HTML/LaTeX/PDF, written atomically."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core import atomic as write
from ..core import collector
from ..math.userterms import CustomTerm
from . import adapter, context, render, spec
from .typeset import SvgTypesetter, Typesetter

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEFAULT_EXAMPLE = "llama-3-8b-h100.toml"

Progress = Callable[[str], None]


def default_spec() -> Path:
    """The example specification ``symbolic report`` builds when given none."""
    return EXAMPLES / DEFAULT_EXAMPLE


@dataclass
class Outputs:
    """Where to write each format (None: not wanted)."""

    pdf: Path | None = None
    html: Path | None = None
    tex: Path | None = None
    written: list[Path] = field(default_factory=list)


def build(spec_path: Path | spec.ReportSpec | None, outputs: Outputs, templates: Path | None = None,
          progress: Progress | None = None, terms: tuple[CustomTerm, ...] = (),
          values: dict[str, object] | None = None, trust_code: bool = False) -> Outputs:
    """Build every requested output of the report described by ``spec_path`` (default example if None).

    ``terms`` and ``values`` add custom terms and symbol values to the specification's own;
    ``trust_code`` allows a model that is a user's Python file (planning it runs that file).
    """
    say = _timed(progress)
    if templates is not None and not Path(templates).is_dir():
        raise render.TemplateError(f"templates folder not found: {templates}")
    path = spec_path or default_spec()
    say(f"reading {path.path if isinstance(path, spec.ReportSpec) else path}")
    report_spec = path if isinstance(path, spec.ReportSpec) else spec.load(path)  # already read: stdin
    if report_spec.model.runs_code and not trust_code:
        raise spec.ReportSpecError(f"model {report_spec.model.name!r} is a Python file: building this report runs "
                                   "its code; build with --trust-code if you trust it")
    if terms or values:
        report_spec = report_spec.with_extras(tuple(terms), values)
    for target in (outputs.pdf, outputs.html, outputs.tex):
        if target is not None:
            write.target_kind(target)  # a missing folder, a folder or a socket is refused before the work
    if outputs.pdf is not None:
        render.require_pdf_renderer()  # so is a missing WeasyPrint (ImportError), not after seconds of typesetting
    say(f"computing {report_spec.model.name} ({report_spec.formulas} formulas)")
    with collector.when_opted_in(render.frozen_heap):  # the collector skips what was loaded before, if asked
        scenario = adapter.scenario_for(report_spec)
        typeset = outputs.pdf is not None or outputs.html is not None
        ctx = context.build(report_spec, scenario, SvgTypesetter() if typeset else Typesetter(), charts=typeset,
                            progress=say)
        if typeset:
            say("rendering HTML")
            html = render.render_html(ctx, templates)
            if outputs.html is not None:
                outputs.written.append(write.write_text(outputs.html, html))
            if outputs.pdf is not None:
                say("laying out the PDF (WeasyPrint)")
                pdf = render.html_to_pdf(html, warn=lambda message: say(f"WeasyPrint: {message}"))
                outputs.written.append(write.write_bytes(outputs.pdf, pdf))
        if outputs.tex is not None:
            say("rendering LaTeX")
            outputs.written.append(write.write_text(outputs.tex, render.render_tex(ctx, templates)))
    say("done: " + ", ".join(str(p) for p in outputs.written))
    return outputs


def _timed(progress: Progress | None) -> Progress:
    start = time.monotonic()

    def say(message: str) -> None:
        if progress is not None:
            progress(f"[{time.monotonic() - start:5.1f}s] {message}")

    return say
