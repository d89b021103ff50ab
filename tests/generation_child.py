"""Encoder-decoder generation planned and measured for ``test_generation.py`` (issue 29: T5, BART, Whisper).

torch is imported here, not in the test process. Each case is a small configuration with the real
structure, planned through the module path in ``--mode infer`` (generation with a KV cache, probed
on the meta device at one set of sizes) and asked at a batch and sizes the fit did not use, beside
a real greedy generation on the CPU with random weights by the model's own ``generate``
(transformers' ``GenerationMixin`` for T5 and BART, ``WhisperGenerationMixin`` for Whisper), its peak counted by ``measure.forward_peak``'s rule (parameters, buffers, inputs and every operator
output while alive) and its cache's bytes summed tensor by tensor. Writes one JSON object on stdout;
exits 77 when torch is missing.
"""

from __future__ import annotations

import child_main  # this folder: sys.path[0] of a child script
from library_modules_child import T5, WHISPER, _config  # this folder: sys.path[0] of a child script
from modules_child import _cli

BART = {"model_type": "bart", "architectures": ["BartForConditionalGeneration"], "vocab_size": 128, "d_model": 32,
        "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
        "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_position_embeddings": 128, "pad_token_id": 1,
        "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2, "forced_bos_token_id": None,
        "forced_eos_token_id": None}
VISION = {"model_type": "vision-encoder-decoder", "architectures": ["VisionEncoderDecoderModel"],
          "encoder": {"model_type": "vit", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "intermediate_size": 64, "image_size": 32, "patch_size": 8, "attn_implementation": "eager"},
          "decoder": {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 128, "n_positions": 64,
                      "add_cross_attention": True, "is_decoder": True, "attn_implementation": "eager"},
          "decoder_start_token_id": 0, "pad_token_id": 0}  # TrOCR's structure, tiny
EAGER = {"attn_implementation": "eager"}


def _generator(model, steps, keep_cache):
    """A module whose forward is the model's own ``generate``: ``steps`` tokens, greedy, one beam.

    No end-of-sequence stop (random weights). ``keep_cache`` returns the cache as well
    (``return_dict_in_generate``); the peaks are measured without it, as a server runs (Whisper's
    generate then splits and restacks the cache per sample, copies a server does not make).
    """
    import torch

    class Generate(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, **inputs):
            out = model.generate(**inputs, max_new_tokens=steps, do_sample=False, num_beams=1, eos_token_id=None,
                                 return_dict_in_generate=keep_cache)
            return out.past_key_values if keep_cache else out

    return Generate().eval()


def _cache_bytes(cache):
    """Every self-attention and cross-attention tensor's bytes, and the self-attention cache's length."""
    caches = (cache.self_attention_cache, cache.cross_attention_cache)
    sizes = [sum(t.untyped_storage().nbytes() for layer in c.layers for t in (layer.keys, layer.values)) for c in caches]
    return {"self": sizes[0], "cross": sizes[1], "positions": int(cache.self_attention_cache.layers[0].keys.shape[-2])}


def _phase_peaks(generator, model, inputs):
    """The real generation's peak in each phase: the encoder pass, the prompt's pass, the last decode step.

    ``measure._LiveBytes`` counts as ``measure.forward_peak`` does (parameters, buffers, inputs, every
    operator output while alive); a phase starts at the encoder's call, at the first decoder pass
    (the model's own forward) and at the last, and runs until the next starts (the loop's logits
    copy and argmax included).
    """
    import torch

    from symbolic.measured import measure

    live, passes = measure._LiveBytes(), []
    for t in (*generator.parameters(), *generator.buffers(), *inputs.values()):
        live.track(t)

    def decoder_pass(*_):
        passes.append(None)
        live.phase = "prefill" if len(passes) == 1 else f"step {len(passes)}"

    handles = [model.get_encoder().register_forward_pre_hook(lambda *_: setattr(live, "phase", "encoder")),
               model.register_forward_pre_hook(decoder_pass)]
    try:
        with torch.no_grad(), measure.tracking_mode(live.track):
            out = generator(**inputs)
    finally:
        for h in handles:
            h.remove()
    del out
    return {"encoder": live.phase_peaks["encoder"], "prefill": live.phase_peaks["prefill"],
            "decode": live.phase_peaks[f"step {len(passes)}"], "peak": live.peak}


def _case(source, fit, batch, sizes):
    """The generation plan of ``source`` (probed at ``fit``'s sizes) at other sizes and batch, beside a CPU run."""
    import dataclasses

    import torch

    from symbolic import planning
    from symbolic.measured import measure
    from symbolic.networks.module import generation, resolve
    from symbolic.networks.module.source import make_inputs

    fitted = resolve.module_network(resolve.with_sizes(source, fit))
    fitted.generate_fit("float32", "cpu")  # probed at points from ``fit``
    asked = resolve.with_sizes(source, sizes)
    net = dataclasses.replace(fitted, module_source=asked)
    plan = planning.plan(net, "infer", batch=batch, weights="fp32", runtime=False, device="cpu")
    torch.manual_seed(0)
    model = asked.build(asked.arguments).eval()
    made = make_inputs(asked, batch, dict(asked.sizes), device="cpu", float_dtype=torch.float32)
    inputs = {k: v for k, v in made.items() if k not in generation.DECODER}
    generator = _generator(model, asked.sizes["T"], False)
    with torch.no_grad():
        cache = _generator(model, asked.sizes["T"], True)(**inputs)
    terms = plan.terms()
    return {"buffers": [terms.get("buffers", 0), sum(b.numel() * b.element_size() for b in model.buffers())],
            "plan": plan.total, "measured": measure.forward_peak(generator, inputs), "cache": _cache_bytes(cache),
            "plan_phases": plan.phase_bytes(), "measured_phases": _phase_peaks(generator, model, inputs),
            "plan_cache": {"self": terms["self_cache"], "cross": terms["cross_cache"]}, "phase": plan.peak_phase,
            "T": asked.sizes["T"]}


def cases():
    return {"t5": _case(_config({**T5, **EAGER}), {"S": 16, "T": 8}, 3, {"S": 20, "T": 12}),
            "bart": _case(_config({**BART, **EAGER}), {"S": 16, "T": 8}, 3, {"S": 24, "T": 10}),
            "whisper": _case(_config({**WHISPER, **EAGER}), {"T": 8}, 3, {"T": 12}),
            "vision": _case(_config({**VISION, **EAGER}), {"T": 8}, 3, {"T": 12})}


def cli(tmp):
    """``memory`` and ``fit --vary T`` on the command line; the fit's answer checked by a generation traced there."""
    import json
    from pathlib import Path

    import torch

    from symbolic.networks.module import generation, inference, resolve

    config = Path(tmp) / "t5.json"
    config.write_text(json.dumps({**T5, **EAGER}))
    common = (str(config), "--mode", "infer", "--set", "S=16", "--set", "T=8", "--batch", "2", "--device", "cpu",
              "--weights", "fp32", "--no-runtime")
    out = {"memory": _cli("memory", *common, "--json"),
           "fit": _cli("fit", *common, "--gpu", "1MiB", "--for", "seq", "--vary", "T", "--json"),
           "short": _cli("memory", *common, "--set", "T=1"), "kv": _cli("memory", *common, "--kv-dtype", "fp8")}
    whisper = Path(tmp) / "whisper.json"
    whisper.write_text(json.dumps({**WHISPER, **EAGER}))
    beyond = WHISPER["max_target_positions"] + 1  # the decoder's learned positions, one more
    out["positions"] = _cli("memory", str(whisper), "--mode", "infer", "--set", f"T={beyond}", "--no-runtime")
    out["fit_positions"] = _cli("fit", str(whisper), "--mode", "infer", "--set", "T=8", "--device", "cpu", "--weights",
                                "fp32", "--no-runtime", "--gpu", "80GiB", "--for", "seq", "--vary", "T")
    answer = json.loads(out["fit"]["out"])["value"] if out["fit"]["code"] == 0 else None
    if answer:  # the real generation's bytes on the meta device at the answer and one token more
        source = _config({**T5, **EAGER})
        model = inference.build(source, "float32")
        weights = sum(p.numel() for p in model.parameters()) * 4
        for steps in (answer, answer + 1):
            t = generation.trace(source, 2, {"S": 16, "T": steps}, "float32", model, "cpu")
            out[f"traced_{steps - answer}"] = weights + t.inputs + max(max(t.encoder), max(t.prefill), max(t.decode))
        del torch, resolve
    return out


def main() -> None:
    child_main.run(lambda tmp: {"cases": cases(), "cli": cli(tmp)}, threads=1)


if __name__ == "__main__":
    main()
