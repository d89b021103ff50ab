"""The README's examples are real: its REPL session runs as a doctest, and every console
example whose output it shows prints exactly that output today."""

import doctest
import re
import shlex
from pathlib import Path

import pytest

from symbolic.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"
# commands whose output depends on torch measurements or writes files are checked elsewhere
SKIP = ("symbolic validate", "symbolic report", "python ", "make ")


def test_repl_sessions_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    text = "\n".join(block for block in blocks if ">>>" in block)
    test = doctest.DocTestParser().get_doctest(text, {}, "README.md", str(README), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 10
    assert result.failed == 0


def console_examples() -> list[tuple[str, str]]:
    """(command, expected output) for each `$ symbolic ...` line followed by output in a console block."""
    examples = []
    for block in re.findall(r"```console\n(.*?)```", README.read_text(encoding="utf-8"), re.S):
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
                examples.append((command, "\n".join(output)))
    return examples


def matches(shown: list[str], expected: list[str]) -> bool:
    """Line-by-line equality, where an expected line '...' stands for any number of lines."""
    if not expected:
        return not shown
    if expected[0].strip() == "...":
        return any(matches(shown[i:], expected[1:]) for i in range(len(shown) + 1))
    return bool(shown) and shown[0] == expected[0] and matches(shown[1:], expected[1:])


@pytest.mark.parametrize("command,expected", console_examples(), ids=lambda v: v if v.startswith("symbolic") else "")
def test_console_example_output_is_current(capsys, command, expected):
    command, _, pipe = command.partition(" | ")
    code = main(shlex.split(command)[1:])
    out, err = capsys.readouterr()
    shown = [ln.rstrip() for ln in (out + err).rstrip().splitlines()]
    if pipe:  # the README only pipes through head -N or tail -N
        tool, count = pipe.split()
        shown = shown[: int(count[1:])] if tool == "head" else shown[-int(count[1:]):]
    assert matches(shown, [ln.rstrip() for ln in expected.splitlines()]), (command, shown)
    assert code in (0, 2)
