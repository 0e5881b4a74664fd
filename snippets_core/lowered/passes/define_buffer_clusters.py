"""DefineBufferClusters: Buffers that can live in the same memory (in-place)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.op_kinds import MEMORY_ACCESS_PORTS
from snippets_core.lowered.passes.buffer_access import loop_signatures
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.expression import BufferExpression
    from snippets_core.lowered.linear_ir import LinearIR


def _inplace(ir: LinearIR, src: BufferExpression, dst: BufferExpression) -> bool:
    """``dst`` may reuse ``src``'s memory: one loop nest reads all of ``src`` and writes ``dst`` with
    the same pointer movement, every read of an element comes before the write to it, no element of
    ``src`` is read again in a later iteration, and the sizes match."""
    if not dst.input_count or src.allocation_size != dst.allocation_size or src.element_size != dst.element_size:
        return False
    store = dst.input_expr(0)
    readers = [c.expr for c in src.consumers(0) if c.expr.type_name != "LoopEnd"]
    if store.type_name in MEMORY_ACCESS_PORTS or any(r.type_name in MEMORY_ACCESS_PORTS for r in readers):
        return False  # a matrix op (Brgemm, BrgemmCopyB) reads whole rows or columns, not element by element
    if not readers or not store.loop_ids:
        return False
    pos_store = ir.index(store)
    for r in readers:
        if r.loop_ids != store.loop_ids or ir.index(r) > pos_store:
            return False
    s_src, s_dst = loop_signatures(ir, src), loop_signatures(ir, dst)
    if any(s_src.get(lp) != s_dst.get(lp) for lp in store.loop_ids):
        return False
    # A loop that does not move src's pointer reads the same src every iteration: unless src is written
    # again inside that loop (a per-iteration Buffer), the first iteration's dst writes would clobber what
    # the next iterations read (a broadcast [B,1,1,S] mask Buffer read in every row of the M loop).
    writer_loops = set(src.input_expr(0).loop_ids) if src.input_count else set()
    return all(s_src[lp][0] != 0 or lp in writer_loops for lp in store.loop_ids)


@dataclass(frozen=True)
class DefineBufferClusters(LoweredPass):
    """Group Buffers into clusters that share memory: a Buffer written in the loop that consumes
    another Buffer element by element joins that Buffer's cluster."""

    name: ClassVar[str] = "define-buffer-clusters"

    def run(self, ir: LinearIR) -> bool:
        bufs = ir.get_buffers()
        cluster = list(range(len(bufs)))
        used_as_source: set[int] = set()
        for j, dst in enumerate(bufs):
            for i in range(j):
                if i not in used_as_source and _inplace(ir, bufs[i], dst):
                    cluster[j] = cluster[i]
                    used_as_source.add(i)
                    break
        ids: dict[int, int] = {}
        for b, c in zip(bufs, cluster):
            b.cluster_id = ids.setdefault(c, len(ids))
        return bool(bufs)
