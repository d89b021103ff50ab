"""Which configs are planned as a task's torch module (issue 29): read from transformers' source, nothing built."""

from __future__ import annotations

import pytest

from symbolic.networks.generic import probes
from symbolic.networks.module import configs
from symbolic.networks.module.source import BATCH, Input, ModuleError, ModuleSource

needs_transformers = pytest.mark.skipif(not probes.torch_available(), reason="transformers' source is read")


@needs_transformers
@pytest.mark.parametrize(("config", "task", "planned"), [
    ({"model_type": "t5"}, None, True),  # encoder-decoder: no causal-LM class
    ({"model_type": "vit"}, None, True),  # vision
    ({"model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"]}, None, True),
    ({"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"]}, None, True),
    ({"model_type": "xlstm"}, None, False),  # a causal LM without a table: the generic path, as before
    ({"model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"]}, None, False),  # VLM not built
    ({"model_type": "vision-encoder-decoder"}, None, True),  # pixels in, decoder tokens out: generation
    ({"model_type": "llama"}, None, False),  # a table family
    ({"model_type": "bert", "architectures": ["BertForSequenceClassification"]}, None, False),  # a table family
    ({"model_type": "bert"}, "sequence-classification", True),  # --task: always its module
    ({"model_type": "no_such_type"}, None, False),  # the generic path's own one-line error
])
def test_which_configs_are_planned_as_a_task(config: dict, task: str | None, planned: bool) -> None:
    assert configs.wants_task(config, task) is planned


def _source(*inputs: Input, extra: tuple[str, ...] = ()) -> ModuleSource:
    return ModuleSource("m", "test", dict, {}, inputs, extra_sizes=extra)


def test_images_and_image_size_set_the_source_sizes() -> None:
    vlm = _source(extra=("S", "n_img", "H_img", "W_img"))
    assert configs.image_sizes(vlm, 3, configs.image_size("448,336")) == {"n_img": 3, "H_img": 448, "W_img": 336}
    image = _source(Input("pixel_values", (BATCH, 3, "H", "W")))
    assert configs.image_sizes(image, None, (64, 48)) == {"H": 64, "W": 48}
    with pytest.raises(ModuleError, match="takes no images"):
        configs.image_sizes(image, 2, None)
    with pytest.raises(ModuleError, match="takes no image"):
        configs.image_sizes(_source(Input("input_ids", (BATCH, "S"), "int64")), None, (8, 8))
    for bad in ("448", "0,4", "a,b", "1,2,3"):
        with pytest.raises(ModuleError, match="two positive integers"):
            configs.image_size(bad)


def test_report_of_a_python_file_needs_trust_code(tmp_path, capsys) -> None:
    """Refused in one line before anything runs: the file would be imported (and torch with it)."""
    from symbolic.cli import main

    marker = tmp_path / "ran"
    (tmp_path / "net.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    spec = tmp_path / "r.toml"
    spec.write_text('title = "t"\nmodel = "net.py:Net"\n\n[module]\ninputs = ["x=B,4"]\nloss = "mean"\n')
    code = main(["report", str(spec), "--html", str(tmp_path / "r.html"), "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "--trust-code" in err and err.count("\n") == 1
    assert not marker.exists() and not (tmp_path / "r.html").exists()


def test_module_table_needs_a_module_model(tmp_path, capsys) -> None:
    from symbolic.cli import main

    spec = tmp_path / "r.toml"
    spec.write_text('title = "t"\nmodel = "gpt2"\n\n[module]\nloss = "mean"\n')
    code = main(["report", str(spec), "--html", str(tmp_path / "r.html"), "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "applies to a torch module model" in err and err.count("\n") == 1


def test_module_table_names_the_blocks_to_checkpoint(tmp_path) -> None:
    """checkpoint_modules: --checkpoint-modules in a specification (names kept as text, matched when planned)."""
    from symbolic.report import spec

    path = tmp_path / "r.toml"
    path.write_text('title = "t"\nmodel = "net.py:Net"\n\n[module]\ncheckpoint_modules = ["blocks.1", "Block"]\n\n'
                    '[regime]\nrecompute = "full"\n')
    assert spec.load(path).model.checkpoint == ("blocks.1", "Block")


@pytest.mark.parametrize(("table", "regime", "needle"), [
    ('checkpoint_modules = ["blocks.1"]', "", "alone it changes nothing"),
    ('checkpoint_modules = "blocks.1"', 'recompute = "full"', "expected a list of qualified names"),
])
def test_checkpoint_modules_that_change_nothing_are_one_line(tmp_path, capsys, table: str, regime: str,
                                                             needle: str) -> None:
    from symbolic.cli import main

    spec = tmp_path / "r.toml"
    spec.write_text(f'title = "t"\nmodel = "net.py:Net"\n\n[module]\n{table}\n\n[regime]\n{regime}\n')
    code = main(["report", str(spec), "--html", str(tmp_path / "r.html"), "-q", "--trust-code"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1
