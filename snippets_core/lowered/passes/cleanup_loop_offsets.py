"""CleanupLoopOffsets: finalization offsets folded into the enclosing loop, or dropped at the end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.loop_info import ExpandedLoopInfo
from snippets_core.lowered.loop_utils import processed_ports, sync_loop_end
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.symbolic import is_dynamic

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class CleanupLoopOffsets(LoweredPass):
    """After a loop that ends the kernel (only Results follow), the pointers are never used again: its
    finalization offsets become 0. When a loop's end is directly followed by the end of its outer loop,
    each finalization offset is added to the outer loop's increment of the same pointer register."""

    name: ClassVar[str] = "cleanup-loop-offsets"

    def run(self, ir: LinearIR) -> bool:
        lm = ir.loop_manager
        changed = False
        for i, e in enumerate(ir.exprs):
            if e.type_name != "LoopEnd":
                continue
            info = lm.get_loop_info(e.node.loop_id)
            assert isinstance(info, ExpandedLoopInfo), "CleanupLoopOffsets runs after InsertSpecificIterations"
            ports = [k for k, _ in processed_ports(info)]
            rest = ir.exprs[i + 1:]
            if all(x.type_name == "Result" for x in rest):
                for k in ports:
                    changed |= info.finalization_offsets[k] != 0
                    info.finalization_offsets[k] = 0
            elif rest[0].type_name == "LoopEnd":
                outer_expr = rest[0]
                outer = lm.get_loop_info(outer_expr.node.loop_id)
                assert isinstance(outer, ExpandedLoopInfo)
                outer_ports = [k for k, _ in processed_ports(outer)]
                outer_regs = [d.reg for d in outer_expr.input_descs[:-1]]
                for n, k in enumerate(ports):
                    fin = info.finalization_offsets[k]
                    reg = e.input_descs[n].reg
                    if fin == 0 or reg not in outer_regs or is_dynamic(outer.increment):
                        continue
                    rem = fin % outer.increment
                    if is_dynamic(rem) or rem:
                        continue
                    j = outer_ports[outer_regs.index(reg)]
                    outer.ptr_increments[j] += fin // outer.increment
                    info.finalization_offsets[k] = 0
                    changed = True
                sync_loop_end(outer_expr, outer)
            sync_loop_end(e, info)
        return changed
