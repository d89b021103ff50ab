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

import importlib
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .build import Outputs, build, default_spec
    from .spec import ReportSpec, ReportSpecError, load

# Loaded on first use (PEP 562), so that the renderers (``texescape``, ``render``, ``typeset``,
# ``mathsvg``) import alone: ``import symbolic.report.texescape`` must not build the planner.
_LAZY = {"Outputs": "build", "build": "build", "default_spec": "build", "ReportSpec": "spec",
         "ReportSpecError": "spec", "load": "spec"}

__all__ = ["Outputs", "ReportSpec", "ReportSpecError", "build", "default_spec", "load"]


def __getattr__(name: str) -> object:
    """The public names above, imported from their module on first use."""
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """Keeps ``symbolic.report.build`` the function (as the former eager import made it).

    Importing the submodule ``report.build`` makes the import system set the package attribute
    ``build`` to that module; this records the module's ``build`` function instead.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if name == "build" and isinstance(value, types.ModuleType):
            value = value.build  # type: ignore[attr-defined]
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
