"""GlobalPool: the mean or the maximum over H and W of an NHWC tensor (GlobalAveragePool/GlobalMaxPool, which the
frontend makes ReduceMean/ReduceMax over axes 2, 3), as one JIT kernel reading the producer's NHWC memory.

Before, the ReduceMean read plain NCHW, so AssignLayouts put a reorder (NHWC -> NCHW, the whole feature map) in
front of it. In NHWC a pixel's channels are contiguous: one work item is a vector of 16 channels of one image, the
kernel adds (or maxes) that vector of every pixel into four accumulators (one per pixel mod 4, so the adds do not
wait on each other), joins them and scales by ``1 / (H * W)``. The last vector's lanes past the channels are masked
on every load and on the store (masked loads do not fault). The output ``[N, C, 1, 1]`` lies the same in NCHW and
NHWC, so the classifier after it reads it with no reorder. Signature: the native pool's harness
``pool(unused, args, start, count)`` with ``args`` = [src, dst, table].
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from snippets_x86_64.aligned import empty_aligned
from snippets_x86_64.asm import Function, bcst, k1, qword, r9, r12, r14, r15, rbx, word, zword
from snippets_x86_64.asm.registers import ZMM
from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES
from snippets_x86_64.conv_executor import data_address, split_items
from snippets_x86_64.jit import JitFunction
from snippets_x86_64.native_pool import SplitCalls

LANES = 16
CHAINS = 4  # independent accumulators per vector (the add latency over its throughput)
#: table row: source offset, destination offset, variant (0: a full vector, 1: the channel tail), rounds of CHAINS
#: pixels after the first pixel, the pixels left after them, the f32 bits of 1 / pixels
ROW = 6
ARG_SRC, ARG_DST, ARG_TAB = range(3)
#: below this many input elements a global pool runs on one thread
MIN_PARALLEL_ELEMENTS = 1 << 16
MODES = {"ReduceMean": "mean", "ReduceMax": "max"}


def build_global_pool_kernel(channels: int, mode: str) -> JitFunction:
    """``pool(unused, args, start, count)``: items ``start .. start + count`` of the table, each one vector of 16
    channels of one image reduced over its pixels (pitch ``channels`` floats). The pixel count is not in the code:
    each table row says how many rounds of ``CHAINS`` pixels follow the first pixel, how many are left (their bits
    select blocks of 2 and 1) and the mean's scale, so one kernel serves every H, W (static or dynamic: the
    specialized one ran no faster). The chains start from the first pixel (a maximum) or from zero (a mean)."""
    fn = Function("global_pool", args=("unused", "args", "start", "count"))
    pitch = channels * 4
    tail = channels % LANES
    op = fn.vaddps if mode == "mean" else fn.vmaxps
    acc = ZMM[:CHAINS]
    if tail:
        fn.kmovw(k1, word[fn.const_data(((1 << tail) - 1).to_bytes(2, "little"), 2)])
    fn.imul(r15, fn.arg("start"), ROW * 8)
    fn.add(r15, qword[fn.arg("args") + ARG_TAB * 8])
    fn.mov(r14, fn.arg("count"))
    fn.test(r14, r14)
    fn.jz(fn.exit)
    top, nxt = fn.label("item"), fn.new_label("next")
    variants = [False] + ([True] if tail else [])
    labels = [fn.new_label(f"variant{i}") for i in range(len(variants))]
    if tail:
        fn.cmp(qword[r15 + 16], 0)
        fn.jne(labels[1])
    for label, masked in zip(labels, variants):
        fn.bind(label)
        fn.mov(rbx, qword[r15])
        fn.add(rbx, qword[fn.arg("args") + ARG_SRC * 8])
        fn.mov(r9, qword[r15 + 8])
        fn.add(r9, qword[fn.arg("args") + ARG_DST * 8])

        def acc_op(i: int, at: int) -> None:
            op(acc[i].mask(k1) if masked else acc[i], acc[i], zword[rbx + at * pitch])

        fn.vmovups(acc[0].mask(k1).z if masked else acc[0], zword[rbx])
        for i in range(1, CHAINS):
            if mode == "max":
                fn.vmovaps(acc[i], acc[0])
            else:
                fn.vxorps(acc[i], acc[i], acc[i])
        fn.add(rbx, pitch)
        loop, rest = fn.new_label(f"pixels{int(masked)}"), fn.new_label(f"rest{int(masked)}")
        fn.mov(r12, qword[r15 + 24])
        fn.test(r12, r12)
        fn.jz(rest)
        fn.bind(loop)
        for i in range(CHAINS):
            acc_op(i, i)
        fn.add(rbx, CHAINS * pitch)
        fn.dec(r12)
        fn.jnz(loop)
        fn.bind(rest)
        two, one = fn.new_label(f"two{int(masked)}"), fn.new_label(f"one{int(masked)}")
        fn.test(qword[r15 + 32], 2)
        fn.jz(two)
        acc_op(0, 0)
        acc_op(1, 1)
        fn.add(rbx, 2 * pitch)
        fn.bind(two)
        fn.test(qword[r15 + 32], 1)
        fn.jz(one)
        acc_op(2, 0)
        fn.bind(one)
        op(acc[0], acc[0], acc[1])
        op(acc[2], acc[2], acc[3])
        op(acc[0], acc[0], acc[2])
        if mode == "mean":
            fn.vmulps(acc[0], acc[0], bcst(r15 + 40))
        dst = zword[r9]
        fn.vmovups(dst.mask(k1) if masked else dst, acc[0])
        fn.jmp(nxt)
    fn.bind(nxt)
    fn.add(r15, ROW * 8)
    fn.dec(r14)
    fn.jnz(top)
    return fn.finalize(None, HARNESS_ARGTYPES)


@functools.lru_cache(maxsize=1024)
def pool_table(n: int, c: int, h: int, w: int, num_threads: int) -> tuple[np.ndarray, int, list[tuple[int, int]]]:
    """The work table of a global pool of an [N, C, H, W] input (read-only: the pools of that shape share it), its
    address and the thread split."""
    vectors = -(-c // LANES)
    table = np.empty((n, vectors, ROW), np.int64)
    table[..., 0] = np.arange(n)[:, None] * (h * w * c * 4) + np.arange(vectors)[None, :] * (LANES * 4)
    table[..., 1] = np.arange(n)[:, None] * (c * 4) + np.arange(vectors)[None, :] * (LANES * 4)
    table[..., 2] = np.arange(vectors)[None, :] * LANES + LANES > c
    table[..., 3:] = ((h * w - 1) // CHAINS, (h * w - 1) % CHAINS,
                      int(np.array([1.0 / (h * w)], np.float32).view(np.uint32)[0]))
    table = table.reshape(-1, ROW)
    table.flags.writeable = False
    chunks = split_items(len(table), 1 if n * c * h * w < MIN_PARALLEL_ELEMENTS else num_threads)
    return table, data_address(table), chunks


class GlobalPool:
    """``run(x) -> y``: ``x`` [N, C, H, W] lying in NHWC, ``y`` of ``out_shape`` ([N, C, 1, 1] by default, or any
    shape of N * C elements: [N, C]), the mean or the maximum over each image's pixels. ``reorders`` counts the
    inputs that did not lie in NHWC (copied first). ``alloc(shape)`` makes the output (tests pass guarded memory)."""

    def __init__(self, shape: tuple[int, ...], mode: str, out_shape: tuple[int, ...] | None = None,
                 num_threads: int = 1, alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None,
                 prepared: GlobalPool | None = None) -> None:
        """``prepared``: the same pool made for another shape, whose kernel and dispatch calls this one shares (a
        new shape makes its table only: ``pool_table``, shared by every pool of that shape)."""
        n, c, h, w = shape
        self.shape, self.mode = tuple(shape), mode
        self.out_shape = tuple(out_shape) if out_shape is not None else (n, c, 1, 1)
        if math.prod(self.out_shape) != n * c:
            raise ValueError(f"a global pool of {list(shape)} has {n * c} values, not {list(self.out_shape)}")
        self.new = alloc or empty_aligned
        self.reorders = 0
        if n * c * h * w == 0:
            raise ValueError(f"a global pool of an empty {list(shape)} tensor")
        if prepared is not None:
            self.kernel, self.calls = prepared.kernel, prepared.calls
        else:
            self.kernel = FUNCTION_CACHE.get("global_pool", (c, mode), lambda: build_global_pool_kernel(c, mode),
                                             HARNESS_ARGTYPES)
            self.calls = SplitCalls()
        self.table, self._table_address, self.chunks = pool_table(n, c, h, w, num_threads)
        self.call = self.calls.get(self.kernel, 3, self.chunks)

    @property
    def result_shape(self) -> tuple[int, ...]:
        """The shape of what ``run`` returns."""
        return self.out_shape

    def run(self, x: np.ndarray) -> np.ndarray:
        y = self.new(self.out_shape)
        mem = x.transpose(0, 2, 3, 1)
        if not mem.flags.c_contiguous or mem.dtype != np.float32:
            self.reorders += 1
            mem = np.ascontiguousarray(mem, dtype=np.float32)
        self.call.run_chunks(self.chunks, [data_address(mem), data_address(y), self._table_address])
        return y

    def describe(self) -> str:
        n, c, h, w = self.shape
        return f"global {self.mode} pool of {c} channels over {h}x{w} N{n} (NHWC, JIT)"


__all__ = ["MODES", "GlobalPool", "build_global_pool_kernel"]
