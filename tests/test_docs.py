"""The documentation pages hold together: every relative link and anchor resolves, every page links
back to the front page and the index, the CLI reference is what the parser gives, the front page's
notebook table is the notebook's, and the LaTeX picture's script runs where pdflatex exists."""

import importlib.util
import re
import shutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def script(name: str) -> ModuleType:
    """A script of docs/ imported as a module (they are not part of the package)."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a Markdown page (duplicates get -1, -2 as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6} (.+)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(page: Path) -> list[str]:
    """The relative link targets of a page, outside code blocks."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    targets = [a or b for a, b in LINK.findall(text)]
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


def test_slug_follows_github():
    assert slug("16, 18 or 20 bytes per parameter: which copies are counted") == \
        "16-18-or-20-bytes-per-parameter-which-copies-are-counted"
    assert slug("Any transformers model (torch)") == "any-transformers-model-torch"
    assert slug("Time, throughput and cost") == "time-throughput-and-cost"


def test_the_link_finder_finds_links():
    found = links(ROOT / "README.md")
    assert "docs/report-page-1.png" in found and "docs/user-guide.md#reports" in found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    assert not broken, broken


@pytest.mark.parametrize("page", [p for p in PAGES if p.parent == DOCS], ids=lambda p: p.name)
def test_every_page_links_to_the_front_page_and_the_index(page):
    targets = {t.partition("#")[0] for t in links(page)}
    assert "../README.md" in targets
    assert page.name == "README.md" or "README.md" in targets


def test_the_index_lists_every_page():
    targets = {t.partition("#")[0] for t in links(DOCS / "README.md")}
    assert {p.name for p in DOCS.glob("*.md") if p.name != "README.md"} <= targets
    front = {t.partition("#")[0] for t in links(ROOT / "README.md")}
    assert {f"docs/{p.name}" for p in DOCS.glob("*.md")} <= front


def test_cli_reference_is_generated_from_the_parser():
    reference = script("make_cli_reference")
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == reference.reference(), \
        "docs/cli.md is stale: run .venv/bin/python docs/make_cli_reference.py"


def test_cli_reference_covers_every_command_and_flag():
    from symbolic.cli import build_parser

    reference = script("make_cli_reference")
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    for name, _, sub in reference._subcommands(build_parser()):
        section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for action in sub._actions:
            for option in [o for o in action.option_strings if o not in ("-h", "--help")]:
                assert option in section, (name, option)
    assert "| `--budget BUDGET` |" in text.split("\n## solve\n", 1)[1].split("\n## ", 1)[0]


def test_front_page_shows_the_notebook_table():
    table = script("notebook_table").markdown()
    assert table.count("\n| ") >= 8 and "7,530,364,928" in table  # the README's worked example, llm.peak
    assert table in (ROOT / "README.md").read_text(encoding="utf-8"), \
        "README.md's notebook table differs: paste the output of .venv/bin/python docs/notebook_table.py"


def points_column(text: str, heading: str) -> list[int]:
    """The points column of the table under one ### heading of docs/accuracy.md."""
    section = text.split(f"\n### {heading}\n", 1)[1].split("\n### ", 1)[0]
    return [int(n) for n in re.findall(r"^\| [^|]+ \| (\d+) \| ", section, re.M)]


def test_front_page_accuracy_headline_counts_the_table():
    """The headline's numbers of points are the sums of the accuracy tables' points columns."""
    text = (DOCS / "accuracy.md").read_text(encoding="utf-8")
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    grid = points_column(text, "Results (CPU)")
    phases = points_column(text, "Peak by phase: more precisions, optimizers and the KV cache")
    assert len(grid) == 6 and f"{sum(grid)} points" in front
    assert len(phases) == 11 and f"{sum(phases)} more points" in front


@pytest.mark.skipif(shutil.which("pdflatex") is None or shutil.which("pdftoppm") is None,
                    reason="pdflatex or pdftoppm is not installed (scripts/system-deps.sh installs them)")
def test_latex_excerpt_script_builds_the_picture(tmp_path, capsys):
    from PIL import Image

    excerpt = script("make_latex_excerpt")
    out = tmp_path / "excerpt.png"
    assert excerpt.main(["--output", str(out), "--keep", str(tmp_path / "work")]) == 0
    tex = (tmp_path / "work" / "excerpt.tex").read_text(encoding="utf-8")
    assert tex.startswith("\\documentclass[twocolumn]{article}") and "\\begin{multline}" in tex
    with Image.open(out) as made, Image.open(DOCS / "latex-two-column.png") as committed:
        assert made.width > made.height > 100
        assert abs(made.width - committed.width) <= 0.1 * committed.width  # the committed picture is this one


def test_excerpt_script_reports_a_missing_tool(monkeypatch, tmp_path):
    excerpt = script("make_latex_excerpt")
    monkeypatch.setattr(excerpt.shutil, "which", lambda tool: None)
    with pytest.raises(SystemExit, match="pdflatex is not installed"):
        excerpt.render("\\documentclass{article}", tmp_path, tmp_path / "x.png")

