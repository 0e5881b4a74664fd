"""SplitLoops: split a loop so that its outer part can fuse with a neighbour of larger increment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.loop_info import SpecificIterationHandlers, UnifiedLoopInfo
from snippets_core.lowered.passes.fuse_loops import FuseLoops
from snippets_core.lowered.passes.insert_specific_iterations import TransformInnerSplitLoop
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.symbolic import is_dynamic

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


def _can_split(to_split: UnifiedLoopInfo, to_fuse: UnifiedLoopInfo) -> bool:
    # a dynamic work amount is split whatever it is at run time (the outer loop's body may run no iteration and
    # its tail iteration all of it), as the loop to fuse with is a loop whatever it is (a dynamic Brgemm M)
    return (to_split.dim_idx == to_fuse.dim_idx and to_split.work_amount == to_fuse.work_amount
            and to_split.increment < to_fuse.increment and to_fuse.increment % to_split.increment == 0
            and (is_dynamic(to_split.work_amount) or to_split.work_amount >= to_fuse.increment))


@dataclass(frozen=True)
class SplitLoops(LoweredPass):
    """When an expression in loop B reads a value produced in loop A at the same nesting level, both
    over the same dim and work amount, and A's increment is a multiple of B's, split B into an outer
    loop with A's increment and an inner loop over one such block with B's increment; then FuseLoops
    can fuse the outer part with A (the MHA case: one M-block loop shared by both matrix products).
    When the work amount is not a multiple of A's increment, the outer loop's tail iteration shrinks the
    inner loop to the elements left (:class:`TransformInnerSplitLoop`, run by InsertSpecificIterations)."""

    name: ClassVar[str] = "split-loops"

    def run(self, ir: LinearIR) -> bool:
        lm = ir.loop_manager
        changed = False
        for expr in list(ir.exprs):
            for level, loop_id in enumerate(list(expr.loop_ids)):
                for conn in expr.input_connectors:
                    parent = conn.source.expr
                    if len(parent.loop_ids) <= level or parent.loop_ids[:level] != expr.loop_ids[:level]:
                        continue
                    parent_id = parent.loop_ids[level]
                    if parent_id == loop_id:
                        continue
                    to_split, to_fuse = lm.get_loop_info(loop_id), lm.get_loop_info(parent_id)
                    if not (isinstance(to_split, UnifiedLoopInfo) and isinstance(to_fuse, UnifiedLoopInfo)
                            and _can_split(to_split, to_fuse)):
                        continue
                    handlers = SpecificIterationHandlers(
                        last_iter=[TransformInnerSplitLoop(to_split.dim_idx, to_fuse.increment)])
                    outer = UnifiedLoopInfo(to_split.work_amount, to_fuse.increment, list(to_split.input_ports),
                                            list(to_split.output_ports), handlers, dim_idx=to_split.dim_idx)
                    to_split.is_split_inner = True  # type: ignore[attr-defined]
                    outer_id = lm.add_loop_info(outer)
                    to_split.work_amount = to_fuse.increment
                    for e in ir.exprs:
                        if loop_id in e.loop_ids:
                            e.loop_ids.insert(e.loop_ids.index(loop_id), outer_id)
                    changed = True
                    break
                if changed:
                    break
            if changed:
                break
        if changed:
            FuseLoops().run(ir)
            self.run(ir)  # one split at a time: expressions and loops changed
        return changed
