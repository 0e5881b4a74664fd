"""Helpers shared by the loop passes: which loop ports move a data pointer, and the LoopEnd sync."""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING, Any

from snippets_core.lowered.loop_info import ExpandedLoopInfo, LoopInfo, LoopPort, LoopPortType, UnifiedLoopInfo
from snippets_core.lowered.op_kinds import is_memory_access_input, is_memory_access_output

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression, ExpressionPort
    from snippets_core.lowered.linear_ir import LinearIR
    from snippets_core.lowered.port_connector import PortConnector


def is_memory_port(p: LoopPort) -> bool:
    ep = p.expr_port
    t = ep.expr.type_name
    return is_memory_access_input(t, ep.index) if ep.is_input else is_memory_access_output(t, ep.index)


def processed_ports(info: LoopInfo) -> list[tuple[int, LoopPort]]:
    """(index among all ports, port) for the ports whose data pointer the loop shifts."""
    return [(k, p) for k, p in enumerate(info.all_ports()) if p.type != LoopPortType.NOT_PROCESSED]


def data_pointer_connector(p: LoopPort) -> PortConnector:
    """The connector holding the data pointer of a memory loop port (the producer's for a Load, the
    Store's own output for a Store)."""
    ep = p.expr_port
    return ep.connector if not ep.is_input else ep.connector.source.connector


def data_pointer_key(conn: PortConnector) -> tuple[str, int]:
    """Ports with the same key use the same pointer register: one Parameter read twice, or Buffers of
    one register group."""
    from snippets_core.lowered.expression import BufferExpression

    src = conn.source.expr
    if isinstance(src, BufferExpression):
        return ("buffer", src.reg_group)
    for c in conn.get_consumers():
        if isinstance(c.expr, BufferExpression):
            return ("buffer", c.expr.reg_group)
    return ("connector", id(conn))


def port_stride(shape: tuple[int, ...], dim_idx: int) -> int:
    """Elements between two neighbours along dim ``dim_idx`` (0 = innermost); 0 if that dim is 1."""
    if dim_idx >= len(shape) or shape[-1 - dim_idx] == 1:
        return 0
    return prod(shape[len(shape) - dim_idx:])


def inverse_order(order: tuple[int, ...]) -> tuple[int, ...]:
    inv = [0] * len(order)
    for i, o in enumerate(order):
        inv[o] = i
    return tuple(inv)


def planar_to_stored(ep: ExpressionPort) -> tuple[int, ...]:
    """For each planar dim of the tensor an expression port sees, the stored (memory) dim it is.

    Port descriptors keep the stored shape; their layout follows OpenVINO's two conventions: on an input
    port planar dim ``i`` is stored dim ``layout[i]``, on an output port stored dim ``i`` is planar dim
    ``layout[i]`` (the order of a folded Transpose)."""
    desc = ep.descriptor
    return tuple(desc.layout) if ep.is_input else inverse_order(tuple(desc.layout))


def stored_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a dense row-major tensor."""
    return tuple(prod(shape[i + 1:]) for i in range(len(shape)))


def memory_port_stride(ep: ExpressionPort, dim_idx: int) -> int:
    """Elements between two neighbours along planar dim ``dim_idx`` (0 = innermost) of the tensor a memory
    port reads or writes, through its layout; 0 when that dim is 1 (broadcast)."""
    shape = ep.descriptor.shape
    if dim_idx >= len(shape):
        return 0
    stored = planar_to_stored(ep)[len(shape) - 1 - dim_idx]
    return 0 if shape[stored] == 1 else stored_strides(shape)[stored]


def loop_arrays(info: LoopInfo) -> dict[str, list[Any]]:
    """The per-processed-port arrays a LoopEnd carries."""
    ports = processed_ports(info)
    if isinstance(info, UnifiedLoopInfo):
        descs = info.port_descs()
        inc = [descs[k].ptr_increment for k, _ in ports]
        fin = [descs[k].finalization_offset for k, _ in ports]
        sizes = [descs[k].data_size for k, _ in ports]
    else:
        assert isinstance(info, ExpandedLoopInfo)
        inc = [info.ptr_increments[k] for k, _ in ports]
        fin = [info.finalization_offsets[k] for k, _ in ports]
        sizes = [info.data_sizes[k] for k, _ in ports]
    return {"ptr_increments": inc, "finalization_offsets": fin, "element_type_sizes": sizes,
            "is_incremented": [p.is_incremented for _, p in ports],
            "input_num": sum(1 for k, _ in ports if k < len(info.input_ports)),
            "output_num": sum(1 for k, _ in ports if k >= len(info.input_ports))}


def sync_loop_end(loop_end: Expression, info: LoopInfo) -> None:
    """Write a LoopInfo's numbers onto its LoopEnd node (what emitters read)."""
    node = loop_end.node
    arrays = loop_arrays(info)
    node.work_amount = info.work_amount
    node.increment = info.increment
    node.ptr_increments = tuple(arrays["ptr_increments"])
    node.finalization_offsets = tuple(arrays["finalization_offsets"])
    node.element_type_sizes = tuple(arrays["element_type_sizes"])
    node.is_incremented = tuple(arrays["is_incremented"])
    node.input_num = arrays["input_num"]
    node.output_num = arrays["output_num"]
    node.evaluate_once = bool(getattr(info, "evaluate_once", False))


def loop_end_of(ir: LinearIR, loop_id: int) -> Expression:
    for e in ir.exprs:
        if e.type_name == "LoopEnd" and e.node.loop_id == loop_id:
            return e
    raise KeyError(loop_id)


def loop_begin_of(loop_end: Expression) -> Expression:
    return loop_end.input_connectors[-1].source.expr
