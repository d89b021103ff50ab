"""Torch measurements for ``test_compile_step.py`` (issue 28, ``--compile``): the compiled step's peak by phase.

The tiny bf16 GPT-2 and Llama of ``compile_child.py`` (two layers, sdpa, no dropout, no cache), each block
compiled by inductor (torchtitan's ``apply_compile``), the loss compiled too (torchtune's ``compile_loss``) or
eager (torchtitan at 9dec370, ``--no-compile-loss``), trained
with PyTorch's default AdamW (the CPU's single-tensor loop), one thread. Each phase's peak (forward with the
loss, backward, optimizer) is read from the CPU allocator's own events (``measure.step_peak`` with
``method="profiler"``: ``torch.profiler``'s ``profile_memory``, each phase a ``record_function`` range): inductor's
generated code allocates its buffers with ``empty_strided_cpu``, below the dispatcher, where the dispatch method's
``TorchDispatchMode`` does not see them, and the allocator does (``inductor_forward_bytes``: what it hands out
inside the compiled graphs' calls in one forward). ``phases`` are the allocator's peaks; ``tensor_phases`` the
same with each ATen call's own scratch left out (the CPU's bf16 matmul workspace, oneDNN's), as the eager step's
dispatch measurement leaves it out: what the plan is compared with. (Measured while writing this: the eager step
of the same models read both ways agreed within 48 bytes in every phase.)

``dynamic=True`` and no size of 1: one compilation per graph serves every point; a warm-up step at each point
compiles whatever it needs, and the two measured steps (the second in the steady state) compile nothing (dynamo's
frame counter, written out). ~60 s with a cold inductor cache, ~18 s warm (inductor's on-disk FX graph cache,
which every child shares), one core. Writes one JSON object on stdout; exits with 77 when torch or
transformers cannot be imported, or when inductor finds no C++ compiler.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from compile_child import LAYERS, _model, _torch  # noqa: E402  (the same models and checks)

# (B, S): the head's moment leads at the first, the loss's at the second (the terms read there); each is
# checked at an independent point, the loss's at the third, the head's at the fourth. No size of 1, B != S.
POINTS = ((2, 32), (3, 48), (2, 80), (3, 20))


def _loss(torch: object, labels: object, compiled: object):  # noqa: ANN202
    """The loss of the model's output, ``labels`` held through the step (``measure``'s ``held``)."""

    def loss_fn(output):  # noqa: ANN001, ANN202
        return compiled(output.logits, labels)

    loss_fn.held = (labels,)
    return loss_fn


def _step(torch: object, model: object, ids: object, loss_fn: object) -> dict:
    """The step's peaks by phase (the profiler), after a warm-up step: ``compiled`` counts the frames dynamo
    compiled while it was measured (none: every graph was compiled before)."""
    from torch._dynamo.utils import counters

    from symbolic.measured import measure

    loss_fn(model(input_ids=ids)).backward()  # warm-up: anything compiled for these sizes is compiled now
    model.zero_grad(set_to_none=True)
    before = counters["frames"]["ok"]
    peak = measure.step_peak(model, {"input_ids": ids}, loss_fn, method="profiler", steps=2)
    return {"peak": peak.peak_bytes, "phase": peak.phase, "phases": peak.phases, "tensor_phases": peak.tensor_phases,
            "compiled": counters["frames"]["ok"] - before}


def _inductor_bytes(torch: object, model: object, ids: object) -> int:
    """Bytes the allocator hands out inside inductor's generated code in one forward (``## Call CompiledFxGraph``
    ranges): what a ``TorchDispatchMode`` does not see, which the profiler does."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model(input_ids=ids)
    events = list(prof.profiler.kineto_results.events())
    graphs = [(e.start_ns(), e.end_ns()) for e in events if e.name().startswith("## Call CompiledFxGraph")]
    return sum(e.nbytes() for e in events if e.name() == "[memory]" and e.nbytes() > 0
               and any(start <= e.start_ns() <= end for start, end in graphs))


def measure_family(torch: object, transformers: object, family: str, losses: dict[str, object]) -> dict:
    """The compiled blocks' step with each loss (``losses``: compiled, eager) at every point, by phase (the
    profiler), and what inductor's code allocates in one forward."""
    rows = []
    model, config = _model(torch, transformers, family, backend="inductor")
    for batch, seq in POINTS:
        torch.manual_seed(1)
        ids = torch.randint(0, config.vocab_size, (batch, seq))
        labels = torch.randint(0, config.vocab_size, (batch, seq))
        rows.append({"batch": batch, "seq": seq,
                     **{name: _step(torch, model, ids, _loss(torch, labels, fn)) for name, fn in losses.items()}})
    inductor = _inductor_bytes(torch, model, ids)
    return {"config": config.to_dict(), "points": rows, "inductor_forward_bytes": inductor}


def main() -> None:
    torch, transformers = _torch()
    torch.set_num_threads(1)
    functional = torch.nn.functional

    def cross_entropy(logits, labels):  # noqa: ANN001, ANN202  (compile_child's loss)
        return functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))

    # torchtune's compile_loss; torchtitan at 9dec370 leaves the loss eager (--no-compile-loss)
    losses = {"compiled_loss": torch.compile(cross_entropy, backend="inductor", dynamic=True), "eager_loss": cross_entropy}
    start = time.perf_counter()
    out = {family: measure_family(torch, transformers, family, losses) for family in ("llama", "gpt2")}
    from torch._dynamo.utils import counters

    out.update(layers=LAYERS, seconds=time.perf_counter() - start, frames_compiled=counters["frames"]["ok"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
