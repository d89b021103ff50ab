"""The generic torch path's coverage survey (issue 12): every causal-LM type transformers 5.24 knows,
built at its default config, counted by the generic path and compared with the plain count.

Kept apart from ``test_generic_torch.py`` so that parallel workers run it beside that module's
child processes rather than after them.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from symbolic.architectures import generic

ROOT = Path(__file__).resolve().parent.parent
HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


@pytest.mark.slow
@pytest.mark.torch
def test_every_causal_lm_type_transformers_builds() -> None:
    if not HAS_TORCH:
        pytest.skip("torch and transformers are not installed")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "generic_coverage.py"), "--json", "--jobs", "2"],
                          capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    c = result["coverage"]
    assert c["types"] == len(generic.causal_lm_types()) >= 190
    assert c["built"] >= 0.9 * c["types"]
    assert c["exact"] == c["built"]  # every buildable type: the formula at its values is the plain count
    assert c["verified_pct"] >= 75.0
