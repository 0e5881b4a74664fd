"""Expressions and ExpressionPorts: the elements of the LinearIR.

An :class:`Expression` wraps one node of the body (or of the snippets op set inserted by a pass) and
adds what control flow needs: its input/output :class:`PortConnector` s, its input/output
:class:`PortDescriptor` s, the ids of the loops it is in (outermost first), its position number and,
once the Generator has run, its emitter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from snippets_core.lowered.port_connector import PortConnector
from snippets_core.lowered.port_descriptor import PortDescriptor, Reg

if TYPE_CHECKING:
    from snippets_core.ir.node import Node


class ExpressionPort:
    """One port of an Expression: (expression, "in"/"out", index). Built on demand; compared by value."""

    __slots__ = ("expr", "index", "type")

    def __init__(self, expr: Expression, type_: str, index: int) -> None:
        assert type_ in ("in", "out")
        self.expr = expr
        self.type = type_
        self.index = index

    def get_expr(self) -> Expression:
        return self.expr

    @property
    def is_input(self) -> bool:
        return self.type == "in"

    @property
    def descriptor(self) -> PortDescriptor:
        return self.expr.input_descs[self.index] if self.is_input else self.expr.output_descs[self.index]

    get_descriptor = descriptor.fget  # type: ignore[attr-defined]

    def set_descriptor(self, desc: PortDescriptor) -> None:
        if self.is_input:
            self.expr.set_input_port_descriptor(self.index, desc)
        else:
            self.expr.set_output_port_descriptor(self.index, desc)

    @property
    def connector(self) -> PortConnector:
        return self.expr.input_connectors[self.index] if self.is_input else self.expr.output_connectors[self.index]

    def get_connected_ports(self) -> list[ExpressionPort]:
        """For an input: its source; for an output: its consumers."""
        if self.is_input:
            return [self.connector.source]
        return self.connector.get_consumers()

    def _key(self) -> tuple[int, str, int]:
        return (id(self.expr), self.type, self.index)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExpressionPort) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"{self.expr.name}.{self.type}{self.index}"


class Expression:
    """A node of the LinearIR with its ports, descriptors, loop ids and (later) emitter."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.input_connectors: list[PortConnector] = []
        self.output_connectors: list[PortConnector] = []
        self.input_descs: list[PortDescriptor] = []
        self.output_descs: list[PortDescriptor] = []
        self.loop_ids: list[int] = []
        self.exec_num: float = 0.0
        self.emitter: Any = None
        #: registers live across this expression (set by InitLiveRanges/AssignRegisters)
        self.live_regs: tuple[Reg, ...] = ()

    # --- identity -----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.node.name

    @property
    def type_name(self) -> str:
        return self.node.type_name

    def get_node(self) -> Node:
        return self.node

    # --- ports ----------------------------------------------------------------------------------------
    @property
    def input_count(self) -> int:
        return len(self.input_connectors)

    @property
    def output_count(self) -> int:
        return len(self.output_connectors)

    def get_input_port(self, i: int) -> ExpressionPort:
        return ExpressionPort(self, "in", i)

    def get_output_port(self, i: int) -> ExpressionPort:
        return ExpressionPort(self, "out", i)

    def input_ports(self) -> list[ExpressionPort]:
        return [self.get_input_port(i) for i in range(self.input_count)]

    def output_ports(self) -> list[ExpressionPort]:
        return [self.get_output_port(i) for i in range(self.output_count)]

    def get_input_port_connector(self, i: int) -> PortConnector:
        return self.input_connectors[i]

    def get_output_port_connector(self, i: int) -> PortConnector:
        return self.output_connectors[i]

    def get_input_port_descriptor(self, i: int) -> PortDescriptor:
        return self.input_descs[i]

    def get_output_port_descriptor(self, i: int) -> PortDescriptor:
        return self.output_descs[i]

    def set_input_port_descriptor(self, i: int, desc: PortDescriptor) -> None:
        self.input_descs[i] = desc

    def set_output_port_descriptor(self, i: int, desc: PortDescriptor) -> None:
        self.output_descs[i] = desc

    def input_expr(self, i: int) -> Expression:
        """The expression producing input ``i``."""
        return self.input_connectors[i].source.expr

    def consumers(self, i: int = 0) -> list[ExpressionPort]:
        return self.output_connectors[i].get_consumers()

    # --- registers -------------------------------------------------------------------------------------
    @property
    def in_regs(self) -> list[Reg | None]:
        return [d.reg for d in self.input_descs]

    @property
    def out_regs(self) -> list[Reg | None]:
        return [d.reg for d in self.output_descs]

    # --- loops -------------------------------------------------------------------------------------------
    def set_loop_ids(self, ids: list[int]) -> None:
        self.loop_ids = list(ids)

    def get_loop_ids(self) -> list[int]:
        return list(self.loop_ids)

    def __repr__(self) -> str:
        return f"Expression({self.type_name} {self.name})"


#: rt_info key on a Load/Store of a Buffer: the buffer's byte offset in the scratchpad
BUFFER_OFFSET = "snippets.buffer_offset"
#: rt_info key on an access of Buffers: {("in" | "out", port): the byte offset of the Buffer on that port}
PORT_BUFFER_OFFSETS = "snippets.port_buffer_offsets"


class BufferExpression(Expression):
    """The Expression of a Buffer: where it sits in the buffer scratchpad and which pointer register
    group it shares."""

    def __init__(self, node: Node) -> None:
        super().__init__(node)
        #: buffers with the same reg group share one data pointer register
        self.reg_group: int = 0
        #: buffers of one cluster share memory (in-place)
        self.cluster_id: int = 0
        #: byte offset in the buffer scratchpad (None until AllocateBuffers)
        self.offset: int | None = None
        #: bytes this buffer needs (set by ComputeBufferAllocationSize)
        self.allocation_size: int | None = None

    @property
    def element_size(self) -> int:
        return self.node.outputs[0].element_type.size
