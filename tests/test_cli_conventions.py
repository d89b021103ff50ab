"""The command line's conventions (issue 14), each as a user meets it: typos, ``report -``, sizes
without a unit, one message per bad value, GPU names, --quiet/--verbose, --check's exit code and
shell completion."""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run

from symbolic import catalogs, library
from symbolic.catalogs import gpus
from symbolic.cli import build_parser, common
from symbolic.cli.completion import SHELLS, commands, script
from symbolic.core.errors import UnknownNameError, UserError

ROOT = Path(__file__).resolve().parent.parent
MLP_SPEC = ROOT / "reports" / "article-a-mlp.toml"


def one_error(code: int, err: str) -> str:
    """The error line of a refused command (exit 2, one line, no traceback)."""
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


# --- 1. typos: "did you mean", and the help of the command they were given to -------------------
@pytest.mark.parametrize("argv,hint,helps", [
    (("memory", "llama-3-8b", "--btach", "8"), "did you mean '--batch'?", "see 'symbolic memory --help'"),
    (("memory", "llama-3-8b", "--btach=8"), "did you mean '--batch'?", "see 'symbolic memory --help'"),
    (("fit", "llama-3-8b", "--gpuu", "h100-80gb", "--for", "batch"), "did you mean '--gpu'?",
     "see 'symbolic fit --help'"),  # a required flag typo'd: "required: --gpu" names the typo too
    (("sweep", "mlp.total", "--grdi", "B=1..2"), "did you mean '--grid'?", "see 'symbolic sweep --help'"),
    (("list", "--jsn"), "did you mean '--json'?", "see 'symbolic list --help'"),
    (("memroy", "llama-3-8b"), "did you mean 'memory'?", "see 'symbolic --help'"),
    (("memory", "llama-3-8b", "--mode", "trian"), "did you mean 'train'?", "see 'symbolic memory --help'"),
])
def test_typos_suggest_the_closest_name_and_the_commands_help(capsys, argv, hint, helps):
    code, out, err = run(capsys, *argv)
    line = one_error(code, err)
    assert out == "" and hint in line and line.endswith(f"({helps})")


def test_a_word_close_to_nothing_gets_no_suggestion(capsys):
    code, _, err = run(capsys, "list", "--zzzzzz")
    line = one_error(code, err)
    assert "unrecognized argument '--zzzzzz'" in line and "did you mean" not in line


# --- 2. report -: the specification on standard input ---------------------------------------------
class _Stdin(io.TextIOWrapper):
    def isatty(self) -> bool:
        return False


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", _Stdin(io.BytesIO(data), encoding="utf-8"))


def test_report_reads_the_spec_from_stdin(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    _stdin(monkeypatch, MLP_SPEC.read_bytes())
    code, out, err = run(capsys, "report", "-", "--tex", "piped.tex", "-q")
    assert code == 0, err
    assert out.strip() == "piped.tex" and err == ""
    # the same document as from the file itself
    code, _, err = run(capsys, "report", str(MLP_SPEC), "--tex", "from-file.tex", "-q")
    assert code == 0, err
    piped, direct = (tmp_path / "piped.tex").read_text(), (tmp_path / "from-file.tex").read_text()
    assert "from standard input" in piped
    assert piped.replace("from standard input", f"from {MLP_SPEC.name}") == direct


def test_stdin_spec_resolves_relative_paths_against_the_current_folder(monkeypatch, tmp_path):
    from symbolic.cli.report import read_spec_stdin

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    _stdin(monkeypatch, b'title = "x"\nmodel = "sub/config.json"\n')
    spec = read_spec_stdin()
    assert spec.model.path == (tmp_path / "sub" / "config.json").resolve()  # type: ignore[attr-defined]


@pytest.mark.parametrize("data,fragment", [
    (b'title = "x"\nmodel = "missing/config.json"\n', "config file not found: missing/config.json"),
    (b'title = \n', "<stdin>:1:"),
    (b'title = "x"\nmodel = "llama-3-8b"\nbogus = 1\n', "<stdin>"),
    (b"\xff\xfe", "<stdin>:1: not UTF-8 text"),
])
def test_stdin_spec_errors_are_one_line(capsys, monkeypatch, tmp_path, data, fragment):
    monkeypatch.chdir(tmp_path)
    _stdin(monkeypatch, data)
    code, _, err = run(capsys, "report", "-", "--tex", "x.tex", "-q")
    assert fragment in one_error(code, err)
    assert not (tmp_path / "x.tex").exists()


def test_stdin_is_bounded_like_a_file(capsys, monkeypatch, tmp_path):
    from symbolic.report.spec import MAX_FILE

    monkeypatch.chdir(tmp_path)
    _stdin(monkeypatch, b"# " + b"x" * MAX_FILE + b"\n")
    code, _, err = run(capsys, "report", "-", "--tex", "x.tex")
    assert f"larger than {MAX_FILE:,} bytes" in one_error(code, err)


def test_stdin_from_a_pipe_in_a_subprocess(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "symbolic", "report", "-", "--tex", "-", "--quiet"], cwd=tmp_path,
                          input=MLP_SPEC.read_bytes(), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(b"\\documentclass") and proc.stderr == b""


def test_a_terminal_on_stdin_is_refused_not_waited_on(capsys, monkeypatch):
    class Tty(_Stdin):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Tty(io.BytesIO(b""), encoding="utf-8"))
    code, _, err = run(capsys, "report", "-")
    assert "standard input is a terminal" in one_error(code, err)


# --- 3. sizes without a unit ----------------------------------------------------------------------
def test_budget_without_a_unit_asks_whether_bytes_were_meant(capsys):
    code, out, err = run(capsys, "solve", "mlp.total", "--example", "--for", "B", "--budget", "80")
    assert one_error(code, err) == ("symbolic: error: --budget 80 has no unit: did you mean 80GiB or 80GB? "
                                    "(write 80B for bytes)")
    assert out == ""


def test_explicit_bytes_and_units_still_work_and_agree_with_python(capsys):
    f = library.get("mlp.total")
    values = f.restrict(f.example)
    values.pop("B")
    exact = f.solve("B", 600 * 2**20, values).value  # Python: an int is bytes, as the API always was
    assert f.solve("B", "600MiB", values).value == exact  # and size strings work as on the CLI
    for budget in ("600MiB", f"{600 * 2**20}B", "0.6144GB"):
        code, out, err = run(capsys, "solve", "mlp.total", "--example", "--for", "B", "--budget", budget, "--json")
        assert code == 0, err
        want = exact if budget != "0.6144GB" else f.solve("B", 614_400_000, values).value
        assert json.loads(out)["value"] == want


def test_count_formulas_still_take_a_plain_budget(capsys):
    code, out, err = run(capsys, "solve", "llm.params", "--set", "H=4096", "--set", "V=32000", "--set", "d_ff=11008",
                          "--for", "L", "--budget", "7e9", "--json")
    assert code == 0, err
    # llm.params = L·(4H² + 2H·d_ff + 5H + d_ff) + H·V: 131,072,000 + L·157,317,888 ≤ 7e9 up to L = 43
    assert json.loads(out)["value"] == (7 * 10**9 - 32000 * 4096) // (4 * 4096**2 + 2 * 4096 * 11008 + 5 * 4096
                                                                        + 11008) == 43


@pytest.mark.parametrize("argv", [
    ("memory", "llama-3-8b", "--gpu", "80"),
    ("fit", "llama-3-8b", "--gpu", "80", "--for", "batch"),
])
def test_gpu_capacity_without_a_unit_is_refused(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert "80 has no unit: did you mean 80GiB or 80GB? (write 80B for bytes)" in one_error(code, err)


# --- 4. one message for the same bad value, whatever the command --------------------------------
PLAN_COMMANDS = [
    ("memory", "llama-3-8b"),
    ("fit", "llama-3-8b", "--gpu", "h100-80gb", "--for", "seq"),
    ("time", "llama-3-8b", "--gpu", "h100-80gb", "--mfu", "0.4"),
    ("plan", "llama-3-8b", "--gpu", "h100-80gb", "--mfu", "0.4", "--gpus", "8", "--global-batch", "8"),
]


@pytest.mark.parametrize("flag,value,message", [
    ("--batch", "0", "expected a whole number ≥ 1, got '0'"),
    ("--batch", "1.5", "expected a whole number ≥ 1, got '1.5'"),
    ("--seq", "x", "expected a whole number ≥ 1, got 'x'"),
    ("--tp", str(2**40 + 1), f"expected a whole number ≤ {2**40:,}, got '{2**40 + 1}'"),
])
def test_same_bad_value_same_message_in_every_command(capsys, flag, value, message):
    lines = set()
    for argv in PLAN_COMMANDS:
        code, _, err = run(capsys, *argv, flag, value)
        line = one_error(code, err)
        lines.add(line.split(": error: ", 1)[1].rsplit(" (see", 1)[0])
    assert lines == {f"argument {flag}: {message}"}


def test_counts_and_lists_use_the_same_parser(capsys):
    code, _, err = run(capsys, "time", "llama-3-8b", "--gpu", "h100-80gb", "--mfu", "0.4", "--gpus", "0")
    assert "argument --gpus: expected a whole number ≥ 1, got '0'" in one_error(code, err)
    with pytest.raises(common.CliError, match=r"argument --batch: expected a whole number ≥ 1, got '0'"):
        common.whole_list("1,0", "--batch")  # validate --batch 1,0
    assert common.whole_list("1, 2,4", "--batch") == (1, 2, 4)


@pytest.mark.parametrize("text,value", [("8", 8), ("4096", 4096), ("3e11", 3 * 10**11), ("1.5e3", 1500),
                                        (" 16 ", 16)])
def test_whole_reads_digits_and_exact_scientific_notation(text, value):
    assert common.whole(text, high=10**30) == value


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "1e-3", "x", "", "0x10", "1_000", "8.0.0"])
def test_whole_refuses_what_is_not_a_whole_number_in_range(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected a whole number"):
        common.whole(text)


# --- 5. GPU names that do not silently pick a size, and a capacity as a GPU ------------------------
def test_h100_is_ambiguous_and_lists_both_sizes(capsys):
    code, _, err = run(capsys, "fit", "llama-3-8b", "--gpu", "h100", "--for", "batch")
    line = one_error(code, err)
    assert "GPU 'h100' is ambiguous" in line and "h100-80gb" in line and "h100-94gb" in line
    assert f"{gpus.GPUS['h100-80gb'].gib:.1f} GiB" in line and f"{gpus.GPUS['h100-94gb'].gib:.1f} GiB" in line


@pytest.mark.parametrize("name", ["a100", "v100", "rtx"])
def test_every_family_with_two_sizes_is_ambiguous(name):
    with pytest.raises(UnknownNameError, match="is ambiguous"):
        catalogs.get(name)


def test_unambiguous_aliases_still_resolve():
    assert catalogs.get("h100-sxm").name == "h100-80gb" and catalogs.get("H100-NVL").name == "h100-94gb"
    assert catalogs.get("h200").name == "h200-141gb" and catalogs.get("4090").name == "rtx-4090"
    for alias, target in gpus.ALIASES.items():  # no alias stands for a family of several sizes
        assert target in gpus.GPUS and len(gpus.family(alias)) <= 1 or gpus.family(alias) == [target]


def test_a_capacity_is_a_gpu_without_rates(capsys):
    gpu = catalogs.get("80GiB")
    assert gpu.bytes == 80 * 2**30 and gpu.basis == gpus.GIVEN and not gpu.flops
    assert catalogs.get("141 GB").bytes == 141 * 10**9
    code, out, err = run(capsys, "memory", "llama-3-8b", "--gpu", "80GiB", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["gpu"]["bytes"] == 80 * 2**30 and data["gpu"]["basis"] == "given"
    # the verdict is the capacity minus the same total: no catalogue entry involved
    assert data["headroom_bytes"] == 80 * 2**30 - data["total_bytes"] and data["fits"] is (data["headroom_bytes"] >= 0)


def test_fit_on_a_capacity_solves_against_those_bytes(capsys):
    code, out, err = run(capsys, "fit", "llama-3-8b", "--gpu", "200GiB", "--for", "batch", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["capacity_bytes"] == 200 * 2**30 and data["gpu"] == "200GiB"


@pytest.mark.parametrize("command", [
    ("time", "llama-3-8b", "--gpu", "80GiB", "--mfu", "0.4", "--gpus", "8"),
    ("plan", "llama-3-8b", "--gpu", "80GiB", "--mfu", "0.4", "--gpus", "8", "--seq", "2048", "--global-batch", "64"),
])
def test_commands_needing_rates_say_so_in_one_line(capsys, command):
    code, _, err = run(capsys, *command)
    assert "--gpu 80GiB gives a capacity only, with no FLOP rates" in one_error(code, err)


# --- 6. --quiet and --verbose, before or after the subcommand --------------------------------------
def test_quiet_and_verbose_are_global_and_exclusive(capsys):
    parser = build_parser()
    for argv in (["-q", "list"], ["list", "-q"], ["--quiet", "list"], ["list", "--quiet"]):
        assert common.verbosity(parser.parse_args(argv)) == -1
    for argv in (["-v", "list"], ["list", "--verbose"]):
        assert common.verbosity(parser.parse_args(argv)) == 1
    assert common.verbosity(parser.parse_args(["list"])) == 0
    code, _, err = run(capsys, "-q", "list", "-v")
    assert "--quiet and --verbose contradict" in one_error(code, err)


def test_memory_quiet_is_the_total_line_and_verbose_the_formulas(capsys):
    code, data, _ = run(capsys, "memory", "llama-3-8b", "--gpu", "h100-80gb", "--json")
    total = json.loads(data)["total_bytes"]
    code, quiet, _ = run(capsys, "memory", "llama-3-8b", "--gpu", "h100-80gb", "-q")
    assert code == 0 and len(quiet.splitlines()) == 1
    assert quiet.startswith(f"llama-3-8b: {total:,} bytes") and "on h100-80gb" in quiet
    _, normal, _ = run(capsys, "memory", "llama-3-8b")
    _, verbose, _ = run(capsys, "--verbose", "memory", "llama-3-8b")
    _, formula, _ = run(capsys, "memory", "llama-3-8b", "--formula")
    assert verbose == formula and len(verbose.splitlines()) > len(normal.splitlines())


def test_sweep_quiet_and_verbose(capsys):
    argv = ("sweep", "mlp.total", "--example", "--grid", "B=1..4")
    _, normal, _ = run(capsys, *argv)
    _, quiet, _ = run(capsys, *argv, "--quiet")
    _, verbose, _ = run(capsys, "-v", *argv)
    assert quiet.splitlines() == [line for line in normal.splitlines() if line.lstrip().startswith(("smallest",
                                                                                                 "largest"))]
    assert len(quiet.splitlines()) == 2
    extra = [line for line in verbose.splitlines() if line not in normal.splitlines()]
    assert extra == [f"  formula: {library.get('mlp.total')}"]


def test_plan_quiet_is_the_best_layout(capsys):
    argv = ("plan", "llama-3-8b", "--gpu", "h100-80gb", "--mfu", "0.4", "--gpus", "8", "--seq", "2048",
            "--global-batch", "64", "--top", "3")
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    best = json.loads(out)["layouts"][0]
    _, quiet, _ = run(capsys, *argv, "-q")
    assert len(quiet.splitlines()) == 1
    assert f"gpus {best['gpus']} (dp {best['dp']} × tp {best['tp']} × pp {best['pp']})" in quiet
    _, normal, _ = run(capsys, *argv)
    _, verbose, _ = run(capsys, *argv, "-v")
    assert verbose.startswith(normal) and "layouts in" in verbose[len(normal):]


def test_report_quiet_prints_only_the_paths_and_verbose_their_sizes(capsys, tmp_path):
    out_tex = tmp_path / "r.tex"
    code, out, err = run(capsys, "report", str(MLP_SPEC), "--tex", str(out_tex), "--quiet")
    assert code == 0 and out.strip() == str(out_tex) and err == ""
    code, out, err = run(capsys, "report", str(MLP_SPEC), "--tex", str(out_tex), "-v")
    assert code == 0 and out.strip() == f"{out_tex} ({out_tex.stat().st_size:,} bytes)"
    assert "symbolic report: " in err  # progress, as without -v


# --- 7. the exit code for "does not fit" ------------------------------------------------------------
def test_check_exit_codes():
    with_check, without = argparse.Namespace(check=True), argparse.Namespace(check=False)
    assert common.EXIT_DOES_NOT_FIT == 3
    assert common.check_exit(with_check, False) == 3 and common.check_exit(with_check, True) == 0
    assert common.check_exit(without, False) == 0 and common.check_exit(argparse.Namespace(), False) == 0
    parser = argparse.ArgumentParser()
    common.add_check(parser)
    assert parser.parse_args(["--check"]).check is True and parser.parse_args([]).check is False


# --- 8. shell completion ------------------------------------------------------------------------
def _names(parser: argparse.ArgumentParser) -> list[str]:
    return list(common.subcommands(parser))


def test_bash_completion_is_valid_and_names_every_subcommand(capsys, tmp_path):
    code, text, err = run(capsys, "completion", "bash")
    assert code == 0, err
    path = tmp_path / "symbolic.bash"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    names = _names(build_parser())
    assert "completion" in names and len(names) >= 19
    first = next(line for line in text.splitlines() if line.strip().startswith('"")'))
    for name in names:
        assert f" {name} " in first or f'"{name} ' in first, name
        assert f"        {name})" in text, name


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("words,expected", [
    (["symbolic", "mem"], {"memory"}),
    (["symbolic", "memory", "--bat"], {"--batch"}),
    (["symbolic", "-q", "memory", "--mode", ""], {"train", "infer"}),
    (["symbolic", "fit", "x", "--gpu", "h100"], {"h100-80gb", "h100-94gb", "h100-sxm", "h100-nvl"}),
    (["symbolic", "completion", ""], set(SHELLS)),
    (["symbolic", "report", "--ou"], {"--output"}),
])
def test_bash_completion_completes(tmp_path, words, expected):
    path = tmp_path / "symbolic.bash"
    path.write_text(script(build_parser(), "bash"))
    quoted = " ".join(f"'{w}'" for w in words)
    probe = (f"source {path}; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _symbolic; "
             'printf "%s\\n" "${COMPREPLY[@]}"')
    proc = subprocess.run(["bash", "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) == expected


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_name_every_subcommand_and_flag(capsys, shell):
    code, text, _ = run(capsys, "completion", shell)
    assert code == 0
    top, cmds = commands(build_parser())
    assert [c.name for c in cmds] == _names(build_parser())
    memory = next(c for c in cmds if c.name == "memory")
    for flag in memory.flags:
        for string in flag.strings:
            assert (string if shell == "zsh" else (f"-l {string[2:]}" if string.startswith("--")
                                                   else f"-s {string[1:]}")) in text
    for cmd in cmds:
        assert (f"'{cmd.name}:" if shell == "zsh" else f"-a {cmd.name}") in text
    if shutil.which(shell):
        assert subprocess.run([shell, "-n"], input=text, text=True, capture_output=True).returncode == 0
    assert text.count("'") % 2 == 0  # help texts carry no stray quote


def test_completion_words_are_safe_for_the_shell():
    _, cmds = commands(build_parser())
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:+-")
    for cmd in cmds:
        assert set(cmd.name) <= allowed and "'" not in cmd.help and "\\" not in cmd.help
        for flag in cmd.flags:
            for word in flag.strings + flag.choices:
                assert set(word) <= allowed, word
            assert "'" not in flag.help and "\\" not in flag.help and "$" not in flag.help


def test_bare_python_numbers_stay_bytes():
    assert isinstance(UserError("x"), ValueError)
    from symbolic import planning

    answer = planning.fit_batch("llama-3-8b", 200 * 2**30, seq=2048)  # an int is bytes in Python
    assert answer.gpu.bytes == 200 * 2**30
    assert planning.fit_batch("llama-3-8b", "200GiB", seq=2048).value == answer.value


@pytest.mark.torch
@pytest.mark.slow
def test_validate_quiet_is_the_verdict_and_verbose_adds_module_shares(capsys):
    argv = ("validate", "mlp", "--batch", "1", "--seq", "64", "--layers", "1", "--dtype", "fp32", "--attn", "eager",
            "--no-peak")
    code, quiet, err = run(capsys, *argv, "-q")
    assert code == 0, err
    _, normal, _ = run(capsys, *argv)
    assert quiet.splitlines() == [normal.splitlines()[-1]] and quiet.strip() in ("all within the targets",
                                                                                  "NOT within the targets")
    _, verbose, _ = run(capsys, *argv, "--verbose")
    _, terms, _ = run(capsys, *argv, "--terms")
    assert verbose == terms and "bytes saved per module type" in verbose and "bytes saved per" not in normal
