"""Parameter counts and KV-cache bytes of real ``transformers`` models in one child process.

``test_architectures_torch.py`` runs this file with the test interpreter (torch stays out of the
test process). It reads ``{name: {"kind": "counts", "config": {...}}}`` (``hf_reference.count``)
and ``{name: {"kind": "cache", "config": {...}, "batch": B, "seq": [S, ...]}}``
(``hf_cache_reference.measure``), or ``{"kind": "config", "model_type": T}`` (T's default config as
``to_dict()`` gives it) as JSON on stdin and answers through ``hf_reference.serve``,
under ``"results"``. One process for both: torch, transformers and each family's modeling code
are imported once (the two scripts alone import them twice). Exits with ``hf_reference.SKIP``
when torch or transformers cannot be imported.
"""

from __future__ import annotations

import sys

from symbolic.networks import torch_env  # noqa: E402  (torchvision importable: issue 29)

torch_env.install()


def work(case: dict) -> dict:
    """One case of any kind: counts, cache, or config (a type's default config, ``to_dict()``)."""
    from hf_cache_reference import measure
    from hf_reference import count

    if case["kind"] == "counts":
        return count(case["config"])
    if case["kind"] == "config":
        import transformers

        return transformers.AutoConfig.for_model(case["model_type"]).to_dict()
    return measure(case["config"], case["batch"], case["seq"])


def main() -> int:
    from hf_reference import serve  # this script's folder is on sys.path when it runs as a script

    return serve(work, "results")


if __name__ == "__main__":
    sys.exit(main())
