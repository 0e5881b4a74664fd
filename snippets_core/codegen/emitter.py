"""Emitter and KernelEmitter: translate one Expression (or the whole kernel) into target code."""

from __future__ import annotations

from abc import ABC, abstractmethod
from math import prod
from typing import TYPE_CHECKING, Any, ClassVar

from snippets_core.lowered.port_descriptor import PortDescriptor, Reg

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression
    from snippets_core.lowered.linear_ir import LinearIR


class Emitter(ABC):
    """Translates one Expression. It reads its registers from the expression's port descriptors and
    states how many auxiliary registers it needs; it never allocates registers itself."""

    #: auxiliary registers the emitter needs, by class ("gpr", "vec", "mask")
    aux_gprs: ClassVar[int] = 0
    aux_vecs: ClassVar[int] = 0
    aux_masks: ClassVar[int] = 0

    def __init__(self, expr: Expression) -> None:
        self.expr = expr
        self.in_regs: list[Reg | None] = [d.reg for d in expr.input_descs]
        self.out_regs: list[Reg | None] = [d.reg for d in expr.output_descs]

    @abstractmethod
    def emit_code(self, in_regs: list[Reg | None], out_regs: list[Reg | None], aux: dict[str, list[int]] | None = None) -> Any:
        """Emit the code of the expression for the given registers."""

    def emit_data(self) -> None:
        """Emit constant tables the code refers to (none by default)."""


def parallel_domain(ir: LinearIR) -> tuple[int, ...]:
    """The dims the host iterates: the master shape without the last ``loop_depth`` (tile rank) dims."""
    master = ir.get_master_shape()
    return master[:max(len(master) - ir.loop_depth, 0)]


def data_offsets(shape: tuple[int, ...], rank: int, element_size: int) -> list[int]:
    """Byte offsets per dim of a tensor right-aligned to ``rank`` dims: the stride of dim ``i``, or 0
    where the tensor broadcasts (dim 1), so one parallel index maps to one tile of every tensor."""
    shape = (1,) * (rank - len(shape)) + tuple(shape)
    return [prod(shape[i + 1:]) * element_size if shape[i] != 1 else 0 for i in range(rank)]


def layout_data_offsets(desc: PortDescriptor, rank: int, element_size: int) -> list[int]:
    """:func:`data_offsets` of a kernel input/output whose descriptor has a layout (PropagateLayout gives
    them the input-port convention: planar dim ``i`` is stored dim ``layout[i]``): the offset of planar dim
    ``i`` is the stride of its stored dim, so the parallel-domain indexes, which are planar, land right."""
    if desc.is_planar:
        return data_offsets(desc.shape, rank, element_size)
    stored = desc.shape
    strides = [prod(stored[i + 1:]) * element_size for i in range(len(stored))]
    planar = [(stored[o], strides[o]) for o in desc.layout]
    planar = [(1, 0)] * (rank - len(planar)) + planar
    return [stride if dim != 1 else 0 for dim, stride in planar]


def memory_desc(param: Expression) -> PortDescriptor:
    """The descriptor an input is read with: after the shape-only ops (RankNormalization, SnippetsReshape)
    between the Parameter and its first memory access."""
    from snippets_core.lowered.op_kinds import SHAPE_ONLY

    expr, desc = param, param.output_descs[0]
    while True:
        consumers = [c for c in expr.output_connectors[0].get_consumers() if c.expr.type_name in SHAPE_ONLY]
        if not consumers:
            return desc
        expr = consumers[0].expr
        desc = expr.output_descs[0]


def memory_shape(param: Expression) -> tuple[int, ...]:
    """The (planar) shape an input is read with, see :func:`memory_desc`."""
    return memory_desc(param).preordered_shape


class KernelEmitter(Emitter):
    """Emits the whole LinearIR: the kernel prologue (data pointers from the call arguments, moved to
    the tile of the parallel-domain indices), every expression's emitter in order, the epilogue.

    Data-pointer order (the kernel ABI): inputs, outputs, then one pointer per buffer register group,
    all buffer pointers starting at the scratchpad base.
    """

    def __init__(self, ir: LinearIR, compile_params: Any = None) -> None:
        self.ir = ir
        self.compile_params = compile_params
        self.in_regs, self.out_regs = [], []
        rank = len(ir.get_master_shape())
        #: per input then per output: byte offset of each dim (indexes beyond the tile rank use them)
        self.data_offsets: list[list[int]] = []
        for p in ir.parameters:
            out = p.node.outputs[0]
            self.data_offsets.append(layout_data_offsets(memory_desc(p), rank, out.element_type.size))
        for r in ir.results:
            src = r.input_connectors[0].source
            size = src.expr.node.outputs[src.index].element_type.size
            self.data_offsets.append(layout_data_offsets(r.input_descs[0], rank, size))
        self.parallel_domain = parallel_domain(ir)
        self.data_ptr_regs: list[Reg | None] = (
            [p.output_descs[0].reg for p in ir.parameters] + [r.input_descs[0].reg for r in ir.results])
        groups: dict[int, Reg | None] = {}
        for b in ir.get_buffers():
            groups.setdefault(b.reg_group, b.output_descs[0].reg)
        self.buffer_regs: list[Reg | None] = [groups[g] for g in sorted(groups)]
        #: per buffer register group, the scratchpad offset its register starts at (0, or a dynamic offset the
        #: kernel reads from its runtime-parameter block: LinearIR.buffer_group_bases)
        self.buffer_bases: list[Any] = [ir.buffer_group_bases.get(g, 0) for g in sorted(groups)]
        self.scratchpad_size = ir.static_buffer_scratchpad_size
