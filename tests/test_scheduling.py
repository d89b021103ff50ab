"""The parallel scheduler's grouping (tests/conftest.py): the marked torch tests of the modules without a
shared fixture go to one worker together, after every module with one; the tests that import torch or
transformers themselves (or through a helper function of their file) carry the mark; no test file
imports them when it is collected (every worker would). A test that reaches torch through the
library (the generic path) is marked by hand: this check cannot see it."""

from __future__ import annotations

import ast
from pathlib import Path

import conftest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = {"torch", "transformers"}


def _imports_heavy(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import) and any(a.name.split(".")[0] in HEAVY for a in sub.names):
            return True
        if isinstance(sub, ast.ImportFrom) and (sub.module or "").split(".")[0] in HEAVY:
            return True
    return False


def _direct_torch_tests(path: Path) -> set[str]:
    """Tests of a file that import torch or transformers themselves or through a helper function of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    helpers = {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and _imports_heavy(f)}
    name = path.relative_to(ROOT).as_posix()
    found: set[str] = set()
    for f in tree.body:
        if isinstance(f, ast.FunctionDef) and f.name.startswith("test"):
            calls = {c.func.id for c in ast.walk(f) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            if _imports_heavy(f) or calls & helpers:
                found.add(f"{name}::{f.name}")
    return found


def test_tests_importing_torch_in_process_are_grouped() -> None:
    grouped = conftest.shared_fixture_modules(ROOT)
    marked = conftest.in_process_torch(ROOT)
    direct: set[str] = set()
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        if path.relative_to(ROOT).as_posix() not in grouped:
            direct |= _direct_torch_tests(path)
    assert direct, "the check found no test that imports torch: it would pass on anything"
    assert direct <= marked, sorted(direct - marked)  # mark them @pytest.mark.torch or @pytest.mark.imports_torch


def test_no_test_file_imports_torch_when_collected() -> None:
    for path in sorted((ROOT / "tests").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.If, ast.Try))]
        assert not any(_imports_heavy(n) for n in top), path.name


class _Item:
    """What ``_long_first`` reads of a collected test."""

    def __init__(self, nodeid: str, slow: bool = False) -> None:
        self.nodeid, self.slow = nodeid, slow

    def get_closest_marker(self, name: str) -> object:
        return True if name == "slow" and self.slow else None


def test_units_and_their_order() -> None:
    grouped = conftest.shared_fixture_modules(ROOT)
    marked = conftest.in_process_torch(ROOT)
    torch_test = "tests/test_params_cli.py::test_params_errors_are_one_line_exit_2[argv3-UNKNOWN_TYPE]"
    assert conftest.scope_of(torch_test, grouped, marked) == conftest.TORCH_GROUP
    assert conftest.scope_of("tests/test_generic_torch.py::test_x", grouped, marked) == "tests/test_generic_torch.py"
    assert conftest.scope_of("tests/test_formula.py::test_x[1]", grouped, marked) == "tests/test_formula.py::test_x[1]"
    items = [_Item("tests/test_formula.py::test_a"), _Item(torch_test, slow=True),
             _Item("tests/test_architectures_torch.py::test_b"), _Item("tests/test_report_examples.py::test_c"),
             _Item("tests/test_generic_torch.py::test_d")]
    conftest._long_first(items, grouped)  # noqa: SLF001
    assert [i.nodeid.split("::")[0] for i in items] == [
        "tests/test_generic_torch.py", "tests/test_report_examples.py", "tests/test_architectures_torch.py",
        "tests/test_params_cli.py", "tests/test_formula.py"]  # the torch group after every shared-fixture module


def test_the_longest_modules_are_grouped_modules() -> None:
    """``LONGEST`` orders modules with a shared fixture: a name that is not one (renamed, or its fixture gone) would
    be ranked as any other test, and that long module could start last."""
    grouped = conftest.shared_fixture_modules(ROOT)
    assert set(conftest.LONGEST) <= grouped, sorted(set(conftest.LONGEST) - grouped)
    assert len(set(conftest.LONGEST)) == len(conftest.LONGEST)


def test_only_modules_without_a_child_are_in_the_torch_group() -> None:
    grouped = conftest.shared_fixture_modules(ROOT)
    marked = conftest.in_process_torch(ROOT)
    assert "tests/test_generic_torch.py" in grouped and "tests/test_architectures_torch.py" in grouped
    assert not any(t.split("::")[0] in grouped for t in marked)
    # marked on the function, by the module's pytestmark, and with imports_torch (a test that also runs without torch)
    assert {"tests/test_runtime.py::test_meta_device_trace_is_the_cpu_trace",
            "tests/test_time_torch.py::test_training_flops_are_three_forwards_as_pytorch_counts",
            "tests/test_fuzz_cli.py::test_any_config_file_gives_output_or_a_one_line_error"} <= marked


def test_a_module_whose_fixture_imports_torch_joins_the_torch_group() -> None:
    """Modules marked imports_torch as a whole go with the in-process torch tests, not as a unit of their own."""
    grouped = conftest.shared_fixture_modules(ROOT)
    marked = conftest.in_process_torch(ROOT)
    for name in ("tests/test_module_sources.py", "tests/test_vlm_sources.py"):
        assert name not in grouped
        assert conftest.scope_of(f"{name}::test_x", grouped, marked) != name
    some = next(t for t in marked if t.startswith("tests/test_module_sources.py::"))
    assert conftest.scope_of(some, grouped, marked) == conftest.TORCH_GROUP
