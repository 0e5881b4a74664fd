"""ConvTranspose as JIT phase convolutions (sub-pixel decomposition): a sweep of kernels, strides, pads,
output_padding, odd channel counts and post-ops against a float64 numpy ConvTranspose under guard pages; models built
with onnx.helper against onnxruntime; what the kernel does not cover runs on the reference with the reason shown."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.conv import PostOp
from snippets_x86_64.conv_transpose import ConvTransposeExecutor
from snippets_x86_64.guarded import guarded_array

pytestmark = pytest.mark.avx512


def conv_transpose_f64(x: np.ndarray, w: np.ndarray, s: tuple[int, int], pads: tuple[int, int, int, int],
                       opad: tuple[int, int] = (0, 0)) -> np.ndarray:
    """The oracle: scatter every input pixel times the kernel into the full output (float64), then crop the pads
    (top, left, bottom, right); output_padding adds rows and columns at the end."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    _, m, kh, kw = w.shape
    full = np.zeros((n, m, s[0] * (h - 1) + kh + opad[0], s[1] * (wd - 1) + kw + opad[1]))
    for i in range(kh):
        for j in range(kw):
            full[:, :, i:i + s[0] * (h - 1) + 1:s[0], j:j + s[1] * (wd - 1) + 1:s[1]] += \
                np.einsum("nchw,cm->nmhw", x, w[:, :, i, j])
    pt, pl, pb, pr = pads
    return full[:, :, pt:full.shape[2] - pb, pl:full.shape[3] - pr]


SWEEP = [
    # n, c, h, w, m, kernel, stride, pads (t, l, b, r), output_padding
    (1, 16, 5, 7, 8, (2, 2), (2, 2), (0, 0, 0, 0), (0, 0)),  # UNet's 2x2 up-convolution
    (2, 17, 6, 5, 33, (4, 4), (2, 2), (1, 1, 1, 1), (0, 0)),  # FCN/DCGAN's 4x4 stride 2
    (1, 3, 5, 5, 20, (3, 3), (2, 2), (1, 0, 1, 2), (1, 0)),
    (1, 33, 4, 9, 17, (3, 2), (3, 2), (0, 1, 2, 0), (2, 1)),
    (1, 8, 5, 5, 8, (3, 3), (1, 1), (1, 1, 1, 1), (0, 0)),
    (1, 1, 3, 4, 1, (5, 5), (2, 3), (2, 2, 2, 2), (1, 2)),
    (1, 64, 7, 7, 70, (2, 2), (2, 2), (0, 0, 0, 0), (0, 0)),
    (1, 5, 1, 1, 40, (4, 4), (2, 2), (1, 1, 1, 1), (0, 0)),  # outputs fewer than the stride's phases along none
    (1, 5, 1, 2, 9, (3, 3), (2, 2), (1, 1, 1, 1), (0, 0)),  # a 1-row output: a phase with no pixel
]


@pytest.mark.parametrize("case", SWEEP, ids=[str(i) for i in range(len(SWEEP))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_conv_transpose_sweep_guarded(case: tuple, at: str) -> None:
    n, c, h, wd, m, k, s, pads, opad = case
    rng = np.random.default_rng(c * m + k[0])
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((c, m, *k)).astype(np.float32)
    shift = rng.standard_normal(m)
    want = conv_transpose_f64(x, w, s, pads, opad) + shift[None, :, None, None]
    res = rng.standard_normal(want.shape).astype(np.float32)
    want = np.maximum(want + res, 0)
    alloc = lambda shape: guarded_array(shape, np.float32, at)  # noqa: E731
    ex = ConvTransposeExecutor((n, c, h, wd), w, s, pads[:2], want.shape[2:], None, shift,
                               (PostOp("residual"), PostOp("relu")), num_threads=2, alloc=alloc)
    xg = alloc((n, h, wd, c))
    xg[...] = x.transpose(0, 2, 3, 1)
    rg = alloc((n, *want.shape[2:], m))
    rg[...] = res.transpose(0, 2, 3, 1)
    for _ in range(2):  # the padded input copy is reused: its border stays zero
        got = ex.run(xg.transpose(0, 3, 1, 2), rg.transpose(0, 3, 1, 2))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))
    # NCHW arrays (a reorder into the input buffer; unpadded, the kernel reads NHWC inputs in place)
    np.testing.assert_allclose(ex.run(x, res), want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))
    assert ex.unpadded or not (k == s and pads == (0, 0, 0, 0) and opad == (0, 0))


def _model(c: int, h: int, w: int, m: int, attrs: dict, bias: bool = True, dynamic: bool = False,
           group: int = 1) -> bytes:
    rng = np.random.default_rng(c + m)
    k = attrs.pop("k")
    inputs = ["x", "w", "b"] if bias else ["x", "w"]
    nodes = [helper.make_node("ConvTranspose", inputs, ["t"], group=group, **attrs),
             helper.make_node("Relu", ["t"], ["y"])]
    inits = [numpy_helper.from_array((rng.standard_normal((c, m // group, *k)) * 0.2).astype(np.float32), "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b"))
    shape = ["N", c, h, w] if dynamic else [1, c, h, w]
    g = helper.make_graph(nodes, "ct", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


ONNX_CASES = [
    (16, 6, 7, 8, {"k": (2, 2), "strides": [2, 2]}),
    (17, 5, 6, 9, {"k": (4, 4), "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (8, 5, 5, 12, {"k": (3, 3), "strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    (8, 5, 6, 4, {"k": (3, 3), "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    (8, 5, 6, 4, {"k": (3, 3), "strides": [2, 2], "output_shape": [11, 13]}),  # (a cut output_shape: the IR and
    # onnxruntime place the cut differently, see docs/conv.md)
]


@pytest.mark.parametrize("case", ONNX_CASES, ids=[str(i) for i in range(len(ONNX_CASES))])
@pytest.mark.parametrize("threads", [1, 2])
def test_conv_transpose_model_matches_onnxruntime(case: tuple, threads: int) -> None:
    """ConvTranspose + bias + Relu as one primitive (the bias folded, Relu a post-op), on NHWC edges."""
    ort = pytest.importorskip("onnxruntime")
    c, h, w, m, attrs = case
    data = _model(c, h, w, m, dict(attrs))
    cm = compile_model(data, "x86_64_avx512", {"num_threads": threads})
    (sg,) = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsConvolution")]
    assert sg.rt_info["SnippetsConvKernel"].startswith("convtranspose")
    assert [op.type_name for op in sg.body_ops] == ["ConvolutionBackpropData", "Add", "Relu"]
    x = np.random.default_rng(2).standard_normal((1, c, h, w)).astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = cm({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert all(where == "x86_64_avx512" for _, _, where in cm.placement())


@pytest.mark.parametrize("attrs,group,why", [
    ({"k": (3, 3), "strides": [2, 2]}, 2, "its group is 2; the JIT ConvTranspose takes group 1"),
    ({"k": (3, 3), "strides": [2, 2], "dilations": [2, 2]}, 1, "its dilations are (2, 2)"),
    ({"k": (1, 1), "strides": [2, 2]}, 1, "its kernel (1, 1) is smaller than its strides (2, 2)"),
])
def test_uncovered_conv_transpose_runs_on_the_reference_with_the_reason(attrs: dict, group: int, why: str) -> None:
    data = _model(8, 4, 5, 8, dict(attrs), group=group)
    cm = compile_model(data, "x86_64_avx512")
    x = np.random.default_rng(3).standard_normal((1, 8, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(cm({"x": x})["y"], compile_model(data, "reference")({"x": x})["y"], rtol=1e-5,
                               atol=1e-5)
    assert why in cm.describe()


def _built() -> int:
    from snippets_x86_64.cache import FUNCTION_CACHE

    return FUNCTION_CACHE.stats["miss"] + FUNCTION_CACHE.stats["disk"]


@pytest.mark.parametrize("case", SWEEP, ids=[str(i) for i in range(len(SWEEP))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_dynamic_conv_transpose_at_random_shapes_guarded(case: tuple, at: str) -> None:
    """One executor on runtime row geometry (``dynamic``), then random input shapes (``for_shape``: new tables, the
    packed weights and phase kernels shared): each against float64 under guard pages, with a residual and Relu; no
    kernel built after the first shape."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    _, c, h0, w0, m, k, s, pads, opad = case
    rng = np.random.default_rng(c * m + k[0] + 1)
    w = rng.standard_normal((c, m, *k)).astype(np.float32)
    shift = rng.standard_normal(m)
    alloc = lambda shape: guarded_array(shape, np.float32, at)  # noqa: E731

    def out_hw(h: int, wd: int) -> tuple[int, int]:
        return (s[0] * (h - 1) + k[0] + opad[0] - pads[0] - pads[2], s[1] * (wd - 1) + k[1] + opad[1] - pads[1] - pads[3])

    first = ConvTransposeExecutor((1, c, 9, 9), w, s, pads[:2], out_hw(9, 9), None, shift,
                                  (PostOp("residual"), PostOp("relu")), num_threads=2, alloc=alloc, dynamic=True)
    before = _built()

    @given(st.integers(0, 3), st.integers(1, 12), st.integers(1, 12))
    @settings(max_examples=8, deadline=None)
    def shape(n: int, h: int, wd: int) -> None:
        x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
        want = conv_transpose_f64(x, w, s, pads, opad) + shift[None, :, None, None]
        res = rng.standard_normal(want.shape).astype(np.float32)
        want = np.maximum(want + res, 0)
        ex = first.for_shape((n, c, h, wd), pads[:2], want.shape[2:])
        xg = alloc((n, h, wd, c))
        xg[...] = x.transpose(0, 2, 3, 1)
        rg = alloc((n, *want.shape[2:], m))
        rg[...] = res.transpose(0, 2, 3, 1)
        got = ex.run(xg.transpose(0, 3, 1, 2), rg.transpose(0, 3, 1, 2))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max() if n else 1.0))

    shape()
    assert _built() == before


@pytest.mark.parametrize("case", ONNX_CASES[:4], ids=[str(i) for i in range(4)])
def test_dynamic_conv_transpose_model_matches_onnxruntime(case: tuple) -> None:
    """ConvTranspose + bias + Relu with dynamic N, H, W: the JIT phase convolutions at every shape (an empty batch
    too), no kernel built for a new shape; describe() says it runs on runtime row geometry."""
    ort = pytest.importorskip("onnxruntime")
    c, h, w, m, attrs = case
    data = _model(c, "H", "W", m, dict(attrs), dynamic=True)  # type: ignore[arg-type]
    cm = compile_model(data, "x86_64_avx512", {"num_threads": 2})
    (sg,) = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsConvolution")]
    assert "on runtime row geometry" in sg.rt_info["SnippetsConvKernel"]
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    before = None
    for shape in [(1, c, h, w), (2, c, 7, 3), (3, c, 1, 9), (0, c, 4, 4), (1, c, 12, 11)]:
        x = rng.standard_normal(shape).astype(np.float32)
        want = sess.run(None, {"x": x})[0]
        got = cm({"x": x})["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(np.abs(want).max(initial=1.0), 1.0))
        before = _built() if before is None else before
        assert _built() == before
    assert all(where == "x86_64_avx512" for _, _, where in cm.placement())
    assert "0 kernel(s) built after the first shape" in cm.describe()


def test_a_dynamic_output_shape_runs_on_the_reference_with_the_reason() -> None:
    data = _model(8, "H", "W", 8, {"k": (3, 3), "strides": [2, 2], "output_shape": [11, 13]},  # type: ignore[arg-type]
                  dynamic=True)
    cm = compile_model(data, "x86_64_avx512")
    x = np.random.default_rng(4).standard_normal((2, 8, 5, 6)).astype(np.float32)
    np.testing.assert_allclose(cm({"x": x})["y"], compile_model(data, "reference")({"x": x})["y"], rtol=1e-5,
                               atol=1e-5)
    assert "an output_shape with a dynamic input" in cm.describe()


def test_a_dynamic_unet_decoder_matches_onnxruntime() -> None:
    """bench/model_zoo.py's UNet decoder (ConvTranspose 2x2, 4x4 pad 1, 2x2, each with a 3x3 conv), narrowed to 16
    channels, with dynamic N, H, W: every step a JIT primitive, random shapes against onnxruntime, no kernel built."""
    import sys
    from pathlib import Path

    from hypothesis import given, settings
    from hypothesis import strategies as st

    sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
    from test_dynamic_mha import _model_zoo

    ort = pytest.importorskip("onnxruntime")
    proto = _model_zoo().unet_decoder(hw=6, channels=16).proto
    for vi in (proto.graph.input[0], proto.graph.output[0]):
        for axis, name in ((0, "N"), (2, "H"), (3, "W")):
            vi.type.tensor_type.shape.dim[axis].dim_param = f"{vi.name}{name}"
    del proto.graph.value_info[:]
    data = proto.SerializeToString()
    cm = compile_model(data, "x86_64_avx512", {"num_threads": 2})
    assert all(where == "x86_64_avx512" or where == "view" for _, _, where in cm.placement()), cm.describe()
    assert sum("ConvolutionBackpropData" in [op.type_name for op in sg.body_ops] for sg in cm.subgraphs) == 3
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    name = proto.graph.input[0].name
    cm({name: rng.standard_normal((1, 16, 6, 6)).astype(np.float32)})
    before = _built()

    @given(st.integers(1, 2), st.integers(2, 9), st.integers(2, 9))
    @settings(max_examples=6, deadline=None)
    def shape(n: int, h: int, w: int) -> None:
        x = rng.standard_normal((n, 16, h, w)).astype(np.float32)
        want = sess.run(None, {name: x})[0]
        np.testing.assert_allclose(next(iter(cm({name: x}).values())), want, rtol=1e-4,
                                   atol=1e-4 * np.abs(want).max())

    shape()
    assert _built() == before


def test_concurrent_calls_from_python_threads() -> None:
    """A call that finds the padded input copy in use pads its own: calls from several Python threads agree."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(5)
    w = rng.standard_normal((17, 9, 4, 4)).astype(np.float32)
    ex = ConvTransposeExecutor((1, 17, 12, 11), w, (2, 2), (1, 1), (24, 22), None, None, num_threads=2)
    xs = [rng.standard_normal((1, 17, 12, 11)).astype(np.float32) for _ in range(8)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: ex.run(x).copy(), xs * 4))
    for x, y in zip(xs * 4, got):
        want = conv_transpose_f64(x, w, (2, 2), (1, 1, 1, 1))
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
