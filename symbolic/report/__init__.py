"""Capacity-planning reports: a TOML specification in, PDF, HTML and LaTeX out.

Layers, each a small module: ``spec`` (read and validate the TOML), ``adapter`` and ``articles``
(the specification as a ``Scenario``: one per-GPU formula, its inputs, the GPUs), ``scenario``
(exact evaluation, sweeps, solving, sensitivities), ``context`` (a plain dict of everything the
report shows), ``calc`` (hand calculations), ``mathsvg`` and ``plots`` (SVG), ``render``
(jinja2 and WeasyPrint) and ``write`` (atomic files). WeasyPrint, ziamath and matplotlib are
imported only when a report is rendered.

>>> from symbolic.report import build, Outputs
>>> build(None, Outputs(pdf=Path("report.pdf")))          # doctest: +SKIP
"""

from __future__ import annotations

from .build import Outputs, build, default_spec
from .spec import ReportSpec, SpecError, load

__all__ = ["Outputs", "ReportSpec", "SpecError", "build", "default_spec", "load"]
