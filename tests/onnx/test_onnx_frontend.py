"""read_onnx: version-dependent semantics checked against onnx.reference.ReferenceEvaluator, the graph it
builds (decompositions that keep fusion possible, names, constants, dynamic dims)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from snippets_core import read_onnx
from snippets_core.ir import evaluate_model
from snippets_core.ir.shape import Shape

RNG = np.random.default_rng(7)


def _vi(name, shape, et=TensorProto.FLOAT):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, et, shape)


def _model(nodes, inputs, outputs, opset, initializers=(), ir_version=None):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        m.ir_version = ir_version
    return m


def _i64(name, values):  # type: ignore[no-untyped-def]
    return onnx.numpy_helper.from_array(np.asarray(values, np.int64), name)


def _f(shape):  # type: ignore[no-untyped-def]
    return RNG.standard_normal(shape).astype(np.float32)


# (id, model, feeds): every case is run by snippets' reference runtime and by onnx's ReferenceEvaluator.
CaseFn = Callable[[], tuple[onnx.ModelProto, dict[str, np.ndarray]]]
CASES: dict[str, CaseFn] = {}


def case(fn: CaseFn) -> CaseFn:
    CASES[fn.__name__] = fn
    return fn


@case
def softmax_opset13_single_axis():  # type: ignore[no-untyped-def]
    n = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    return _model([n], [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])], 13), {"x": _f((2, 3, 4))}


@case
def reduce_mean_axes_attribute_opset11():  # type: ignore[no-untyped-def]
    n = helper.make_node("ReduceMean", ["x"], ["y"], axes=[0, 2], keepdims=0)
    return _model([n], [_vi("x", [2, 3, 4])], [_vi("y", [3])], 11), {"x": _f((2, 3, 4))}


@case
def reduce_max_axes_input_opset18():  # type: ignore[no-untyped-def]
    n = helper.make_node("ReduceMax", ["x", "axes"], ["y"], keepdims=1)
    return (_model([n], [_vi("x", [2, 3, 4])], [_vi("y", [2, 1, 1])], 18, [_i64("axes", [-1, 1])]),
            {"x": _f((2, 3, 4))})


@case
def reduce_sum_all_axes_opset13():  # type: ignore[no-untyped-def]
    n = helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)
    return _model([n], [_vi("x", [2, 3])], [_vi("y", [])], 13), {"x": _f((2, 3))}


@case
def reduce_sum_noop_with_empty_axes():  # type: ignore[no-untyped-def]
    n = helper.make_node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1)
    return _model([n], [_vi("x", [2, 3])], [_vi("y", [2, 3])], 13), {"x": _f((2, 3))}


@case
def reduce_log_sum_exp_opset11():  # type: ignore[no-untyped-def]
    n = helper.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[1])
    return _model([n], [_vi("x", [2, 3])], [_vi("y", [2, 1])], 11), {"x": _f((2, 3))}


@case
def split_attribute_opset11():  # type: ignore[no-untyped-def]
    n = helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 3])
    return _model([n], [_vi("x", [2, 4])], [_vi("a", [2, 1]), _vi("b", [2, 3])], 11), {"x": _f((2, 4))}


@case
def split_input_opset13():  # type: ignore[no-untyped-def]
    n = helper.make_node("Split", ["x", "s"], ["a", "b"], axis=0)
    return (_model([n], [_vi("x", [5, 2])], [_vi("a", [2, 2]), _vi("b", [3, 2])], 13, [_i64("s", [2, 3])]),
            {"x": _f((5, 2))})


@case
def split_num_outputs_uneven_opset18():  # type: ignore[no-untyped-def]
    n = helper.make_node("Split", ["x"], ["a", "b", "c"], axis=0, num_outputs=3)
    return (_model([n], [_vi("x", [7])], [_vi("a", [3]), _vi("b", [3]), _vi("c", [1])], 18),
            {"x": _f((7,))})


@case
def squeeze_unsqueeze_attributes_opset11():  # type: ignore[no-untyped-def]
    n1 = helper.make_node("Squeeze", ["x"], ["s"], axes=[1])
    n2 = helper.make_node("Unsqueeze", ["s"], ["y"], axes=[0, 3])
    return _model([n1, n2], [_vi("x", [2, 1, 3])], [_vi("y", [1, 2, 3, 1])], 11), {"x": _f((2, 1, 3))}


@case
def squeeze_unsqueeze_inputs_opset13():  # type: ignore[no-untyped-def]
    n1 = helper.make_node("Squeeze", ["x", "a1"], ["s"])
    n2 = helper.make_node("Unsqueeze", ["s", "a2"], ["y"])
    inits = [_i64("a1", [-2]), _i64("a2", [0, -1])]
    return _model([n1, n2], [_vi("x", [2, 1, 3])], [_vi("y", [1, 2, 3, 1])], 13, inits), {"x": _f((2, 1, 3))}


@case
def clip_attributes_opset6():  # type: ignore[no-untyped-def]
    n = helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.25)
    return _model([n], [_vi("x", [3, 4])], [_vi("y", [3, 4])], 6), {"x": _f((3, 4))}


@case
def clip_inputs_opset13_min_only():  # type: ignore[no-untyped-def]
    n = helper.make_node("Clip", ["x", "lo"], ["y"])
    lo = onnx.numpy_helper.from_array(np.float32(-0.3), "lo")
    return _model([n], [_vi("x", [3, 4])], [_vi("y", [3, 4])], 13, [lo]), {"x": _f((3, 4))}


@case
def clip_int_runtime_bounds_opset13():  # type: ignore[no-untyped-def]
    n = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
    ins = [_vi("x", [5], TensorProto.INT32), _vi("lo", [], TensorProto.INT32), _vi("hi", [], TensorProto.INT32)]
    feeds = {"x": np.array([-5, -1, 0, 3, 9], np.int32), "lo": np.int32(-2), "hi": np.int32(4)}
    return _model([n], ins, [_vi("y", [5], TensorProto.INT32)], 13), feeds


@case
def pad_attribute_opset2_reflect():  # type: ignore[no-untyped-def]
    n = helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 0, 2], mode="reflect")
    return _model([n], [_vi("x", [2, 4])], [_vi("y", [2, 7])], 2), {"x": _f((2, 4))}


@case
def pad_input_opset11_constant_value():  # type: ignore[no-untyped-def]
    n = helper.make_node("Pad", ["x", "p", "v"], ["y"])
    v = onnx.numpy_helper.from_array(np.float32(1.5), "v")
    return (_model([n], [_vi("x", [2, 3])], [_vi("y", [3, 6])], 11, [_i64("p", [1, 2, 0, 1]), v]),
            {"x": _f((2, 3))})


@case
def pad_axes_opset18_edge():  # type: ignore[no-untyped-def]
    n = helper.make_node("Pad", ["x", "p", "", "ax"], ["y"], mode="edge")
    return (_model([n], [_vi("x", [2, 3])], [_vi("y", [2, 6])], 18, [_i64("p", [2, 1]), _i64("ax", [-1])]),
            {"x": _f((2, 3))})


@case
def gemm_transposed_alpha_beta():  # type: ignore[no-untyped-def]
    n = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)
    ins = [_vi("a", [4, 3]), _vi("b", [5, 4]), _vi("c", [5])]
    return _model([n], ins, [_vi("y", [3, 5])], 13), {"a": _f((4, 3)), "b": _f((5, 4)), "c": _f((5,))}


@case
def flatten_leaky_relu_hardswish():  # type: ignore[no-untyped-def]
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=2), helper.make_node("LeakyRelu", ["f"], ["l"], alpha=0.2),
             helper.make_node("HardSwish", ["l"], ["y"])]
    return _model(nodes, [_vi("x", [2, 3, 4, 5])], [_vi("y", [6, 20])], 14), {"x": _f((2, 3, 4, 5))}


@case
def sum_mean_max_min_variadic():  # type: ignore[no-untyped-def]
    nodes = [helper.make_node("Sum", ["a", "b", "c"], ["s"]), helper.make_node("Mean", ["a", "b", "c"], ["m"]),
             helper.make_node("Max", ["a", "b", "c"], ["mx"]), helper.make_node("Min", ["s", "m", "mx"], ["y"])]
    ins = [_vi("a", [2, 3]), _vi("b", [3]), _vi("c", [2, 1])]
    return _model(nodes, ins, [_vi("y", [2, 3])], 13), {"a": _f((2, 3)), "b": _f((3,)), "c": _f((2, 1))}


@case
def cast_where_reciprocal_pow():  # type: ignore[no-untyped-def]
    nodes = [helper.make_node("Greater", ["x", "z"], ["g"]), helper.make_node("Reciprocal", ["x"], ["r"]),
             helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT64),
             helper.make_node("Pow", ["x", "xi"], ["p"]),
             helper.make_node("Where", ["g", "r", "p"], ["y"])]
    zero = onnx.numpy_helper.from_array(np.float32(0.0), "z")
    return _model(nodes, [_vi("x", [8])], [_vi("y", [8])], 13, [zero]), {"x": _f((8,)) * 3}


@case
def expand_bidirectional():  # type: ignore[no-untyped-def]
    n = helper.make_node("Expand", ["x", "s"], ["y"])
    return _model([n], [_vi("x", [3, 1])], [_vi("y", [2, 3, 4])], 13, [_i64("s", [2, 1, 4])]), {"x": _f((3, 1))}


@case
def gelu_opset20_tanh_and_erf():  # type: ignore[no-untyped-def]
    nodes = [helper.make_node("Gelu", ["x"], ["a"], approximate="tanh"), helper.make_node("Gelu", ["a"], ["b"]),
             helper.make_node("Erf", ["b"], ["y"])]
    return _model(nodes, [_vi("x", [10])], [_vi("y", [10])], 20), {"x": _f((10,))}


@case
def shape_start_end_opset15():  # type: ignore[no-untyped-def]
    n = helper.make_node("Shape", ["x"], ["y"], start=1, end=-1)
    return (_model([n], [_vi("x", [2, 3, 4, 5])], [_vi("y", [2], TensorProto.INT64)], 15),
            {"x": _f((2, 3, 4, 5))})


@case
def dropout_opset12_with_mask():  # type: ignore[no-untyped-def]
    n = helper.make_node("Dropout", ["x"], ["y", "mask"])
    return (_model([n], [_vi("x", [2, 3])], [_vi("y", [2, 3]), _vi("mask", [2, 3], TensorProto.BOOL)], 12),
            {"x": _f((2, 3))})


@case
def conv_group_pads_bias_then_pools():  # type: ignore[no-untyped-def]
    w = onnx.numpy_helper.from_array(_f((4, 2, 3, 3)), "w")
    b = onnx.numpy_helper.from_array(_f((4,)), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=2, pads=[1, 0, 2, 1], strides=[2, 1]),
             helper.make_node("MaxPool", ["c"], ["m"], kernel_shape=[2, 2], ceil_mode=1, strides=[2, 2]),
             helper.make_node("AveragePool", ["c"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              count_include_pad=0),
             helper.make_node("GlobalAveragePool", ["a"], ["y"])]
    return (_model(nodes, [_vi("x", [1, 4, 7, 6])], [_vi("m", [1, 4, 2, 3]), _vi("y", [1, 4, 1, 1])], 13, [w, b]),
            {"x": _f((1, 4, 7, 6))})


@case
def batchnorm_instance_norm():  # type: ignore[no-untyped-def]
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in
             (("s", _f((3,))), ("b", _f((3,))), ("m", _f((3,))), ("v", np.abs(_f((3,))) + 0.5))]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"], epsilon=1e-3),
             helper.make_node("InstanceNormalization", ["bn", "s", "b"], ["y"])]
    return _model(nodes, [_vi("x", [2, 3, 4, 4])], [_vi("y", [2, 3, 4, 4])], 15, inits), {"x": _f((2, 3, 4, 4))}


@case
def slice_opset9_attributes():  # type: ignore[no-untyped-def]
    n = helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[1000, -1], axes=[0, 1])
    return _model([n], [_vi("x", [3, 5])], [_vi("y", [2, 2])], 9), {"x": _f((3, 5))}


@case
def slice_opset13_negative_steps():  # type: ignore[no-untyped-def]
    n = helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])
    inits = [_i64("st", [-1, 4]), _i64("en", [-1000, 0]), _i64("ax", [0, 1]), _i64("sp", [-1, -2])]
    return _model([n], [_vi("x", [3, 5])], [_vi("y", [3, 2])], 13, inits), {"x": _f((3, 5))}


@case
def constant_of_shape_range_tile_topk():  # type: ignore[no-untyped-def]
    value = onnx.numpy_helper.from_array(np.array([2.0], np.float32), "v")
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], value=value),
             helper.make_node("Mul", ["x", "c"], ["xc"]),
             helper.make_node("Tile", ["xc", "rep"], ["t"]),
             helper.make_node("TopK", ["t", "k"], ["vals", "idx"], axis=1),
             helper.make_node("Range", ["r0", "r1", "r2"], ["r"])]
    inits = [_i64("s", [2, 3]), _i64("rep", [1, 2]), _i64("k", [4]), _i64("r0", 1), _i64("r1", 10), _i64("r2", 3)]
    outs = [_vi("vals", [2, 4]), _vi("idx", [2, 4], TensorProto.INT64), _vi("r", [3], TensorProto.INT64)]
    return _model(nodes, [_vi("x", [2, 3])], outs, 13, inits), {"x": _f((2, 3))}


@case
def layer_norm_and_group_norm_opset21():  # type: ignore[no-untyped-def]
    inits = [onnx.numpy_helper.from_array(_f((4,)), "sc"), onnx.numpy_helper.from_array(_f((4,)), "bi")]
    nodes = [helper.make_node("LayerNormalization", ["x", "sc", "bi"], ["l"], axis=-1),
             helper.make_node("Transpose", ["l"], ["t"], perm=[0, 2, 1]),
             helper.make_node("GroupNormalization", ["t", "sc", "bi"], ["y"], num_groups=2)]
    return _model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", [2, 4, 3])], 21, inits), {"x": _f((2, 3, 4))}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_onnx_reference_evaluator(name: str) -> None:
    proto, feeds = CASES[name]()
    expected = ReferenceEvaluator(proto).run(None, feeds)
    got = evaluate_model(read_onnx(proto), feeds)
    for vi, ref in zip(proto.graph.output, expected):
        out = got[vi.name]
        assert out.dtype == ref.dtype, (vi.name, out.dtype, ref.dtype)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6, err_msg=vi.name)


# Oracles written from the ONNX spec where onnx's ReferenceEvaluator does not follow it: it applies
# opset-13 Softmax semantics to every version, knows no legacy broadcasting, and its LRN loops over the
# batch dim instead of the channels (so channels >= N stay unnormalized).


def _softmax_2d(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    flat = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    y = e / e.sum(axis=1, keepdims=True)
    return (np.log(y) if log else y).reshape(x.shape)


@pytest.mark.parametrize(("op", "opset", "axis"), [("Softmax", 11, 1), ("Softmax", 1, None), ("LogSoftmax", 9, 1),
                                                   ("LogSoftmax", 11, -2), ("Softmax", 12, 0)])
def test_softmax_before_opset13_normalizes_the_flattened_rows(op: str, opset: int, axis: int | None) -> None:
    attrs = {} if axis is None else {"axis": axis}
    n = helper.make_node(op, ["x"], ["y"], **attrs)
    proto = _model([n], [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])], opset)
    x = _f((2, 3, 4))
    a = 1 if axis is None else axis % 3
    got = evaluate_model(read_onnx(proto), {"x": x})["y"]
    np.testing.assert_allclose(got, _softmax_2d(x, a, op == "LogSoftmax"), rtol=1e-5, atol=1e-6)


def test_legacy_broadcast_with_axis_opset6() -> None:
    n = helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=1)
    proto = _model([n], [_vi("x", [2, 3, 4]), _vi("b", [3])], [_vi("y", [2, 3, 4])], 6)
    x, b = _f((2, 3, 4)), _f((3,))
    np.testing.assert_allclose(evaluate_model(read_onnx(proto), {"x": x, "b": b})["y"], x + b[:, None], rtol=1e-6)


def test_lrn_sums_squares_over_a_channel_window() -> None:
    n = helper.make_node("LRN", ["x"], ["y"], size=3, alpha=0.01, beta=0.6, bias=1.5)
    proto = _model([n], [_vi("x", [2, 5, 3, 3])], [_vi("y", [2, 5, 3, 3])], 13)
    x = _f((2, 5, 3, 3)) * 3
    sq = x.astype(np.float64) ** 2
    expected = np.empty_like(sq)
    for c in range(5):  # window [c - floor((size-1)/2), c + ceil((size-1)/2)]
        window = sq[:, max(0, c - 1):min(5, c + 2)].sum(axis=1)
        expected[:, c] = x[:, c] / (1.5 + 0.01 / 3 * window) ** 0.6
    np.testing.assert_allclose(evaluate_model(read_onnx(proto), {"x": x})["y"], expected, rtol=1e-5, atol=1e-6)


def _types(model) -> list[str]:  # type: ignore[no-untyped-def]
    return [n.type_name for n in model.get_ordered_ops()]


def test_gemm_is_decomposed_for_fusion() -> None:
    proto, _ = CASES["gemm_transposed_alpha_beta"]()
    model = read_onnx(proto)
    assert [t for t in _types(model) if t not in ("Parameter", "Constant", "Result")] == \
        ["MatMul", "Multiply", "Multiply", "Add"]


def test_constant_batchnorm_folds_to_multiply_add() -> None:
    proto, _ = CASES["batchnorm_instance_norm"]()
    model = read_onnx(proto)
    ops = [t for t in _types(model) if t not in ("Parameter", "Constant", "Result")]
    assert ops[:2] == ["Multiply", "Add"]


def test_names_parameters_results_and_nodes() -> None:
    nodes = [helper.make_node("Relu", ["in0"], ["r"], name="first_relu"), helper.make_node("Sigmoid", ["r"], ["out0"])]
    model = read_onnx(_model(nodes, [_vi("in0", [2])], [_vi("out0", [2])], 13))
    assert model.input_names == ["in0"] and model.output_names == ["out0"]
    names = {n.type_name: n.name for n in model.get_ordered_ops()}
    assert names["Relu"] == "first_relu" and names["Sigmoid"] == "Sigmoid_1"


def test_initializers_are_constants_and_ir3_initializer_inputs_are_not_parameters() -> None:
    w = onnx.numpy_helper.from_array(np.arange(3, dtype=np.float32), "w")
    n = helper.make_node("Add", ["x", "w"], ["y"])
    proto = _model([n], [_vi("x", [3]), _vi("w", [3])], [_vi("y", [3])], 8, [w], ir_version=3)
    model = read_onnx(proto)
    assert model.input_names == ["x"]
    consts = [n for n in model.get_ordered_ops() if n.type_name == "Constant"]
    assert len(consts) == 1 and consts[0].name == "w"
    np.testing.assert_array_equal(consts[0].value, np.arange(3, dtype=np.float32))


def test_dim_params_become_dynamic_dims() -> None:
    n = helper.make_node("Relu", ["x"], ["y"])
    model = read_onnx(_model([n], [_vi("x", ["batch", 3, None])], [_vi("y", ["batch", 3, None])], 13))
    assert model.parameters[0].shape == Shape([None, 3, None])
    x = _f((5, 3, 2))
    np.testing.assert_array_equal(evaluate_model(model, {"x": x})["y"], np.maximum(x, 0))


def test_accepts_path_bytes_and_proto(tmp_path) -> None:  # type: ignore[no-untyped-def]
    proto, feeds = CASES["softmax_opset13_single_axis"]()
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    results = [evaluate_model(read_onnx(src), feeds)["y"] for src in (proto, str(path), path, path.read_bytes())]
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_attention_reads_through_its_function_body_as_matmul_softmax() -> None:
    n = helper.make_node("Attention", ["q", "k", "v"], ["y"], name="mha")
    ins = [_vi("q", [1, 2, 3, 4]), _vi("k", [1, 2, 5, 4]), _vi("v", [1, 2, 5, 4])]
    proto = _model([n], ins, [_vi("y", [1, 2, 3, 4])], 23)
    model = read_onnx(proto)
    types = _types(model)
    assert types.count("MatMul") == 2 and "Softmax" in types
    assert all(n.name.startswith("mha/") for n in model.get_ordered_ops() if n.type_name in ("MatMul", "Softmax"))
    feeds = {"q": _f((1, 2, 3, 4)), "k": _f((1, 2, 5, 4)), "v": _f((1, 2, 5, 4))}
    q, k, v = (feeds[x].astype(np.float64) for x in ("q", "k", "v"))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(4)
    p = np.exp(s - s.max(-1, keepdims=True))
    expected = (p / p.sum(-1, keepdims=True)) @ v
    np.testing.assert_allclose(evaluate_model(model, feeds)["y"], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                                "ReduceSumSquare", "ReduceMax"])
def test_noop_with_empty_axes_reduces_each_element_alone(op: str) -> None:
    n = helper.make_node(op, ["x"], ["y"], noop_with_empty_axes=1)
    proto = _model([n], [_vi("x", [2, 3])], [_vi("y", [2, 3])], 18)
    x = np.abs(_f((2, 3))) + 0.1
    per_element = {"ReduceSum": x, "ReduceL1": np.abs(x), "ReduceL2": np.abs(x), "ReduceLogSum": np.log(x),
                   "ReduceLogSumExp": x, "ReduceSumSquare": x * x, "ReduceMax": x}[op]
    np.testing.assert_allclose(evaluate_model(read_onnx(proto), {"x": x})["y"], per_element, rtol=1e-6)
