"""Print one of docs/notebook.ipynb's committed HTML tables as Markdown, for the front page.

Usage: ``python docs/notebook_table.py [CAPTION_PREFIX]`` (default: the table of ``f.evaluate(point)``,
whose caption starts with "llm.peak at"). ``tests/test_docs.py`` checks that README.md shows
exactly this table, so the front page cannot drift from what the notebook shows.
"""

from __future__ import annotations

import json
import sys
from html.parser import HTMLParser
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parent / "notebook.ipynb"
DEFAULT = "llm.peak at"


class _Table(HTMLParser):
    """The caption, header cells and body rows of the first <table>, with their alignment."""

    def __init__(self) -> None:
        super().__init__()
        self.caption = ""
        self.header: list[str] = []
        self.rows: list[list[str]] = []
        self.right: list[bool] = []
        self._where = ""
        self._cell: list[str] | None = None
        self._in_head = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "caption":
            self._where = "caption"
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr" and not self._in_head:
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
            if not self._in_head and len(self.rows) == 1:
                self.right.append("text-align:right" in (dict(attrs).get("style") or ""))
        elif tag == "small" and self._cell is not None:
            self._cell.append(" (")  # value<br><small>bytes</small>: value (bytes)

    def handle_endtag(self, tag: str) -> None:
        if tag == "caption":
            self._where = ""
        elif tag == "thead":
            self._in_head = False
        elif tag == "small" and self._cell is not None:
            self._cell.append(")")
        elif tag in ("td", "th") and self._cell is not None:
            text = " ".join("".join(self._cell).split()).replace("( ", "(").replace(" )", ")")
            (self.header if self._in_head else self.rows[-1]).append(text)
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._where == "caption":
            self.caption += data
        elif self._cell is not None:
            self._cell.append(data)


def html_tables(notebook: Path = NOTEBOOK) -> list[str]:
    """Every text/html output of the notebook, in cell order."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return ["".join(out["data"]["text/html"]) for cell in cells for out in cell.get("outputs", [])
            if "text/html" in out.get("data", {})]


def markdown(caption_prefix: str = DEFAULT, notebook: Path = NOTEBOOK) -> str:
    """The notebook's table whose caption starts with ``caption_prefix``, as a Markdown table with its caption."""
    for html in html_tables(notebook):
        table = _Table()
        table.feed(html)
        if table.caption.startswith(caption_prefix):
            break
    else:
        raise SystemExit(f"no table in {notebook.name} has a caption starting {caption_prefix!r}")
    rule = ["---:" if right else "---" for right in table.right]
    lines = [f"*{table.caption}*", "", "| " + " | ".join(table.header) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in table.rows]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(*sys.argv[1:2]))
