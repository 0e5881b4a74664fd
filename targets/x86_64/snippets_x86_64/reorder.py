"""Reorders as JIT kernels: a tensor moved between the plain (NCHW) and the NHWC layout.

Both directions are one batch of 2-D transposes: NCHW -> NHWC transposes each image's ``[C, H*W]`` matrix into
``[H*W, C]``, NHWC -> NCHW transposes ``[H*W, C]`` into ``[C, H*W]``. The kernel walks a ``[rows, cols]`` matrix in
16 x 16 tiles: 16 rows loaded into zmm0-15 (the last column tile with a zero-masking load), transposed in
registers (unpack, shuffle within 128-bit lanes, then two rounds of 128-bit lane shuffles, 64 instructions), and
stored as 16 rows of the destination (the last row tile with a masked store, the last column tile storing only
its columns). Every access stays inside the two arrays.

One work item is a strip of up to 16 rows of one image (a table row: source offset, destination offset, full or
tail strip); the signature is the native pool's harness, ``transpose(unused, args, start, count)`` with ``args``
= [src, dst, table], and the items are split over the threads in contiguous ranges.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from snippets_core.ir.layout import NHWC, PLAIN, Layout, layout_named, logical, physical, same_memory
from snippets_x86_64.aligned import empty_aligned
from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES, ShapeCache
from snippets_x86_64.asm import Function, k1, k2, qword, r9, r14, r15, rbx, word, zword
from snippets_x86_64.asm.registers import ZMM
from snippets_x86_64.jit import JitFunction
from snippets_x86_64.native_pool import native_pool

TILE = 16
ARG_SRC, ARG_DST, ARG_TAB = range(3)
ROW = 3  # table row: source offset, destination offset, variant (0: a full strip of 16 rows, 1: the tail strip)


def _transpose_tile(fn: Function) -> None:
    """zmm0-15 (rows of a 16 x 16 tile) -> their transpose in zmm0-15, through zmm16-31."""
    r, t = ZMM[:TILE], ZMM[TILE:2 * TILE]
    for i in range(8):
        fn.vunpcklps(t[2 * i], r[2 * i], r[2 * i + 1])
        fn.vunpckhps(t[2 * i + 1], r[2 * i], r[2 * i + 1])
    for i in range(4):
        fn.vshufps(r[4 * i], t[4 * i], t[4 * i + 2], 0x44)
        fn.vshufps(r[4 * i + 1], t[4 * i], t[4 * i + 2], 0xEE)
        fn.vshufps(r[4 * i + 2], t[4 * i + 1], t[4 * i + 3], 0x44)
        fn.vshufps(r[4 * i + 3], t[4 * i + 1], t[4 * i + 3], 0xEE)
    for base in (0, 8):
        for i in range(base, base + 4):
            fn.vshuff32x4(t[i], r[i], r[i + 4], 0x88)
            fn.vshuff32x4(t[i + 4], r[i], r[i + 4], 0xDD)
    for i in range(8):
        fn.vshuff32x4(r[i], t[i], t[i + 8], 0x88)
        fn.vshuff32x4(r[i + 8], t[i], t[i + 8], 0xDD)


def _tile(fn: Function, rows: int, cols: int, valid_rows: int, valid_cols: int) -> None:
    """One tile at [rbx] (source, row pitch ``cols``) into [r9] (destination, row pitch ``rows``)."""
    for i in range(valid_rows):  # rows past the strip are never loaded: their lanes are never stored
        src = zword[rbx + i * cols * 4]
        fn.vmovups(ZMM[i].mask(k1).z if valid_cols < TILE else ZMM[i], src)
    _transpose_tile(fn)
    for j in range(valid_cols):
        dst = zword[r9 + j * rows * 4]
        fn.vmovups(dst.mask(k2) if valid_rows < TILE else dst, ZMM[j])


def build_transpose_kernel(rows: int, cols: int) -> JitFunction:
    """``transpose(unused, args, start, count)``: each item transposes a strip of rows of a ``[rows, cols]`` f32
    matrix into the matching columns of the ``[cols, rows]`` result."""
    fn = Function("reorder", args=("unused", "args", "start", "count"))
    full_cols, tail_cols = divmod(cols, TILE)
    tail_rows = rows % TILE
    if tail_cols:
        fn.kmovw(k1, word[fn.const_data(((1 << tail_cols) - 1).to_bytes(2, "little"), 2)])
    if tail_rows:
        fn.kmovw(k2, word[fn.const_data(((1 << tail_rows) - 1).to_bytes(2, "little"), 2)])
    fn.imul(r15, fn.arg("start"), ROW * 8)
    fn.add(r15, qword[fn.arg("args") + ARG_TAB * 8])
    fn.mov(r14, fn.arg("count"))
    fn.test(r14, r14)
    fn.jz(fn.exit)
    top, nxt = fn.new_label("item"), fn.new_label("next")
    variants = ([TILE] if rows >= TILE else []) + ([tail_rows] if tail_rows else [])
    labels = [fn.new_label(f"strip{v}") for v in variants]
    fn.bind(top)
    if len(variants) > 1:
        fn.cmp(qword[r15 + 16], 0)
        fn.jne(labels[1])
    for label, valid_rows in zip(labels, variants):
        fn.bind(label)
        fn.mov(rbx, qword[r15])
        fn.add(rbx, qword[fn.arg("args") + ARG_SRC * 8])
        fn.mov(r9, qword[r15 + 8])
        fn.add(r9, qword[fn.arg("args") + ARG_DST * 8])
        if full_cols:
            loop = fn.new_label(f"cols{valid_rows}")
            fn.mov(fn.arg("unused"), full_cols)
            fn.bind(loop)
            _tile(fn, rows, cols, valid_rows, TILE)
            fn.add(rbx, TILE * 4)
            fn.add(r9, TILE * rows * 4)
            fn.dec(fn.arg("unused"))
            fn.jnz(loop)
        if tail_cols:
            _tile(fn, rows, cols, valid_rows, tail_cols)
        fn.jmp(nxt)
    fn.bind(nxt)
    fn.add(r15, ROW * 8)  # the next item's table row
    fn.dec(r14)
    fn.jnz(top)
    return fn.finalize(None, HARNESS_ARGTYPES)


def transpose_table(batch: int, rows: int, cols: int) -> np.ndarray:
    """One row per (matrix, strip of 16 rows): byte offsets into the source and the destination, the variant."""
    out = []
    for n in range(batch):
        base = n * rows * cols * 4
        for r0 in range(0, rows, TILE):
            out.append((base + r0 * cols * 4, base + r0 * 4, 0 if r0 + TILE <= rows else 1))
    return np.asarray(out, dtype=np.int64).reshape(-1, ROW)


#: (from, to) -> the logical dims that make the batch, the rows and the columns of the transposed matrices
_PLANS: dict[tuple[str, str], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {
    (PLAIN.name, NHWC.name): ((0,), (1,), (2, 3)),
    (NHWC.name, PLAIN.name): ((0,), (2, 3), (1,)),
}


def reorder_supported(src: Layout, dst: Layout, dtype: np.dtype) -> str | None:
    """None if a JIT reorder moves ``dtype`` from ``src`` to ``dst``, else why not."""
    if (src.name, dst.name) not in _PLANS:
        return f"no JIT reorder from {src} to {dst}"
    if np.dtype(dtype).itemsize != 4:
        return f"the JIT reorder moves 4-byte elements, not {np.dtype(dtype)}"
    return None


class ReorderExecutor:
    """``run(x) -> y`` for one shape: ``x`` the logical array lying in ``src``, ``y`` a new array lying in ``dst``
    (returned as its logical view). ``alloc(shape)`` makes the destination (tests pass guarded memory)."""

    def __init__(self, src: Layout, dst: Layout, shape: tuple[int, ...], dtype: np.dtype, num_threads: int = 1,
                 alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None) -> None:
        batch_dims, row_dims, col_dims = _PLANS[(src.name, dst.name)]
        self.src, self.dst, self.shape, self.dtype = src, dst, tuple(shape), np.dtype(dtype)
        batch, rows, cols = (int(np.prod([shape[d] for d in dims], dtype=np.int64))
                             for dims in (batch_dims, row_dims, col_dims))
        self.new = alloc or (lambda s: empty_aligned(s, self.dtype))
        self.dst_shape = tuple(shape[d] for d in dst.order) if dst.order is not None else tuple(shape)
        self.empty = batch * rows * cols == 0
        #: numpy copies made because a caller handed a source that does not lie in ``src`` (a strided input)
        self.copies = 0
        if self.empty:
            return
        self.kernel = FUNCTION_CACHE.get("reorder", (rows, cols), lambda: build_transpose_kernel(rows, cols),
                                         HARNESS_ARGTYPES)
        self.table = transpose_table(batch, rows, cols)
        items = len(self.table)
        threads = max(1, min(num_threads, items))
        bounds = [items * k // threads for k in range(threads + 1)]
        self.chunks = [(bounds[k], bounds[k + 1] - bounds[k]) for k in range(threads)]

    def run(self, x: np.ndarray) -> np.ndarray:
        y = self.new(self.dst_shape)
        if self.empty:
            return logical(y, self.dst)
        mem = physical(x, self.src)
        if not mem.flags.c_contiguous or mem.dtype != self.dtype:
            self.copies += 1
            mem = np.ascontiguousarray(mem, dtype=self.dtype)
        block = (ctypes.c_uint64 * 3)(mem.ctypes.data, y.ctypes.data, self.table.ctypes.data)
        run_split(self.kernel, ctypes.addressof(block), self.chunks)
        return logical(y, self.dst)


def run_split(kernel: JitFunction, args: int, chunks: list[tuple[int, int]]) -> None:
    """``kernel(0, args, start, count)`` over ``chunks``: the first on this thread, the rest on the native pool."""
    (start0, count0), rest = chunks[0], chunks[1:]
    if not rest:
        kernel(0, args, start0, count0)
        return
    pool = native_pool()
    with pool.lock:
        pool.run([(kernel.address, 0, args, s, c) for s, c in rest], lambda: kernel(0, args, start0, count0))


def compile_reorder_subgraph(sg: Any, config: Any) -> Callable[[Sequence[np.ndarray]], list[np.ndarray]] | None:
    """``run(inputs) -> [y]`` for a Subgraph holding one Reorder (AssignLayouts), or None with the reason in
    ``sg.rt_info`` (it then runs on the Reorder's numpy reference). A dynamic shape: ``DynamicReorder``."""
    (op,) = sg.body_ops
    src, dst = layout_named(op.src), layout_named(op.dst)
    x = sg.body.parameters[0].outputs[0]
    et = x.element_type
    why = "a dynamic element type" if et.value == "dynamic" else reorder_supported(src, dst, et.numpy)
    if why is not None:
        sg.rt_info["SnippetsFallbackReason"] = why
        return None
    dtype, threads = x.element_type.numpy, config.num_threads
    if not x.shape.is_static:
        sg.rt_info["SnippetsConvKernel"] = f"reorder {src} -> {dst} (the JIT Transpose's shape-agnostic tiles)"
        reorder = DynamicReorder(src, dst, dtype, threads)
        reorder.follow(sg)
        return reorder
    executors: dict[tuple[int, ...], ReorderExecutor] = {}
    if x.shape.is_static:
        shape = x.shape.to_tuple()
        executors[shape] = ReorderExecutor(src, dst, shape, dtype, threads)
    sg.rt_info["SnippetsConvKernel"] = f"reorder {src} -> {dst} (JIT 16x16 transposes)"

    def run(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        a = inputs[0]
        ex = executors.get(a.shape)
        if ex is None:
            ex = executors.setdefault(a.shape, ReorderExecutor(src, dst, a.shape, dtype, threads))
        return [ex.run(a)]

    run.executors = executors  # type: ignore[attr-defined]
    return run



class DynamicReorder(ShapeCache):
    """A reorder of a dynamic shape: the memory transposed by the JIT Transpose's shape-agnostic 16x16 tile kernel
    (its pitches and tile counts in a parameter block), built when the reorder is compiled, so a new shape makes a
    table, never a kernel (``compiles`` stays 0); a shape that lies the same in both layouts (``same_memory``: a C
    or an H*W of 1, the only shapes whose plan would be a strided copy) is passed on as it is."""

    kind = "one shape-agnostic 16x16 tile kernel for every shape"

    def __init__(self, src: Layout, dst: Layout, dtype: np.dtype, threads: int) -> None:
        from snippets_x86_64.transpose import TransposeExecutor, tile_kernel

        order = src.order or tuple(range(4))
        perm = [order.index(a) for a in (dst.order or tuple(range(4)))]
        # built here, at compile time: a shape that is not ``same_memory`` always reduces to a batch of 2-D
        # transposes (NCHW <-> NHWC with C > 1 and H*W > 1), never to a copy plan, so no shape builds a kernel
        tiles = tile_kernel(np.dtype(dtype).itemsize)

        def make(shape: tuple[int, ...], first: Any) -> TransposeExecutor | None:
            if same_memory(src, dst, shape):  # [N, C, 1, 1] after a pool of a dynamic size: nothing to move
                return None
            return TransposeExecutor(tuple(shape[a] for a in order), perm, dtype, threads, tiles=tiles)

        super().__init__(make)
        self.src, self.dst = src, dst

    def output_shape(self, shape: tuple[int, ...], ex: Any) -> tuple[int, ...] | None:
        return shape  # the same logical shape in the other layout

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        a = inputs[0]
        ex = self.executor(a.shape)
        if ex is None:
            return [a]
        return [logical(ex.run(physical(a, self.src)), self.dst)]
