"""Modules with a repeated stack for tests/test_module_recompute.py: a ViT and a residual CNN.

``grad_checkpointing`` True runs each block under ``torch.utils.checkpoint(..., use_reentrant=False)`` in the
module's own forward, as timm's ``set_grad_checkpointing`` does (``every``: blocks N, 2N, ... only).
"""
import torch
from nets import SdpaAttention
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SdpaAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def _run(blocks, x, checkpointing, every):
    for i, block in enumerate(blocks, 1):
        x = checkpoint(block, x, use_reentrant=False) if checkpointing and i % every == 0 else block(x)
    return x


class ViT(nn.Module):
    """4 × 4 patches, ``depth`` pre-norm blocks in an nn.ModuleList, mean-pooled head."""

    def __init__(self, dim=32, depth=4, heads=2, classes=10):
        super().__init__()
        self.grad_checkpointing, self.every = False, 1
        self.patch = nn.Conv2d(3, dim, 4, stride=4)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(_run(self.blocks, x, self.grad_checkpointing, self.every)).mean(1))


class Residual(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


class ResCNN(nn.Module):
    """A stem, one nn.Sequential stage of residual blocks with batch norm, a pooled head."""

    def __init__(self, channels=8, depth=3, classes=10):
        super().__init__()
        self.grad_checkpointing, self.every = False, 1
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, stride=2, padding=1), nn.BatchNorm2d(channels), nn.ReLU())
        self.stage = nn.Sequential(*(Residual(channels) for _ in range(depth)))
        self.head = nn.Linear(channels, classes)

    def forward(self, x):
        return self.head(_run(self.stage, self.stem(x), self.grad_checkpointing, self.every).mean(dim=(2, 3)))


class Plain(nn.Module):
    """No repeated stack: nothing for recompute full to checkpoint."""

    def __init__(self, width=8):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, width), nn.Linear(width, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))
