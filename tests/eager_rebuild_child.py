"""The eager checkpointed layer's rebuild, measured on the CPU for ``test_eager_rebuild.py`` (issue 28).

torchtitan 9dec370 ``apply_ac`` wraps each block in ``checkpoint_wrapper(block, preserve_rng_state=False)`` (a
non-reentrant ``torch.utils.checkpoint``), under ``selective_ac_option = 'op'`` with its per-op policy
(``saved_for_backward_child._policy``). Measured here eager (no compile), bf16, one thread, with the live tensor
bytes ``measure`` tracks (each ATen output's storage, weakly referenced):

- ``block``: one Llama-shaped block with exactly the tensors ``activations.layer_parts`` counts for the eager
  gated flash layer (``Block``: separate bias-free projections, rotary by ``rotate_half`` on constant tables, the
  CPU's flash kernel, SiLU·up; each RMSNorm keeps its 16-bit input and its fp32 1/rms, as a fused kernel does:
  ``_Norm``), plain, fully checkpointed and under the per-op policy, at two widths and five (B, S), B·S from
  0.17·H to 4·H: the bytes its forward leaves (over its start, the output left out) and the live peak of its
  backward over its start, each parameter gradient freed once accumulated (a post-accumulate-grad hook, as an
  optimizer in backward frees it);
- ``step``: two such blocks between an embedding, a final norm and a bias-free head, the loss eager over the fp32
  upcast logits as torchtitan's ``cross_entropy_loss`` (9dec370 ``train.py``), each block wrapped as ``apply_ac``
  wraps it: one SGD step's peaks by phase (``measure.step_peak``, the dispatch method; plain SGD stepped in
  backward, each gradient freed as it is written, as the plan's backward phase holds no parameter gradient) and
  what is alive before it (parameters, token ids and labels), at a wide vocabulary (the loss leads) and a narrow
  one with a wide MLP (the rebuild leads) at B·S of 0.5, 0.75, 1.5 and 4 H.

Writes one JSON object on stdout; exits with 77 when torch is missing.
"""

from __future__ import annotations

from collections import defaultdict

import child_main  # this folder: sys.path[0] of a child script

WIDTHS = {"narrow": {"hidden": 64, "heads": 4, "ffn": 176}, "wide": {"hidden": 96, "heads": 6, "ffn": 320}}
POINTS = ((1, 16), (1, 32), (2, 32), (3, 48), (4, 64))  # (B, S) of one block: B·S from 0.17·H to 4·H
NARROW_VOCABULARY = {"hidden": 64, "heads": 4, "ffn": 512, "vocab": 64}
STEPS = {"loss": ({"hidden": 64, "heads": 4, "ffn": 176, "vocab": 2048}, (3, 48)),
         "rebuild": (NARROW_VOCABULARY, (4, 64)), "rebuild 1.5": (NARROW_VOCABULARY, (2, 48)),
         "rebuild 0.75": (NARROW_VOCABULARY, (1, 48)), "rebuild 0.5": (NARROW_VOCABULARY, (1, 32))}
LAYERS = 2


def _modules(torch: object) -> tuple[type, type]:
    """The norm and the block (classes made here: the test file imports no torch)."""
    nn, functional = torch.nn, torch.nn.functional

    class _RMS(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps):  # noqa: ANN001, ANN205
            rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
            ctx.save_for_backward(x, weight, rstd)
            return (x.float() * rstd).to(x.dtype) * weight

        @staticmethod
        def backward(ctx, grad):  # noqa: ANN001, ANN205
            x, weight, rstd = ctx.saved_tensors
            normed = x.float() * rstd
            g = grad.float() * weight.float()
            dx = rstd * (g - normed * (g * normed).mean(-1, keepdim=True))
            return dx.to(x.dtype), (grad.float() * normed).sum((0, 1)).to(weight.dtype), None

    class Norm(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(width))

        def forward(self, x):  # noqa: ANN001, ANN202
            return _RMS.apply(x, self.weight, 1e-6)

    class Block(nn.Module):
        def __init__(self, hidden: int, heads: int, ffn: int) -> None:
            super().__init__()
            self.heads, self.dim = heads, hidden // heads
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))
            self.w1, self.w3 = nn.Linear(hidden, ffn, bias=False), nn.Linear(hidden, ffn, bias=False)
            self.w2 = nn.Linear(ffn, hidden, bias=False)
            self.attention_norm, self.ffn_norm = Norm(hidden), Norm(hidden)

        def forward(self, x, cos, sin):  # noqa: ANN001, ANN202
            b, s, _ = x.shape
            h = self.attention_norm(x)
            q, k, v = (w(h).view(b, s, self.heads, self.dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
            half = self.dim // 2

            def rotate(z):  # noqa: ANN001, ANN202
                return torch.cat((-z[..., half:], z[..., :half]), -1)

            q, k = q * cos + rotate(q) * sin, k * cos + rotate(k) * sin
            o = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
            h = self.ffn_norm(x)
            return x + self.w2(functional.silu(self.w1(h)) * self.w3(h))

    return Norm, Block


def _wrap(torch: object, block: object, how: str) -> object:
    """``apply_ac``'s wrapper: ``full``, ``ops`` (9dec370's policy) or ``none`` (the block itself)."""
    from saved_for_backward_child import _policy
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils import checkpoint

    if how == "none":
        return block
    if how == "full":
        return checkpoint_wrapper(block, preserve_rng_state=False)

    def context() -> tuple:
        return checkpoint.create_selective_checkpoint_contexts(_policy(torch, defaultdict(int)))
    return checkpoint_wrapper(block, context_fn=context, preserve_rng_state=False)


def _tables(torch: object, seq: int, dim: int) -> tuple:
    angles = torch.arange(seq)[:, None] * torch.rand(dim // 2)[None]
    return (torch.cat((angles, angles), -1).cos().to(torch.bfloat16),
            torch.cat((angles, angles), -1).sin().to(torch.bfloat16))


def block() -> dict:
    """One block, plain and wrapped, at each width and point: forward's kept bytes, backward's peak over start."""
    import torch

    from symbolic.measured.measure import _LiveBytes, tracking_mode

    _, block_class = _modules(torch)
    out: dict = {}
    for name, w in WIDTHS.items():
        torch.manual_seed(0)
        layer = block_class(w["hidden"], w["heads"], w["ffn"]).to(torch.bfloat16)
        for p in layer.parameters():  # each gradient freed once accumulated, as an optimizer in backward frees it
            p.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))
        for how in ("none", "full", "ops"):
            wrapped, rows = _wrap(torch, layer, how), []
            for batch, seq in POINTS:
                x = torch.randn(batch, seq, w["hidden"], dtype=torch.bfloat16, requires_grad=True)
                cos, sin = _tables(torch, seq, w["hidden"] // w["heads"])
                grad = torch.randn_like(x)
                live = _LiveBytes()
                for t in (x, cos, sin, grad, *layer.parameters()):
                    live.track(t)
                before = live.current
                with tracking_mode(live.track):
                    h = x.clone()  # the block's own input, kept by the checkpoint only
                    y = wrapped(h, cos, sin)
                    del h
                    kept = live.current - before - y.untyped_storage().nbytes()
                    start = live.current
                    live.phase = "backward"
                    y.backward(grad)
                    del y
                rows.append({"batch": batch, "seq": seq, "kept": kept,
                             "backward": live.phase_peaks["backward"] - start})
                x.grad = None
            out.setdefault(name, {})[how] = rows
    return {"widths": WIDTHS, "rows": out}


def step() -> dict:
    """The two-block model, each block wrapped (full, ops), one SGD step's phase peaks at each vocabulary."""
    import torch

    from symbolic.measured import measure

    norm_class, block_class = _modules(torch)
    nn = torch.nn

    class Model(nn.Module):
        def __init__(self, w: dict, how: str) -> None:
            super().__init__()
            self.embed = nn.Embedding(w["vocab"], w["hidden"])
            self.layers = nn.ModuleList(_wrap(torch, block_class(w["hidden"], w["heads"], w["ffn"]), how)
                                        for _ in range(LAYERS))
            self.norm, self.output = norm_class(w["hidden"]), nn.Linear(w["hidden"], w["vocab"], bias=False)
            self.dim = w["hidden"] // w["heads"]

        def forward(self, ids):  # noqa: ANN001, ANN202
            cos, sin = _tables(torch, ids.shape[1], self.dim)
            h = self.embed(ids)
            for layer in self.layers:
                h = layer(h, cos, sin)
            return self.output(self.norm(h))

    out: dict = {}
    for case, (w, (batch, seq)) in STEPS.items():
        for how in ("full", "ops"):
            torch.manual_seed(0)
            model = Model(w, how).to(torch.bfloat16)
            ids = torch.randint(0, w["vocab"], (batch, seq), generator=torch.Generator().manual_seed(0))
            labels = ids.clone()

            def loss_fn(logits, labels=labels):  # noqa: ANN001, ANN202
                return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))

            loss_fn.held = (labels,)
            peak = measure.step_peak(model, ids, loss_fn, steps=1, in_backward=True,
                                     optimizer=lambda params: torch.optim.SGD(params, lr=1e-3))
            out.setdefault(case, {"widths": w, "batch": batch, "seq": seq})[how] = {
                "baseline": peak.baseline_bytes, **{phase: peak.phases[phase] for phase in ("forward", "backward")}}
    return out


if __name__ == "__main__":
    child_main.run(lambda tmp: {"block": block(), "step": step()}, threads=1)
