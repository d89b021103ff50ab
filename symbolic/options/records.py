"""A plan's resolved options, one small frozen record per concern, made from the option table.

Each record (``ShapeOptions``, ``ParallelOptions``, ...) has one field per option of its concern
in ``options.table.OPTIONS``, in the table's order, typed by the option's kind, with the
option's default (or fallback) as the field's default: an entry added to the table is a field
here without another line. ``planning.regime.Regime`` holds one record per concern under the
concern's key and reads every option by its flat name (``regime.tp`` is ``regime.parallel.tp``).
"""

from __future__ import annotations

from dataclasses import Field, field, fields, make_dataclass, replace
from typing import Any

from . import table as opts


def make_record(concern: str, class_name: str) -> type:
    """The frozen record of one concern's options (see the module docstring)."""
    members = [(o.name, o.value_type, field(default=o.initial)) for o in opts.OPTIONS if o.concern == concern]
    record = make_dataclass(class_name, members, frozen=True)
    record.__module__ = __name__  # (make_dataclass's module= needs Python 3.12)
    record.__doc__ = f"The {concern} options of a plan: {opts.CONCERNS[concern]}."
    return record


ShapeOptions = make_record("shape", "ShapeOptions")
ParallelOptions = make_record("parallel", "ParallelOptions")
TrainingOptions = make_record("training", "TrainingOptions")
FineTuningOptions = make_record("finetuning", "FineTuningOptions")
ServingOptions = make_record("serving", "ServingOptions")
ImplementationOptions = make_record("implementation", "ImplementationOptions")

# the record of each concern, in the order of options.table.CONCERNS
RECORDS: dict[str, type] = {"shape": ShapeOptions, "parallel": ParallelOptions, "training": TrainingOptions,
                            "finetuning": FineTuningOptions, "serving": ServingOptions,
                            "implementation": ImplementationOptions}


def split(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Flat option values grouped by concern (an unknown name is an ``UnknownNameError``)."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        out.setdefault(opts.get(name).concern, {})[name] = value
    return out


def build(values: dict[str, Any]) -> dict[str, Any]:
    """One record per concern from flat option values; options not given hold their field default."""
    grouped = split(values)
    return {concern: record(**grouped.get(concern, {})) for concern, record in RECORDS.items()}


def update(records: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """The records of ``records`` (by concern) that ``changes`` touch, each a copy with its changes."""
    return {concern: replace(records[concern], **values) for concern, values in split(changes).items()}


def option_fields() -> dict[str, Field]:
    """Every record's fields by option name (what ``dataclasses.fields`` gave on the flat regime)."""
    return {f.name: f for record in RECORDS.values() for f in fields(record)}
