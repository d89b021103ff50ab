"""The command line's way to a torch module (issue 29): --arg, --input, --loss and the model they shape.

``add_module_options`` adds the flags to a command that names a model; ``model_of`` turns the
command's model into what the planner takes: a ``ModuleNetwork`` for ``PATH.py:NAME`` (its file
imported: its code runs, because it was named), article A's network at other widths for
``mlp --arg d_in=512``, else the name itself. ``--set SIZE=N`` gives an input size its value.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..core.errors import single_line
from .common import CliError, table

ARG_HELP = ("a keyword argument of a PATH.py:NAME model's constructor (repeatable; an int, a float, true/false, else a "
            "string), or article A's widths for mlp (d_in, d_h, n_out)")
INPUT_HELP = ("an input of a PATH.py:NAME model's forward (repeatable): NAME=D1,D2,...[:DTYPE], a dimension a number, "
              "B (the batch) or a size name (its value with --set NAME=N); DTYPE a torch dtype (default the precision's)")
LOSS_HELP = "the loss applied to a PATH.py:NAME model's output when its forward does not return a scalar loss"

CHECKPOINT_HELP = ("the blocks of a torch module that --recompute full checkpoints and --fsdp shards, by qualified name "
                   "(blocks.0) or class name (Block), repeatable (default: every item of its largest nn.ModuleList "
                   "or nn.Sequential of one class)")
CONFIG_HELP = "a diffusers model's config (a JSON object of its constructor's arguments; --arg values override it)"
TASK_HELP = ("the task whose model class a Hugging Face config is planned as (default: the config's architectures, "
             "else its most specific head); a config that is not a causal LM is planned this way without it")


def _positive(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, not {text!r}")
    return int(text)


def add_lora_options(p: argparse.ArgumentParser) -> None:
    """params' --lora-rank and --lora-targets: the adapters peft adds to a torch module, counted beside its own."""
    group = p.add_argument_group("LoRA adapters (a torch module)")
    group.add_argument("--lora-rank", type=_positive, metavar="R",
                       help="also count the LoRA adapters of rank R that peft injects on --lora-targets (trainable) "
                            "beside the module's own parameters (frozen)")
    group.add_argument("--lora-targets", metavar="NAME[,NAME...]",
                       help="with --lora-rank: peft's target_modules, module names or all-linear")
    group.add_argument("--qlora", action="store_true",
                       help="with --lora-rank: the frozen module's linears in bitsandbytes' NF4 (double quantization), "
                            "the rest bf16 (fp32 with --precision bf16-mixed, as peft's prepare_model_for_kbit_training "
                            "leaves it); also prints the frozen base's bytes")


def lora_of(args: argparse.Namespace) -> Any:
    """params' LoRA settings (a ``networks.module.lora.Spec``), or None; each flag needs the other."""
    from ..networks.module import lora
    from ..options import table as opts

    rank, targets = getattr(args, "lora_rank", None), getattr(args, "lora_targets", None)
    if rank is None and targets is None:
        if getattr(args, "qlora", False):
            raise CliError("--qlora goes with --lora-rank and --lora-targets (QLoRA trains adapters on the 4-bit base)")
        return None
    if rank is None or targets is None:
        raise CliError("--lora-rank and --lora-targets go together (peft has no default targets for a torch module)")
    try:
        return lora.Spec(rank, opts.parse_names("lora_targets", targets), qlora=bool(getattr(args, "qlora", False)))
    except opts.PlanOptionError as err:
        raise CliError(str(err)) from None


def add_module_options(p: argparse.ArgumentParser, *, sets: bool = False) -> None:
    """--arg, --input, --loss (and --set for a command without one)."""
    from ..networks.module.source import LOSSES
    from ..networks.module.transformers_task import TASKS

    group = p.add_argument_group("a torch module (PATH.py:NAME; importing the file runs its code)")
    group.add_argument("--arg", action="append", metavar="KEY=VALUE", help=ARG_HELP)
    group.add_argument("--input", action="append", metavar="NAME=D1,D2,...[:DTYPE]", help=INPUT_HELP)
    planner = p._option_string_actions.get("--loss")
    if planner is None:
        group.add_argument("--loss", dest="loss", choices=LOSSES, help=LOSS_HELP)
    # else the planner's --loss (options.table) names a module's loss too
    group.add_argument("--config", metavar="FILE.json", help=CONFIG_HELP)
    group.add_argument("--checkpoint-modules", action="append", metavar="NAME_OR_CLASS", help=CHECKPOINT_HELP)
    configs = p.add_argument_group("a Hugging Face config planned as a task's model (not a causal LM, or --task)")
    configs.add_argument("--task", choices=tuple(TASKS), help=TASK_HELP)
    configs.add_argument("--images", type=_positive, metavar="N", help="images per sequence of a vision-language "
                         "model (its n_img)")
    configs.add_argument("--image-size", metavar="H,W", help="the image's height and width in pixels (a "
                         "vision-language model's H_img, W_img; an image model's H, W)")
    if sets:
        group.add_argument("--set", action="append", metavar="SIZE=N", help="the value of an --input size name")


def model_of(args: argparse.Namespace) -> Any:
    """The model the command plans: a probed torch module, article A's network at other widths, or the name."""
    from ..networks.module import files, resolve
    from ..networks.shape import ARTICLE_A_MODELS, article_a_shape

    model = args.model
    module_loss = getattr(args, "loss", None) if resolve.is_module_model(model) else None
    given = [flag for flag, value in (("--arg", args.arg), ("--input", args.input), ("--loss", module_loss),
                                      ("--checkpoint-modules", getattr(args, "checkpoint_modules", None))) if value]
    if isinstance(model, str) and model in ARTICLE_A_MODELS:
        if args.input:
            raise CliError(f"{model}: --input applies to a PATH.py:NAME model, not article A's network")
        _no_task_options(args, model, config=False)
        return article_a_shape(model, files.parse_args(args.arg)) if args.arg else model
    if not resolve.is_module_model(model):
        source = _transformers_source(args)
        if source is not None:
            return resolve.module_network(_checkpointing(args, source))
        if given:
            raise CliError(f"{given[0]} applies to a torch module (PATH.py:NAME) or mlp, not {model!r}")
        return model
    _no_task_options(args, model, config=not files.is_file_model(model))
    inputs = files.parse_inputs(args.input)
    config = _config_file(args, model)
    if hasattr(args, "loss"):
        args.loss = None  # the module's own loss, not the planner's option
    if files.is_file_model(model):
        sizes = _sizes(args, {n for i in inputs for n in i.size_names})
        options = resolve.ModuleOptions(files.parse_args(args.arg), inputs, module_loss, sizes)
        return resolve.module_network(_checkpointing(args, resolve.module_source(model, options)))
    options = resolve.ModuleOptions(files.parse_args(args.arg), inputs, None, {}, config)
    source = resolve.module_source(model, options)
    source = resolve.with_sizes(source, _sizes(args, set(source.size_names)), module_loss)
    return resolve.module_network(_checkpointing(args, source))


def _checkpointing(args: argparse.Namespace, source: Any) -> Any:
    """The source with the blocks --checkpoint-modules names (names matched on the module, never evaluated)."""
    import dataclasses

    names = getattr(args, "checkpoint_modules", None)
    if not names:
        return source
    if not _blocks_used(args):
        raise CliError("--checkpoint-modules names the blocks --recompute full checkpoints and --fsdp shards: give "
                       "one of them (alone it changes nothing)")
    return dataclasses.replace(source, checkpoint=tuple(dict.fromkeys(n.strip() for n in names if n.strip())))


def _blocks_used(args: argparse.Namespace) -> bool:
    """Whether the command uses a module's blocks: --recompute full, --fsdp, or plan (whose search tries both)."""
    searched = hasattr(args, "global_batch")
    return searched or getattr(args, "recompute", None) == "full" or bool(getattr(args, "fsdp", False))


def _no_task_options(args: argparse.Namespace, model: str, *, config: bool) -> None:
    """--task, --images, --image-size (and --config unless ``config``) apply to configs only: one line otherwise."""
    flags = [("--task", getattr(args, "task", None)), ("--images", getattr(args, "images", None)),
             ("--image-size", getattr(args, "image_size", None))]
    for flag, value in flags + ([] if config else [("--config", getattr(args, "config", None))]):
        if value:
            what = "a diffusers model" if flag == "--config" else "a Hugging Face config"
            raise CliError(f"{flag} applies to {what}, not {single_line(model)!r}")


def _config_file(args: argparse.Namespace, model: str) -> dict[str, Any] | None:
    """The JSON object of --config FILE.json (diffusers models only; read with the bounded user-file reader)."""
    from ..networks.transformer.configs import read_json

    path = getattr(args, "config", None)
    if path is None:
        return None
    if not model.startswith("diffusers:"):
        raise CliError(f"--config applies to a diffusers model, not {single_line(model)!r} (give --arg KEY=VALUE)")
    return read_json(path)


def is_task_model(args: argparse.Namespace) -> bool:
    """Whether the command's config is planned as a task's module (--task, or not a causal LM)."""
    from ..core.errors import UserError
    from ..networks import transformer as architectures
    from ..networks.module import configs

    try:
        _, config = architectures.resolve_config(args.model)
    except UserError:
        return False
    return configs.wants_task(config, getattr(args, "task", None))


def _transformers_source(args: argparse.Namespace) -> Any:
    """A config's task model as a ModuleSource when --task is given or its model is not a causal LM, else None."""
    from ..core.errors import UserError
    from ..networks import transformer as architectures
    from ..networks.module import configs, resolve, transformers_task

    task = getattr(args, "task", None)
    try:
        name, config = architectures.resolve_config(args.model)
    except UserError:
        if task or getattr(args, "images", None) or getattr(args, "image_size", None):
            raise
        return None  # not a config: the planner's own answer or error
    if getattr(args, "config", None):
        raise CliError("--config applies to a diffusers model; a Hugging Face config is the model argument itself")
    if not configs.wants_task(config, task):
        if getattr(args, "images", None) or getattr(args, "image_size", None):
            raise CliError(f"--images and --image-size apply to a vision-language model (--task image-text-to-text), "
                           f"not {name}")
        return None
    for flag, value in (("--input", args.input), ("--arg", args.arg)):
        if value:
            raise CliError(f"{flag} applies to a PATH.py:NAME model; {name} takes its task's inputs "
                           "(their sizes with --set NAME=N, --images, --image-size)")
    source = transformers_task.cached_source(name, config, task)
    size = getattr(args, "image_size", None)
    images = configs.image_sizes(source, getattr(args, "images", None), configs.image_size(size) if size else None)
    return resolve.with_sizes(source, {**images, **_sizes(args, set(source.size_names))})


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


def print_params(network: Any, as_json: bool, lora: Any = None) -> int:
    """A torch module's parameters: one row per parameter group, formula and count, the exact total.

    ``lora`` (a ``networks.module.lora.Spec``): also the adapters peft adds, trainable, the module's own frozen.
    """
    from ..text import printing
    from .common import print_json

    rows = network.params_table()
    found = network.lora_adapters(lora) if lora is not None else None
    if as_json:
        data = {"name": network.name, "total": network.total, "values": network.numbers,
                "groups": [{"name": k, "formula": printing.text(e), "count": n, "note": note} for k, e, n, note in rows]}
        if found is not None:
            data["lora"] = {"rank": lora.rank, "targets": list(lora.targets), "modules": list(found.modules),
                            "trainable": found.total, "frozen": network.total}
            if lora.qlora:
                data["lora"]["qlora"] = _nf4(network, found)
        print_json(data)
        return 0
    print(f"{network.name}: {network.total:,} parameters (a torch module, probed on the meta device)")
    if found is not None:
        print(f"  LoRA rank {lora.rank} on {', '.join(lora.targets)} ({len(found.modules)} modules, peft's adapters): "
              f"{found.total:,} trainable, the module's {network.total:,} frozen")
    if found is not None and lora.qlora:
        nf4 = _nf4(network, found)
        print(f"  QLoRA: {nf4['linears']} linears ({nf4['quantized']:,} parameters) in NF4 with double quantization, "
              f"the other {network.total - nf4['quantized']:,} bf16: the frozen base holds {nf4['frozen_bytes']:,} bytes")
    for note in getattr(network.module_source, "notes", ()):
        print(f"  {note}")
    body = [("group", "formula", "count")] + [(k, printing.text(e), f"{n:,}") for k, e, n, _ in rows]
    print(table(body, "<<>"))
    if network.numbers:
        print("  at " + ", ".join(f"{k}={v}" for k, v in network.numbers.items()))
    measured = [k for k, _, _, note in rows if note]
    if measured:
        print(f"  note: {', '.join(measured)}: shape not expressed in the constructor's integer arguments "
              "(the number measured on the meta device)")
    return 0


def _nf4(network: Any, found: Any) -> dict[str, int]:
    """A QLoRA base's NF4 linears, their parameters and the frozen base's bytes (``library.lora.nf4_base_bytes``)."""
    from ..library import lora as terms

    frozen = terms.nf4_base_bytes([(1, n) for n in found.quantized], network.total)
    return {"linears": len(found.quantized), "quantized": sum(found.quantized), "frozen_bytes": int(frozen)}


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
