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
    """Two Buffers conflict when some loop accessing both moves their pointers differently, or a loop accessing
    one of them leaves its pointer moved at its end; a
    greedy colouring of the conflict graph (buffers in LinearIR order) gives the register groups.
    Buffers of one group share a register: their accesses add the buffer offset at compile time."""

    name: ClassVar[str] = "set-buffer-reg-group"

    def run(self, ir: LinearIR) -> bool:
        bufs = ir.get_buffers()
        sigs = [loop_signatures(ir, b) for b in bufs]

        def conflict(i: int, j: int) -> bool:
            # a loop moves the shared register for both buffers: where both are accessed they must move alike;
            # where one is not accessed, the other's moves must cancel out by the loop's end (net shift 0)
            for lp in sorted(set(sigs[i]) | set(sigs[j])):
                a, b = sigs[i].get(lp), sigs[j].get(lp)
                if a is not None and b is not None:
                    if a != b:
                        return True
                    continue
                inc, fin, _ = a if a is not None else b  # type: ignore[misc]
                if inc * ir.loop_manager.get_loop_info(lp).work_amount + fin != 0:
                    return True
            return False

        colors: list[int] = []
        for i in range(len(bufs)):
            taken = {colors[j] for j in range(i) if conflict(i, j)}
            c = 0
            while c in taken:
                c += 1
            colors.append(c)
            bufs[i].reg_group = c
        return bool(bufs)
