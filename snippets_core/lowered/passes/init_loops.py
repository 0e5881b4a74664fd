"""InitLoops: pointer increments, finalization offsets and data sizes of every loop port."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.loop_info import LoopPortDesc, LoopPortType, UnifiedLoopInfo
from snippets_core.lowered.loop_utils import is_memory_port, memory_port_stride
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR
    from snippets_core.lowered.loop_info import LoopPort


def _init_port(p: LoopPort, work_amount: int) -> tuple[LoopPort, LoopPortDesc]:
    if not is_memory_port(p):
        # a register flowing into or out of the loop: no pointer to move
        return p.with_(type=LoopPortType.NOT_PROCESSED), LoopPortDesc()
    ep = p.expr_port
    src = ep if not ep.is_input else ep.connector.source
    et = src.expr.node.outputs[src.index].element_type
    # strides of the stored tensor along the planar dim the loop walks: layouts (folded Transposes,
    # LoadReorder orders) become pointer increments here
    inc = memory_port_stride(ep, p.dim_idx) if p.is_incremented else 0
    return p, LoopPortDesc(inc, -inc * work_amount, et.size)


@dataclass(frozen=True)
class InitLoops(LoweredPass):
    """For each port of each loop: the pointer moves by the port's stride along the loop's dim per
    element of work (0 when the port broadcasts along it), and goes back by ``stride * work_amount``
    after the loop. Ports that are registers, not memory, become NOT_PROCESSED."""

    name: ClassVar[str] = "init-loops"

    def run(self, ir: LinearIR) -> bool:
        for _, info in ir.loop_manager:
            if not isinstance(info, UnifiedLoopInfo):
                continue
            ins = [_init_port(p, info.work_amount) for p in info.input_ports]
            outs = [_init_port(p, info.work_amount) for p in info.output_ports]
            info.input_ports = [p for p, _ in ins]
            info.output_ports = [p for p, _ in outs]
            info.input_port_descs = [d for _, d in ins]
            info.output_port_descs = [d for _, d in outs]
        return bool(len(ir.loop_manager))
