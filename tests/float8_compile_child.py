"""torchao float8 training under torch.compile (inductor) measured on the CPU for ``test_float8_compile.py``.

torchao 0.18.0's ``convert_to_float8_training`` compiles with inductor on the CPU (torch 2.13.0: the float8
casts and ``aten._scaled_mm`` lower; the CPU's ``_scaled_mm`` dequantizes its operands to fp32 inside the
call, which cuBLAS does not, so each ATen call's own scratch is left out, as ``measure``'s ``tensor_phases``
leave it out). The request on stdin names one measurement (``{"what": ...}``):

- ``linears``: one bf16 linear of the tiny Llama's MLP shapes (up 64→176, down 176→64), compiled, as torchao's
  ``Float8Linear`` (each recipe) and as ``nn.Linear``: the live peaks of its forward and of its backward over
  their start, at two token counts, read from the CPU allocator's events (``torch.profiler``).
- ``saved``: the tiny two-layer Llama (``tiny_models.LLAMA``, bf16, sdpa), each block compiled (torchtitan's
  ``apply_compile``), its linear layers converted with torchtitan's filter (every ``nn.Linear`` but the
  head), against the same compiled model in bf16: the bytes the compiled blocks and the eager head save for
  backward (a pack hook, each storage once, parameters left out) at two (B, S), and at the first one SGD
  step's peaks by phase.
- ``checkpointed``: torchtitan's full checkpointing under compile (9dec370 ``apply_ac``: each block wrapped by
  ``checkpoint_wrapper(block, preserve_rng_state=False)``, then ``apply_compile``: the wrapper compiled with
  ``fullgraph=True``), in bf16 and with each recipe: one Llama decoder layer of the tiny Llama's widths and of two wider
  ones (``WIDER``, ``WIDEST``), the bytes its forward leaves (over its start) and the live peak of its backward over its start,
  at three (B, S); and the tiny two-layer Llama so wrapped, its first SGD step's peaks by phase, with its own
  vocabulary and with 256 (where the blocks' backward, not the loss's, leads that phase); bf16 at B 8, S 128 with
  vocabularies 512 and 128 (where the plan's rebuild, not its loss, leads).

- ``ops``: torchtitan's per-op selective checkpointing with float8 (``--recompute ops --compile``): one bf16
  Llama layer, converted (each recipe), wrapped as torchtitan's ``apply_ac`` wraps it (``float8_child.ops_wrapped``:
  ``checkpoint_wrapper``, 9dec370's policy, or 88247277c's list without ``aten.abs``) and compiled after with
  ``fullgraph=True`` (``apply_compile``): the bytes its compiled graph saves (each storage once, dtype and shape
  read) and the live peaks of its forward and backward (over their starts) at three (B, S) (``OPS_POINTS``: the
  third, B·S = 4·H, a second size where the fused SiLU backward's moment leads the backward, as at 2.25·H; at
  B·S = H one holding weight gradients does); and the
  two-layer model's SGD step with every layer so wrapped and compiled (9dec370's
  list), its phase peaks (the loss eager), in bf16 and with each recipe.

``dynamic=True`` and no size of 1: one compilation per graph. Writes one JSON object on stdout; exits with 77
when torch, transformers or torchao cannot be imported, or when inductor finds no C++ compiler.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import child_main  # this folder: sys.path[0] of a child script

SKIP = 77
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tiny_models import LLAMA  # noqa: E402

RECIPES = ("tensorwise", "rowwise")
TOKENS = (64, 96)  # B·S of the single linears
POINTS = ((2, 32), (3, 48))  # (B, S) of the whole model's saved bytes
OPS_POINTS = (*POINTS, (4, 64))  # (B, S) of the per-op checkpointed layer
LAYERS = 2
BLOCK_POINTS = ((2, 32), (3, 48), (2, 80), (4, 64))  # (B, S) of one checkpointed block
VOCABS = (LLAMA["vocab_size"], 256)  # the loss's moment leads the checkpointed step's backward; the blocks' does
REBUILD = ((8, 128), (LLAMA["vocab_size"], 128))  # B·S = 16·H: the plan's rebuild leads at 128, the loss at 512
WIDER = {**LLAMA, "hidden_size": 96, "num_attention_heads": 6, "intermediate_size": 256}  # a second, independent size
WIDEST = {**LLAMA, "hidden_size": 128, "num_attention_heads": 8, "intermediate_size": 352}  # a third


def _imports() -> tuple:
    """torch, transformers and torchao's float8 conversion; exits 77 when any is missing, or a C++ compiler."""
    torch, transformers, float8 = child_main.inductor_modules("torch", "transformers", "torchao.float8")
    return torch, transformers, float8.Float8LinearConfig, float8.convert_to_float8_training


def _converted(module: object, recipe: str | None) -> object:
    """The module with every linear but the head (torchtitan's filter, fqn != output) as Float8Linear."""
    _, _, config, convert = _imports()
    if recipe is not None:
        convert(module, config=config.from_recipe_name(recipe), module_filter_fn=lambda _, fqn: fqn != "lm_head")
    return module


def _tensor_peak(torch: object, run: object) -> int:
    """Peak bytes the CPU allocator gave out while ``run()`` ran, over its start, each outermost ATen call's events
    folded into their sum at its end (its scratch left out; inductor's own buffers counted as they are)."""
    return _tensor_bytes(torch, run)[0]


def _tensor_bytes(torch: object, run: object) -> tuple[int, int]:
    """(peak, net) bytes over the start of ``run()``, as ``_tensor_peak`` reads them."""
    from torch.profiler import ProfilerActivity, profile

    from symbolic.measured.measure import _folded, _outermost

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    found = list(prof.profiler.kineto_results.events())
    memory = sorted((e.start_ns(), i, e.nbytes()) for i, e in enumerate(found)
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    calls = _outermost([(e.start_ns(), e.end_ns()) for e in found if e.name().startswith("aten::")])
    current = peak = 0
    for _, _, delta in _folded(memory, calls):
        current += delta
        peak = max(peak, current)
    return peak, current


def _linear_peaks(torch: object, module: object, k: int, n: int, tokens: int) -> dict[str, int]:
    """Forward and backward peaks of the compiled (tokens × k) @ (k × n) linear, the second of two passes."""
    x = torch.randn(tokens, k, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(tokens, n, dtype=torch.bfloat16)
    for _ in range(2):  # the first pass compiles anything these sizes need
        held: dict = {}

        def forward() -> None:
            held["y"] = module(x)  # noqa: B023

        peaks = {"forward": _tensor_peak(torch, forward),
                 "backward": _tensor_peak(torch, lambda: held.pop("y").backward(grad))}  # noqa: B023
        x.grad = None
        module.zero_grad(set_to_none=True)
    return peaks


def linears() -> list[dict]:
    """Each MLP shape and recipe, at each token count: the compiled float8 linear's peaks and the bf16 one's."""
    torch = _imports()[0]
    hidden, width = LLAMA["hidden_size"], LLAMA["intermediate_size"]
    out = []
    for k, n in ((hidden, width), (width, hidden)):
        rows = {tokens: {"k": k, "n": n, "tokens": tokens} for tokens in TOKENS}
        for recipe in (None, *RECIPES):
            torch.manual_seed(0)
            module = _converted(torch.nn.Sequential(torch.nn.Linear(k, n, bias=False)).to(torch.bfloat16), recipe)
            module.compile(backend="inductor", dynamic=True)
            for tokens in TOKENS:
                rows[tokens][recipe or "bf16"] = _linear_peaks(torch, module, k, n, tokens)
        out += rows.values()
    return out


def _step_phases(torch: object, model: object, ids: object) -> dict[str, int]:
    """One SGD step's peaks by phase (``measure.step_peak``'s profiler method, each ATen call's scratch left out:
    ``tensor_phases``), the loss eager (torchtitan's ``--no-compile-loss``)."""
    from symbolic.measured import measure

    labels = ids.clone()

    def loss_fn(output):  # noqa: ANN001, ANN202
        return torch.nn.functional.cross_entropy(output.logits.flatten(0, 1).float(), labels.flatten(0, 1))

    loss_fn.held = (labels,)
    peak = measure.step_peak(model, {"input_ids": ids}, loss_fn, method="profiler", steps=1,
                             optimizer=lambda params: torch.optim.SGD(params, lr=1e-3))
    return {phase: peak.tensor_phases[phase] for phase in ("forward", "backward")}


def saved() -> dict:
    """The compiled tiny Llama's saved bytes in bf16 and with each recipe, at each point, by dtype."""
    torch, transformers, *_ = _imports()
    out: dict = {}
    for recipe in (None, *RECIPES):
        torch.manual_seed(0)
        config = transformers.LlamaConfig(**LLAMA, num_hidden_layers=LAYERS, attn_implementation="sdpa",
                                          use_cache=False)
        model = _converted(transformers.LlamaForCausalLM(config).to(torch.bfloat16).train(), recipe)
        for block in model.model.layers:
            block.compile(backend="inductor", dynamic=True)
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        rows = []
        for batch, seq in POINTS:
            ids = torch.randint(0, LLAMA["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(0))
            model(input_ids=ids, labels=ids).loss.backward()  # compiles what these sizes need
            model.zero_grad(set_to_none=True)
            seen: dict[int, tuple[int, str]] = {}

            def pack(t: object) -> object:
                storage = t.untyped_storage()
                if storage.data_ptr() not in params:  # noqa: B023
                    seen.setdefault(storage.data_ptr(), (storage.nbytes(), str(t.dtype).removeprefix("torch.")))  # noqa: B023
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            model.zero_grad(set_to_none=True)
            by_dtype: dict[str, int] = {}
            for nbytes, dtype in seen.values():
                by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes
            row = {"batch": batch, "seq": seq, "saved": sum(by_dtype.values()), "by_dtype": by_dtype}
            if (batch, seq) == POINTS[0]:  # the step at one point: its profiler costs seconds
                row["phases"] = _step_phases(torch, model, ids)
            rows.append(row)
        out[recipe or "bf16"] = rows
    return out


def _ops_block(torch: object, transformers: object, recipe: str | None, abs_saved: bool) -> tuple:
    """One converted Llama layer under the per-op policy, compiled after wrapping; its config and rotary module."""
    from float8_child import ops_wrapped  # this folder: sys.path[0] of a child script
    from transformers.models.llama import modeling_llama as modeling

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**LLAMA, attn_implementation="sdpa")
    holder = torch.nn.Module()  # ops_wrapped wraps model.model.layers
    holder.model = torch.nn.Module()
    holder.model.layers = torch.nn.ModuleList([_converted(modeling.LlamaDecoderLayer(config, 0).to(torch.bfloat16),
                                                          recipe)])
    layer = holder.model.layers[0]
    block = torch.compile(ops_wrapped(torch, holder, abs_saved).model.layers[0], fullgraph=True, backend="inductor",
                          dynamic=True)
    return block, layer, config, modeling.LlamaRotaryEmbedding(config)


def _block_peaks(torch: object, block: object, x: object, cos: object, sin: object) -> dict[str, int]:
    """The compiled block's forward peak and its backward's (a bf16 gradient of its output given), over their starts,
    the parameters' gradients already allocated (accumulated into)."""
    grad = torch.randn_like(x)
    held: dict = {}

    def forward() -> None:
        y = block(x.clone(), None, position_embeddings=(cos, sin))
        held["y"] = y[0] if isinstance(y, tuple) else y

    peaks = {"forward_peak": _tensor_peak(torch, forward),
             "backward_peak": _tensor_peak(torch, lambda: held.pop("y").backward(grad))}
    x.grad = None
    return peaks


def ops() -> dict:
    """The compiled per-op checkpointed layer's saved bytes by dtype and shape, and the compiled step's phases."""
    torch, transformers, *_ = _imports()
    layer_rows: dict = {}
    for recipe, abs_saved in ((None, True), *((r, a) for r in RECIPES for a in (True, False))):
        block, layer, config, rotary = _ops_block(torch, transformers, recipe, abs_saved)
        params = {p.untyped_storage().data_ptr() for p in layer.parameters()}
        rows = []
        for batch, seq in OPS_POINTS:
            x = torch.randn(batch, seq, config.hidden_size, dtype=torch.bfloat16, requires_grad=True)
            cos, sin = rotary(x, torch.arange(seq)[None])
            excluded = params | {cos.untyped_storage().data_ptr(), sin.untyped_storage().data_ptr()}
            seen: dict[int, tuple[int, str, list[int]]] = {}

            def pack(t: object) -> object:
                storage = t.untyped_storage()
                if storage.data_ptr() not in excluded:  # noqa: B023
                    dtype = str(t.dtype).removeprefix("torch.")
                    seen.setdefault(storage.data_ptr(), (storage.nbytes(), dtype, list(t.shape)))  # noqa: B023
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                y = block(x.clone(), None, position_embeddings=(cos, sin))  # the input made here: only the block
            (y[0] if isinstance(y, tuple) else y).float().sum().backward()
            rows.append({"batch": batch, "seq": seq, "saved": sum(v[0] for v in seen.values()),
                         "tensors": sorted(seen.values()), **_block_peaks(torch, block, x, cos, sin)})
        layer_rows[(recipe or "bf16") + ("" if abs_saved else "-no-abs")] = rows
    step: dict = {}
    batch, seq = POINTS[0]
    ids = torch.randint(0, LLAMA["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(0))
    for recipe in (None, *RECIPES):
        from float8_child import ops_wrapped  # this folder: sys.path[0] of a child script

        torch.manual_seed(0)
        config = transformers.LlamaConfig(**LLAMA, num_hidden_layers=LAYERS, attn_implementation="sdpa",
                                          use_cache=False)
        model = ops_wrapped(torch, _converted(transformers.LlamaForCausalLM(config).to(torch.bfloat16).train(),
                                              recipe))
        for block in model.model.layers:
            block.compile(backend="inductor", dynamic=True, fullgraph=True)
        model(input_ids=ids, labels=ids).loss.backward()  # compiles
        model.zero_grad(set_to_none=True)
        step[recipe or "bf16"] = _step_phases(torch, model, ids)
    return {"layer": layer_rows, "step": step}


def _wrapped(torch: object, block: object) -> object:
    """torchtitan's full checkpointing, then its compile: ``checkpoint_wrapper`` compiled whole (fullgraph). Every
    wrapper shares one code object, so each model starts dynamo afresh (fullgraph fails past its recompile limit)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    wrapped = checkpoint_wrapper(block, preserve_rng_state=False)
    wrapped.compile(backend="inductor", dynamic=True, fullgraph=True)
    return wrapped


def _block_rows(torch: object, transformers: object, widths: dict, recipe: str | None) -> list[dict]:
    """One checkpointed compiled layer at each point: what its forward leaves, its backward's peak over its start."""
    from transformers.models.llama import modeling_llama as modeling

    torch._dynamo.reset()  # noqa: SLF001  (see _wrapped)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**widths, attn_implementation="sdpa")
    layer = _converted(torch.nn.Sequential(modeling.LlamaDecoderLayer(config, 0)).to(torch.bfloat16), recipe)[0]
    rotary, block = modeling.LlamaRotaryEmbedding(config), _wrapped(torch, layer)
    rows = []
    for batch, seq in BLOCK_POINTS:
        x = torch.randn(batch, seq, config.hidden_size, dtype=torch.bfloat16, requires_grad=True)
        cos, sin = rotary(x, torch.arange(seq)[None])
        grad = torch.randn_like(x)
        for _ in range(2):  # the first pass compiles anything these sizes need
            held: dict = {}

            def forward() -> None:
                out = block(x.clone(), position_embeddings=(cos, sin))  # noqa: B023  (the block's own input)
                held["y"] = out[0] if isinstance(out, tuple) else out  # noqa: B023

            _, kept = _tensor_bytes(torch, forward)
            peak, _ = _tensor_bytes(torch, lambda: held.pop("y").backward(grad))  # noqa: B023
            x.grad = None
            layer.zero_grad(set_to_none=True)
        rows.append({"batch": batch, "seq": seq, "forward_kept": kept, "backward_peak": peak})
    return rows


def checkpointed() -> dict:
    """Full checkpointing under compile: one block at two widths, and the tiny Llama's step, bf16 and each recipe."""
    torch, transformers, *_ = _imports()
    out: dict = {"rng_state": int(torch.get_rng_state().numel()), "widths": {"llama": LLAMA, "wider": WIDER,
                 "widest": WIDEST}, "block": {}, "step": {}}
    for recipe in (None, *RECIPES):
        name = recipe or "bf16"
        out["block"][name] = {key: _block_rows(torch, transformers, widths, recipe)
                              for key, widths in out["widths"].items()}
        if recipe == "rowwise":
            continue  # the step: bf16 and torchtitan's recipe
        out["step"][name] = {str(vocab): _checkpointed_step(torch, transformers, recipe, vocab) for vocab in VOCABS}
    out["rebuild"] = {str(vocab): _checkpointed_step(torch, transformers, None, vocab, REBUILD[0])
                      for vocab in REBUILD[1]}
    return out


def _checkpointed_step(torch: object, transformers: object, recipe: str | None, vocab: int,
                       point: tuple[int, int] = POINTS[1]) -> dict:
    """The tiny two-layer Llama (vocabulary ``vocab``), each block wrapped and compiled: its step's peaks by phase
    (by default at B·S = 144 ≥ 1.5·H, where the blocks' token-sized moment leads their backward)."""
    torch._dynamo.reset()  # noqa: SLF001  (see _wrapped)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**LLAMA, "vocab_size": vocab}, num_hidden_layers=LAYERS,
                                      attn_implementation="sdpa", use_cache=False)
    model = _converted(transformers.LlamaForCausalLM(config).to(torch.bfloat16).train(), recipe)
    for index, block in enumerate(model.model.layers):
        model.model.layers.register_module(str(index), _wrapped(torch, block))
    batch, seq = point
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()  # compiles what these sizes need
    model.zero_grad(set_to_none=True)
    return {"batch": batch, "seq": seq, "phases": _step_phases(torch, model, ids)}


MEASUREMENTS = {"linears": linears, "saved": saved, "ops": ops, "checkpointed": checkpointed}

if __name__ == "__main__":
    _imports()[0].set_num_threads(1)
    child_main.lean_inductor()
    what = json.load(sys.stdin)["what"]
    print(json.dumps({what: MEASUREMENTS[what](), "llama": LLAMA, "layers": LAYERS}))
