"""Property-based fuzzing of the command line: any arguments give output or a one-line error.

Generated argument lists mix real commands, keys, flags and symbol names with hostile text;
whatever comes in, ``main`` returns 0 or 2 (argparse's own errors exit with 2) and never
raises or prints a traceback. Exit code 1 is an internal error (a bug), so it fails the test; so
do raw control characters in the output and error lines that echo huge input in full.
"""

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symbolic.cli import main

COMMANDS = ["eval", "sensitivity", "solve", "show", "params", "memory", "fit", "sweep", "list", "symbols", "latex",
            "gpus", "models"]
KEYS = ["llm.peak", "llm.params", "mlp.total", "llm.activations", "gpt2", "opt-125m", "nope", "", "llm",
        "optimizer.adafactor", "states.bf16.adafactor", "zero.stage3", "infer.kv_cache", "act.korthikanti.tp"]
FLAGS = ["--set", "--term", "--budget", "--for", "--example", "--json", "--grid", "--batch", "--seq", "--gpu",
         "--mode", "--zero", "--tp", "--dp", "--precision", "--optimizer", "--implicit", "--formula", "--weights"]
NAMES = ["B", "S", "H", "L", "V", "d_ff", "D", "b", "N", "r", "x", "__class__", "B=", "=1", "Q"]
HOSTILE = ["__import__('os').system('touch /tmp/pwned')", "1e999", "-1", "0", "nan", "inf", "9**9**9", "{{7*7}}",
           "'; rm -rf /", "\x00", "ＢＳ", "lambda: 0", "a" * 300, "2**64", "1/0", "1..", "1..3:0", "16GiB", "80GB",
           "h100-80gb", "train", "infer", "batch", "seq", "gpus", "bf16-mixed", "adamw", "1", "8", "0.5",
           "x=ceil(B/3)*1e9", "x=floor(S/7)", "x=log2(B)*1e6", "x=B^1.5", "x=B**(1/2)", "x=sqrt(H)", "x=max(B, 4)",
           "x:params=H", "x:GiB=1.5", "x=-B", "x=B-S", "x=1/B", "14E + 4BSS", "optimizer.adafactor",
           "states.bf16.adafactor", "zero.stage3", "infer.kv_cache", "--activations", "pytorch", "korthikanti",
           "1" * 5000, "b" * 5000, "1e308", "1e-308", "\x1b[31m", "\u202e", "a\n\nb", "total:params=H", "x=total",
           "Total=1", "99999999999999999999999999999999999999", "1/" + "9" * 50, "0x10", "1_000"]

RAW_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x1b]")

token = st.one_of(
    st.sampled_from(COMMANDS + KEYS + FLAGS + HOSTILE),
    st.builds(lambda n, v: f"{n}={v}", st.sampled_from(NAMES), st.sampled_from(HOSTILE + ["2", "1..4", "1,2"])),
    st.text(max_size=12),
)
argv = st.tuples(st.sampled_from(COMMANDS), st.sampled_from(KEYS), st.lists(token, max_size=8)).map(
    lambda t: [t[0], t[1], *t[2]])


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(argv)
def test_cli_never_raises(capsys, args):
    code = main(args)  # argparse's usage errors, --help and --version too: an exit code, never SystemExit
    out, err = capsys.readouterr()
    assert code in (0, 2), (args, err)
    assert "Traceback" not in err and "internal error" not in err, (args, err)
    assert not RAW_CONTROL.search(out + err), (args, out, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and len(err) <= 1100, (args, err)


def test_every_library_formula_evaluates_its_example_or_names_what_is_missing(capsys):
    import symbolic

    for key in symbolic.keys():
        for command in (["eval", key, "--example"], ["sensitivity", key, "--example"], ["show", key]):
            code = main(command)
            _, err = capsys.readouterr()
            assert code in (0, 2), (command, err)
            if code == 2:
                assert "values missing" in err, (command, err)


CONFIG_KEYS = ["model_type", "n_embd", "n_layer", "n_head", "vocab_size", "n_positions", "hidden_size",
               "num_hidden_layers", "num_attention_heads", "intermediate_size", "num_key_value_heads", "architectures",
               "tie_word_embeddings", "num_local_experts", "num_experts_per_tok", "head_dim", "sliding_window",
               "layer_types", "torch_dtype"]
config_value = st.one_of(st.integers(-5, 10**6), st.integers(), st.floats(allow_nan=False), st.text(max_size=8),
                         st.booleans(), st.none(), st.lists(st.integers(0, 5), max_size=3),
                         st.sampled_from(["gpt2", "llama", "mistral", "mixtral", "qwen2", "bert", "falcon", "gemma"]))


@pytest.mark.slow
@pytest.mark.imports_torch  # a type without a family table goes the generic torch path where torch is installed
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(CONFIG_KEYS), config_value, max_size=10),
       st.sampled_from([["params"], ["memory"], ["memory", "--mode", "infer"]]))
def test_any_config_file_gives_output_or_a_one_line_error(capsys, tmp_path, config, command):
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code = main([command[0], str(path), *command[1:]])
    _, err = capsys.readouterr()
    assert code in (0, 2), (config, command, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, (config, err)
