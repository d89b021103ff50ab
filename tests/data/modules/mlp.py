import torch
from torch import nn


class MLP(nn.Module):
    """Article A's network: gat, up, down, out."""
    def __init__(self, d_in=2048, d_h=4096, n_out=10):
        super().__init__()
        self.gat = nn.Linear(d_in, d_h)
        self.up = nn.Linear(d_h, d_h)
        self.down = nn.Linear(d_h, d_in)
        self.out = nn.Linear(d_in, n_out)

    def forward(self, x):
        g = torch.relu(self.gat(x))
        u = torch.relu(self.up(g))
        g = torch.relu(g + u)
        g = torch.relu(self.down(g))
        g = g + x
        return torch.softmax(self.out(g), dim=-1)
