"""A report's torch module model as the planner takes it: its ``[module]`` table as the command line's flags.

One place for the memory part (``planned``) and the plan section (``plan_section``), which both plan the
probed network (the probe's disk cache answers the second ask).
"""

from __future__ import annotations

from typing import Any


def network(ref: Any) -> Any:
    """The probed ModuleNetwork of a report's torch module model (``ref``: the specification's ``ModelRef``)."""
    from dataclasses import replace

    from ..networks.module import files, resolve

    inputs = files.parse_inputs(list(ref.inputs))
    options = resolve.ModuleOptions(dict(ref.arguments), inputs, ref.loss, dict(ref.sizes))
    if files.is_file_model(ref.module):
        source = resolve.module_source(ref.module, options)
    else:
        source = resolve.module_source(ref.module, resolve.ModuleOptions(dict(ref.arguments), inputs))
        source = resolve.with_sizes(source, dict(ref.sizes), ref.loss)
    # the blocks checkpointed and sharded: the [module] table's checkpoint_modules, as --checkpoint-modules
    return resolve.module_network(replace(source, checkpoint=ref.checkpoint) if ref.checkpoint else source)
