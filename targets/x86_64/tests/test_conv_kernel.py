"""The JIT convolution kernel (snippets_x86_64.conv) against a float64 numpy convolution, under guard pages.

The in-place input paths are swept with the input itself in guarded memory: a depthwise convolution and the pools
read the unpadded NHWC input and skip the taps outside the image; a 1x1 convolution walks the NHWC pixels as one
matrix cut into even rows. Odd channel counts (1, 3, 17, 33), tails in every dimension, stride 2 on odd sizes,
asymmetric padding, dilation, ceil_mode windows; guard page at either end. With dynamic N, H, W one kernel serves
random shapes (hypothesis), and a new shape compiles nothing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snippets_x86_64.cache import FUNCTION_CACHE
from snippets_x86_64.conv import ConvGeometry, PostOp, flat_pixels, kernel_key, merge_borders
from snippets_x86_64.conv_executor import ConvExecutor
from snippets_x86_64.guarded import guarded_array
from snippets_x86_64.pool import reciprocal_counts

pytestmark = pytest.mark.avx512


def conv_f64(x: np.ndarray, w: np.ndarray, group: int, s: tuple[int, int], d: tuple[int, int],
             pads: tuple[int, int, int, int]) -> np.ndarray:
    """The oracle: a direct float64 convolution, pads (top, left, bottom, right)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, _, h, wd = x.shape
    m, cg, kh, kw = w.shape
    pt, pl, pb, pr = pads
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    ho = (h + pt + pb - (kh - 1) * d[0] - 1) // s[0] + 1
    wo = (wd + pl + pr - (kw - 1) * d[1] - 1) // s[1] + 1
    y = np.zeros((n, m, ho, wo))
    mg = m // group
    for g in range(group):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i * d[0]:i * d[0] + (ho - 1) * s[0] + 1:s[0],
                           j * d[1]:j * d[1] + (wo - 1) * s[1] + 1:s[1]]
                y[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, w[g * mg:(g + 1) * mg, :, i, j])
    return y


def geometry(x: np.ndarray, w: np.ndarray, y: np.ndarray, group: int, s: tuple[int, int], d: tuple[int, int],
             pads: tuple[int, int, int, int]) -> ConvGeometry:
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    return ConvGeometry(n, c, h, wd, m, group, kh, kw, s[0], s[1], d[0], d[1], pads[0], pads[1], y.shape[2],
                        y.shape[3])


SWEEP = [
    # n, c, h, w, m, k, stride, dilation, pads (t, l, b, r), group
    (1, 1, 5, 5, 1, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    (1, 3, 7, 9, 17, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (2, 33, 9, 8, 40, (3, 3), (2, 2), (1, 1), (1, 0, 2, 1), 1),
    (1, 17, 11, 13, 70, (5, 5), (1, 1), (2, 1), (2, 2, 2, 2), 1),
    (1, 5, 15, 17, 33, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
    (1, 3, 23, 23, 16, (11, 11), (4, 4), (1, 1), (2, 1, 2, 1), 1),
    (1, 8, 6, 6, 8, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 8),
    (1, 12, 10, 10, 6, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 3),
    (1, 33, 9, 7, 33, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 33),
    (1, 16, 8, 8, 32, (3, 3), (1, 1), (1, 1), (0, 1, 1, 0), 16),
    (3, 64, 9, 19, 96, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1),
    (1, 20, 6, 30, 130, (3, 1), (1, 3), (1, 1), (1, 0, 1, 2), 2),
    # depthwise: channels in the lanes, padded to whole vectors
    (1, 144, 9, 11, 144, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 144),
    (2, 17, 8, 7, 17, (5, 5), (1, 1), (2, 2), (4, 3, 4, 5), 17),
    (1, 80, 5, 21, 80, (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 80),
]


@pytest.mark.parametrize("case", SWEEP, ids=[str(i) for i in range(len(SWEEP))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_conv_kernel_sweep_guarded(case: tuple, at: str) -> None:
    n, c, h, wd, m, k, s, d, pads, group = case
    rng = np.random.default_rng(len(SWEEP) + c * m)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c // group, *k)).astype(np.float32)
    want = conv_f64(x, w, group, s, d, pads)
    geo = geometry(x, w, want, group, s, d, pads)
    # plain_input: a convolution with up to 4 input channels reads a planar padded copy (choose_planar)
    ex = ConvExecutor(geo, w, None, None, num_threads=2, alloc=lambda shape: guarded_array(shape, np.float32, at),
                      plain_input=True)
    assert ex.geo.planar == (c <= 4 and k != (1, 1) and group == 1)
    got = ex.run(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    # an NHWC input in guarded memory: read in place, or copied into the padded buffer by the JIT copy kernel
    got = ex.run(guarded_nhwc(x, at))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


PRE_OPS = [
    # n, c, h, w, m, k, pads, pre-ops (name, with a per-channel vector)
    (1, 17, 7, 9, 20, 3, (1, 1, 1, 1), (("multiply", True), ("add", True), ("maximum", False))),
    (2, 33, 5, 6, 16, 1, (0, 0, 0, 0), (("subtract", True), ("divide", True), ("maximum", False))),
    (1, 3, 9, 8, 5, 3, (0, 1, 2, 1), (("maximum", False),)),
    (1, 64, 6, 6, 33, 1, (0, 0, 0, 0), (("multiply", True), ("add", True), ("maximum", False))),
]


@pytest.mark.parametrize("case", PRE_OPS, ids=[str(i) for i in range(len(PRE_OPS))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_pre_ops_applied_by_the_input_copy(case: tuple, at: str) -> None:
    """DenseNet's BN -> Relu -> Conv: the per-channel ops and Relu run in the JIT copy into the padded buffer."""
    n, c, h, wd, m, k, pads, ops = case
    rng = np.random.default_rng(c + m)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c, k, k)).astype(np.float32)
    pre, ref = [], x.astype(np.float64)
    for name, has in ops:
        v = rng.uniform(0.5, 2.0, c).astype(np.float32) if has else None
        pre.append((name, v))
        ref = getattr(np, name)(ref, 0.0 if v is None else v.astype(np.float64)[None, :, None, None])
    want = conv_f64(ref, w, 1, (1, 1), (1, 1), pads)
    geo = geometry(x, w, want, 1, (1, 1), (1, 1), pads)
    ex = ConvExecutor(geo, w, None, None, num_threads=2, alloc=guarded(at), pre_ops=pre, plain_input=True)
    assert (ex.copy is None) == ex.geo.planar  # a 3-channel input: planar, copied by numpy row by row
    for inp in (guarded_nhwc(x, at), x):  # the JIT copy; numpy's for an NCHW input
        np.testing.assert_allclose(ex.run(inp), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_depthwise_post_ops() -> None:
    """The depthwise kernel shares the post-ops: bias, scale, residual, Relu (the channel tail is 70 % 16)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 70, 7, 10)).astype(np.float32)
    w = rng.standard_normal((70, 1, 3, 3)).astype(np.float32)
    pads = (1, 1, 1, 1)
    base = conv_f64(x, w, 70, (1, 1), (1, 1), pads)
    scale, shift = rng.uniform(0.5, 2, 70), rng.standard_normal(70)
    res = rng.standard_normal(base.shape).astype(np.float32)
    want = np.maximum(base * scale[None, :, None, None] + shift[None, :, None, None] + res, 0)
    geo = geometry(x, w, base, 70, (1, 1), (1, 1), pads)
    assert geo.depthwise
    ex = ConvExecutor(geo, w, scale, shift, (PostOp("residual"), PostOp("relu")), num_threads=2,
                      alloc=lambda shape: guarded_array(shape, np.float32))
    np.testing.assert_allclose(ex.run(x, res), want, rtol=1e-4, atol=1e-4)


def test_conv_kernel_post_ops_in_order() -> None:
    """scale/shift folded into the weight, then residual, an extra per-channel multiply and every activation."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 19, 8, 9)).astype(np.float32)
    w = rng.standard_normal((21, 19, 3, 3)).astype(np.float32)
    pads = (1, 1, 1, 1)
    base = conv_f64(x, w, 1, (1, 1), (1, 1), pads)
    scale, shift = rng.uniform(0.5, 2, 21), rng.standard_normal(21)
    mul = rng.uniform(0.5, 2, 21)
    res = rng.standard_normal(base.shape).astype(np.float32)
    ops = (PostOp("residual"), PostOp("prelu", alpha=0.1), PostOp("mul_c", index=0), PostOp("hswish"),
           PostOp("clamp", lo=-0.2, hi=3.0), PostOp("relu"))
    y = base * scale[None, :, None, None] + shift[None, :, None, None] + res
    y = np.where(y < 0, 0.1 * y, y) * mul[None, :, None, None]
    y = y * np.clip(y + 3, 0, 6) / 6
    want = np.maximum(np.clip(y, -0.2, 3.0), 0)
    geo = geometry(x, w, base, 1, (1, 1), (1, 1), pads)
    ex = ConvExecutor(geo, w, scale, shift, ops, [mul], num_threads=2,
                      alloc=lambda shape: guarded_array(shape, np.float32))
    np.testing.assert_allclose(ex.run(x, res), want, rtol=1e-4, atol=1e-4)


def test_concurrent_calls_from_python_threads() -> None:
    """Two Python threads calling one executor: the one that finds the padded buffer busy gets its own."""
    import threading

    rng = np.random.default_rng(12)
    w = rng.standard_normal((24, 8, 3, 3)).astype(np.float32)
    xs = [rng.standard_normal((1, 8, 10, 10)).astype(np.float32) for _ in range(2)]
    wants = [conv_f64(x, w, 1, (1, 1), (1, 1), (1, 1, 1, 1)) for x in xs]
    ex = ConvExecutor(geometry(xs[0], w, wants[0], 1, (1, 1), (1, 1), (1, 1, 1, 1)), w, None, None, num_threads=1)
    bad: list[int] = []

    def work(i: int) -> None:
        for _ in range(200):
            if not np.allclose(ex.run(xs[i]), wants[i], rtol=1e-4, atol=1e-3):
                bad.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def guarded_nhwc(x: np.ndarray, at: str) -> np.ndarray:
    """``x`` [N, C, H, W] as an NCHW view of a guarded NHWC array: the kernel reads it in place."""
    buf = guarded_array((x.shape[0], *x.shape[2:], x.shape[1]), np.float32, at)
    buf[...] = x.transpose(0, 2, 3, 1)
    return buf.transpose(0, 3, 1, 2)


def guarded(at: str):  # type: ignore[no-untyped-def]
    return lambda shape: guarded_array(shape, np.float32, at)


def dynamic_nhw(model: onnx.ModelProto | bytes) -> bytes:
    """``model`` with its input's N, H, W and its outputs' dims but the channels made dim_params, value_info dropped
    (as an exporter with dynamic axes writes them)."""
    p = onnx.ModelProto()
    if isinstance(model, bytes):
        p.ParseFromString(model)
    else:
        p.CopyFrom(model)
    del p.graph.value_info[:]
    for axis, name in ((0, "N"), (2, "H"), (3, "W")):
        p.graph.input[0].type.tensor_type.shape.dim[axis].dim_param = name
    for vi in p.graph.output:
        for k, d in enumerate(vi.type.tensor_type.shape.dim):
            if k != 1:
                d.dim_param = f"{vi.name}{k}"
    return p.SerializeToString()


DEPTHWISE = [
    # n, c, h, w, k, stride, dilation, pads (t, l, b, r)
    (1, 1, 5, 7, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 3, 9, 9, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (2, 17, 11, 13, (3, 3), (2, 2), (1, 1), (0, 1, 2, 0)),
    (1, 33, 8, 31, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
    (1, 33, 7, 6, (3, 5), (1, 2), (2, 1), (2, 0, 1, 3)),
    (1, 70, 15, 29, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 144, 9, 11, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (1, 80, 5, 21, (3, 3), (1, 1), (1, 1), (0, 0, 0, 0)),
    (1, 16, 3, 3, (7, 7), (1, 1), (1, 1), (3, 3, 3, 3)),
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=[str(i) for i in range(len(DEPTHWISE))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_depthwise_reads_the_input_in_place(case: tuple, at: str) -> None:
    n, c, h, wd, k, s, d, pads = case
    rng = np.random.default_rng(c * h + wd)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((c, 1, *k)).astype(np.float32)
    shift = rng.standard_normal(c)
    res = rng.standard_normal(conv_f64(x, w, c, s, d, pads).shape).astype(np.float32)
    want = np.maximum(conv_f64(x, w, c, s, d, pads) + shift[None, :, None, None] + res, 0)
    geo = geometry(x, w, want, c, s, d, pads)
    assert geo.depthwise == (c > 1) and (geo.hp, geo.wp, geo.cp) == ((h, wd, c) if c > 1 else (geo.hp, geo.wp, c))
    ex = ConvExecutor(geo, w, None, shift, (PostOp("residual"), PostOp("relu")), num_threads=2, alloc=guarded(at))
    got = ex.run(guarded_nhwc(x, at), guarded_nhwc(res, at))
    assert ex.reorders == 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))
    # an NCHW input (a reorder into an unpadded buffer) gives the same numbers
    np.testing.assert_allclose(ex.run(x, res), want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))


def pool_f64(x: np.ndarray, mode: str, k: tuple[int, int], s: tuple[int, int], pads: tuple[int, int, int, int],
             ho: int, wo: int, include_pad: bool) -> np.ndarray:
    """Max or average over each window (pads ``pads``; windows may reach past them, as ceil_mode's do)."""
    n, c, h, w = x.shape
    pt, pl, pb, pr = pads
    y = np.zeros((n, c, ho, wo))
    for oh in range(ho):
        for ow in range(wo):
            r0, c0 = oh * s[0] - pt, ow * s[1] - pl
            rows = [r for r in range(r0, r0 + k[0]) if 0 <= r < h]
            cols = [q for q in range(c0, c0 + k[1]) if 0 <= q < w]
            win = x[:, :, rows][:, :, :, cols].astype(np.float64)
            if mode == "max":
                y[:, :, oh, ow] = win.max(axis=(2, 3))
            else:
                lo_r, hi_r = (-pt, h + pb) if include_pad else (0, h)
                lo_c, hi_c = (-pl, w + pr) if include_pad else (0, w)
                count = sum(lo_r <= r < hi_r for r in range(r0, r0 + k[0])) * \
                    sum(lo_c <= q < hi_c for q in range(c0, c0 + k[1]))
                y[:, :, oh, ow] = win.sum(axis=(2, 3)) / max(count, 1)
    return y


POOLS = [
    # mode, n, c, h, w, k, stride, pads, ceil, include_pad
    ("max", 1, 1, 7, 7, (3, 3), (2, 2), (1, 1, 1, 1), False, False),
    ("max", 2, 17, 9, 11, (3, 3), (2, 2), (0, 0, 0, 0), True, False),
    ("max", 1, 33, 13, 13, (2, 3), (1, 2), (0, 1, 1, 2), False, False),
    ("avg", 1, 3, 11, 9, (3, 3), (2, 2), (1, 1, 1, 1), False, True),
    ("avg", 1, 33, 11, 9, (3, 3), (2, 2), (1, 1, 1, 1), False, False),
    ("avg", 2, 17, 8, 7, (3, 2), (2, 2), (0, 1, 1, 0), True, True),
]


@pytest.mark.parametrize("case", POOLS, ids=[str(i) for i in range(len(POOLS))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_pools_skip_the_border(case: tuple, at: str) -> None:
    x, want, geo, divisor = pool_case(case)
    ex = ConvExecutor(geo, divisor, None, None, num_threads=2, alloc=guarded(at))
    np.testing.assert_allclose(ex.run(guarded_nhwc(x, at)), want, rtol=1e-5, atol=1e-5)
    assert ex.reorders == 0


def pool_case(case: tuple) -> tuple[np.ndarray, np.ndarray, ConvGeometry, np.ndarray]:
    """A POOLS case: its input, the float64 oracle's output, the walk's geometry and its divisors."""
    mode, n, c, h, wd, k, s, pads, ceil, include_pad = case
    pt, pl, pb, pr = pads

    def out(size: int, lo: int, hi: int, kk: int, ss: int) -> int:
        span = size + lo + hi - kk
        return (-(-span // ss) if ceil else span // ss) + 1

    ho, wo = out(h, pt, pb, k[0], s[0]), out(wd, pl, pr, k[1], s[1])
    x = np.random.default_rng(c + h).standard_normal((n, c, h, wd)).astype(np.float32)
    want = pool_f64(x, mode, k, s, pads, ho, wo, include_pad)
    geo = ConvGeometry(n, c, h, wd, c, c, *k, *s, 1, 1, pt, pl, ho, wo, mode=mode)
    divisor = reciprocal_counts(geo, pads, include_pad) if mode == "avg" else np.zeros(1, np.float32)
    return x, want, geo, divisor


POINTWISE = [
    # n, c, h, w, m
    (1, 1, 7, 7, 1),
    (1, 3, 13, 13, 17),
    (2, 33, 14, 14, 96),
    (1, 17, 5, 11, 33),
    (1, 64, 28, 28, 70),
    (3, 8, 1, 1, 130),
]


@pytest.mark.parametrize("case", POINTWISE, ids=[str(i) for i in range(len(POINTWISE))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_pointwise_is_a_matrix_over_the_pixels(case: tuple, at: str) -> None:
    n, c, h, wd, m = case
    rng = np.random.default_rng(c * m)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
    shift = rng.standard_normal(m)
    want = conv_f64(x, w, 1, (1, 1), (1, 1), (0, 0, 0, 0)) + shift[None, :, None, None]
    geo = geometry(x, w, want, 1, (1, 1), (1, 1), (0, 0, 0, 0))
    ex = ConvExecutor(geo, w, None, shift, num_threads=2, alloc=guarded(at))
    assert ex.kernel_geo.h * ex.kernel_geo.w == h * wd
    np.testing.assert_allclose(ex.run(guarded_nhwc(x, at)), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert ex.reorders == 0


def test_flat_pixels_cuts_a_small_map_into_even_rows() -> None:
    """7x7 (49 pixels) with 1280 output channels: one 49-pixel row per channel block, not 7 rows of 7."""
    geo = ConvGeometry(1, 320, 7, 7, 1280, 1, 1, 1, 1, 1, 1, 1, 0, 0, 7, 7)
    flat = flat_pixels(geo)
    assert (flat.h, flat.w, flat.ho, flat.wo) == (1, 49, 1, 49)
    # a padded or strided 1x1 keeps its geometry
    assert flat_pixels(ConvGeometry(1, 8, 7, 7, 8, 1, 1, 1, 2, 2, 1, 1, 0, 0, 4, 4)).h == 7


def lrn_f64(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX LRN in float64: the channel window [c - (size-1)//2, c + size-1 - (size-1)//2], clipped."""
    x = x.astype(np.float64)
    c = x.shape[1]
    lo = (size - 1) // 2
    hi = size - 1 - lo
    sq = np.stack([(x[:, max(0, ch - lo):min(c, ch + hi + 1)] ** 2).sum(axis=1) for ch in range(c)], axis=1)
    return x / (bias + alpha / size * sq) ** beta


LRNS = [
    # shape, size, alpha, beta, bias
    ((1, 96, 9, 7), 5, 1e-4, 0.75, 1.0),
    ((2, 17, 3, 5), 5, 5e-2, 0.75, 2.0),
    ((1, 33, 4, 3), 3, 1e-2, 0.6, 1.0),
    ((1, 1, 3, 3), 5, 1e-1, 0.75, 1.0),
    ((1, 3, 2, 5), 4, 1e-1, 1.3, 0.5),
    ((1, 40, 1, 1), 7, 2e-2, 0.75, 1.0),
]


@pytest.mark.parametrize("case", LRNS, ids=[str(i) for i in range(len(LRNS))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_lrn_kernel_guarded(case: tuple, at: str) -> None:
    from snippets_x86_64.lrn import LRNExecutor

    shape, size, alpha, beta, bias = case
    x = (3 * np.random.default_rng(shape[1]).standard_normal(shape)).astype(np.float32)
    want = lrn_f64(x, size, alpha, beta, bias)
    ex = LRNExecutor(shape, size, alpha, beta, bias, num_threads=2, alloc=guarded(at))
    np.testing.assert_allclose(ex.run(guarded_nhwc(x, at)), want, rtol=2e-5, atol=1e-6)
    assert ex.reorders == 0
    np.testing.assert_allclose(ex.run(x), want, rtol=2e-5, atol=1e-6)  # NCHW in: one reorder (unless C or HW is 1)
    assert ex.reorders == (0 if x.transpose(0, 2, 3, 1).flags.c_contiguous else 1)


def test_lrn_between_conv_and_pool_runs_as_a_primitive() -> None:
    """AlexNet's conv -> Relu -> LRN -> MaxPool: the LRN is a pooling-kind primitive on the NHWC layout, checked
    against onnxruntime (onnx's reference evaluator sums a different LRN window than the spec and onnxruntime)."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of the whole model")
    from onnx import TensorProto, helper, numpy_helper

    from snippets_core.runtime.compiled_model import compile_model

    rng = np.random.default_rng(4)
    w = rng.standard_normal((21, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("LRN", ["r"], ["n"], size=5, alpha=1e-3, beta=0.75, bias=1.0),
             helper.make_node("MaxPool", ["n"], ["y"], kernel_shape=[3, 3], strides=[2, 2])]
    g = helper.make_graph(nodes, "lrn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 13, 13])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 21, 6, 6])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((1, 3, 13, 13)).astype(np.float32)
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(cm({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    placed = {op: where for _, op, where in cm.placement()}
    assert "LRN" not in placed and all(sg.rt_info.get("SnippetsConvKernel") for sg in cm.subgraphs)
    assert any("lrn size 5" in sg.rt_info["SnippetsConvKernel"] for sg in cm.subgraphs)


# --- dynamic N, H, W: one kernel for every shape (conv_subgraph.DynamicConv) ---------------------------------------

def _built() -> int:
    return FUNCTION_CACHE.stats["miss"] + FUNCTION_CACHE.stats["disk"]


#: c, m, kernel, stride, dilation, pads (t, l, b, r), group: dense, 1x1, strided, padded, grouped, an RGB stem
DENSE = [
    (5, 18, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (33, 70, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    (17, 40, (3, 3), (2, 2), (1, 1), (1, 0, 2, 1), 1),
    (3, 20, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
    (4, 64, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (12, 6, (3, 3), (1, 1), (2, 1), (2, 1, 2, 1), 3),
    (64, 16, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1),
    (20, 130, (3, 1), (1, 3), (1, 1), (1, 0, 1, 2), 2),
]


def _case(case: tuple, n: int, h: int, wd: int, rng: np.random.Generator) -> tuple:
    c, m, k, s, d, pads, group = case
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c // group, *k)).astype(np.float32)
    return x, w, conv_f64(x, w, group, s, d, pads), group, s, d, pads


shapes = st.lists(st.tuples(st.integers(1, 3), st.integers(7, 30), st.integers(7, 40)), min_size=2, max_size=4)


@pytest.mark.parametrize("case", DENSE, ids=[str(i) for i in range(len(DENSE))])
@given(dims=shapes, at=st.sampled_from(["end", "start"]))
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_dense_conv_one_kernel_for_random_shapes(case: tuple, dims: list, at: str) -> None:
    rng = np.random.default_rng(hash(case) % 1000)
    x, w, want, group, s, d, pads = _case(case, *dims[0], rng)
    alloc = lambda shape: guarded_array(shape, np.float32, at)  # noqa: E731
    first = ConvExecutor(geometry(x, w, want, group, s, d, pads), w, None, None, num_threads=2, alloc=alloc,
                         plain_input=True, dynamic=True)
    built = _built()
    for n, h, wd in dims:
        x = rng.standard_normal((n, case[0], h, wd)).astype(np.float32)
        want = conv_f64(x, w, group, s, d, pads)
        ex = first.for_shape(geometry(x, w, want, group, s, d, pads))
        for inp in (x, guarded_nhwc(x, at)):
            np.testing.assert_allclose(ex.run(inp), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert _built() == built  # no kernel for a new N, H or W


#: c, kernel, stride, dilation, pads (t, l, b, r): depthwise (the register-reuse walk at stride 1, the FMA walk at
#: stride 2), a 5x5 with dilation
DW_DYNAMIC = [
    (33, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (144, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (17, (5, 5), (1, 1), (2, 2), (4, 3, 4, 5)),
    (16, (3, 3), (2, 2), (1, 1), (0, 1, 1, 0)),
]


@pytest.mark.parametrize("case", DW_DYNAMIC, ids=[str(i) for i in range(len(DW_DYNAMIC))])
@given(dims=shapes, at=st.sampled_from(["end", "start"]))
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_depthwise_dynamic_kernel_for_random_shapes(case: tuple, dims: list, at: str) -> None:
    """A dynamic depthwise walk: the interior columns' loop count and the kernel-row pitch from the table; a new
    shape builds a kernel only when its border taps (``dw_borders``) are new, never for N."""
    c, k, s, d, pads = case
    rng = np.random.default_rng(c)
    w = rng.standard_normal((c, 1, *k)).astype(np.float32)
    first = None
    for n, h, wd in dims:
        x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
        want = conv_f64(x, w, c, s, d, pads)
        geo = geometry(x, w, want, c, s, d, pads)
        if first is None:
            first = ConvExecutor(geo, w, None, None, num_threads=2, alloc=guarded(at), dynamic=True)
        built = _built()
        ex = first.for_shape(geo)
        seen = {kernel_key(e.kernel_geo, True) for e in (first, ex)}
        assert _built() - built <= len(seen) - 1
        for inp in (x, guarded_nhwc(x, at)):
            np.testing.assert_allclose(ex.run(inp), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        built = _built()
        first.for_shape(replace(geo, n=geo.n + 2))  # another batch: the same kernel
        assert _built() == built


@pytest.mark.parametrize("case", POOLS, ids=[str(i) for i in range(len(POOLS))])
@given(dims=shapes, at=st.sampled_from(["end", "start"]))
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_pool_dynamic_kernel_for_random_shapes(case: tuple, dims: list, at: str) -> None:
    """MaxPool/AvgPool (ceil_mode, count_include_pad) on runtime geometry over random N, H, W: a kernel only for
    new border taps."""
    first = None
    for n, h, wd in dims:
        x, want, geo, divisor = pool_case((case[0], n, case[2], h, wd, *case[5:]))
        built = _built()
        ex = ConvExecutor(geo, divisor, None, None, num_threads=2, alloc=guarded(at), dynamic=True, prepared=first)
        if first is not None:
            assert _built() - built <= int(kernel_key(geo, True) != kernel_key(first.geo, True))
        first = first or ex
        np.testing.assert_allclose(ex.run(guarded_nhwc(x, at)), want, rtol=1e-5, atol=1e-5)


def test_vectorized_row_variants_and_interior_columns_match_their_definitions() -> None:
    """``row_variant_index`` and ``interior_columns`` (numpy and closed form, made per new shape) against the taps of
    each output row and column, over sizes, kernels, strides, dilations, pads and ceil_mode's extra windows."""
    import itertools

    from snippets_x86_64.conv import interior_columns

    for h, k, s, d, p, extra in itertools.product(range(1, 12), (1, 2, 3, 5), (1, 2, 3), (1, 2), (0, 1, 2), (0, 1, 3)):
        span = h + p + extra - (k - 1) * d - 1
        for out in {span // s + 1, -(-span // s) + 1} if span >= 0 else ():
            g = ConvGeometry(1, 16, h, h, 16, 16, k, k, s, s, d, d, p, p, out, out, mode="max")
            taps = [g.row_taps(o) for o in range(out)]
            variants, index = g.row_variant_index()
            assert variants == list(dict.fromkeys(taps)) and [variants[i] for i in index] == taps
            inner = [o for o in range(out) if len(g.col_taps(o)) == k]
            assert interior_columns(g) == ((inner[0], inner[-1] + 1) if inner else (out, out))


@pytest.mark.parametrize("case", DW_DYNAMIC, ids=[str(i) for i in range(len(DW_DYNAMIC))])
@given(dims=shapes, at=st.sampled_from(["end", "start"]))
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_depthwise_kernel_with_every_sizes_borders(case: tuple, dims: list, at: str) -> None:
    """One depthwise kernel with the border code of all the shapes (``merge_borders``: the table picks each shape's
    bottom rows and right columns, ``RT_RIGHT``): no kernel after the first, each shape right."""
    c, k, s, d, pads = case
    rng = np.random.default_rng(c + 1)
    w = rng.standard_normal((c, 1, *k)).astype(np.float32)
    cases = []
    for n, h, wd in dims:
        x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
        want = conv_f64(x, w, c, s, d, pads)
        cases.append((x, want, geometry(x, w, want, c, s, d, pads)))
    borders = merge_borders([g for _, _, g in cases])
    first = ConvExecutor(cases[0][2], w, None, None, num_threads=2, alloc=guarded(at), dynamic=True, borders=borders)
    built = _built()
    for x, want, geo in cases:
        ex = first.for_shape(geo)
        for inp in (x, guarded_nhwc(x, at)):
            np.testing.assert_allclose(ex.run(inp), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert _built() == built


@pytest.mark.parametrize("case", POOLS, ids=[str(i) for i in range(len(POOLS))])
@given(dims=shapes, at=st.sampled_from(["end", "start"]))
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_pool_kernel_with_every_sizes_borders(case: tuple, dims: list, at: str) -> None:
    """MaxPool/AvgPool (ceil_mode, count_include_pad): one kernel with the border code of all the shapes."""
    cases = [pool_case((case[0], n, case[2], h, wd, *case[5:])) for n, h, wd in dims]
    borders = merge_borders([geo for _, _, geo, _ in cases])
    first = None
    for x, want, geo, divisor in cases:
        built = _built()
        ex = ConvExecutor(geo, divisor, None, None, num_threads=2, alloc=guarded(at), dynamic=True, prepared=first,
                          borders=borders)
        assert first is None or _built() == built
        first = first or ex
        np.testing.assert_allclose(ex.run(guarded_nhwc(x, at)), want, rtol=1e-5, atol=1e-5)


#: c, m, kernel, pads (t, l, b, r): an RGB stem (planar buffer), a padded 3x3, an asymmetric pad (ResNet's stem pads)
SHARED_BUFFER = [
    (3, 16, (7, 7), (3, 3, 3, 3)),
    (32, 20, (3, 3), (1, 1, 1, 1)),
    (16, 16, (3, 3), (0, 1, 2, 0)),
]


@pytest.mark.parametrize("pads", [(1, 1, 1, 1), (2, 0, 1, 3), (0, 2, 3, 1)])
def test_copy_kernel_rows_and_borders_for_alternating_shapes(pads: tuple) -> None:
    """The input copy works out each row's place from its index and the copy header (``copy_header``: no table per
    shape) and writes each row's left and right border itself (``PaddedBuffer.take`` rewrites only the top and bottom
    rows on a shape change): alternating shapes (N 1-3, both threads' chunks starting inside an image) on one shared
    buffer, each with large values where the next shape's border lies, give the float64 oracle's numbers, and the
    whole padded buffer holds the input inside and zeros around it (no row of another shape left in a border)."""
    c, m, k = 32, 16, (3, 3)
    rng = np.random.default_rng(sum(pads))
    w = rng.standard_normal((m, c, *k)).astype(np.float32)
    pt, pl, pb, pr = pads
    first = None
    for n, h, wd in [(1, 23, 19), (3, 11, 17), (2, 25, 21), (3, 11, 17), (1, 9, 30), (2, 25, 21), (1, 23, 19)]:
        x = (rng.standard_normal((n, c, h, wd)) * 1000).astype(np.float32)
        want = conv_f64(x, w, 1, (1, 1), (1, 1), pads)
        geo = geometry(x, w, want, 1, (1, 1), (1, 1), pads)
        if first is None:
            first = ConvExecutor(geo, w, None, None, num_threads=2, dynamic=True)
        ex = first.for_shape(geo)
        assert ex.copy is not None and len(ex.copy_chunks) == (2 if n * h * wd * c >= 1 << 14 else 1)
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)  # read by the JIT copy
        np.testing.assert_allclose(ex.run(nhwc), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        g = ex.geo
        padded = np.zeros((n, g.hp, g.wp, g.cp), np.float32)
        padded[:, pt:pt + h, pl:pl + wd, :c] = x.transpose(0, 2, 3, 1)
        np.testing.assert_array_equal(first.pad.storage[:padded.size].reshape(padded.shape), padded)


@pytest.mark.parametrize("case", SHARED_BUFFER, ids=[str(i) for i in range(len(SHARED_BUFFER))])
@pytest.mark.parametrize("at", ["end", "start", None])
def test_shapes_share_one_padded_buffer(case: tuple, at: str | None) -> None:
    """The executors of every shape of a primitive share its padded buffer (``PaddedBuffer``) and its dispatch calls
    (``SplitCall.run_chunks``): alternating shapes,
    each call's border is written again where another shape's interior (large values) lay, with and without the
    JIT copy (an NHWC input or an NCHW one), and no kernel built for any shape. Under guard pages (``at``) the
    buffer is remade at each size (the guard stays at its end), so the shapes here pair up by padded size; without
    (None) it only grows."""
    c, m, k, pads = case
    rng = np.random.default_rng(c + m)
    w = rng.standard_normal((m, c, *k)).astype(np.float32)
    dims = [(1, 12, 15), (1, 15, 12), (2, 21, 19), (1, 9, 30), (2, 19, 21), (1, 12, 15)]
    first, built, storages = None, _built(), set()
    for n, h, wd in dims:
        x = (rng.standard_normal((n, c, h, wd)) * 100).astype(np.float32)
        want = conv_f64(x, w, 1, (1, 1), (1, 1), pads)
        geo = geometry(x, w, want, 1, (1, 1), (1, 1), pads)
        if first is None:
            first = ConvExecutor(geo, w, None, None, num_threads=2, alloc=None if at is None else guarded(at),
                                 plain_input=True, dynamic=True)
            built = _built()
        ex = first.for_shape(geo)
        assert ex.pad is first.pad
        for inp in ((x,) if at is None else (guarded_nhwc(x, at), x)):
            np.testing.assert_allclose(ex.run(inp), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        storages.add(id(first.pad.storage))
        assert ex.call is first.calls[(ex.kernel.address, ex.call.n_words, len(ex.chunks))]
    assert _built() == built
    # the shapes share the dispatch calls (one per kernel and chunk count: 1 or 2 threads, the conv and the copy),
    # their chunks rewritten in place: no Job and no dispatch thunk per shape
    assert len(first.calls) <= 4
    if at is None:
        assert len(storages) <= 3  # grown, never remade at a smaller size
