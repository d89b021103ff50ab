"""Parameter counts and KV-cache bytes of real ``transformers`` models in one child process.

``test_architectures_torch.py`` runs this file with the test interpreter (torch stays out of the
test process). It reads ``{name: {"kind": "counts", "config": {...}}}`` (``hf_reference.count``)
and ``{name: {"kind": "cache", "config": {...}, "batch": B, "seq": [S, ...]}}``
(``hf_cache_reference.measure``) as JSON on stdin and answers through ``hf_reference.serve``,
under ``"results"``. One process for both: torch, transformers and each family's modeling code
are imported once (the two scripts alone import them twice). Exits with ``hf_reference.SKIP``
when torch or transformers cannot be imported.
"""

from __future__ import annotations

import sys


def work(case: dict) -> dict:
    """One case of either kind."""
    from hf_cache_reference import measure
    from hf_reference import count

    if case["kind"] == "counts":
        return count(case["config"])
    return measure(case["config"], case["batch"], case["seq"])


def main() -> int:
    from hf_reference import serve  # this script's folder is on sys.path when it runs as a script

    return serve(work, "results")


if __name__ == "__main__":
    sys.exit(main())
