"""Bytes of the cache transformers returns after a prefill, of tiny models on the CPU (a child process).

``test_architectures_torch.py`` runs ``measure`` through ``hf_torch_references.py``, in the same
child process as the parameter counts. Run alone, this file reads
``{name: {"config": {...}, "batch": B, "seq": [S, ...]}}`` as JSON on stdin, builds
``AutoModelForCausalLM.from_config(config, dtype=bfloat16)`` under ``torch.device("cpu")``, runs
``model(input_ids, use_cache=True)`` on a B × S batch of token ids and writes, per name and S, the
bytes of every tensor the returned cache's layers hold (keys, values, latents, recurrent and
convolution states) and the class of each layer; ``{"error"}`` where the model cannot be run.
Exits with ``hf_reference.SKIP`` when torch or transformers cannot be imported.
"""

from __future__ import annotations

import sys

from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

IGNORED = ("_source", "auto_map", "_name_or_path")


def layer_bytes(layer: object) -> int:
    """Bytes of the floating-point state tensors a cache layer holds (not its bookkeeping scalars)."""
    import torch

    total = 0
    for value in vars(layer).values():
        # linear-attention layers keep their states in dicts (conv_states, recurrent_states)
        tensors = list(value.values()) if isinstance(value, dict) else value if isinstance(value, (list, tuple)) \
            else [value]
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                total += tensor.numel() * tensor.element_size()
    return total


def measure(config: dict, batch: int, seqs: list[int]) -> dict:
    """Cache bytes after a prefill of each S, for the model ``config`` describes."""
    import torch
    import transformers

    config = {k: v for k, v in config.items() if k not in IGNORED}
    model_type = config.pop("model_type")
    hf_config = transformers.AutoConfig.for_model(model_type, **config)
    out: dict[str, object] = {}
    torch.set_num_threads(1)  # tiny models: more threads only spin on a shared machine
    with torch.device("cpu"):  # the meta device runs each op through Python meta kernels: slower here
        model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.bfloat16)
        for seq in seqs:
            ids = torch.zeros(batch, seq, dtype=torch.long)
            cache = model(input_ids=ids, use_cache=True).past_key_values
            out[str(seq)] = {"bytes": sum(layer_bytes(layer) for layer in cache.layers),
                             "layers": sorted({type(layer).__name__ for layer in cache.layers}),
                             "cache": type(cache).__name__}
    return out


def main() -> int:
    from hf_reference import serve  # this script's folder is on sys.path when it runs as a script

    return serve(lambda case: measure(case["config"], case["batch"], case["seq"]), "cache")


if __name__ == "__main__":
    sys.exit(main())
