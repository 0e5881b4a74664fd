"""The built-in ``interpreter`` target: each Subgraph runs as its final LinearIR on the LinearIR
interpreter (``snippets_core.codegen.interpreter``). ``target_options={"vector_size": 4|8|16}``, and the Brgemm
blocks ``brgemm_m_block``, ``brgemm_n_block``, ``brgemm_k_block``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from snippets_core.codegen.interpreter import compile_subgraph
from snippets_core.config import int_option
from snippets_core.errors import UnsupportedByTarget
from snippets_core.runtime.placement import REFERENCE, Placement, fallback_reason, subgraph_error


def interpreter_vector_size(config: Any) -> int:
    """The interpreter's lanes per vector (``target_options["vector_size"]``, default 16); ConfigError if not a
    positive integer."""
    return int_option(config.target_options, "vector_size", 16)


def compile_subgraph_for_interpreter(sg: Any, config: Any, host: Any) -> Any:
    """An executor for ``sg``: positioned passes and extra emitters come from the plugins, disabled passes from
    the config."""
    vector_size = interpreter_vector_size(config)
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

    execute = compile_subgraph(sg, vector_size, passes, tuple(config.disabled_passes), plugin_emitters=emitters,
                               debug=debug_config(config))
    if all(p.shape.is_static for p in sg.body.parameters):
        return execute  # generated now: a declared fallback or an error has been raised already
    return PerShapeExecutor(sg, execute, "interpreter")


class PerShapeExecutor:
    """A dynamic-shape Subgraph's executor that generates code per set of input shapes on first use: a shape with
    something the target declares it does not generate (UnsupportedByTarget) runs on the Subgraph's reference
    from then on, with the reason in ``reasons``; any other error is raised naming the Subgraph. After each call
    ``last_placement`` says where that call ran (the :mod:`snippets_core.runtime.placement` protocol)."""

    def __init__(self, sg: Any, execute: Callable[[list[np.ndarray]], list[np.ndarray]], target: str) -> None:
        self.sg = sg
        self.target = target
        self._execute = execute
        self._on_target = Placement(target)
        self.reasons: dict[tuple[tuple[int, ...], ...], str] = {}
        self.last_placement = self._on_target

    def __call__(self, args: list[np.ndarray]) -> list[np.ndarray]:
        shapes = tuple(tuple(np.shape(a)) for a in args)
        reason = self.reasons.get(shapes)
        if reason is None:
            try:
                results = self._execute(args)
            except UnsupportedByTarget as exc:
                reason = self.reasons[shapes] = f"input shapes {list(shapes)}: {fallback_reason(exc)}"
            except Exception as exc:  # never a silent fallback: name the Subgraph and the shapes
                raise subgraph_error(exc, self.sg.name, self.target, shapes) from exc
            else:
                self.last_placement = self._on_target
                return results
        self.last_placement = Placement(REFERENCE, reason)
        return [np.asarray(r) for r in self.sg.evaluate(*args)]
