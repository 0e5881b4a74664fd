"""The Brgemm emitter: an AVX-512 FMA micro-kernel for one block ``C[M, N] (+)= A[M, K] @ B[K, N]``.

The block (M, N, K, strides, buffer offsets, beta) comes from :func:`snippets_core.lowered.brgemm_utils.
brgemm_geometry`: the blocking loops around the expression move the data pointers from block to block, the
tail iterations shrink M, N, K, the first K block has beta 0 (writes C) and the others beta 1 (add to C).

Register blocking: C is computed in tiles of ``mr`` rows x ``nr`` zmm vectors (16 f32 columns each) held in
``mr * nr`` accumulators; per step of K the tile loads ``nr`` vectors of one row of B and multiplies them by
one element of each of its ``mr`` rows of A, broadcast straight from memory (``vfmadd231ps acc, b, [a]{1to16}``).
``mr`` is as large as the 32 zmm registers allow (``mr * nr + nr <= 30``). Rows of A, B and C are strided
(a folded Transpose is only a row stride); the columns of B and C must be contiguous. A column tail of N is
an op-masked load/store, so nothing outside C or B is touched; K is a counted loop.

Supported: f32 x f32 -> f32. Other precisions (bf16, int8) raise CodegenError, so the Subgraph falls back to
its reference kernel with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snippets_core.errors import CodegenError
from snippets_core.ir.element_type import ElementType
from snippets_core.lowered.brgemm_utils import brgemm_geometry
from snippets_x86_64.asm import Assembler, word
from snippets_x86_64.jit_emitter import AuxRegs, JitEmitter

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression
    from snippets_x86_64.target_machine import X86_64TargetMachine

LANES = 16
#: vector registers the micro-kernel may use for accumulators and B rows (two stay free for the kernel)
VEC_BUDGET = 30
#: at most this many zmm columns per tile (64 f32 columns: the default N block)
NR_MAX = 4


def tile_shape(m: int, n: int) -> tuple[int, int]:
    """(rows, vectors) of the register tile for a block of ``m`` x ``n`` f32."""
    nr = max(1, min(NR_MAX, -(-n // LANES)))
    mr = max(1, min(m, (VEC_BUDGET - nr) // nr))
    return mr, nr


class BrgemmEmitter(JitEmitter):
    """One Brgemm block (see the module docstring)."""

    def __init__(self, expr: Expression, h: X86_64TargetMachine) -> None:
        super().__init__(expr, h)
        g = brgemm_geometry(expr)
        types = (g.a.element_type, g.b.element_type, g.c.element_type)
        if types != (ElementType.f32, ElementType.f32, ElementType.f32):
            raise CodegenError(f"Brgemm '{expr.name}': the x86-64 micro-kernel computes f32 x f32 -> f32, "
                               f"got {' x '.join(str(t) for t in types[:2])} -> {types[2]}")
        if g.b.col_stride != 1:
            raise CodegenError(f"Brgemm '{expr.name}' reads B with a column stride {g.b.col_stride}; the "
                               "micro-kernel loads contiguous rows of B")
        self.g = g
        self.mr, self.nr = tile_shape(g.m, g.n)
        self.tail = g.n % LANES

    def aux_needs(self) -> tuple[int, int, int]:
        return 3, self.mr * self.nr + self.nr, 1 if self.tail else 0

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        g = self.g
        a_ptr, b_ptr, c_ptr = ins[0], ins[1], outs[0]
        pa, pb, cnt = aux.gprs[:3]
        vecs = [v.zmm for v in aux.vecs]
        mask = None
        if self.tail:
            mask = aux.masks[0]
            a.kmovw(mask, word[a.const_data(((1 << self.tail) - 1).to_bytes(2, "little"), 2)])
        nvec = -(-g.n // LANES)
        size = 4
        for v0 in range(0, nvec, self.nr):
            nv = min(self.nr, nvec - v0)
            for m0 in range(0, g.m, self.mr):
                mv = min(self.mr, g.m - m0)
                acc = [[vecs[r * self.nr + j] for j in range(nv)] for r in range(mv)]
                bvec = [vecs[self.mr * self.nr + j] for j in range(nv)]

                def c_addr(r: int, j: int, m0: int = m0, v0: int = v0):  # type: ignore[no-untyped-def]
                    return c_ptr + (g.c.offset_bytes + ((m0 + r) * g.c.row_stride + (v0 + j) * LANES) * size)

                def masked_vec(j: int, v0: int = v0, nv: int = nv) -> bool:
                    return mask is not None and v0 + j == nvec - 1

                for r in range(mv):
                    for j in range(nv):
                        if g.beta:
                            dst = acc[r][j].mask(mask).z if masked_vec(j) else acc[r][j]
                            a.vmovups(dst, c_addr(r, j))
                        else:
                            a.vxorps(acc[r][j], acc[r][j], acc[r][j])
                a.lea(pa, a_ptr + (g.a.offset_bytes + m0 * g.a.row_stride * size))
                a.lea(pb, b_ptr + (g.b.offset_bytes + v0 * LANES * size))
                a.mov(cnt, g.k)
                top = a.label(f"brgemm.{self.expr.name}.k")
                for j in range(nv):
                    dst = bvec[j].mask(mask).z if masked_vec(j) else bvec[j]
                    a.vmovups(dst, pb + j * LANES * size)
                for r in range(mv):
                    src = (pa + r * g.a.row_stride * size).broadcast
                    for j in range(nv):
                        a.vfmadd231ps(acc[r][j], bvec[j], src)
                a.add(pa, g.a.col_stride * size)
                a.add(pb, g.b.row_stride * size)
                a.dec(cnt)
                a.jnz(top)
                for r in range(mv):
                    for j in range(nv):
                        dst = c_addr(r, j)
                        a.vmovups(dst.mask(mask) if masked_vec(j) else dst, acc[r][j])


__all__ = ["BrgemmEmitter", "tile_shape"]
