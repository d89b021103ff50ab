"""SDPA's arguments as a dictionary and its boolean mask made additive: what both kernel modes read (issue 29)."""

from __future__ import annotations

from typing import Any


def additive_mask(mask: Any, dtype: Any) -> Any:
    """SDPA's additive mask: a boolean one as 0 where attended and -inf elsewhere, in the query's dtype."""
    import torch

    if mask is None or mask.dtype != torch.bool:
        return mask
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
    return torch.where(mask, zero, torch.scalar_tensor(float("-inf"), dtype=dtype, device=mask.device))


def sdpa_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``F.scaled_dot_product_attention``'s arguments by name, its defaults filled in."""
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    out = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}
    out.update(zip(names, args))
    out.update(kwargs)
    return out
