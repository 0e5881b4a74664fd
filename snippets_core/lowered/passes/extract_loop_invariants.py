"""ExtractLoopInvariants: expressions that compute the same value on every iteration leave the loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.loop_info import LoopPort, LoopPortDesc, LoopPortType, UnifiedLoopInfo
from snippets_core.lowered.op_kinds import LOADS, MEMORY_ACCESS_PORTS, NOT_IN_LOOPS, STORES
from snippets_core.lowered.passes.init_live_ranges import INPLACE_INPUT
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression
    from snippets_core.lowered.linear_ir import LinearIR

#: never hoisted: memory accesses, register sources rematerialized per use, reduction pieces
_KEEP = (frozenset({"Scalar", "VectorBuffer", "Fill", "HorizonMax", "HorizonSum"}) | LOADS | STORES | NOT_IN_LOOPS
         | frozenset(MEMORY_ACCESS_PORTS))


def _hoistable(expr: Expression, loop_id: int) -> bool:
    if expr.type_name in _KEEP or expr.node.rt_info.get(INPLACE_INPUT) is not None or not expr.input_count:
        return False
    return all(loop_id not in c.source.expr.loop_ids for c in expr.input_connectors)


@dataclass(frozen=True)
class ExtractLoopInvariants(LoweredPass):
    """Move an expression whose inputs all come from outside its innermost loop to just before that
    loop (repeatedly, so chains of invariants and then outer loops follow). Its inputs stop being loop
    ports; the loop expressions reading it become entry ports."""

    name: ClassVar[str] = "extract-loop-invariants"

    def run(self, ir: LinearIR) -> bool:
        changed = False
        progress = True
        while progress:
            progress = False
            for expr in list(ir.exprs):
                if not expr.loop_ids or not _hoistable(expr, expr.loop_ids[-1]):
                    continue
                loop_id = expr.loop_ids[-1]
                lm = ir.loop_manager
                info = lm.get_loop_info(loop_id)
                begin, _ = lm.get_loop_bounds(ir, loop_id)
                ir.move(expr, begin)
                expr.set_loop_ids(expr.loop_ids[:-1])
                for p in expr.input_ports():
                    info.replace_port(p, [])
                inside = [c for c in expr.consumers(0) if loop_id in c.expr.loop_ids]
                if any(p.expr_port == expr.get_output_port(0) for p in info.output_ports):
                    info.replace_port(expr.get_output_port(0), [])
                dim_idx = info.dim_idx
                for c in inside:
                    info.input_ports.append(LoopPort(c, LoopPortType.INCREMENTED, dim_idx))
                    if isinstance(info, UnifiedLoopInfo):
                        info.input_port_descs.append(LoopPortDesc())
                progress = changed = True
        return changed

