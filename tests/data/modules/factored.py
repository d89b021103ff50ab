"""A module for tests/test_module_plan.py: a weight built in every forward, FLOPs that do not grow with the batch."""
import torch
from torch import nn


class Factored(nn.Module):
    """A low-rank weight u·v multiplied out in the forward (as a merged LoRA weight is), then two Linear layers."""

    def __init__(self, width=32, rank=4, n_out=10):
        super().__init__()
        self.u = nn.Parameter(torch.zeros(width, rank))
        self.v = nn.Parameter(torch.zeros(rank, width))
        self.out = nn.Linear(width, n_out)

    def forward(self, x):
        return self.out(torch.relu(x @ (self.u @ self.v)))
