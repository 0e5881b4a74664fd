"""SolveBufferMemory: offsets of the buffer clusters in the scratchpad, sharing memory over time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.loop_manager import LoopManager
from snippets_core.lowered.passes.buffer_access import buffer_accesses
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.symbolic import is_dynamic

if TYPE_CHECKING:
    from snippets_core.lowered.expression import BufferExpression
    from snippets_core.lowered.linear_ir import LinearIR


def _lifetime(ir: LinearIR, buf: BufferExpression) -> tuple[int, int]:
    """First and last LinearIR position at which the buffer's memory is in use; an access inside loops
    that do not contain the buffer keeps it in use over those whole loops."""
    lo, hi = ir.index(buf), ir.index(buf)
    for acc in buffer_accesses(buf):
        a = b = ir.index(acc)
        outer = [lp for lp in acc.loop_ids if lp not in buf.loop_ids]
        if outer:
            a, b = LoopManager.get_loop_bounds(ir, outer[0])
            b -= 1
        lo, hi = min(lo, a), max(hi, b)
    return lo, hi


#: byte alignment of every cluster's place in the scratchpad
ALIGNMENT = 64


@dataclass(frozen=True)
class SolveBufferMemory(LoweredPass):
    """Place clusters in the scratchpad, biggest first, at the lowest offset that does not overlap a
    cluster alive at the same time; the scratchpad size is the highest end."""

    name: ClassVar[str] = "solve-buffer-memory"

    def run(self, ir: LinearIR) -> bool:
        bufs = ir.get_buffers()
        clusters: dict[int, list[BufferExpression]] = {}
        for b in bufs:
            clusters.setdefault(b.cluster_id, []).append(b)
        info = []
        for cid, members in sorted(clusters.items()):
            spans = [_lifetime(ir, b) for b in members]
            # every cluster starts on a cache line: elements stay aligned whatever the neighbours' types
            sizes = [0 if b.allocation_size is None else b.allocation_size for b in members]
            size = -(-(sizes[0] if all(x == sizes[0] for x in sizes) else max(sizes)) // ALIGNMENT) * ALIGNMENT
            info.append((cid, size, min(s[0] for s in spans), max(s[1] for s in spans)))
        # clusters of a size known only at run time go after the others, one after another without sharing memory:
        # the first at the static end of the rest (a static offset), the next ones at offsets known only at run time
        # (expressions of the dims: the kernel reads them from its runtime-parameter block), and the scratchpad
        # size is dynamic (the configurator computes it per shape)
        dynamic = [t for t in info if is_dynamic(t[1])]
        info = [t for t in info if not is_dynamic(t[1])]
        placed: list[tuple[int, int, int, int]] = []  # (offset, size, lo, hi)
        offsets: dict[int, int] = {}
        for cid, size, lo, hi in sorted(info, key=lambda t: (-t[1], t[0])):
            busy = sorted((o, o + s) for o, s, l2, h2 in placed if not (hi < l2 or h2 < lo))
            off = 0
            for a, b in busy:
                if off + size <= a:
                    break
                off = max(off, b)
            placed.append((off, size, lo, hi))
            offsets[cid] = off
        end = max((o + s for o, s, _, _ in placed), default=0)
        for cid, size, _, _ in dynamic:
            offsets[cid] = end
            end = end + size
        for b in bufs:
            b.offset = offsets[b.cluster_id]
        ir.static_buffer_scratchpad_size = end
        return bool(bufs)
