"""InsertLoadStore: explicit memory accesses after memory sources and before memory sinks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.op_kinds import (
    LOADS,
    MEMORY_ACCESS_PORTS,
    MEMORY_SINKS,
    MEMORY_SOURCES,
    SHAPE_ONLY,
    STORES,
    is_memory_access_output,
)
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.expression import ExpressionPort
    from snippets_core.lowered.linear_ir import LinearIR

#: consumers of memory that need no Load: control, buffers, shape-only ops and memory accesses themselves
_NO_LOAD_CONSUMERS = frozenset({"LoopEnd", "Buffer"}) | frozenset(MEMORY_ACCESS_PORTS) | SHAPE_ONLY | LOADS


def access_count(shape: tuple[int, ...], vector_size: int) -> int:
    """Elements one access moves: a whole vector, or one element when the last dim is broadcast."""
    return 1 if shape and shape[-1] == 1 else vector_size


def _memory_consumers(port: ExpressionPort) -> list[ExpressionPort]:
    """Consumers of a memory output, looking through shape-only ops (they keep the same memory)."""
    out = []
    for c in port.connector.get_consumers():
        if c.expr.type_name in SHAPE_ONLY:
            out += _memory_consumers(c.expr.get_output_port(0))
        else:
            out.append(c)
    return out


@dataclass(frozen=True)
class InsertLoadStore(LoweredPass):
    """Insert a Load before every consumer of a Parameter or Buffer (in the consumer's loops) and a
    Store after the producer of every Result or Buffer (in the producer's loops). Accesses move
    ``vector_size`` elements, or one element when the last dim of the port is 1 (broadcast)."""

    name: ClassVar[str] = "insert-load-store"
    vector_size: int = 16

    def run(self, ir: LinearIR) -> bool:
        from snippets_core.ir.ops.snippets import Load, Store

        changed = False
        for expr in list(ir.exprs):
            if expr.type_name in MEMORY_SINKS and expr.input_count:
                src = expr.input_connectors[0].source
                if (src.expr.type_name not in STORES and src.expr.type_name not in SHAPE_ONLY
                        and not is_memory_access_output(src.expr.type_name, src.index)):
                    count = access_count(src.descriptor.preordered_shape, self.vector_size)
                    store = Store(src.expr.node.outputs[src.index], count=count)
                    st = ir.insert_node(store, ir.index(src.expr) + 1, loop_ids=src.expr.loop_ids,
                                        consumers=[expr.get_input_port(0)])
                    st.set_input_port_descriptor(0, st.input_descs[0].with_(subtensor=src.descriptor.subtensor))
                    changed = True
            if expr.type_name in MEMORY_SOURCES:
                for c in _memory_consumers(expr.get_output_port(0)):
                    if c.expr.type_name in _NO_LOAD_CONSUMERS:
                        continue
                    src = c.connector.source
                    count = access_count(c.descriptor.preordered_shape, self.vector_size)
                    load = Load(src.expr.node.outputs[src.index], count=count)
                    ld = ir.insert_node(load, ir.index(c.expr), loop_ids=c.expr.loop_ids, consumers=[c])
                    ld.set_output_port_descriptor(0, ld.output_descs[0].with_(subtensor=c.descriptor.subtensor))
                    changed = True
        return changed
