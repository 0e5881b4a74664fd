"""ReduceDecomposition: a last-axis ReduceMax/ReduceSum becomes a vector accumulation loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.errors import UnsupportedOpError
from snippets_core.ir.ops.snippets import MAX_MAY_DROP_NAN
from snippets_core.lowered.passes.init_live_ranges import INPLACE_INPUT
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR

#: reduce op -> (accumulating binary op, horizontal op, 32-bit identity pattern)
REDUCTIONS = {
    # -inf, the identity of max: an empty row (or one of -inf only) reduces to -inf, as numpy with initial=-inf
    "SnippetsReduceMax": ("Maximum", "HorizonMax", 0xFF800000),
    "SnippetsReduceSum": ("Add", "HorizonSum", 0x00000000),
}


@dataclass(frozen=True)
class ReduceDecomposition(LoweredPass):
    """``ReduceMax(x)`` over the last axis becomes, inside the reduction's outer loops::

        acc = Fill(VectorBuffer, offset=0, identity)            # before the loop
        loop over the last dim (increment vector_size):
            v = Fill(x, offset=vector_size, identity)         # tail iterations fill unread lanes
            acc = Maximum(v, acc)                             # accumulates in acc's register
        HorizonMax(acc)                                       # after the loop: every lane = max

    (``Add``/``HorizonSum``/0 for ReduceSum). The accumulator keeps one register across iterations
    (the ``INPLACE_INPUT`` hint for register assignment)."""

    name: ClassVar[str] = "reduce-decomposition"
    vector_size: int = 16

    def run(self, ir: LinearIR) -> bool:
        from snippets_core.ir.node import OPS
        from snippets_core.ir.ops.snippets import Fill, VectorBuffer

        changed = False
        for r in list(ir.exprs):
            if r.type_name not in REDUCTIONS:
                continue
            rank = len(r.input_descs[0].shape)
            axis = r.node.axis + rank if r.node.axis < 0 else r.node.axis
            if axis != rank - 1:
                raise UnsupportedOpError(f"{r.type_name} '{r.name}' reduces axis {r.node.axis}; only the last axis "
                                         "can be lowered")
            binary, horizon, identity = REDUCTIONS[r.type_name]
            src = r.input_connectors[0].source
            x = src.expr.node.outputs[src.index]
            et = x.element_type
            outer = list(r.loop_ids)
            pos = ir.index(r)
            vb = ir.insert_node(VectorBuffer(element_type=et), pos, loop_ids=outer, update_loop_ports=False)
            init = ir.insert_node(Fill(vb.node.outputs[0], offset=0, fill_value=identity), pos + 1,
                                  loop_ids=outer, update_loop_ports=False)
            tail_fill = ir.insert_node(Fill(x, offset=self.vector_size, fill_value=identity), pos + 2,
                                       loop_ids=outer, update_loop_ports=False)
            acc_node = OPS[binary](tail_fill.node.outputs[0], init.node.outputs[0])
            acc_node.rt_info[INPLACE_INPUT] = 1
            hz_node = OPS[horizon](acc_node.outputs[0])
            if r.node.rt_info.get(MAX_MAY_DROP_NAN):  # a Softmax's max: the emitters may drop NaN lanes
                acc_node.rt_info[MAX_MAY_DROP_NAN] = hz_node.rt_info[MAX_MAY_DROP_NAN] = True
            acc = ir.insert_node(acc_node, pos + 3, loop_ids=outer, update_loop_ports=False)
            hz = ir.insert_node(hz_node, pos + 4, loop_ids=outer, update_loop_ports=False)
            # the reduction's loop ports move to the new expressions
            ir.loop_manager.replace_port_everywhere(r.get_input_port(0), [tail_fill.get_input_port(0)])
            ir.loop_manager.replace_port_everywhere(r.get_output_port(0), [hz.get_output_port(0)])
            for c in r.consumers(0):
                ir.replace_input(c, hz.output_connectors[0])
            ir.erase(r)
            ir.loop_manager.mark_loop(ir, ir.index(tail_fill), ir.index(acc) + 1, r.input_descs[0].shape[-1], self.vector_size, 0,
                                      [tail_fill.get_input_port(0)], [acc.get_output_port(0)])
            # mark_loop puts the new loop first; it is the innermost one
            for e in (tail_fill, acc):
                e.loop_ids.append(e.loop_ids.pop(0))
            changed = True
        return changed
