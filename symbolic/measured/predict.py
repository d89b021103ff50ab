"""Bytes a real model's training step saves for backward, from its config alone (no torch).

``activation_bytes("gpt2", batch=8, seq=1024, precision="bf16", attn="sdpa", device="cuda")``
reads the preset or config.json (``symbolic.networks.transformer``), takes its sizes, dropout
probabilities and MLP activation, picks the implementation family (``gpt2`` or ``llama``; other
models get the family of the same block structure and a note) and evaluates
``symbolic.library.activations_pytorch`` at that point. ``symbolic memory CONFIG --activations
pytorch`` reports the same number as ``activation_bytes``: there the planner builds it
(``planning.plan(model, activations="pytorch", ...)``, ``planning.pytorch``) as the plan's
``activations``, ``inputs`` and ``logits`` terms, next to the model states.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.errors import UserError
from ..library import activations_pytorch as act

PRECISIONS = ("fp32", "bf16")
SIZES = ("H", "L", "a", "a_kv", "d_head", "d_ff", "V", "n_pos")


def config_of(model: str) -> tuple[str, dict[str, Any]]:
    """(name, config dict) of a preset name, a config.json path, a model folder or a cached hub id."""
    from ..networks.transformer import resolve_config

    return resolve_config(model)


def sizes_of(name: str, config: Mapping[str, Any]) -> dict[str, int]:
    """The architecture symbols' numbers (H, L, a, a_kv, d_head, d_ff, V, n_pos) of a config."""
    from ..networks.transformer import spec_from_config

    numbers = spec_from_config(config, name=name).numbers()
    return {k: int(v) for k, v in numbers.items() if k in SIZES}


def activation_bytes(model: str, *, batch: int, seq: int, precision: str = "bf16", attn: str = "sdpa",
                     device: str = "cuda", config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Predicted bytes saved for backward by one training step (see the module docstring).

    Returns plain data: ``activation_bytes`` (exact int), ``terms`` (bytes per term), the
    formula as text, the family, the setup and a note when the family is approximate.
    """
    if precision not in PRECISIONS:
        raise UserError(f"--activations pytorch models pure {' or '.join(PRECISIONS)} training "
                         f"(what was measured), not {precision!r}")
    for label, value in (("batch", batch), ("seq", seq)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{label} must be a whole number ≥ 1")
    if config is None:
        name, config = config_of(model)
    else:
        name = model
    family, setup, note = act.setup_for(config, precision=precision, attn=attn, device=device)
    saved = act.saved(family, setup)
    values = {**sizes_of(name, config), "B": batch, "S": seq}
    result = saved.formula.evaluate(saved.formula.restrict(values))
    return {
        "model": name,
        "family": family,
        "precision": precision,
        "attn": attn,
        "device": device,
        "dropout": sorted(setup.dropout),
        "batch": batch,
        "seq": seq,
        "activation_bytes": int(result.total),
        "terms": {t.key: int(v) for t, v in result.terms},
        "by_module": saved.by_module(values),
        "formula": saved.formula.key,
        "expression": saved.formula.text(),
        "values": {k: int(v) for k, v in values.items()},
        "note": note,
    }
