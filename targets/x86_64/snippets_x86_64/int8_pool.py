"""The int8 MaxPool after an int8 convolution: a JIT kernel that takes the maximum of u8 (or s8) NHWC windows.

Max commutes with a monotonic quantization (``Q(max(x)) == max(Q(x))``: QuantizeLinear rounds and clamps, both
monotonic), so a MaxPool between two int8 convolutions pools the bytes the first one stored, and the second reads the
pooled bytes: no f32 tensor, no dequantizing or quantizing pass (``TokenizeInt8FCSnippets`` puts the MaxPool into the
producing convolution's Subgraph; its executor runs this kernel after the convolution's).

The input is a padded NHWC byte buffer ``[N, Hp, Wp, C]`` (the convolution writes its interior) whose border holds
the type's least value (0 for u8, -128 for s8: it never wins, as MaxPool's padding), every window inside it. One
work item is an output row: the byte offsets of its first window's top-left input pixel and of its first output
pixel (``pool_table``); per output pixel and 64 channels, one load and ``KH * KW - 1`` ``vpmaxub`` (``vpmaxsb``)
with the other taps as memory operands, one store; a channel tail loads and stores under a byte mask, so nothing
outside the buffers is touched.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from snippets_core.errors import InputError
from snippets_x86_64.asm import Function, k1, qword, r8, r9, r10, rax, zmm0, zmm1, zmm2, zmm3, zword

if TYPE_CHECKING:
    from snippets_x86_64.jit import JitFunction

#: bytes per zmm
BYTES = 64


@cache
def max_pool_function(kh: int, kw: int, sw: int, c: int, wo: int, pitch: int, signed: bool) -> JitFunction:
    """``f(unused, args, start, count)`` (the native pool's harness): output rows ``start .. start+count`` of a
    ``kh x kw`` max pool of horizontal stride ``sw`` over ``c`` byte channels, ``wo`` output pixels a row, input rows
    ``pitch`` bytes apart. ``args`` = [src, dst, table] (table: int64 pairs per row, :func:`pool_table`)."""
    if min(kh, kw, sw, c, wo) <= 0 or pitch < c:
        raise InputError(f"the int8 max pool needs positive sizes and a row pitch of at least the channels, got "
                         f"{(kh, kw, sw, c, wo, pitch)}")
    fn = Function("max_pool_int8", args=("unused", "args", "start", "count"))
    _, args, start, count = fn.args
    src, dst, table, px = r8, r9, r10, rax
    full, tail = divmod(c, BYTES)
    if tail:
        fn.kmovq(k1, qword[fn.const_data(((1 << tail) - 1).to_bytes(8, "little"), 8)])
    vmax = fn.vpmaxsb if signed else fn.vpmaxub
    fn.mov(table, qword[args + 16])
    fn.shl(start, 4)
    fn.add(table, start)
    fn.test(count, count)
    fn.jz(fn.exit)
    regs = [zmm0, zmm1, zmm2, zmm3]
    rows = fn.label("max_pool_int8.row")
    fn.mov(src, qword[table])
    fn.add(src, qword[args])
    fn.mov(dst, qword[table + 8])
    fn.add(dst, qword[args + 8])
    fn.mov(px, wo)
    pixels = fn.label("max_pool_int8.pixel")
    chunks = [(v * BYTES, False) for v in range(full)] + ([(full * BYTES, True)] if tail else [])
    for at in range(0, len(chunks), len(regs)):  # up to 4 independent chains of maxima
        batch = list(zip(regs, chunks[at : at + len(regs)]))
        for reg, (off, masked) in batch:
            fn.vmovdqu8(reg.mask(k1).z if masked else reg, zword[src + off])
        for i in range(kh):
            for j in range(kw):
                if i or j:
                    for reg, (off, masked) in batch:
                        vmax(reg.mask(k1).z if masked else reg, reg, zword[src + (i * pitch + j * c + off)])
        for reg, (off, masked) in batch:
            fn.vmovdqu8(zword[dst + off].mask(k1) if masked else zword[dst + off], reg)
    fn.add(src, sw * c)
    fn.add(dst, c)
    fn.dec(px)
    fn.jnz(pixels)
    fn.add(table, 16)
    fn.dec(count)
    fn.jnz(rows)
    return fn.finalize(None, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64))


def pool_table(n: int, ho: int, wo: int, c: int, sh: int, hp: int, wp: int) -> np.ndarray:
    """The rows of :func:`max_pool_function` for ``n`` images: (src, dst) byte offsets of each output row's first
    window (in the padded ``[n, hp, wp, c]`` input) and first pixel (in the dense ``[n, ho, wo, c]`` output)."""
    img, oh = np.divmod(np.arange(n * ho, dtype=np.int64), ho)
    src = ((img * hp + oh * sh) * wp) * c
    dst = (img * ho + oh) * wo * c
    return np.ascontiguousarray(np.stack([src, dst], axis=1))


__all__ = ["max_pool_function", "pool_table"]
