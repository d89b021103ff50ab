"""Number formats: one table of element types and weight formats (bytes, storage rule, compute dtype, GPU rate)."""

from .table import FORMATS, RATE_KEYS, ROLES, Format, get, names, nbytes, torch_dtype

__all__ = ["FORMATS", "RATE_KEYS", "ROLES", "Format", "get", "names", "nbytes", "torch_dtype"]
