"""Any nn.Module as a Network (issue 29): a user's PATH.py:NAME probed on the meta device.

Every expected number comes from torch on the CPU in the test (``measure.step_peak``,
``measure.saved_tensors``, ``sum(p.numel())``) or from article A's own formulas.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from symbolic import planning  # noqa: E402
from symbolic.library import peak_pytorch as pypeak  # noqa: E402
from symbolic.measured import measure  # noqa: E402
from symbolic.networks.module import cache, files, network, resolve  # noqa: E402
from symbolic.networks.module.source import loss_of, make_inputs  # noqa: E402
from symbolic.networks.shape import article_a_shape  # noqa: E402

DATA = Path(__file__).parent / "data" / "modules"


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    mp = pytest.MonkeyPatch()
    mp.setenv("SYMBOLIC_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


def _net(spec: str, args: dict, inputs: list[str], loss: str | None, sizes: dict | None = None):
    source = files.file_source(str(DATA / spec), args, files.parse_inputs(inputs), loss, sizes)
    return source, resolve.module_network(source)


def _measured(source, batch: int, optimizer=None):
    """A real step on the CPU: (saved bytes, step peak, parameter count)."""
    torch.manual_seed(0)
    module = source.build(source.arguments).train()
    x = make_inputs(source, batch, device="cpu")
    loss = lambda out: loss_of(out, source.loss)  # noqa: E731
    saved = measure.saved_tensors(module, x, loss).total_bytes
    peak = measure.step_peak(module, x, loss, optimizer=optimizer).peak_bytes
    return saved, peak, sum(p.numel() for p in module.parameters())


WIDTHS = {"d_in": 512, "d_h": 256, "n_out": 10}


@pytest.fixture(scope="module")
def mlp():
    return _net("mlp.py:MLP", WIDTHS, ["x=B,512"], "cross-entropy")


def test_article_a_at_other_widths_equals_its_formulas(mlp) -> None:
    _, net = mlp
    shape = article_a_shape("mlp", WIDTHS)
    assert net.params.expr == shape.params.expr  # the probed formula is article A's, symbol for symbol
    for batch in (5, 17):
        mine = planning.plan(net, "train", batch=batch, precision="fp32", device="cpu")
        article = planning.plan(shape, "train", batch=batch, precision="fp32", device="cpu")
        assert mine.activation_bytes == article.activation_bytes
        # article A's step has its int64 targets held by the caller (8·B); a module's loss makes its own in the step
        assert abs(mine.total - article.total) <= 8 * batch


def test_mlp_arg_changes_article_a_widths() -> None:
    wide = planning.plan(article_a_shape("mlp", {"d_in": 512}), "train", batch=4, precision="fp32")
    plain = planning.plan("mlp", "train", batch=4, precision="fp32")
    assert wide.model.total < plain.model.total
    assert wide.model.numbers["d_in"] == 512


@pytest.fixture(scope="module")
def cnn():
    return _net("cnn.py:CNN", {"channels": 8}, ["x=B,3,H,W"], "cross-entropy", {"H": 16, "W": 16})


def test_cnn_with_batch_norm_against_a_cpu_step(cnn) -> None:
    source, net = cnn
    asked = files.file_source(source.label and str(DATA / "cnn.py:CNN"), {"channels": 8}, source.inputs,
                              "cross-entropy", {"H": 40, "W": 24})  # a shape the fit did not use
    net = resolve.module_network(asked)
    saved, peak, count = _measured(asked, 7)
    plan = planning.plan(net, "train", batch=7, precision="fp32", device="cpu")
    assert net.total == count
    assert abs(plan.activation_bytes - saved) <= 0.01 * saved
    assert abs(plan.total - peak) <= 0.02 * peak
    assert "buffers" in plan.terms()  # batch norm's running statistics


def test_cnn_saved_is_b_h_w(cnn) -> None:
    _, net = cnn
    expr = net.saved_formula()
    names = {s.name for s in expr.free_symbols}
    assert names == {"B", "H", "W"}


def test_dropout_mlp_keeps_masks_and_matches_the_cpu() -> None:
    source, net = _net("nets.py:make_mlp", {"width": 24}, ["x=B,24"], "mean")
    saved, peak, count = _measured(source, 9)
    plan = planning.plan(net, "train", batch=9, precision="fp32", device="cpu")
    assert net.total == count
    assert abs(plan.activation_bytes - saved) <= 0.01 * saved
    assert abs(plan.total - peak) <= 0.02 * peak
    sgd = planning.plan(net, "train", batch=9, precision="fp32", device="cpu", optimizer="sgd")
    _, sgd_peak, _ = _measured(source, 9, optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1))
    assert abs(sgd.total - sgd_peak) <= 0.02 * sgd_peak


def test_attention_scores_are_b_s_squared() -> None:
    source, net = _net("nets.py:Attention", {"dim": 32}, ["ids=B,S:int64"], "cross-entropy", {"S": 8})
    expr = net.saved_formula()
    assert any(term.as_powers_dict().get(next(s for s in expr.free_symbols if s.name == "S"), 0) == 2
               for term in expr.expand().as_ordered_terms())
    asked = files.file_source(str(DATA / "nets.py:Attention"), {"dim": 32}, source.inputs, "cross-entropy", {"S": 21})
    saved, peak, _ = _measured(asked, 3)
    plan = planning.plan(resolve.module_network(asked), "train", batch=3, precision="fp32", device="cpu")
    assert abs(plan.activation_bytes - saved) <= 0.01 * saved
    assert abs(plan.total - peak) <= 0.02 * peak


def test_second_ask_reads_the_cache(mlp) -> None:
    source, _ = mlp
    again = resolve.module_network(source)
    assert again.from_cache
    fit_first = again.step_fit("float32")
    assert network.ModuleNetwork.step_fit(resolve.module_network(source), "float32")[2]  # the step's fit too
    assert fit_first[0].saved == resolve.module_network(source).step_fit("float32")[0].saved


def test_cache_is_plain_data_and_bounded(mlp, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in cache.folder().glob("*.json"):
        assert path.read_text().lstrip().startswith("{")
    monkeypatch.setattr(cache, "LIMIT", 1)
    cache.write("extra", {"x": 1})
    assert len(list(cache.folder().glob("*.json"))) == 1


def test_cache_coefficients_are_never_evaluated() -> None:
    with pytest.raises(ValueError):
        cache.fraction("__import__('os')")


def test_values_are_never_evaluated() -> None:
    assert files.parse_value("2+2") == "2+2"
    assert files.parse_value("7") == 7 and files.parse_value("true") is True and files.parse_value("0.5") == 0.5


def test_tensor_parallelism_and_lora_are_refused(mlp) -> None:
    _, net = mlp
    with pytest.raises(ValueError, match="tensor parallelism"):
        planning.plan(net, "train", batch=2, tp=2)
    with pytest.raises(ValueError, match="LoRA"):
        planning.plan(net, "train", batch=2, precision="fp32", lora_rank=8)
    with pytest.raises(ValueError, match="bf16-mixed"):
        planning.plan(net, "train", batch=2, precision="bf16-mixed")


def _cli(*argv: str, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """The command run in this process (its cache the module's temporary folder)."""
    from symbolic.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


BAD = [
    (("params", "nope.py:X", "--input", "x=B,4"), "no such file"),
    (("params", f"{DATA}/nets.py:Missing", "--input", "x=B,4"), "does not define"),
    (("params", f"{DATA}/nets.py:NOT_A_MODULE", "--input", "x=B,4"), "not a torch.nn.Module"),
    (("params", f"{DATA}/nets.py:Raises", "--input", "x=B,4"), "ValueError: no such layer"),
    (("memory", f"{DATA}/nets.py:make_mlp", "--input", "x=B,7", "--loss", "mean", "--precision", "fp32"), "raised"),
    (("memory", f"{DATA}/nets.py:DataDependent", "--input", "x=B,4", "--loss", "mean", "--precision", "fp32"),
     "meta device"),
    (("memory", f"{DATA}/nets.py:make_mlp", "--input", "x=B,16", "--precision", "fp32"), "scalar loss"),
    (("params", f"{DATA}/nets.py:make_mlp", "--input", "x=B,Q!"), "dimension"),
    (("memory", "gpt2", "--arg", "d=1"), "--arg applies"),
]


@pytest.mark.parametrize(("argv", "needle"), BAD)
def test_bad_input_is_one_line_exit_2(argv: tuple[str, ...], needle: str, capsys: pytest.CaptureFixture) -> None:
    code, _, err = _cli(*argv, capsys=capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err


def test_cli_params_and_memory(capsys: pytest.CaptureFixture) -> None:
    spec = f"{DATA}/cnn.py:CNN"
    code, out, err = _cli("params", spec, "--arg", "channels=4", "--input", "x=B,3,8,8", "--loss", "mean", capsys=capsys)
    assert code == 0, err
    count = sum(p.numel() for p in files.file_source(spec, {"channels": 4}, files.parse_inputs(["x=B,3,8,8"]),
                                                     "mean").build({"channels": 4}).parameters())
    assert f"{count:,} parameters" in out
    code, out, _ = _cli("memory", "mlp", "--arg", "d_in=512", "--precision", "fp32", "-q", capsys=capsys)
    plan = planning.plan(article_a_shape("mlp", {"d_in": 512}), "train", precision="fp32")
    assert code == 0 and f"{plan.total:,} bytes" in out
    assert pypeak.OPTIMIZERS  # the step models every optimizer the planner offers
