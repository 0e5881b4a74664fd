"""AssignRegisters: abstract registers to the target's physical registers, reusing freed ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.errors import CodegenError, UnsupportedByTarget
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.port_descriptor import Reg, RegType

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR
    from snippets_core.lowered.passes.init_live_ranges import LiveRange

_DATA_ORDER = {"input": 0, "output": 1, "buffer": 2}


@dataclass(frozen=True)
class AssignRegisters(LoweredPass):
    """Map the abstract registers of InitLiveRanges onto the pools (physical register numbers per
    class). Data pointers take the first gprs in the order inputs, outputs, buffer groups (the kernel
    ABI); every other value gets the lowest free register of its class by a linear scan over live
    intervals, so registers with non-overlapping live ranges are reused. Too few registers is a
    CodegenError naming the expression."""

    name: ClassVar[str] = "assign-registers"
    gpr_pool: tuple[int, ...] = tuple(range(15))
    vec_pool: tuple[int, ...] = tuple(range(16))
    mask_pool: tuple[int, ...] = ()

    def run(self, ir: LinearIR) -> bool:
        ranges: list[LiveRange] = ir.live_ranges.ranges
        pools = {RegType.gpr: list(self.gpr_pool), RegType.vec: list(self.vec_pool),
                 RegType.mask: list(self.mask_pool)}
        mapping: dict[Reg, Reg] = {}
        data = sorted((r for r in ranges if r.data_pointer), key=lambda r: (_DATA_ORDER[r.data_pointer], r.order))
        for r in data:
            if not pools[RegType.gpr]:
                raise UnsupportedByTarget(f"not enough general-purpose registers for the data pointers "
                                   f"({len(data)} needed, {len(self.gpr_pool)} available)")
            mapping[r.reg] = Reg(RegType.gpr, pools[RegType.gpr].pop(0))
        for rtype in (RegType.gpr, RegType.vec, RegType.mask):
            todo = sorted((r for r in ranges if not r.data_pointer and r.reg.type == rtype),
                          key=lambda r: (r.start, r.end, r.reg.idx))
            free = list(pools[rtype])
            active: list[tuple[float, int]] = []  # (end, physical)
            for r in todo:
                for end, phys in list(active):
                    if end < r.start:
                        active.remove((end, phys))
                        free.append(phys)
                free.sort()
                if not free:
                    where = r.connectors[0].source.expr
                    raise UnsupportedByTarget(f"not enough {rtype.value} registers at expression {where.name} "
                                       f"({where.type_name}): {len(active)} values are live")
                phys = free.pop(0)
                active.append((r.end, phys))
                mapping[r.reg] = Reg(rtype, phys)
        for e in ir.exprs:
            for i, d in enumerate(e.input_descs):
                if d.reg is not None and d.reg in mapping:
                    e.input_descs[i] = d.with_(reg=mapping[d.reg])
            for i, d in enumerate(e.output_descs):
                if d.reg is not None and d.reg in mapping:
                    e.output_descs[i] = d.with_(reg=mapping[d.reg])
        for r in ranges:
            r.reg = mapping[r.reg]
        for e in ir.exprs:
            e.live_regs = tuple(sorted((r.reg for r in ranges if r.start < e.exec_num < r.end),
                                       key=lambda g: (g.type.value, g.idx)))
        return True
