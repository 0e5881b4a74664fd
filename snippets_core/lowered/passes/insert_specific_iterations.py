"""InsertSpecificIterations: split each loop into its main body and a tail with rescaled accesses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.errors import CodegenError
from snippets_core.lowered.expression import Expression, ExpressionPort
from snippets_core.lowered.loop_info import ExpandedLoopInfo, LoopPort, SpecificLoopIterType, UnifiedLoopInfo
from snippets_core.lowered.loop_utils import loop_end_of, sync_loop_end
from snippets_core.lowered.op_kinds import LOADS, STORES
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


def update_memory_access_counts(ir: LinearIR, body: list[Expression], tail: int) -> None:
    """Tail handler: vector accesses move only ``tail`` elements (one-element accesses stay)."""
    for e in body:
        if (e.type_name in LOADS or e.type_name in STORES) and getattr(e.node, "count", 1) > 1:
            e.node.count = tail


def set_fill_offset(ir: LinearIR, body: list[Expression], tail: int) -> None:
    """Tail handler: a Fill in the tail overwrites the lanes the tail did not load."""
    for e in body:
        if e.type_name == "Fill":
            e.node.offset = tail


TAIL_HANDLERS = (update_memory_access_counts, set_fill_offset)


def clone_range(ir: LinearIR, exprs: list[Expression], pos: int, loop_map: dict[int, int]) -> dict[int, Expression]:
    """Copy ``exprs`` (a loop with its LoopBegin/LoopEnd) to index ``pos``: inputs from outside the range
    keep their connectors, inputs from inside read the copies; descriptors (with registers) are copied
    and loop ids renamed by ``loop_map``. Returns original id -> copy."""
    copies: dict[int, Expression] = {}
    for k, e in enumerate(exprs):
        srcs = [c.source for c in e.input_connectors]
        node_inputs = [(copies.get(id(s.expr), s.expr)).node.outputs[s.index] for s in srcs]
        conns = [copies[id(s.expr)].output_connectors[s.index] if id(s.expr) in copies else s.connector for s in srcs]
        node = e.node.clone_with_new_inputs(node_inputs)
        if e.type_name == "LoopEnd":
            node.loop_id = loop_map.get(e.node.loop_id, e.node.loop_id)
        new = ir.create_expression(node, conns)
        new.input_descs = list(e.input_descs)
        new.output_descs = list(e.output_descs)
        new.set_loop_ids([loop_map.get(lp, lp) for lp in e.loop_ids])
        new.live_regs = e.live_regs
        ir.insert_expr(new, pos + k)
        copies[id(e)] = new
    return copies


def _expanded(info: UnifiedLoopInfo, t: SpecificLoopIterType, wa: int, inc: int, zero_fin: bool,
              ports_map: dict[int, Expression] | None = None) -> ExpandedLoopInfo:
    def remap(ports: list[LoopPort]) -> list[LoopPort]:
        if ports_map is None:
            return list(ports)
        return [p.with_(expr_port=ExpressionPort(ports_map[id(p.expr_port.expr)], p.expr_port.type,
                                                 p.expr_port.index)) for p in ports]

    descs = info.port_descs()
    fins = [0 if zero_fin else d.finalization_offset for d in descs]
    return ExpandedLoopInfo(wa, inc, remap(info.input_ports), remap(info.output_ports),
                            [d.ptr_increment for d in descs], fins, [d.data_size for d in descs], t, info)


@dataclass(frozen=True)
class InsertSpecificIterations(LoweredPass):
    """Expand every unified loop. If the increment divides the work amount, the loop is its main body.
    Otherwise the main body runs ``work_amount - tail`` elements with no finalization offsets, and a copy
    of the body placed right after it runs the ``tail`` with accesses of ``tail`` elements and the
    finalization offsets (a work amount below the increment keeps only the tail). Registers are
    already assigned, so the copy reuses them."""

    name: ClassVar[str] = "insert-specific-iterations"

    def run(self, ir: LinearIR) -> bool:
        lm = ir.loop_manager
        changed = False
        for loop_id in lm.ids():
            info = lm.get_loop_info(loop_id)
            if not isinstance(info, UnifiedLoopInfo):
                continue
            end_expr = loop_end_of(ir, loop_id)
            begin, end = lm.get_loop_bounds(ir, loop_id)
            begin -= 1  # the LoopBegin sits in the outer loops only
            assert ir.exprs[begin].type_name == "LoopBegin"
            body = ir.exprs[begin:end + 1]
            wa, inc = info.work_amount, info.increment
            tail = wa % inc
            main_wa = wa - tail
            if tail == 0:
                lm.set_loop_info(loop_id, _expanded(info, SpecificLoopIterType.MAIN_BODY, wa, inc, False))
            elif main_wa == 0:
                lm.set_loop_info(loop_id, _expanded(info, SpecificLoopIterType.LAST_ITER, tail, tail, False))
                for h in TAIL_HANDLERS:
                    h(ir, body, tail)
                changed = True
            else:
                if any(e.type_name == "LoopEnd" for e in body[:-1]):
                    raise CodegenError(f"loop {loop_id} has a tail ({wa} % {inc}) and nested loops; "
                                       "tails of outer loops are not supported")
                new_id = max(lm.ids()) + 1
                copies = clone_range(ir, body, end + 1, {loop_id: new_id})
                lm.set_loop_info(loop_id, _expanded(info, SpecificLoopIterType.MAIN_BODY, main_wa, inc, True))
                lm.set_loop_info(new_id, _expanded(info, SpecificLoopIterType.LAST_ITER, tail, tail, False, copies))
                tail_body = [copies[id(e)] for e in body]
                for h in TAIL_HANDLERS:
                    h(ir, tail_body, tail)
                sync_loop_end(tail_body[-1], lm.get_loop_info(new_id))
                changed = True
            sync_loop_end(end_expr, lm.get_loop_info(loop_id))
        ir.enumerate_expressions()
        return changed
