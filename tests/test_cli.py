"""The command line as a user runs it: outputs, JSON, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest
from helpers import run

from symbolic.cli import main


def test_list_contains_required_keys(capsys):
    code, out, _ = run(capsys, "list", "--json")
    keys = {row["key"] for row in json.loads(out)}
    assert code == 0
    assert {"mlp.total", "llm.params", "llm.steady", "llm.activations", "llm.peak"} <= keys


def test_show_plain_expanded_latex(capsys):
    code, out, _ = run(capsys, "show", "llm.peak")
    assert code == 0 and "M_peak = 4·N + 8·N + 4·N + 8·B·D + L·(4·B·S^2 + 14·E)" in out and "where N = llm.params" in out
    code, out, _ = run(capsys, "show", "llm.steady", "--form", "expanded")
    assert "16·N" in out
    code, out, _ = run(capsys, "show", "llm.params.ffn", "--latex")
    assert out.strip() == r"N_{\mathrm{ffn}} = 2 H d_{\mathrm{ff}} + H + d_{\mathrm{ff}}"


def test_eval_json_exact(capsys):
    code, out, _ = run(capsys, "eval", "llm.params", "--set", "H=768", "--set", "L=12", "--set", "V=50000",
                       "--set", "d_ff=3072", "--json")
    data = json.loads(out)
    assert code == 0 and data["total"] == 123_417_600 and data["terms"]["embedding"] == 38_400_000


def test_eval_example_with_override(capsys):
    code, out, _ = run(capsys, "eval", "mlp.total", "--example", "--set", "b=2", "--json")
    data = json.loads(out)
    assert data["total"] == (4 * 2 * 33_574_912) + 2 * 2_098_432
    assert data["values"]["b"] == 2


def test_sensitivity_json(capsys):
    code, out, _ = run(capsys, "sensitivity", "llm.params", "--example", "--json")
    data = {r["symbol"]: r for r in json.loads(out)["sensitivities"]}
    assert code == 0
    assert data["L"]["derivative"] == 7_084_800
    assert data["L"]["elasticity"] == pytest.approx(85_017_600 / 123_417_600)


def test_solve_json(capsys):
    code, out, _ = run(capsys, "solve", "mlp.total", "--example", "--for", "B", "--budget", "600MiB", "--json")
    data = json.loads(out)
    assert code == 0 and data["status"] == "ok" and data["value"] == 1402
    code, out, _ = run(capsys, "solve", "mlp.total", "--example", "--for", "B", "--budget", "500MiB", "--json")
    assert json.loads(out)["status"] == "none" and json.loads(out)["value"] is None


def test_seeds_json(capsys):
    code, out, _ = run(capsys, "seeds", "--json")
    data = json.loads(out)
    assert code == 0 and len(data["checks"]) >= 25 and len(data["errata"]) == 10


@pytest.mark.parametrize("argv,fragment", [
    (["show", "llm.pek"], "did you mean 'llm.peak'"),
    (["eval", "llm.params", "--set", "Q=1"], "unknown symbol 'Q'"),
    (["eval", "llm.params", "--set", "H=abc"], "H: 'abc' is not a number"),
    (["eval", "llm.params", "--set", "H=-5"], "H must be positive"),
    (["eval", "llm.params", "--set", "H"], "expected NAME=VALUE"),
    (["eval", "llm.params", "--set", "L=1.5", "--example"], "whole number"),
    (["solve", "llm.peak", "--for", "B", "--budget", "16 XB"], "unknown unit"),
    (["solve", "llm.peak", "--for", "B", "--budget", "lots"], "malformed size"),
    (["solve", "llm.peak", "--for", "Z", "--budget", "16GiB"], "unknown symbol 'Z'"),
    (["eval", "llm.params"], "values missing for H"),
    (["nonsense"], "invalid choice"),
])
def test_bad_input_one_line_exit_2(capsys, argv, fragment):
    assert main(argv) == 2  # argparse's own errors ("nonsense") too: main returns, it does not raise SystemExit
    out, err = capsys.readouterr()
    assert fragment in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_console_script_never_tracebacks():
    proc = subprocess.run([sys.executable, "-m", "symbolic", "eval", "llm.peak", "--set", "B=x"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["--version"], 0), (["params", "--help"], 0),
                                        (["params", "gpt2", "--bogus"], 2), ([], 2)])
def test_main_returns_argparse_exits_as_codes(capsys, argv, code):
    """``main`` returns what the console script exits with, argparse's own exits included (a caller in a REPL,
    notebook or test gets a code, not a SystemExit)."""
    assert main(argv) == code
    out, err = capsys.readouterr()
    assert (out if code == 0 else err).strip()


def test_a_text_exit_while_parsing_is_its_message_and_status_1(capsys, monkeypatch):
    """As the interpreter shows ``SystemExit("text")``: the text on stderr, exit status 1 (argparse itself exits
    with numbers only, but ``main`` keeps the interpreter's rule for any exit raised while parsing)."""
    import symbolic.cli as cli

    class Parser:
        def parse_args(self, words):
            raise SystemExit("stopped: a message")

    monkeypatch.setattr(cli, "_parser", lambda: Parser())
    assert main(["list"]) == 1
    assert capsys.readouterr().err.strip() == "stopped: a message"
