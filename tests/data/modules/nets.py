"""Small modules for tests/test_modules.py: a dropout MLP, an attention block over S, bad cases."""
import torch
from torch import nn


class DropMLP(nn.Module):
    def __init__(self, width=64, hidden=128, p=0.1):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.drop = nn.Dropout(p)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


class Attention(nn.Module):
    """One attention block written with matmul and softmax: B·S² scores."""

    def __init__(self, vocab=100, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        y = (scores @ v).transpose(1, 2).reshape(b, s, d)
        return self.head(x + self.proj(y))


def make_mlp(width=16):
    return DropMLP(width=width)


class Raises(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("no such layer\nsecond line")


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        if x.sum().item() > 0:
            return self.fc(x)
        return x


NOT_A_MODULE = 3


class Depthwise(nn.Module):
    """A pointwise then a depthwise convolution (groups = channels), as MobileNet and ConvNeXt blocks have."""
    def __init__(self, channels=8):
        super().__init__()
        self.pre = nn.Conv2d(channels, channels, 1)
        self.dw = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)

    def forward(self, x):
        return self.dw(self.pre(x))
