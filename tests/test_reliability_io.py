"""Reliability (issue 11): outputs that are not files, inputs that never end, bounded messages, signals,
and bugs told apart from bad input.

Devices and FIFOs are made by the tests in a temporary folder (``os.mknod``, ``os.mkfifo``),
never taken from ``/dev``. Character devices need CAP_MKNOD (root, as CI runs); without it those
tests are skipped.
"""

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import run

from symbolic.cli import main
from symbolic.core import atomic, userfiles
from symbolic.core.errors import InputFileError, OutputError, UserError

ROOT = Path(__file__).resolve().parent.parent
NULL, ZERO, FULL = (1, 3), (1, 5), (1, 7)  # Linux major/minor numbers of /dev/null, /dev/zero, /dev/full
# the smallest example report (its LaTeX is still far bigger than a pipe's buffer): the tests here are about
# where a document goes, and it builds in a fraction of the default report's time
MLP_SPEC = ROOT / "reports" / "article-a-mlp.toml"
FAST = 30  # seconds: anything that used to hang or fill memory must answer well within this


def chardev(folder: Path, name: str, numbers: tuple[int, int]) -> Path:
    """A character device node in ``folder`` (skips the test where mknod is not permitted)."""
    path = folder / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*numbers))
    except (PermissionError, AttributeError, OSError) as err:
        pytest.skip(f"cannot make a device node here: {err}")
    return path


def cli(*argv: str, timeout: float = FAST, **kwargs) -> subprocess.CompletedProcess:
    """``python -m symbolic ARGV`` in a subprocess (for signals, fds and things that could hang)."""
    return subprocess.run([sys.executable, "-m", "symbolic", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=kwargs.pop("cwd", ROOT), **kwargs)


# --- outputs that are not regular files -------------------------------------------------------------
def test_writing_to_a_null_device_keeps_the_device(tmp_path):
    null = chardev(tmp_path, "null", NULL)
    atomic.write_text(null, "report\n")
    with atomic.atomic_text_open(null) as handle:
        handle.write("rows\n")
    assert stat.S_ISCHR(os.stat(null).st_mode), "the device was replaced by a regular file"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_full_device_is_an_error_not_success(tmp_path):
    full = chardev(tmp_path, "full", FULL)
    with pytest.raises(OutputError, match="No space left on device"):
        atomic.write_bytes(full, b"x" * 100_000)
    with pytest.raises(OutputError, match="No space left on device"):
        with atomic.atomic_text_open(full) as handle:
            handle.write("a,b\n" * 50_000)
    assert stat.S_ISCHR(os.stat(full).st_mode)


def test_cli_output_to_devices_exit_codes(tmp_path, capsys):
    # in-process: the CSV goes to a path the user named, not to the process's own stdout
    null, full = chardev(tmp_path, "null", NULL), chardev(tmp_path, "full", FULL)
    sweep = ["sweep", "mlp.total", "--example", "--grid", "B=1..3"]
    code, _, err = run(capsys, *sweep, "--csv", str(null))
    assert code == 0 and stat.S_ISCHR(os.stat(null).st_mode), err
    code, _, err = run(capsys, *sweep, "--csv", str(full))
    assert code == 2 and "No space left on device" in err and err.count("\n") == 1, err
    assert stat.S_ISCHR(os.stat(full).st_mode)


def test_fifo_is_written_directly(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    atomic.write_text(fifo, "through the pipe\n")
    reader.join(FAST)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_socket_and_folder_targets_are_refused(tmp_path):
    sock_path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(sock_path))
        with pytest.raises(OutputError, match="it is a socket"):
            atomic.write_text(sock_path, "x")
    finally:
        server.close()
    with pytest.raises(OutputError, match="it is a folder"):
        atomic.write_text(tmp_path, "x")
    with pytest.raises(OutputError, match="does not exist"):
        atomic.write_text(tmp_path / "nowhere" / "out.csv", "x")


def test_symlink_to_a_regular_file_is_written_through(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    atomic.write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_descriptor_alias_shares_the_redirected_file(tmp_path):
    # /proc/self/fd/1 (like /dev/stdout) is the shell's "> out.txt": write through that descriptor,
    # neither renaming over the file nor truncating what the command prints after the rows
    out = tmp_path / "out.txt"
    with open(out, "wb") as stdout:
        proc = subprocess.run([sys.executable, "-m", "symbolic", "sweep", "mlp.total", "--example", "--grid", "B=1..3",
                               "--csv", "/proc/self/fd/1"], stdout=stdout, stderr=subprocess.PIPE, text=True,
                              timeout=FAST, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith("B,total\n1,537264168\n") and "wrote 3 rows to /proc/self/fd/1" in text
    assert atomic.descriptor_of("/dev/stdout") == 1 and atomic.descriptor_of("/dev/fd/7") == 7
    assert atomic.descriptor_of(tmp_path / "fd" / "1") is None


def test_dash_writes_documents_to_stdout(capsys):
    code, out, err = run(capsys, "report", str(MLP_SPEC), "--tex", "-", "-q")
    assert code == 0, err
    assert out.startswith("\\documentclass") and out.rstrip().endswith("\\end{document}")
    code, _, err = run(capsys, "report", "--tex", "-", "--html", "-")
    assert code == 2 and "both write to stdout" in err


@pytest.mark.parametrize("argv", [["list"], ["latex", "mlp.total"], ["report", str(MLP_SPEC), "--tex", "-", "-q"]])
def test_full_stdout_is_an_error(tmp_path, argv):
    full = chardev(tmp_path, "full", FULL)  # big outputs fail while printing, small ones at the final flush
    with open(full, "wb") as stdout:
        proc = subprocess.run([sys.executable, "-m", "symbolic", *argv], stdout=stdout, stderr=subprocess.PIPE,
                              text=True, timeout=FAST, cwd=ROOT)
    assert proc.returncode == 2 and "No space left on device" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


# --- inputs that never end -----------------------------------------------------------------------------
def test_fifo_as_config_or_spec_is_refused_at_once(tmp_path):
    fifo, gpu = tmp_path / "config.json", tmp_path / "gpu.toml"
    os.mkfifo(fifo)
    os.mkfifo(gpu)
    argvs = [["params", str(fifo)], ["report", str(fifo), "--tex", str(tmp_path / "r.tex")],
             ["fit", "gpt2", "--for", "batch", "--gpu", str(gpu)]]
    # one child runs the three commands (a read that blocks is then killed by the timeout, not hung on)
    child = ("import contextlib, io, json, sys, time\nfrom symbolic.cli import main\nfor argv in json.load(sys.stdin):\n"
             "    err, start = io.StringIO(), time.monotonic()\n"
             "    with contextlib.redirect_stderr(err):\n        code = main(argv)\n"
             "    print(json.dumps([code, err.getvalue(), time.monotonic() - start]), flush=True)\n")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", child], input=json.dumps(argvs), capture_output=True, text=True,
                          timeout=FAST * len(argvs), cwd=ROOT)
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 0 and len(answers) == len(argvs), proc.stderr
    for argv, (code, err, seconds) in zip(argvs, answers):
        assert code == 2 and "FIFO" in err, (argv, err)
        assert seconds < FAST
    assert time.monotonic() - start < FAST * len(argvs)


def test_endless_device_as_config_is_refused(tmp_path):
    zero = chardev(tmp_path, "zero.json", ZERO)
    proc = cli("params", str(zero))
    assert proc.returncode == 2 and "character device" in proc.stderr, proc.stderr


def test_reads_stop_at_the_limit_whatever_st_size_says(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 10_000)
    read = []
    real_read = os.read
    monkeypatch.setattr(userfiles.os, "read", lambda fd, n: read.append(real_read(fd, n)) or read[-1])
    monkeypatch.setattr(userfiles.os, "fstat", lambda fd: os.stat_result((stat.S_IFREG | 0o644,) + (0,) * 9))
    with pytest.raises(InputFileError, match="larger than 100 bytes"):
        userfiles.read_user_file(path, limit=100, what="a config.json")
    assert sum(map(len, read)) == 101


def test_template_that_is_a_fifo_is_refused(tmp_path):
    from symbolic.report import render

    os.mkfifo(tmp_path / "report.html.j2")
    env = render.html_environment(tmp_path)
    with pytest.raises(render.TemplateError, match="FIFO"):
        env.loader.get_source(env, "report.html.j2")
    assert env.loader.get_source(env, "report.css")[0]  # a file the folder lacks: the built-in one


# --- unbounded work -------------------------------------------------------------------------------------
def test_deep_nesting_and_huge_numbers_in_parsers_are_user_errors(tmp_path):
    with pytest.raises(InputFileError, match="nested too deeply"):
        userfiles.parse_json("[" * 100_000 + "]" * 100_000, "deep.json")
    with pytest.raises(InputFileError, match="nested too deeply"):
        userfiles.parse_toml("a = " + "[" * 100_000 + "]" * 100_000, "deep.toml")
    with pytest.raises(InputFileError, match="more than 4,300 digits") as caught:
        userfiles.parse_json('{"n": ' + "1" * 5000 + "}", "big.json")
    assert "set_int_max_str_digits" not in str(caught.value)
    with pytest.raises(InputFileError, match="more than 4,300 digits"):
        userfiles.parse_toml("n = " + "1" * 5000, "big.toml")


def test_cli_deep_json_config_is_bad_input(capsys, tmp_path):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = run(capsys, "params", str(tmp_path / "deep.json"))
    assert code == 2 and "nested too deeply" in err
    assert err.count("deep.json") == 1, err  # the file named once, not once per layer that saw the error


def test_cli_deep_toml_spec_is_bad_input(capsys, tmp_path):
    (tmp_path / "deep.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000)
    code, _, err = run(capsys, "report", str(tmp_path / "deep.toml"), "--tex", str(tmp_path / "r.tex"))
    assert code == 2 and "nested too deeply" in err


def test_cli_huge_integer_in_a_config_says_the_limit(capsys, tmp_path):
    (tmp_path / "big.json").write_text('{"model_type": "gpt2", "n_embd": ' + "1" * 5000 + "}")
    code, _, err = run(capsys, "params", str(tmp_path / "big.json"))
    assert code == 2 and "set_int_max_str_digits" not in err and "4,300 digits" in err
    assert err.count("big.json") == 1, err


@pytest.mark.parametrize("argv", [
    ["eval", "llm.params", "--set", "H=" + "1" * 5000],
    ["eval", "llm.params", "--set", "a" * 5000 + "=1"],
    ["show", "llm." + "x" * 5000],
    ["solve", "llm.peak", "--example", "--for", "B", "--budget", "1" * 5000 + "GiB"],
    ["eval", "llm.peak", "--example", "--term", "x" * 5000 + "=B"],
    ["nonsense" * 700],
])
def test_messages_quote_a_short_prefix(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and len(err) < 400 and err.count("\n") == 1, err[:500]
    assert "Exceeds the limit" not in err


def test_out_of_range_value_says_the_limit(tmp_path, capsys):
    from symbolic.core import values

    with pytest.raises(values.ValueProblem, match="largest value accepted is 1e30"):
        values.validate("B", 1e308)
    with pytest.raises(values.ValueProblem, match="at most 1e30"):
        values.validate("B", "1e308")
    with pytest.raises(values.ValueProblem, match="about 1e\\+5000") as caught:
        values.validate("B", 10**5000)
    assert len(str(caught.value)) < 120
    spec = tmp_path / "s.toml"
    spec.write_text('title = "t"\nmodel = "article-a"\n[values]\nB = 1e308\n')
    code, _, err = run(capsys, "report", str(spec), "--tex", str(tmp_path / "r.tex"))
    assert code == 2 and "1e30" in err and "is not a number" not in err, err


def test_control_characters_from_user_files_never_reach_the_terminal(tmp_path, capsys):
    folder = tmp_path / "\x1b[31mred\x07"
    folder.mkdir()
    config = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 100, "n_positions": 64}
    (folder / "config.json").write_text(json.dumps(config))
    code, out, err = run(capsys, "params", str(folder))
    assert code == 0, err
    assert "\\x1b[31mred\\x07" in out
    assert not any(ch in out + err for ch in "\x1b\x07")


def test_printable_stream_keeps_csv_line_ends_and_escapes_the_rest():
    from symbolic.cli import printable

    assert printable("a,b\r\nc\td\n") == "a,b\r\nc\td\n"
    assert printable("x\x1b[2Jy\rz\u202e\x00\x85") == "x\\x1b[2Jy\\rz\\u202e\\x00\\u0085"
    data = {"name": "\x1b[31m \x85 \u202e \u2028 \ud800"}
    assert json.loads(printable(json.dumps(data, ensure_ascii=False))) == data  # --json output stays valid JSON


def test_blank_lines_in_user_text_cannot_end_a_tex_paragraph(tmp_path):
    from symbolic.report import Outputs, build
    from symbolic.report.texescape import escape

    assert "\n" not in escape("H100\n\n\\par big\r\n\u2029x")
    spec = tmp_path / "s.toml"
    spec.write_text('title = "t"\nmodel = "article-a"\ngpus = [{ name = "GPU\\n\\nwith a gap", memory = "4GiB" }]\n')
    build(spec, Outputs(tex=tmp_path / "r.tex"))
    tex = (tmp_path / "r.tex").read_text()
    assert "GPU  with a gap" in tex and "GPU\n" not in tex


@pytest.mark.parametrize("argv", [
    ["eval", "llm.params", "--example", "--term", "total:params=H"],
    ["eval", "llm.params", "--example", "--term", "Total:params=H"],
    ["eval", "llm.peak", "--example", "--term", "x=total*B"],
])
def test_reserved_names_are_refused(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert code == 2 and "reserved" in err


# --- signals ---------------------------------------------------------------------------------------------
def test_ctrl_c_during_start_up_is_a_clean_exit(capsys, monkeypatch):
    import symbolic.cli as cli_module

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "build_parser", interrupted)
    try:
        code = main(["list"])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main()")
    assert code == 130
    assert capsys.readouterr().err == "symbolic: interrupted\n"
    probe = "import sys, symbolic.cli; print(sorted(m for m in ('sympy', 'numpy') if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert loaded.stdout.strip() == "[]", "the CLI entry imports heavy packages before it can handle Ctrl-C"


@pytest.mark.slow
def test_sigterm_during_sweep_csv_removes_the_temporary_file(tmp_path):
    out = tmp_path / "rows.csv"
    proc = subprocess.Popen([sys.executable, "-m", "symbolic", "sweep", "mlp.total", "--example",
                             "--grid", "B=1..20000000", "--csv", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + FAST
    while time.monotonic() < deadline and proc.poll() is None:
        if any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=FAST)
    assert proc.returncode == 143 and "terminated" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


# --- bugs are not bad input -----------------------------------------------------------------------------
def _failing(error: BaseException):
    def handler(args):
        raise error

    return handler


@pytest.mark.parametrize("error,code", [
    (KeyError("typo"), 1),
    (ValueError("a bare ValueError is a bug"), 1),
    (OSError(2, "No such file or directory", "/internal/asset.css"), 1),
    (OSError(2, "No such file or directory", "given.csv"), 2),
    (UserError("bad input"), 2),
    (RecursionError("deep"), 1),
])
def test_only_user_errors_and_named_paths_exit_2(capsys, monkeypatch, error, code):
    from symbolic.cli import formulas

    monkeypatch.setattr(formulas, "cmd_show", _failing(error))
    assert main(["show", "given.csv"]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("internal error" in err) == (code == 1), err


def test_debug_shows_the_traceback_of_a_bug(capsys, monkeypatch):
    from symbolic.cli import formulas

    monkeypatch.setattr(formulas, "cmd_list", _failing(KeyError("typo")))
    monkeypatch.setenv("SYMBOLIC_DEBUG", "1")
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'typo'" in err


def test_every_user_error_class_is_a_user_error_and_lookups_stay_key_errors():
    from symbolic.cli.common import CliError
    from symbolic.core import symbols, units, values
    from symbolic.library.registry import UnknownKeyError
    from symbolic.math import compiled, grid
    from symbolic.math import userterms as custom
    from symbolic.networks.transformer import configs
    from symbolic.networks.transformer import spec as arch_spec
    from symbolic.report import render
    from symbolic.report import spec as report_spec
    from symbolic.text import parsing

    classes = [compiled.CompileError, units.SizeError, symbols.UnknownSymbolError, UnknownKeyError,
               render.TemplateError, render.FetchRefused, report_spec.ReportSpecError, arch_spec.ModelSpecError,
               values.ValueProblem, grid.GridError, parsing.ParseError, configs.ConfigError, CliError,
               custom.CustomTermError]
    assert [c.__name__ for c in classes if not issubclass(c, UserError)] == []
    for lookup in (symbols.UnknownSymbolError, UnknownKeyError):
        assert issubclass(lookup, KeyError)
    with pytest.raises(KeyError):
        symbols.info("no-such-symbol")
    assert str(UnknownKeyError("x" * 5000)).count("x") < 100
