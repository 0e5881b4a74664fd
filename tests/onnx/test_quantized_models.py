"""Real quantized models: a small BERT-like encoder and a small CNN, quantized here with
``onnxruntime.quantization`` (static QDQ with per-channel weights and a calibration reader on random data, and
dynamic quantization), run end to end on reference and x86_64_avx512 and compared with onnxruntime on the same
files: at most 1% of the outputs one quantization step off, the rest exact (issue 13's tolerance).

onnxruntime is the oracle with graph optimizations at ``ORT_ENABLE_BASIC``: it runs the file's ops as ONNX
defines them. At its default level it also rewrites QDQ pairs into its own int8 kernels (com.microsoft
QLinear* ops with their own intermediate rounding), whose results differ from its basic level by more than
a step; docs/quantization.md gives the numbers.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import snippets_core as sc
from snippets_core.errors import UnsupportedOpError
from snippets_core.plugins.targets import load_target, target_names

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

N_INPUTS = 4
#: the CNNs' convolutions are small: below x86's thresholds, which keep them f32; here they run int8 too
# every conv as int8, and the attention MatMuls as int8 batched MatMuls (int8_matmul is off by default)
ALL_CONVS = {"tokenization": {"int8_conv_min_macs": 0, "int8_conv_min_channels": 1, "int8_matmul": True}}


def _w(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float = 0.2) -> onnx.TensorProto:
    return nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _cnn(rng: np.random.Generator) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """Conv-Relu-Conv + residual Add-Relu, global pooling, a FullyConnected head."""
    inits = [_w(rng, "w1", (8, 3, 3, 3)), _w(rng, "b1", (8,), 0.1), _w(rng, "w2", (8, 8, 3, 3), 0.1),
             _w(rng, "b2", (8,), 0.1), _w(rng, "fc", (8, 10)), _w(rng, "fcb", (10,), 0.1),
             nh.from_array(np.asarray([1, 8], np.int64), "flat")]
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             h.make_node("Add", ["c2", "r1"], ["s"]),
             h.make_node("Relu", ["s"], ["r2"]), h.make_node("GlobalAveragePool", ["r2"], ["p"]),
             h.make_node("Reshape", ["p", "flat"], ["f"]), h.make_node("MatMul", ["f", "fc"], ["m"]),
             h.make_node("Add", ["m", "fcb"], ["y"])]
    shape = (1, 3, 16, 16)
    g = h.make_graph(nodes, "cnn", [h.make_tensor_value_info("x", T.FLOAT, shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, (1, 10))], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), shape


def _encoder(rng: np.random.Generator, s: int = 16, d: int = 32,
             heads: int = 2) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """One BERT-like layer: Q/K/V projections, 2-head attention, output projection + residual, LayerNorm,
    a Relu FFN + residual."""
    dh = d // heads
    inits = [_w(rng, n, (d, d)) for n in ("wq", "wk", "wv", "wo")]
    inits += [_w(rng, "w1", (d, 2 * d)), _w(rng, "w2", (2 * d, d)), _w(rng, "bq", (d,), 0.1),
              nh.from_array(np.ones(d, np.float32), "g"), nh.from_array(np.zeros(d, np.float32), "beta"),
              nh.from_array(np.asarray([1, s, heads, dh], np.int64), "split"),
              nh.from_array(np.asarray([1, s, d], np.int64), "merge"),
              nh.from_array(np.asarray(1.0 / np.sqrt(dh), np.float32), "sc")]
    nodes = [h.make_node("MatMul", ["x", "wq"], ["q0"]), h.make_node("Add", ["q0", "bq"], ["q1"]),
             h.make_node("MatMul", ["x", "wk"], ["k0"]), h.make_node("MatMul", ["x", "wv"], ["v0"])]
    nodes += [h.make_node("Reshape", [n, "split"], [n + "r"]) for n in ("q1", "k0", "v0")]
    nodes += [h.make_node("Transpose", ["q1r"], ["qt"], perm=[0, 2, 1, 3]),
              h.make_node("Transpose", ["k0r"], ["kt"], perm=[0, 2, 3, 1]),
              h.make_node("Transpose", ["v0r"], ["vt"], perm=[0, 2, 1, 3]),
              h.make_node("MatMul", ["qt", "kt"], ["att0"]), h.make_node("Mul", ["att0", "sc"], ["att1"]),
              h.make_node("Softmax", ["att1"], ["att"], axis=-1), h.make_node("MatMul", ["att", "vt"], ["ctx"]),
              h.make_node("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["ctxt", "merge"], ["ctxm"]),
              h.make_node("MatMul", ["ctxm", "wo"], ["o"]), h.make_node("Add", ["o", "x"], ["res"]),
              h.make_node("LayerNormalization", ["res", "g", "beta"], ["ln"], axis=-1),
              h.make_node("MatMul", ["ln", "w1"], ["f1"]), h.make_node("Relu", ["f1"], ["f1r"]),
              h.make_node("MatMul", ["f1r", "w2"], ["f2"]), h.make_node("Add", ["f2", "ln"], ["y"])]
    shape = (1, s, d)
    g = h.make_graph(nodes, "encoder", [h.make_tensor_value_info("x", T.FLOAT, shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, shape)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), shape


class _Calibration:
    """A CalibrationDataReader over a few random inputs."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        rng = np.random.default_rng(1)
        self._data = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._data, None)


def _quantize(tmp_path: Path, model: onnx.ModelProto, shape: tuple[int, ...], kind: str) -> str:
    src, dst = os.fspath(tmp_path / "f32.onnx"), os.fspath(tmp_path / f"{kind}.onnx")
    onnx.save(model, src)
    if kind in ("static", "qoperator"):
        fmt = quantization.QuantFormat.QDQ if kind == "static" else quantization.QuantFormat.QOperator
        quantization.quantize_static(src, dst, _Calibration(shape), quant_format=fmt, per_channel=True,
                                     activation_type=quantization.QuantType.QUInt8,
                                     weight_type=quantization.QuantType.QInt8)
    else:
        quantization.quantize_dynamic(src, dst, weight_type=quantization.QuantType.QInt8)
    return dst


def _output_step(path: str) -> float | None:
    """The output's quantization step when the model ends in a DequantizeLinear (static QDQ)."""
    m = onnx.load(path)
    producer = {o: n for n in m.graph.node for o in n.output}[m.graph.output[0].name]
    if producer.op_type != "DequantizeLinear":
        return None
    inits = {t.name: nh.to_array(t) for t in m.graph.initializer}
    return float(inits[producer.input[1]])


def _targets() -> list[str]:
    out = ["reference"]
    if "x86_64_avx512" in target_names() and load_target("x86_64_avx512").available() is None:
        out.append("x86_64_avx512")
    return out


def _conv_chain(rng: np.random.Generator) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """Conv-Relu-Conv-Relu, flattened into a MatMul: QOperator quantization turns it into default-domain
    QLinearConv / QLinearMatMul only (no com.microsoft op)."""
    inits = [_w(rng, "w1", (8, 3, 3, 3)), _w(rng, "b1", (8,), 0.1), _w(rng, "w2", (4, 8, 3, 3), 0.1),
             _w(rng, "b2", (4,), 0.1), _w(rng, "fc", (4 * 8 * 8, 10), 0.05),
             nh.from_array(np.asarray([1, 4 * 8 * 8], np.int64), "flat")]
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             h.make_node("Relu", ["c2"], ["r2"]), h.make_node("Reshape", ["r2", "flat"], ["f"]),
             h.make_node("MatMul", ["f", "fc"], ["y"])]
    shape = (1, 3, 16, 16)
    g = h.make_graph(nodes, "conv_chain", [h.make_tensor_value_info("x", T.FLOAT, shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, (1, 10))], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), shape


MODELS = {"cnn": _cnn, "encoder": _encoder}


@pytest.mark.parametrize("target", _targets())
@pytest.mark.parametrize("kind", ["static", "dynamic"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_quantized_model_matches_onnxruntime(tmp_path: Path, name: str, kind: str, target: str) -> None:
    model, shape = MODELS[name](np.random.default_rng(0))
    path = _quantize(tmp_path, model, shape, kind)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    cm = sc.compile_model(path, target, ALL_CONVS)
    placement = {t: w for _, t, w in cm.placement()}
    if kind == "static":
        assert {"QuantizeLinear", "DequantizeLinear"} <= ops
        # every activation Q->DQ pair became a FakeQuantize fused into a Subgraph
        assert not {"QuantizeLinear", "DequantizeLinear", "FakeQuantize"} & set(placement), cm.describe()
        assert "Round" in cm.describe()
    else:
        assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
        if target == "reference":  # the integer ops run on their numpy references (int64 accumulation), and say so
            assert placement["MatMulInteger"] == "reference" and placement["DynamicQuantizeLinear"] == "reference"
            if name == "cnn":
                assert placement["ConvInteger"] == "reference"
    if target == "x86_64_avx512" and _has_vnni():
        _assert_matmuls_run_int8(cm, ops)
    step = _output_step(path)
    if step is not None:
        _compare_stepwise(cm, sess, shape, step)
        return
    for seed in range(N_INPUTS):  # dynamic: f32 output of an integer matmul/conv times f32 scales
        x = np.random.default_rng(100 + seed).standard_normal(shape).astype(np.float32)
        want, got = sess.run(None, {"x": x})[0], cm({"x": x})["y"]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def _has_vnni() -> bool:
    from snippets_x86_64.cpu import cpu_features

    return "avx512_vnni" in cpu_features()


def _assert_matmuls_run_int8(cm, ops: set[str]) -> None:  # type: ignore[no-untyped-def]
    """Every MatMul with a constant int8 weight runs as an int8 FullyConnected Subgraph on the VNNI Brgemm: no
    MatMulInteger is left outside a Subgraph, and describe() names the int8 kernel once per weight."""
    from snippets_core.tokenization.tokenize_int8_fc_snippets import INT8_FULLY_CONNECTED, is_int8_fc
    from snippets_core.tokenization.tokenize_int8_matmul_snippets import is_int8_matmul

    placement = {t for _, t, _ in cm.placement()}
    assert not {"MatMulInteger", "QLinearMatMul", "ConvInteger", "QLinearConv"} & placement, cm.describe()
    int8 = [sg for sg in cm.subgraphs if is_int8_fc(sg) and sg.rt_info[INT8_FULLY_CONNECTED].conv is None]
    weights = 6 if "Softmax" in ops else 1  # the encoder: Q, K, V, output, FFN up and down; the CNN: its head
    assert len(int8) == weights, cm.describe()
    convs = sum(1 for sg in cm.subgraphs if is_int8_fc(sg) and sg.rt_info[INT8_FULLY_CONNECTED].conv is not None)
    # a static QDQ Conv (Q->DQ input, per-channel int8 weight) runs as an int8 convolution too
    assert convs == (2 if {"Conv", "QLinearConv", "ConvInteger"} & ops else 0), cm.describe()
    assert cm.describe().count("int8 FullyConnected on the VNNI Brgemm") == weights, cm.describe()
    assert cm.describe().count("int8 convolution (JIT, VNNI)") == convs, cm.describe()
    # and so does every MatMul of two quantized activations (the static encoder's attention)
    assert not any(sg.body_ops and sg.body_ops[-1].type_name == "MatMul" and not is_int8_fc(sg)
                   and not is_int8_matmul(sg) for sg in cm.subgraphs), cm.describe()
    attention = 2 if "Softmax" in ops and "DynamicQuantizeLinear" not in ops else 0
    assert sum(1 for sg in cm.subgraphs if is_int8_matmul(sg)) == attention, cm.describe()
    assert cm.describe().count("int8 batched MatMul on the VNNI Brgemm") == attention, cm.describe()


def _compare_stepwise(cm, sess, shape: tuple[int, ...], step: float) -> None:  # type: ignore[no-untyped-def]
    """At most 1% of the outputs one step off, none more; the others on the same step (their values differ
    only by the float rounding of FakeQuantize's output affine, r * osc + out_low, far below a step)."""
    off, total = 0, 0
    for seed in range(N_INPUTS):
        x = np.random.default_rng(100 + seed).standard_normal(shape).astype(np.float32)
        want, got = sess.run(None, {"x": x})[0], cm({"x": x})["y"]
        assert got.shape == want.shape and got.dtype == want.dtype
        steps = np.abs(np.rint(got.astype(np.float64) / step) - np.rint(want.astype(np.float64) / step))
        assert steps.max() <= 1, f"input {seed}: {int(steps.max())} steps off"
        off, total = off + int((steps > 0).sum()), total + steps.size
        np.testing.assert_allclose(got[steps == 0], want[steps == 0], rtol=0, atol=1e-3 * step)
    assert off <= 0.01 * total, f"{off} of {total} outputs one step off"


@pytest.mark.parametrize("target", _targets())
def test_qoperator_model_with_qlinear_conv_and_matmul(tmp_path: Path, target: str) -> None:
    """QOperator format: QLinearConv (per-channel weights, i32 bias) and QLinearMatMul run as int8 kernels on x86
    (on their integer references elsewhere) and match onnxruntime."""
    model, shape = _conv_chain(np.random.default_rng(0))
    path = _quantize(tmp_path, model, shape, "qoperator")
    ops = {(n.domain, n.op_type) for n in onnx.load(path).graph.node}
    assert {("", "QLinearConv"), ("", "QLinearMatMul")} <= ops and all(d == "" for d, _ in ops)
    cm = sc.compile_model(path, target, ALL_CONVS)
    placement = {t: w for _, t, w in cm.placement()}
    if target == "x86_64_avx512" and _has_vnni():
        _assert_matmuls_run_int8(cm, {"QLinearConv"})
    else:
        assert placement["QLinearMatMul"] == "reference" and placement["QLinearConv"] == "reference"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    step = _output_step(path)
    assert step is not None
    _compare_stepwise(cm, ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]), shape, step)


def test_qoperator_com_microsoft_ops_are_refused_naming_the_domain(tmp_path: Path) -> None:
    """onnxruntime's QOperator quantizer writes QLinearAdd / QLinearGlobalAveragePool in com.microsoft."""
    model, shape = _cnn(np.random.default_rng(0))
    path = _quantize(tmp_path, model, shape, "qoperator")
    with pytest.raises(UnsupportedOpError, match=r"QLinearAdd \(domain 'com.microsoft'\) x2 \('QLinearAdd_\d+'"):
        sc.compile_model(path, "reference")


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_int8_fc_tokenization_is_backend_neutral(tmp_path: Path, kind: str) -> None:
    """TokenizeInt8FCSnippets on the reference target (the ``int8_fc`` knob on): the encoder's six quantized MatMuls
    become int8 FullyConnected Subgraphs whose specs hold the int8 weights, and evaluating their bodies still
    matches onnxruntime."""
    from snippets_core.tokenization.tokenize_int8_fc_snippets import INT8_FULLY_CONNECTED, is_int8_fc

    model, shape = _encoder(np.random.default_rng(0))
    path = _quantize(tmp_path, model, shape, kind)
    cm = sc.compile_model(path, "reference", {"tokenization": {"int8_fc": True}})
    int8 = [sg for sg in cm.subgraphs if is_int8_fc(sg)]
    assert len(int8) == 6, cm.describe()
    weights = {t.name: nh.to_array(t) for t in onnx.load(path).graph.initializer if t.data_type == T.INT8}
    for sg in int8:
        spec = sg.rt_info[INT8_FULLY_CONNECTED]
        assert spec.weight.dtype == np.int8 and any(np.array_equal(spec.weight, w) for w in weights.values())
        assert sg.inputs[spec.a_index].element_type.value == "f32"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    step = _output_step(path)
    if step is not None:
        _compare_stepwise(cm, sess, shape, step)
        return
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    want = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(cm({"x": x})["y"], want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
