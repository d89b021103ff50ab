"""Shared test helpers (importable from the test modules: pytest puts tests/ on sys.path)."""

from symbolic.cli import main


def run(capsys, *argv):
    """Run the command line in-process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def torch_child(script, request=None, timeout=900):
    """Run ``tests/<script>`` (with ``request`` as JSON on stdin, if given); its JSON answer.

    A child exits with 77 when torch or transformers cannot be imported: the test is skipped. The script runs
    in a process forked from this worker's child server (``child_server.py``: torch imported once per worker);
    with ``SYMBOLIC_TEST_FRESH_CHILD=1`` set, or without ``os.fork``, in a fresh interpreter as before.
    """
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    here = Path(__file__).parent
    if os.environ.get("SYMBOLIC_TEST_FRESH_CHILD") or not hasattr(os, "fork"):
        proc = subprocess.run([sys.executable, str(here / script)], capture_output=True, text=True, timeout=timeout,
                              cwd=here.parent, input=None if request is None else json.dumps(request))
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        code, out, err = _CHILDREN.run(here / script, request, timeout)
    if code == 77:
        pytest.skip(err.strip())
    assert code == 0, err[-2000:]
    return json.loads(out)


class _ChildServer:
    """This worker's ``child_server.py``, started on the first child and stopped at exit (restarted if it died)."""

    def __init__(self):
        self._proc = None

    def _server(self):
        import atexit
        import subprocess
        import sys
        from pathlib import Path

        if self._proc is None or self._proc.poll() is not None:
            here = Path(__file__).parent
            self._proc = subprocess.Popen([sys.executable, str(here / "child_server.py")], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, cwd=here.parent, bufsize=0)
            atexit.register(self._stop, self._proc)
        return self._proc

    @staticmethod
    def _stop(proc):
        proc.stdin.close()
        proc.wait(timeout=60)

    def run(self, script, request, timeout):
        """(exit code, stdout, stderr) of ``script`` run in a forked child, killed after ``timeout`` seconds."""
        import json
        import os
        import signal
        import subprocess
        import tempfile
        import time
        from pathlib import Path

        proc = self._server()
        with tempfile.TemporaryDirectory(prefix="child-") as tmp:
            folder = Path(tmp)
            stdin = None
            if request is not None:
                stdin = folder / "stdin.json"
                stdin.write_text(json.dumps(request), encoding="utf-8")
            ask = {"script": str(script), "cwd": str(Path(script).parent.parent), "stdin": stdin and str(stdin),
                   "stdout": str(folder / "stdout"), "stderr": str(folder / "stderr"), "env": dict(os.environ)}
            proc.stdin.write((json.dumps(ask) + "\n").encode())
            deadline = time.monotonic() + timeout
            pid = json.loads(self._line(proc, deadline))["pid"]
            try:
                code = json.loads(self._line(proc, deadline))["rc"]
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)
                self._line(proc, time.monotonic() + 60)
                raise subprocess.TimeoutExpired([str(script)], timeout) from None
            return (code, (folder / "stdout").read_text(encoding="utf-8"),
                    (folder / "stderr").read_text(encoding="utf-8", errors="replace"))

    @staticmethod
    def _line(proc, deadline):
        """One reply line of the server, waiting until ``deadline`` (``time.monotonic``)."""
        import os
        import select
        import subprocess
        import time

        got = b""
        while not got.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                raise subprocess.TimeoutExpired(["child_server.py"], left)
            chunk = os.read(proc.stdout.fileno(), 1)
            if not chunk:
                raise RuntimeError(f"the child server exited ({proc.wait()})")
            got += chunk
        return got.decode()


_CHILDREN = _ChildServer()


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
