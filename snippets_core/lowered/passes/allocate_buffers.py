"""AllocateBuffers: register groups, memory clusters and scratchpad offsets of every Buffer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

# the rt_info keys live beside BufferExpression, so brgemm_utils reads them without importing this pass
from snippets_core.lowered.expression import BUFFER_OFFSET, PORT_BUFFER_OFFSETS
from snippets_core.lowered.passes.compute_buffer_allocation_size import ComputeBufferAllocationSize
from snippets_core.lowered.passes.define_buffer_clusters import DefineBufferClusters
from snippets_core.lowered.passes.init_buffers_default import InitBuffersDefault
from snippets_core.lowered.passes.normalize_buffer_register_groups import NormalizeBufferRegisterGroups
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.passes.set_buffer_reg_group import SetBufferRegGroup
from snippets_core.lowered.passes.solve_buffer_memory import SolveBufferMemory
from snippets_core.lowered.symbolic import is_dynamic

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class AllocateBuffers(LoweredPass):
    """Optimized: ComputeBufferAllocationSize -> SetBufferRegGroup -> DefineBufferClusters ->
    SolveBufferMemory -> NormalizeBufferRegisterGroups (minimal memory and registers). Non-optimized:
    ComputeBufferAllocationSize -> InitBuffersDefault (one register, cluster and memory each). The
    scratchpad size lands in ``ir.static_buffer_scratchpad_size``; the numbers are copied onto the
    Buffer nodes."""

    name: ClassVar[str] = "allocate-buffers"
    optimized: bool = True

    def run(self, ir: LinearIR) -> bool:
        if not ir.get_buffers():
            ir.static_buffer_scratchpad_size = 0
            return False
        steps = [ComputeBufferAllocationSize()]
        if self.optimized:
            steps += [SetBufferRegGroup(), DefineBufferClusters(), SolveBufferMemory(), NormalizeBufferRegisterGroups()]
        else:
            steps += [InitBuffersDefault()]
        for step in steps:
            step.run(ir)
        # a register group whose buffers all sit at one dynamic offset: its pointer register starts there (the
        # kernel adds the offset once, from the runtime-parameter block) and its accesses use offset 0, so a loop
        # over it pays nothing for the offset being known only at run time
        offsets: dict[int, set] = {}  # type: ignore[type-arg]
        for b in ir.get_buffers():
            offsets.setdefault(b.reg_group, set()).add(b.offset)
        ir.buffer_group_bases = {g: next(iter(offs)) for g, offs in sorted(offsets.items())
                                 if len(offs) == 1 and is_dynamic(next(iter(offs)))}
        for b in ir.get_buffers():
            b.node.reg_group, b.node.cluster_id, b.node.offset = b.reg_group, b.cluster_id, b.offset
            # the accesses add the buffer's place in the scratchpad (relative to its group's base) at compile time
            # (their pointer register may be shared with other buffers of the group)
            offset = b.offset - ir.buffer_group_bases.get(b.reg_group, 0)
            accesses = ([b.input_expr(0)] if b.input_count else []) + [c.expr for c in b.consumers(0)]
            for acc in accesses:
                if acc.type_name != "LoopEnd":
                    acc.node.rt_info[BUFFER_OFFSET] = offset
            # per port too, for ops that access several buffers (Brgemm); copies made later keep it
            if b.input_count:
                src = b.input_connectors[0].source
                src.expr.node.rt_info.setdefault(PORT_BUFFER_OFFSETS, {})[("out", src.index)] = offset
            for c in b.consumers(0):
                c.expr.node.rt_info.setdefault(PORT_BUFFER_OFFSETS, {})[("in", c.index)] = offset
        return True
