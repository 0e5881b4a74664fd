"""The interpreter's Brgemm emitter: one block ``C (+)= A @ B`` read and written through strided pointers.

Like the interpreter's Load/Store it bounds-checks every element it touches against the memory region its
pointer points into, so a wrong stride, block or buffer size from the blocking passes raises
:class:`~snippets_core.codegen.interpreter.OutOfBoundsAccessError` instead of reading a neighbour's data.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.lib.stride_tricks import as_strided

from snippets_core.codegen.interpreter_base import InterpreterEmitter, MachineState, Pointer, Step
from snippets_core.lowered.brgemm_utils import MatrixAccess, brgemm_geometry


def _view(st: MachineState, ptr: Pointer, acc: MatrixAccess, rows: int, cols: int, emitter: InterpreterEmitter,
          what: str) -> np.ndarray:
    """A (rows, cols) strided view of the memory at ``ptr``, after checking both its first and its last
    element are inside the region."""
    dtype = acc.element_type.numpy
    size = np.dtype(dtype).itemsize
    ptr = ptr + acc.offset_bytes
    mem = st.memory[ptr.region]
    last = ptr.addr + ((rows - 1) * acc.row_stride + (cols - 1) * acc.col_stride + 1) * size
    if ptr.addr < 0 or last > mem.size or ptr.addr % size:
        raise emitter.oob(what, ptr, last - ptr.addr, mem.size)
    flat = mem[ptr.addr:last].view(dtype)
    return as_strided(flat, shape=(rows, cols), strides=(acc.row_stride * size, acc.col_stride * size))


class BrgemmEmitter(InterpreterEmitter):
    """``C[M, N] = beta * C + A[M, K] @ B[K, N]`` on the block the port subtensors describe, accumulating in
    f32 (i32 for integer inputs) as the machine kernels do. In a kernel lowered for every shape, M, N, K (a
    dynamic tail block, a whole dynamic K) and the row strides may be runtime parameters (``<name>.m`` etc.)."""

    def step(self) -> Step:
        g = brgemm_geometry(self.expr)
        a_reg, b_reg = self.in_regs[0], self.in_regs[1]
        c_reg = self.out_regs[0]
        acc_type = np.float32 if g.c.element_type.is_real else np.int32
        name = self.expr.name
        m_of, n_of, k_of = (self.value(f"{name}.{d}", v) for d, v in (("m", g.m), ("n", g.n), ("k", g.k)))
        strides = [self.value(f"{name}.{w}_row_stride", acc.row_stride) for w, acc in (("a", g.a), ("b", g.b),
                                                                                        ("c", g.c))]
        offsets = [self.value(f"{name}.{w}_offset", acc.offset_bytes) for w, acc in (("a", g.a), ("b", g.b),
                                                                                     ("c", g.c))]

        def run(st: MachineState) -> None:
            m, n, k = m_of(st), n_of(st), k_of(st)
            ga, gb, gc = (replace(acc, row_stride=s(st), offset_bytes=o(st))
                          for acc, s, o in zip((g.a, g.b, g.c), strides, offsets))
            if 0 in (m, n):
                return  # an empty tail block (a dynamic dim that is a multiple of its block)
            a = _view(st, st.read(a_reg), ga, m, k, self, "reads A")
            b = _view(st, st.read(b_reg), gb, k, n, self, "reads B")
            c = _view(st, st.read(c_reg), gc, m, n, self, "writes C")
            prod = np.matmul(a.astype(acc_type), b.astype(acc_type))
            if g.beta:
                prod = prod + c.astype(acc_type)
            c[...] = prod.astype(c.dtype)
        return run


__all__ = ["BrgemmEmitter"]
