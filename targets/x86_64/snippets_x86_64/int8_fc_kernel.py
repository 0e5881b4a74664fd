"""The int8 FullyConnected's whole call as one JIT function on runtime rows: quantize, Brgemm, post-ops.

:func:`int8_fc_function` is a harness of the native pool (:mod:`~snippets_x86_64.native_pool`),
``f(unused, args, start, count)``, whose argument block (:data:`ARGS`, 64-bit words) holds the call's pointers and
its row count. It computes a rectangle of C: in ``rows`` mode rows ``start .. start + count`` and every N block (a
thread's share of the rows, each thread quantizing its own rows first); in ``cols`` mode every row (``args[M]``)
and N blocks ``start .. start + count`` of 64 columns (a few rows: N is split, A is quantized once before).

The row count is read at run time, so one function serves every M (a new sequence length compiles nothing):

* rows go in blocks of :data:`ROW_BLOCK` (a runtime loop; the last block is shorter): a block of f32 rows is
  quantized by the JIT quantizer (:func:`~snippets_x86_64.quantize_int8.quantize_function`, called) into the
  byte scratch, then walked by every N block of the packed weight while it sits in L2;
* per N block (a runtime loop over the 64-column blocks, then the narrower last block when N % 64), the rows of
  the block run as register tiles of the Brgemm (:class:`~snippets_x86_64.brgemm_int8.BrgemmInt8Kernel`'s
  tile: K loop, compensation, dequantize / requantize, store): a counted loop of full tiles of ``mr`` rows, then
  the rows left (fewer than ``mr``) as tiles of 16, 8, 4, 2, 1 rows, each taken when its bit of the count is set:
  every tail is compiled up front, in log2(mr) tiles.

Nothing outside A, the scratch, C, the packed weight or the post-op vectors is touched (the tile's masked N and K
tails, see brgemm_int8.py). :func:`minmax_function` is the dynamic quantization's range: the min and max of rows
``start .. start + count`` of K f32, one pass, split between threads like the rows.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_core.errors import InputError
from snippets_x86_64.asm import ZMM, Assembler, Function, bcst, dword, eax, k1, k2, k3, qword, r8, r9, r10, r11, r12, \
    r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi, word, zmm0, zmm1, zmm2, zmm3
from snippets_x86_64.brgemm_copy_b_int8 import K_GROUP, LANES, N_BLOCK
from snippets_x86_64.brgemm_int8 import C_SIZE, VEC_BUDGET, BrgemmInt8Kernel, Int8Geometry, Int8Output, Int8Regs, \
    tile_rows
from snippets_x86_64.quantize_int8 import quantize_function

if TYPE_CHECKING:
    from snippets_x86_64.asm import GpReg
    from snippets_x86_64.jit import JitFunction

#: rows per block: the quantized rows of a block (ROW_BLOCK x K bytes) stay in L2 while every N block walks them
ROW_BLOCK = 128
#: the argument block's words, in order: f32 x (or the int8 A), the byte scratch the quantized rows go to (= x when
#: A comes quantized), C, the quantizer's parameters, the post-op vectors (comp s32, scale f32, bias f32), the
#: packed weight, the row count (``cols`` mode), the post-op vectors
ARGS = ("x", "q", "c", "params", "comp", "scale", "bias", "b", "m", "post")
X, Q, C, PARAMS, COMP, SCALE, BIAS, B, M, POST = range(len(ARGS))
#: the f32 post-ops after the dequantization: ``("fq", (s, lo, hi))`` onto a grid (``clamp(rint(v * (1 / s)), lo,
#: hi) * s``), ``("add_c", i)`` / ``("mul_c", i)`` by row ``i`` of the post vectors ([count, N] f32 at ``args[POST]``),
#: ``("relu", None)``
POST_OPS = ("fq", "add_c", "mul_c", "relu")
ROWS, COLS = "rows", "cols"
_HARNESS_TYPES = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


@dataclass(frozen=True)
class Int8FCKernelKey:
    """What one int8 FC function is compiled for: K, N, A's signedness, what it stores, whether a bias vector is
    read, whether it quantizes f32 rows (``rows`` mode only), how ``start, count`` are read (rows or N blocks) and
    the f32 post-ops (:data:`POST_OPS`) after the dequantization."""

    k: int
    n: int
    a_signed: bool
    output: Int8Output
    bias: bool
    quantize: bool
    mode: str = ROWS
    post_ops: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.k <= 0 or self.n <= 0:
            raise InputError(f"the int8 FullyConnected needs positive K and N, got {self.k} x {self.n}")
        if self.mode not in (ROWS, COLS) or (self.quantize and self.mode == COLS):
            raise InputError(f"int8 FC mode {self.mode!r} (quantize {self.quantize}): rows, or cols without quantize")
        if self.post_ops and self.output != Int8Output.F32:
            raise InputError(f"int8 FC post-ops {[k for k, _ in self.post_ops]} need an f32 output, not {self.output}")
        for kind, p in self.post_ops:
            if kind not in POST_OPS or (kind == "fq" and not (p[0] > 0 and p[1] <= p[2])):
                raise InputError(f"int8 FC post-op {kind} {p}: one of {POST_OPS}, an fq with a positive scale")

    @property
    def full_blocks(self) -> int:
        """N blocks of 64 columns."""
        return self.n // N_BLOCK

    @property
    def blocks(self) -> int:
        """N blocks, the narrower last one included."""
        return -(-self.n // N_BLOCK)


def _geometry(key: Int8FCKernelKey, width: int) -> Int8Geometry:
    return Int8Geometry(ROW_BLOCK, width, key.k, lda=key.k, ldc=key.n, a_signed=key.a_signed, output=key.output,
                        compensation=True, bias=key.bias)


def _tail_tiles(mr: int) -> list[int]:
    """The tile heights that cover any count of rows below ``mr`` by its binary digits: 16, 8, 4, 2, 1 below mr."""
    return [1 << b for b in reversed(range(max(1, mr - 1).bit_length())) if 1 << b < mr]


@cache
def int8_fc_function(key: Int8FCKernelKey) -> JitFunction:
    """The harness ``f(unused, args, start, count)`` of ``key`` (see the module docstring)."""
    from snippets_x86_64.cpu import cpu_features

    if "avx512_vnni" not in cpu_features():
        from snippets_core.errors import UnsupportedByTarget

        raise UnsupportedByTarget("the int8 Brgemm needs AVX512_VNNI (vpdpbusd); this CPU lacks it")
    fn = Function(f"int8_fc_{key.mode}", args=("unused", "args", "start", "count"))
    _, args, start, count = fn.args  # rdi, rsi, rdx, rcx
    s_args, s_left, s_x, s_rb, s_nb0, s_full, s_narrow = (fn.stack_slot(8) for _ in range(7))
    cs = C_SIZE[key.output]
    # the tile's registers: pointers to the current N block of B and of the post-op vectors (caller-saved: reloaded
    # after the quantizer's call), the tile's scratch; rbx / rbp hold the row block's A and C (callee-saved)
    regs = Int8Regs(a=rbx, b=rsi, c=rbp, comp=rdx, scale=rcx, bias=r8, pa=rax, pb=r10, cnt=r11, arow=r12, crow=r13,
                    mcnt=r14, vecs=ZMM[:VEC_BUDGET], n_mask=k2, k_mask=k3)  # fmt: skip
    abase, cbase, cblk, nleft, post = rbx, rbp, r9, r15, rdi

    fn.mov(s_args, args)
    fn.test(count, count)
    fn.jz(fn.exit)
    if key.mode == ROWS:  # rows start .. start + count, every N block
        fn.mov(s_left, count)
        fn.mov(abase, qword[args + Q * 8])
        fn.imul(rax, start, key.k)
        fn.add(abase, rax)
        fn.mov(cbase, qword[args + C * 8])
        fn.imul(rax, start, key.n * cs)
        fn.add(cbase, rax)
        fn.mov(rax, qword[args + X * 8])
        fn.imul(r8, start, key.k * 4)
        fn.add(rax, r8)
        fn.mov(s_x, rax)
        fn.mov(qword[s_nb0], 0)
        fn.mov(qword[s_full], key.full_blocks)
        fn.mov(qword[s_narrow], int(key.blocks > key.full_blocks))
    else:  # every row, N blocks start .. start + count (the last one may be the narrow block)
        fn.mov(rax, qword[args + M * 8])
        fn.test(rax, rax)
        fn.jz(fn.exit)
        fn.mov(s_left, rax)
        fn.mov(abase, qword[args + Q * 8])
        fn.mov(cbase, qword[args + C * 8])
        fn.mov(s_nb0, start)
        fn.lea(rax, start + count)  # one past the last block
        fn.xor(r8, r8)
        fn.cmp(rax, key.full_blocks)
        narrow_no = fn.new_label("int8_fc.narrow_no")
        fn.jbe(narrow_no)
        fn.mov(r8, 1)
        fn.mov(rax, key.full_blocks)  # full blocks end at the narrow one
        fn.bind(narrow_no)
        fn.mov(s_narrow, r8)
        fn.sub(rax, start)  # full blocks in the range (start <= full_blocks: a narrow-only range gives 0)
        fn.mov(s_full, rax)

    row_block = fn.label("int8_fc.row_block")
    fn.mov(rax, s_left)
    fn.mov(r8, ROW_BLOCK)
    fn.cmp(rax, r8)
    fn.cmova(rax, r8)
    fn.mov(s_rb, rax)
    if key.quantize:  # the block's f32 rows into the scratch (SysV call: every vector and caller-saved GPR is lost)
        fn.mov(rdi, s_x)
        fn.mov(rsi, abase)
        fn.mov(rdx, rax)
        fn.mov(r8, s_args)
        fn.mov(rcx, qword[r8 + PARAMS * 8])
        fn.mov(rax, quantize_function(key.k).address)
        fn.call(rax)
        fn.mov(rax, s_rb)
        fn.imul(rax, rax, key.k * 4)
        fn.add(s_x, rax)
    if key.k % K_GROUP:
        fn.kmovw(regs.k_mask, word[fn.const_data(((1 << (key.k % K_GROUP)) - 1).to_bytes(2, "little"), 2)])
    if key.a_signed:
        fn.vpbroadcastd(regs.vecs[-1], fn.const_i32(0x80808080 - (1 << 32)))
    # the first N block's pointers: B, the three vectors, C
    kp = -(-key.k // K_GROUP) * K_GROUP
    fn.mov(r8, s_args)
    fn.mov(r10, s_nb0)
    fn.imul(rax, r10, N_BLOCK * kp)
    fn.add(rax, qword[r8 + B * 8])
    fn.mov(regs.b, rax)
    fn.imul(r10, r10, N_BLOCK * 4)
    for reg, word_ in ((regs.comp, COMP), (regs.scale, SCALE)):
        fn.mov(reg, qword[r8 + word_ * 8])
        fn.add(reg, r10)
    if _vector_ops(key):
        fn.mov(post, qword[r8 + POST * 8])
        fn.add(post, r10)
    fn.mov(r11, qword[r8 + BIAS * 8])
    fn.add(r11, r10)
    fn.mov(regs.bias, r11)  # r8 (bias) last: it held the argument block
    fn.mov(rax, s_nb0)
    fn.imul(rax, rax, N_BLOCK * cs)
    fn.lea(cblk, cbase + rax)

    def rows_of_block(width: int) -> None:
        """Every row of the block against the N block at ``regs.b`` (``width`` columns): full tiles, then tails."""
        kernel = BrgemmInt8Kernel(_geometry(key, width))
        if key.post_ops:
            kernel.epilogue = lambda a, t: _post_ops(a, t, key, post)
        nv = -(-width // LANES)
        mr = min(ROW_BLOCK, tile_rows(nv, kernel.extra))
        fn.mov(regs.arow, abase)
        fn.mov(regs.crow, cblk)
        fn.mov(regs.mcnt, s_rb)
        tails = fn.new_label("int8_fc.tails")
        fn.cmp(regs.mcnt, mr)
        fn.jb(tails)
        top = fn.label("int8_fc.tiles")
        kernel.tile(fn, regs, mr)
        _advance(fn, regs, key, mr)
        fn.sub(regs.mcnt, mr)
        fn.cmp(regs.mcnt, mr)
        fn.jae(top)
        fn.bind(tails)
        for rows in _tail_tiles(mr):
            skip = fn.new_label(f"int8_fc.tail{rows}.skip")
            fn.test(regs.mcnt, rows)
            fn.jz(skip)
            kernel.tile(fn, regs, rows)
            _advance(fn, regs, key, rows)
            fn.bind(skip)

    narrow = fn.new_label("int8_fc.narrow")
    if key.full_blocks:
        fn.mov(nleft, s_full)
        fn.test(nleft, nleft)
        fn.jz(narrow)
        blocks = fn.label("int8_fc.n_blocks")
        rows_of_block(N_BLOCK)
        fn.add(regs.b, N_BLOCK * kp)
        for reg in (regs.comp, regs.scale, regs.bias, *([post] if _vector_ops(key) else [])):
            fn.add(reg, N_BLOCK * 4)
        fn.add(cblk, N_BLOCK * cs)
        fn.dec(nleft)
        fn.jnz(blocks)
    fn.bind(narrow)
    done = fn.new_label("int8_fc.row_block_done")
    if key.blocks > key.full_blocks:
        fn.cmp(qword[s_narrow], 0)
        fn.je(done)
        width = key.n - key.full_blocks * N_BLOCK
        if width % LANES:
            fn.kmovw(regs.n_mask, word[fn.const_data(((1 << (width % LANES)) - 1).to_bytes(2, "little"), 2)])
        rows_of_block(width)
    fn.bind(done)
    fn.mov(rax, s_rb)
    fn.imul(rcx, rax, key.k)
    fn.add(abase, rcx)
    fn.imul(rcx, rax, key.n * cs)
    fn.add(cbase, rcx)
    fn.sub(s_left, rax)
    fn.jnz(row_block)
    return fn.finalize(None, _HARNESS_TYPES)


def _vector_ops(key: Int8FCKernelKey) -> bool:
    return any(kind in ("add_c", "mul_c") for kind, _ in key.post_ops)


def _post_ops(a: Assembler, t: Any, key: Int8FCKernelKey, post: GpReg) -> None:
    """The key's f32 post-ops on a dequantized tile (the brgemm tile's epilogue): grid constants broadcast from the
    constant pool, a vector post-op's columns loaded into the tile's free B registers (the N tail under its mask)."""
    for kind, p in key.post_ops:
        if kind == "fq":  # onto the grid, kept in f32 (as the int8 convolution's fq)
            s, lo, hi = (float(v) for v in p)
            inv = float(np.float32(1.0) / np.float32(s))
            for row in t.acc:
                for v in row:
                    a.vmulps(v, v, bcst(a.const_f32(inv)))
                    a.vmaxps(v, v, bcst(a.const_f32(lo)))
                    a.vminps(v, v, bcst(a.const_f32(hi)))
                    a.vrndscaleps(v, v, 0)  # to nearest, ties to even
                    a.vmulps(v, v, bcst(a.const_f32(s)))
        elif kind == "relu":
            for row in t.acc:
                for v in row:
                    a.vmaxps(v, v, bcst(a.const_f32(0.0)))
        else:
            for j, b in enumerate(t.bvec):
                a.vmovups(t.dst(b, j, zero=True), post + (p * key.n * 4 + j * LANES * 4))
            for row in t.acc:
                for j, v in enumerate(row):
                    a.emit("vaddps" if kind == "add_c" else "vmulps", v, v, t.bvec[j])


def _advance(fn: Function, regs: Int8Regs, key: Int8FCKernelKey, rows: int) -> None:
    fn.add(regs.arow, rows * key.k)
    fn.add(regs.crow, rows * key.n * C_SIZE[key.output])


@cache
def minmax_function(k: int) -> JitFunction:
    """The harness ``f(unused, args, start, count)``: the min and max of rows ``start .. start + count`` of ``k``
    f32 (``args`` = [x, out]) written as two f32 at ``out + 8 * start`` (min, then max). One pass, two
    accumulators of each; a K tail is read under a lane mask and merged under it (lanes past K keep their value).
    A NaN is skipped (the accumulator is the operand ``vminps`` returns when the other is a NaN)."""
    if k <= 0:
        raise InputError(f"the min/max reduce needs a positive row length, got {k}")
    fn = Function("minmax_f32", args=("unused", "args", "start", "count"))
    _, args, start, count = fn.args
    x, cnt = r8, r9
    lo, hi, lo2, hi2 = zmm0, zmm1, zmm2, zmm3
    v, w = ZMM[4], ZMM[5]
    fn.test(count, count)
    fn.jz(fn.exit)
    inf = fn.const_f32(float("inf"))
    fn.vbroadcastss(lo, inf)
    fn.vbroadcastss(lo2, inf)
    fn.vbroadcastss(hi, fn.const_f32(float("-inf")))
    fn.vbroadcastss(hi2, fn.const_f32(float("-inf")))
    full, tail = divmod(k, LANES)
    if tail:
        fn.kmovw(k1, word[fn.const_data(((1 << tail) - 1).to_bytes(2, "little"), 2)])
    fn.imul(x, start, k * 4)
    fn.add(x, qword[args])
    row = fn.label("minmax.row")
    if full:
        pairs, odd = divmod(full, 2)
        if pairs:
            fn.mov(cnt, pairs)
            top = fn.label("minmax.k")
            fn.vmovups(v, x + 0)
            fn.vmovups(w, x + LANES * 4)
            fn.vminps(lo, v, lo)
            fn.vmaxps(hi, v, hi)
            fn.vminps(lo2, w, lo2)
            fn.vmaxps(hi2, w, hi2)
            fn.add(x, 2 * LANES * 4)
            fn.dec(cnt)
            fn.jnz(top)
        if odd:
            fn.vmovups(v, x + 0)
            fn.vminps(lo, v, lo)
            fn.vmaxps(hi, v, hi)
            fn.add(x, LANES * 4)
    if tail:
        fn.vmovups(v.mask(k1).z, x + 0)
        fn.vminps(lo.mask(k1), v, lo)
        fn.vmaxps(hi.mask(k1), v, hi)
        fn.add(x, tail * 4)
    fn.dec(count)
    fn.jnz(row)
    fn.vminps(lo, lo, lo2)
    fn.vmaxps(hi, hi, hi2)
    for reg, op in ((lo, "vminps"), (hi, "vmaxps")):  # horizontal: 16 -> 8 -> 4 -> 2 -> 1 lanes
        fn.vextractf32x8(v.ymm, reg, 1)
        fn.emit(op, reg.ymm, reg.ymm, v.ymm)
        fn.vextractf128(v.xmm, reg.ymm, 1)
        fn.emit(op, reg.xmm, reg.xmm, v.xmm)
        fn.vmovhlps(v.xmm, v.xmm, reg.xmm)
        fn.emit(op, reg.xmm, reg.xmm, v.xmm)
        fn.vmovshdup(v.xmm, reg.xmm)
        fn.emit(op, reg.xmm, reg.xmm, v.xmm)
    out = r10
    fn.mov(out, qword[args + 8])
    fn.vmovss(out + start * 8, lo.xmm)
    fn.vmovss(out + start * 8 + 4, hi.xmm)
    return fn.finalize(None, _HARNESS_TYPES)


#: the argument block of :func:`dynamic_grid_function`, 64-bit words in order: the (min, max) pairs, how many
#: parts, the parts' first rows (int64; pair ``r`` is at ``8 * r``), the weight's column sums (s32), its scales
#: (f32), and the outputs: the quantizer's parameters, the compensation (s32) and the scales (f32) of the call
GRID_ARGS = ("range", "parts", "starts", "colsum", "w_scale", "params", "comp", "scale")


@cache
def dynamic_grid_function(n: int) -> JitFunction:
    """``f(args)``: DynamicQuantizeLinear's grid from the parts' (min, max) (:func:`minmax_function`) and the post-op
    vectors of the call (``args``: :data:`GRID_ARGS`). The range is extended to 0; ``scale = (hi - lo) / 255`` (1
    when hi = lo), ``zp = rint(clamp(-lo / scale, 0, 255))``, each one f32 operation as ONNX's reference computes
    it; the parameters ``(scale, -zp, 255 - zp, zp)`` of :func:`~snippets_x86_64.quantize_int8.quantize_params`;
    ``comp[j] = zp * colsum[j]``, ``scale[j] = scale * w_scale[j]`` over ``n`` columns (the tail under a mask)."""
    if n <= 0:
        raise InputError(f"the dynamic quantization grid needs a positive N, got {n}")
    fn = Function("dynamic_grid", args=("args",))
    (args,) = fn.args
    lo, hi, span, t, one, zero = (ZMM[i].xmm for i in range(6))
    fn.vxorps(lo, lo, lo)
    fn.vxorps(hi, hi, hi)
    fn.vxorps(zero, zero, zero)
    fn.mov(r8, qword[args])
    fn.mov(r9, qword[args + 8])
    fn.mov(r10, qword[args + 16])
    parts = fn.label("grid.parts")
    fn.mov(rax, qword[r10])
    fn.vmovss(t, r8 + rax * 8)
    fn.vminss(lo, t, lo)  # a NaN is skipped, as Python's min(0.0, nan)
    fn.vmovss(t, r8 + rax * 8 + 4)
    fn.vmaxss(hi, t, hi)
    fn.add(r10, 8)
    fn.dec(r9)
    fn.jnz(parts)
    fn.vsubss(span, hi, lo)
    fn.vbroadcastss(one, fn.const_f32(1.0))
    fn.vcmpps(k1, span, zero, 0)  # hi - lo == 0 exactly when hi == lo
    fn.vblendmps(span.mask(k1), span, one)
    fn.vdivss(span, span, fn.const_f32(255.0))  # the scale
    fn.vdivss(t, lo, span)
    fn.vsubss(t, zero, t)  # 0 - lo / scale
    fn.vmaxss(t, t, zero)
    fn.vminss(t, t, fn.const_f32(255.0))
    fn.vrndscaleps(t, t, 0)  # to nearest, ties to even
    fn.vcvttps2dq(one, t)  # exact: an integer 0..255
    fn.vmovd(eax, one)
    fn.mov(r8, qword[args + 40])
    fn.vmovss(r8 + 0, span)
    fn.vsubss(one, zero, t)
    fn.vmovss(r8 + 4, one)
    fn.vsubss(one, t, fn.const_f32(255.0))
    fn.vsubss(one, zero, one)  # 255 - zp, as (0 - (zp - 255)): exact for an integer zp
    fn.vmovss(r8 + 8, one)
    fn.mov(dword[r8 + 12], eax)
    zp, sc, v = ZMM[6], ZMM[7], ZMM[8]
    fn.vpbroadcastd(zp, eax)
    fn.vbroadcastss(sc, span)
    full, tail = divmod(n, LANES)
    if tail:
        fn.kmovw(k1, word[fn.const_data(((1 << tail) - 1).to_bytes(2, "little"), 2)])
    for src, dst, op, factor in ((24, 48, "vpmulld", zp), (32, 56, "vmulps", sc)):
        fn.mov(r8, qword[args + src])
        fn.mov(r9, qword[args + dst])
        if full:
            fn.mov(r10, full)
            top = fn.label(f"grid.{op}")
            fn.vmovdqu32(v, r8 + 0)
            fn.emit(op, v, v, factor)
            fn.vmovdqu32(r9 + 0, v)
            fn.add(r8, 64)
            fn.add(r9, 64)
            fn.dec(r10)
            fn.jnz(top)
        if tail:
            fn.vmovdqu32(v.mask(k1).z, r8 + 0)
            fn.emit(op, v, v, factor)
            fn.vmovdqu32((r9 + 0).mask(k1), v)
    return fn.finalize(None, (ctypes.c_void_p,))


__all__ = ["ARGS", "COLS", "GRID_ARGS", "POST_OPS", "ROWS", "ROW_BLOCK", "Int8FCKernelKey", "dynamic_grid_function",
           "int8_fc_function", "minmax_function"]
