"""Tables as plain data for both templates (HTML and LaTeX): columns, rows of cells, a column spec."""

from __future__ import annotations

from typing import Any

from .texescape import TexCode


def table(columns: list[tuple[str, str]], rows: list[dict[str, Any]], widths: dict[int, str] | None = None
           ) -> dict[str, Any]:
    """A table for both templates: column titles and alignment, rows of cells, a LaTeX column spec."""
    spec = []
    for index, (_, align) in enumerate(columns):
        if widths and index in widths:
            spec.append(f">{{\\raggedright\\arraybackslash}}p{{{widths[index]}}}")
        else:
            spec.append({"left": "l", "right": "r", "center": "c"}[align])
    return {"columns": [{"title": t, "align": a} for t, a in columns], "rows": rows,
            "colspec": TexCode("".join(spec)), "ncols": len(columns)}


def row(cells: list[dict[str, Any]], cls: str = "") -> dict[str, Any]:
    """A table row: its cells, a CSS class, and LaTeX to set before it."""
    return {"cells": cells, "cls": cls, "tex_before": TexCode("")}
