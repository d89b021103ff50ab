"""symbolic.formats (issue 26, item 2): one table of number formats, read by every caller, no other dtype table."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest
import sympy
from helpers import run

from symbolic import catalogs, formats
from symbolic.core.errors import UnknownNameError
from symbolic.core.symbols import N
from symbolic.formats import Format
from symbolic.library import activations_pytorch as act
from symbolic.library import inference as infer
from symbolic.library import lora
from symbolic.library import precision as prec
from symbolic.planning import time as ptime

PACKAGE = Path(__file__).resolve().parent.parent / "symbolic"
NAMES = set(formats.FORMATS)


# --- the table is consistent ---------------------------------------------------------------------
def test_every_format_computes_in_a_format_at_a_gpu_rate() -> None:
    for f in formats.FORMATS.values():
        assert f.compute in formats.FORMATS and f.rate in formats.RATE_KEYS, f.name
        assert f.rate in f.runs_at and set(f.runs_at) <= set(formats.RATE_KEYS), f.name
        assert set(f.roles) <= set(formats.ROLES) and f.source and f.where, f.name
        assert isinstance(f.element_bytes, sympy.Rational) and f.element_bytes > 0, f.name
        if f.quantised:
            assert f.kept_in in formats.FORMATS and f.kept and f.scale_bytes > 0, f.name


def test_the_rate_keys_are_the_compute_formats_and_the_catalogues_columns() -> None:
    assert set(formats.names("compute")) == set(formats.RATE_KEYS)
    assert all(formats.get(k).rate == k for k in formats.RATE_KEYS)
    for name, gpu in catalogs.GPUS.items():
        assert set(gpu.flops) <= set(formats.RATE_KEYS), name


def test_float_bytes_are_torch_element_sizes() -> None:
    torch = pytest.importorskip("torch")
    for f in formats.FORMATS.values():
        if f.torch:
            assert torch.empty(0, dtype=formats.torch_dtype(torch, f.name)).element_size() == f.element_bytes, f.name


def test_group_wise_formats_cost_what_gptq_stores() -> None:
    # inference.py's docstring (GPTQ/AWQ: group 128, fp16 scales, int4 zero points):
    # int8 costs 1 + 2/128 bytes per parameter, int4 1/2 + (2 + 1/2)/128
    half = sympy.Rational(1, 2)
    for name, per_param in (("int8", 1 + sympy.Rational(2, 128)), ("int4", half + (2 + half) / 128)):
        total = sympy.Add(*(t.expr for t in infer.weight_terms(name, N)))
        assert sympy.simplify(total / N - per_param) == 0, name
        assert formats.get(name).tensor_bytes(sympy.Integer(128)) == 128 * per_param


def test_unknown_names_are_one_line_errors() -> None:
    with pytest.raises(UnknownNameError, match=r"^unknown weight dtype 'nf5'; choose from fp32, fp16, bf16, fp8, int8, "
                                               r"int4, nf4, nf4-dq, .*, awq-int4, gguf:<FILETYPE> \(llama.cpp's file "
                                               r"types: gguf:Q4_K_M, \.\.\.\)$"):
        infer.weight_dtype("nf5")
    with pytest.raises(UnknownNameError, match="unknown adapter dtype 'fp16'"):
        lora.adapters("llama", "llama", 8, dtype="fp16")


# --- every caller reads it -----------------------------------------------------------------------
def _replace(monkeypatch: pytest.MonkeyPatch, name: str, **changes: object) -> Format:
    new = dataclasses.replace(formats.get(name), **changes)
    monkeypatch.setitem(formats.FORMATS, name, new)
    return new


def test_callers_take_their_bytes_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Change bf16's bytes in the table and every dtype -> bytes lookup follows (none keeps its own copy)."""
    _replace(monkeypatch, "bf16", element_bytes=sympy.Integer(3))
    assert infer.kv_bytes("bf16") == 3
    assert infer.weight_terms("bf16", N)[0].expr == 3 * N
    assert act.Setup(precision="bf16").b == 3 and act.element_bytes("bf16-mixed") == 3
    assert lora.adapters("llama", "llama", 8, dtype="bf16").element_bytes == 3
    assert prec.get("bf16").weight_bytes == 3 and prec.get("bf16-mixed").activation_bytes == 3
    assert prec.get("bf16-mixed").grad_bytes("16bit") == 3
    kept = sympy.Symbol("K")
    assert infer.weight_terms("int4", N, kept)[-1].expr == formats.get("fp16").element_bytes * kept  # fp16 kept
    _replace(monkeypatch, lora.QLORA_FORMAT, kept_in="bf16")
    assert lora.qlora_base_bytes("llama", N).coeff(N) == 3  # the rest of a QLoRA base, in bf16


def test_a_new_format_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new weight format (say OCP MX-FP4: 4-bit codes, one 8-bit E8M0 scale per 32) is one table entry."""
    mxfp4 = Format("mxfp4", "OCP microscaling FP4", sympy.Rational(1, 2), "bf16", "bf16", ("weights", "kv"),
                   "ocp-mx", "OCP Microscaling Formats v1.0, MXFP4: block 32, E8M0 scale", runs_at=("bf16",),
                   group=32, scale_bytes=sympy.Integer(1), scale_name="e8m0", kept="embeddings and LM head",
                   kept_in="bf16")
    monkeypatch.setitem(formats.FORMATS, "mxfp4", mxfp4)
    kept = sympy.Symbol("K")
    terms = {t.key: t.expr for t in infer.weight_terms("mxfp4", N, kept)}
    assert terms == {"weights": N / 2, "weight_scales": N / 32, "embeddings": 2 * kept}
    assert infer.kv_bytes("mxfp4") == sympy.Rational(1, 2)
    assert ptime.weights_rate("mxfp4", None) == "bf16"


# --- time reads the weights' rate ----------------------------------------------------------------
def test_time_runs_quantised_weights_at_their_formats_rate(capsys) -> None:
    gpu = catalogs.get("h100-80gb")
    for weights in ("fp32", "bf16", "int4"):
        code, out, err = run(capsys, "time", "llama-3-8b", "--gpu", "h100-80gb", "--mfu", "0.5", "--mode", "infer",
                             "--weights", weights, "--json")
        assert code == 0, err
        data = json.loads(out)
        assert data["values"]["F_peak"] == gpu.flops[formats.get(weights).rate], weights
        said = any(n.startswith(f"{weights} weights are dequantised to") for n in data["notes"])
        assert said == formats.get(weights).quantised, weights


def test_time_refuses_a_compute_dtype_the_weights_cannot_run_at(capsys) -> None:
    code, _, err = run(capsys, "time", "llama-3-8b", "--gpu", "h100-80gb", "--mfu", "0.5", "--mode", "infer",
                       "--weights", "int4", "--compute-dtype", "fp8")
    assert code == 2 and err.count("\n") == 1 and "does not apply to int4 weights" in err, err
    assert ptime.weights_rate("int4", "fp16") == "fp16" and ptime.weights_rate("bf16", "fp8") == "fp8"


# --- no other table ------------------------------------------------------------------------------
def _number(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    return isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("Integer", "Rational") \
        and all(_number(a) for a in node.args)


def _format_name(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value in NAMES


def dtype_tables(root: Path) -> list[str]:
    """Dict literals mapping a format name to a number, and ``4 if x == "fp32" else 2`` choices, outside formats/."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "formats":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            pairs = zip(node.keys, node.values) if isinstance(node, ast.Dict) else ()
            if any(_format_name(k) and _number(v) for k, v in pairs):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
            if isinstance(node, ast.IfExp) and isinstance(node.test, ast.Compare) and _number(node.body) \
                    and _number(node.orelse) and any(_format_name(c) for c in node.test.comparators):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_dtype_table_outside_formats() -> None:
    assert dtype_tables(PACKAGE) == []


def test_the_table_finder_finds_a_table(tmp_path: Path) -> None:
    (tmp_path / "lib.py").write_text('SIZES = {"bf16": 2, "x": 1}\nact = 4 if w == "fp32" else 2\n'
                                     'RATES = {"bf16": 2 * T}\n')
    assert dtype_tables(tmp_path) == ["lib.py:1", "lib.py:2"]
