"""``symbolic sweep`` as a user runs it, and the start-up rule: light commands load no heavy package."""

import csv
import io
import json
import os
import subprocess
import sys
from fractions import Fraction

import pytest
from helpers import run

import symbolic
from symbolic.cli import main
from symbolic.cli import sweep as sweep_cli
from symbolic.core.errors import UserError

PEAK = ["sweep", "llm.peak", "--example", "--set", "D=1024"]
HEAVY = ("matplotlib", "weasyprint", "ziamath", "torch", "numpy")


def peak(**values):
    return int(symbolic.formula("llm.peak").evaluate(H=768, L=12, V=50000, d_ff=3072, D=1024, **values).total)


def test_text_table_for_a_small_grid(capsys):
    code, out, err = run(capsys, *PEAK, "--grid", "B=1..2", "--grid", "S=512,1024")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("llm.peak: ") and "at H=768, L=12, V=50000, d_ff=3072, D=1024" in lines[1]
    assert "2 B × 2 S = 4 configurations (int64)" in lines[2]
    assert f"{peak(B=2, S=512):,}" in out and "GiB" in out
    assert f"smallest: 2.15 GiB ({peak(B=1, S=512):,}) at B=1, S=512" in out
    assert f"largest: 3.13 GiB ({peak(B=2, S=1024):,}) at B=2, S=1024" in out


def test_large_grid_prints_a_summary_only(capsys):
    code, out, _ = run(capsys, *PEAK, "--grid", "B=1..64", "--grid", "S=512,1024,2048")
    assert code == 0 and "(192 rows: --csv FILE writes them all)" in out
    assert f"({peak(B=64, S=2048):,}) at B=64, S=2048" in out


def test_json_rows_are_exact(capsys):
    code, out, _ = run(capsys, *PEAK, "--grid", "B=1..3", "--grid", "S=1024", "--json")
    data = json.loads(out)
    assert code == 0 and data["count"] == 3 and data["mode"] == "int64"
    assert data["fixed"] == {"H": 768, "L": 12, "V": 50000, "d_ff": 3072, "D": 1024}
    assert data["rows"] == [{"B": b, "S": 1024, "total": peak(B=b, S=1024)} for b in (1, 2, 3)]
    assert data["min"] == {"total": peak(B=1, S=1024), "at": {"B": 1, "S": 1024}}
    assert data["max"]["at"] == {"B": 3, "S": 1024}


def test_csv_is_complete_and_written_atomically(capsys, tmp_path):
    out_file = tmp_path / "peak.csv"
    code, out, _ = run(capsys, *PEAK, "--grid", "B=1..4", "--grid", "S=512..2048:512", "--csv", str(out_file))
    assert code == 0 and f"wrote 16 rows to {out_file}" in out
    rows = list(csv.DictReader(out_file.open()))
    assert len(rows) == 16 and list(rows[0]) == ["B", "S", "total"]
    assert [(r["B"], r["S"]) for r in rows[:5]] == [("1", "512"), ("1", "1024"), ("1", "1536"), ("1", "2048"), ("2", "512")]
    assert all(int(r["total"]) == peak(B=int(r["B"]), S=int(r["S"])) for r in rows)
    assert sorted(os.listdir(tmp_path)) == ["peak.csv"]  # no temporary file left behind
    reference = tmp_path / "reference"
    reference.write_text("")
    assert out_file.stat().st_mode == reference.stat().st_mode  # the umask applies, as for open()


@pytest.mark.parametrize("error, exit_code", [(UserError, 2), (RuntimeError, 1)])
def test_failed_csv_leaves_no_file(capsys, tmp_path, monkeypatch, error, exit_code):
    target = tmp_path / "peak.csv"
    real_chunks = sweep_cli._chunks

    def failing(grid, progress):  # one chunk written, then a failure half-way (bad input, or a bug)
        yield next(iter(real_chunks(grid, progress)))
        raise error("simulated failure")

    monkeypatch.setattr(sweep_cli, "_chunks", failing)
    code, _, err = run(capsys, *PEAK, "--grid", "B=1..4", "--grid", "S=512", "--csv", str(target))
    assert code == exit_code and "simulated failure" in err
    assert os.listdir(tmp_path) == []


def test_json_with_csv_file(capsys, tmp_path):
    target = tmp_path / "peak.csv"
    code, out, _ = run(capsys, *PEAK, "--grid", "B=1..3", "--grid", "S=1024", "--json", "--csv", str(target))
    data = json.loads(out)
    assert code == 0 and data["csv"] == str(target) and "rows" not in data and data["count"] == 3
    assert len(target.read_text().splitlines()) == 4


def test_csv_to_stdout(capsys):
    code, out, _ = run(capsys, *PEAK, "--grid", "B=1,2", "--grid", "S=1024", "--csv", "-")
    assert code == 0
    assert out.splitlines() == ["B,S,total", f"1,1024,{peak(B=1, S=1024)}", f"2,1024,{peak(B=2, S=1024)}"]


def test_chunks_give_the_same_rows(capsys, monkeypatch):
    _, whole, _ = run(capsys, *PEAK, "--grid", "B=1..5", "--grid", "S=1..7", "--csv", "-")
    monkeypatch.setattr(sweep_cli, "CHUNK", 4)
    _, chunked, _ = run(capsys, *PEAK, "--grid", "B=1..5", "--grid", "S=1..7", "--csv", "-")
    assert chunked == whole and len(whole.splitlines()) == 36


def test_progress_when_asked_is_brief(capsys, monkeypatch):
    monkeypatch.setattr(sweep_cli, "CHUNK", 3)
    code, _, err = run(capsys, *PEAK, "--grid", "B=1..10", "--grid", "S=1..10", "--progress", "always")
    lines = err.splitlines()
    assert code == 0 and lines[-1] == "sweep llm.peak: 100 % (100 of 100)"
    assert len(lines) <= 3  # throttled: not one line per chunk
    _, _, quiet = run(capsys, *PEAK, "--grid", "B=1..10", "--grid", "S=1..10")
    assert quiet == ""  # stderr is not a terminal here: no progress by default


def test_ranges_steps_factors_and_lists(capsys):
    code, out, _ = run(capsys, *PEAK, "--grid", "B=1..10:4,16", "--grid", "S=256..2048:*2", "--json")
    data = json.loads(out)
    assert code == 0
    assert sorted({r["B"] for r in data["rows"]}) == [1, 5, 9, 16]
    assert sorted({r["S"] for r in data["rows"]}) == [256, 512, 1024, 2048]


def test_rational_grid_is_exact(capsys):
    code, out, _ = run(capsys, "sweep", "llm.weights", "--example", "--grid", "V=50001",
                       "--grid", "b=1/2,1,0.1", "--set", "H=769", "--csv", "-")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    f = symbolic.formula("llm.weights")
    for row, b in zip(rows, ("1/2", "1", "0.1")):
        want = f.evaluate(H=769, L=12, V=50001, d_ff=3072, b=b).total
        assert Fraction(row["total"]) == Fraction(str(float(want))) if not want.is_Integer else int(row["total"]) == want
    assert rows[0]["total"].endswith(".5")  # b = 1/2 with an odd count: a half byte, not truncated


def test_defined_symbol_can_be_swept_directly(capsys):
    code, out, _ = run(capsys, "sweep", "llm.steady", "--grid", "N=1e9,7e9", "--grid", "B=1,2", "--set", "D=4096",
                       "--json")
    data = json.loads(out)
    assert code == 0 and [r["total"] for r in data["rows"]] == [
        16 * n + 8 * b * 4096 for n in (10**9, 7 * 10**9) for b in (1, 2)]


def test_overflowing_sweep_stays_exact(capsys):
    code, out, _ = run(capsys, "sweep", "llm.steady", "--grid", "N=1e20,2e20", "--set", "B=1", "--set", "D=1", "--json")
    data = json.loads(out)
    assert code == 0 and data["mode"] == "object"
    assert [r["total"] for r in data["rows"]] == [16 * 10**20 + 8, 32 * 10**20 + 8]


@pytest.mark.parametrize("argv, message", [
    (["sweep", "llm.peek", "--grid", "B=1"], "unknown formula 'llm.peek'"),
    ([*PEAK, "--grid", "Bx=1..4"], "unknown symbol 'Bx'"),
    ([*PEAK, "--grid", "a=1..4"], "unknown symbol 'a' in formula 'llm.peak'"),
    ([*PEAK, "--grid", "B=1...4", "--set", "S=1"], "B: '.4' is not a number"),
    ([*PEAK, "--grid", "B=8..1", "--set", "S=1"], "B: range '8..1' is empty"),
    ([*PEAK, "--grid", "B=1..8:0", "--set", "S=1"], "B: step in '1..8:0' must be positive"),
    ([*PEAK, "--grid", "B=1..8:1/2", "--set", "S=1"], "B: step in '1..8:1/2' must be whole"),
    ([*PEAK, "--grid", "B=1..8:*1", "--set", "S=1"], "B: factor in '1..8:*1' must be above 1"),
    ([*PEAK, "--grid", "B=0,1", "--set", "S=1"], "B must be positive, got 0"),
    ([*PEAK, "--grid", "B=1,,2", "--set", "S=1"], "B: empty item"),
    ([*PEAK, "--grid", "B", "--set", "S=1"], "malformed grid 'B'"),
    ([*PEAK, "--grid", "B=1..10000", "--grid", "S=1..10000"], "= 100,000,000 combinations; at most 50,000,000"),
    ([*PEAK, "--grid", "B=1..2", "--grid", "B=3", "--set", "S=1"], "B is swept twice"),
    ([*PEAK, "--grid", "B=1..2", "--set", "B=3", "--set", "S=1"], "B is both swept (--grid) and fixed (--set)"),
    (["sweep", "llm.peak", "--grid", "B=1..2"], "values missing for S, D, H, L, V, d_ff: give --grid or --set or --example"),
    ([*PEAK, "--grid", "B=1..2", "--set", "S=1", "--csv", "/nonexistent/dir/out.csv"], "cannot write /nonexistent/dir/out.csv"),
    ([*PEAK, "--set", "S=1"], "the following arguments are required: --grid"),
    ([*PEAK, "--grid", "B=1", "--set", "S=1", "--json", "--csv", "-"], "--json and --csv - both write to stdout"),
])
def test_errors_are_one_line_with_exit_code_2(capsys, argv, message):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_json_refuses_too_many_rows_on_stdout(capsys, monkeypatch):
    monkeypatch.setattr(sweep_cli, "JSON_ROWS", 10)
    code, _, err = run(capsys, *PEAK, "--grid", "B=1..11", "--grid", "S=1", "--json")
    assert code == 2 and "add --csv FILE" in err


@pytest.mark.parametrize("code", [
    "import symbolic",
    "import symbolic, contextlib, io\nfrom symbolic.cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n    assert main(['list']) == 0",
])
def test_light_commands_load_no_heavy_package(code):
    probe = code + f"\nimport sys\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", f"heavy packages loaded: {result.stdout.strip()}"


def test_grid_axes_parse_exactly_and_count_before_materialising():
    from symbolic.math import grid

    axis = grid.parse_axis("b=1/4..1:1/4,2")
    assert axis.count == 5 and [str(v) for v in axis.array()] == ["1/4", "1/2", "3/4", "1", "2"]
    powers = grid.parse_axis("B=1..1e6:*2")
    assert powers.count == 20 and powers.array().tolist()[-1] == 2**19
    huge = grid.parse_axis("N=1..1e30:*10")
    assert huge.count == 31 and huge.array().dtype == object and huge.array()[-1] == 10**30
    assert grid.parse_axis("S = 1 .. 4e7").count == 4 * 10**7  # counted, not built
    with pytest.raises(grid.GridError, match="more than 50,000,000 values"):
        grid.parse_axis("b=1..2:1/100000000")
    with pytest.raises(grid.GridError, match="more than 50,000,000 values"):
        grid.parse_axis("b=1..1e30:*1.000000001")
    with pytest.raises(grid.GridError, match="40,000,000 B × 2 S = 80,000,000 combinations"):
        grid.grid_size([grid.parse_axis("B=1..4e7"), grid.parse_axis("S=1,2")])
    # a factor that is not whole multiplies every denominator: 1.001**k has 3k digits below the point
    with pytest.raises(grid.GridError, match="more than 10,000 values; with a factor that is not whole"):
        grid.parse_axis("b=1..1e5:*1.001")  # log(1e5)/log(1.001) ≈ 11,518 values
    geometric = grid.parse_axis("b=1..4:*3/2")
    assert [str(v) for v in geometric.array()] == ["1", "3/2", "9/4", "27/8"] and geometric.scale == 8


def test_axes_made_per_chunk_give_the_same_rows(capsys, monkeypatch):
    """Axes tabulated once and axes made chunk by chunk from their segments write the same CSV."""
    argv = ["sweep", "llm.weights", "--example", "--grid", "b=1/3,1/2..2:1/2,0.1,4..64:*2",
            "--grid", "V=7,50000..50003,1e20", "--csv", "-"]
    _, tabulated, _ = run(capsys, *argv)
    monkeypatch.setattr(sweep_cli, "SMALL_AXIS", 0)
    monkeypatch.setattr(sweep_cli, "CHUNK", 5)
    monkeypatch.setattr(sweep_cli, "TEXT_ROWS", 3)
    _, chunked, _ = run(capsys, *argv)
    assert chunked == tabulated
    rows = list(csv.DictReader(io.StringIO(chunked)))
    f = symbolic.formula("llm.weights")
    assert len(rows) == 11 * 6 and [r["b"] for r in rows[::6]] == [
        "0.3333333333333333", "0.5", "1", "1.5", "2", "0.1", "4", "8", "16", "32", "64"]
    exact_b = ["1/3", "1/2", "1", "3/2", "2", "1/10", "4", "8", "16", "32", "64"]
    for i, row in enumerate(rows):
        want = f.evaluate(H=768, L=12, d_ff=3072, V=int(row["V"]), b=exact_b[i // 6]).total
        assert (int(row["total"]) == want) if want.is_Integer else (float(row["total"]) == float(want)), row


def test_sweep_memory_does_not_grow_with_the_axis(capsys, tmp_path, monkeypatch):
    """Peak traced memory of a sweep is set by the chunk, not by the number of axis values."""
    import tracemalloc

    monkeypatch.setattr(sweep_cli, "CHUNK", 2048)
    monkeypatch.setattr(sweep_cli, "TEXT_ROWS", 512)
    monkeypatch.setattr(sweep_cli, "SMALL_AXIS", 256)

    def peak_bytes(n: int) -> int:
        out = tmp_path / f"steady{n}.csv"
        tracemalloc.start()
        try:
            code, _, err = run(capsys, "sweep", "llm.steady", "--grid", "N=1e9", "--grid", f"B=1..{n}",
                               "--set", "D=1024", "--csv", str(out))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert code == 0, err
        with out.open() as handle:
            assert sum(1 for _ in handle) == n + 1
        return peak

    peak_bytes(1000)  # compile and import once
    small, large = peak_bytes(10_000), peak_bytes(100_000)
    # materialising the axis (its values and their text) costs > 60 bytes a value: 5.4 MB more here
    assert large < small + 1_000_000, (small, large)


def _grid_calls(n: int) -> int:
    """Python function calls inside symbolic.math.grid to parse, count and tabulate an n-item list axis."""
    import sys

    from symbolic.math import grid

    items = ",".join(str(i) for i in range(1, n + 1))
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        if event == "call" and frame.f_code.co_filename == grid.__file__:
            calls += 1

    sys.setprofile(profile)
    try:
        axis = grid.parse_axis(f"B={items}")
        assert axis.count == n and axis.largest == n and axis.scale == 1 and axis.array()[-1] == n
    finally:
        sys.setprofile(None)
    return calls


def test_long_list_axis_is_linear(capsys):
    """Work on a list axis grows linearly with its items (it was quadratic: 20,000 items took 53 s).

    Counted as function calls, not timed, so a busy machine cannot fail it.
    """
    small, large = _grid_calls(1_000), _grid_calls(10_000)
    assert large < 12 * small, (small, large)  # quadratic would be about 100x
    items = ",".join(str(i) for i in range(1, 10_001))
    code, out, _ = run(capsys, "sweep", "llm.steady", "--grid", "N=1e9", "--grid", f"B={items}", "--set", "D=1024",
                       "--csv", "-")
    assert code == 0 and out.splitlines()[-1] == f"1000000000,10000,{16 * 10**9 + 8 * 10_000 * 1024}"


def test_sweeping_e_keeps_e_by_the_one_rule(capsys):
    code, out, _ = run(capsys, *PEAK, "--grid", "E=1e6,2e6", "--set", "B=8", "--set", "S=1024", "--json")
    data = json.loads(out)
    f = symbolic.formula("llm.peak")
    assert code == 0 and [r["total"] for r in data["rows"]] == [
        int(f.evaluate(H=768, L=12, V=50000, d_ff=3072, D=1024, B=8, S=1024, E=e).total) for e in (10**6, 2 * 10**6)]
