"""The house: one option list for CLI, report and planner; names that say what they hold;
renderers importable alone; printing in printing.py; a design page (docs/design.md) whose layout lists every package."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from symbolic import planning
from symbolic.cli import build_parser
from symbolic.cli.memory import add_plan_options, plan_options
from symbolic.options import records
from symbolic.options import table as opts
from symbolic.planning import regime
from symbolic.report import spec

ROOT = Path(__file__).resolve().parent.parent


def _option_actions(command: str) -> dict[str, argparse.Action]:
    """The flags of one subcommand, by destination."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in sub.choices[command]._actions}


@pytest.mark.parametrize("command", ["memory", "fit"])
def test_cli_flags_are_the_option_list(command: str) -> None:
    actions = _option_actions(command)
    for option in opts.OPTIONS:
        action = actions[option.name]
        assert option.flag in action.option_strings and action.default is None
        if option.kind in ("choice", "stage"):
            assert tuple(action.choices) == option.choices, option.name
        assert action.help == option.help
    assert actions["mode"].choices == opts.MODES and actions["mode"].default == opts.DEFAULT_MODE


def test_report_spec_and_planner_use_the_same_list() -> None:
    assert spec.REGIME_KEYS == opts.NAMES == regime.COMMON + regime.TRAIN_ONLY + regime.INFER_ONLY
    assert set(spec.SIZE_KEYS + spec.DEGREE_KEYS + spec.FLAG_KEYS + spec.STAGE_KEYS + spec.NAMES_KEYS
               + spec.FRACTION_KEYS + tuple(spec.CHOICES)) == set(opts.NAMES)
    assert planning.CHOICES == opts.choices() and planning.DEFAULTS == opts.defaults()
    for name, values in spec.CHOICES.items():
        assert values == opts.get(name).choices


def test_choices_are_the_librarys_definitions() -> None:
    """Allowed values are read from the modules that define them, not copied."""
    from symbolic.library import inference, optimizers, precision

    assert opts.get("precision").choices == tuple(precision.PRECISIONS)
    assert opts.get("optimizer").choices == tuple(optimizers.OPTIMIZERS)
    assert opts.get("grads").choices == tuple(precision.GRADS)
    assert opts.get("kv_dtype").choices == tuple(inference.KV_DTYPES)


def test_defaults_are_what_the_planner_resolves() -> None:
    """Every fixed default is the value ``resolve`` picks when the option is not given."""
    resolved = {"train": regime.resolve(planning.load("llama-3-8b"), "train"),
                "infer": regime.resolve(planning.load("llama-3-8b"), "infer")}
    fields = records.option_fields()  # the fields of the concern records the regime holds
    for option in opts.OPTIONS:
        assert option.name in fields
        if option.default is None:
            continue
        for mode, plan in resolved.items():
            if option.mode in ("both", mode):
                assert getattr(plan, option.name) == option.default, (mode, option.name)
                assert option.name in plan.defaulted
        if fields[option.name].default is not dataclasses.MISSING:
            assert fields[option.name].default == option.default, option.name


def test_every_option_is_validated_by_the_report_spec() -> None:
    """One good value of each option passes the [regime] check; a wrong kind fails with one line."""
    good = {"size": 2, "degree": 2, "stage": 1, "flag": True, "names": "q_proj,v_proj", "fraction": 0.05}
    parsed_as = {"names": ("q_proj", "v_proj")}
    wrongs = {"choice": "no-such-value", "names": "no such module!"}
    for option in opts.OPTIONS:
        value = option.choices[-1] if option.kind == "choice" else good[option.kind]
        parsed = spec.parse({"title": "t", "model": "gpt2", "regime": {option.name: value}})
        assert getattr(parsed.regime, option.name) == parsed_as.get(option.kind, value)
        wrong = wrongs.get(option.kind, "yes")
        with pytest.raises(spec.ReportSpecError) as info:
            spec.parse({"title": "t", "model": "gpt2", "regime": {option.name: wrong}})
        assert f"regime.{option.name}" in str(info.value) and "\n" not in str(info.value)


def test_add_plan_options_for_other_commands() -> None:
    parser = argparse.ArgumentParser()
    add_plan_options(parser)
    args = parser.parse_args(["gpt2", "--zero", "3", "--no-flash", "--kv-dtype", "fp8", "--sequence-parallel"])
    assert args.model == "gpt2" and args.mode == "train" and args.json is False
    assert plan_options(args) == {"zero": 3, "flash": False, "kv_dtype": "fp8", "sequence_parallel": True}
    bare = argparse.ArgumentParser()
    add_plan_options(bare, model=False, json=False)
    assert not hasattr(bare.parse_args([]), "json")


def test_a_new_option_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI builds its flags from the list: an entry added there becomes a flag."""
    extra = opts.Option("probe_degree", "train", "degree", 1, "a degree only this test adds (default 1)")
    monkeypatch.setattr(opts, "OPTIONS", opts.OPTIONS + (extra,))
    parser = argparse.ArgumentParser()
    add_plan_options(parser)
    assert parser.parse_args(["gpt2", "--probe-degree", "4"]).probe_degree == 4
    with pytest.raises(SystemExit):
        parser.parse_args(["gpt2", "--probe-degree", "0"])


def test_plan_option_errors_are_user_errors() -> None:
    from symbolic.core.errors import UserError

    with pytest.raises(opts.PlanOptionError, match="must divide the 32 attention heads") as info:
        planning.plan("llama-3-8b", tp=3)
    assert isinstance(info.value, UserError)


def test_names_say_what_they_hold() -> None:
    from symbolic.library import activations_pytorch
    from symbolic.measured import crosscheck
    from symbolic.networks import transformer as architectures
    from symbolic.networks.transformer import spec as model_spec

    assert not hasattr(spec, "SpecError") and not hasattr(spec, "Regime")  # dead aliases removed (CHANGELOG)
    assert not hasattr(model_spec, "SpecError") and model_spec.ModelSpecError is architectures.ModelSpecError
    assert spec.ReportSpecError is not model_spec.ModelSpecError
    assert spec.RegimeOptions is not planning.Regime
    assert not hasattr(crosscheck, "setup_for") and hasattr(activations_pytorch, "setup_for")
    with pytest.raises(ModuleNotFoundError):
        import symbolic.validate  # noqa: F401  (the former name of measured.crosscheck)


def test_report_package_names_still_import() -> None:
    import symbolic.report as report
    import symbolic.report.build  # noqa: F401  (the submodule must not replace the function)

    assert callable(report.build) and report.build is symbolic.report.build
    assert report.ReportSpecError is spec.ReportSpecError and not hasattr(report, "SpecError")
    assert report.Outputs.__module__ == "symbolic.report.build"
    with pytest.raises(AttributeError):
        report.no_such_name  # noqa: B018


RENDERERS = ("texescape", "render", "typeset", "mathsvg", "plots")
# what importing a renderer must never pull in: the builder, the specification, the planner...
HEAVY = ("symbolic.report.build", "symbolic.report.spec", "symbolic.report.context", "symbolic.report.scenario",
         "symbolic.planning", "symbolic.library", "symbolic.networks.transformer", "symbolic.catalogs")


def test_renderers_import_alone() -> None:
    probe = f"""
import json, sys
import symbolic
base = set(sys.modules)
import symbolic.report.texescape
texescape = sorted(m for m in set(sys.modules) - base if m.startswith("symbolic"))
for name in {RENDERERS!r}:
    __import__("symbolic.report." + name)
print(json.dumps({{"texescape": texescape, "all": sorted(m for m in sys.modules if m.startswith("symbolic"))}}))
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = json.loads(result.stdout)
    assert loaded["texescape"] == ["symbolic.report", "symbolic.report.texescape"]
    assert not [m for m in loaded["all"] if m.startswith(HEAVY)], loaded["all"]


def test_printing_lives_in_printing() -> None:
    from symbolic.text import parsing, printing

    assert parsing.to_text is printing.to_text and "to_text" in parsing.__all__
    assert parsing._NAME_RUN.pattern == printing._NAME_RUN.pattern
    tree = ast.parse(Path(parsing.__file__).read_text(encoding="utf-8"))
    printers = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                and any("Printer" in ast.unparse(base) for base in node.bases)]
    assert printers == []
    x = parsing.parse_expression("ceil(x/2) + max(x, 3)", symbols={}, allow_new=True)
    assert parsing.parse_expression(printing.to_text(x), symbols={"x": next(iter(x.free_symbols))}) == x


def test_design_layout_lists_every_package_folder() -> None:
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = design.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"symbolic/([a-z_]+)/", section))
    packages = {p.parent.name for p in (ROOT / "symbolic").glob("*/__init__.py")}
    assert packages <= listed, sorted(packages - listed)
