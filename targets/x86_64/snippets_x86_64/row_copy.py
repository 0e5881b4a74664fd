"""RowCopy: rows of a contiguous tensor copied to rows of a wider one, as a JIT kernel on the native pool.

A channel Concat whose input was not written in place by its producer (DenseNet's: the previous Concat's output,
read by the next layer too) copies it into its slice ``y[..., at:at + c]``: per pixel, ``c`` contiguous floats into
a row of pitch ``C``. numpy does that on one thread; in DenseNet-121 these copies are 1.3 ms of a call (4.5 % of it
at one thread, 8 % at two, where every convolution around them runs on both cores). The kernel copies whole zmm
vectors of each pixel's channels (the last one masked: a masked store never touches the neighbour's channels),
one work item per row of ``W`` pixels, rows split over the threads when the copy is large (:func:`slice_copy`).

The same kernel fills the interior of a stem convolution's planar padded buffer (:func:`planar_copy`): a row of
the NCHW input is one "pixel" of ``W`` floats, each to its row of the padded plane (numpy's strided copy: 10 us of
a 3x224x224 stem's call, on one thread, while the stem's kernel takes 46 us on each of two). The callers use these
copies only where they split over threads: on one, numpy's copy is as fast. Signature: the native pool's harness
``copy(unused, args, start, count)`` with ``args`` = [src, dst, table of each row's destination byte offset].
"""

from __future__ import annotations

import numpy as np

from snippets_x86_64.asm import Function, k1, qword, r9, r12, r12d, r13, r14, r15, rbx, zword
from snippets_x86_64.asm.registers import ZMM
from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES
from snippets_x86_64.jit import JitFunction
from snippets_x86_64.native_pool import SplitCall, split_items
from snippets_x86_64.runtime import _address as data_address

LANES = 16
#: zmm registers a pixel's channels pass through (loads issued ahead of their stores)
STAGE = 8
#: bytes copied per thread at least before a copy is split (a memory-bound pass: a second thread pays off once the
#: data leaves L2)
MIN_BYTES_PER_THREAD = 128 * 1024


def build_row_copy_kernel(w: int, c: int, pitch: int) -> JitFunction:
    """``copy(unused, args, start, count)``: rows ``start .. start + count`` of ``w`` pixels, each ``c`` floats of
    the contiguous source to ``c`` floats of the destination row at its table offset, pixel pitch ``pitch``
    floats."""
    fn = Function("row_copy", args=("unused", "args", "start", "count"))
    nvec = -(-c // LANES)
    rem = c - (nvec - 1) * LANES
    fn.mov(r12d, (1 << rem) - 1)
    fn.kmovw(k1, r12d)
    fn.imul(rbx, fn.arg("start"), w * c * 4)
    fn.add(rbx, qword[fn.arg("args")])
    fn.mov(r13, qword[fn.arg("args") + 8])
    fn.imul(r15, fn.arg("start"), 8)
    fn.add(r15, qword[fn.arg("args") + 16])
    fn.mov(r14, fn.arg("count"))
    fn.test(r14, r14)
    fn.jz(fn.exit)
    rows, pixels = fn.new_label("rows"), fn.new_label("pixels")
    fn.bind(rows)
    fn.mov(r9, qword[r15])
    fn.add(r9, r13)
    fn.mov(r12, w)
    fn.bind(pixels)
    for v0 in range(0, nvec, STAGE):
        group = range(v0, min(v0 + STAGE, nvec))
        for v in group:
            masked = v == nvec - 1 and rem != LANES
            fn.vmovups(ZMM[v - v0].mask(k1).z if masked else ZMM[v - v0], zword[rbx + v * 64])
        for v in group:
            masked = v == nvec - 1 and rem != LANES
            dst = zword[r9 + v * 64]
            fn.vmovups(dst.mask(k1) if masked else dst, ZMM[v - v0])
    fn.add(rbx, c * 4)
    fn.add(r9, pitch * 4)
    fn.dec(r12)
    fn.jnz(pixels)
    fn.add(r15, 8)
    fn.dec(r14)
    fn.jnz(rows)
    return fn.finalize(None, HARNESS_ARGTYPES)


class RowCopy:
    """``run(src, dst)`` (data addresses): ``len(offsets)`` rows of ``w`` pixels of ``c`` floats, contiguous at
    ``src``, to the rows at ``dst + offsets[i]`` (bytes) of pixel pitch ``pitch`` floats; split over up to
    ``num_threads`` threads when the copy is large."""

    def __init__(self, offsets: np.ndarray, w: int, c: int, pitch: int, num_threads: int = 1) -> None:
        self.table = np.ascontiguousarray(offsets, dtype=np.int64)
        self.shape, self.pitch = (len(self.table), w, c), pitch
        self.kernel = FUNCTION_CACHE.get("row_copy", (w, c, pitch), lambda: build_row_copy_kernel(w, c, pitch),
                                         HARNESS_ARGTYPES)
        threads = max(1, min(num_threads, len(self.table) * w * c * 4 // MIN_BYTES_PER_THREAD))
        self.call = SplitCall(self.kernel, 3, split_items(len(self.table), threads))
        self._table_address = data_address(self.table)

    def run(self, src: int, dst: int) -> None:
        self.call.run([src, dst, self._table_address])


def slice_copy(n: int, h: int, w: int, c: int, pitch: int, num_threads: int = 1) -> RowCopy:
    """The copy of a contiguous [N, H, W, c] tensor into a channel slice of an NHWC tensor of ``pitch`` channels
    (``run`` takes the address of the slice's first element)."""
    return RowCopy(np.arange(n * h, dtype=np.int64) * (w * pitch * 4), w, c, pitch, num_threads)


def planar_copy(n: int, c: int, h: int, w: int, hp: int, wp: int, top: int, left: int,
                num_threads: int = 1) -> RowCopy:
    """The copy of a contiguous NCHW tensor into the interior of an [N, C, Hp, Wp] buffer at (``top``, ``left``):
    each input row is one pixel of ``w`` floats."""
    rows = np.arange(n * c * h, dtype=np.int64)
    offsets = ((rows // h * hp + top + rows % h) * wp + left) * 4
    return RowCopy(offsets, 1, w, wp, num_threads)


__all__ = ["RowCopy", "build_row_copy_kernel", "planar_copy", "slice_copy"]
