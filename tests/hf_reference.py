"""Parameter counts of real ``transformers`` models, built on the meta device (a child process).

``test_architectures_torch.py`` runs this file with the test interpreter so that torch and
transformers are imported in a separate process, not in the test process (their hundreds of
thousands of objects would slow every later test's garbage collection). It reads
``{name: config}`` as JSON on stdin and writes ``{name: {"total", "active", "class"} or
{"error"}}`` on stdout; it exits with ``SKIP`` when torch or transformers cannot be imported.
"""

from __future__ import annotations

import json
import sys

from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

SKIP = 77
IGNORED = ("_source", "auto_map", "_name_or_path")


def count(config: dict) -> dict:
    """Total and (for mixtures of experts) active parameters of the model ``config`` names."""
    import torch
    import transformers

    config = {k: v for k, v in config.items() if k not in IGNORED}
    model_type = config.pop("model_type")
    hf_config = transformers.AutoConfig.for_model(model_type, **config)
    archs = config.get("architectures") or []
    with torch.device("meta"):
        if archs:
            model = getattr(transformers, archs[0])(hf_config)
        elif model_type == "bert":
            model = transformers.BertModel(hf_config)
        else:
            model = transformers.AutoModelForCausalLM.from_config(hf_config)
    total = sum(p.numel() for p in model.parameters())  # each tensor once: tied weights count once
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    active = None
    if experts:
        n_exp = next(getattr(hf_config, k) for k in ("num_local_experts", "num_experts", "n_routed_experts")
                     if getattr(hf_config, k, None))
        top_k = hf_config.num_experts_per_tok
        # without a top-k (DeepseekV2Config's default) the parameters a token uses are undefined
        active = None if top_k is None else total - experts // n_exp * (n_exp - top_k)
    return {"total": int(total), "active": active, "class": type(model).__name__}


def serve(work, key: str) -> int:
    """The child-process protocol shared by the reference scripts: JSON cases on stdin, one result each.

    ``work(case)`` computes one case; an exception becomes ``{"error"}`` for the test that asked.
    The results go to stdout under ``key`` with the torch and transformers versions; exits ``SKIP``
    when either cannot be imported.
    """
    try:
        import torch
        import transformers
    except ImportError as err:
        print(f"torch or transformers not importable: {err}", file=sys.stderr)
        return SKIP
    transformers.logging.set_verbosity_error()
    cases = json.load(sys.stdin)
    out = {}
    for name, case in cases.items():
        try:
            out[name] = work(case)
        except Exception as err:  # reported by the test that asked for this case
            out[name] = {"error": f"{type(err).__name__}: {err}"}
    json.dump({"versions": {"torch": torch.__version__, "transformers": transformers.__version__}, key: out},
              sys.stdout)
    return 0


def main() -> int:
    return serve(count, "counts")


if __name__ == "__main__":
    sys.exit(main())
