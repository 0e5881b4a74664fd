"""A standalone Transpose (any perm, rank <= 6, 4- or 2-byte elements) as a JIT kernel.

The perm is first reduced: axes of size 1 are dropped and input axes that stay adjacent and in order in the output
are merged (``[1, 128, 12, 64]`` perm ``[0, 2, 1, 3]`` becomes ``[128, 12, 64]`` perm ``[1, 0, 2]``). What is left
is one of two plans:

* ``copy``: the innermost axis stays innermost. The output is a batch of contiguous runs of ``run`` elements, each
  read from one place of the source: one table row (source offset, destination offset) per run, copied with
  full-vector loads/stores and a masked tail (BERT's head split, the last axis kept).
* ``transpose``: the innermost output axis is some other input axis ``a``. Every other axis is a batch of 2-D
  transposes of ``[rows = shape[a], cols = shape[-1]]`` blocks, the source rows ``stride(a)`` apart and the
  destination rows ``stride_out(last)`` apart: reorder.py's 16 x 16 register tiles (masked tails) with those
  pitches, one table row per strip of up to 16 rows (NCHW <-> NHWC, the last-two swap).

Both kernels take the native pool's harness signature ``kernel(unused, args, start, count)`` with ``args`` = [src,
dst, table(, params)] and the items split over the threads in contiguous ranges. The copy kernel depends only on
the run length, and the tile kernel on nothing (pitches, column count and tail masks are read from ``params`` and
the table); the plan (numpy index arithmetic) is made once per input shape. A dynamic Transpose builds its kernels
when it is compiled (:func:`generic_plan`): the tile kernel, and the copy kernel of the run its shapes with dynamic
dims > 1 have; dims of 1 only merge axes, so a longer run is that many runs of it, and a transposing perm whose dims
of 1 leave a copy plan moves it as [1, run] tiles; a run of a dynamic length goes to the copy kernel that reads its
vector counts and tail mask from ``params`` (:func:`build_any_copy_kernel`). No new shape builds a kernel.
Every access stays inside the two arrays.

2-byte elements (bf16, f16, int16): the copy kernel moves 32 words per vector (``vmovdqu16``, a 32-bit tail mask);
the tile kernel widens each row of 16 words to dwords (``vpmovzxwd``), transposes the dword tile and narrows the
rows back (``vpmovdw``), both under the same masks, so it is the 4-byte kernel with half-width memory accesses.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from snippets_core.errors import UnsupportedByTarget
from snippets_x86_64.aligned import empty_aligned
from snippets_x86_64.asm import (Function, dword, k1, k2, qword, r8, r9, r10, r11, r12, r13, r14, r15, rax, rbx, word,
                                 yword, zword)
from snippets_x86_64.asm.registers import ZMM
from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES
from snippets_x86_64.jit import JitFunction
from snippets_x86_64.reorder import ARG_DST, ARG_SRC, ARG_TAB, TILE, _transpose_tile, run_split

COPY_ROW = 2  # copy table row: source offset, destination offset (bytes)
TILE_ROW = 3  # tile table row: source offset, destination offset (bytes), the strip's row mask ((1 << rows) - 1)
#: tile kernel: args[3] -> [source pitch, destination pitch (bytes), full column tiles, tail column mask, tail columns]
ARG_PARAMS = 3
UNROLL = 4  # vectors per iteration of the copy loop
#: bytes moved per thread below which another thread costs more (a pool dispatch, a few us) than it saves: at
#: 384 KiB (BERT-base's head split, seq 128) two threads measured slower than one
MIN_BYTES_PER_THREAD = 256 * 1024


@dataclass(frozen=True)
class TransposePlan:
    """A reduced Transpose: ``kind`` "copy" (runs of ``run`` elements) or "transpose" (``[rows, cols]`` blocks with
    row pitches ``src_pitch``/``dst_pitch`` in elements); ``src``/``dst`` the element offsets of each batch item."""

    kind: str
    src: np.ndarray
    dst: np.ndarray
    run: int = 0
    rows: int = 0
    cols: int = 0
    src_pitch: int = 0
    dst_pitch: int = 0


def reduce_perm(shape: Sequence[int], perm: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(shape', perm')``: size-1 axes dropped, input axes adjacent and in order in the output merged."""
    keep = [a for a in range(len(shape)) if shape[a] != 1]
    rank = {a: i for i, a in enumerate(keep)}
    s = [int(shape[a]) for a in keep]
    p = [rank[a] for a in perm if a in rank]
    groups: list[list[int]] = []  # runs of the output order that are consecutive input axes
    for a in p:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    by_first = sorted(groups, key=lambda g: g[0])  # the merged axes in input order
    new_index = {g[0]: i for i, g in enumerate(by_first)}
    merged_shape = tuple(int(np.prod([s[a] for a in g], dtype=np.int64)) for g in by_first)
    return merged_shape, tuple(new_index[g[0]] for g in groups)


def _grid(sizes: Sequence[int], strides_a: Sequence[int], strides_b: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Offsets of every index of ``sizes`` (row-major) under two stride vectors."""
    a, b = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    for n, sa, sb in zip(sizes, strides_a, strides_b):
        i = np.arange(n, dtype=np.int64)
        a = (a[:, None] + i[None, :] * sa).reshape(-1)
        b = (b[:, None] + i[None, :] * sb).reshape(-1)
    return a, b


def _geometry(shape: Sequence[int],
              perm: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...], list[int], list[int]]:
    """The reduced shape and perm, the input's strides and the output's (elements)."""
    s, p = reduce_perm(shape, perm)
    if not s:  # one element (or only size-1 axes)
        s, p = (1,), (0,)
    m = len(s)
    in_strides = [int(np.prod(s[a + 1:], dtype=np.int64)) for a in range(m)]
    out_shape = [s[a] for a in p]
    out_strides = [int(np.prod(out_shape[j + 1:], dtype=np.int64)) for j in range(m)]
    return s, p, in_strides, out_strides


def plan_transpose(shape: Sequence[int], perm: Sequence[int]) -> TransposePlan:
    """The plan of ``np.transpose(x, perm)`` for a C-contiguous ``x`` of ``shape`` into a C-contiguous result."""
    s, p, in_strides, out_strides = _geometry(shape, perm)
    m = len(s)
    out_shape = [s[a] for a in p]
    if p[-1] == m - 1:
        src, dst = _grid(out_shape[:-1], [in_strides[a] for a in p[:-1]], out_strides[:-1])
        return TransposePlan("copy", src, dst, run=s[-1])
    a, last_pos = p[-1], p.index(m - 1)
    batch = [j for j in range(m) if p[j] not in (a, m - 1)]  # output positions of the batch axes
    src, dst = _grid([out_shape[j] for j in batch], [in_strides[p[j]] for j in batch], [out_strides[j] for j in batch])
    return TransposePlan("transpose", src, dst, rows=s[a], cols=s[-1], src_pitch=in_strides[a],
                         dst_pitch=out_strides[last_pos])


#: element sizes (bytes) the kernels move
ELEMENT_SIZES = (2, 4)


def _copy_items(fn: Function, size: int, run_body: Callable[[Any], None]) -> JitFunction:
    """The item walk both copy kernels share: per table row from ``start``, rbx/r9 = src/dst + the row's offsets,
    then ``run_body(move)`` copies the run (``move``: the element size's unaligned vector move)."""
    fn.imul(r15, fn.arg("start"), COPY_ROW * 8)
    fn.add(r15, qword[fn.arg("args") + ARG_TAB * 8])
    fn.mov(r14, fn.arg("count"))
    fn.test(r14, r14)
    fn.jz(fn.exit)
    fn.mov(r10, qword[fn.arg("args") + ARG_SRC * 8])  # the bases in registers: two loads less per run
    fn.mov(r11, qword[fn.arg("args") + ARG_DST * 8])
    top = fn.new_label("item")
    fn.bind(top)
    fn.mov(rbx, qword[r15])
    fn.add(rbx, r10)
    fn.mov(r9, qword[r15 + 8])
    fn.add(r9, r11)
    run_body(fn.vmovups if size == 4 else fn.vmovdqu16)
    fn.add(r15, COPY_ROW * 8)
    fn.dec(r14)
    fn.jnz(top)
    return fn.finalize(None, HARNESS_ARGTYPES)


def _unrolled_block(fn: Function, move: Any) -> None:
    """UNROLL vectors from [rbx] to [r9], both pointers advanced past them."""
    for v in range(UNROLL):
        move(ZMM[v], zword[rbx + v * 64])
    for v in range(UNROLL):
        move(zword[r9 + v * 64], ZMM[v])
    fn.add(rbx, UNROLL * 64)
    fn.add(r9, UNROLL * 64)


def build_copy_kernel(run: int, size: int = 4) -> JitFunction:
    """``copy(unused, args, start, count)``: each item copies ``run`` elements of ``size`` bytes (4 or 2) from src
    + its source offset to dst + its destination offset (full vectors, then one masked vector)."""
    fn = Function("transpose_copy", args=("unused", "args", "start", "count"))
    full, tail = divmod(run, 64 // size)
    if tail and size == 4:
        fn.kmovw(k1, word[fn.const_data(((1 << tail) - 1).to_bytes(2, "little"), 2)])
    elif tail:
        fn.kmovd(k1, dword[fn.const_data(((1 << tail) - 1).to_bytes(4, "little"), 4)])
    loops, rest = divmod(full, UNROLL)

    def body(move: Any) -> None:
        if loops > 1:
            loop = fn.new_label("vectors")
            fn.mov(fn.arg("unused"), loops)
            fn.bind(loop)
        if loops:
            _unrolled_block(fn, move)
        if loops > 1:
            fn.dec(fn.arg("unused"))
            fn.jnz(loop)
        for v in range(rest):
            move(ZMM[v], zword[rbx + v * 64])
            move(zword[r9 + v * 64], ZMM[v])
        if tail:  # the lanes past the run are neither read nor written
            move(ZMM[UNROLL].mask(k1).z, zword[rbx + rest * 64])
            move(zword[r9 + rest * 64].mask(k1), ZMM[UNROLL])

    return _copy_items(fn, size, body)


#: the shape-agnostic copy kernel: args[3] -> [blocks of UNROLL vectors, vectors after them, tail mask, tail lanes]
COPY_PARAMS = 4


def copy_params(run: int, size: int) -> np.ndarray:
    """The parameter block of :func:`build_any_copy_kernel` for runs of ``run`` elements of ``size`` bytes."""
    full, tail = divmod(run, 64 // size)
    return np.array([full // UNROLL, full % UNROLL, (1 << tail) - 1, tail], dtype=np.int64)


def build_any_copy_kernel(size: int = 4) -> JitFunction:
    """``copy(unused, args, start, count)`` for every run length: :func:`build_copy_kernel`'s loop with the run's
    vector counts and tail mask read from ``args[3]`` (:func:`copy_params`), so a Transpose whose innermost kept run
    has a dynamic length builds no kernel per length."""
    fn = Function("transpose_copy_any", args=("unused", "args", "start", "count"))
    fn.mov(r8, qword[fn.arg("args") + ARG_PARAMS * 8])
    fn.mov(r12, qword[r8])
    fn.mov(r13, qword[r8 + 8])
    if size == 4:
        fn.kmovw(k1, word[r8 + 16])
    else:
        fn.kmovd(k1, dword[r8 + 16])
    fn.mov(r8, qword[r8 + 24])  # from here on: the tail lanes (0: none)

    def body(move: Any) -> None:
        blocks, vectors, one, tail, done = (fn.new_label(n) for n in ("blocks", "vectors", "vector", "tail", "done"))
        fn.mov(rax, r12)
        fn.test(rax, rax)
        fn.jz(vectors)
        fn.bind(blocks)
        _unrolled_block(fn, move)
        fn.dec(rax)
        fn.jnz(blocks)
        fn.bind(vectors)
        fn.mov(rax, r13)
        fn.test(rax, rax)
        fn.jz(tail)
        fn.bind(one)
        move(ZMM[0], zword[rbx])
        move(zword[r9], ZMM[0])
        fn.add(rbx, 64)
        fn.add(r9, 64)
        fn.dec(rax)
        fn.jnz(one)
        fn.bind(tail)
        fn.test(r8, r8)
        fn.jz(done)
        move(ZMM[UNROLL].mask(k1).z, zword[rbx])  # the lanes past the run are neither read nor written
        move(zword[r9].mask(k1), ZMM[UNROLL])
        fn.bind(done)

    return _copy_items(fn, size, body)


def any_copy_kernel(size: int) -> JitFunction:
    """The shape-agnostic copy kernel for ``size``-byte elements, from the process-wide function cache (taken at
    compile time, as :func:`tile_kernel`)."""
    return FUNCTION_CACHE.get("transpose_copy_any", (size,), lambda: build_any_copy_kernel(size), HARNESS_ARGTYPES)


def _tile_rows(fn: Function, partial: bool, tail: bool, size: int = 4) -> None:
    """One 16 x 16 tile at [rbx] (row pitch r10) into [r9] (row pitch r11). ``partial``: only the strip's rows
    (r12's bits) are loaded and only their lanes stored (k2); ``tail``: only the tail columns (k1, r13 of them) are
    loaded and stored as rows. ``size`` 2: rows of 16 words widened to dwords and narrowed back."""
    fn.mov(rax, rbx)
    for i in range(TILE):
        skip = fn.new_label("row")
        if partial and i:  # rows past the strip (mask r12 below 2^(i+1) - 1) are never read; k2 masks their lanes
            fn.cmp(r12, (1 << (i + 1)) - 1)
            fn.jb(skip)
        reg = ZMM[i].mask(k1).z if tail else ZMM[i]
        if size == 4:
            fn.vmovups(reg, zword[rax])
        else:
            fn.vpmovzxwd(reg, yword[rax])
        if i < TILE - 1:
            fn.add(rax, r10)
        fn.bind(skip)
    _transpose_tile(fn)
    done = fn.new_label("stored")
    fn.mov(rax, r9)
    for j in range(TILE):
        if tail and j:  # the destination rows past the tail columns do not exist
            fn.cmp(r13, j)
            fn.jbe(done)
        dst = zword[rax] if size == 4 else yword[rax]
        if size == 4:
            fn.vmovups(dst.mask(k2) if partial else dst, ZMM[j])
        else:
            fn.vpmovdw(dst.mask(k2) if partial else dst, ZMM[j])
        if j < TILE - 1:
            fn.add(rax, r11)
    fn.bind(done)


def build_tile_kernel(size: int = 4) -> JitFunction:
    """``tiles(unused, args, start, count)`` for every shape: each item transposes a strip of up to 16 rows of a
    ``[rows, cols]`` block into the matching columns of its ``[cols, rows]`` result. The pitches, the column tile
    count and the tail columns' mask come from ``args[3]``, each strip's row mask from its table row, so a new
    shape needs a new table, never a new kernel. ``size``: the element's bytes (4 or 2)."""
    fn = Function("transpose_tiles", args=("unused", "args", "start", "count"))
    params = r8
    fn.mov(params, qword[fn.arg("args") + ARG_PARAMS * 8])
    fn.mov(r10, qword[params])
    fn.mov(r11, qword[params + 8])
    fn.kmovw(k1, word[params + 24])
    fn.mov(r13, qword[params + 32])  # the tail column count (0: none)
    fn.mov(params, qword[params + 16])  # from here on: the full column tile count
    fn.imul(r15, fn.arg("start"), TILE_ROW * 8)
    fn.add(r15, qword[fn.arg("args") + ARG_TAB * 8])
    fn.mov(r14, fn.arg("count"))
    fn.test(r14, r14)
    fn.jz(fn.exit)
    top, nxt = fn.new_label("item"), fn.new_label("next")
    fn.bind(top)
    fn.mov(rbx, qword[r15])
    fn.add(rbx, qword[fn.arg("args") + ARG_SRC * 8])
    fn.mov(r9, qword[r15 + 8])
    fn.add(r9, qword[fn.arg("args") + ARG_DST * 8])
    fn.mov(r12, qword[r15 + 16])
    fn.kmovw(k2, word[r15 + 16])
    partial_strip = fn.new_label("partial")
    fn.cmp(r12, (1 << TILE) - 1)
    fn.jne(partial_strip)
    for partial in (False, True):  # a full strip needs no row checks and no store mask
        if partial:
            fn.bind(partial_strip)
        cols, tail = fn.new_label("cols"), fn.new_label("tail")
        fn.mov(fn.arg("unused"), params)
        fn.test(params, params)
        fn.jz(tail)
        fn.bind(cols)
        _tile_rows(fn, partial, False, size)
        fn.add(rbx, TILE * size)
        fn.mov(rax, r11)
        fn.shl(rax, 4)  # 16 destination rows
        fn.add(r9, rax)
        fn.dec(fn.arg("unused"))
        fn.jnz(cols)
        fn.bind(tail)
        fn.test(r13, r13)
        fn.jz(nxt)
        _tile_rows(fn, partial, True, size)
        fn.jmp(nxt)
    fn.bind(nxt)
    fn.add(r15, TILE_ROW * 8)
    fn.dec(r14)
    fn.jnz(top)
    return fn.finalize(None, HARNESS_ARGTYPES)


def tile_kernel(size: int) -> JitFunction:
    """The shape-agnostic tile kernel for ``size``-byte elements, from the process-wide function cache. A dynamic
    Transpose or Reorder takes it at compile time and hands it to every shape's executor, so no call builds it
    (the cache is bounded: asking it again per shape could rebuild an evicted kernel between two calls)."""
    return FUNCTION_CACHE.get("transpose_tiles", (size,), lambda: build_tile_kernel(size), HARNESS_ARGTYPES)


def generic_plan(dims: Sequence[int | None], perm: Sequence[int]) -> tuple[str, int | None]:
    """``perm``'s plan kind for every shape of ``dims`` (None: a dynamic dim) whose dynamic dims exceed 1, and for a
    copy the run length when it is static (the innermost axes kept in place have static sizes), else None. A shape
    with dynamic dims of 1 merges more axes: its run is a multiple of that one."""
    plans = [plan_transpose([n if d is None else d for d in dims], perm) for n in (2, 3)]
    kind = plans[0].kind
    return kind, (plans[0].run if kind == "copy" and plans[0].run == plans[1].run else None)


def transpose_supported(shape: Sequence[int], perm: Sequence[int], dtype: np.dtype) -> str | None:
    """None if the JIT Transpose moves ``dtype`` of ``shape`` by ``perm``, else why not."""
    if np.dtype(dtype).itemsize not in ELEMENT_SIZES:
        return f"the JIT Transpose moves 4-byte or 2-byte elements, not {np.dtype(dtype)}"
    if sorted(perm) != list(range(len(shape))):
        return f"the order {list(perm)} is not a permutation of rank {len(shape)}"
    return None


class TransposeExecutor:
    """``run(x) -> np.transpose(x, perm)`` (a new C-contiguous array) for one input shape. ``alloc(shape)`` makes
    the destination (tests pass guarded memory); ``copies`` counts the non-contiguous inputs copied first. The
    table is split over up to ``num_threads`` threads, each moving ``min_bytes_per_thread`` at least."""

    def __init__(self, shape: Sequence[int], perm: Sequence[int], dtype: np.dtype, num_threads: int = 1,
                 alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None,
                 min_bytes_per_thread: int = MIN_BYTES_PER_THREAD, tiles: JitFunction | None = None,
                 copy: tuple[int, JitFunction] | None = None, copy_as_tiles: bool = False,
                 copy_any: JitFunction | None = None) -> None:
        self.shape, self.perm, self.dtype = tuple(int(d) for d in shape), tuple(int(a) for a in perm), np.dtype(dtype)
        self.out_shape = tuple(self.shape[a] for a in self.perm)
        self.new = alloc or (lambda s: empty_aligned(s, self.dtype))
        self.copies = 0
        self.params: np.ndarray | None = None  # the kernel's parameter block (args[3]), when it reads one
        self.empty = int(np.prod(self.shape, dtype=np.int64)) == 0
        if self.empty:
            return
        plan = self.plan = plan_transpose(self.shape, self.perm)
        size = self.dtype.itemsize
        if plan.kind == "copy" and copy_as_tiles:
            # a dynamic transposing perm whose dims of 1 leave the memory as it lies (NCHW -> NHWC of C = 1): its runs
            # as [1, run] blocks on the tile kernel (each output row one element), not a copy kernel built for them
            plan = self.plan = TransposePlan("transpose", plan.src, plan.dst, rows=1, cols=plan.run,
                                             src_pitch=plan.run, dst_pitch=1)
        if plan.kind == "copy" and copy is not None and plan.run % copy[0] == 0:
            # a dynamic Transpose's copy kernel of the generic run (:func:`generic_copy_run`): a run that dims of 1
            # merged into a longer one is that many runs of it, so no shape builds a kernel
            run, self.kernel = copy
            parts = np.arange(0, plan.run, run, dtype=np.int64)
            self.table = np.stack([((plan.src[:, None] + parts) * size).reshape(-1),
                                   ((plan.dst[:, None] + parts) * size).reshape(-1)], axis=1)
        elif plan.kind == "copy" and copy_any is not None:
            # a run of a dynamic length: the shape-agnostic copy kernel, the run's counts in its parameter block
            self.kernel = copy_any
            self.params = copy_params(plan.run, size)
            self.table = np.stack([plan.src * size, plan.dst * size], axis=1).astype(np.int64)
        elif plan.kind == "copy":
            self.kernel = FUNCTION_CACHE.get("transpose_copy", (plan.run, size),
                                             lambda: build_copy_kernel(plan.run, size), HARNESS_ARGTYPES)
            self.table = np.stack([plan.src * size, plan.dst * size], axis=1).astype(np.int64)
        else:
            self.kernel = tiles or tile_kernel(size)
            full, tail = divmod(plan.cols, TILE)
            self.params = np.array([plan.src_pitch * size, plan.dst_pitch * size, full, (1 << tail) - 1, tail],
                                   dtype=np.int64)
            # one row per strip of 16 rows of one block: the strip's first row in both arrays, its row mask
            r0 = np.arange(0, plan.rows, TILE, dtype=np.int64)
            masks = (1 << np.minimum(plan.rows - r0, TILE)) - 1
            table = np.empty((len(plan.src), len(r0), TILE_ROW), dtype=np.int64)
            table[:, :, 0] = (plan.src * size)[:, None] + r0[None, :] * plan.src_pitch * size
            table[:, :, 1] = (plan.dst * size)[:, None] + r0[None, :] * size
            table[:, :, 2] = masks[None, :]
            self.table = np.ascontiguousarray(table.reshape(-1, TILE_ROW))
        # the table and the parameters live as long as the executor: one address lookup each, not one per call
        self.table_address = self.table.ctypes.data
        self.params_address = self.params.ctypes.data if self.params is not None else 0
        items = len(self.table)
        nbytes = int(np.prod(self.shape, dtype=np.int64)) * size
        threads = max(1, min(num_threads, items, nbytes // max(1, min_bytes_per_thread)))
        bounds = [items * k // threads for k in range(threads + 1)]
        self.chunks = [(bounds[k], bounds[k + 1] - bounds[k]) for k in range(threads)]

    def run(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``np.transpose(x, perm)`` written into ``out`` when it is a C-contiguous array of the result's shape and
        type (a caller's preallocated output), else into a new array."""
        usable = (out is not None and out.shape == self.out_shape and out.dtype == self.dtype
                  and out.flags.c_contiguous and out.flags.writeable)
        y = out if usable else self.new(self.out_shape)
        if self.empty:
            return y
        if not x.flags.c_contiguous or x.dtype != self.dtype:
            self.copies += 1
            x = np.ascontiguousarray(x, dtype=self.dtype)
        block = (ctypes.c_uint64 * 4)(x.ctypes.data, y.ctypes.data, self.table_address, self.params_address)
        run_split(self.kernel, ctypes.addressof(block), self.chunks)
        return y


def transpose_order(sg: Any) -> list[int]:
    """The order of the Transpose in a ``SnippetsTranspose`` Subgraph (a body Constant; empty: reverse the axes)."""
    (op,) = sg.body_ops
    order = [int(v) for v in np.asarray(op.inputs[1].source.node.value).reshape(-1)]
    return order or list(range(op.inputs[0].shape.rank))[::-1]


def compile_transpose_subgraph(sg: Any, config: Any) -> Callable[[Sequence[np.ndarray]], list[np.ndarray]] | None:
    """``run(inputs) -> [y]`` for a Subgraph holding one Transpose (TokenizeTransposeSnippets), or None with the
    reason in ``sg.rt_info`` (it then runs on its reference). A dynamic shape gets a plan per input shape."""
    order = transpose_order(sg)
    x = sg.body.parameters[0].outputs[0]
    et = x.element_type
    if et.value == "dynamic":
        sg.rt_info["SnippetsFallbackReason"] = "a dynamic element type"
        return None
    dtype, threads = et.numpy, config.num_threads
    executors: dict[tuple[int, ...], TransposeExecutor] = {}
    tiles: JitFunction | None = None
    copy: tuple[int, JitFunction] | None = None
    copy_as_tiles = False
    copy_any: JitFunction | None = None

    def executor(shape: tuple[int, ...]) -> TransposeExecutor:
        why = transpose_supported(shape, order, dtype)
        if why is not None:
            raise UnsupportedByTarget(f"Transpose '{sg.name}' of shape {list(shape)}: {why}")
        return executors.setdefault(shape, TransposeExecutor(shape, order, dtype, threads, tiles=tiles, copy=copy,
                                                                 copy_as_tiles=copy_as_tiles, copy_any=copy_any))

    if x.shape.is_static:
        shape = x.shape.to_tuple()
        why = transpose_supported(shape, order, dtype)
        if why is not None:
            sg.rt_info["SnippetsFallbackReason"] = why
            return None
        executor(shape)
    elif np.dtype(dtype).itemsize not in ELEMENT_SIZES:
        sg.rt_info["SnippetsFallbackReason"] = transpose_supported((), (), dtype)
        return None
    else:  # a dynamic shape: the kernels now, so a new shape makes only a table
        size = np.dtype(dtype).itemsize
        tiles = tile_kernel(size)
        kind, generic = generic_plan(x.shape.dims, order) if x.shape.rank_is_static else ("", None)
        copy_as_tiles = kind == "transpose"
        if generic is not None:
            copy = (generic, FUNCTION_CACHE.get("transpose_copy", (generic, size),
                                                lambda: build_copy_kernel(generic, size), HARNESS_ARGTYPES))
        else:  # the innermost kept run has a dynamic length: the copy kernel that reads it from its parameters
            copy_any = any_copy_kernel(size)
    sg.rt_info["SnippetsConvKernel"] = f"transpose {order} (JIT strided copies / 16x16 tiles)"

    def run(inputs: Sequence[np.ndarray], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        a = inputs[0]
        ex = executors.get(a.shape)
        return [(ex or executor(a.shape)).run(a, outs[0] if outs else None)]

    def describe() -> str:
        plans = [ex.plan for ex in executors.values() if not ex.empty]
        how = sorted({f"runs of {p.run} copied" + (" (run length read at run time)" if copy_any is not None else "")
                      if p.kind == "copy" else f"[{p.rows}, {p.cols}] blocks in 16x16 tiles"
                      for p in plans})
        return f"JIT transpose {order}, {len(executors)} shape(s): {'; '.join(how) or 'no call yet'}"

    run.executors = executors  # type: ignore[attr-defined]
    run.describe = describe  # type: ignore[attr-defined]
    return run
