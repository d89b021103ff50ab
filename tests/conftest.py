"""Shared test configuration: determinism, torch skipping, and grouping for parallel workers.

- Hypothesis runs derandomized (no example database), so every run, on every worker, checks
  the same inputs.
- Tests marked ``torch`` are skipped when torch or transformers cannot be imported (found with
  ``importlib.util.find_spec``, so the test process never imports them to find out).
- ``make test`` runs the suite on parallel workers (pytest-xdist, ``-n auto --dist loadgroup``).
  Tests are handed out one by one, except that every test of a module that defines a module-,
  package- or session-scoped fixture (a child process measuring PyTorch, a PDF built once) goes
  to the same worker, so that the fixture is built once instead of once per worker. The
  scheduler does this from the test files themselves (``shared_fixture_modules``), because
  pytest-xdist 3.8's ``xdist_group`` marks do not reach its scheduler under pytest 9 (it renames
  ``item._nodeid``, which pytest 9 no longer reads); explicit ``xdist_group`` marks still count
  where they do.
- ``torch_env.install()``: an installed torchvision imports beside the CPU torch (the child scripts
  that import transformers call it too).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

import pytest
from hypothesis import settings

from symbolic.networks import torch_env

settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.load_profile("deterministic")
# An installed torchvision (the index's is a CUDA build) imports beside the CPU torch once anything looks
# for it: transformers does, even for text models; this imports nothing now (networks/torch_env.py).
torch_env.install()

HAVE_TORCH = all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers"))
SHARED_SCOPES = ("module", "package", "session")
TORCH_GROUP = "torch-in-process"
# The longest modules with a shared fixture, longest first, so that none runs alone at the end: the
# generic child (the survey of every causal-LM type: about 160 CPU-s, 126 of them the survey, on a pool of two)
# and the example reports (five builds, two rebuilds and the installed wheel's), then the other long children.
# The order is their measured cost (fixture set-up, ``--durations``, the child files one after another in one
# process on the shared two-core machine, 2026-12-03 s36; docs/performance.md, "The test suite"): 244, 190, 169,
# 143, 83, 67, 66, 65, 60, 50, 37, 30 s wall (loaded: about 3.9 times their CPU); the other grouped modules follow.
# The float8 compile child goes third: on a fresh machine its inductor cache is cold (about 100 CPU-s, measured).
LONGEST = ("tests/test_generic_torch.py", "tests/test_report_examples.py", "tests/test_float8_compile.py",
           "tests/test_library_modules.py",
           "tests/test_generation.py", "tests/test_module_recompute.py", "tests/test_compile.py",
           "tests/test_compile_step.py", "tests/test_module_inference.py", "tests/test_module_lora.py",
           "tests/test_architectures_torch.py", "tests/test_module_flops.py", "tests/test_measure.py",
           "tests/test_module_qlora.py", "tests/test_generation_beams.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the tests marked ``torch`` when torch or transformers is missing; on parallel
    workers, hand out the long ones first (see ``_long_first``)."""
    if not HAVE_TORCH:
        skip_torch = pytest.mark.skip(reason="needs torch and transformers (make setup-torch)")
        for item in items:
            if item.get_closest_marker("torch") is not None:
                item.add_marker(skip_torch)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: every worker sorts the same way
        _long_first(items, shared_fixture_modules(Path(config.rootpath)))


def _long_first(items: list[pytest.Item], grouped: frozenset[str]) -> None:
    """Modules with shared fixtures (``LONGEST`` first), then ``slow`` tests, then the rest.

    The scheduler hands units out in the order their first test is collected; starting the
    longest units first keeps one of them from running alone at the end. The sort is stable, so
    the order stays the same from run to run.
    """
    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::", 1)[0]
        if path in grouped:
            return 0, LONGEST.index(path) if path in LONGEST else len(LONGEST)
        return (1 if item.get_closest_marker("slow") is not None else 2), 0

    items.sort(key=rank)


def _shared_scope(decorator: ast.expr) -> bool:
    """Whether a decorator is ``pytest.fixture(scope="module")`` (or package, session)."""
    if not isinstance(decorator, ast.Call):
        return False
    return any(k.arg == "scope" and isinstance(k.value, ast.Constant) and k.value.value in SHARED_SCOPES
               for k in decorator.keywords)


@functools.cache
def shared_fixture_modules(root: Path) -> frozenset[str]:
    """The test files (paths relative to ``root``, as in node ids) that define a long-lived fixture.

    A module marked ``imports_torch`` as a whole (its ``pytestmark``) builds its fixture with torch in
    the test process: it is not one of these but part of the torch group (``in_process_torch``), so that
    no worker imports torch before a module that checks the test process never does.
    """
    found = set()
    for path in sorted((root / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if _module_has_mark(tree, "imports_torch"):
            continue
        if any(_shared_scope(d) for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
               for d in node.decorator_list):
            found.add(path.relative_to(root).as_posix())
    return frozenset(found)


def _module_has_mark(tree: ast.Module, mark: str) -> bool:
    """Whether the module's ``pytestmark`` (one mark or a list) includes ``pytest.mark.<mark>``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            if any(isinstance(v, ast.Attribute) and v.attr == mark for v in values):
                return True
    return False


def _marks_torch(decorator: ast.expr) -> bool:
    """Whether a decorator (or a ``pytestmark`` entry) is ``pytest.mark.torch`` or ``pytest.mark.imports_torch``."""
    return (isinstance(decorator, ast.Attribute) and decorator.attr in ("torch", "imports_torch")
            and isinstance(decorator.value, ast.Attribute) and decorator.value.attr == "mark")


def _module_marks_torch(tree: ast.Module) -> bool:
    """Whether the module's ``pytestmark`` (one mark or a list) includes one of those marks."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            if any(_marks_torch(v) for v in values):
                return True
    return False


@functools.cache
def in_process_torch(root: Path) -> frozenset[str]:
    """Node ids (without parameters) of the ``torch`` and ``imports_torch`` tests of modules without a shared fixture.

    The marks are read as written in the test files: on a test function or method, or in a
    module-level ``pytestmark``; a mark given any other way (on a class, through an alias) is not
    seen, and that test is scheduled on its own.
    """
    grouped = shared_fixture_modules(root)
    found: set[str] = set()
    for path in sorted((root / "tests").glob("test_*.py")):
        name = path.relative_to(root).as_posix()
        if name in grouped:
            continue  # their torch runs in a child process, once for the module
        tree = ast.parse(path.read_text(encoding="utf-8"))
        every = _module_marks_torch(tree)
        scopes = [("", tree.body)] + [(f"{c.name}::", c.body) for c in tree.body if isinstance(c, ast.ClassDef)]
        for prefix, body in scopes:
            for node in body:
                if isinstance(node, ast.FunctionDef) and node.name.startswith("test") and (
                        every or any(_marks_torch(d) for d in node.decorator_list)):
                    found.add(f"{name}::{prefix}{node.name}")
    return frozenset(found)


def scope_of(nodeid: str, grouped: frozenset[str], torch_tests: frozenset[str]) -> str:
    """The scheduling unit of a test: its module (a shared fixture), the torch group, or the test itself."""
    path = nodeid.split("::", 1)[0]
    if path in grouped:
        return path
    return TORCH_GROUP if nodeid.split("[", 1)[0] in torch_tests else nodeid


if importlib.util.find_spec("xdist") is not None:  # the hook exists only with pytest-xdist installed

    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
        """``--dist loadgroup``: one test at a time, one worker per module with shared fixtures, and one
        for the tests that import torch in the test process."""
        if config.getvalue("dist") != "loadgroup":
            return None
        from xdist.scheduler import LoadGroupScheduling

        grouped = shared_fixture_modules(Path(config.rootpath))
        torch_tests = in_process_torch(Path(config.rootpath))
        config.option.loadscopereorder = False  # keep _long_first's order, not xdist's largest-unit-first

        class ModuleFixtureScheduling(LoadGroupScheduling):
            def _split_scope(self, nodeid: str) -> str:
                scope = super()._split_scope(nodeid)
                if scope != nodeid:  # an explicit xdist_group
                    return scope
                return scope_of(nodeid, grouped, torch_tests)

        return ModuleFixtureScheduling(config, log)  # type: ignore[arg-type]
