"""Options by concern (issue 26, item 4): each option is one entry of ``options.table``; the CLI's flags,
the Python keywords, the report's ``[regime]`` keys and the planner's concern records all come from it."""

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

from symbolic import formats, planning
from symbolic.cli import build_parser
from symbolic.core.errors import UnknownNameError
from symbolic.library import activations as acts
from symbolic.library import activations_pytorch as pyacts
from symbolic.library import (
    adam_8bit_step,
    fsdp,
    inference,
    optimizers,
    peak_pytorch,
    pipeline,
    precision,
    runtime,
    upcast_logits,
)
from symbolic.options import records
from symbolic.options import table as opts
from symbolic.planning import regime
from symbolic.report import spec

ROOT = Path(__file__).resolve().parent.parent
PLANNING_COMMANDS = ("memory", "fit", "time", "plan")

# Where each choice's allowed values are defined: the library module that says what each value means.
OWNERS = {"precision": (precision, "PRECISIONS"), "optimizer": (optimizers, "OPTIMIZERS"),
          "grads": (precision, "GRADS"), "recompute": (acts, "RECOMPUTE"), "logits": (acts, "LOGITS"),
          "activations": (acts, "MODELS"), "attn": (pyacts, "ATTENTION"), "device": (pyacts, "DEVICES"),
          "dropout_masks": (pyacts, "DROPOUT_MASKS"), "loss": (pyacts, "PLAN_LOSSES"),
          "weights": (inference, "WEIGHT_DTYPES"),
          "kv_dtype": (inference, "KV_DTYPES"), "fp8_recipe": (fsdp, "RECIPES"),
          "fsdp_param_dtype": (fsdp, "PARAM_DTYPES"), "fsdp_reduce_dtype": (fsdp, "REDUCE_DTYPES"),
          "cuda_module_loading": (runtime, "CONTEXT_BY_LOADING"), "pp_schedule": (pipeline, "SCHEDULES"),
          "logits_upcast": (upcast_logits, "CHOICES"), "layer_impl": (acts, "LAYER_IMPLS"),
          "optimizer_impl": (adam_8bit_step, "IMPLS"), "tp_impl": (acts, "TP_IMPLS")}


def _subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _help_groups(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    """The long flags ``--help`` prints under each argument group's title."""
    groups: dict[str, set[str]] = {}
    title = ""
    for line in parser.format_help().splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            groups[title] = set()
        elif title and line.startswith("  -"):
            groups[title] |= set(re.findall(r"--[a-z][a-z0-9-]*", line.split("  ", 2)[1]))
    return groups


def test_every_option_is_one_entry_of_the_table() -> None:
    assert len(opts.NAMES) == len(opts.OPTIONS) == len(set(opts.NAMES))
    for option in opts.OPTIONS:
        assert option.concern in opts.CONCERNS, option.name
        assert option.kind in opts.KINDS and option.mode in opts.GROUPS, option.name
        assert option.help and (option.default is not None or option.fallback is not None), option.name
    # no other module constructs an Option: the table is the one definition
    makers = []
    for path in (ROOT / "symbolic").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and ast.unparse(n.func) in ("Option", "opts.Option", "table.Option")]
        if calls:
            makers.append(path.relative_to(ROOT).as_posix())
    assert makers == ["symbolic/options/table.py"]


def test_each_concern_record_has_its_options_as_fields() -> None:
    assert tuple(records.RECORDS) == tuple(opts.CONCERNS)
    for concern, record in records.RECORDS.items():
        fields = dataclasses.fields(record)
        assert tuple(f.name for f in fields) == opts.names(concern=concern), concern
        for field in fields:
            option = opts.get(field.name)
            assert field.type is option.value_type and field.default == option.initial, field.name
        with pytest.raises(dataclasses.FrozenInstanceError):
            record().__setattr__(fields[0].name, fields[0].default)
    assert list(records.option_fields()) == sorted(opts.NAMES, key=list(records.option_fields()).index)
    assert set(records.option_fields()) == set(opts.NAMES)


def test_a_new_option_becomes_a_field_of_its_record(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = opts.Option("xp", "train", "degree", 1, "an example degree (default 1)", concern="parallel")
    monkeypatch.setattr(opts, "OPTIONS", opts.OPTIONS + (extra,))
    record = records.make_record("parallel", "ProbeParallel")
    assert [f.name for f in dataclasses.fields(record)][-1] == "xp" and record().xp == 1


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_regime_reads_every_option_by_its_flat_name_from_its_record(mode: str) -> None:
    plan = regime.resolve(planning.load("llama-3-8b"), mode, batch=2, dp=2)
    assert {f.name for f in dataclasses.fields(regime.Regime)} >= set(records.RECORDS)
    assert not set(records.RECORDS) & set(opts.NAMES)  # a concern's key never hides an option
    for option in opts.OPTIONS:
        assert getattr(plan, option.name) == getattr(getattr(plan, option.concern), option.name), option.name
        with pytest.raises(AttributeError):
            setattr(plan, option.name, option.initial)
    assert plan.shape.batch == plan.batch == 2 and plan.parallel.dp == plan.dp == 2


def test_unlisted_rules_name_options() -> None:
    """The rules of what ``Regime.options()`` leaves out name options of the table."""
    named = {name for names, _ in regime.UNLISTED for name in names}
    assert named <= set(opts.NAMES), named - set(opts.NAMES)


def test_replace_routes_each_name_to_its_record() -> None:
    base = regime.resolve(planning.load("llama-3-8b"), "train", lora_rank=8)
    changed = base.replace(lora_rank=0, recompute="full", tp=2, notes=("n",))
    assert (changed.lora_rank, changed.recompute, changed.tp, changed.notes) == (0, "full", 2, ("n",))
    assert changed.shape is base.shape and changed.serving is base.serving  # untouched records are shared
    assert changed.finetuning == dataclasses.replace(base.finetuning, lora_rank=0)
    assert base.replace() == base and hash(base.replace()) == hash(base)
    with pytest.raises(UnknownNameError, match="unknown option 'no_such'"):
        base.replace(no_such=1)


def test_regime_of_flat_names_equals_resolve() -> None:
    resolved = regime.resolve(planning.load("gpt2"), "train", batch=4, zero=1, dp=2)
    flat = {name: getattr(resolved, name) for name in opts.NAMES}
    assert regime.Regime.of("train", **flat) == resolved


@pytest.mark.parametrize("command", PLANNING_COMMANDS)
def test_cli_flags_are_the_table(command: str) -> None:
    """``symbolic COMMAND --help`` lists, under each mode's group, exactly the table's options of that mode."""
    parser = _subcommand(command)
    groups = _help_groups(parser)
    for mode, title in opts.GROUPS.items():
        expected = {o.flag for o in opts.OPTIONS if o.mode == mode}
        expected |= {"--no-" + o.flag[2:] for o in opts.OPTIONS if o.mode == mode and o.kind == "flag"}
        assert groups[title] == expected, (command, mode)
    actions = {a.dest: a for a in parser._actions}
    for option in opts.OPTIONS:
        assert actions[option.name].help == option.help and actions[option.name].default is None


def test_python_keywords_are_the_table() -> None:
    assert set(planning.DEFAULTS) == set(planning.CHOICES) | {
        o.name for o in opts.OPTIONS if not o.values} == {"mode", *opts.NAMES}
    with pytest.raises(opts.PlanOptionError) as info:
        planning.plan("gpt2", no_such_option=1)
    assert info.value.args[0].endswith("options are " + ", ".join(opts.NAMES))
    shape = planning.load("gpt2")
    assert regime.resolve(shape, "train", **dict.fromkeys(opts.NAMES)) == regime.resolve(shape, "train")


def test_report_regime_keys_are_the_table() -> None:
    assert spec.REGIME_KEYS == opts.NAMES
    with pytest.raises(spec.ReportSpecError) as info:
        spec.parse({"title": "t", "model": "gpt2", "regime": {"no_such": 1}})
    assert str(info.value).endswith("valid keys: " + ", ".join(opts.NAMES))


def test_allowed_values_equal_the_owning_modules_lists() -> None:
    choices = {o.name for o in opts.OPTIONS if o.kind == "choice"}
    assert choices == set(OWNERS) | {"adapter_dtype"}
    assert opts.get("adapter_dtype").choices == formats.names("adapter")  # the formats table owns it
    for name, (module, attribute) in OWNERS.items():
        assert opts.get(name).choices == tuple(getattr(module, attribute)), name
    assert regime.PYTORCH_OPTIMIZERS == peak_pytorch.OPTIMIZERS


def test_allowed_values_are_read_not_copied() -> None:
    """A value added to a library list before the table is imported is an allowed value of its option."""
    owners = {name: (module.__name__, attribute) for name, (module, attribute) in OWNERS.items()}
    probe = f"""
import importlib, json, sys
owners = {owners!r}
for module, attribute in set(owners.values()):
    lib = importlib.import_module(module)
    value = getattr(lib, attribute)
    setattr(lib, attribute, {{**value, "probe": 0}} if isinstance(value, dict) else (*value, "probe"))
import dataclasses
from symbolic.formats import table as formats_table
formats_table.FORMATS["probe"] = dataclasses.replace(formats_table.FORMATS["bf16"], name="probe", roles=("adapter",))
owners["adapter_dtype"] = ("symbolic.formats", "FORMATS")
assert "symbolic.options.table" not in sys.modules
from symbolic.options import table
print(json.dumps(sorted(name for name in owners if "probe" not in table.get(name).choices)))
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert json.loads(result.stdout) == []


def test_option_check_is_the_one_kind_check() -> None:
    assert opts.get("zero").check("2") == 2 and opts.get("batch").check(" 8 ") == 8
    assert opts.get("lora_targets").check("q_proj, v_proj") == ("q_proj", "v_proj")
    for name, wrong in (("zero", 4), ("batch", "²"), ("batch", 2.5), ("flash", "yes"), ("precision", "fp7"),
                        ("lora_dropout", 1), ("seq", opts.MAX_SEQ + 1)):
        with pytest.raises(opts.PlanOptionError) as info:
            opts.get(name).check(wrong)
        assert name in str(info.value) or "2^27" in str(info.value)
        with pytest.raises(opts.PlanOptionError):  # the planner refuses it with the same check
            planning.plan("gpt2", **{name: wrong})
