"""NormalizeLoopIDs: loop ids numbered 0..n-1 in the order their LoopEnds execute."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class NormalizeLoopIDs(LoweredPass):
    """Renumber loops by the position of their LoopEnd (inner loops before the outer loop that contains
    them), in the LoopManager, every expression's loop ids and every LoopEnd."""

    name: ClassVar[str] = "normalize-loop-ids"

    def run(self, ir: LinearIR) -> bool:
        ends = [e for e in ir.exprs if e.type_name == "LoopEnd"]
        mapping = {e.node.loop_id: i for i, e in enumerate(ends)}
        if all(k == v for k, v in mapping.items()):
            return False
        lm = ir.loop_manager
        lm.reset({mapping[k]: info for k, info in lm})
        for e in ir.exprs:
            e.set_loop_ids([mapping[lp] for lp in e.loop_ids])
        for e in ends:
            e.node.loop_id = mapping[e.node.loop_id]
        return True
