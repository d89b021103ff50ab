"""Shared test helpers (importable from the test modules: pytest puts tests/ on sys.path)."""

from symbolic.cli import main


def run(capsys, *argv):
    """Run the command line in-process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
