"""Where each Buffer is read and written, and how each loop moves its pointer (shared by the
optimized buffer-allocation sub-passes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from snippets_core.lowered.loop_info import UnifiedLoopInfo
from snippets_core.lowered.loop_utils import processed_ports

if TYPE_CHECKING:
    from snippets_core.lowered.expression import BufferExpression, Expression, ExpressionPort
    from snippets_core.lowered.linear_ir import LinearIR

Signature = tuple[int, int, int]


def buffer_accesses(buf: BufferExpression) -> list[Expression]:
    """The Stores writing ``buf`` and the Loads reading it."""
    acc = [buf.input_expr(0)] if buf.input_count else []
    acc += [c.expr for c in buf.consumers(0) if c.expr.type_name not in ("LoopEnd",)]
    return acc


def _reaches(port: ExpressionPort, buf: BufferExpression) -> bool:
    if port.is_input:
        return port.connector.source.expr is buf
    return any(c.expr is buf for c in port.connector.get_consumers())


def loop_signatures(ir: LinearIR, buf: BufferExpression) -> dict[int, Signature]:
    """For every loop in which ``buf`` is accessed: (ptr increment, finalization offset, data size) of
    its pointer in that loop; (0, 0, size) when the loop does not move it."""
    sig: dict[int, Signature] = {}
    access_ids = {id(e) for e in buffer_accesses(buf)}
    for acc in buffer_accesses(buf):
        for loop_id in acc.loop_ids:
            sig.setdefault(loop_id, (0, 0, buf.element_size))
    for loop_id, info in ir.loop_manager:
        if loop_id not in sig or not isinstance(info, UnifiedLoopInfo):
            continue
        descs = info.port_descs()
        for k, p in processed_ports(info):
            # the port must reach this buffer (a Brgemm accesses several memories through one expression)
            if id(p.expr_port.expr) in access_ids and _reaches(p.expr_port, buf):
                d = descs[k]
                sig[loop_id] = (d.ptr_increment, d.finalization_offset, d.data_size)
    return sig
