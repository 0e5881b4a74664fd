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

import ctypes
import struct
from collections.abc import Callable

import numpy as np

from snippets_x86_64.aligned import empty_aligned
from snippets_x86_64.asm import Function, bcst, k1, qword, r9, r12, r14, r15, rbx, word, zword
from snippets_x86_64.asm.registers import ZMM
from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES
from snippets_x86_64.conv_executor import split_items
from snippets_x86_64.jit import JitFunction
from snippets_x86_64.reorder import run_split

LANES = 16
CHAINS = 4  # independent accumulators per vector (the add latency over its throughput)
ROW = 3  # table row: source offset, destination offset, variant (0: a full vector, 1: the channel tail)
ARG_SRC, ARG_DST, ARG_TAB = range(3)
#: below this many input elements a global pool runs on one thread
MIN_PARALLEL_ELEMENTS = 1 << 16
MODES = {"ReduceMean": "mean", "ReduceMax": "max"}


def build_global_pool_kernel(pixels: int, channels: int, mode: str) -> JitFunction:
    """``pool(unused, args, start, count)``: items ``start .. start + count`` of the table, each one vector of 16
    channels of one image reduced over its ``pixels`` pixels (pitch ``channels`` floats)."""
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

        def load(z: object, at: int) -> None:
            fn.vmovups(z.mask(k1).z if masked else z, zword[rbx + at * pitch])  # type: ignore[attr-defined]

        # every chain starts from a pixel of its own (chains past the pixel count repeat pixel 0: the max is
        # idempotent, the mean starts those from zero)
        for i in range(CHAINS):
            if i < pixels:
                load(acc[i], i)
            elif mode == "max":
                load(acc[i], 0)
            else:
                fn.vxorps(acc[i], acc[i], acc[i])
        rounds, rest = divmod(max(pixels - CHAINS, 0), CHAINS)
        if rounds:
            fn.add(rbx, CHAINS * pitch)
            loop = fn.new_label(f"pixels{int(masked)}")
            fn.mov(r12, rounds)
            fn.bind(loop)
            for i in range(CHAINS):
                src = zword[rbx + i * pitch]
                op(acc[i].mask(k1) if masked else acc[i], acc[i], src)
            fn.add(rbx, CHAINS * pitch)
            fn.dec(r12)
            fn.jnz(loop)
            first = 0
        else:
            first = CHAINS
        for i in range(rest):
            op(acc[i].mask(k1) if masked else acc[i], acc[i], zword[rbx + (first + i) * pitch])
        op(acc[0], acc[0], acc[1])
        op(acc[2], acc[2], acc[3])
        op(acc[0], acc[0], acc[2])
        if mode == "mean":
            fn.vmulps(acc[0], acc[0], zword[fn.const_data(struct.pack("<f", 1.0 / pixels) * LANES, 64)])
        dst = zword[r9]
        fn.vmovups(dst.mask(k1) if masked else dst, acc[0])
        fn.jmp(nxt)
    fn.bind(nxt)
    fn.add(r15, ROW * 8)
    fn.dec(r14)
    fn.jnz(top)
    return fn.finalize(None, HARNESS_ARGTYPES)


#: a dynamic kernel's table row: source offset, destination offset, variant, rounds of CHAINS pixels after the first
#: pixel, the pixels left after them, the f32 bits of 1 / pixels
ROW_DYN = 6


def build_dynamic_global_pool_kernel(channels: int, mode: str) -> JitFunction:
    """``build_global_pool_kernel`` for any pixel count: each table row (``ROW_DYN``) says how many rounds of
    ``CHAINS`` pixels follow the first one, how many are left (their bits select blocks of 2 and 1) and the
    mean's scale, so a new H, W makes a table, not a kernel. The chains start from the first pixel (a maximum) or
    from zero (a mean): the same loads and adds as the static kernel but one."""
    fn = Function("global_pool_dyn", args=("unused", "args", "start", "count"))
    pitch = channels * 4
    tail = channels % LANES
    op = fn.vaddps if mode == "mean" else fn.vmaxps
    acc = ZMM[:CHAINS]
    if tail:
        fn.kmovw(k1, word[fn.const_data(((1 << tail) - 1).to_bytes(2, "little"), 2)])
    fn.imul(r15, fn.arg("start"), ROW_DYN * 8)
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
    fn.add(r15, ROW_DYN * 8)
    fn.dec(r14)
    fn.jnz(top)
    return fn.finalize(None, HARNESS_ARGTYPES)


class GlobalPool:
    """``run(x) -> y``: ``x`` [N, C, H, W] lying in NHWC, ``y`` of ``out_shape`` ([N, C, 1, 1] by default, or any
    shape of N * C elements: [N, C]), the mean or the maximum over each image's pixels. ``reorders`` counts the
    inputs that did not lie in NHWC (copied first). ``alloc(shape)`` makes the output (tests pass guarded memory)."""

    def __init__(self, shape: tuple[int, ...], mode: str, out_shape: tuple[int, ...] | None = None,
                 num_threads: int = 1, alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None,
                 dynamic: bool = False, prepared: GlobalPool | None = None) -> None:
        """``dynamic``: the kernel for every pixel count (``build_dynamic_global_pool_kernel``), ``prepared``'s when
        it is the same pool made for another shape."""
        n, c, h, w = shape
        self.shape, self.mode = tuple(shape), mode
        self.out_shape = tuple(out_shape) if out_shape is not None else (n, c, 1, 1)
        if int(np.prod(self.out_shape)) != n * c:
            raise ValueError(f"a global pool of {list(shape)} has {n * c} values, not {list(self.out_shape)}")
        self.new = alloc or empty_aligned
        self.reorders = 0
        if n * c * h * w == 0:
            raise ValueError(f"a global pool of an empty {list(shape)} tensor")
        vectors = -(-c // LANES)
        rows = [(i * h * w * c * 4 + v * LANES * 4, (i * c + v * LANES) * 4, int(v * LANES + LANES > c))
                for i in range(n) for v in range(vectors)]
        self.table = np.asarray(rows, dtype=np.int64).reshape(-1, ROW)
        if dynamic:
            self.kernel = prepared.kernel if prepared is not None else FUNCTION_CACHE.get(
                "global_pool_dyn", (c, mode), lambda: build_dynamic_global_pool_kernel(c, mode), HARNESS_ARGTYPES)
            scale = int(np.array([1.0 / (h * w)], np.float32).view(np.uint32)[0])
            extra = np.broadcast_to(np.array([(h * w - 1) // CHAINS, (h * w - 1) % CHAINS, scale], np.int64),
                                    (len(self.table), 3))
            self.table = np.ascontiguousarray(np.concatenate([self.table, extra], axis=1))
        else:
            self.kernel = FUNCTION_CACHE.get("global_pool", (h * w, c, mode),
                                             lambda: build_global_pool_kernel(h * w, c, mode), HARNESS_ARGTYPES)
        self.chunks = split_items(len(self.table), 1 if n * c * h * w < MIN_PARALLEL_ELEMENTS else num_threads)

    def run(self, x: np.ndarray) -> np.ndarray:
        y = self.new(self.out_shape)
        mem = x.transpose(0, 2, 3, 1)
        if not mem.flags.c_contiguous or mem.dtype != np.float32:
            self.reorders += 1
            mem = np.ascontiguousarray(mem, dtype=np.float32)
        block = (ctypes.c_uint64 * 3)(mem.ctypes.data, y.ctypes.data, self.table.ctypes.data)
        run_split(self.kernel, ctypes.addressof(block), self.chunks)
        return y

    def describe(self) -> str:
        n, c, h, w = self.shape
        return f"global {self.mode} pool of {c} channels over {h}x{w} N{n} (NHWC, JIT)"


__all__ = ["MODES", "GlobalPool", "build_global_pool_kernel"]
