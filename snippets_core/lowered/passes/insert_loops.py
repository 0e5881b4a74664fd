"""InsertLoops: explicit LoopBegin/LoopEnd around every loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.loop_utils import data_pointer_connector, processed_ports, sync_loop_end
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class InsertLoops(LoweredPass):
    """Materialize each loop of the LoopManager as ``LoopBegin ... LoopEnd``. The LoopEnd reads the
    data pointers of the loop's memory ports (so they stay live through the loop) and the LoopBegin's
    control edge; it carries work amount, increment and pointer arithmetic."""

    name: ClassVar[str] = "insert-loops"

    def run(self, ir: LinearIR) -> bool:
        from snippets_core.ir.ops.snippets import LoopBegin, LoopEnd

        lm = ir.loop_manager
        for loop_id in lm.ids():
            info = lm.get_loop_info(loop_id)
            begin, end = lm.get_loop_bounds(ir, loop_id)
            first = ir.exprs[begin]
            outer = first.loop_ids[:first.loop_ids.index(loop_id)]
            lb = ir.insert_node(LoopBegin(), begin, loop_ids=outer, update_loop_ports=False)
            ptrs = []
            for _, p in processed_ports(info):
                conn = data_pointer_connector(p)
                ptrs.append(conn.source.expr.node.outputs[conn.source.index])
            le = ir.insert_node(LoopEnd(*ptrs, lb.node.outputs[-1], loop_id=loop_id), end + 1, loop_ids=outer,
                                update_loop_ports=False)
            sync_loop_end(le, info)
        ir.enumerate_expressions()
        return bool(len(lm))
