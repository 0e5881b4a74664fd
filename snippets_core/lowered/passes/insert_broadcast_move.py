"""InsertBroadcastMove: broadcast a one-element last dim to the whole vector before an eltwise op."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.symbolic import dim_max, is_dynamic
from snippets_core.lowered.op_kinds import LANE_UNIFORM, MEMORY_ACCESS_PORTS
from snippets_core.lowered.passes.init_live_ranges import INPLACE_INPUT
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR

#: ops with several inputs that are not element-wise over them
_NOT_ELTWISE = frozenset({"LoopBegin", "LoopEnd", "Result", "Buffer"}) | frozenset(MEMORY_ACCESS_PORTS)


@dataclass(frozen=True)
class InsertBroadcastMove(LoweredPass):
    """Before an op with several inputs, insert ``BroadcastMove`` on each input whose last dim is 1
    while another input's is larger (unless its producer already fills every lane, or the input is
    a reduction's accumulator register)."""

    name: ClassVar[str] = "insert-broadcast-move"

    def run(self, ir: LinearIR) -> bool:
        from snippets_core.ir.ops.snippets import BroadcastMove

        changed = False
        for expr in list(ir.exprs):
            if expr.input_count < 2 or expr.type_name in _NOT_ELTWISE:
                continue
            lasts = [d.preordered_shape[-1] if d.shape else 1 for d in expr.input_descs]
            target = dim_max(lasts)
            if target == 1:
                continue
            accumulator_input = expr.node.rt_info.get(INPLACE_INPUT)
            for i, last in enumerate(lasts):
                src = expr.input_connectors[i].source
                if last != 1 or src.expr.type_name in LANE_UNIFORM or i == accumulator_input:
                    continue
                # a dynamic dim is None in the node (dynamic in its shape), the LinearIR names it again
                node = BroadcastMove(src.expr.node.outputs[src.index],
                                     broadcast_dim=None if is_dynamic(target) else target)
                ir.insert_node(node, ir.index(expr), loop_ids=expr.loop_ids, consumers=[expr.get_input_port(i)])
                changed = True
        return changed
