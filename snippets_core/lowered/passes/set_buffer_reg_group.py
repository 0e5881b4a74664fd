"""SetBufferRegGroup: Buffers that can share one pointer register (graph colouring)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.passes.buffer_access import loop_signatures
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class SetBufferRegGroup(LoweredPass):
    """Two Buffers conflict when some loop accesses both but moves their pointers differently; a
    greedy colouring of the conflict graph (buffers in LinearIR order) gives the register groups.
    Buffers of one group share a register: their accesses add the buffer offset at compile time."""

    name: ClassVar[str] = "set-buffer-reg-group"

    def run(self, ir: LinearIR) -> bool:
        bufs = ir.get_buffers()
        sigs = [loop_signatures(ir, b) for b in bufs]

        def conflict(i: int, j: int) -> bool:
            common = set(sigs[i]) & set(sigs[j])
            return any(sigs[i][lp] != sigs[j][lp] for lp in sorted(common))

        colors: list[int] = []
        for i in range(len(bufs)):
            taken = {colors[j] for j in range(i) if conflict(i, j)}
            c = 0
            while c in taken:
                c += 1
            colors.append(c)
            bufs[i].reg_group = c
        return bool(bufs)
