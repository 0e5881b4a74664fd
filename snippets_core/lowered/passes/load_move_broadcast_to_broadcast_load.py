"""LoadMoveBroadcastToBroadcastLoad: ``Load(1) -> BroadcastMove`` becomes one ``BroadcastLoad``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class LoadMoveBroadcastToBroadcastLoad(LoweredPass):
    """Fuse a one-element Load read only by a BroadcastMove into a BroadcastLoad (one instruction)."""

    name: ClassVar[str] = "load-move-broadcast-to-broadcast-load"

    def run(self, ir: LinearIR) -> bool:
        from snippets_core.ir.ops.snippets import BroadcastLoad

        changed = False
        for expr in list(ir.exprs):
            if expr.type_name != "BroadcastMove":
                continue
            load = expr.input_expr(0)
            if load.type_name != "Load" or load.node.count != 1 or len(load.consumers(0)) != 1:
                continue
            if load.loop_ids != expr.loop_ids:
                continue
            src = load.input_connectors[0].source
            node = BroadcastLoad(src.expr.node.outputs[src.index], broadcast_dim=expr.node.broadcast_dim,
                                 offset=load.node.offset)
            new = ir.replace_with_node([load, expr], node)
            new.set_output_port_descriptor(0, new.output_descs[0].with_(subtensor=expr.output_descs[0].subtensor))
            changed = True
        return changed
