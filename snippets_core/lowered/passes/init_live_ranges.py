"""InitLiveRanges: an abstract register and a live interval for every value of the LinearIR."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from snippets_core.ir.element_type import ElementType
from snippets_core.lowered.expression import BufferExpression
from snippets_core.lowered.loop_manager import LoopManager
from snippets_core.lowered.op_kinds import GPR_OUTPUT_OPS, SHAPE_ONLY
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.port_descriptor import Reg, RegType

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR
    from snippets_core.lowered.port_connector import PortConnector

#: rt_info key: output 0 of this node must live in the register of input ``k`` (an accumulator)
INPLACE_INPUT = "snippets.inplace_input"
#: ops whose unread outputs need no register
_NO_VALUE = ("LoopEnd", "Result")
#: never freed: data pointers live for the whole kernel
KERNEL_END = 1 << 30


@dataclass
class LiveRange:
    """One abstract register: its class, the connectors that hold it, and where it is live."""

    reg: Reg
    connectors: list[PortConnector]
    start: float
    end: float
    #: "input"/"output"/"buffer" for data pointers (their order fixes the physical registers), else ""
    data_pointer: str = ""
    order: int = 0


@dataclass
class LiveRanges:
    """What InitLiveRanges leaves on the LinearIR for AssignRegisters (``ir.live_ranges``)."""

    ranges: list[LiveRange] = field(default_factory=list)


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def reg_type_of(conn: PortConnector, specific: dict[str, RegType] | None = None) -> RegType:
    """Generator::get_op_out_reg_type: gpr for pointers, loop counters and control edges; vec otherwise."""
    src = conn.source.expr
    if specific and src.type_name in specific:
        return specific[src.type_name]
    if src.type_name in GPR_OUTPUT_OPS:
        return RegType.gpr
    if src.node.outputs[conn.source.index].element_type == ElementType.dynamic:
        return RegType.gpr
    return RegType.vec


@dataclass(frozen=True)
class InitLiveRanges(LoweredPass):
    """Give every PortConnector an abstract register (kept in the port descriptors) and compute its
    live interval in expression positions. Shape-only ops and Buffers share their input's register;
    Buffers of one register group share one; an accumulator (``INPLACE_INPUT``) shares its input's.
    A value read inside a loop that does not contain its producer lives until that loop ends, since
    every iteration reads it. Data pointers live for the whole kernel."""

    name: ClassVar[str] = "init-live-ranges"
    specific_reg_types: tuple[tuple[str, RegType], ...] = ()

    def run(self, ir: LinearIR) -> bool:
        ir.enumerate_expressions()
        specific = dict(self.specific_reg_types)
        conns: list[PortConnector] = []
        index: dict[int, int] = {}
        for e in ir.exprs:
            for c in e.output_connectors:
                index[id(c)] = len(conns)
                conns.append(c)
        uf = _UnionFind()
        buffer_groups: dict[int, int] = {}
        for e in ir.exprs:
            if e.type_name in SHAPE_ONLY or isinstance(e, BufferExpression):
                for c in e.input_connectors[:1]:
                    uf.union(index[id(c)], index[id(e.output_connectors[0])])
            if isinstance(e, BufferExpression):
                first = buffer_groups.setdefault(e.reg_group, index[id(e.output_connectors[0])])
                uf.union(first, index[id(e.output_connectors[0])])
            k = e.node.rt_info.get(INPLACE_INPUT)
            if k is not None:
                uf.union(index[id(e.input_connectors[k])], index[id(e.output_connectors[0])])

        groups: dict[int, list[PortConnector]] = {}
        for i, c in enumerate(conns):
            groups.setdefault(uf.find(i), []).append(c)
        param_pos = {id(p): i for i, p in enumerate(ir.parameters)}
        result_pos = {id(r): i for i, r in enumerate(ir.results)}
        counters = {RegType.gpr: 0, RegType.vec: 0, RegType.mask: 0}
        ranges = LiveRanges()
        for root in sorted(groups):
            members = groups[root]
            if all(not c.get_consumers() for c in members) and members[0].source.expr.type_name in _NO_VALUE:
                continue  # pass-through outputs nobody reads carry nothing
            rtype = reg_type_of(members[0], specific)
            reg = Reg(rtype, counters[rtype])
            counters[rtype] += 1
            kind, order = "", 0
            for c in members:
                src = c.source.expr
                if id(src) in param_pos:
                    kind, order = "input", param_pos[id(src)]
                elif isinstance(src, BufferExpression):
                    kind, order = "buffer", src.reg_group
                for x in c.get_consumers():
                    if id(x.expr) in result_pos:
                        kind, order = "output", result_pos[id(x.expr)]
            if kind:
                start, end = -1.0, float(KERNEL_END)
            else:
                start = min(c.source.expr.exec_num for c in members)
                end = start
                for c in members:
                    for x in c.get_consumers():
                        end = max(end, x.expr.exec_num)
                        outer = [lp for lp in x.expr.loop_ids if lp not in c.source.expr.loop_ids]
                        if outer:
                            _, stop = LoopManager.get_loop_bounds(ir, outer[0])
                            end = max(end, ir.exprs[stop - 1].exec_num)
            ranges.ranges.append(LiveRange(reg, members, start, end, kind, order))
            for c in members:
                src = c.source
                src.expr.set_output_port_descriptor(src.index, src.descriptor.with_(reg=reg))
                for x in c.get_consumers():
                    x.expr.set_input_port_descriptor(x.index, x.descriptor.with_(reg=reg))
        ir.live_ranges = ranges
        return True
