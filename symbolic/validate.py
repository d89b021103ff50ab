"""Former name of ``symbolic.crosscheck`` (predicted vs measured memory of real PyTorch steps).

Kept so that old imports keep working; new code imports ``symbolic.crosscheck``. The module is
the same object, so attributes set on one are seen through the other. Its helper ``setup_for``
is now ``crosscheck.target_setup`` (``library.activations_pytorch.setup_for`` is the other one).
"""

from __future__ import annotations

import sys

from . import crosscheck

sys.modules[__name__] = crosscheck
