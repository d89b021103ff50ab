"""A fork server for the torch child scripts (``helpers.torch_child``): torch imported once per worker, not per child.

Every child script starts by importing torch, transformers and the package (2–4 s of CPU each, more on a loaded
machine). This server, started once by each test worker, imports them once and then runs each child script in a
process forked from itself: the child starts with those modules loaded and nothing else of any earlier child (each
fork is a copy of the server as it was after its imports, never of a child), with its own stdin, stdout, stderr,
working folder and ``sys.argv``, and exits as the script would (``SystemExit``'s code, 1 on an exception). The
server itself never runs a tensor operation, so the forked children start with no thread pool to inherit.

Protocol: one JSON request a line on stdin (``script``, ``cwd``, ``stdin``, ``stdout``, ``stderr``: file paths,
``stdin`` may be null; ``env``: the worker's environment at the time), and per request two JSON lines on stdout:
``{"pid": ...}`` once forked, then ``{"rc": ...}`` when the child has exited. Without torch the server still
serves: each child then reports its own ``SKIP``.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import traceback

# the modules the children share (child_main.run, generic_child.main, the tiny Llama and GPT-2 most of them build),
# imported here once, after torch_env.ready() as child_main does
WARM = ("transformers", "symbolic.cli", "symbolic.planning", "symbolic.measured.measure",
        "symbolic.networks.module.resolve", "transformers.models.llama.modeling_llama",
        "transformers.models.gpt2.modeling_gpt2")


def warm() -> None:
    """Import what the children share; a missing one is left for the child to report."""
    import importlib

    try:
        import torch  # noqa: F401
    except ImportError:
        return
    from symbolic.networks import torch_env

    torch_env.ready()
    for name in WARM:
        try:
            importlib.import_module(name)
        except ImportError:
            return


def child(request: dict) -> int:
    """In the forked process: the script run as ``python <script>`` would run it; its exit code."""
    stdin = request["stdin"] or os.devnull
    for fd, path, mode in ((0, stdin, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                           (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, mode, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    script = request["script"]
    os.environ.clear()  # the environment the worker has now, as a fresh subprocess would inherit it
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = [script]
    sys.path[0] = os.path.dirname(script)
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - reported as the interpreter would, exit 1
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # noqa: SLF001 - as the interpreter does at exit; then leave without the server's state
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def serve() -> None:
    """Answer requests until stdin closes."""
    warm()
    reply = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        reply.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = child(request)
            finally:
                os._exit(code)
        reply.write(json.dumps({"pid": pid}) + "\n")
        reply.flush()
        _, status = os.waitpid(pid, 0)
        reply.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
        reply.flush()


if __name__ == "__main__":
    serve()
