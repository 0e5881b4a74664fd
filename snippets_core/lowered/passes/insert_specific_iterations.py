"""InsertSpecificIterations: split each loop into a peeled first iteration, its main body and a tail."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.errors import CodegenError
from snippets_core.lowered.expression import BufferExpression, Expression, ExpressionPort
from snippets_core.lowered.loop_info import ExpandedLoopInfo, LoopPort, SpecificLoopIterType, UnifiedLoopInfo
from snippets_core.lowered.loop_utils import sync_loop_end
from snippets_core.lowered.op_kinds import LOADS, STORES
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.symbolic import is_dynamic

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


#: tail handlers of loops over the innermost dim (vector lanes)
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
        if isinstance(e, BufferExpression) and isinstance(new, BufferExpression):
            new.reg_group, new.cluster_id, new.offset = e.reg_group, e.cluster_id, e.offset
            new.allocation_size = e.allocation_size
        ir.insert_expr(new, pos + k)
        copies[id(e)] = new
    return copies


def _remap_ports(ports: list[LoopPort], copies: dict[int, Expression] | None) -> list[LoopPort]:
    if copies is None:
        return list(ports)
    return [p.with_(expr_port=ExpressionPort(copies[id(p.expr_port.expr)], p.expr_port.type, p.expr_port.index))
            for p in ports]


def _expanded(info: UnifiedLoopInfo, t: SpecificLoopIterType, wa: int, inc: int, zero_fin: bool,
              ports_map: dict[int, Expression] | None = None) -> ExpandedLoopInfo:
    descs = info.port_descs()
    fins = [0 if zero_fin else d.finalization_offset for d in descs]
    return ExpandedLoopInfo(wa, inc, _remap_ports(info.input_ports, ports_map),
                            _remap_ports(info.output_ports, ports_map),
                            [d.ptr_increment for d in descs], fins, [d.data_size for d in descs], t, info)


def _copy_expanded(info: ExpandedLoopInfo, copies: dict[int, Expression]) -> ExpandedLoopInfo:
    return ExpandedLoopInfo(info.work_amount, info.increment, _remap_ports(info.input_ports, copies),
                            _remap_ports(info.output_ports, copies), info.ptr_increments,
                            info.finalization_offsets, info.data_sizes, info.type, info.unified, info.evaluate_once)


def nested_loop_ids(body: list[Expression], loop_id: int) -> list[int]:
    """Ids of the loops inside a loop body (their LoopEnds are in it), in body order."""
    return [e.node.loop_id for e in body if e.type_name == "LoopEnd" and e.node.loop_id != loop_id]


@dataclass(frozen=True)
class TransformInnerSplitLoop:
    """Tail handler of the outer part of a loop SplitLoops split: in the outer loop's tail, the inner part
    walks only the ``tail`` elements left instead of a whole outer ``increment``."""

    dim_idx: int
    increment: int

    def __call__(self, ir: LinearIR, body: list[Expression], amount: int) -> None:
        lm = ir.loop_manager
        for e in body:
            if e.type_name != "LoopEnd":
                continue
            info = lm.get_loop_info(e.node.loop_id)
            if not (isinstance(info, ExpandedLoopInfo) and getattr(info.unified, "is_split_inner", False)
                    and info.dim_idx == self.dim_idx and info.work_amount == self.increment):
                continue
            if info.type != SpecificLoopIterType.MAIN_BODY or self.increment % info.increment:
                raise CodegenError(f"the inner part of split loop {e.node.loop_id} has specific iterations of its "
                                   "own; its outer loop's tail cannot shrink it")
            if amount % info.increment:
                raise CodegenError(f"the tail {amount} of a split loop is not a multiple of its inner increment "
                                   f"{info.increment}")
            old = info.work_amount
            info.work_amount = amount
            info.finalization_offsets = [f * amount // old for f in info.finalization_offsets]
            sync_loop_end(e, info)


@dataclass(frozen=True)
class InsertSpecificIterations(LoweredPass):
    """Expand every unified loop, innermost loops first, into up to three specific iterations:

    * FIRST_ITER, when the loop has first-iteration handlers (the Brgemm K loop: the first block writes C):
      one increment, peeled into a copy placed before the loop;
    * MAIN_BODY: the whole increments left (the original expressions);
    * LAST_ITER: the ``work_amount % increment`` tail, a copy placed after the loop, whose handlers shrink
      its accesses (vector loads/stores for innermost loops, Brgemm blocks, inner split loops).

    A loop of zero work amount (a dim of 0, an empty tensor) stays one MAIN_BODY of zero work amount: its
    LoopBegin skips the body, and what follows the loop (a reduction's horizontal op) sees the initial values.
    Only the last present part applies the finalization offsets. Copies of a loop with loops inside copy
    those (already expanded) loops too, under new ids. Registers are already assigned: copies reuse them."""

    name: ClassVar[str] = "insert-specific-iterations"

    def run(self, ir: LinearIR) -> bool:
        lm = ir.loop_manager
        depth: dict[int, int] = {}
        for e in ir.exprs:
            if e.type_name == "LoopBegin":
                continue
            for k, lid in enumerate(e.loop_ids):
                depth[lid] = max(depth.get(lid, 0), k)
        changed = False
        for loop_id in sorted(lm.ids(), key=lambda lid: (-depth.get(lid, 0), lid)):
            info = lm.get_loop_info(loop_id)
            if isinstance(info, UnifiedLoopInfo):
                changed |= self._expand(ir, loop_id, info)
        ir.enumerate_expressions()
        return changed

    def _expand(self, ir: LinearIR, loop_id: int, info: UnifiedLoopInfo) -> bool:
        lm = ir.loop_manager
        begin, end = lm.get_loop_bounds(ir, loop_id)
        begin -= 1  # the LoopBegin sits in the outer loops only
        assert ir.exprs[begin].type_name == "LoopBegin"
        body = ir.exprs[begin:end + 1]
        wa, inc = info.work_amount, info.increment
        first = bool(info.handlers.first_iter) and wa > inc
        rest = wa - inc if first else wa
        tail = rest % inc
        # as whole increments, a dynamic main body's work amount is visibly a multiple of the increment
        main_wa = (rest // inc) * inc if is_dynamic(rest) else rest - tail
        parts: list[tuple[SpecificLoopIterType, int, int]] = []
        if first:
            parts.append((SpecificLoopIterType.FIRST_ITER, inc, inc))
        # a dynamic work amount always gets a main body and a tail: the configurator gives either zero iterations
        if is_dynamic(main_wa) or main_wa or wa == 0:  # a zero work amount (an empty tensor): no iteration
            parts.append((SpecificLoopIterType.MAIN_BODY, main_wa, inc))
        if is_dynamic(tail) or tail:
            parts.append((SpecificLoopIterType.LAST_ITER, tail, tail))
        # the original expressions become the main body, or the only part there is
        own = next((k for k, p in enumerate(parts) if p[0] == SpecificLoopIterType.MAIN_BODY), len(parts) - 1)
        nested = nested_loop_ids(body, loop_id)
        bodies: list[list[Expression]] = []
        for k, (t, part_wa, part_inc) in enumerate(parts):
            last = k == len(parts) - 1
            if k == own:
                part_id, part_body, copies = loop_id, body, None
            else:
                part_id = max(lm.ids()) + 1
                loop_map = {loop_id: part_id}
                for n, lid in enumerate(nested):
                    loop_map[lid] = part_id + 1 + n
                pos = ir.index(body[0]) if k < own else ir.index(bodies[-1][-1]) + 1
                copies = clone_range(ir, body, pos, loop_map)
                for lid in nested:
                    nested_info = lm.get_loop_info(lid)
                    assert isinstance(nested_info, ExpandedLoopInfo), "inner loops are expanded first"
                    lm.set_loop_info(loop_map[lid], _copy_expanded(nested_info, copies))
                part_body = [copies[id(e)] for e in body]
            lm.set_loop_info(part_id, _expanded(info, t, part_wa, part_inc, not last, copies))
            if t == SpecificLoopIterType.LAST_ITER or (t == SpecificLoopIterType.FIRST_ITER and k != own):
                self._run_handlers(ir, info, t, part_body, part_wa)
            bodies.append(part_body)
            sync_loop_end(part_body[-1], lm.get_loop_info(part_id))
        return len(parts) > 1 or parts[0][0] != SpecificLoopIterType.MAIN_BODY

    @staticmethod
    def _run_handlers(ir: LinearIR, info: UnifiedLoopInfo, t: SpecificLoopIterType, body: list[Expression],
                      amount: int) -> None:
        handlers = list(info.handlers.for_type(t))
        if t == SpecificLoopIterType.LAST_ITER and info.dim_idx == 0:
            handlers = list(TAIL_HANDLERS) + handlers
        for h in handlers:
            h(ir, body, amount)
