"""ValidateExpandedLoops: after InsertSpecificIterations every loop is expanded and consistent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.errors import ValidationError
from snippets_core.lowered.loop_info import ExpandedLoopInfo
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.passes.validate_unified_loops import check_loops

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class ValidateExpandedLoops(LoweredPass):
    """Every loop is an ExpandedLoopInfo whose work amount is a multiple of its increment, with one
    LoopEnd carrying its id."""

    name: ClassVar[str] = "validate-expanded-loops"

    def run(self, ir: LinearIR) -> bool:
        check_loops(ir, ExpandedLoopInfo)
        ends = [e.node.loop_id for e in ir.exprs if e.type_name == "LoopEnd"]
        for loop_id, info in ir.loop_manager:
            if info.work_amount % info.increment:
                raise ValidationError(f"loop {loop_id}: work amount {info.work_amount} is not a multiple of "
                                      f"increment {info.increment} after InsertSpecificIterations")
            if ends.count(loop_id) != 1:
                raise ValidationError(f"loop {loop_id} has {ends.count(loop_id)} LoopEnds")
        return False
