"""The int8 Brgemm micro-kernel: ``C[M, N] (+)= A[M, K] (u8 or s8) x B[K, N] (s8)`` on AVX512-VNNI ``vpdpbusd``.

B comes repacked by :func:`~snippets_x86_64.brgemm_copy_b_int8.repack_b_int8` (K in groups of 4 per 32-bit lane,
N in blocks of 64 columns, zero padding). Register blocking as in the f32 kernel (``brgemm.py``): a tile of ``mr``
rows x ``nr`` zmm vectors of s32 accumulators; per group of 4 K the tile loads ``nr`` vectors of B and broadcasts
4 bytes of each of its ``mr`` rows of A (``vpbroadcastd``, two registers alternating), each pair one
``vpdpbusd`` (64 multiply-adds). N blocks are the outer loop (the block of B stays in L1/L2 while every row tile
walks it), row tiles of ``mr`` rows a counted loop, the M remainder one more tile.

Tails, without touching a byte outside A, B, C or the post-op vectors: a K tail (K % 4) loads its 1-3 bytes of
A with a byte mask (B's padding is zero, so the loaded zeros add nothing); an N tail stores, and reads the
post-op vectors, under a lane mask (B's padded columns are zero); the M tail is a smaller tile.

``vpdpbusd`` multiplies *unsigned* A bytes by signed B bytes. An s8 A is shifted to u8 by xor 0x80 (+128) in
the kernel, and the compensation ``comp[n] = (128 + a_zp) * colsum(B)[n]`` (``a_zp`` alone for a u8 A with a
zero point), computed at repack time, is subtracted after the K loop. Output (:class:`Int8Output`):

* ``s32``: the exact ``sum_k (A - a_zp) * B`` (``beta``: added to what C holds);
* ``f32``: dequantized, ``(acc - comp) * scale[n] + bias[n]`` with ``scale[n] = a_scale * b_scale[n]``;
* ``u8`` / ``s8``: requantized, the same with ``scale`` and ``bias`` divided by the output scale and the output
  zero point added to ``bias`` (:func:`post_op_vectors`), clamped, rounded half to even, stored saturated.

The accumulation wraps at 2^32 like the hardware; with |A|, |B| <= 255, 128 it holds for K < 65 000.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from snippets_core.errors import CodegenError, InputError, UnsupportedByTarget
from snippets_x86_64.asm import ZMM, Assembler, Function, dword, k1, k2, r10, r11, r12, r13, r14, rax, word
from snippets_x86_64.brgemm_copy_b_int8 import K_GROUP, LANES, N_BLOCK, PackedB

if TYPE_CHECKING:
    from snippets_x86_64.asm import GpReg, MaskReg, Masked, Mem, VecReg
    from snippets_x86_64.jit import JitFunction

#: vector registers the kernel may use (zmm0..zmm30; one stays free like in the f32 kernel)
VEC_BUDGET = 31


class Int8Output(Enum):
    """What the kernel stores in C: raw s32 accumulators, dequantized f32, or requantized u8/s8."""

    S32 = "s32"
    F32 = "f32"
    U8 = "u8"
    S8 = "s8"


#: bytes per element of C, and the clamp bounds of a requantized output
C_SIZE = {Int8Output.S32: 4, Int8Output.F32: 4, Int8Output.U8: 1, Int8Output.S8: 1}
SATURATION = {Int8Output.U8: (0.0, 255.0), Int8Output.S8: (-128.0, 127.0)}
#: the instruction storing a vector of C (u8/s8: the low byte of each s32 lane, already clamped)
STORE = {Int8Output.S32: "vmovdqu32", Int8Output.F32: "vmovups", Int8Output.U8: "vpmovdb", Int8Output.S8: "vpmovdb"}
C_DTYPE = {Int8Output.S32: np.int32, Int8Output.F32: np.float32, Int8Output.U8: np.uint8, Int8Output.S8: np.int8}


@dataclass(frozen=True)
class Int8Geometry:
    """One int8 Brgemm block: sizes, row strides (A in bytes, C in elements), A's signedness, the output kind,
    whether a compensation vector and a bias vector are read, and ``beta`` (s32 only: add to C)."""

    m: int
    n: int
    k: int
    lda: int
    ldc: int
    a_signed: bool = False
    output: Int8Output = Int8Output.S32
    compensation: bool = False
    bias: bool = False
    beta: bool = False
    #: bytes from one K group of a B block to the next (0: the block's width x 4, repack_b_int8's layout) and from
    #: one N block to the next (0: 64 x Kp); the MHA kernel's packed K'^T and V' keep these independent of S
    b_group: int = 0
    b_block: int = 0
    #: a K that is a runtime count of chunks of ``k_chunk`` elements (``Int8Regs.k_chunks`` holds the count): A's
    #: chunks are ``a_chunk_stride`` bytes apart, each chunk's groups unrolled (0: K static)
    k_chunk: int = 0
    a_chunk_stride: int = 0

    def __post_init__(self) -> None:
        if min(self.m, self.n, self.k) <= 0:
            raise InputError(f"int8 Brgemm needs positive M, N, K, got {self.m} x {self.n} x {self.k}")
        if self.lda < self.k or self.ldc < self.n:
            raise InputError(f"int8 Brgemm row strides lda {self.lda} < K {self.k} or ldc {self.ldc} < N {self.n}")
        if self.beta and self.output != Int8Output.S32:
            raise InputError(f"int8 Brgemm beta (accumulate into C) needs an s32 C, not {self.output.value}")
        if self.bias and self.output == Int8Output.S32:
            raise InputError("int8 Brgemm bias is a dequantization post-op: it needs an f32/u8/s8 output")
        if self.k_chunk and (self.k_chunk != self.k or self.k % K_GROUP):
            raise InputError(f"int8 Brgemm runtime K chunks of {self.k_chunk} need K = the chunk, a multiple of 4")


def tile_rows(nv: int, extra: int) -> int:
    """Rows of the register tile for ``nv`` vectors: accumulators + B vectors + ``extra`` fit ``VEC_BUDGET``."""
    return max(1, (VEC_BUDGET - extra - nv) // nv)


@dataclass(frozen=True)
class Int8Regs:
    """The registers one kernel emission uses: the six pointers (A, packed B, C, comp, scale, bias; unused ones
    may be any register), six scratch GPRs, the vector pool (``aux_needs()[1]`` of them), two mask registers."""

    a: GpReg
    b: GpReg
    c: GpReg
    comp: GpReg
    scale: GpReg
    bias: GpReg
    pa: GpReg
    pb: GpReg
    cnt: GpReg
    arow: GpReg
    crow: GpReg
    mcnt: GpReg
    vecs: Sequence[VecReg]
    n_mask: MaskReg
    k_mask: MaskReg
    #: the runtime count of K chunks (``Int8Geometry.k_chunk``; may be 0), and of the K groups after them
    k_chunks: Mem | None = None
    k_rest: Mem | None = None


class BrgemmInt8Kernel:
    """Emits the int8 micro-kernel for one :class:`Int8Geometry` (see the module docstring)."""

    def __init__(self, g: Int8Geometry) -> None:
        self.g = g
        #: more f32 post-ops, emitted after the dequantization and before the stores (f32 output): a function of the
        #: Assembler and the tile (its accumulators, and its B vectors and A broadcasts, free by then)
        self.epilogue: Callable[[Assembler, _Tile], None] | None = None
        #: two A broadcasts, and for an s8 A the 0x80 bytes it is xor-ed with
        self.extra = 2 + (1 if g.a_signed else 0)
        self.kp = -(-g.k // K_GROUP) * K_GROUP
        self.np_ = -(-g.n // LANES) * LANES

    def blocks(self) -> list[tuple[int, int, int]]:
        """(first column, vectors, tile rows) of each N block: the tile as tall as the registers allow."""
        out = []
        for n0 in range(0, self.np_, N_BLOCK):
            nv = min(N_BLOCK, self.np_ - n0) // LANES
            out.append((n0, nv, min(self.g.m, tile_rows(nv, self.extra))))
        return out

    def aux_needs(self) -> tuple[int, int, int]:
        """(GPRs, vector registers, mask registers) beside the six pointers (the vectors: the largest tile's)."""
        return 6, max(mr * nv + nv + self.extra for _, nv, mr in self.blocks()), 2

    def emit(self, a: Assembler, r: Int8Regs) -> None:
        g = self.g
        needs = self.aux_needs()[1]
        if len(r.vecs) < needs:
            raise CodegenError(f"int8 Brgemm {g.m}x{g.n}x{g.k} needs {needs} vector registers, got {len(r.vecs)}")
        if g.n % LANES:
            a.kmovw(r.n_mask, word[a.const_data(((1 << (g.n % LANES)) - 1).to_bytes(2, "little"), 2)])
        if g.k % K_GROUP:
            a.kmovw(r.k_mask, word[a.const_data(((1 << (g.k % K_GROUP)) - 1).to_bytes(2, "little"), 2)])
        if g.a_signed:
            a.vpbroadcastd(r.vecs[-1], a.const_i32(0x80808080 - (1 << 32)))
        for blk, (n0, nv, mr) in enumerate(self.blocks()):
            full, rest = divmod(g.m, mr)
            a.mov(r.arow, r.a)
            a.lea(r.crow, r.c + n0 * C_SIZE[g.output])
            if full:
                a.mov(r.mcnt, full)
                top = a.label(f"brgemm_int8.n{n0}.m")
                self._tile(a, r, blk, n0, nv, mr)
                a.add(r.arow, mr * g.lda)
                a.add(r.crow, mr * g.ldc * C_SIZE[g.output])
                a.dec(r.mcnt)
                a.jnz(top)
            if rest:  # the M tail: one smaller tile
                self._tile(a, r, blk, n0, nv, rest)

    def tile(self, a: Assembler, r: Int8Regs, mv: int) -> None:
        """One register tile of ``mv`` rows at ``r.arow`` / ``r.crow`` against the block at ``r.b`` (as wide as the
        geometry's N, at most 64 columns) and the post-op vectors at ``r.comp``, ``r.scale``, ``r.bias``: for a harness
        that runs its own row and N-block loops on runtime counts (int8_fc_kernel.py)."""
        self._tile(a, r, 0, 0, self.blocks()[0][1], mv)

    def _tile(self, a: Assembler, r: Int8Regs, blk: int, n0: int, nv: int, mv: int) -> None:
        """Rows ``arow .. arow + mv`` x vectors ``n0 .. n0 + 16 nv`` of C: zero (or load), K loop, post-ops, store."""
        g = self.g
        vecs = [v.zmm for v in r.vecs]
        last_vec = self.np_ // LANES - 1
        t = _Tile(
            acc=[[vecs[i * nv + j] for j in range(nv)] for i in range(mv)],
            bvec=vecs[mv * nv : mv * nv + nv],
            a_regs=vecs[mv * nv + nv : mv * nv + nv + 2],
            tail=[bool(g.n % LANES) and n0 // LANES + j == last_vec for j in range(nv)],
            n0=n0,
            row_bytes=g.ldc * C_SIZE[g.output],
            c_size=C_SIZE[g.output],
            regs=r,
        )
        for i, row in enumerate(t.acc):
            for j, v in enumerate(row):
                if g.beta:
                    a.vmovdqu32(t.dst(v, j, zero=True), t.c_at(i, j))
                else:
                    a.vpxord(v, v, v)
        a.mov(r.pa, r.arow)
        a.lea(r.pb, r.b + blk * (g.b_block or N_BLOCK * self.kp))
        x80 = vecs[-1] if g.a_signed else None
        step = g.b_group or nv * LANES * K_GROUP

        def group(tail_bytes: bool, at: int = 0) -> None:
            for j, b in enumerate(t.bvec):
                a.vmovdqu32(b, r.pb + (at * step + j * LANES * K_GROUP))
            for i, row in enumerate(t.acc):
                areg = t.a_regs[i % 2]
                if tail_bytes:
                    # the 1-3 bytes of A left in the row, the rest zero (B is zero there)
                    a.vmovdqu8(areg.xmm.mask(r.k_mask).z, r.pa + i * g.lda)
                    a.vpbroadcastd(areg, areg.xmm)
                else:
                    a.vpbroadcastd(areg, dword[r.pa + (i * g.lda + at * K_GROUP)])
                if x80 is not None:
                    a.vpxord(areg, areg, x80)
                for j, v in enumerate(row):
                    a.vpdpbusd(v, areg, t.bvec[j])

        if g.k_chunk:  # a runtime count of chunks, each chunk's groups unrolled, then the groups left one by one
            assert r.k_chunks is not None and r.k_rest is not None
            groups = g.k_chunk // K_GROUP
            for count, body in ((r.k_chunks, True), (r.k_rest, False)):
                skip = a.new_label(f"brgemm_int8.n{n0}.m{mv}.kskip")
                a.mov(r.cnt, count)
                a.test(r.cnt, r.cnt)
                a.jz(skip)
                top = a.label(f"brgemm_int8.n{n0}.m{mv}.kc")
                for at in range(groups if body else 1):
                    group(False, at)
                a.add(r.pa, g.a_chunk_stride if body else K_GROUP)
                a.add(r.pb, groups * step if body else step)
                a.dec(r.cnt)
                a.jnz(top)
                a.bind(skip)
        elif g.k // K_GROUP:
            a.mov(r.cnt, g.k // K_GROUP)
            top = a.label(f"brgemm_int8.n{n0}.m{mv}.k")
            group(False)
            a.add(r.pa, K_GROUP)
            a.add(r.pb, step)
            a.dec(r.cnt)
            a.jnz(top)
        if g.k % K_GROUP and not g.k_chunk:
            group(True)
        self._post_ops(a, t)

    def _post_ops(self, a: Assembler, t: _Tile) -> None:
        """Compensation, dequantization, requantization, stores (post-op vectors loaded once per column vector)."""
        g, r = self.g, t.regs

        def load_vectors(ptr: GpReg) -> None:
            for j, b in enumerate(t.bvec):
                a.vmovdqu32(t.dst(b, j, zero=True), t.vec_at(ptr, j))

        if g.compensation:
            load_vectors(r.comp)
            for row in t.acc:
                for j, v in enumerate(row):
                    a.vpsubd(v, v, t.bvec[j])
        if g.output != Int8Output.S32:
            load_vectors(r.scale)
            for row in t.acc:
                for j, v in enumerate(row):
                    a.vcvtdq2ps(v, v)
                    if g.bias:
                        # masked: the bias lanes past N are never read (AVX-512 suppresses their faults)
                        a.vfmadd213ps(t.dst(v, j, zero=True), t.bvec[j], t.vec_at(r.bias, j))
                    else:
                        a.vmulps(v, v, t.bvec[j])
            if self.epilogue is not None:
                self.epilogue(a, t)
        if g.output in SATURATION:
            lo, hi = SATURATION[g.output]
            lo_reg, hi_reg = t.a_regs  # the A broadcasts are free after the K loop
            a.vbroadcastss(lo_reg, a.const_f32(lo))
            a.vbroadcastss(hi_reg, a.const_f32(hi))
            for row in t.acc:
                for v in row:
                    # clamped in f32 first, so the conversion never overflows and the narrowing never saturates
                    a.vmaxps(v, v, lo_reg)
                    a.vminps(v, v, hi_reg)
                    a.vcvtps2dq(v, v, rc="rn")
        for i, row in enumerate(t.acc):
            for j, v in enumerate(row):
                a.emit(STORE[g.output], t.dst(t.c_at(i, j), j), v)


@dataclass(frozen=True)
class _Tile:
    """The registers and addressing of one register tile: accumulators by row and vector, B vectors, the two A
    broadcasts, which vectors are the masked N tail, the first column, C's row pitch and element size."""

    acc: list[list[VecReg]]
    bvec: list[VecReg]
    a_regs: list[VecReg]
    tail: list[bool]
    n0: int
    row_bytes: int
    c_size: int
    regs: Int8Regs

    def c_at(self, i: int, j: int) -> Mem:
        """Row ``i``, vector ``j`` of the tile in C."""
        return self.regs.crow + (i * self.row_bytes + j * LANES * self.c_size)

    def vec_at(self, ptr: GpReg, j: int) -> Mem:
        """Vector ``j`` of the tile in a post-op vector (4-byte elements, indexed by column)."""
        return ptr + (self.n0 + j * LANES) * 4

    def dst(self, x: VecReg | Mem, j: int, zero: bool = False) -> VecReg | Mem | Masked:
        """``x`` under the N-tail mask when vector ``j`` is the tail (zeroing the masked lanes if ``zero``)."""
        if not self.tail[j]:
            return x
        m = x.mask(self.regs.n_mask)
        return m.z if zero else m


# --- standalone functions (tests, benchmarks) ---------------------------------------------------------------------

#: the standalone function's arguments (System V order)
ARGS = ("a", "b", "c", "comp", "scale", "bias")


@cache
def int8_function(g: Int8Geometry) -> JitFunction:
    """A callable ``f(a, b_packed, c, comp, scale, bias)`` (pointers; unused ones may be 0) running one block."""
    from snippets_x86_64.cpu import cpu_features

    if "avx512_vnni" not in cpu_features():
        raise UnsupportedByTarget("the int8 Brgemm needs AVX512_VNNI (vpdpbusd); this CPU lacks it")
    kernel = BrgemmInt8Kernel(g)
    fn = Function("brgemm_int8", args=ARGS)
    _, nvecs, _ = kernel.aux_needs()
    regs = Int8Regs(*fn.args, pa=rax, pb=r10, cnt=r11, arow=r12, crow=r13, mcnt=r14, vecs=ZMM[:VEC_BUDGET],
                 n_mask=k1, k_mask=k2)  # fmt: skip
    assert nvecs <= VEC_BUDGET
    kernel.emit(fn, regs)
    return fn.finalize(None, (ctypes.c_void_p,) * len(ARGS))


def post_op_vectors(
    packed: PackedB,
    a_scale: float = 1.0,
    a_zero_point: int = 0,
    a_signed: bool = False,
    b_scales: np.ndarray | float = 1.0,
    bias: np.ndarray | None = None,
    y_scale: float | None = None,
    y_zero_point: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(comp s32, scale f32, bias f32) vectors of length N for the kernel's post-ops: the compensation of the
    s8 shift and A's zero point; ``a_scale * b_scales[n]`` (divided by ``y_scale`` when requantizing); ``bias``
    (divided by ``y_scale``, plus ``y_zero_point``, when requantizing)."""
    n = packed.n
    scale = a_scale * np.broadcast_to(np.asarray(b_scales, dtype=np.float64), (n,))
    b = np.zeros(n) if bias is None else np.asarray(bias, dtype=np.float64).reshape(n)
    if y_scale is not None:
        if not y_scale > 0:
            raise InputError(f"int8 requantization needs a positive output scale, got {y_scale}")
        scale, b = scale / y_scale, b / y_scale + y_zero_point
    comp = packed.compensation(a_zero_point, a_signed)
    return comp, scale.astype(np.float32), b.astype(np.float32)


def run_int8(
    g: Int8Geometry,
    a: np.ndarray,
    packed: PackedB,
    c: np.ndarray,
    comp: np.ndarray | None = None,
    scale: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> None:
    """Run the kernel of ``g`` on numpy arrays (checked against the geometry): ``c`` is written in place."""
    a_dtype = np.int8 if g.a_signed else np.uint8
    if a.dtype != a_dtype or a.ndim != 2 or a.shape[0] < g.m or a.strides != (g.lda, 1):
        raise InputError(f"int8 Brgemm A must be {np.dtype(a_dtype)} [{g.m}, lda {g.lda}], got {a.dtype} {a.shape}")
    if (packed.k, packed.n) != (g.k, g.n):
        raise InputError(f"packed B is {packed.k} x {packed.n}, the geometry wants {g.k} x {g.n}")
    cs = C_SIZE[g.output]
    if c.dtype != C_DTYPE[g.output] or c.ndim != 2 or c.shape[0] < g.m or c.strides != (g.ldc * cs, cs):
        raise InputError(f"int8 Brgemm C must be {g.output.value} [{g.m}, ldc {g.ldc}], got {c.dtype} {c.shape}")
    vectors = {"comp": (comp, g.compensation, np.int32), "scale": (scale, g.output != Int8Output.S32, np.float32),
               "bias": (bias, g.bias, np.float32)}  # fmt: skip
    for name, (v, needed, dtype) in vectors.items():
        if needed and (v is None or v.dtype != dtype or v.shape != (g.n,)):
            raise InputError(f"int8 Brgemm {name} must be {np.dtype(dtype)} [{g.n}], got {None if v is None else v}")
    ptr = [x.ctypes.data if x is not None else None for x in (a, packed.data, c, comp, scale, bias)]
    int8_function(g)(*ptr)


__all__ = ["BrgemmInt8Kernel", "Int8Geometry", "Int8Regs", "Int8Output", "int8_function", "post_op_vectors", "run_int8"]
