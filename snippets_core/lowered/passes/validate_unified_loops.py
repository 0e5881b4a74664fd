"""ValidateUnifiedLoops: loops are contiguous, properly nested, and their ports belong to them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.errors import ValidationError
from snippets_core.lowered.loop_info import UnifiedLoopInfo
from snippets_core.lowered.loop_manager import LoopManager
from snippets_core.lowered.symbolic import is_dynamic
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


def check_loops(ir: LinearIR, kind: type) -> None:
    members: dict[int, set[int]] = {}
    for e in ir.exprs:
        for lp in e.loop_ids:
            members.setdefault(lp, set()).add(id(e))
    for loop_id, info in ir.loop_manager:
        if not isinstance(info, kind):
            raise ValidationError(f"loop {loop_id} is a {type(info).__name__}, expected {kind.__name__}")
        if loop_id not in members:
            raise ValidationError(f"loop {loop_id} has no expressions")
        LoopManager.get_loop_bounds(ir, loop_id)  # raises when not contiguous
        # a dynamic tail's increment is its size, 0 at run time when there is no tail: only static ones are checked
        if (not is_dynamic(info.increment) and info.increment < 1) or info.work_amount < 0:
            raise ValidationError(f"loop {loop_id}: work amount {info.work_amount}, increment {info.increment}")
        for p in info.all_ports():
            if id(p.expr_port.expr) not in members[loop_id]:
                raise ValidationError(f"loop {loop_id}: port {p.expr_port!r} is not in the loop")
    for e in ir.exprs:
        for outer, inner in zip(e.loop_ids, e.loop_ids[1:]):
            if not members[inner] <= members[outer]:
                raise ValidationError(f"loop {inner} is not nested in loop {outer} (at {e.name})")


@dataclass(frozen=True)
class ValidateUnifiedLoops(LoweredPass):
    """Before InitLoops: every loop is a UnifiedLoopInfo over a contiguous, properly nested range."""

    name: ClassVar[str] = "validate-unified-loops"

    def run(self, ir: LinearIR) -> bool:
        check_loops(ir, UnifiedLoopInfo)
        return False
