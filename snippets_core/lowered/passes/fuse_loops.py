"""FuseLoops: merge neighbouring loops that iterate the same dim the same way."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.loop_info import LoopInfo, SpecificIterationHandlers, SpecificLoopIterType, UnifiedLoopInfo
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression
    from snippets_core.lowered.linear_ir import LinearIR


def _segments(ir: LinearIR, level: int, begin: int, end: int) -> list[tuple[int | None, int, int]]:
    """Runs of ``ir.exprs[begin:end]`` with the same loop id at ``level`` (None: no loop there)."""
    segs: list[tuple[int | None, int, int]] = []
    for i in range(begin, end):
        ids = ir.exprs[i].loop_ids
        key = ids[level] if len(ids) > level else None
        if segs and segs[-1][0] == key:
            segs[-1] = (key, segs[-1][1], i + 1)
        else:
            segs.append((key, i, i + 1))
    return segs


def _compatible(a: LoopInfo, b: LoopInfo) -> bool:
    return (a.work_amount == b.work_amount and a.increment == b.increment and a.dim_idx == b.dim_idx
            and _edges_agree(a, b))


def _edges_agree(a: LoopInfo, b: LoopInfo) -> bool:
    """Data flowing from loop A into loop B is walked the same way by both (same dim, both incremented):
    a Brgemm reading a product along its K dim (a not-incremented port) needs all of it, not one block."""
    for pb in b.input_ports:
        src = pb.expr_port.connector.source
        for pa in a.output_ports:
            if pa.expr_port == src and (pa.type != pb.type or pa.dim_idx != pb.dim_idx):
                return False
    return True


def _plan_moves(ir: LinearIR, a_range: tuple[int, int], between: list[Expression],
                b_range: tuple[int, int]) -> tuple[list[Expression], list[Expression]] | None:
    """Split the expressions between loops A and B into those that can go before A and those that can
    go after B; None if one of them can go neither way."""
    a_exprs = {id(e) for e in ir.exprs[a_range[0]:a_range[1]]}
    b_exprs = {id(e) for e in ir.exprs[b_range[0]:b_range[1]]}
    before: list[Expression] = []
    after: list[Expression] = []
    after_ids: set[int] = set()
    for e in between:
        reads_a = any(id(c.source.expr) in a_exprs or id(c.source.expr) in after_ids for c in e.input_connectors)
        if not reads_a:
            before.append(e)
            continue
        feeds_b = any(id(c.expr) in b_exprs for conn in e.output_connectors for c in conn.get_consumers())
        if feeds_b:
            return None
        after.append(e)
        after_ids.add(id(e))
    # something that must stay after B may not feed an expression that goes before A
    for e in before:
        if any(id(c.source.expr) in after_ids for c in e.input_connectors):
            return None
    return before, after


def fuse_into(ir: LinearIR, a_id: int, b_id: int, level: int) -> None:
    """Relabel loop ``b_id`` as ``a_id`` (at ``level``) and merge their ports."""
    lm = ir.loop_manager
    a, b = lm.get_loop_info(a_id), lm.get_loop_info(b_id)
    for e in ir.exprs:
        if len(e.loop_ids) > level and e.loop_ids[level] == b_id:
            e.loop_ids[level] = a_id
    members = {id(e) for e in ir.exprs if a_id in e.loop_ids}
    ins = [p for p in a.input_ports + b.input_ports if id(p.expr_port.connector.source.expr) not in members]
    outs = [p for p in a.output_ports + b.output_ports
            if any(id(c.expr) not in members for c in p.expr_port.connector.get_consumers())]
    handlers = SpecificIterationHandlers()
    for info in (a, b):
        if isinstance(info, UnifiedLoopInfo):
            for t in SpecificLoopIterType:
                for h in info.handlers.for_type(t):
                    if h not in handlers.for_type(t):
                        handlers.for_type(t).append(h)
    fused = UnifiedLoopInfo(a.work_amount, a.increment, ins, outs, handlers, dim_idx=a.dim_idx)
    if getattr(a, "is_split_inner", False) or getattr(b, "is_split_inner", False):
        fused.is_split_inner = True  # type: ignore[attr-defined]
    lm.set_loop_info(a_id, fused)
    lm.remove_loop_info(b_id)


@dataclass(frozen=True)
class FuseLoops(LoweredPass):
    """Fuse two loops at the same nesting level when they have the same work amount, increment and dim
    and nothing between them needs both (expressions in between move before the first loop or after
    the second: Results typically go after). Outer loops fuse first, then the loops inside them."""

    name: ClassVar[str] = "fuse-loops"

    def run(self, ir: LinearIR) -> bool:
        changed = False
        while self._fuse_once(ir, 0, 0, len(ir.exprs)):
            changed = True
        return changed

    def _fuse_once(self, ir: LinearIR, level: int, begin: int, end: int) -> bool:
        lm = ir.loop_manager
        segs = _segments(ir, level, begin, end)
        loop_segs = [k for k, s in enumerate(segs) if s[0] is not None]
        for x, y in itertools.pairwise(loop_segs):
            a_id, a0, a1 = segs[x]
            b_id, b0, b1 = segs[y]
            if not _compatible(lm.get_loop_info(a_id), lm.get_loop_info(b_id)):  # type: ignore[arg-type]
                continue
            between = ir.exprs[a1:b0]
            plan = _plan_moves(ir, (a0, a1), between, (b0, b1))
            if plan is None:
                continue
            before, after = plan
            for e in before:
                ir.move(e, a0)
                a0 += 1
            last_b = ir.exprs[b1 - 1]
            for e in reversed(after):
                ir.move(e, ir.index(last_b) + 1)
            fuse_into(ir, a_id, b_id, level)  # type: ignore[arg-type]
            return True
        for key, s0, s1 in segs:
            if key is not None and self._fuse_once(ir, level + 1, s0, s1):
                return True
        return False
