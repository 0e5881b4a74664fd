"""PropagateLayout: the layouts of the memory accesses become the layouts of the kernel's inputs and outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.errors import CodegenError
from snippets_core.lowered.loop_utils import planar_to_stored
from snippets_core.lowered.op_kinds import SHAPE_ONLY, is_memory_access_input, is_memory_access_output
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.expression import ExpressionPort
    from snippets_core.lowered.linear_ir import LinearIR


def _memory_readers(port: ExpressionPort) -> list[ExpressionPort]:
    out = []
    for c in port.connector.get_consumers():
        if c.expr.type_name in SHAPE_ONLY:
            out += _memory_readers(c.expr.get_output_port(0))
        elif is_memory_access_input(c.expr.type_name, c.index):
            out.append(c)
    return out


@dataclass(frozen=True)
class PropagateLayout(LoweredPass):
    """Give each Parameter's output descriptor and each Result's input descriptor the layout through which
    the kernel accesses it (a Brgemm's folded Transpose, a LoadReorder's order), so that the kernel's
    iteration domain, master shape and per-index data offsets are in *planar* order.

    Both descriptors then use the input-port convention: planar dim ``i`` is stored dim ``layout[i]`` (so
    ``preordered_shape`` is the planar shape the loops walk). A Parameter read through two different
    layouts is a CodegenError: one set of data offsets cannot serve both.
    """

    name: ClassVar[str] = "propagate-layout"

    def run(self, ir: LinearIR) -> bool:
        changed = False
        for p in ir.parameters:
            orders = []
            for r in _memory_readers(p.get_output_port(0)):
                order = planar_to_stored(r)
                if order not in orders:
                    orders.append(order)
            if len(orders) > 1:
                raise CodegenError(f"Parameter '{p.name}' is read through different layouts {orders}; "
                                   "the kernel's data offsets can follow only one")
            if orders and orders[0] != p.output_descs[0].layout:
                p.set_output_port_descriptor(0, p.output_descs[0].with_(layout=orders[0]))
                changed = True
        for r in ir.results:
            src = r.input_connectors[0].source
            if not is_memory_access_output(src.expr.type_name, src.index):
                continue
            order = planar_to_stored(src)
            if order != r.input_descs[0].layout:
                r.set_input_port_descriptor(0, r.input_descs[0].with_(layout=order))
                changed = True
        return changed
