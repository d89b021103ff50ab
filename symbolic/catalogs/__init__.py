"""Catalogues of hardware the planner answers questions about (GPUs and their memory), and budgets of them."""

from __future__ import annotations

from .budget import Budget, as_budget, make_budget
from .gpu import GPU
from .gpus import GPUS, get, names

__all__ = ["GPU", "GPUS", "Budget", "as_budget", "get", "make_budget", "names"]
