"""The int8 FullyConnected on x86_64_avx512: each quantized-MatMul pattern TokenizeInt8FCSnippets takes (static QDQ,
dynamic, QLinearMatMul, MatMulInteger) as a one-layer ONNX file, run by ``compile_model`` and compared with
onnxruntime on the same file and, for f32 outputs, with the dequantized float64 math; odd N and K, M = 1, rows
split between 2 threads or N split (M = 1), a dynamic M; the executor under guard pages."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import snippets_core as sc
from snippets_core.tokenization.tokenize_int8_fc_snippets import is_int8_fc
from snippets_x86_64.cpu import cpu_features

ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.skipif("avx512_vnni" not in cpu_features(), reason="the int8 Brgemm needs AVX512_VNNI")

TARGET = "x86_64_avx512"
#: the convolutions here are small: below the target's thresholds, which keep them f32 by default
ALL_CONVS = {"tokenization": {"int8_conv_min_macs": 0, "int8_conv_min_channels": 1}}


def _weights(rng: np.random.Generator, k: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int8 W [K, N] (the full range, -128 included), per-column scales, an f32 bias."""
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    return w, (rng.uniform(0.5, 2.0, n) / 128).astype(np.float32), rng.standard_normal(n).astype(np.float32)


def _model(nodes: list, inits: list, x_type: int, x_shape: list, y_type: int) -> bytes:
    g = h.make_graph(nodes, "int8_fc", [h.make_tensor_value_info("x", x_type, x_shape)],
                     [h.make_tensor_value_info("y", y_type, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 19)]).SerializeToString()


def static_qdq(k: int, n: int, x_shape: list, signed: bool = False, zp: int = 3, bias: bool = True,
               seed: int = 0) -> tuple[bytes, dict]:
    """x -> Q -> DQ -> MatMul(DQ(W per column)) [-> Add bias], as onnxruntime's static QDQ quantizer writes it."""
    rng = np.random.default_rng(seed)
    w, ws, b = _weights(rng, k, n)
    qt = np.int8 if signed else np.uint8
    xs = np.float32(0.037)
    inits = [nh.from_array(w, "wq"), nh.from_array(ws, "ws"), nh.from_array(np.zeros(n, np.int8), "wz"),
             nh.from_array(xs, "xs"), nh.from_array(np.asarray(zp, qt), "xz"), nh.from_array(b, "b")]
    nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             h.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1),
             h.make_node("MatMul", ["xd", "wd"], ["y" if not bias else "mm"])]
    if bias:
        nodes.append(h.make_node("Add", ["mm", "b"], ["y"]))
    params = {"w": w, "ws": ws, "b": b if bias else np.zeros(n, np.float32), "xs": xs, "xz": zp, "signed": signed}
    return _model(nodes, inits, T.FLOAT, x_shape, T.FLOAT), params


def dynamic(k: int, n: int, x_shape: list, seed: int = 0) -> tuple[bytes, dict]:
    """DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(x_scale * w_scale) -> Add bias (quantize_dynamic)."""
    rng = np.random.default_rng(seed)
    w, ws, b = _weights(rng, k, n)
    inits = [nh.from_array(w, "wq"), nh.from_array(np.zeros((), np.int8), "wz"), nh.from_array(ws, "ws"),
             nh.from_array(b, "b")]
    nodes = [h.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             h.make_node("Mul", ["xs", "ws"], ["s"]),
             h.make_node("MatMulInteger", ["xq", "wq", "xz", "wz"], ["acc"]),
             h.make_node("Cast", ["acc"], ["accf"], to=T.FLOAT), h.make_node("Mul", ["accf", "s"], ["mm"]),
             h.make_node("Add", ["mm", "b"], ["y"])]
    return _model(nodes, inits, T.FLOAT, x_shape, T.FLOAT), {"w": w, "ws": ws, "b": b}


def qlinear(k: int, n: int, x_shape: list, signed: bool = False, seed: int = 0) -> tuple[bytes, dict]:
    """QLinearMatMul: u8/s8 x, per-column weight scales, an output of x's type."""
    rng = np.random.default_rng(seed)
    w, ws, _ = _weights(rng, k, n)
    qt = np.int8 if signed else np.uint8
    inits = [nh.from_array(np.float32(0.05), "xs"), nh.from_array(np.asarray(-5 if signed else 7, qt), "xz"),
             nh.from_array(w, "wq"), nh.from_array(ws, "ws"), nh.from_array(np.zeros(n, np.int8), "wz"),
             nh.from_array(np.float32(0.02 * math.sqrt(k)), "ys"), nh.from_array(np.asarray(3 if signed else 128, qt), "yz")]
    nodes = [h.make_node("QLinearMatMul", ["x", "xs", "xz", "wq", "ws", "wz", "ys", "yz"], ["y"])]
    return _model(nodes, inits, T.INT8 if signed else T.UINT8, x_shape, T.INT8 if signed else T.UINT8), {}


def integer(k: int, n: int, x_shape: list, signed: bool = True, seed: int = 0) -> tuple[bytes, dict]:
    """MatMulInteger with a constant zero point: the exact i32 sums."""
    rng = np.random.default_rng(seed)
    w, _, _ = _weights(rng, k, n)
    qt = np.int8 if signed else np.uint8
    inits = [nh.from_array(w, "wq"), nh.from_array(np.asarray(-3 if signed else 9, qt), "xz")]
    nodes = [h.make_node("MatMulInteger", ["x", "wq", "xz"], ["y"])]
    return _model(nodes, inits, T.INT8 if signed else T.UINT8, x_shape, T.INT32), {}


def _input(model: bytes, shape: tuple[int, ...], seed: int) -> np.ndarray:
    t = onnx.load_from_string(model).graph.input[0].type.tensor_type.elem_type
    rng = np.random.default_rng(seed)
    if t == T.FLOAT:
        return (rng.standard_normal(shape) * 3).astype(np.float32)
    dtype = np.uint8 if t == T.UINT8 else np.int8
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _ort(model: bytes, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _compile(model: bytes, threads: int = 1) -> sc.CompiledModel:  # type: ignore[name-defined]
    cm = sc.compile_model(model, TARGET, {"num_threads": threads, **ALL_CONVS})
    assert sum(is_int8_fc(sg) for sg in cm.subgraphs) == 1, cm.describe()
    assert "int8 FullyConnected on the VNNI Brgemm" in cm.describe()
    return cm


def _check_steps(got: np.ndarray, want: np.ndarray) -> None:
    """Integer outputs: at most 1% one step off, the rest exact."""
    assert got.dtype == want.dtype and got.shape == want.shape
    off = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert off.max(initial=0) <= 1 and (off > 0).sum() <= 0.01 * off.size, f"{(off > 0).sum()} of {off.size} off"


def _float64_static(x: np.ndarray, p: dict) -> np.ndarray:
    """The dequantized math in float64: (Q(x) - zp) * xs @ W * ws + b."""
    lo, hi = (-128, 127) if p["signed"] else (0, 255)
    q = np.clip(np.rint(x / p["xs"]) + p["xz"], lo, hi)
    xd = (q - p["xz"]) * np.float64(p["xs"])
    return xd @ (p["w"].astype(np.float64) * p["ws"].astype(np.float64)) + p["b"]


SHAPES = [(13, 37, [1, 13]), (64, 64, [5, 64]), (3, 17, [2, 7, 3]), (100, 130, [1, 1, 100]), (768, 200, [33, 768])]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("k", "n", "shape"), SHAPES)
@pytest.mark.parametrize("signed", [False, True])
def test_static_qdq_matches_onnxruntime_and_float64(k: int, n: int, shape: list, signed: bool, threads: int) -> None:
    model, p = static_qdq(k, n, shape, signed=signed, zp=-4 if signed else 130)
    cm = _compile(model, threads)
    x = _input(model, tuple(shape), 1)
    got, want = cm({"x": x})["y"], _ort(model, x)
    ref = _float64_static(x, p)
    # the int8 sums are exact; what is left is the f32 rounding of acc * scale + bias (ORT: of its f32 GEMM)
    tol = 1e-5 * np.abs(ref).max()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=tol)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=10 * tol)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("k", "n", "shape"), SHAPES)
def test_dynamic_matches_onnxruntime(k: int, n: int, shape: list, threads: int) -> None:
    model, _ = dynamic(k, n, shape)
    cm = _compile(model, threads)
    x = _input(model, tuple(shape), 2)
    got, want = cm({"x": x})["y"], _ort(model, x)
    # same integer sums, same f32 products; the bias is added by one FMA (one rounding, ORT: two)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("k", "n", "shape"), SHAPES)
@pytest.mark.parametrize("signed", [False, True])
def test_qlinear_matmul_matches_onnxruntime(k: int, n: int, shape: list, signed: bool, threads: int) -> None:
    model, _ = qlinear(k, n, shape, signed)
    cm = _compile(model, threads)
    x = _input(model, tuple(shape), 3)
    _check_steps(cm({"x": x})["y"], _ort(model, x))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("k", "n", "shape"), SHAPES)
@pytest.mark.parametrize("signed", [False, True])
def test_matmul_integer_is_exact(k: int, n: int, shape: list, signed: bool, threads: int) -> None:
    model, _ = integer(k, n, shape, signed)
    cm = _compile(model, threads)
    x = _input(model, tuple(shape), 4)
    got, want = cm({"x": x})["y"], _ort(model, x)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("threads", [1, 2])
def test_dynamic_rows_one_compiled_model_every_m(threads: int) -> None:
    """A symbolic M: one compiled model runs M = 1 (N split between threads), 5, 130 (rows split, a tail block)."""
    model, p = static_qdq(40, 150, ["batch", "seq", 40], zp=200)
    cm = _compile(model, threads)
    for m in (1, 5, 130, 3):
        x = _input(model, (1, m, 40), m)
        np.testing.assert_allclose(cm({"x": x})["y"], _float64_static(x, {**p, "signed": False}), rtol=1e-5,
                                   atol=1e-5 * 40 * 3)
    model, _ = qlinear(33, 70, ["m", 33])
    cm = _compile(model, threads)
    for m in (1, 2, 129):
        x = _input(model, (m, 33), m)
        _check_steps(cm({"x": x})["y"], _ort(model, x))


@pytest.mark.parametrize("at", ["start", "end"])
@pytest.mark.parametrize(("m", "k", "n", "threads"), [(1, 13, 37, 1), (7, 3, 17, 2), (1, 100, 130, 2), (33, 67, 65, 2)])
def test_executor_stays_inside_its_arrays(at: str, m: int, k: int, n: int, threads: int) -> None:
    """x, the output, the packed weight and the post-op vectors next to PROT_NONE pages: no fault, right result."""
    from snippets_x86_64.brgemm_copy_b_int8 import PackedB
    from snippets_x86_64.guarded import guarded_array, guarded_copy
    from snippets_x86_64.int8_fc_executor import int8_fc_executor

    model, p = static_qdq(k, n, [m, k], zp=17)
    cm = _compile(model, threads)
    (sg,) = [sg for sg in cm.subgraphs if is_int8_fc(sg)]
    ex = int8_fc_executor(sg, threads)
    pk = ex.packed
    ex.packed = PackedB(data=guarded_copy(pk.data, at), k=pk.k, n=pk.n, colsum=pk.colsum)
    ex.vectors = tuple(guarded_copy(v, at) for v in ex.vectors)
    x = guarded_copy(_input(model, (m, k), 5), at)
    out = guarded_array((m, n), np.float32, at)
    args = [x if i == ex.spec.a_index else None for i in range(len(sg.inputs))]
    (got,) = ex(args, [out])
    assert got is out
    np.testing.assert_allclose(out, _float64_static(x, {**p, "signed": False}), rtol=1e-5, atol=1e-4 * k)


def test_unquantized_and_rejected_matmuls_keep_their_paths() -> None:
    """A MatMul whose weight is quantized along K (not per output column) is no int8 FC, and says why."""
    rng = np.random.default_rng(0)
    w, _, _ = _weights(rng, 8, 16)
    inits = [nh.from_array(w, "wq"), nh.from_array(np.full(8, 0.01, np.float32), "ws"),
             nh.from_array(np.zeros(8, np.int8), "wz"), nh.from_array(np.float32(0.1), "xs"),
             nh.from_array(np.uint8(128), "xz")]
    nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             h.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             h.make_node("MatMul", ["xd", "wd"], ["y"])]
    model = _model(nodes, inits, T.FLOAT, [4, 8], T.FLOAT)
    cm = sc.compile_model(model, TARGET)
    assert not any(is_int8_fc(sg) for sg in cm.subgraphs)
    x = _input(model, (4, 8), 0)
    np.testing.assert_allclose(cm({"x": x})["y"], _ort(model, x), rtol=1e-5, atol=1e-5)


def test_int8_fc_can_be_disabled() -> None:
    """``disabled_passes: ["tokenize-int8-fc-snippets"]``: the quantized MatMul computes as before (f32, fused)."""
    model, p = static_qdq(24, 40, [3, 24])
    cm = sc.compile_model(model, TARGET, {"disabled_passes": ["tokenize-int8-fc-snippets"]})
    assert not any(is_int8_fc(sg) for sg in cm.subgraphs) and "VNNI" not in cm.describe()
    x = _input(model, (3, 24), 0)
    np.testing.assert_allclose(cm({"x": x})["y"], _float64_static(x, p), rtol=1e-5, atol=1e-4)


def static_qdq_conv(c: int, m: int, x_shape: list, seed: int = 0, **attrs: Any) -> tuple[bytes, dict]:
    """x -> Q -> DQ -> Conv(., DQ(W per output channel), bias), as onnxruntime's static QDQ quantizer writes it."""
    rng = np.random.default_rng(seed)
    k = attrs.pop("k", (3, 3))
    w = rng.integers(-128, 128, (m, c, *k)).astype(np.int8)
    ws = (rng.uniform(0.5, 2.0, m) / 128).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    xs, zp = np.float32(0.041), 121
    inits = [nh.from_array(w, "wq"), nh.from_array(ws, "ws"), nh.from_array(np.zeros(m, np.int8), "wz"),
             nh.from_array(xs, "xs"), nh.from_array(np.uint8(zp), "xz"), nh.from_array(b, "b")]
    nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             h.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             h.make_node("Conv", ["xd", "wd", "b"], ["y"], **attrs)]
    return _model(nodes, inits, T.FLOAT, x_shape, T.FLOAT), {"w": w, "ws": ws, "b": b, "xs": xs, "xz": zp, **attrs}


def _float64_conv(x: np.ndarray, p: dict) -> np.ndarray:
    """The dequantized convolution in float64, by onnx's reference evaluator on float64 tensors."""
    from onnx.reference import ReferenceEvaluator

    q = np.clip(np.rint(x / p["xs"]) + p["xz"], 0, 255)
    xd = (q - p["xz"]) * np.float64(p["xs"])
    wd = p["w"].astype(np.float64) * p["ws"].astype(np.float64).reshape(-1, 1, 1, 1)
    attrs = {a: p[a] for a in ("strides", "pads", "dilations") if a in p}
    node = h.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    g = h.make_graph([node], "c", [h.make_tensor_value_info(n, T.DOUBLE, None) for n in ("x", "w", "b")],
                     [h.make_tensor_value_info("y", T.DOUBLE, None)])
    ref = ReferenceEvaluator(h.make_model(g, opset_imports=[h.make_opsetid("", 19)]))
    return ref.run(None, {"x": xd, "w": wd, "b": p["b"].astype(np.float64)})[0]


CONVS = [(3, 8, [1, 3, 16, 16], {"pads": [1, 1, 1, 1]}),
         (5, 17, [2, 5, 9, 11], {"pads": [1, 0, 2, 1], "strides": [2, 2]}),
         (16, 33, [1, 16, 7, 7], {"k": (1, 1)}),
         (4, 20, [1, 4, 10, 10], {"dilations": [2, 2], "pads": [2, 2, 2, 2], "strides": [3, 2]})]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("c", "m", "shape", "attrs"), CONVS)
def test_static_qdq_conv_matches_onnxruntime_and_float64(c: int, m: int, shape: list, attrs: dict,
                                                         threads: int) -> None:
    model, p = static_qdq_conv(c, m, shape, **dict(attrs))
    cm = sc.compile_model(model, TARGET, {"num_threads": threads, **ALL_CONVS})
    assert "int8 convolution" in cm.describe(), cm.describe()
    x = _input(model, tuple(shape), 6)
    got, want = cm({"x": x})["y"], _ort(model, x)
    ref = _float64_conv(x, p)
    assert got.shape == ref.shape
    tol = 1e-5 * np.abs(ref).max()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=tol)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=10 * tol)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("c", "m", "shape", "attrs"), CONVS)
@pytest.mark.parametrize("signed", [False, True])
def test_qlinear_conv_matches_onnxruntime(c: int, m: int, shape: list, attrs: dict, signed: bool,
                                          threads: int) -> None:
    """QLinearConv with per-channel weight scales and an i32 bias: requantized, at most 1% one step off."""
    rng = np.random.default_rng(1)
    attrs = dict(attrs)
    k = attrs.pop("k", (3, 3))
    qt = np.int8 if signed else np.uint8
    w = rng.integers(-128, 128, (m, c, *k)).astype(np.int8)
    inits = [nh.from_array(np.float32(0.05), "xs"), nh.from_array(np.asarray(-5 if signed else 9, qt), "xz"),
             nh.from_array(w, "wq"), nh.from_array((rng.uniform(0.5, 2.0, m) / 128).astype(np.float32), "ws"),
             nh.from_array(np.zeros(m, np.int8), "wz"),
             nh.from_array(np.float32(0.03 * math.sqrt(c * k[0] * k[1])), "ys"),
             nh.from_array(np.asarray(2 if signed else 120, qt), "yz"),
             nh.from_array(rng.integers(-3000, 3000, m).astype(np.int32), "b")]
    nodes = [h.make_node("QLinearConv", ["x", "xs", "xz", "wq", "ws", "wz", "ys", "yz", "b"], ["y"], **attrs)]
    t = T.INT8 if signed else T.UINT8
    model = _model(nodes, inits, t, shape, t)
    cm = sc.compile_model(model, TARGET, {"num_threads": threads, **ALL_CONVS})
    assert "int8 convolution" in cm.describe(), cm.describe()
    x = _input(model, tuple(shape), 8)
    _check_steps(cm({"x": x})["y"], _ort(model, x))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("c", "m", "shape", "attrs"), CONVS)
def test_dynamic_conv_integer_matches_onnxruntime(c: int, m: int, shape: list, attrs: dict, threads: int) -> None:
    """DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul(x_scale * w_scale) -> Add bias (quantize_dynamic)."""
    rng = np.random.default_rng(2)
    attrs = dict(attrs)
    k = attrs.pop("k", (3, 3))
    inits = [nh.from_array(rng.integers(-128, 128, (m, c, *k)).astype(np.int8), "wq"),
             nh.from_array(np.zeros((), np.int8), "wz"), nh.from_array(np.float32(0.0123), "ws"),
             nh.from_array(rng.standard_normal((1, m, 1, 1)).astype(np.float32), "b")]
    nodes = [h.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             h.make_node("Mul", ["xs", "ws"], ["s"]),
             h.make_node("ConvInteger", ["xq", "wq", "xz", "wz"], ["acc"], **attrs),
             h.make_node("Cast", ["acc"], ["accf"], to=T.FLOAT), h.make_node("Mul", ["accf", "s"], ["cv"]),
             h.make_node("Add", ["cv", "b"], ["y"])]
    model = _model(nodes, inits, T.FLOAT, shape, T.FLOAT)
    cm = sc.compile_model(model, TARGET, {"num_threads": threads, **ALL_CONVS})
    assert "int8 convolution" in cm.describe() and "ConvInteger x" not in cm.describe(), cm.describe()
    x = _input(model, tuple(shape), 9)
    got, want = cm({"x": x})["y"], _ort(model, x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


def test_convolutions_below_the_thresholds_stay_f32() -> None:
    """Below the tokenization knobs' thresholds (multiply-adds, input channels; x86's defaults take every
    convolution since the JIT int8 conv beats the f32 one from a 3-channel stem on) the Conv is left out of the
    int8 Subgraphs, with the reason on the node, and the result is the same."""
    model, p = static_qdq_conv(3, 8, [1, 3, 16, 16], pads=[1, 1, 1, 1])
    assert "int8 convolution" in sc.compile_model(model, TARGET).describe()
    cm = sc.compile_model(model, TARGET, {"tokenization": {"int8_conv_min_macs": 10**9}})
    assert "int8 convolution" not in cm.describe(), cm.describe()
    x = _input(model, (1, 3, 16, 16), 6)
    np.testing.assert_allclose(cm({"x": x})["y"], _float64_conv(x, p), rtol=1e-4, atol=1e-4)
    with pytest.raises(Exception, match="int8_conv_min_macs"):
        sc.compile_model(model, TARGET, {"tokenization": {"int8_conv_min_macs": -1}})
