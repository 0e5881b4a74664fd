"""The JIT convolution kernel (snippets_x86_64.conv) against a float64 numpy convolution, under guard pages."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_x86_64.conv import ConvGeometry, PostOp
from snippets_x86_64.conv_executor import ConvExecutor
from snippets_x86_64.guarded import guarded_array

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
    ex = ConvExecutor(geo, w, None, None, num_threads=2, alloc=lambda shape: guarded_array(shape, np.float32, at))
    got = ex.run(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


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
