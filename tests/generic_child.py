"""The generic torch path run in a child process (``test_generic_torch.py``: torch stays out of the test process).

Reads one JSON request on stdin, with any of these keys, and writes one JSON object with the same keys:

- ``survey`` (true): one row per causal-LM type transformers knows, ``benchmarks/generic_coverage.py``'s
  rows (``generic_survey.survey_type``), and under ``coverage`` their counts;
- ``params`` ({name: config}): what ``symbolic.networks.generic.probes`` found (total, the formula's value
  at its values, active counts, status, the formula's expanded text);
- ``cache`` ({name: config}): the measured cache formula;
- ``forward`` ([type, ...]): a plain forward's argument and output names;
- ``presets`` ([name, ...]): ``params`` of each preset's config;
- ``reference`` ({name: config}): transformers' own plain build and count (``hf_reference.count``);
- ``known`` (true): the model types transformers' CONFIG_MAPPING_NAMES has that ``generic.known_types`` (read
  from its source without importing it) lacks, and those it has in excess, under ``known``;
- ``cli`` ({name: [argument, ...]}): the command line run on those arguments, as ``{"code", "out", "err"}``
  (``command_line``: ``symbolic.cli.main`` in a pool worker, which has imported torch and may have run
  other tasks, instead of a fresh interpreter that imports torch and transformers again).

Every piece of work is one task of a pool of ``--jobs`` processes (default 2), the longest first, so
that the survey's 196 types and the rest share the cores; a surveyed type's ``params`` come from the
same analysis as its survey row. Exits with ``SKIP`` when torch or transformers cannot be imported.
"""

from __future__ import annotations

import argparse
import json
import sys
from multiprocessing import Pool
from pathlib import Path

from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

SKIP = 77
HERE = Path(__file__).resolve().parent


def params(name: str, config: dict) -> dict:
    import sympy

    from symbolic.networks.generic import probes as generic

    archs = config.get("architectures")
    if set(config) == {"model_type"}:  # a type's default config: the analysis the survey row also uses
        m = generic.default_model(config["model_type"])
    else:
        m = generic.analyse(config, name=name, architecture=archs[0] if archs else None)
    f = m.params_formula()
    out = {"total": m.total, "formula_total": int(f.evaluate(m.formula_values()).total), "verified": m.verified,
           "in_fields": m.in_fields, "unexplained": list(m.unexplained), "values": m.values, "fields": m.fields,
           "expanded": str(sympy.expand(f.expr)), "active": m.active}
    if m.is_moe:
        out["active_formula_total"] = int(m.params_formula(active=True).evaluate(m.formula_values(active=True)).total)
    return out


def cache(config: dict) -> dict:
    from symbolic.networks.generic import cache as generic_cache

    c = generic_cache.cache_formula(config)
    return {"per_token": int(c.per_token), "per_sequence": int(c.per_sequence), "verified": c.verified,
            "windowed": int(c.windowed), "cap": c.cap,
            "class": c.cache_class, "measured": c.measured, "at_4x100": c.bytes_at(4, 100), "note": c.note}


def plain_forward(model_type: str) -> dict:
    """What transformers itself does for the type, apart from the generic path: its forward's arguments and outputs."""
    import inspect

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type))
        out = model(input_ids=torch.zeros((2, 8), dtype=torch.long), use_cache=True)
    return {"arguments": sorted(inspect.signature(model.forward).parameters), "outputs": sorted(out.keys())}


def preset(name: str) -> dict:
    from symbolic.networks import transformer as architectures

    _, config = architectures.resolve_config(name)
    return params(name, config)


def reference(config: dict) -> dict:
    sys.path.insert(0, str(HERE))
    from hf_reference import count

    return count(config)


def command_line(argv: list[str]) -> dict:
    """``symbolic.cli.main(argv)``: its exit status and everything written to file descriptors 1 and 2.

    Captured at the descriptors, as a subprocess's output would be, so that what a logging handler
    bound to the real stderr writes is seen too.
    """
    import os
    import tempfile

    from symbolic.cli import main

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            code = main(list(argv))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        out.seek(0)
        err.seek(0)
        return {"code": code, "out": out.read().decode("utf-8", "replace"), "err": err.read().decode("utf-8", "replace")}


def survey(model_type: str, with_params: bool) -> dict:
    from symbolic.networks.generic import survey as generic_survey

    row = generic_survey.survey_type(model_type)
    return {"row": row, "params": params(model_type, {"model_type": model_type}) if with_params else None}


def run(task: tuple) -> tuple:
    """One task: (kind, name, argument) -> (kind, name, result or {"error"})."""
    kind, name, arg = task
    work = {"params": lambda: params(name, arg), "cache": lambda: cache(arg), "forward": lambda: plain_forward(name),
            "presets": lambda: preset(name), "reference": lambda: reference(arg), "survey": lambda: survey(name, arg),
            "cli": lambda: command_line(arg)}
    try:
        return kind, name, work[kind]()
    except Exception as err:  # reported by the test that asked
        return kind, name, {"error": f"{type(err).__name__}: {err}"}


def tasks(request: dict) -> list[tuple]:
    """The request's work, the longest kinds first (caches run real prefills, the survey is many short tasks)."""
    from symbolic.networks.generic import probes as generic

    surveyed = set(generic.causal_lm_types()) if request.get("survey") else set()
    default = {name for name, c in request.get("params", {}).items() if set(c) == {"model_type"}
               and c["model_type"] == name and name in surveyed}
    out = [("cache", n, c) for n, c in request.get("cache", {}).items()]
    out += [("params", n, c) for n, c in request.get("params", {}).items() if n not in default]
    out += [("cli", n, argv) for n, argv in request.get("cli", {}).items()]
    out += [("presets", n, None) for n in request.get("presets", [])]
    out += [("reference", n, c) for n, c in request.get("reference", {}).items()]
    out += [("forward", t, None) for t in request.get("forward", [])]
    out += [("survey", t, t in default) for t in sorted(surveyed, key=lambda t: (t not in default, t))]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as err:
        print(f"torch or transformers not importable: {err}", file=sys.stderr)
        return SKIP
    request = json.load(sys.stdin)
    work = tasks(request)
    with Pool(args.jobs) as pool:
        done = pool.map(run, work, chunksize=1)
    out: dict = {key: {} for key in ("params", "cache", "forward", "presets", "reference", "cli")}
    rows = []
    for kind, name, result in done:
        if kind == "survey":
            # survey_type reports what transformers cannot build; any other exception is a bug of the survey
            rows.append(result.get("row", {"model_type": name, "built": False, "harness_error": result.get("error")}))
            if result.get("params") is not None:
                out["params"][name] = result["params"]
        else:
            out[kind][name] = result
    if request.get("known"):
        from symbolic.networks.generic import probes as generic

        imported, read = set(generic.transformers_types()), generic.known_types()
        out["known"] = {"missing": sorted(imported - read), "extra": sorted(read - imported)}
    if request.get("survey"):
        from symbolic.networks.generic import survey as generic_survey

        out["survey"] = {"rows": rows, "coverage": generic_survey.coverage(rows)}
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
