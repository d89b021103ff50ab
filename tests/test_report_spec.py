"""Report specifications: the examples load, bad input gives one line naming the file (and line)."""

import json
import shutil
from pathlib import Path

import pytest

from symbolic.report import spec
from symbolic.report.spec import ReportSpecError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "reports").glob("*.toml"))


def write(tmp_path: Path, text: str, name: str = "r.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error(path: Path) -> str:
    with pytest.raises(ReportSpecError) as info:
        spec.load(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_examples_exist_and_load():
    names = {p.stem for p in EXAMPLES}
    assert {"article-a-mlp", "gpt2-article-b", "llama-3-8b-h100", "llama-2-70b-zero3",
            "mixtral-serving-long-context"} <= names
    for path in EXAMPLES:
        loaded = spec.load(path)
        assert loaded.title and loaded.path == path


def test_fields(tmp_path):
    path = write(tmp_path, '''
title = "T"
author = "A"
model = "llama-3-8b"
mode = "infer"
gpus = ["h100-80gb", { name = "card", memory = "24GiB" }]
[regime]
batch = 4
seq = 8192
kv_dtype = "fp8"
flash = false
[sweep]
batch = [1, 2, 4]
seq = { from = 1000, to = 9000 }
''')
    s = spec.load(path)
    assert (s.model.name, s.formulas, s.mode) == ("llama-3-8b", "library", "infer")
    assert s.regime.batch == 4 and s.regime.kv_dtype == "fp8" and s.regime.flash is False and s.regime.zero is None
    assert s.gpus[0].name == "h100-80gb" and s.gpus[0].memory is None
    assert s.gpus[1].memory == 24 * 2**30
    assert s.sweep.batch == (1, 2, 4)
    assert s.sweep.seq == (1000, 2000, 4000, 8000, 9000)


def test_model_path_is_relative_to_the_spec(tmp_path):
    folder = tmp_path / "configs" / "my-model"
    folder.mkdir(parents=True)
    config = json.loads((ROOT / "symbolic" / "presets" / "gpt2.json").read_text())
    (folder / "config.json").write_text(json.dumps(config))
    s = spec.load(write(tmp_path, 'title = "T"\nmodel = "configs/my-model/config.json"\n'))
    assert s.model.path == (folder / "config.json").resolve() and s.model.name == "my-model"
    message = error(write(tmp_path, 'title = "T"\nmodel = "configs/missing/config.json"\n', "m.toml"))
    assert "config file not found" in message and "m.toml:2" in message


def test_unknown_keys_suggest_and_name_the_line(tmp_path):
    message = error(write(tmp_path, 'title = "T"\nmodel = "gpt2"\n\n[regime]\nbatch = 2\nprecison = "bf16"\n'))
    assert "r.toml:6" in message and "regime.precison" in message and "did you mean 'precision'" in message
    message = error(write(tmp_path, 'title = "T"\nmodel = "gpt2"\nregim = 1\n'))
    assert "r.toml:3" in message and "did you mean 'regime'" in message


def test_malformed_toml_names_file_and_line(tmp_path):
    message = error(write(tmp_path, 'title = "T"\nmodel = "gpt2"\n[regime]\nbatch = = 3\n'))
    assert message.startswith(str(tmp_path / "r.toml") + ":4:") and "malformed TOML" in message


@pytest.mark.parametrize("body, expected", [
    ('model = "gpt2"\n', "missing the required key 'title'"),
    ('title = "T"\n', "missing the required key 'model'"),
    ('title = "T"\nmodel = "gpt2"\n[regime]\nprecision = "bf17-mixed"\n', "did you mean 'bf16-mixed'"),
    ('title = "T"\nmodel = "gpt2"\n[regime]\nbatch = 0\n', "out of range"),
    ('title = "T"\nmodel = "gpt2"\n[regime]\nbatch = "8"\n', "expected a whole number"),
    ('title = "T"\nmodel = "gpt2"\n[regime]\nflash = 1\n', "expected true or false"),
    ('title = "T"\nmodel = "gpt2"\n[regime]\nzero = 4\n', "out of range"),
    ('title = "T"\nmodel = "gpt2"\ngpus = [{ name = "x" }]\n', "needs both name and memory"),
    ('title = "T"\nmodel = "gpt2"\ngpus = [{ name = "x", memory = "12 GiBs" }]\n', "unknown unit"),
    ('title = "T"\nmodel = "gpt2"\n[sweep]\nbatch = [4]\n', "at least two points"),
    ('title = "T"\nmodel = "gpt2"\n[sweep]\nseq = { from = 9, to = 3 }\n', "smaller than from"),
    ('title = "T"\nmodel = "article-a"\n[values]\nd_hh = 3\n', "did you mean 'd_h'"),
    ('title = "T"\nmodel = "article-a"\n[values]\nd_h = 0.5\n', "whole number"),
    ('title = "T"\nmodel = "gpt2"\nformulas = "article-a"\n', "use model = 'article-a'"),
    ('title = "T"\nmodel = "../x;rm -rf"\n', "config file not found"),
    ('title = "T"\nmodel = "a b"\n', "not a model name"),
    ('title = ""\nmodel = "gpt2"\n', "must not be empty"),
])
def test_bad_values(tmp_path, body, expected):
    message = error(write(tmp_path, body))
    assert expected in message, message
    assert str(tmp_path / "r.toml") in message


def test_missing_and_binary_files(tmp_path):
    assert "not found" in error(tmp_path / "nope.toml")
    bad = tmp_path / "bin.toml"
    bad.write_bytes(b'title = "\xff"\n')
    assert "not UTF-8" in error(bad)


def test_examples_folder_ships_the_specs():
    packaged = ROOT / "symbolic" / "examples"
    assert sorted(p.name for p in packaged.glob("*.toml")) == [p.name for p in EXAMPLES]
    assert (ROOT / "templates" / "report.html.j2").read_bytes() == \
        (ROOT / "symbolic" / "templates" / "report.html.j2").read_bytes()


def test_copy_of_example_builds_a_spec_elsewhere(tmp_path):
    target = tmp_path / "copy.toml"
    shutil.copy(ROOT / "reports" / "gpt2-article-b.toml", target)
    assert spec.load(target).model.name == "article-b"


def test_loader_never_tracebacks_on_generated_input(tmp_path):
    """Any TOML-shaped data gives a spec or a one-line ReportSpecError, never another exception."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    scalars = st.one_of(st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True), st.text(max_size=30),
                        st.sampled_from(["gpt2", "article-a", "article-b", "h100-80gb", "bf16", "24GiB", "x.json"]))
    values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                          max_leaves=12)
    keys = st.one_of(st.sampled_from(spec.TOP_KEYS + spec.REGIME_KEYS + ("name", "memory", "from", "to", "expr")),
                     st.text(max_size=10))
    documents = st.dictionaries(keys, values, max_size=8)

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(documents)
    def check(data):
        try:
            spec.parse(data, origin=tmp_path / "fuzz.toml")
        except ReportSpecError as err:
            assert "\n" not in str(err)

    check()


@pytest.mark.parametrize(("table", "line"), [
    ("[regime]\nseq = 1000000000", "regime.seq"),
    ("[sweep]\nseq = { from = 512, to = 1000000000 }", "sweep.seq.to"),
    ('[plan]\ngpu = "h100-80gb"\ngpus = 8\nseq = 1000000000\nglobal_batch = 8\ntokens = 1000000\nmfu = 0.4',
     "plan.seq"),
])
def test_a_sequence_past_the_planners_bound_is_refused(tmp_path, table, line):
    from symbolic.options.table import MAX_SEQ

    path = write(tmp_path, f'title = "t"\nmodel = "llama-3-8b"\n{table}\n')
    message = error(path)
    assert line in message and f"{MAX_SEQ:,}" in message and "Llama 4 Scout" in message
    ok = write(tmp_path, f'title = "t"\nmodel = "llama-3-8b"\n{table.replace("1000000000", str(MAX_SEQ))}\n', "ok.toml")
    assert spec.load(ok).title == "t"  # the bound itself is a sequence length a report may ask for


def test_generation_decoding_keys(tmp_path):
    """issue 29: an encoder-decoder's --beams and --sample are report keys too (beams a size, sample a flag)."""
    head = 'title = "T"\nauthor = "A"\nmodel = "llama-3-8b"\nmode = "infer"\n[regime]\n'
    s = spec.load(write(tmp_path, head + "beams = 4\nsample = false\n"))
    assert s.regime.beams == 4 and s.regime.sample is False
    with pytest.raises(ReportSpecError, match="beams"):
        spec.load(write(tmp_path, head + "beams = 0\n"))
