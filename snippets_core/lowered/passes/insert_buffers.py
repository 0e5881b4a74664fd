"""InsertBuffers: a value that crosses from one loop nest into another goes through memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.loop_manager import LoopManager
from snippets_core.lowered.op_kinds import SHAPE_ONLY, is_memory_access_input, is_memory_access_output
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression, ExpressionPort
    from snippets_core.lowered.linear_ir import LinearIR

#: producers whose value is memory or a loop-invariant register already
_NO_BUFFER_SOURCES = frozenset({"Parameter", "Buffer", "Scalar", "VectorBuffer", "Constant", "LoopBegin",
                                "LoopEnd"}) | SHAPE_ONLY
_NO_BUFFER_CONSUMERS = frozenset({"Result", "Buffer", "LoopEnd"})


def _needs_buffer(src: Expression, dst: Expression, src_port: int, dst_port: int) -> bool:
    # a matrix product reads and writes memory, never registers
    if is_memory_access_output(src.type_name, src_port) or is_memory_access_input(dst.type_name, dst_port):
        return True
    a, b = src.loop_ids, dst.loop_ids
    if a == b:
        return False
    n = min(len(a), len(b))
    # one nest inside the other: the value stays in a register (an accumulator leaving its loop, or
    # a loop-invariant value entering one)
    return a[:n] != b[:n]


@dataclass(frozen=True)
class InsertBuffers(LoweredPass):
    """Insert an intermediate-memory Buffer on every edge between expressions in different loops (at
    the same nesting level): the producer's loop stores the whole tile, the consumer's loop reads it
    back. The Buffer sits in the loops both share, right after the producer's loop."""

    name: ClassVar[str] = "insert-buffers"

    def run(self, ir: LinearIR) -> bool:
        from snippets_core.ir.ops.snippets import Buffer

        changed = False
        for src in list(ir.exprs):
            if src.type_name in _NO_BUFFER_SOURCES:
                continue
            for j, conn in enumerate(src.output_connectors):
                targets: list[ExpressionPort] = [
                    c for c in conn.get_consumers()
                    if c.expr.type_name not in _NO_BUFFER_CONSUMERS and _needs_buffer(src, c.expr, j, c.index)]
                if not targets:
                    continue
                common = src.loop_ids
                for c in targets:
                    common = LoopManager.common_outer_loops_ids(common, c.expr.loop_ids)
                # right after the producer's loop nest at the first level not shared with the consumers
                if len(src.loop_ids) > len(common):
                    _, pos = LoopManager.get_loop_bounds(ir, src.loop_ids[len(common)])
                else:
                    pos = ir.index(src) + 1
                ir.insert_node(Buffer(src.node.outputs[j]), pos, loop_ids=common, consumers=targets,
                               update_loop_ports=False)
                changed = True
        return changed
