"""OptimizeLoopSingleEvaluation: loops that run once keep only their finalization offsets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.loop_info import ExpandedLoopInfo
from snippets_core.lowered.loop_utils import sync_loop_end
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.symbolic import is_dynamic

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class OptimizeLoopSingleEvaluation(LoweredPass):
    """A loop whose work amount equals its increment runs its body exactly once: mark it
    ``evaluate_once`` (no counter, no branch) and move each pointer increment into the finalization
    offset, so the pointer arithmetic happens once, after the body."""

    name: ClassVar[str] = "optimize-loop-single-evaluation"

    def run(self, ir: LinearIR) -> bool:
        changed = False
        for e in ir.exprs:
            if e.type_name != "LoopEnd":
                continue
            info = ir.loop_manager.get_loop_info(e.node.loop_id)
            assert isinstance(info, ExpandedLoopInfo)
            # a dynamic tail (work amount == increment == d0 % 16) runs once or not at all: it keeps its counter
            if info.work_amount == info.increment and not is_dynamic(info.work_amount) and not info.evaluate_once:
                for k in range(len(info.ptr_increments)):
                    info.finalization_offsets[k] += info.ptr_increments[k] * info.increment
                    info.ptr_increments[k] = 0
                info.evaluate_once = True
                changed = True
            sync_loop_end(e, info)
        return changed
