"""The JIT int8 convolution (conv_int8.py) against a float64 numpy model of the quantized math, under guard pages.

The oracle: ``acc = sum (q - zp) * w`` over the window in int64 (the border is the zero point), then
``acc * x_scale * w_scale[m] + bias[m]``, the residual, Relu, and for a u8/s8 output ``rint(v / y_scale) + y_zp``
saturated, all in float64. The kernel's f32 output is within f32 rounding of it (the integer sums are exact); a
requantized output is the same integer but where v / y_scale lies within an f32 rounding of a tie (one step).
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from snippets_core.errors import InputError, UnsupportedByTarget
from snippets_x86_64.conv import PostOp
from snippets_x86_64.conv_int8 import QRESIDUAL, Int8ConvKernel, Int8ConvShape, channel_vector, compensation, \
    post_params, requant_params
from snippets_x86_64.guarded import guarded_array, guarded_copy


def _kernel_or_skip(geo: Int8ConvShape, w: np.ndarray, threads: int = 1) -> Int8ConvKernel:
    try:
        return Int8ConvKernel(geo, w, threads)
    except UnsupportedByTarget as e:
        pytest.skip(str(e))


def reference(q: np.ndarray, zp: int, w: np.ndarray, geo: Int8ConvShape) -> np.ndarray:
    """int64 ``sum (q - zp) * w`` per output [N, Ho, Wo, M], ``q`` [N, H, W, C] (the border counts as zp)."""
    g = geo
    qp = np.full((g.n, g.hp, g.wp, g.c), zp, np.int64)
    qp[:, g.pt : g.pt + g.h, g.pl : g.pl + g.w] = q
    qp -= zp
    out = np.zeros((g.n, g.ho, g.wo, g.m), np.int64)
    w64 = w.astype(np.int64)
    for i in range(g.kh):
        for j in range(g.kw):
            win = qp[:, i * g.dh : i * g.dh + (g.ho - 1) * g.sh + 1 : g.sh, j * g.dw : j * g.dw + (g.wo - 1) * g.sw + 1
                     : g.sw]
            for grp in range(g.group):
                xs = win[..., grp * g.cg : (grp + 1) * g.cg]
                ws = w64[grp * g.mg : (grp + 1) * g.mg, :, i, j]  # [Mg, Cg]
                out[..., grp * g.mg : (grp + 1) * g.mg] += np.einsum("nhwc,mc->nhwm", xs, ws)
    return out


def padded_input(q: np.ndarray, zp: int, geo: Int8ConvShape, at: str) -> np.ndarray:
    """The kernel's padded byte buffer (guarded): zero point border and channel padding."""
    g = geo
    xp = guarded_array((g.n, g.hp, g.wp, g.cp), np.uint8, at)
    xp[...] = zp
    for grp in range(g.group):
        xp[:, g.pt : g.pt + g.h, g.pl : g.pl + g.w, grp * g.cg4 : grp * g.cg4 + g.cg] = \
            q[..., grp * g.cg : (grp + 1) * g.cg]
    return xp


def run_case(geo: Int8ConvShape, seed: int, at: str = "end", threads: int = 1, y_scale: float = 0.05,
             y_zp: int = 7) -> None:
    rng = np.random.default_rng(seed)
    g = geo
    q = rng.integers(0, 256, (g.n, g.h, g.w, g.c)).astype(np.uint8)
    zp = int(rng.integers(0, 256))
    w = rng.integers(-128, 128, (g.m, g.cg, g.kh, g.kw)).astype(np.int8)
    x_scale = 0.02
    w_scale = rng.uniform(0.001, 0.01, g.m).astype(np.float32)
    bias = rng.standard_normal(g.m).astype(np.float32)
    res = rng.standard_normal((g.n, g.ho, g.wo, g.m)).astype(np.float32)
    qres = next((k for k in g.kinds if k in QRESIDUAL), None)  # the bytes of another int8 convolution's output
    if qres is not None:
        res = rng.integers(-128, 128, res.shape).astype(np.int8) if QRESIDUAL[qres] else \
            rng.integers(0, 256, res.shape).astype(np.uint8)
    k = _kernel_or_skip(g, w, threads)
    k.packed = guarded_copy(k.packed, at)
    k.table = guarded_copy(k.table, at)
    xp = padded_input(q, zp, g, at)
    comp = guarded_copy(compensation(w, zp, g), at)
    scale = guarded_copy(channel_vector(np.float32(x_scale) * w_scale, g, np.float32), at)
    bvec = guarded_copy(channel_vector(bias, g, np.float32), at)
    out_dtype = {"f32": np.float32, "u8": np.uint8, "s8": np.int8}[g.output]
    frame = guarded_array(g.out_shape, out_dtype, at)  # (a MaxPool's padded input: the border left alone)
    frame[...] = 77
    top, left = (0, 0) if g.out_frame is None else g.out_frame[2:]
    y = frame[:, top : top + g.ho, left : left + g.wo]
    resg = guarded_copy(res, at) if "residual" in g.kinds or qres is not None else None
    qp = guarded_copy(requant_params(y_scale, y_zp, g.output), at) if g.output != "f32" else None
    values: list = []
    for op in g.kinds:
        values.append((FQ_SCALE, -3.0, 40.0) if op == "fq" else (GATE_SCALE, 0.0, 255.0) if op == "qswish" else
                      rng.uniform(0.5, 2.0, g.m).astype(np.float32) if op == "mul_c" else
                      rng.uniform(-0.5, 0.5, g.m).astype(np.float32) if op == "prelu_c" else
                      rng.standard_normal(g.m).astype(np.float32) if op == "add_c" else
                      (RES_SCALE, -5 if QRESIDUAL[op] else 131) if op in QRESIDUAL else None)
    post = guarded_copy(post_params(g, values), at)
    k.run(xp, frame, comp, scale, bvec, resg, qp, post)
    if g.out_frame is not None:  # nothing written outside the output's rows and columns
        inner = np.zeros(frame.shape, bool)
        inner[:, top : top + g.ho, left : left + g.wo] = True
        assert np.all(frame[~inner] == 77)

    v = reference(q, zp, w, g).astype(np.float64) * (np.float64(np.float32(x_scale) * w_scale)) + bias
    slack = 0.0  # an fq may round a value within an f32 rounding of a tie the other way: one step, scaled after
    for post, p in zip(g.post_ops, values):
        op = post.kind
        if op == "residual":
            v = v + res
        elif op in QRESIDUAL:  # DequantizeLinear's f32 value
            v = v + (res.astype(np.int32) - p[1]).astype(np.float32) * np.float32(p[0])
        elif op == "relu":
            v = np.maximum(v, 0.0)
        elif op == "fq":
            v = np.clip(np.rint(v / p[0]), p[1], p[2]) * p[0]
            slack = p[0]
        elif op == "mul_c":
            v, slack = v * p, slack * float(p.max())
        elif op == "add_c":
            v = v + p
        elif op == "clamp":
            v = np.clip(v, post.lo, post.hi)
        elif op in ("prelu", "prelu_c"):
            v = np.where(v < 0, v * (post.alpha if op == "prelu" else p.astype(np.float64)), v)
        elif op == "hswish":
            v = v * np.clip(v + 3.0, 0.0, 6.0) / 6.0
        elif op == "sigmoid":
            v = 1.0 / (1.0 + np.exp(-v))
        elif op == "swish":
            v = v / (1.0 + np.exp(-post.alpha * v))
        else:  # qswish: the gate on its grid, one step of it off where the sigmoid lies at a tie
            gate = np.clip(np.rint(1.0 / (1.0 + np.exp(-post.alpha * v)) / p[0]), p[1], p[2]) * p[0]
            slack = max(slack, p[0] * float(np.abs(v).max()))
            v = v * gate
    tol = 1e-5 * max(1.0, float(np.abs(v).max()))
    if g.output == "f32" and slack:
        off = np.abs(y - v) > tol
        assert off.mean() <= 0.01 and float(np.abs(y - v).max()) <= slack + tol
        return
    if g.output == "f32":
        np.testing.assert_allclose(y, v, rtol=1e-5, atol=tol)
        return
    lo, hi = (0, 255) if g.output == "u8" else (-128, 127)
    want = np.clip(np.rint(v / y_scale) + y_zp, lo, hi)
    diff = np.abs(y.astype(np.int64) - want)
    assert diff.max() <= 1
    assert (diff > 0).mean() <= 0.01


#: the fq post-op's scale in the tests, and the qswish gate's (a sigmoid on a u8 grid, as onnxruntime's quantizer
#: gives it)
FQ_SCALE, GATE_SCALE = 0.125, 1.0 / 255
#: the scale of a quantized residual's grid
RES_SCALE = 0.0625

SWEEP = [
    # (c, m, k, stride, pad, dilation, h, w)
    (1, 16, 1, 1, 0, 1, 5, 7),
    (3, 32, 3, 1, 1, 1, 9, 11),
    (3, 64, 7, 2, 3, 1, 23, 21),
    (17, 17, 3, 1, 1, 1, 6, 13),
    (33, 40, 5, 2, 2, 1, 11, 9),
    (64, 64, 1, 1, 0, 1, 7, 30),
    (64, 64, 3, 1, 1, 1, 14, 14),
    (64, 80, 3, 2, 1, 1, 15, 15),
    (17, 33, 3, 1, 2, 2, 9, 10),
    (33, 130, 1, 2, 0, 1, 9, 9),
    (64, 256, 1, 1, 0, 1, 3, 31),
]


@pytest.mark.parametrize("c,m,k,s,p,d,h,w", SWEEP)
@pytest.mark.parametrize("output", ["f32", "u8"])
def test_int8_conv_against_float64(c: int, m: int, k: int, s: int, p: int, d: int, h: int, w: int,
                                   output: str) -> None:
    ho, wo = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    geo = Int8ConvShape(1, c, h, w, m, 1, k, k, s, s, d, d, p, p, ho, wo, output)
    run_case(geo, seed=c * 1000 + m + k)


@pytest.mark.parametrize("output,post_ops", [("f32", ("residual", "relu")), ("u8", ("relu",)),
                                             ("s8", ("residual",)), ("u8", ("residual", "relu"))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_post_ops_and_requantization_under_guard_pages(output: str, post_ops: tuple[str, ...], at: str) -> None:
    geo = Int8ConvShape(2, 33, 8, 9, 33, 1, 3, 3, 1, 1, 1, 1, 1, 1, 8, 9, output, post_ops)
    run_case(geo, seed=5, at=at, y_scale=0.2, y_zp=0 if output == "u8" else 3)


@pytest.mark.parametrize("post_ops", [("fq", "mul_c", "add_c", "fq"), ("fq", "residual", "fq", "relu"),
                                      ("mul_c", "add_c", "relu"), ("fq", "qresidual_u8", "relu"),
                                      ("mul_c", "qresidual_s8", "fq")])
@pytest.mark.parametrize("output", ["f32", "u8"])
@pytest.mark.parametrize("at", ["end", "start"])
def test_fused_quantize_and_channel_post_ops(post_ops: tuple[str, ...], output: str, at: str) -> None:
    """The Q->DQ steps, per-channel ops and residuals (f32, or the u8/s8 bytes of another int8 convolution,
    dequantized in the kernel) in the epilogue, 40 channels (a masked vector), under guard pages."""
    geo = Int8ConvShape(1, 32, 9, 13, 40, 1, 3, 3, 1, 1, 1, 1, 1, 1, 9, 13, output, post_ops)
    run_case(geo, seed=len(post_ops), at=at, y_scale=0.25, y_zp=100)


@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("m", [16, 40])
def test_the_output_written_into_a_larger_frame(at: str, m: int) -> None:
    """``out_frame``: the output rows written into the interior of a MaxPool's padded input (the work table's
    output offsets), the frame's border untouched, on one compiled kernel for both (``kernel_key``)."""
    geo = Int8ConvShape(2, 8, 9, 7, m, 1, 3, 3, 2, 2, 1, 1, 1, 1, 5, 4, "u8", ("fq",), out_frame=(7, 6, 1, 1))
    run_case(geo, seed=m, at=at, y_scale=0.25, y_zp=3)
    assert geo.kernel_key() == replace(geo, out_frame=None).kernel_key()


@pytest.mark.parametrize("post_ops", [
    (PostOp("clamp", lo=-1.0, hi=2.5), "hswish"), (PostOp("prelu", alpha=0.1), "sigmoid"),
    ("prelu_c", "mul_c", PostOp("swish", alpha=1.0)), ("fq", PostOp("swish", alpha=1.7), "add_c"),
    ("residual", "fq", PostOp("qswish", alpha=1.0), "fq"), (PostOp("qswish", alpha=0.5), "residual", "relu")])
@pytest.mark.parametrize("output", ["f32", "u8"])
@pytest.mark.parametrize("m", [16, 40, 64])
def test_any_f32_conv_chain_with_qdq_steps_between(post_ops: tuple, output: str, m: int) -> None:
    """The f32 conv's eltwise post-ops (conv.py's emitter) run in the int8 epilogue, with fq steps and a swish whose
    gate is requantized between them, on 1, 3 and 4 output vectors (4 free registers for the swish gate)."""
    geo = Int8ConvShape(1, 24, 7, 30, m, 1, 3, 3, 1, 1, 1, 1, 1, 1, 7, 30, output, post_ops)
    run_case(geo, seed=m + len(post_ops), at="start", y_scale=0.25, y_zp=100)


def _f32_quantize(v: np.ndarray, scale: float, lo: float, hi: float) -> np.ndarray:
    """QuantizeLinear as the operator defines it (onnxruntime's): ``x / scale`` in float32, then half to even,
    saturated (``lo``, ``hi``: the grid's range less the zero point)."""
    q = np.float32(v) / np.float32(scale)
    return np.clip(np.rint(q), lo, hi)


@pytest.mark.parametrize("ratio", [2.0, 4.0, 6.0, 10.0, 12.0])
@pytest.mark.parametrize("output,post", [("u8", ()), ("s8", ()), ("f32", ("fq",)), ("u8", ("fq",))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_requantization_rounds_ties_as_quantize_linear(ratio: float, output: str, post: tuple, at: str) -> None:
    """Values placed exactly on ties (and within an ulp of them): a 1x1 conv of one input channel whose
    dequantized f32 is ``RN(acc * scale)`` (one FMA with a zero bias: numpy's float32 product), requantized on a
    grid ``ratio`` times the scale (``acc / ratio`` lands on .5 for many ``acc``). The kernel divides as
    QuantizeLinear does (correctly rounded ``x / y_scale``, not ``x * (1 / y_scale)``): every output equals the
    float32 oracle's, no step off."""
    m, h, w = 48, 5, 37
    geo = Int8ConvShape(1, 1, h, w, m, 1, 1, 1, 1, 1, 1, 1, 0, 0, h, w, output, post)
    rng = np.random.default_rng(int(ratio * 10) + len(post))
    q = rng.integers(0, 256, (1, h, w, 1)).astype(np.uint8)
    zp = 128
    wt = rng.integers(-128, 128, (m, 1, 1, 1)).astype(np.int8)
    wt[0] = 1  # channel 0's accumulators are every integer of the input range: every residue hits the ties
    scale = rng.uniform(0.001, 0.01, m).astype(np.float32)  # full mantissas: the products are rounded
    k = _kernel_or_skip(geo, wt)
    k.packed, k.table = guarded_copy(k.packed, at), guarded_copy(k.table, at)
    acc = (q.astype(np.int64) - zp) * wt[:, 0, 0, 0].astype(np.int64)  # [1, h, w, m]
    v = acc.astype(np.float32) * scale  # RN(acc * scale): exact integers times f32, one rounding
    # one grid for all channels: ratio times the first channel's scale (exact ties there, near ties elsewhere)
    step = float(np.float32(ratio) * scale[0])
    fq_lo, fq_hi = -100.0, 100.0
    values = [(step, fq_lo, fq_hi)] if post else []
    y_scale, y_zp = (step if not post else step * 2.0), (3 if output == "u8" else -2)
    out_dtype = {"f32": np.float32, "u8": np.uint8, "s8": np.int8}[output]
    y = guarded_array((1, h, w, m), out_dtype, at)
    vec = channel_vector(scale, geo, np.float32)
    qp = guarded_copy(requant_params(y_scale, y_zp, output), at) if output != "f32" else None
    k.run(padded_input(q, zp, geo, at), y, guarded_copy(compensation(wt, zp, geo), at), guarded_copy(vec, at),
          guarded_copy(np.zeros_like(vec), at), None, qp, guarded_copy(post_params(geo, values), at))
    if post:
        v = (_f32_quantize(v, step, fq_lo, fq_hi) * np.float32(step)).astype(np.float32)
    if output == "f32":
        np.testing.assert_array_equal(y, v)
        return
    lo, hi = (0, 255) if output == "u8" else (-128, 127)
    want = _f32_quantize(v, y_scale, lo - y_zp, hi - y_zp) + y_zp
    ties = np.abs(np.float32(v[..., 0]) / np.float32(y_scale) % 1 - 0.5) == 0
    assert ties.sum() >= 5, "the test must place values on ties"
    np.testing.assert_array_equal(y.astype(np.int64), want.astype(np.int64))


#: shape-agnostic kernels' channels, taps and post-ops: (c, m, k, stride, pad, dilation, output, post-ops)
DYNAMIC = [(3, 32, 3, 2, 1, 1, "u8", ("relu",)), (17, 40, 3, 1, 1, 2, "f32", ("residual", "fq")),
           (64, 64, 1, 1, 0, 1, "s8", ()), (24, 130, 5, 1, 2, 1, "u8", (PostOp("qswish", alpha=1.0),))]


@settings(max_examples=int(os.environ.get("SNIPPETS_RANDOM_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(DYNAMIC))), st.integers(1, 3), st.integers(1, 40), st.integers(1, 70),
       st.sampled_from(["end", "start"]), st.integers(0, 2**31 - 1))
def test_one_dynamic_kernel_serves_every_shape(which: int, n: int, h: int, w: int, at: str, seed: int) -> None:
    """A shape-agnostic kernel (the row pitch and the pixel blocks from the work table) on random N, H, W against
    the float64 oracle under guard pages: the first shape of each channel set builds it, every other shape builds
    nothing (its table only)."""
    from snippets_x86_64.cache import FUNCTION_CACHE

    c, m, k, s, p, d, output, post = DYNAMIC[which]
    ho, wo = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    assume(ho > 0 and wo > 0)
    stand_in = Int8ConvShape(1, c, 9, 9, m, 1, k, k, s, s, d, d, p, p, (9 + 2 * p - d * (k - 1) - 1) // s + 1,
                             (9 + 2 * p - d * (k - 1) - 1) // s + 1, output, post, dynamic=True)
    _kernel_or_skip(stand_in, np.zeros((m, c, k, k), np.int8))  # the kernel, built at "compile time"
    built = FUNCTION_CACHE.stats["miss"]
    geo = Int8ConvShape(n, c, h, w, m, 1, k, k, s, s, d, d, p, p, ho, wo, output, post, dynamic=True)
    run_case(geo, seed=seed, at=at, y_scale=0.25, y_zp=3)
    assert FUNCTION_CACHE.stats["miss"] == built, "a new N, H, W built a kernel"


@pytest.mark.parametrize("group,c,m", [(2, 8, 32), (4, 16, 20), (3, 6, 9)])
def test_groups(group: int, c: int, m: int) -> None:
    geo = Int8ConvShape(1, c, 10, 10, m, group, 3, 3, 1, 1, 1, 1, 1, 1, 10, 10)
    run_case(geo, seed=group)


def test_two_threads_split_the_items() -> None:
    geo = Int8ConvShape(1, 64, 28, 28, 64, 1, 3, 3, 1, 1, 1, 1, 1, 1, 28, 28, "u8", ("relu",))
    run_case(geo, seed=11, threads=2)


def test_rectangular_kernels_and_strides() -> None:
    geo = Int8ConvShape(1, 20, 12, 17, 24, 1, 1, 5, 2, 3, 1, 1, 0, 2, 6, 6)
    run_case(geo, seed=3)


def test_bad_input_is_a_typed_error() -> None:
    with pytest.raises(InputError, match="groups"):
        Int8ConvShape(1, 6, 4, 4, 8, 4, 1, 1, 1, 1, 1, 1, 0, 0, 4, 4)
    with pytest.raises(InputError, match="output"):
        Int8ConvShape(1, 4, 4, 4, 8, 1, 1, 1, 1, 1, 1, 1, 0, 0, 4, 4, "f16")
    with pytest.raises(InputError, match="post-ops"):
        Int8ConvShape(1, 4, 4, 4, 8, 1, 1, 1, 1, 1, 1, 1, 0, 0, 4, 4, "f32", ("gelu",))
    with pytest.raises(InputError, match="positive"):
        requant_params(0.0, 0, "u8")
    fq = Int8ConvShape(1, 4, 4, 4, 8, 1, 1, 1, 1, 1, 1, 1, 0, 0, 4, 4, "f32", ("fq",))
    with pytest.raises(InputError, match="fq"):
        post_params(fq, [(0.0, 0, 255)])
    with pytest.raises(InputError, match="post-op parameters"):
        post_params(fq, [])
    geo = Int8ConvShape(1, 4, 4, 4, 8, 1, 1, 1, 1, 1, 1, 1, 0, 0, 4, 4)
    with pytest.raises(InputError, match="weight"):
        Int8ConvKernel(geo, np.zeros((8, 4, 1, 1), np.float32))
    k = _kernel_or_skip(geo, np.zeros((8, 4, 1, 1), np.int8))
    vec = np.zeros(16, np.float32)
    with pytest.raises(InputError, match="xp"):
        k.run(np.zeros((1, 4, 4, 3), np.uint8), np.zeros((1, 4, 4, 8), np.float32), np.zeros(16, np.int32), vec, vec)


@pytest.mark.parametrize("c,signed", [(3, False), (17, True), (33, False), (64, True)])
@pytest.mark.parametrize("dynamic", [False, True])
def test_the_pixel_quantizer_writes_the_padded_interior_only(c: int, signed: bool, dynamic: bool) -> None:
    """quantize_pixels_function: NHWC f32 rows into a padded byte buffer (pixel pitch cp > c), as QuantizeLinear
    (round half to even, saturation), the bytes past the channels and outside the rows untouched; guard pages.
    ``dynamic``: the width-agnostic function, the width in the args."""
    import ctypes

    from snippets_x86_64.quantize_int8 import quantize_params, quantize_pixels_function
    from snippets_x86_64.reorder import run_split

    n, h, w, cp, scale, zp = 2, 3, 5, -(-c // 4) * 4 + 4, 0.05, (-3 if signed else 130)
    rng = np.random.default_rng(c)
    x = guarded_copy((rng.standard_normal((n, h, w, c)) * 5).astype(np.float32))
    x.reshape(-1)[:4] = (0.025, -0.075, 100.0, -100.0)  # ties (to even) and both saturations
    dst = guarded_array((n, h + 2, w + 1, cp), np.uint8, "end")
    dst[...] = 7
    table = guarded_copy(np.asarray([((i * (h + 2) + 1 + r) * (w + 1) + 1) * cp for i in range(n) for r in range(h)],
                                    np.int64))
    params = guarded_copy(quantize_params(scale, zp, signed))
    try:
        fn = quantize_pixels_function(None if dynamic else w, c, cp)
    except UnsupportedByTarget as e:
        pytest.skip(str(e))
    block = (ctypes.c_uint64 * 5)(x.ctypes.data, dst.ctypes.data, table.ctypes.data, params.ctypes.data, w)
    run_split(fn, ctypes.addressof(block), [(0, n * h)])
    lo, hi = (-128, 127) if signed else (0, 255)
    want = np.clip(np.rint(x.astype(np.float32) / np.float32(scale)) + zp, lo, hi).astype(np.int64)
    got = dst[:, 1 : h + 1, 1 : w + 1, :c].view(np.int8 if signed else np.uint8).astype(np.int64)
    np.testing.assert_array_equal(got, want)
    outside = np.ones(dst.shape, bool)
    outside[:, 1 : h + 1, 1 : w + 1, :c] = False
    assert (dst[outside] == 7).all()


@pytest.mark.parametrize("c,w,signed", [(1, 16, False), (3, 37, False), (3, 64, True), (4, 5, True), (2, 33, False)])
@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("dynamic,packed", [(False, False), (True, False), (False, True)])
def test_the_planar_quantizer_reads_nchw(c: int, w: int, signed: bool, at: str, dynamic: bool, packed: bool) -> None:
    """quantize_planes_function: an NCHW f32 stem input (1..4 planes) into the padded NHWC byte buffer of 4 bytes a
    pixel, as QuantizeLinear (half to even, saturation; an s8 grid stored +128 as the executor does), against
    numpy in float64; the bytes outside the rows untouched, the padded channel 0; guard pages either side.
    ``dynamic``: the size-agnostic function, the sizes in the args (``planes_args``); ``packed``: pixels of c
    bytes (the packed stem)."""
    import ctypes

    from snippets_x86_64.quantize_int8 import planes_args, quantize_params, quantize_planes_function
    from snippets_x86_64.reorder import run_split

    n, h, scale, zp = 2, 3, 0.05, (-3 if signed else 130)
    rng = np.random.default_rng(c * w)
    x = guarded_copy((rng.standard_normal((n, c, h, w)) * 5).astype(np.float32), at)
    x.reshape(-1)[:4] = (0.025, -0.075, 100.0, -100.0)  # ties (to even) and both saturations
    cp = c if packed else 4
    dst = guarded_array((n, h + 2, w + 1, cp), np.uint8, at)
    dst[...] = 7
    table = guarded_copy(np.asarray([(((i * c) * h + r) * w * 4, ((i * (h + 2) + 1 + r) * (w + 1) + 1) * cp)
                                     for i in range(n) for r in range(h)], np.int64), at)
    params = quantize_params(scale, zp, signed)
    params.view(np.int32)[3] = zp + (128 if signed else 0)
    params = guarded_copy(params, at)
    try:
        fn = quantize_planes_function(*((None, c, None) if dynamic else (w, c, h * w)), packed)
    except UnsupportedByTarget as e:
        pytest.skip(str(e))
    block = (ctypes.c_uint64 * 7)(x.ctypes.data, dst.ctypes.data, table.ctypes.data, params.ctypes.data,
                                  *planes_args(w, h * w))
    run_split(fn, ctypes.addressof(block), [(0, 1), (1, n * h - 1)])
    lo, hi = (-128, 127) if signed else (0, 255)
    # the quotient in f32 as QuantizeLinear defines it (exact in float64 after that)
    q = np.clip(np.rint((x / np.float32(scale)).astype(np.float64)) + zp, lo, hi).astype(np.int64) + \
        (128 if signed else 0)
    inner = dst[:, 1 : h + 1, 1 : w + 1].astype(np.int64)
    np.testing.assert_array_equal(inner[..., :c], q.transpose(0, 2, 3, 1))
    assert (inner[..., c:] == 0).all()
    outside = np.ones(dst.shape, bool)
    outside[:, 1 : h + 1, 1 : w + 1] = False
    assert (dst[outside] == 7).all()
    with pytest.raises(InputError, match="1..4 channels"):
        quantize_planes_function(w, 5, h * w)


def test_a_relu_before_a_grid_folds_into_its_clamp() -> None:
    """``fold_relu``: a Relu that a Q->DQ pair (or the requantization) follows becomes that grid's clamp from 0; the
    identity it relies on holds on float32 values around every tie, zeros of both signs included."""
    from snippets_x86_64.int8_conv_executor import fold_relu

    ops = (PostOp("relu"), PostOp("fq"), PostOp("mul_c"), PostOp("relu"))
    got, values, last = fold_relu(ops, [None, (0.5, -3.0, 200.0), np.ones(4, np.float32), None], True)
    assert [op.kind for op in got] == ["fq", "mul_c"] and values[0] == (0.5, 0.0, 200.0) and last
    got, _, last = fold_relu(ops, [None, (0.5, -3.0, 200.0), None, None], False)
    assert [op.kind for op in got] == ["fq", "mul_c", "relu"] and not last
    s = np.float32(0.0371)
    ties = (np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)) * s
    x = np.concatenate([np.nextafter(ties, -np.inf), ties, np.nextafter(ties, np.inf), [np.float32(-0.0), 0]])
    for lo, hi in ((-3.0, 200.0), (0.0, 255.0), (-128.0, 127.0)):
        relu_first = np.clip(np.rint(np.maximum(x, np.float32(0)) / s), lo, hi)
        np.testing.assert_array_equal(relu_first, np.clip(np.rint(x / s), max(lo, 0.0), hi))


@pytest.mark.parametrize("c,m,k,s,p,h,w", [(3, 64, 7, 2, 3, 23, 21), (1, 16, 3, 1, 1, 9, 11), (2, 40, 5, 2, 2, 11, 9),
                                           (3, 32, 7, 2, 3, 30, 31), (3, 17, 5, 1, 0, 8, 12)])
@pytest.mark.parametrize("output", ["f32", "u8"])
@pytest.mark.parametrize("at", ["end", "start"])
def test_a_stem_with_packed_taps_against_float64(c: int, m: int, k: int, s: int, p: int, h: int, w: int, output: str,
                                                 at: str) -> None:
    """``packed``: pixels of c bytes, a kernel row's k * c bytes walked as ceil(k c / 4) VNNI groups (the last one
    reading up to 3 bytes past the window, inside the buffer: one more pixel of border), under guard pages."""
    from snippets_x86_64.int8_conv_executor import packs_taps

    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    geo = Int8ConvShape(2, c, h, w, m, 1, k, k, s, s, 1, 1, p, p, ho, wo, output, ("fq",), packed=True)
    assert geo.cp == c and geo.tap_groups == -(-k * c // 4) and packs_taps(c, k, 1)
    run_case(geo, seed=c + k + m, at=at)
    with pytest.raises(InputError, match="packed taps"):
        replace(geo, dw=2)
