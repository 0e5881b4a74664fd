"""ChannelPermute: a permutation of the channels within each pixel of an NHWC tensor, as one JIT kernel.

ShuffleNet's channel shuffle (Reshape [N, C, H, W] -> [N, g, C/g, H, W], Transpose (0, 2, 1, 3, 4), Reshape
back) moves channel ``(j % g) * C/g + j // g`` to ``j`` in every pixel. In NCHW that is a copy of whole planes;
in NHWC it is a permutation inside each pixel's contiguous channels, so the primitives around it keep their NHWC
edges and nothing is reordered (TokenizeConvSnippets wraps the three ops into a ``SnippetsChannelShuffle``
Subgraph, which prefers NHWC like the conv primitives, see docs/conv.md).

The kernel walks the pixels; each output vector of 16 channels is put together from the input vectors its lanes
come from: one ``vpermps`` per source vector, merge-masked to the lanes it supplies (the first one unmasked), the
index and the lane mask constants of the code. A source vector that ends past the pixel's last channel is loaded
with the channel tail's mask first (masked loads do not fault), and the last output vector is stored with it, so
every access stays inside the two arrays. Signature: the native pool's harness ``permute(unused, args, start,
count)`` with ``args`` = [src, dst] and items = pixels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from snippets_x86_64.aligned import empty_aligned
from snippets_x86_64.asm import Function, k1, qword, r9, r14, rbx, word, zword
from snippets_x86_64.asm.registers import K, ZMM
from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES, ShapeCache
from snippets_x86_64.conv_executor import data_address, split_items
from snippets_x86_64.jit import JitFunction
from snippets_x86_64.native_pool import SplitCalls
from snippets_x86_64.runtime import PARALLEL_MIN_NS

LANES = 16
#: elements a permute moves per ns on one thread (shufflenet's: 136 channels of 28x28 in 17 us, 272 of 14x14 in 9.5):
#: it splits over as many threads as get ``PARALLEL_MIN_NS`` of that each
PERMUTED_PER_NS = 5.5
#: index vectors (zmm8-23) and lane masks (k2-k6) kept in registers across the pixel loop
PINNED_INDEXES, PINNED_MASKS = 16, 5


def shuffle_permutation(channels: int, groups: int) -> tuple[int, ...]:
    """The source channel of each output channel of a ShuffleNet channel shuffle with ``groups`` groups."""
    return tuple(int(s) for s in np.arange(channels).reshape(groups, channels // groups).T.reshape(-1))


def _sources(perm: Sequence[int], v: int) -> list[tuple[int, list[int], int]]:
    """For output vector ``v``: (source vector, the 16 lane indices into it, the mask of the lanes it supplies)."""
    lanes = perm[v * LANES:(v + 1) * LANES]
    by_vector: dict[int, tuple[list[int], int]] = {}
    for lane, s in enumerate(lanes):
        idx, mask = by_vector.setdefault(s // LANES, ([0] * LANES, 0))
        idx[lane] = s % LANES
        by_vector[s // LANES] = (idx, mask | (1 << lane))
    return [(u, idx, mask) for u, (idx, mask) in sorted(by_vector.items())]


def build_permute_kernel(perm: tuple[int, ...]) -> JitFunction:
    """``permute(unused, args, start, count)``: pixels ``start .. start + count`` of an NHWC f32 tensor with
    ``len(perm)`` channels, output channel ``j`` = input channel ``perm[j]``."""
    c = len(perm)
    pitch = c * 4
    last_src, tail = divmod(c, LANES)
    fn = Function("channel_permute", args=("unused", "args", "start", "count"))
    if tail:
        fn.kmovw(k1, word[fn.const_data(((1 << tail) - 1).to_bytes(2, "little"), 2)])
    fn.mov(r14, fn.arg("count"))
    fn.test(r14, r14)
    fn.jz(fn.exit)
    fn.imul(rbx, fn.arg("start"), pitch)
    fn.mov(r9, rbx)
    fn.add(rbx, qword[fn.arg("args")])
    fn.add(r9, qword[fn.arg("args") + 8])
    # the index vectors and lane masks used most are loaded once, before the pixel loop, into registers of their
    # own (a shuffle repeats a few patterns: 16 index vectors and 3 masks cover ShuffleNet's 112, 272 and 544
    # channels); the others are loaded from the constants where they are used
    sources = [_sources(perm, v) for v in range(-(-c // LANES))]
    idx_use = Counter(tuple(idx) for srcs in sources for _, idx, _ in srcs)
    mask_use = Counter(mask for srcs in sources for _, _, mask in srcs[1:])
    pinned_idx = {idx: ZMM[8 + i] for i, (idx, _) in enumerate(idx_use.most_common(PINNED_INDEXES))}
    pinned_mask = {mask: K[2 + i] for i, (mask, _) in enumerate(mask_use.most_common(PINNED_MASKS))}
    for idx, reg in pinned_idx.items():
        fn.vmovups(reg, zword[fn.const_data(np.asarray(idx, np.int32).tobytes(), 64)])
    for mask, kreg in pinned_mask.items():
        fn.kmovw(kreg, word[fn.const_data(mask.to_bytes(2, "little"), 2)])
    top = fn.label("pixel")
    tmp, k = ZMM[31], 0
    for v, srcs in enumerate(sources):
        acc = ZMM[v % 8]
        for i, (u, idx, mask) in enumerate(srcs):
            index = pinned_idx.get(tuple(idx))
            if index is None:
                index = ZMM[8 + PINNED_INDEXES + k % (31 - 8 - PINNED_INDEXES)]
                fn.vmovups(index, zword[fn.const_data(np.asarray(idx, np.int32).tobytes(), 64)])
                k += 1
            src = zword[rbx + u * LANES * 4]
            if tail and u == last_src:  # the vector past the last channel: a masked load, which never faults
                fn.vmovups(tmp.mask(k1).z, src)
                src = tmp
            if i == 0:
                fn.vpermps(acc, index, src)
                continue
            km = pinned_mask.get(mask)
            if km is None:
                km = K[7]
                fn.kmovw(km, word[fn.const_data(mask.to_bytes(2, "little"), 2)])
            fn.vpermps(acc.mask(km), index, src)
        dst = zword[r9 + v * LANES * 4]
        fn.vmovups(dst.mask(k1) if tail and v == len(sources) - 1 else dst, acc)
    fn.add(rbx, pitch)
    fn.add(r9, pitch)
    fn.dec(r14)
    fn.jnz(top)
    return fn.finalize(None, HARNESS_ARGTYPES)


class ChannelPermute:
    """``run(x) -> y`` for one shape: ``x`` [N, C, H, W] lying in NHWC (an NCHW view of NHWC memory), ``y`` a new
    NHWC array (returned as its NCHW view) with ``y[:, j] = x[:, perm[j]]``. ``reorders`` counts the inputs that
    did not lie in NHWC (copied first; AssignLayouts makes sure they do). ``alloc(shape)`` makes the
    destination (tests pass guarded memory)."""

    def __init__(self, perm: Sequence[int], shape: tuple[int, ...], num_threads: int = 1,
                 alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None,
                 prepared: ChannelPermute | None = None) -> None:
        """``prepared``: the same permutation made for another shape, whose kernel and dispatch calls this one
        shares (a new shape makes only its thread split: the kernel walks pixels)."""
        n, c, h, w = shape
        if prepared is not None:
            self.perm, self.kernel, self.calls = prepared.perm, prepared.kernel, prepared.calls
        else:
            if sorted(perm) != list(range(c)):
                raise ValueError(f"{list(perm)} is not a permutation of {c} channels")
            self.perm = tuple(int(p) for p in perm)
            self.kernel = FUNCTION_CACHE.get("channel_permute", self.perm, lambda: build_permute_kernel(self.perm),
                                             HARNESS_ARGTYPES)
            self.calls = SplitCalls()
        self.shape = tuple(shape)
        self.new = alloc or empty_aligned
        self.reorders = 0
        pixels = n * h * w
        self.empty = pixels * c == 0
        if self.empty:
            return
        threads = max(1, min(num_threads, int(pixels * c / PERMUTED_PER_NS // PARALLEL_MIN_NS)))
        self.chunks = split_items(pixels, threads)
        self.call = self.calls.get(self.kernel, 2, self.chunks)

    @property
    def result_shape(self) -> tuple[int, ...]:
        """The shape of what ``run`` returns."""
        return self.shape

    def run(self, x: np.ndarray) -> np.ndarray:
        n, c, h, w = self.shape
        y = self.new((n, h, w, c))
        if self.empty:
            return y.transpose(0, 3, 1, 2)
        mem = x.transpose(0, 2, 3, 1)
        if not mem.flags.c_contiguous or mem.dtype != np.float32:
            self.reorders += 1
            mem = np.ascontiguousarray(mem, dtype=np.float32)
        self.call.run_chunks(self.chunks, [data_address(mem), data_address(y)])
        return y.transpose(0, 3, 1, 2)

    def describe(self) -> str:
        n, c, h, w = self.shape
        return f"channel permute of {c} channels over {n}x{h}x{w} pixels (NHWC, JIT vpermps)"


class DynamicPermute(ShapeCache):
    """A channel permutation of a dynamic N, H or W: one kernel (it walks pixels, its code depends on the channels
    alone), a new shape makes only its thread split and shares the first shape's dispatch calls."""

    kind = "one channel permute kernel for every N, H, W"

    def __init__(self, perm: Sequence[int], stand_in: tuple[int, ...], num_threads: int) -> None:
        super().__init__(lambda shape, first: ChannelPermute(perm, shape, num_threads, prepared=first))
        self._first = self.make(stand_in, None)  # the kernel made now, as a static shape's is

    def output_shape(self, shape: tuple[int, ...], ex: Any) -> tuple[int, ...] | None:
        return shape

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [self.executor(inputs[0].shape).run(inputs[0])]


__all__ = ["ChannelPermute", "DynamicPermute", "build_permute_kernel", "shuffle_permutation"]
