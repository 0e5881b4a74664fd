"""Integer quantization ops against onnx's reference evaluator, the Q->DQ -> FakeQuantize rewrite on every
target, and the typed errors for bad scales, zero points and shapes (docs/quantization.md)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import snippets_core as sc
from snippets_core.errors import ModelFormatError, SnippetsError, UnsupportedOpError
from snippets_core.frontends.onnx import read_onnx
from snippets_core.plugins.targets import load_target, target_names

QTYPES = {"u8": (T.UINT8, np.uint8), "i8": (T.INT8, np.int8), "u16": (T.UINT16, np.uint16), "i16": (T.INT16, np.int16)}
SHAPE = (2, 4, 3, 8)


def _model(nodes, inputs, outputs, inits, opset: int = 21):  # type: ignore[no-untyped-def]
    g = h.make_graph(nodes, "q", inputs, outputs, inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def _run(model, x: np.ndarray, target: str = "reference", **cfg) -> np.ndarray:  # type: ignore[no-untyped-def]
    cm = sc.compile_model(model, target, cfg or None)
    return cm({"x": x})["y"]


def _boundary_values(scale: float, lo: int, hi: int, zp: int, rng: np.random.Generator) -> np.ndarray:
    """Ties at k + 0.5 steps, values just inside/outside both saturation ends, zero, random values."""
    k = np.arange(lo - zp - 3, hi - zp + 3, max(1, (hi - lo) // 200), dtype=np.float64)
    ties = (k + 0.5) * scale
    ends = np.asarray([(lo - zp) * scale, (hi - zp) * scale, (lo - zp - 0.5) * scale, (hi - zp + 0.5) * scale,
                       (lo - zp) * scale * 4, (hi - zp) * scale * 4, 0.0, -0.0, np.inf, -np.inf])
    rand = rng.uniform((lo - zp - 10) * scale, (hi - zp + 10) * scale, 400)
    v = np.concatenate([ties, ties + 1e-3 * scale, ends, rand]).astype(np.float32)
    n = int(np.prod(SHAPE))
    return np.resize(v, n).reshape(SHAPE)


# --- the ops against onnx's reference evaluator ------------------------------------------------------


@pytest.mark.parametrize("qt", sorted(QTYPES))
@pytest.mark.parametrize("mode", ["tensor", "axis", "blocked"])
def test_quantize_dequantize_match_onnx_reference(qt: str, mode: str) -> None:
    onnx_t, np_t = QTYPES[qt]
    info = np.iinfo(np_t)
    rng = np.random.default_rng(1)
    attrs: dict[str, int] = {}
    if mode == "tensor":
        scale, zp = np.float32(0.25), np.asarray((int(info.min) + int(info.max)) // 3, np_t)
    elif mode == "axis":
        attrs = {"axis": 1}
        scale = np.asarray([0.5, 0.125, 2.0, 1 / 1024], np.float32)
        zp = np.asarray([0, info.max // 2, info.min // 2 + 1 if info.min else 7, info.max - 1], np_t)
    else:  # blocks of 3 along the last axis (8 = 3 + 3 + 2: the last block is short, as ONNX allows)
        attrs = {"axis": -1, "block_size": 3}
        scale = (2.0 ** rng.integers(-6, 2, (*SHAPE[:-1], 3))).astype(np.float32)
        zp = rng.integers(info.min // 4, info.max // 4 + 1, (*SHAPE[:-1], 3)).astype(np_t)
    x = _boundary_values(float(np.max(scale)), int(info.min), int(info.max), 0, rng)
    inits = [nh.from_array(np.asarray(scale), "s"), nh.from_array(np.asarray(zp), "z")]
    q = _model([h.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs)],
               [h.make_tensor_value_info("x", T.FLOAT, SHAPE)], [h.make_tensor_value_info("y", onnx_t, SHAPE)], inits)
    want = ReferenceEvaluator(q).run(None, {"x": x})[0]
    got = _run(q, x)
    assert got.dtype == np_t
    np.testing.assert_array_equal(got, want)
    dq = _model([h.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], **attrs)],
                [h.make_tensor_value_info("x", onnx_t, SHAPE)], [h.make_tensor_value_info("y", T.FLOAT, SHAPE)], inits)
    np.testing.assert_array_equal(_run(dq, want), ReferenceEvaluator(dq).run(None, {"x": want})[0])


@pytest.mark.parametrize("opset", [10, 13, 19, 21, 23])
def test_quantize_linear_across_opsets(opset: int) -> None:
    """Opset 10 is per tensor only; 13 adds axis; 19 saturate (float8); 21 block_size/output_dtype; 23 precision."""
    per_axis = opset >= 13
    scale = np.asarray([0.5, 0.25, 1.0, 0.125], np.float32) if per_axis else np.float32(0.25)
    zp = np.asarray([1, 2, 3, 4], np.uint8) if per_axis else np.uint8(9)
    inits = [nh.from_array(np.asarray(scale), "s"), nh.from_array(np.asarray(zp), "z")]
    x = _boundary_values(0.5, 0, 255, 0, np.random.default_rng(opset))
    q = _model([h.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], [h.make_tensor_value_info("x", T.FLOAT, SHAPE)],
               [h.make_tensor_value_info("y", T.UINT8, SHAPE)], inits, opset=opset)
    np.testing.assert_array_equal(_run(q, x), ReferenceEvaluator(q).run(None, {"x": x})[0])
    # onnx's evaluator has no DequantizeLinear before 19: the ONNX formula in numpy is the oracle
    dq = _model([h.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])],
                [h.make_tensor_value_info("x", T.UINT8, SHAPE)], [h.make_tensor_value_info("y", T.FLOAT, SHAPE)],
                inits, opset=opset)
    data = np.random.default_rng(0).integers(0, 256, SHAPE).astype(np.uint8)
    bshape = (1, 4, 1, 1) if per_axis else ()
    want = (data.astype(np.float32) - zp.reshape(bshape).astype(np.float32)) * scale.reshape(bshape)
    np.testing.assert_array_equal(_run(dq, data), want)


def test_round_half_to_even_and_saturation_against_numpy() -> None:
    x = np.asarray([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 127.5, 128.5, -128.5, -129.5, 1e9, -1e9], np.float32)
    m = _model([h.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
               [h.make_tensor_value_info("x", T.FLOAT, [12])], [h.make_tensor_value_info("y", T.INT8, [12])],
               [nh.from_array(np.float32(1.0), "s"), nh.from_array(np.int8(0), "z")])
    want = np.clip(np.rint(x.astype(np.float64)), -128, 127).astype(np.int8)  # numpy rint: half to even
    np.testing.assert_array_equal(_run(m, x), want)
    np.testing.assert_array_equal(want[:6], [0, 2, 2, 0, -2, -2])


def _integer_op_model(op: str, rng: np.random.Generator):  # type: ignore[no-untyped-def]
    u8, i8 = T.UINT8, T.INT8
    a = rng.integers(0, 256, (2, 3, 5)).astype(np.uint8)
    b = rng.integers(-128, 128, (5, 4)).astype(np.int8)
    x = rng.integers(0, 256, (1, 3, 6, 6)).astype(np.uint8)
    w = rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
    f = lambda v, n: nh.from_array(np.asarray(v), n)  # noqa: E731
    if op == "MatMulInteger":
        inits = [f(b, "b"), f(np.uint8(131), "az"), f(np.asarray([1, -2, 0, 5], np.int8), "bz")]
        return a, u8, (2, 3, 4), T.INT32, [h.make_node(op, ["x", "b", "az", "bz"], ["y"])], inits
    if op == "QLinearMatMul":
        inits = [f(np.float32(0.02), "as"), f(np.uint8(120), "az"), f(b, "b"), f(np.float32(0.01), "bs"),
                 f(np.int8(0), "bz"), f(np.float32(0.3), "ys"), f(np.uint8(128), "yz")]
        return a, u8, (2, 3, 4), u8, [h.make_node(op, ["x", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])], inits
    if op == "ConvInteger":
        inits = [f(w, "w"), f(np.uint8(100), "xz"), f(np.int8(3), "wz")]
        return x, u8, (1, 4, 6, 6), T.INT32, [h.make_node(op, ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1])], inits
    inits = [f(np.float32(0.03), "xs"), f(np.uint8(110), "xz"), f(w, "w"),
             f(np.asarray([0.01, 0.02, 0.005, 0.04], np.float32), "ws"), f(np.zeros(4, np.int8), "wz"),
             f(np.float32(2.0), "ys"), f(np.uint8(100), "yz"), f(np.asarray([100, -2000, 7, 0], np.int32), "B")]
    node = h.make_node(op, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "B"], ["y"], pads=[1, 1, 1, 1],
                       strides=[2, 2])
    return x, u8, (1, 4, 3, 3), u8, [node], inits


@pytest.mark.parametrize("op", ["MatMulInteger", "QLinearMatMul", "ConvInteger", "QLinearConv"])
def test_integer_ops_match_onnx_reference(op: str) -> None:
    x, xt, out_shape, yt, nodes, inits = _integer_op_model(op, np.random.default_rng(3))
    m = _model(nodes, [h.make_tensor_value_info("x", xt, x.shape)], [h.make_tensor_value_info("y", yt, out_shape)],
               inits)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    got = _run(m, x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["MatMulInteger", "QLinearMatMul"])
def test_integer_matmuls_keep_symbolic_dims(op: str) -> None:
    """A [batch, seq, K] input gives a [batch, seq, N] output (the symbols kept, as MatMul's inference does), so a
    dynamically quantized layer's Reshapes stay views and its shape chains fold."""
    x, xt, _, yt, nodes, inits = _integer_op_model(op, np.random.default_rng(3))
    m = _model(nodes, [h.make_tensor_value_info("x", xt, ["batch", "seq", x.shape[-1]])],
               [h.make_tensor_value_info("y", yt, None)], inits)
    (node,) = [n for n in read_onnx(m.SerializeToString()).get_ordered_ops() if n.type_name == op]
    assert str(node.outputs[0].shape) == "[batch,seq,4]"


def test_dynamic_quantize_linear_matches_onnx_reference() -> None:
    m = _model([h.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
               [h.make_tensor_value_info("x", T.FLOAT, [64])],
               [h.make_tensor_value_info("y", T.UINT8, [64]), h.make_tensor_value_info("s", T.FLOAT, []),
                h.make_tensor_value_info("z", T.UINT8, [])], [])
    x = np.random.default_rng(0).uniform(-3, 7, 64).astype(np.float32)
    got = sc.compile_model(m, "reference")({"x": x})
    for name, want in zip(("y", "s", "z"), ReferenceEvaluator(m).run(None, {"x": x})):
        np.testing.assert_array_equal(got[name], want)


# --- Q -> DQ becomes FakeQuantize, fused on every target ----------------------------------------------


def _qdq_model(scale: np.ndarray, zp: np.ndarray, onnx_t: int, axis: int | None = None):  # type: ignore[no-untyped-def]
    kw = {} if axis is None else {"axis": axis}
    nodes = [h.make_node("Mul", ["x", "one"], ["a"]),
             h.make_node("QuantizeLinear", ["a", "s", "z"], ["q"], **kw),
             h.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], **kw),
             h.make_node("Add", ["d", "zero"], ["y"])]
    inits = [nh.from_array(np.asarray(scale, np.float32), "s"), nh.from_array(np.asarray(zp), "z"),
             nh.from_array(np.float32(1.0), "one"), nh.from_array(np.float32(0.0), "zero")]
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, SHAPE)],
                  [h.make_tensor_value_info("y", T.FLOAT, SHAPE)], inits)


def _targets() -> list[str]:
    out = ["reference", "interpreter"]
    name = "x86_64_avx512"
    if name in target_names() and load_target(name).available() is None:
        out.append(name)
    return out


def _steps_off(got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np.abs(np.rint(got.astype(np.float64) / scale) - np.rint(want.astype(np.float64) / scale))


@pytest.mark.parametrize("target", _targets())
@pytest.mark.parametrize("qt", ["u8", "i8", "i16"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_q_dq_pair_runs_as_fused_fake_quantize(target: str, qt: str, per_channel: bool) -> None:
    onnx_t, np_t = QTYPES[qt]
    info = np.iinfo(np_t)
    rng = np.random.default_rng(7)
    if per_channel:
        scale = np.asarray([0.5, 0.125, 2.0, 1 / 64], np.float32)
        zp = np.asarray([0, info.max // 3, info.min // 3, 1], np_t)
        m, bscale = _qdq_model(scale, zp, onnx_t, axis=1), scale.reshape(1, 4, 1, 1)
    else:
        scale, zp = np.float32(0.25), np.asarray(info.max // 4, np_t)
        m, bscale = _qdq_model(scale, zp, onnx_t), scale
    x = _boundary_values(float(np.max(scale)), int(info.min), int(info.max), int(np.max(zp)), rng)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    cm = sc.compile_model(m, target)
    assert [t for _, t, _ in cm.placement()] == ["Subgraph"], cm.describe()
    assert "Round" in cm.describe() and "Quantize" not in cm.describe()
    got = cm({"x": x})["y"]
    # power-of-two scales: the FakeQuantize arithmetic is exact, so the result is Q then DQ's, bit for bit
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", _targets())
def test_q_dq_with_any_scale_is_within_one_step(target: str) -> None:
    """A scale like 0.1 is not a power of two: at a tie of ``x / s`` (within float rounding) the FakeQuantize's
    arithmetic may round to the other neighbour, one step (the issue's tolerance); every other value and the
    saturated ends are exact. (Half of these boundary values are ties; in models ties are rare.)"""
    scale, zp = np.float32(0.1), np.uint8(128)
    m = _qdq_model(scale, zp, T.UINT8)
    x = _boundary_values(0.1, 0, 255, 128, np.random.default_rng(2))
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    got = _run(m, x, target)
    off = _steps_off(got, want, scale)
    ratio = x.astype(np.float64) / 0.1
    near_tie = np.abs(np.abs(ratio - np.floor(ratio)) - 0.5) < 1e-5
    assert off.max() <= 1
    assert not off[~near_tie].any()
    ends = (x <= -12.8) | (x >= 12.7)
    np.testing.assert_array_equal(got[ends], want[ends])
    np.testing.assert_allclose(got[off == 0], want[off == 0], rtol=1e-6, atol=1e-6)


def test_q_dq_rewrite_can_be_disabled_and_skips_what_it_cannot_express() -> None:
    m = _qdq_model(np.float32(0.25), np.uint8(3), T.UINT8)
    cm = sc.compile_model(m, "reference", {"disabled_passes": ["convert-q-dq-to-fake-quantize"]})
    assert {"QuantizeLinear", "DequantizeLinear"} <= {t for _, t, _ in cm.placement()}
    # different scales on Q and DQ: not a FakeQuantize
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             h.make_node("DequantizeLinear", ["q", "s2", "z"], ["y"])]
    inits = [nh.from_array(np.float32(0.25), "s"), nh.from_array(np.float32(0.5), "s2"),
             nh.from_array(np.uint8(3), "z")]
    m2 = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, SHAPE)], [h.make_tensor_value_info("y", T.FLOAT, SHAPE)],
                inits)
    cm2 = sc.compile_model(m2, "reference")
    assert "FakeQuantize" not in cm2.describe() and "QuantizeLinear" in cm2.describe()
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32) * 20
    np.testing.assert_array_equal(cm2({"x": x})["y"], ReferenceEvaluator(m2).run(None, {"x": x})[0])


@pytest.mark.parametrize("zp", [255, 254])
def test_a_grid_as_wide_as_float_is_a_finite_fake_quantize(zp: int) -> None:
    """A mask times float min, quantized (onnxruntime's static quantizer does it to BERT's attention mask): the
    FakeQuantize ends are clipped to the finite f32 range (no NaN), the values on the grid are Q then DQ's."""
    scale = np.float32(np.finfo(np.float32).max / 255 * 0.999)
    m = _qdq_model(scale, np.uint8(zp), T.UINT8)
    cm = sc.compile_model(m, "reference")
    assert "Round" in cm.describe() and "QuantizeLinear" not in cm.describe()  # fused, decomposed
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    x.reshape(-1)[:4] = np.finfo(np.float32).min
    got, want = cm({"x": x})["y"], ReferenceEvaluator(m).run(None, {"x": x})[0]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * scale)


@pytest.mark.parametrize("zp", [3, 4])  # odd and even z - qmin: FakeQuantize + saturation, or FakeQuantize alone
def test_a_repeated_q_dq_after_a_reshape_is_removed(zp: int) -> None:
    """onnxruntime's quantizer puts the same Q->DQ on both sides of a Reshape/Transpose: the second pair is the
    identity on values already on the grid, so only one quantizer remains, with the same results."""
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q1"]),
             h.make_node("DequantizeLinear", ["q1", "s", "z"], ["d1"]),
             h.make_node("Transpose", ["d1"], ["t"], perm=[0, 2, 1, 3]),
             h.make_node("QuantizeLinear", ["t", "s", "z"], ["q2"]),
             h.make_node("DequantizeLinear", ["q2", "s", "z"], ["d2"]), h.make_node("Relu", ["d2"], ["y"])]
    inits = [nh.from_array(np.float32(0.1), "s"), nh.from_array(np.uint8(zp), "z")]
    out_shape = (SHAPE[0], SHAPE[2], SHAPE[1], SHAPE[3])
    m = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, SHAPE)],
               [h.make_tensor_value_info("y", T.FLOAT, out_shape)], inits)
    x = (np.random.default_rng(4).standard_normal(SHAPE) * 10).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    for target in _targets():
        cm = sc.compile_model(m, target)
        assert cm.describe().count("Round") == 1, cm.describe()
        got = cm({"x": x})["y"]
        assert not _steps_off(got, want, np.float32(0.1)).any()


def test_shave_refuses_fake_quantize_with_a_reason() -> None:
    """The SHVX model ISA has no rounding instruction, so the shave target cannot lower FakeQuantize's Round:
    it refuses the model with a typed error naming the op instead of computing something else."""
    if "shave" not in target_names():
        pytest.skip("the shave target is not installed")
    m = _qdq_model(np.float32(0.25), np.uint8(3), T.UINT8)
    with pytest.raises(UnsupportedOpError, match="FakeQuantize"):
        sc.compile_model(m, "shave")


# --- bad input: typed errors naming the node, at load time ---------------------------------------------


def _one_q(scale, zp, *, shape=SHAPE, op="QuantizeLinear", x_t=T.FLOAT, **attrs):  # type: ignore[no-untyped-def]
    inits = [nh.from_array(np.asarray(scale), "s")] + ([] if zp is None else [nh.from_array(np.asarray(zp), "z")])
    node = h.make_node(op, ["x", "s"] + (["z"] if zp is not None else []), ["y"], name="the_q", **attrs)
    out_t = T.FLOAT if op == "DequantizeLinear" else T.UINT8
    return _model([node], [h.make_tensor_value_info("x", x_t, shape)], [h.make_tensor_value_info("y", out_t, None)],
                  inits)


@pytest.mark.parametrize(("scale", "zp", "attrs", "error", "match"), [
    (np.float32(0.0), np.uint8(0), {}, ModelFormatError, "finite and positive"),
    (np.float32(-0.5), np.uint8(0), {}, ModelFormatError, "finite and positive"),
    (np.asarray([0.1, -0.1, 0.1, 0.1], np.float32), np.zeros(4, np.uint8), {"axis": 1}, ModelFormatError, "positive"),
    (np.asarray([0.1, 0.2, 0.3], np.float32), np.zeros(3, np.uint8), {"axis": 1}, ModelFormatError, "axis 1"),
    (np.full((2, 4, 3, 3), 0.1, np.float32), np.zeros((2, 4, 3, 3), np.uint8), {"axis": 3, "block_size": 2},
     ModelFormatError, "block_size 2"),
    (np.float32(0.1), np.uint8(0), {"axis": 1, "block_size": -2}, UnsupportedOpError, "block_size"),
    (np.float32(0.1), np.uint8(0), {"output_dtype": T.INT4}, UnsupportedOpError, "INT4"),
])
def test_bad_quantization_parameters_name_the_node(scale, zp, attrs, error, match):  # type: ignore[no-untyped-def]
    m = _one_q(scale, zp, **attrs)
    with pytest.raises(error, match=match) as e:
        read_onnx(m, check=False)
    assert "the_q" in str(e.value)


def test_zero_point_of_the_wrong_type_or_out_of_range_is_refused() -> None:
    # an i32 zero point for QuantizeLinear: not a quantized type
    with pytest.raises(UnsupportedOpError, match="the_q.*i32"):
        read_onnx(_one_q(np.float32(0.1), np.int32(5)), check=False)
    # DequantizeLinear of u8 data with an i8 zero point
    with pytest.raises(ModelFormatError, match="the_q.*zero point.*i8"):
        read_onnx(_one_q(np.float32(0.1), np.int8(5), op="DequantizeLinear", x_t=T.UINT8), check=False)
    # i32 data (a bias) must have a zero point of 0
    with pytest.raises(ModelFormatError, match="the_q.*must be 0"):
        read_onnx(_one_q(np.float32(0.1), np.int32(7), op="DequantizeLinear", x_t=T.INT32), check=False)


def test_errors_are_snippets_errors_through_the_checker_too() -> None:
    """With onnx.checker on (the default), every refusal is still a SnippetsError naming what was wrong."""
    for m in (_one_q(np.float32(0.0), np.uint8(0)), _one_q(np.float32(0.1), np.int8(5), op="DequantizeLinear",
                                                             x_t=T.UINT8)):
        with pytest.raises(SnippetsError):
            read_onnx(m)


def test_microsoft_domain_qlinear_ops_are_refused_by_domain() -> None:
    node = h.make_node("QLinearAdd", ["x", "s", "z", "x", "s", "z", "s", "z"], ["y"], name="qadd",
                       domain="com.microsoft")
    inits = [nh.from_array(np.float32(0.1), "s"), nh.from_array(np.uint8(0), "z")]
    g = h.make_graph([node], "q", [h.make_tensor_value_info("x", T.UINT8, [4])],
                     [h.make_tensor_value_info("y", T.UINT8, [4])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 21), h.make_opsetid("com.microsoft", 1)])
    with pytest.raises(UnsupportedOpError, match="qadd.*com.microsoft"):
        read_onnx(m, check=False)
