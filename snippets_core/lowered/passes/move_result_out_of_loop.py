"""MoveResultOutOfLoop: Results go after every loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class MoveResultOutOfLoop(LoweredPass):
    """Place the Results at the end of the LinearIR (in model order), after the outermost loop that
    produces them, so no Result splits a loop."""

    name: ClassVar[str] = "move-result-out-of-loop"

    def run(self, ir: LinearIR) -> bool:
        changed = False
        for r in ir.results:
            if ir.index(r) != len(ir.exprs) - 1 or r.loop_ids:
                ir.move(r, len(ir.exprs))
                r.set_loop_ids([])
                changed = True
        return changed
