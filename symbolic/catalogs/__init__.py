"""Catalogues of hardware the planner answers questions about (GPUs and their memory)."""

from __future__ import annotations

from .gpu import GPU
from .gpus import GPUS, get, names

__all__ = ["GPU", "GPUS", "get", "names"]
