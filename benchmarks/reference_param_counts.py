#!/usr/bin/env python3
"""Reference parameter counts for the preset configs, from real transformers models.

For every ``symbolic/presets/<preset>.json`` this script builds the actual
Hugging Face model class named in the config's ``architectures`` with random
weights on PyTorch's ``meta`` device (no memory is allocated and nothing is
downloaded), then counts ``sum(p.numel() for p in model.parameters())``.
``parameters()`` yields each tensor once, so tied weights (for example GPT-2's
``lm_head.weight`` shared with ``transformer.wte.weight``) are counted once.

For mixture-of-experts models (``num_local_experts`` / ``num_experts_per_tok``
in the config) it also reports the active parameters per token:
``total - expert_params * (E - k) / E``, i.e. the unused experts' MLP weights
are removed and the router (gate) is kept.

Optional: it needs ``torch`` and ``transformers``, which are *not* dependencies
of the ``symbolic`` package.  Without them it prints a notice and exits 0.

Usage::

    python benchmarks/reference_param_counts.py                 # print JSON
    python benchmarks/reference_param_counts.py --write         # also write
                                      # symbolic/presets/reference_counts.json
    python benchmarks/reference_param_counts.py --presets gpt2 mixtral-8x7b

The output JSON is::

    {"transformers_version": "...", "torch_version": "...",
     "counts": {preset: {"total": int, "active": int | null, "class": str}},
     "breakdown": {preset: {...per-component numbers...}}}
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()

REPO_ROOT = Path(__file__).resolve().parent.parent
PRESET_DIR = REPO_ROOT / "symbolic" / "presets"
DEFAULT_OUTPUT = PRESET_DIR / "reference_counts.json"

# Keys of a preset file that are not part of the Hugging Face config.
_NON_CONFIG_KEYS = ("_source",)
# Keys dropped before building: remote-code hints (the in-library class is used)
# and the hub path, which carries no architecture information.
_IGNORED_CONFIG_KEYS = ("auto_map", "_name_or_path")

_LAYER_RE = re.compile(r"^(?P<prefix>.*?\.(?:h|layers|layer|blocks))\.(?P<idx>\d+)\.(?P<rest>.+)$")


def _require_backends():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        print(
            f"reference_param_counts: skipped, torch and transformers are required ({exc})",
            file=sys.stderr,
        )
        sys.exit(0)


def load_preset(path: Path) -> tuple[dict, dict]:
    """Return (hf_config_dict, meta) for a preset JSON file."""
    raw = json.loads(path.read_text())
    meta = {k: raw.pop(k) for k in _NON_CONFIG_KEYS if k in raw}
    for k in _IGNORED_CONFIG_KEYS:
        raw.pop(k, None)
    return raw, meta


def build_meta_model(cfg_dict: dict):
    """Build the architecture class named in the config on the meta device."""
    import torch
    import transformers
    from transformers import AutoConfig

    cfg_dict = dict(cfg_dict)
    model_type = cfg_dict.pop("model_type")
    config = AutoConfig.for_model(model_type, **cfg_dict)
    archs = cfg_dict.get("architectures") or []
    if archs:
        cls_name = archs[0]
    elif model_type == "bert":
        cls_name = "BertModel"
    else:
        cls_name = None
    with torch.device("meta"):
        if cls_name is None:
            model = transformers.AutoModelForCausalLM.from_config(config)
        else:
            cls = getattr(transformers, cls_name)
            model = cls(config)
    return model, type(model).__name__, config


def _classify_in_layer(rest: str) -> str:
    r = rest.lower()
    if "norm" in r or r.startswith("ln_") or ".ln_" in r:
        return "norm"
    if "experts" in r:
        return "mlp_experts"
    if re.search(r"(block_sparse_moe|mlp|moe)\.gate\.", r) or r.endswith(("router.weight", "router.bias")):
        return "router"
    if "attn" in r or "attention" in r:
        return "attention"
    if (
        "mlp" in r
        or "intermediate" in r
        or r.startswith("output.")
        or "feed_forward" in r
        or r.startswith("fc1.")
        or r.startswith("fc2.")
    ):
        return "mlp"
    return "other"


def _classify_outside(name: str) -> str:
    n = name.lower()
    if n.startswith("lm_head") or n.startswith("embed_out"):
        return "lm_head"
    if n.startswith("cls."):
        return "mlm_head"
    if "pooler" in n:
        return "pooler"
    is_norm = "norm" in n or ".ln_f." in n
    if "embeddings." in n and is_norm:
        return "embedding_norm"
    if "emb" in n or ".wte." in n or ".wpe." in n or n.startswith("wte") or n.startswith("wpe"):
        return "embedding"
    if is_norm:
        return "final_norm"
    if "project_in" in n or "project_out" in n:
        return "embedding_projection"
    return "other"


def breakdown(model) -> dict:
    """Per-component numbers; layers are checked to be identical."""
    outside = defaultdict(int)
    per_layer: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    outside_names = defaultdict(list)
    layer0_params = []
    for name, p in model.named_parameters():  # tied tensors appear once
        m = _LAYER_RE.match(name)
        if m:
            cat = _classify_in_layer(m.group("rest"))
            per_layer[int(m.group("idx"))][cat] += p.numel()
            if int(m.group("idx")) == 0:
                layer0_params.append(f"{m.group('rest')}{list(p.shape)} -> {cat}")
        else:
            cat = _classify_outside(name)
            outside[cat] += p.numel()
            outside_names[cat].append(f"{name}{list(p.shape)}")
    layers = [dict(per_layer[i]) for i in sorted(per_layer)]
    identical = all(layer == layers[0] for layer in layers) if layers else True
    layer0 = dict(layers[0]) if layers else {}
    layer0["total"] = sum(v for k, v in layer0.items())
    result = {
        "num_layers": len(layers),
        "layers_identical": identical,
        "per_layer": layer0,
        "outside_layers": dict(outside),
        "outside_layer_params": {k: v for k, v in outside_names.items()},
        "layer0_params": layer0_params,
    }
    result["sum_check"] = sum(sum(layer.values()) for layer in layers) + sum(outside.values())
    return result


def count_preset(path: Path) -> tuple[dict, dict]:
    cfg_dict, _meta = load_preset(path)
    model, cls_name, config = build_meta_model(cfg_dict)
    total = sum(p.numel() for p in model.parameters())
    bd = breakdown(model)
    assert bd["sum_check"] == total, (path.name, bd["sum_check"], total)
    active = None
    n_experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
    top_k = getattr(config, "num_experts_per_tok", None)
    if n_experts and top_k and n_experts > top_k:
        # summed by name: MoE models may mix dense and expert layers (DeepSeek, Llama-4)
        expert_params = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
        assert expert_params % n_experts == 0
        active = total - expert_params // n_experts * (n_experts - top_k)
        bd["expert_params_all_layers"] = expert_params
        bd["num_experts"] = n_experts
        bd["experts_per_token"] = top_k
    # Whether the output projection shares the input embedding tensor.
    try:
        out = model.get_output_embeddings()
        inp = model.get_input_embeddings()
        bd["lm_head_tied"] = bool(out is not None and out.weight is inp.weight)
    except Exception:  # pragma: no cover - model without these accessors
        bd["lm_head_tied"] = None
    return {"total": int(total), "active": None if active is None else int(active), "class": cls_name}, bd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="*", help="preset names (default: all files in symbolic/presets)")
    parser.add_argument("--write", action="store_true", help=f"write {DEFAULT_OUTPUT.relative_to(REPO_ROOT)}")
    parser.add_argument("--output", type=Path, default=None, help="write the JSON to this path")
    args = parser.parse_args(argv)

    _require_backends()
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    paths = sorted(PRESET_DIR.glob("*.json"))
    paths = [p for p in paths if p.name != DEFAULT_OUTPUT.name]
    if args.presets:
        wanted = set(args.presets)
        paths = [p for p in paths if p.stem in wanted]
        missing = wanted - {p.stem for p in paths}
        if missing:
            parser.error(f"unknown presets: {sorted(missing)}")

    out = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "counts": {},
        "breakdown": {},
    }
    for path in paths:
        counts, bd = count_preset(path)
        out["counts"][path.stem] = counts
        out["breakdown"][path.stem] = bd
        print(f"{path.stem:20s} {counts['class']:22s} total={counts['total']:>15,d}"
              + (f" active={counts['active']:,d}" if counts["active"] is not None else ""),
              file=sys.stderr)

    text = json.dumps(out, indent=2, sort_keys=False) + "\n"
    target = args.output or (DEFAULT_OUTPUT if args.write else None)
    if target is not None:
        Path(target).write_text(text)
        print(f"wrote {target}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
