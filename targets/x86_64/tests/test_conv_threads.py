"""The thread split of the conv primitives at 1, 2 and 3 threads, against float64 numpy under guard pages.

The shapes are the ones the CNN zoo left on one thread before the split was made by estimated time
(``conv_executor.estimated_ns``) instead of flops: depthwise convolutions and pools of small maps, a classifier's
1x1 convolution on one pixel (its time is its weights'), a 3x3 convolution of a 7x7 map (seven rows to share), a
grouped 1x1 convolution. Each executor's calls go through one ``SplitCall`` (a persistent argument block and Job,
a thunk from the third call on): every case is run three times, and once more with the block held by another
caller, which gets a block of its own. The row copies (``row_copy``) of a channel Concat's input and of a stem's
planar padded input write their rows and nothing around them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from snippets_x86_64.channel_shuffle import ChannelPermute, shuffle_permutation
from snippets_x86_64.conv import ConvGeometry, PostOp, table_items
from snippets_x86_64.conv_executor import ConvExecutor, estimated_ns
from snippets_x86_64.global_pool import GlobalPool
from snippets_x86_64.guarded import guarded_array
from snippets_x86_64.pool import reciprocal_counts
from snippets_x86_64.runtime import PARALLEL_MIN_NS
from snippets_x86_64.row_copy import MIN_BYTES_PER_THREAD, planar_copy, slice_copy

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
from test_conv_kernel import conv_f64, geometry, guarded, guarded_nhwc, pool_f64  # noqa: E402

pytestmark = pytest.mark.avx512

CONVS = [
    # c, h, w, m, k, stride, pads (t, l, b, r), group
    (272, 14, 14, 272, 3, 1, (1, 1, 1, 1), 272),  # depthwise, 14x14
    (576, 7, 7, 576, 3, 1, (1, 1, 1, 1), 576),  # depthwise, 7x7
    (113, 56, 55, 113, 3, 2, (1, 1, 1, 1), 113),  # depthwise, stride 2, a channel tail, odd width
    (1024, 1, 1, 1000, 1, 1, (0, 0, 0, 0), 1),  # a classifier: a GEMV over 4 MB of weights
    (128, 7, 7, 33, 3, 1, (1, 1, 1, 1), 1),  # seven output rows, an output-channel tail
    (136, 28, 28, 136, 1, 1, (0, 0, 0, 0), 4),  # grouped 1x1
]


def check_chunks(chunks: list[tuple[int, int]], items: int, threads: int) -> None:
    """Contiguous ranges covering every item once, as even as the item count allows."""
    assert len(chunks) == threads
    assert [s for s, _ in chunks] == [sum(c for _, c in chunks[:i]) for i in range(threads)]
    assert sum(c for _, c in chunks) == items
    assert max(c for _, c in chunks) - min(c for _, c in chunks) <= 1


@pytest.mark.parametrize("case", CONVS, ids=[str(i) for i in range(len(CONVS))])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("at", ["end", "start"])
def test_split_conv_matches_float64(case: tuple, threads: int, at: str) -> None:
    c, h, wd, m, k, s, pads, group = case
    rng = np.random.default_rng(c * m + h)
    x = rng.standard_normal((1, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c // group, k, k)).astype(np.float32)
    shift = rng.standard_normal(m)
    conv = conv_f64(x, w, group, (s, s), (1, 1), pads)
    res = rng.standard_normal(conv.shape).astype(np.float32)
    want = np.maximum(conv + shift[None, :, None, None] + res, 0)
    geo = geometry(x, w, want, group, (s, s), (1, 1), pads)
    ex = ConvExecutor(geo, w, None, shift, (PostOp("residual"), PostOp("relu")), num_threads=threads,
                      alloc=guarded(at))
    # every case has work for two threads at PARALLEL_MIN_NS each (the zoo's shapes, which ran on one before)
    assert ex.work_ns >= 2 * PARALLEL_MIN_NS
    check_chunks(ex.chunks, table_items(ex.table), min(threads, int(ex.work_ns // PARALLEL_MIN_NS)))
    tol = 1e-4 * max(1.0, np.abs(want).max())
    xg, rg = guarded_nhwc(x, at), guarded_nhwc(res, at)
    for _ in range(3):  # the Job is made once; its thunk from the third call
        np.testing.assert_allclose(ex.run(xg, rg), want, rtol=1e-4, atol=tol)
    with ex.call._busy:  # another caller holds the block: this call gets one of its own
        np.testing.assert_allclose(ex.run(xg, rg), want, rtol=1e-4, atol=tol)


POOLS = [
    # mode, c, h, w, k, stride, pads
    ("max", 256, 27, 27, 3, 2, (0, 0, 0, 0)),
    ("avg", 136, 28, 28, 3, 2, (1, 1, 1, 1)),
    ("avg", 200, 56, 56, 2, 2, (0, 0, 0, 0)),
]


@pytest.mark.parametrize("case", POOLS, ids=[str(i) for i in range(len(POOLS))])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_split_pool_matches_float64(case: tuple, threads: int) -> None:
    mode, c, h, wd, k, s, pads = case
    pt, pl, pb, pr = pads
    ho, wo = (h + pt + pb - k) // s + 1, (wd + pl + pr - k) // s + 1
    x = np.random.default_rng(c + h).standard_normal((1, c, h, wd)).astype(np.float32)
    want = pool_f64(x, mode, (k, k), (s, s), pads, ho, wo, False)
    geo = ConvGeometry(1, c, h, wd, c, c, k, k, s, s, 1, 1, pt, pl, ho, wo, mode=mode)
    divisor = reciprocal_counts(geo, pads, False) if mode == "avg" else np.zeros(1, np.float32)
    ex = ConvExecutor(geo, divisor, None, None, num_threads=threads, alloc=guarded("end"))
    assert ex.work_ns >= 2 * PARALLEL_MIN_NS
    check_chunks(ex.chunks, table_items(ex.table), min(threads, int(ex.work_ns // PARALLEL_MIN_NS)))
    for _ in range(3):
        np.testing.assert_allclose(ex.run(guarded_nhwc(x, "end")), want, rtol=1e-5, atol=1e-5)


def test_small_work_stays_on_one_thread() -> None:
    """Below PARALLEL_MIN_NS per thread a convolution runs on the caller alone (a hand-over costs more)."""
    geo = ConvGeometry(1, 16, 7, 7, 16, 1, 1, 1, 1, 1, 1, 1, 0, 0, 7, 7)
    ex = ConvExecutor(geo, np.ones((16, 16, 1, 1), np.float32), None, None, num_threads=3)
    assert ex.work_ns < 2 * PARALLEL_MIN_NS and len(ex.chunks) == 1


def test_weight_bound_estimate() -> None:
    """A 1x1 convolution on one pixel is timed by its weights' bytes, not by its flops."""
    geo = ConvGeometry(1, 1024, 1, 1, 1000, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1)
    assert estimated_ns(geo, 4 << 20) > 5 * estimated_ns(geo, 0)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("mode", ["ReduceMean", "ReduceMax"])
def test_split_global_pool_matches_float64(threads: int, mode: str) -> None:
    n, c, h, w = 2, 1040, 8, 8  # 65 vectors of channels per image (a tail of none), 133k elements
    x = np.random.default_rng(threads).standard_normal((n, c, h, w)).astype(np.float32)
    xg = guarded_nhwc(x, "end")
    ex = GlobalPool((n, c, h, w), "mean" if mode == "ReduceMean" else "max", None, threads,
                    lambda s: guarded_array(s, np.float32, "end"))
    check_chunks(ex.chunks, len(ex.table), threads)
    want = (x.astype(np.float64).mean if mode == "ReduceMean" else x.astype(np.float64).max)(axis=(2, 3))
    for _ in range(3):
        np.testing.assert_allclose(ex.run(xg)[:, :, 0, 0], want, rtol=1e-5, atol=1e-5)


SLICES = [
    # n, h, w, c, channels before the slice, channels after it
    (1, 56, 56, 224, 0, 32),  # DenseNet's copy: the previous concat's output into the next one's first channels
    (2, 7, 9, 17, 3, 1),  # a channel tail, both neighbours
    (1, 14, 14, 1, 40, 0),  # one channel, the last of the row
    (1, 5, 3, 130, 0, 0),  # the whole row
]


@pytest.mark.parametrize("case", SLICES, ids=[str(i) for i in range(len(SLICES))])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("at", ["end", "start"])
def test_slice_copy_writes_only_its_channels(case: tuple, threads: int, at: str) -> None:
    n, h, w, c, before, after = case
    pitch = before + c + after
    rng = np.random.default_rng(c + threads)
    src = guarded_array((n, h, w, c), np.float32, at)
    src[...] = rng.standard_normal(src.shape)
    dst = guarded_array((n, h, w, pitch), np.float32, at)
    dst[...] = -7.0
    copy = slice_copy(n, h, w, c, pitch, threads)
    if n * h * w * c * 4 >= 3 * MIN_BYTES_PER_THREAD:
        assert copy.call.threads == threads
    for _ in range(3):
        copy.run(src.ctypes.data, dst[..., before:before + c].ctypes.data)
    np.testing.assert_array_equal(dst[..., before:before + c], src)
    assert (dst[..., :before] == -7.0).all() and (dst[..., before + c:] == -7.0).all()


@pytest.mark.parametrize("shape,groups", [((1, 136, 28, 28), 2), ((2, 113, 15, 17), 0)], ids=["shuffle", "random"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_split_channel_permute(shape: tuple[int, ...], groups: int, threads: int) -> None:
    """ShuffleNet's channel permutes, split by estimated time (they ran on one thread below 64 Ki elements)."""
    rng = np.random.default_rng(sum(shape) + threads)
    n, c, h, w = shape
    perm = shuffle_permutation(c, groups) if groups else tuple(int(p) for p in rng.permutation(c))
    x = rng.standard_normal(shape).astype(np.float32)
    ex = ChannelPermute(perm, shape, threads, lambda s: guarded_array(s, np.float32, "end"))
    check_chunks(ex.chunks, n * h * w, min(threads, 2 if groups == 0 else 3))
    for _ in range(3):
        np.testing.assert_array_equal(ex.run(guarded_nhwc(x, "end")), x[:, list(perm)])


@pytest.mark.parametrize("shape,pads", [((1, 3, 224, 224), (3, 3, 2, 2)), ((2, 4, 9, 37), (0, 1, 2, 0)),
                                        ((1, 1, 5, 16), (1, 0, 0, 1))], ids=["stem", "tails", "one"])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("at", ["end", "start"])
def test_planar_copy_fills_the_interior(shape: tuple[int, ...], pads: tuple[int, ...], threads: int, at: str) -> None:
    """A stem's NCHW input into its planar padded buffer: the interior is the input, the border untouched."""
    n, c, h, w = shape
    top, left, bottom, right = pads
    hp, wp = h + top + bottom, w + left + right
    x = guarded_array(shape, np.float32, at)
    x[...] = np.random.default_rng(h + threads).standard_normal(shape)
    xp = guarded_array((n, c, hp, wp), np.float32, at)
    xp[...] = -3.0
    copy = planar_copy(n, c, h, w, hp, wp, top, left, threads)
    for _ in range(3):
        copy.run(x.ctypes.data, xp.ctypes.data)
    want = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=-3.0)
    np.testing.assert_array_equal(xp, want)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_stem_reads_its_planar_copy_made_on_the_threads(threads: int) -> None:
    """A 3-channel stem on a plain 224x224 input: the padded planar copy is the JIT row copy at 2 and 3 threads."""
    rng = np.random.default_rng(threads)
    x = guarded_array((1, 3, 224, 224), np.float32, "end")
    x[...] = rng.standard_normal(x.shape)
    w = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
    want = conv_f64(x, w, 1, (2, 2), (1, 1), (1, 1, 1, 1))
    geo = geometry(x, w, want, 1, (2, 2), (1, 1), (1, 1, 1, 1))
    ex = ConvExecutor(geo, w, None, None, num_threads=threads, alloc=guarded("end"), plain_input=True)
    assert ex.geo.planar and (ex.planar_copy is None) == (threads == 1)
    for _ in range(3):
        np.testing.assert_allclose(ex.run(x), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
