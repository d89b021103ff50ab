"""Shared test helpers (importable from the test modules: pytest puts tests/ on sys.path)."""

from symbolic.cli import main


def run(capsys, *argv):
    """Run the command line in-process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def torch_child(script, request):
    """Run ``tests/<script>`` with ``request`` as JSON on stdin; its JSON answer (skip when it exits 77: no torch)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    here = Path(__file__).parent
    proc = subprocess.run([sys.executable, str(here / script)], input=json.dumps(request), capture_output=True,
                          text=True, timeout=900, cwd=here.parent)
    if proc.returncode == 77:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)
