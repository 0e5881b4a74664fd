"""The activation quantizer of the int8 FullyConnected: f32 rows -> u8 / s8, as ONNX's QuantizeLinear (and
DynamicQuantizeLinear once its scale and zero point are known) defines it::

    q = saturate(rint(x / scale) + zero_point)        rint: half to even; the division in f32, as ONNX's reference

One JIT function per (K, signedness): ``f(x, q, rows, params)`` quantizes ``rows`` rows of K contiguous f32 into
rows of K bytes; ``params`` points at four 32-bit values ``(scale f32, lo f32, hi f32, zero_point s32)`` with
``lo = qmin - zero_point``, ``hi = qmax - zero_point``, so a dynamic scale needs no new code. Per vector of 16:
``vdivps`` (IEEE division: the same quotient as numpy's), clamp to ``[lo, hi]`` in f32 (exact integers, so the
clamp commutes with the rounding and the conversion never overflows), ``vcvtps2dq {rn-sae}``, ``vpaddd`` the zero
point, ``vpmovdb`` (the low byte is the u8 or s8 value). A K tail loads and stores under a lane mask: nothing
outside the rows is touched.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_core.errors import InputError
from snippets_x86_64.asm import Function, k1, k2, k3, qword, r8, r9, r10, r11, rax, rdi, word, zmm0, zmm1, zmm2, zmm3, \
    zmm4, zmm5, zmm6, zmm7, zmm8, zmm9, zword

if TYPE_CHECKING:
    from snippets_x86_64.jit import JitFunction

LANES = 16
#: vectors per step of the inner loop (independent dependency chains)
UNROLL = 2
#: the saturation range of each quantized type
QRANGE = {False: (0, 255), True: (-128, 127)}


#: the registers holding the broadcast parameters: scale, lo, hi (f32), zero point (s32)
PARAM_REGS = (zmm4, zmm5, zmm6, zmm7)


def _load_params(fn: Function, params: Any, n: int) -> None:
    """Broadcast the parameter block at ``params`` into :data:`PARAM_REGS`; the tail mask of ``n`` into k1."""
    scale, lo, hi, zp = PARAM_REGS
    fn.vbroadcastss(scale, params + 0)
    fn.vbroadcastss(lo, params + 4)
    fn.vbroadcastss(hi, params + 8)
    fn.vpbroadcastd(zp, params + 12)
    if n % LANES:
        fn.kmovw(k1, word[fn.const_data(((1 << (n % LANES)) - 1).to_bytes(2, "little"), 2)])


def _quantize_regs(fn: Function, regs: list) -> None:
    """f32 lanes -> quantized s32 lanes (the low byte is the u8/s8 value): divide, clamp, round, zero point."""
    scale, lo, hi, zp = PARAM_REGS
    for v in regs:
        fn.vdivps(v, v, scale)
    for v in regs:
        fn.vmaxps(v, v, lo)
        fn.vminps(v, v, hi)
        fn.vcvtps2dq(v, v, rc="rn")
        fn.vpaddd(v, v, zp)


@cache
def quantize_function(k: int) -> JitFunction:
    """``f(x, q, rows, params)``: quantize ``rows`` rows of ``k`` f32 into ``k`` bytes each (module docstring)."""
    if k <= 0:
        raise InputError(f"the int8 quantizer needs a positive row length, got {k}")
    fn = Function("quantize_int8", args=("x", "q", "rows", "params"))
    x, q, rows, params = fn.args
    cnt = r10
    _load_params(fn, params, k)
    full, tail = divmod(k, LANES)

    def vector(regs: list, offset: int, masked: bool) -> None:
        for i, v in enumerate(regs):
            src = x + (offset + i * LANES) * 4
            fn.vmovups(v.mask(k1).z if masked else v, src)
        _quantize_regs(fn, regs)
        for i, v in enumerate(regs):
            dst = q + offset + i * LANES
            fn.vpmovdb(dst.mask(k1) if masked else dst, v)

    row = fn.label("quantize_int8.row")
    blocks, rest = divmod(full, UNROLL)
    if blocks > 1:
        fn.mov(cnt, blocks)
        top = fn.label("quantize_int8.k")
        vector([zmm0, zmm1, zmm2, zmm3][:UNROLL], 0, False)
        fn.add(x, UNROLL * LANES * 4)
        fn.add(q, UNROLL * LANES)
        fn.dec(cnt)
        fn.jnz(top)
        done = blocks * UNROLL * LANES
        fn.sub(x, done * 4)  # back to the row start: the rest is addressed from it
        fn.sub(q, done)
    elif blocks == 1:
        vector([zmm0, zmm1, zmm2, zmm3][:UNROLL], 0, False)
    base = blocks * UNROLL * LANES
    for i in range(rest):
        vector([zmm0], base + i * LANES, False)
    if tail:
        vector([zmm0], full * LANES, True)
    fn.add(x, k * 4)
    fn.add(q, k)
    fn.dec(rows)
    fn.jnz(row)
    return fn.finalize(None, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p))


@cache
def quantize_pixels_function(width: int | None, c: int, cp: int) -> JitFunction:
    """``f(unused, args, start, count)`` (the native pool's harness): quantize rows ``start .. start+count`` of
    ``width`` NHWC pixels of ``c`` f32 channels each into a padded NHWC byte buffer, ``cp`` bytes per pixel (the
    bytes past ``c`` are left alone). ``args`` = [src, dst, table (int64: the dst byte offset of each row's first
    pixel), params (:func:`quantize_params`)]; row ``r`` is read at ``src + r * width * c * 4``. The int8
    convolution's input copy: one pass from the f32 activations straight into the buffer its kernel reads. ``width``
    None: one function for every width (a dynamic W), read from ``args[4]`` (at least 1)."""
    if (width is not None and width <= 0) or c <= 0 or cp < c:
        raise InputError(f"the int8 pixel quantizer needs positive sizes and cp >= c, got {width}, {c}, {cp}")
    fn = Function("quantize_pixels_int8", args=("unused", "args", "start", "count"))
    _, args, start, count = fn.args
    src, table, dst, px = r8, r9, r11, rax
    fn.mov(r10, qword[args + 24])
    _load_params(fn, r10, c)
    full, tail = divmod(c, LANES)
    if width is None:
        fn.mov(src, qword[args + 32])
        fn.imul(src, start)
        fn.imul(src, src, c * 4)
    else:
        fn.imul(src, start, width * c * 4)
    fn.add(src, qword[args])
    fn.mov(table, qword[args + 16])
    fn.lea(table, table + start * 8)
    fn.test(count, count)
    fn.jz(fn.exit)
    regs = [zmm0, zmm1, zmm2, zmm3]
    rows = fn.label("quantize_pixels_int8.row")
    fn.mov(dst, qword[table])
    fn.add(dst, qword[args + 8])
    fn.mov(px, qword[args + 32] if width is None else width)
    pixels = fn.label("quantize_pixels_int8.pixel")
    vectors = [(v, False) for v in range(full)] + ([(full, True)] if tail else [])
    for at in range(0, len(vectors), len(regs)):
        batch = list(zip(regs, vectors[at : at + len(regs)]))
        for reg, (v, masked) in batch:
            fn.vmovups(reg.mask(k1).z if masked else reg, src + v * LANES * 4)
        _quantize_regs(fn, [reg for reg, _ in batch])
        for reg, (v, masked) in batch:
            out = dst + v * LANES
            fn.vpmovdb(out.mask(k1) if masked else out, reg)
    fn.add(src, c * 4)
    fn.add(dst, cp)
    fn.dec(px)
    fn.jnz(pixels)
    fn.add(table, 8)
    fn.dec(count)
    fn.jnz(rows)
    return fn.finalize(None, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64))


@cache
def quantize_planes_function(width: int | None, c: int, plane: int | None, packed: bool = False) -> JitFunction:
    """``f(unused, args, start, count)`` (the native pool's harness): the stem's input copy straight from NCHW.
    Quantize rows ``start .. start+count`` of ``width`` pixels of ``c <= 4`` f32 planes into a padded NHWC byte
    buffer of 4 bytes per pixel. ``args`` = [src, dst, table (int64 pairs: the byte offset of the row in the first
    plane, the dst byte offset of its first pixel), params]; channel ``j`` of a row is read ``j * plane`` f32 after
    the first. Per 16 pixels: ``c`` vector loads, quantized as :func:`quantize_pixels_function` does, each lane
    0..255 (the grid's clamp and zero point: u8 or s8 stored +128), shifted into byte ``j`` of the pixel's dword
    and or-ed, one 64-byte store. Bytes past ``c`` get 0 (the weights there are zero: they add nothing). The pixel
    tail loads and stores under a lane mask: nothing outside the rows is touched. This replaces an NCHW -> NHWC
    reorder of the f32 image and a masked pass per pixel (1 to 4 useful lanes of 16) by a pass at full width.
    ``width`` and ``plane`` None: one function for every image size (a dynamic H, W), which reads ``args[4:7]``:
    the full vectors of a row, the tail's lane mask (0: none), the bytes between planes (``planes_args``).
    ``packed`` (static sizes): pixels of ``c`` bytes, not 4 (the int8 convolution's packed taps): the 16 dwords are
    compacted to ``16 c`` bytes (``vpshufb`` within the 128-bit lanes, ``vpermd`` across them) and stored under a
    byte mask."""
    if (width is None) != (plane is None):
        raise InputError("the planar int8 quantizer takes both the width and the plane, or neither (dynamic)")
    if width is not None and plane is not None and (min(width, plane) <= 0 or plane < width) or not 0 < c <= 4:
        raise InputError(f"the planar int8 quantizer needs 1..4 channels, positive sizes and plane >= width, got "
                         f"{width}, {c}, {plane}")
    if packed and width is None:
        raise InputError("the planar int8 quantizer packs the pixels of static sizes only")
    fn = Function("quantize_planes_int8", args=("unused", "args", "start", "count"))
    _, args, start, count = fn.args
    src, table, dst, px = r8, r9, r11, rax
    fn.mov(r10, qword[args + 24])
    _load_params(fn, r10, 0 if width is None else width)  # k1: the pixel tail of a row
    if width is None:  # the tail's mask, and the planes' pitches in rdi (the unused argument) and r10 (3 planes)
        fn.kmovw(k1, word[args + 40])
        fn.mov(rdi, qword[args + 48])
        fn.lea(r10, rdi + rdi * 2)
    fn.mov(table, qword[args + 16])
    fn.shl(start, 4)
    fn.add(table, start)
    fn.test(count, count)
    fn.jz(fn.exit)
    regs = [zmm0, zmm1, zmm2, zmm3][:c]
    full, tail = (1, 1) if width is None else divmod(width, LANES)  # (dynamic: code for both, counts from args)
    pitches = [src, src + rdi, src + rdi * 2, src + r10]
    step = LANES * (c if packed else 4)  # bytes of 16 pixels in the buffer
    if packed:  # the compaction's tables, and the byte masks of 16 pixels and of the tail
        shuffle = bytes(v for lane in range(4) for v in
                        [j * 4 + b for j in range(4) for b in range(c)] + [0x80] * (16 - 4 * c))
        fn.vmovdqu8(zmm8, zword[fn.const_data(shuffle, 64)])
        order = [lane * 4 + d for lane in range(4) for d in range(c)]
        order += [i for i in range(16) if i not in order]
        fn.vmovdqu32(zmm9, zword[fn.const_data(np.asarray(order, np.int32).tobytes(), 64)])
        fn.kmovq(k2, qword[fn.const_data(((1 << step) - 1).to_bytes(8, "little"), 8)])
        fn.kmovq(k3, qword[fn.const_data(((1 << (tail * c)) - 1).to_bytes(8, "little"), 8)])

    def vector(masked: bool) -> None:
        for j, reg in enumerate(regs):
            at = zword[pitches[j]] if plane is None else zword[src + j * plane * 4]
            fn.vmovups(reg.mask(k1).z if masked else reg, at)
        _quantize_regs(fn, regs)
        for j, reg in enumerate(regs[1:], start=1):
            fn.vpslld(reg, reg, 8 * j)
            fn.vpord(regs[0], regs[0], reg)
        if packed:  # 16 pixels of c bytes: compacted in the lanes, the lanes together, a byte-masked store
            fn.vpshufb(regs[0], regs[0], zmm8)
            fn.vpermd(regs[0], zmm9, regs[0])
            fn.vmovdqu8(zword[dst].mask(k3 if masked else k2), regs[0])
            return
        fn.vmovdqu32(zword[dst].mask(k1) if masked else zword[dst], regs[0])

    rows = fn.label("quantize_planes_int8.row")
    fn.mov(src, qword[table])
    fn.add(src, qword[args])
    fn.mov(dst, qword[table + 8])
    fn.add(dst, qword[args + 8])
    no_full, no_tail = fn.new_label("quantize_planes_int8.no_full"), fn.new_label("quantize_planes_int8.no_tail")
    if full:
        fn.mov(px, qword[args + 32] if width is None else full)
        if width is None:
            fn.test(px, px)
            fn.jz(no_full)
        pixels = fn.label("quantize_planes_int8.pixels")
        vector(False)
        fn.add(src, LANES * 4)
        fn.add(dst, step)
        fn.dec(px)
        fn.jnz(pixels)
    fn.bind(no_full)
    if tail:
        if width is None:
            fn.cmp(qword[args + 40], 0)
            fn.je(no_tail)
        vector(True)
    fn.bind(no_tail)
    fn.add(table, 16)
    fn.dec(count)
    fn.jnz(rows)
    return fn.finalize(None, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64))


def planes_args(width: int, plane: int) -> list[int]:
    """``args[4:7]`` of the size-agnostic planar quantizer (``quantize_planes_function(None, c, None)``) for rows
    of ``width`` pixels, planes of ``plane`` f32."""
    return [width // LANES, (1 << (width % LANES)) - 1, plane * 4]


def quantize_params(scale: float, zero_point: int, signed: bool) -> np.ndarray:
    """The 16-byte parameter block of :func:`quantize_function` for one scale and zero point."""
    qmin, qmax = QRANGE[signed]
    block = np.zeros(4, np.float32)
    block[:3] = (scale, qmin - zero_point, qmax - zero_point)
    block.view(np.int32)[3] = zero_point
    return block


def quantize_rows(x: np.ndarray, out: np.ndarray, params: np.ndarray) -> None:
    """Quantize the C-contiguous f32 ``x`` [rows, K] into ``out`` (u8 or s8 [rows, K]) with ``params``."""
    if x.dtype != np.float32 or x.ndim != 2 or not x.flags.c_contiguous:
        raise InputError(f"the int8 quantizer takes C-contiguous f32 rows, got {x.dtype} {x.shape}")
    if out.shape != x.shape or out.itemsize != 1 or not out.flags.c_contiguous:
        raise InputError(f"the int8 quantizer writes {x.shape} bytes, got {out.dtype} {out.shape}")
    if x.shape[0]:
        quantize_function(x.shape[1])(x.ctypes.data, out.ctypes.data, x.shape[0], params.ctypes.data)


__all__ = ["QRANGE", "quantize_function", "quantize_params", "quantize_pixels_function", "quantize_planes_function",
           "planes_args", "quantize_rows"]
