"""The command line's way to a torch module (issue 29): --arg, --input, --loss and the model they shape.

``add_module_options`` adds the flags to a command that names a model; ``model_of`` turns the
command's model into what the planner takes: a ``ModuleNetwork`` for ``PATH.py:NAME`` (its file
imported: its code runs, because it was named), article A's network at other widths for
``mlp --arg d_in=512``, else the name itself. ``--set SIZE=N`` gives an input size its value.
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import CliError, table

ARG_HELP = ("a keyword argument of a PATH.py:NAME model's constructor (repeatable; an int, a float, true/false, else a "
            "string), or article A's widths for mlp (d_in, d_h, n_out)")
INPUT_HELP = ("an input of a PATH.py:NAME model's forward (repeatable): NAME=D1,D2,...[:DTYPE], a dimension a number, "
              "B (the batch) or a size name (its value with --set NAME=N); DTYPE a torch dtype (default the precision's)")
LOSS_HELP = "the loss applied to a PATH.py:NAME model's output when its forward does not return a scalar loss"


def add_module_options(p: argparse.ArgumentParser, *, sets: bool = False) -> None:
    """--arg, --input, --loss (and --set for a command without one)."""
    from ..networks.module.source import LOSSES

    group = p.add_argument_group("a torch module (PATH.py:NAME; importing the file runs its code)")
    group.add_argument("--arg", action="append", metavar="KEY=VALUE", help=ARG_HELP)
    group.add_argument("--input", action="append", metavar="NAME=D1,D2,...[:DTYPE]", help=INPUT_HELP)
    planner = p._option_string_actions.get("--loss")
    if planner is None:
        group.add_argument("--loss", dest="loss", choices=LOSSES, help=LOSS_HELP)
    # else the planner's --loss (options.table) names a module's loss too
    if sets:
        group.add_argument("--set", action="append", metavar="SIZE=N", help="the value of an --input size name")


def model_of(args: argparse.Namespace) -> Any:
    """The model the command plans: a probed torch module, article A's network at other widths, or the name."""
    from ..networks.module import files, resolve
    from ..networks.shape import ARTICLE_A_MODELS, article_a_shape

    model = args.model
    module_loss = getattr(args, "loss", None) if resolve.is_module_model(model) else None
    given = [flag for flag, value in (("--arg", args.arg), ("--input", args.input), ("--loss", module_loss))
             if value]
    if isinstance(model, str) and model in ARTICLE_A_MODELS:
        if args.input:
            raise CliError(f"{model}: --input applies to a PATH.py:NAME model, not article A's network")
        return article_a_shape(model, files.parse_args(args.arg)) if args.arg else model
    if not resolve.is_module_model(model):
        if given:
            raise CliError(f"{given[0]} applies to a torch module (PATH.py:NAME) or mlp, not {model!r}")
        return model
    inputs = files.parse_inputs(args.input)
    sizes = _sizes(args, {n for i in inputs for n in i.size_names})
    options = resolve.ModuleOptions(files.parse_args(args.arg), inputs, module_loss, sizes)
    if hasattr(args, "loss"):
        args.loss = None  # the module's own loss, not the planner's option
    return resolve.module_network(model, options)


def _sizes(args: argparse.Namespace, names: set[str]) -> dict[str, int]:
    """The --set items that name an input size (taken out of args.set: the rest are --term symbols)."""
    from .common import parse_sets, whole

    rest, out = [], {}
    for item in getattr(args, "set", None) or ():
        name, _, value = item.partition("=")
        if name.strip() in names:
            out[name.strip()] = whole(value.strip())
        else:
            rest.append(item)
    parse_sets(rest)  # a repeated or malformed item is still an error
    if hasattr(args, "set"):
        args.set = rest or None
    return out


def print_params(network: Any, as_json: bool) -> int:
    """A torch module's parameters: one row per parameter group, formula and count, the exact total."""
    from ..text import printing
    from .common import print_json

    rows = network.params_table()
    if as_json:
        print_json({"name": network.name, "total": network.total, "values": network.numbers,
                    "groups": [{"name": k, "formula": printing.text(e), "count": n, "note": note}
                               for k, e, n, note in rows]})
        return 0
    print(f"{network.name}: {network.total:,} parameters (a torch module, probed on the meta device)")
    body = [("group", "formula", "count")] + [(k, printing.text(e), f"{n:,}") for k, e, n, _ in rows]
    print(table(body, "<<>"))
    if network.numbers:
        print("  at " + ", ".join(f"{k}={v}" for k, v in network.numbers.items()))
    measured = [k for k, _, _, note in rows if note]
    if measured:
        print(f"  note: {', '.join(measured)}: shape not expressed in the constructor's integer arguments "
              "(the number measured on the meta device)")
    return 0


def print_widths(network: Any, as_json: bool) -> int:
    """Article A's network at other widths: each weight's formula and count, the total."""
    from ..text import printing
    from .common import print_json

    terms = network.params.terms
    counts = {t.key: int(network.value(t.expr)) for t in terms}
    if as_json:
        print_json({"name": network.name, "total": network.total, "values": network.numbers, "components": counts})
        return 0
    print(f"{network.name}: {network.label}, {network.total:,} parameters")
    body = [("component", "formula", "parameters")] + [(t.key, printing.text(t.expr), f"{counts[t.key]:,}")
                                                       for t in terms]
    print(table(body, "<<>"))
    print("  at " + ", ".join(f"{k}={v}" for k, v in network.numbers.items()))
    return 0
