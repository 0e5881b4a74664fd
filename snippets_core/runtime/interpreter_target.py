"""The built-in ``interpreter`` target: each Subgraph runs as its final LinearIR on the LinearIR
interpreter (``snippets_core.codegen.interpreter``). ``target_options={"vector_size": 4|8|16}``."""

from __future__ import annotations

from typing import Any

from snippets_core.codegen.interpreter import compile_subgraph


def compile_subgraph_for_interpreter(sg: Any, config: Any, host: Any) -> Any:
    """An executor for ``sg``: positioned passes and extra emitters come from the plugins, disabled passes from
    the config."""
    vector_size = int(dict(config.target_options).get("vector_size", 16))
    passes = host.positioned_passes("interpreter", config)
    emitters = host.register_emitters("interpreter")
    from snippets_core.debug.config import debug_config

    return compile_subgraph(sg, vector_size, passes, tuple(config.disabled_passes), plugin_emitters=emitters,
                            debug=debug_config(config))
