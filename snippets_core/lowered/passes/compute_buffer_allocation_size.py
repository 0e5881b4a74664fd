"""ComputeBufferAllocationSize: bytes each Buffer needs."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Any, ClassVar

from snippets_core.lowered.brgemm_utils import resolve_dim
from snippets_core.lowered.loop_info import LoopPortType
from snippets_core.lowered.op_kinds import MEMORY_ACCESS_PORTS
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.port_descriptor import FULL_DIM
from snippets_core.lowered.symbolic import any_dynamic, dim_min, extent_max

if TYPE_CHECKING:
    from snippets_core.lowered.expression import BufferExpression
    from snippets_core.lowered.linear_ir import LinearIR


def buffer_allocation_size(ir: LinearIR, buf: BufferExpression) -> int:
    """A NewMemory buffer needs its declared shape. An intermediate buffer needs the tile its writer
    produces before the buffer is read: along each dim iterated by a writer's loop that does not also
    contain the buffer, the loop's work amount (the loops they share are re-run, and the buffer reused,
    per iteration); a Brgemm writer adds the rows and columns of its block."""
    if not buf.input_count:
        size = buf.node.allocation_size()
        assert size is not None
        return size
    writer = buf.input_expr(0)
    shape = buf.input_descs[0].preordered_shape
    extents: dict[int, int] = {}
    for loop_id in writer.loop_ids:
        if loop_id not in buf.loop_ids:
            info = ir.loop_manager.get_loop_info(loop_id)
            port = next((p for p in info.output_ports if p.expr_port.expr is writer), None)
            if port is not None and port.type == LoopPortType.NOT_INCREMENTED:
                continue  # a reduction loop (a Brgemm's K) writes the same tile again
            d = port.dim_idx if port is not None else info.dim_idx
            if 0 <= d < len(shape):
                extents[d] = extent_max(extents.get(d, 1), _min_bound(info.work_amount, shape[-1 - d]))
    if writer.type_name in MEMORY_ACCESS_PORTS:
        # (Brgemm, BrgemmCopyB) the block of C one call writes (whole dims unless a loop outside the buffer walks them)
        sub = writer.output_descs[0].subtensor or (FULL_DIM, FULL_DIM)
        for d, s in ((1, sub[-2]), (0, sub[-1])):
            if d < len(shape) and d not in extents:
                extents[d] = resolve_dim(s, shape[-1 - d])
    elems = prod(extents.values())
    if 0 not in extents and shape and getattr(writer.node, "count", 1) > 1:
        elems *= shape[-1]
    return elems * buf.element_size


def _min_bound(a: Any, b: Any) -> Any:
    """An upper bound of ``min(a, b)`` for sizing a buffer: the exact min where it is known, else the static one of
    the two (a dynamic extent next to a static one, e.g. a broadcast dim of 1, is at most that static value)."""
    if a == b or not any_dynamic((a, b)):
        return dim_min(a, b)
    static = [x for x in (a, b) if not any_dynamic((x,))]
    return min(static) if static else dim_min(a, b)


@dataclass(frozen=True)
class ComputeBufferAllocationSize(LoweredPass):
    """Set ``allocation_size`` (bytes) of every Buffer expression."""

    name: ClassVar[str] = "compute-buffer-allocation-size"

    def run(self, ir: LinearIR) -> bool:
        for b in ir.get_buffers():
            b.allocation_size = buffer_allocation_size(ir, b)
        return bool(ir.get_buffers())
