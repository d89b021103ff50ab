"""Shared test helpers (importable from the test modules: pytest puts tests/ on sys.path)."""

from symbolic.cli import main


def run(capsys, *argv):
    """Run the command line in-process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def torch_child(script, request=None, timeout=900):
    """Run ``tests/<script>`` (with ``request`` as JSON on stdin, if given); its JSON answer.

    A child exits with 77 when torch or transformers cannot be imported: the test is skipped.
    """
    import json
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    here = Path(__file__).parent
    proc = subprocess.run([sys.executable, str(here / script)], capture_output=True, text=True, timeout=timeout,
                          cwd=here.parent, input=None if request is None else json.dumps(request))
    if proc.returncode == 77:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def cli_json(argv):
    """Run the command line in-process with ``--json`` among ``argv``: its parsed output (a child script's planner)."""
    import contextlib
    import io
    import json

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    if code != 0:
        raise RuntimeError(f"symbolic {' '.join(argv)} exited {code}")
    return json.loads(out.getvalue())


def layout_flags(lay, seq):
    """A searched layout (``plan --json``'s row) as ``planning.plan`` keywords at ``seq``: to plan it again."""
    out = {"batch": lay["micro_batch"], "seq": seq, "dp": lay["dp"], "tp": lay["tp"], "pp": lay["pp"],
           "zero": lay["zero"], "recompute": lay["recompute"], "microbatches": lay["grad_accum"]}
    if lay["sequence_parallel"]:
        out["sequence_parallel"] = True
    if lay.get("fsdp"):
        out["fsdp"] = True
    if lay.get("cp", 1) != 1:
        out["cp"] = lay["cp"]
    return out
