"""Real transformer architectures: exact parameter counts from Hugging Face configs and presets.

>>> from symbolic import architectures
>>> spec = architectures.load("gpt2")            # a preset, or a path to a config.json
>>> print(spec.params_formula())
N = L·(12·H^2 + 13·H) + H·V + H·n_pos + 2·H
>>> spec.param_count()
124439808
"""

from __future__ import annotations

from ..presets import Resolved, load, preset_config, preset_names, preset_source, resolve, resolve_config
from .configs import ConfigError, load_config, read_json, spec_from_config
from .families import SUPPORTED
from .formulas import Component, breakdown, with_numbers
from .spec import ModelSpec, ModelSpecError

__all__ = [
    "SUPPORTED", "Component", "ConfigError", "ModelSpec", "ModelSpecError", "breakdown", "load", "load_config",
    "Resolved", "preset_config", "preset_names", "preset_source", "read_json", "resolve", "resolve_config", "spec_from_config", "with_numbers",
]
