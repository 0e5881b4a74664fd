"""Hook implementations of the example plugin (entry point ``example_passes`` in ``snippets.plugins``).

A positioned pass and its emitters (on by default; see docs/writing_a_pass_plugin.md):

- ``snippets_positioned_passes``: MulAddToFusedMulAdd (``"mul-add-to-fused-mul-add"``) right after
  ``convert-power-to-power-static`` in the data-flow pipeline, for the targets listed in ``EMITTERS``;
- ``snippets_register_emitters``: the FusedMulAdd emitter of each of those targets.

Disable the pass with ``config={"disabled_passes": ["mul-add-to-fused-mul-add"]}``, or the whole plugin
with ``SNIPPETS_BLOCK_PLUGINS=example_passes``.

Two bisecting aids, off unless their variable is set (read on every call, so a test or a shell can change
them between compilations):

- ``SNIPPETS_EXAMPLE_SKIP_OPS="Mish,Erf"``: nodes of these op types are marked SkippedByPlugin.
- ``SNIPPETS_EXAMPLE_VETO_NODES="*attention*,Add_12"``: nodes whose name matches a pattern
  (``fnmatch``, case-sensitive) are vetoed by the tokenization callback.
"""

from __future__ import annotations

import fnmatch
import os
from typing import Any

from snippets_core.passes.pass_manager import PassPosition, PositionedPass
from snippets_core.plugins import hookimpl
from snippets_example_passes.mul_add_to_fused_mul_add import MulAddToFusedMulAdd

ENV_SKIP_OPS = "SNIPPETS_EXAMPLE_SKIP_OPS"
ENV_VETO_NODES = "SNIPPETS_EXAMPLE_VETO_NODES"


#: where MulAddToFusedMulAdd goes: after the last op-rewriting pass every body runs (the decompositions before
#: it make Multiply+Add pairs too) and before PropagatePrecision, so a target's precision table sees FusedMulAdd
POSITION = PassPosition("convert-power-to-power-static", after=True)


def _interpreter_emitter() -> object:
    from snippets_example_passes.interpreter_emitter import FusedMulAddEmitter

    return FusedMulAddEmitter


def _x86_64_emitter() -> object:
    # Imported only when compiling for x86_64_avx512 (the target is loaded then): the plugin never imports
    # a target package otherwise. The target's arithmetic table already holds the vfmadd emitter.
    from snippets_x86_64.emitters.table import EMITTERS

    return EMITTERS["FusedMulAdd"]


#: target name -> the FusedMulAdd emitter factory for it; the pass is offered only to these targets
EMITTERS = {"interpreter": _interpreter_emitter, "x86_64_avx512": _x86_64_emitter}


@hookimpl
def snippets_positioned_passes(target_name: str, config: dict[str, Any]) -> list[PositionedPass]:
    """MulAddToFusedMulAdd after convert-power-to-power-static, for targets that can run FusedMulAdd."""
    if target_name not in EMITTERS:
        return []
    return [PositionedPass(MulAddToFusedMulAdd(), POSITION)]


@hookimpl
def snippets_register_emitters(target_name: str) -> dict[str, object]:
    """The FusedMulAdd emitter of ``target_name`` (nothing for other targets)."""
    load = EMITTERS.get(target_name)
    return {} if load is None else {"FusedMulAdd": load()}


def _env_list(var: str) -> list[str]:
    return [s.strip() for s in os.environ.get(var, "").split(",") if s.strip()]


def skipped_op_types() -> list[str]:
    """The op type names listed in SNIPPETS_EXAMPLE_SKIP_OPS, in the order given."""
    return _env_list(ENV_SKIP_OPS)


def vetoed_node_patterns() -> list[str]:
    """The node-name patterns listed in SNIPPETS_EXAMPLE_VETO_NODES, in the order given."""
    return _env_list(ENV_VETO_NODES)


@hookimpl
def snippets_mark_skipped(model: Any, target_name: str) -> None:
    """Mark the nodes whose op type is listed in SNIPPETS_EXAMPLE_SKIP_OPS as SkippedByPlugin."""
    types = set(skipped_op_types())
    if not types:
        return
    # Imported here: the plugin module must load (and `snippets targets` run) without the tokenizer.
    from snippets_core.tokenization.marks import set_skipped_by_plugin

    for node in model.get_ordered_ops():
        if node.type_name in types:
            set_skipped_by_plugin(node)


@hookimpl
def snippets_tokenization_callback(node: Any, target_name: str) -> str | None:
    """Veto nodes whose name matches a pattern of SNIPPETS_EXAMPLE_VETO_NODES; the reason names it."""
    for pattern in vetoed_node_patterns():
        if fnmatch.fnmatchcase(node.name, pattern):
            return f"node name matches {ENV_VETO_NODES} pattern '{pattern}'"
    return None
