"""What a Brgemm emitter needs to know about one Brgemm expression: block sizes, strides, offsets, beta.

Shared by every target's Brgemm emitter (the interpreter's, x86-64's), so that they all read the LinearIR the
same way. A Brgemm expression computes ``C[m, n] (+)= sum_k A[m, k] * B[k, n]`` on one block: ``M``, ``N``,
``K`` are its port subtensors (``FULL_DIM`` = the whole planar dim), the strides come from the stored shapes
and layouts of its ports (a folded Transpose is just a row stride), ``beta`` is 0 when the block writes C and
1 when it accumulates into it (every K block after the first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from snippets_core.errors import CodegenError
from snippets_core.ir.element_type import ElementType
from snippets_core.lowered.expression import PORT_BUFFER_OFFSETS
from snippets_core.lowered.loop_utils import planar_to_stored, stored_strides
from snippets_core.lowered.port_descriptor import FULL_DIM
from snippets_core.lowered.symbolic import SymIntLike, is_dynamic

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression, ExpressionPort

#: rt_info key on a Brgemm node: 0.0 (write C) or 1.0 (accumulate into C); absent means 0.0
BRGEMM_BETA = "snippets.brgemm_beta"
#: op type names of the matrix products the blocking passes handle
BRGEMM_OPS = ("Brgemm",)


def resolve_dim(sub: SymIntLike, dim: SymIntLike) -> SymIntLike:
    """The extent of a block: the whole ``dim`` for FULL_DIM, else the subtensor. A static block of a dynamic dim
    is the block itself (BrgemmBlocking loops over a dynamic dim with that increment, so a main-body block is
    whole and the tail block's subtensor is the runtime tail)."""
    if sub == FULL_DIM:
        return dim
    if is_dynamic(dim) or is_dynamic(sub):
        return sub
    return min(sub, dim)


@dataclass(frozen=True)
class MatrixAccess:
    """One matrix operand: rows/cols strides in elements, a byte offset in its buffer (0 for kernel I/O),
    its element type and whether its memory is a Buffer of the scratchpad."""

    row_stride: SymIntLike
    col_stride: SymIntLike
    offset_bytes: SymIntLike
    element_type: ElementType


@dataclass(frozen=True)
class BrgemmGeometry:
    """One Brgemm call: ``C[M, N] = beta * C + A[M, K] @ B[K, N]``."""

    m: int
    n: int
    k: int
    a: MatrixAccess
    b: MatrixAccess
    c: MatrixAccess
    beta: float


def _buffer_offset(port: ExpressionPort) -> SymIntLike:
    """The scratchpad offset of the Buffer behind a memory port (0 for Parameters and Results), as
    AllocateBuffers recorded it per port (the copies InsertSpecificIterations makes keep the record); a Buffer
    placed after one of a size known only at run time has a dynamic offset (a SymInt)."""
    offsets = port.expr.node.rt_info.get(PORT_BUFFER_OFFSETS, {})
    off = offsets.get(("in" if port.is_input else "out", port.index), 0)
    return off if is_dynamic(off) else int(off or 0)


def _access(port: ExpressionPort, element_type: ElementType, extra_offset: int) -> MatrixAccess:
    shape = port.descriptor.shape
    order = planar_to_stored(port)
    strides = stored_strides(shape)
    row, col = strides[order[-2]], strides[order[-1]]
    return MatrixAccess(row, col, _buffer_offset(port) + extra_offset * element_type.size, element_type)


def planar_dims(expr: Expression) -> tuple[int, int, int]:
    """(M, N, K) of the whole product (planar shapes of A and B)."""
    pa = expr.input_descs[0].preordered_shape
    pb = expr.input_descs[1].preordered_shape
    return pa[-2], pb[-1], pa[-1]


def brgemm_geometry(expr: Expression) -> BrgemmGeometry:
    """The block one emission of ``expr`` computes (after blocking and the specific-iteration handlers)."""
    if expr.type_name not in BRGEMM_OPS:
        raise CodegenError(f"{expr.type_name} '{expr.name}' is not a Brgemm")
    m_full, n_full, k_full = planar_dims(expr)
    sub_a = expr.input_descs[0].subtensor or (FULL_DIM, FULL_DIM)
    sub_b = expr.input_descs[1].subtensor or (FULL_DIM, FULL_DIM)
    m = resolve_dim(sub_a[-2], m_full)
    k = resolve_dim(sub_a[-1], k_full)
    n = resolve_dim(sub_b[-1], n_full)
    node = expr.node
    ta = node.inputs[0].element_type
    tb = node.inputs[1].element_type
    tc = node.outputs[0].element_type
    a = _access(expr.get_input_port(0), ta, node.offset_a)
    b = _access(expr.get_input_port(1), tb, node.offset_b)
    c = _access(expr.get_output_port(0), tc, node.offset_c)
    if c.col_stride != 1:
        raise CodegenError(f"Brgemm '{expr.name}' writes C with a column stride {c.col_stride}; the innermost "
                           "dim of an output layout must stay innermost")
    beta = float(node.rt_info.get(BRGEMM_BETA, 0.0))
    return BrgemmGeometry(m, n, k, a, b, c, beta)
