"""Every preset through both paths (issue 12): the generic torch path's count equals the family table's."""

from __future__ import annotations

import pytest
from helpers import torch_child

from symbolic import architectures


@pytest.mark.slow
@pytest.mark.torch
def test_both_paths_agree_on_every_preset() -> None:
    names = list(architectures.preset_names())
    got = torch_child("generic_child.py", {"presets": names})["presets"]
    for name in names:
        table = architectures.load(name)
        assert got[name]["total"] == got[name]["formula_total"] == table.param_count(), name
        if table.is_moe and got[name]["active"] is not None:
            assert got[name]["active"] == table.active_param_count(), name
