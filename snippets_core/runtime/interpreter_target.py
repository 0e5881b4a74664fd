"""The built-in ``interpreter`` target: each Subgraph runs as its final LinearIR on the LinearIR
interpreter (``snippets_core.codegen.interpreter``). ``target_options={"vector_size": 4|8|16}``, and the Brgemm
blocks ``brgemm_m_block``, ``brgemm_n_block``, ``brgemm_k_block``."""

from __future__ import annotations

from typing import Any

from snippets_core.codegen.interpreter import compile_subgraph


def compile_subgraph_for_interpreter(sg: Any, config: Any, host: Any) -> Any:
    """An executor for ``sg``: positioned passes and extra emitters come from the plugins, disabled passes from
    the config."""
    vector_size = int(dict(config.target_options).get("vector_size", 16))
    from snippets_core.lowered.passes.brgemm_blocking import blocking_from_options

    # Brgemm block sizes from target_options (brgemm_m_block, brgemm_n_block, brgemm_k_block)
    from snippets_core.passes.pass_manager import PassPosition, PositionedPass
    from snippets_core.passes.transpose_decomposition import TransposeDecomposition

    # The interpreter's LoadReorder follows any layout, so a Transpose left in a body (e.g. the Keys' transpose
    # of an attention block) is decomposed into reordered scalar loads; "broadcast-to-move-broadcast" is in
    # every body's pipeline.
    decompose = PositionedPass(TransposeDecomposition(), PassPosition("broadcast-to-move-broadcast"))
    passes = [decompose, *host.positioned_passes("interpreter", config),
              *blocking_from_options(dict(config.target_options))]
    emitters = host.register_emitters("interpreter")
    from snippets_core.debug.config import debug_config

    return compile_subgraph(sg, vector_size, passes, tuple(config.disabled_passes), plugin_emitters=emitters,
                            debug=debug_config(config))
