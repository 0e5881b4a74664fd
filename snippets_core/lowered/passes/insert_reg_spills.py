"""InsertRegSpills: save and restore live registers around expressions that call out of the kernel."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class InsertRegSpills(LoweredPass):
    """Around every expression whose op is in ``abi_call_ops`` (an emitter that calls a binary, such
    as a Brgemm kernel), insert ``RegSpillBegin``/``RegSpillEnd`` holding the registers live across it,
    so only those are saved instead of every caller-saved register."""

    name: ClassVar[str] = "insert-reg-spills"
    abi_call_ops: frozenset[str] = frozenset()

    def run(self, ir: LinearIR) -> bool:
        from snippets_core.ir.ops.snippets import RegSpillBegin, RegSpillEnd

        changed = False
        for e in list(ir.exprs):
            if e.type_name not in self.abi_call_ops:
                continue
            own = {d.reg for d in e.input_descs + e.output_descs}
            regs = tuple(r for r in e.live_regs if r not in own)
            begin = ir.insert_node(RegSpillBegin(regs_to_spill=regs), ir.index(e), loop_ids=e.loop_ids,
                                   update_loop_ports=False)
            ir.insert_node(RegSpillEnd(begin.node.outputs[0]), ir.index(e) + 1, loop_ids=e.loop_ids,
                           update_loop_ports=False)
            changed = True
        if changed:
            ir.enumerate_expressions()
        return changed
