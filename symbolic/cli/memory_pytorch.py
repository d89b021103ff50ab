"""``symbolic memory ... --activations pytorch``: the plan with measured-PyTorch activation terms.

Not a command module of its own: ``cli/memory.py`` hands ``--activations pytorch`` here (issue 6).
The numbers come from ``symbolic.predict.memory_plan`` (no torch needed).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from ..units import format_bytes
from .common import CliError, print_json, table

ATTN = ("eager", "sdpa")
DEVICES = ("cpu", "cuda")


def add_options(group: argparse._ArgumentGroup) -> None:
    """``--attn`` and ``--device`` (used by ``--activations pytorch`` only)."""
    group.add_argument("--attn", choices=ATTN, help="with --activations pytorch: attention implementation "
                                                    "(default sdpa)")
    group.add_argument("--device", choices=DEVICES, help="with --activations pytorch: where the step runs, which "
                                                         "changes what autograd keeps (default cuda)")


def cmd_memory(args: argparse.Namespace, options: Mapping[str, Any]) -> int:
    """Print (or ``--json``) the plan with ``activation_bytes``."""
    from ..predict import memory_plan

    if args.mode != "train":
        raise CliError("--activations pytorch applies to --mode train")
    if getattr(args, "gpu", None) or getattr(args, "formula", False) or getattr(args, "term", None) \
            or getattr(args, "set", None):
        raise CliError("--activations pytorch does not support --gpu, --formula, --term or --set yet")
    options = {k: v for k, v in options.items() if k not in ("flash", "dropout", "logits")}
    data = memory_plan(args.model, precision=args.precision or "bf16", attn=args.attn or "sdpa",
                       device=args.device or "cuda", options=options)
    if args.json:
        print_json(data)
        return 0
    o = data["options"]
    print(f"{data['model']}: training memory, activations as PyTorch keeps them "
          f"({o['precision']}, {o['attn']}, {o['device']}; batch {o['batch']}, seq {o['seq']})")
    total = data["total_bytes"]
    rows = [("term", "bytes", "size", "share")]
    rows += [(k, f"{v:,}", format_bytes(v), f"{100 * v / total:.1f} %") for k, v in data["terms"].items()]
    rows.append(("total", f"{total:,}", format_bytes(total), ""))
    print(table(rows, "<>>>"))
    pred = data["activations_pytorch"]
    print(f"  activation_bytes = {pred['activation_bytes']:,} ({pred['formula']}, dropout at "
          f"{', '.join(pred['dropout']) or 'none'})")
    for note in data["notes"]:
        print(f"  note: {note}")
    return 0
