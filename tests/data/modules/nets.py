"""Small modules for tests/test_modules.py: a dropout MLP, an attention block over S, bad cases, a tiny SDPA ViT."""
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


class SdpaAttention(nn.Module):
    """Self-attention through F.scaled_dot_product_attention; ``masked``: an additive float mask, ``p``: dropout."""

    def __init__(self, dim=32, heads=2, p=0.0, masked=False):
        super().__init__()
        self.heads, self.p, self.masked = heads, p, masked
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        mask = torch.zeros(s, s, dtype=x.dtype, device=x.device) if self.masked else None
        y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.p)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class TinyViT(nn.Module):
    """A tiny ViT: 4 × 4 patches, one pre-norm block with SDPA attention, mean-pooled head."""

    def __init__(self, dim=32, heads=2, p=0.0, masked=False, classes=10):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, stride=4)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SdpaAttention(dim, heads, p, masked)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(1))


class ScaledSdpa(nn.Module):
    """SDPA whose query is scaled by an fp32 buffer first (as rotary embeddings do): fp32 under autocast until SDPA."""

    def __init__(self, dim=32, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("scale", torch.ones(dim // heads))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q * self.scale, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class Norms(nn.Module):
    """A GroupNorm after a conv and a LayerNorm over its channels: the normalizations' saved statistics."""

    def __init__(self, channels=8):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.group = nn.GroupNorm(2, channels)
        self.layer = nn.LayerNorm(channels)
        self.head = nn.Linear(channels, channels)

    def forward(self, x):
        x = self.group(self.conv(x)).permute(0, 2, 3, 1)
        return self.head(self.layer(x))
