"""A transformer block of nn.MultiheadAttention for tests/test_module_mha.py: tokens in, mean-pooled classes out.

``weights`` 1: ``attn(x, x, x)`` (need_weights=True, head-averaged weights: F.multi_head_attention_forward's
explicit bmm and softmax); 0: ``need_weights=False`` (its SDPA call). ``batch_first`` 0: the sequence-first
layout, transposed around the attention. ``dropout``: the attention's dropout in tenths.
"""
from torch import nn


class Block(nn.Module):
    def __init__(self, dim=32, heads=2, weights=1, batch_first=1, dropout=0, classes=10):
        super().__init__()
        self.weights, self.batch_first = bool(weights), bool(batch_first)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout / 10, batch_first=self.batch_first)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        h = self.norm1(x) if self.batch_first else self.norm1(x).transpose(0, 1)
        a = self.attn(h, h, h)[0] if self.weights else self.attn(h, h, h, need_weights=False)[0]
        x = x + (a if self.batch_first else a.transpose(0, 1))
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(1))
