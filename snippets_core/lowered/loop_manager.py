"""LoopManager: the loops of a LinearIR by id."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from snippets_core.errors import ValidationError
from snippets_core.lowered.loop_info import LoopInfo, LoopPort, LoopPortType, UnifiedLoopInfo

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression, ExpressionPort
    from snippets_core.lowered.linear_ir import LinearIR


class LoopManager:
    """Owns every LoopInfo of a LinearIR; an Expression refers to its loops by id (``expr.loop_ids``,
    outermost first)."""

    def __init__(self) -> None:
        self._loops: dict[int, LoopInfo] = {}
        self._next_id = 0

    # --- queries ---------------------------------------------------------------------------------------
    def get_loop_info(self, loop_id: int) -> LoopInfo:
        try:
            return self._loops[loop_id]
        except KeyError:
            raise ValidationError(f"the LinearIR has no loop with id {loop_id}") from None

    def __contains__(self, loop_id: int) -> bool:
        return loop_id in self._loops

    def __iter__(self) -> Iterator[tuple[int, LoopInfo]]:
        return iter(sorted(self._loops.items()))

    def __len__(self) -> int:
        return len(self._loops)

    def ids(self) -> list[int]:
        return sorted(self._loops)

    # --- editing ----------------------------------------------------------------------------------------
    def add_loop_info(self, info: LoopInfo) -> int:
        loop_id = self._next_id
        self._next_id += 1
        self._loops[loop_id] = info
        return loop_id

    def set_loop_info(self, loop_id: int, info: LoopInfo) -> None:
        self._loops[loop_id] = info
        self._next_id = max(self._next_id, loop_id + 1)

    def remove_loop_info(self, loop_id: int) -> None:
        del self._loops[loop_id]

    def reset(self, loops: dict[int, LoopInfo]) -> None:
        self._loops = dict(loops)
        self._next_id = max(loops, default=-1) + 1

    def mark_loop(self, ir: LinearIR, begin: int, end: int, work_amount: int, increment: int, dim_idx: int,
                  entries: list[ExpressionPort], exits: list[ExpressionPort]) -> int:
        """Create a loop over expressions ``ir.exprs[begin:end]`` and make it their outermost loop."""
        info = UnifiedLoopInfo(work_amount, increment,
                               [LoopPort(p, LoopPortType.INCREMENTED, dim_idx) for p in entries],
                               [LoopPort(p, LoopPortType.INCREMENTED, dim_idx) for p in exits], dim_idx=dim_idx)
        loop_id = self.add_loop_info(info)
        for expr in ir.exprs[begin:end]:
            expr.loop_ids.insert(0, loop_id)
        return loop_id

    def replace_loop_port(self, loop_id: int, old: ExpressionPort, new: list[ExpressionPort]) -> bool:
        return self._loops[loop_id].replace_port(old, new)

    def replace_port_everywhere(self, old: ExpressionPort, new: list[ExpressionPort]) -> None:
        for info in self._loops.values():
            info.replace_port(old, new)

    # --- helpers --------------------------------------------------------------------------------------------
    @staticmethod
    def get_io_loop_ports(exprs: list[Expression]) -> tuple[list[ExpressionPort], list[ExpressionPort]]:
        """Entry ports (inputs fed from outside ``exprs``) and exit ports (outputs read outside)."""
        inside = {id(e) for e in exprs}
        entries: list[ExpressionPort] = []
        exits: list[ExpressionPort] = []
        for e in exprs:
            for i, conn in enumerate(e.input_connectors):
                if id(conn.source.expr) not in inside:
                    entries.append(e.get_input_port(i))
            for i, conn in enumerate(e.output_connectors):
                if any(id(c.expr) not in inside for c in conn.get_consumers()):
                    exits.append(e.get_output_port(i))
        return entries, exits

    @staticmethod
    def get_loop_bounds(ir: LinearIR, loop_id: int) -> tuple[int, int]:
        """(first index, one past the last index) of the expressions in loop ``loop_id``."""
        idx = [i for i, e in enumerate(ir.exprs) if loop_id in e.loop_ids]
        if not idx:
            raise ValidationError(f"loop {loop_id} has no expressions")
        if idx[-1] - idx[0] + 1 != len(idx):
            names = ", ".join(ir.exprs[i].name for i in range(idx[0], idx[-1] + 1) if i not in idx)
            raise ValidationError(f"loop {loop_id} is not contiguous: {names} sit inside it without belonging to it")
        return idx[0], idx[-1] + 1

    @staticmethod
    def common_outer_loops(a: Expression, b: Expression) -> list[int]:
        return LoopManager.common_outer_loops_ids(a.loop_ids, b.loop_ids)

    @staticmethod
    def common_outer_loops_ids(a: list[int], b: list[int]) -> list[int]:
        out = []
        for x, y in zip(a, b):
            if x != y:
                break
            out.append(x)
        return out
