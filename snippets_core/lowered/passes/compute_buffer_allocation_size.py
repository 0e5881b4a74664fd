"""ComputeBufferAllocationSize: bytes each Buffer needs."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.expression import BufferExpression
    from snippets_core.lowered.linear_ir import LinearIR


def buffer_allocation_size(ir: LinearIR, buf: BufferExpression) -> int:
    """A NewMemory buffer needs its declared shape. An intermediate buffer needs the tile its writer
    produces before the buffer is read: the dims iterated by the writer's loops that do not also
    contain the buffer (the loops they share are re-run, and the buffer reused, per iteration)."""
    if not buf.input_count:
        size = buf.node.allocation_size()
        assert size is not None
        return size
    writer = buf.input_expr(0)
    shape = buf.input_descs[0].preordered_shape
    dims = set()
    for loop_id in writer.loop_ids:
        if loop_id not in buf.loop_ids:
            dims.add(ir.loop_manager.get_loop_info(loop_id).dim_idx)
    elems = prod(shape[-1 - d] for d in sorted(dims) if 0 <= d < len(shape))
    if 0 not in dims and shape and getattr(writer.node, "count", 1) > 1:
        elems *= shape[-1]
    return elems * buf.element_size


@dataclass(frozen=True)
class ComputeBufferAllocationSize(LoweredPass):
    """Set ``allocation_size`` (bytes) of every Buffer expression."""

    name: ClassVar[str] = "compute-buffer-allocation-size"

    def run(self, ir: LinearIR) -> bool:
        for b in ir.get_buffers():
            b.allocation_size = buffer_allocation_size(ir, b)
        return bool(ir.get_buffers())
