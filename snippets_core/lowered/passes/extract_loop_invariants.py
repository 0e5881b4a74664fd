"""ExtractLoopInvariants: expressions that compute the same value on every iteration leave the loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.expression import BufferExpression
from snippets_core.lowered.loop_info import LoopPort, LoopPortDesc, LoopPortType, UnifiedLoopInfo
from snippets_core.lowered.loop_utils import planar_to_stored
from snippets_core.lowered.op_kinds import LOADS, MEMORY_ACCESS_PORTS, NOT_IN_LOOPS, STORES
from snippets_core.lowered.passes.init_live_ranges import INPLACE_INPUT
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression, ExpressionPort
    from snippets_core.lowered.linear_ir import LinearIR
    from snippets_core.lowered.loop_info import LoopInfo

#: never hoisted: stores, matrix ops, register sources rematerialized per use, reduction pieces
_KEEP = (frozenset({"Scalar", "VectorBuffer", "Fill", "HorizonMax", "HorizonSum", "LoadReorder"}) | STORES
         | NOT_IN_LOOPS | frozenset(MEMORY_ACCESS_PORTS))
#: memory reads that may leave a loop that does not move their pointer (a reorder keeps its layout logic inside)
_HOISTABLE_LOADS = LOADS - {"LoadReorder"}


def _extent_one_along(ep: ExpressionPort, dim_idx: int) -> bool:
    """True when the tensor a memory port reads has extent 1 along planar dim ``dim_idx`` (0 = innermost) and
    every dim inside it (OpenVINO's ``stride * dim == 1``): the loop over that dim reads the same elements on
    every iteration."""
    shape = ep.descriptor.shape
    rank = len(shape)
    if dim_idx >= rank:
        return True
    to_stored = planar_to_stored(ep)
    return all(shape[to_stored[rank - 1 - k]] == 1 for k in range(dim_idx + 1))


def _reads_buffer_written_in(expr: Expression, loop_id: int) -> bool:
    src = expr.input_expr(0)
    if not isinstance(src, BufferExpression):
        return False
    return any(loop_id in c.source.expr.loop_ids for c in src.input_connectors)


def _is_port_of(info: LoopInfo, ep: ExpressionPort) -> bool:
    return any(p.expr_port == ep for p in info.input_ports)


def _hoistable(expr: Expression, loop_id: int, info: LoopInfo) -> bool:
    if expr.type_name in _KEEP or expr.node.rt_info.get(INPLACE_INPUT) is not None or not expr.input_count:
        return False
    if expr.type_name in _HOISTABLE_LOADS:
        # the loop must not move the pointer (extent 1 along its dim) and nothing inside it may write the memory
        ep = expr.get_input_port(0)
        return (_is_port_of(info, ep) and _extent_one_along(ep, info.dim_idx)
                and not _reads_buffer_written_in(expr, loop_id))
    # a pure computation: every input is a value made before the loop
    return all(loop_id not in c.source.expr.loop_ids for c in expr.input_connectors)


@dataclass(frozen=True)
class ExtractLoopInvariants(LoweredPass):
    """Move an expression that computes the same value on every iteration of its innermost loop to just
    before that loop (repeatedly, so chains of invariants and then outer loops follow): a pure computation
    whose inputs all come from outside the loop, or a Load/BroadcastLoad whose data has extent 1 along the
    loop's dim (the loop never moves its pointer; outer loops still do). Its inputs stop being ports of that
    loop; the loop expressions reading it become entry ports. InitLoops, which runs after, then gives the
    remaining ports their pointer increments and finalization offsets."""

    name: ClassVar[str] = "extract-loop-invariants"

    def run(self, ir: LinearIR) -> bool:
        changed = False
        progress = True
        while progress:
            progress = False
            for expr in list(ir.exprs):
                if not expr.loop_ids:
                    continue
                loop_id = expr.loop_ids[-1]
                lm = ir.loop_manager
                info = lm.get_loop_info(loop_id)
                if not _hoistable(expr, loop_id, info):
                    continue
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
                    if _is_port_of(info, c):
                        continue
                    info.input_ports.append(LoopPort(c, LoopPortType.INCREMENTED, dim_idx))
                    if isinstance(info, UnifiedLoopInfo):
                        info.input_port_descs.append(LoopPortDesc())
                progress = changed = True
        return changed
