"""The documentation's examples are real: on every page (README.md and docs/*.md) the REPL session
runs as a doctest, and every console example whose output the page shows prints exactly that
output today."""

import doctest
import re
import shlex
from pathlib import Path

import pytest

from symbolic.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
# commands whose output depends on torch measurements or writes files are checked elsewhere
SKIP = ("symbolic validate", "symbolic report", "python ", "make ")


def page_id(page: Path) -> str:
    """README.md or docs/NAME.md, for test ids and messages."""
    return page.relative_to(ROOT).as_posix()


def repl_session(page: Path) -> str:
    """The page's ```python blocks that hold a REPL session, joined: one doctest per page."""
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    return "\n".join(block for block in blocks if ">>>" in block)


REPL_PAGES = [page for page in PAGES if repl_session(page)]


def test_the_pages_have_examples():
    """The front page, the user guide and the performance page keep their sessions (the finder can fail)."""
    assert {"README.md", "docs/user-guide.md", "docs/performance.md"} <= {page_id(p) for p in REPL_PAGES}
    assert {"README.md", "docs/user-guide.md", "docs/performance.md"} <= {page for page, _, _ in console_examples()}


@pytest.mark.parametrize("page", REPL_PAGES, ids=page_id)
def test_repl_sessions_run(page):
    text = repl_session(page)
    test = doctest.DocTestParser().get_doctest(text, {}, page_id(page), str(page), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.attempted >= text.count(">>> ")
    assert result.failed == 0, page_id(page)


def console_examples() -> list[tuple[str, str, str]]:
    """(page, command, expected output) for each `$ symbolic ...` line followed by output in a console block."""
    examples = []
    for page in PAGES:
        for block in re.findall(r"```console\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            lines = block.splitlines()
            for i, line in enumerate(lines):
                if not line.startswith("$ "):
                    continue
                command = line[2:].split("  #")[0].strip()
                output = []
                for following in lines[i + 1:]:
                    if following.startswith("$ "):
                        break
                    output.append(following)
                if output and command.startswith("symbolic") and not command.startswith(SKIP):
                    examples.append((page_id(page), command, "\n".join(output)))
    return examples


def matches(shown: list[str], expected: list[str]) -> bool:
    """Line-by-line equality, where an expected line '...' stands for any number of lines."""
    if not expected:
        return not shown
    if expected[0].strip() == "...":
        return any(matches(shown[i:], expected[1:]) for i in range(len(shown) + 1))
    return bool(shown) and shown[0] == expected[0] and matches(shown[1:], expected[1:])


def test_matches_honours_ellipsis_and_order():
    assert matches(["a", "b", "c"], ["a", "...", "c"]) and matches(["a"], ["a", "..."])
    assert not matches(["a", "b"], ["b", "a"]) and not matches(["a", "b"], ["a"])


@pytest.mark.parametrize("page,command,expected", console_examples(),
                         ids=lambda v: v if v.startswith(("symbolic", "README", "docs/")) else "")
def test_console_example_output_is_current(capsys, page, command, expected):
    command, _, pipe = command.partition(" | ")
    code = main(shlex.split(command)[1:])
    out, err = capsys.readouterr()
    shown = [ln.rstrip() for ln in (out + err).rstrip().splitlines()]
    if pipe:  # the pages only pipe through head -N or tail -N
        tool, count = pipe.split()
        shown = shown[: int(count[1:])] if tool == "head" else shown[-int(count[1:]):]
    assert matches(shown, [ln.rstrip() for ln in expected.splitlines()]), (page, command, shown)
    assert code in (0, 2)
