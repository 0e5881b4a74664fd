"""Models onnxruntime loads but the strict onnx.checker rejects are read, and give onnxruntime's outputs; the
checker's other rules still hold (docs/onnx_conformance.md, "What is relaxed")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core import compile_model, read_onnx
from snippets_core.errors import InputError, ModelFormatError, UnsupportedOpError
from snippets_core.frontends.onnx_lenient import checkable, topological_order

# the oracle (in the core's test extra); skipped with this reason where it is not installed
ort = pytest.importorskip("onnxruntime", reason="onnxruntime (the oracle of these tests) is not installed")

F32 = TensorProto.FLOAT


def _vi(name: str, shape: Any, elem: int = F32) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes: list[onnx.NodeProto], inputs: list[Any], outputs: list[Any], *, opset: int = 17,
           initializers: tuple[Any, ...] = (), **kw: Any) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kw)


def _swish(x: str = "x", y: str = "y") -> list[onnx.NodeProto]:
    return [helper.make_node("Sigmoid", [x], ["s"], name="sig"), helper.make_node("Mul", [x, "s"], [y], name="mul")]


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def _matches_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], oracle: onnx.ModelProto | None = None,
                 target: str = "reference") -> None:
    expected = _ort(oracle or model, feeds)
    got = compile_model(read_onnx(model.SerializeToString()), target=target)(feeds)
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=1e-6)


X = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)


# --- the relaxed idioms ----------------------------------------------------------------------------------------
def _shapeless_output() -> onnx.ModelProto:
    return _model(_swish(), [_vi("x", [2, 3])], [_vi("y", None)])


def _shapeless_input() -> onnx.ModelProto:
    return _model(_swish(), [_vi("x", None)], [_vi("y", None)])


def _shapeless_int_output() -> onnx.ModelProto:
    return _model([helper.make_node("Shape", ["x"], ["y"])], [_vi("x", [2, 3])], [_vi("y", None, TensorProto.INT64)])


def _untyped_output() -> onnx.ModelProto:
    m = _model(_swish(), [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    m.graph.output[0].ClearField("type")
    return m


def _unnamed_graph() -> onnx.ModelProto:
    m = _model(_swish(), [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    m.graph.name = ""
    return m


def _unset_ir_version() -> onnx.ModelProto:
    m = _model(_swish(), [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    m.ir_version = 0
    return m


def _ir3_initializer_not_in_inputs() -> onnx.ModelProto:
    b = numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")
    m = _model([helper.make_node("Add", ["x", "b"], ["y"])], [_vi("x", [2, 3])], [_vi("y", [2, 3])], opset=8,
               initializers=(b,))
    m.ir_version = 3
    return m


def _unsorted_nodes() -> onnx.ModelProto:
    return _model(list(reversed(_swish())), [_vi("x", [2, 3])], [_vi("y", [2, 3])])


def _local_function() -> onnx.ModelProto:
    body = [helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("Mul", ["a", "s"], ["b"])]
    fn = helper.make_function("local", "Swish", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("Swish", ["x"], ["y"], domain="local", name="act")], "g",
                              [_vi("x", [2, 3])], [_vi("y", None)])
    return helper.make_model(graph, functions=[fn],
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


RELAXED: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "shapeless output": (_shapeless_output, "shapeless-graph-io"),
    "shapeless input": (_shapeless_input, "shapeless-graph-io"),
    "shapeless int output": (_shapeless_int_output, "shapeless-graph-io"),
    "output without a type": (_untyped_output, "untyped-graph-output"),
    "unnamed graph": (_unnamed_graph, "unnamed-graph"),
    "unset ir_version": (_unset_ir_version, "unset-ir-version"),
    "ir 3 initializer not in inputs": (_ir3_initializer_not_in_inputs, "initializer-not-in-inputs"),
    "unsorted nodes": (_unsorted_nodes, "unsorted-nodes"),
}


@pytest.mark.parametrize("case", sorted(RELAXED))
def test_relaxed_rule_reads_and_matches_onnxruntime(case: str) -> None:
    build, relaxation = RELAXED[case]
    model = build()
    with pytest.raises(onnx.checker.ValidationError):  # strict onnx rejects it: the frontend is what relaxes
        onnx.checker.check_model(model)
    _, applied = checkable(model, topological_order(model.graph, "m"))
    assert relaxation in applied
    _matches_ort(model, {"x": X})


def test_shapeless_output_shape_is_inferred() -> None:
    model = read_onnx(_shapeless_output())
    assert model.results[0].outputs[0].shape.dims == (2, 3)
    assert str(model.results[0].outputs[0].element_type) == "f32"


def test_shapeless_output_on_the_x86_target_matches_onnxruntime() -> None:
    pytest.importorskip("snippets_x86_64")
    _matches_ort(_shapeless_output(), {"x": X}, target="x86_64_avx512")


def test_output_with_undefined_element_type_reads_like_openvino() -> None:
    # onnxruntime refuses elem_type UNDEFINED (OpenVINO reads it): the oracle is the same graph with the type set.
    model = _model(_swish(), [_vi("x", [2, 3])], [_vi("y", None, TensorProto.UNDEFINED)])
    _matches_ort(model, {"x": X}, oracle=_shapeless_output())


def test_model_local_function_is_inlined() -> None:
    model = _local_function()
    _matches_ort(model, {"x": X})
    assert [n.type_name for n in read_onnx(model).get_ordered_ops()] == ["Parameter", "Sigmoid", "Multiply", "Result"]


# --- idioms the checker already accepts, pinned against onnxruntime -------------------------------------------
def _output_is_input() -> onnx.ModelProto:
    return _model(_swish(), [_vi("x", [2, 3])], [_vi("y", [2, 3]), _vi("x", [2, 3])])


def _output_is_initializer() -> onnx.ModelProto:
    c = numpy_helper.from_array(np.arange(3, dtype=np.float32), "c")
    return _model(_swish(), [_vi("x", [2, 3])], [_vi("y", [2, 3]), _vi("c", [3])], initializers=(c,))


def _wrong_value_info() -> onnx.ModelProto:
    m = _model(_swish(), [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    m.graph.value_info.extend([_vi("s", [9]), onnx.ValueInfoProto(name="unused")])
    return m


def _wrong_declared_output_shape() -> onnx.ModelProto:
    return _model(_swish(), [_vi("x", [2, 3])], [_vi("y", [5, 7])])


def _empty_doc_strings_and_metadata() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["y"], doc_string="")]
    m = _model(nodes, [_vi("x", [2, 3])], [_vi("y", ["N", "K"])], doc_string="", producer_name="pytorch")
    helper.set_model_props(m, {"author": ""})
    return m


def _ai_onnx_domain_and_extra_opsets() -> onnx.ModelProto:
    graph = helper.make_graph(_swish(), "g", [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def _unused_input_and_initializer() -> onnx.ModelProto:
    u = numpy_helper.from_array(np.ones(4, np.float32), "u")
    return _model(_swish(), [_vi("x", [2, 3]), _vi("unused", [4])], [_vi("y", [2, 3])], initializers=(u,))


ACCEPTED = {
    "graph output that is a graph input": _output_is_input,
    "graph output that is an initializer": _output_is_initializer,
    "value_info that disagrees or has no type": _wrong_value_info,
    "declared output shape that is wrong": _wrong_declared_output_shape,
    "empty doc strings, metadata, dim_params": _empty_doc_strings_and_metadata,
    "ai.onnx domain and unused opset imports": _ai_onnx_domain_and_extra_opsets,
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_accepted_idiom_matches_onnxruntime(case: str) -> None:
    _matches_ort(ACCEPTED[case](), {"x": X})


def test_unused_graph_input_matches_onnxruntime() -> None:
    _matches_ort(_unused_input_and_initializer(), {"x": X, "unused": np.zeros(4, np.float32)})


def test_initializer_listed_as_input_is_a_constant_like_openvino() -> None:
    # onnxruntime lets a caller override such a default; snippets (like OpenVINO) folds it as a constant, and
    # says so when it is fed.
    b = numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")
    model = _model([helper.make_node("Add", ["x", "b"], ["y"])], [_vi("x", [2, 3]), _vi("b", [3])],
                   [_vi("y", [2, 3])], initializers=(b,))
    _matches_ort(model, {"x": X})
    cm = compile_model(read_onnx(model), target="reference")
    assert cm.input_names == ["x"]
    with pytest.raises(InputError, match="unknown input 'b'"):
        cm({"x": X, "b": np.zeros(3, np.float32)})


# --- what stays rejected ----------------------------------------------------------------------------------------
def _shapeless(nodes: list[onnx.NodeProto], inputs: list[Any], *, outputs: list[Any] | None = None,
               initializers: tuple[Any, ...] = (), opset_domains: tuple[str, ...] = ()) -> onnx.ModelProto:
    """A malformed model that also has a shapeless output: relaxing the shape rule must not hide the fault."""
    graph = helper.make_graph(nodes, "g", inputs, outputs or [_vi("y", None)], initializer=list(initializers))
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in opset_domains]
    return helper.make_model(graph, opset_imports=opsets)


ONE = numpy_helper.from_array(np.ones(3, np.float32), "c")
MALFORMED = {
    "two nodes assign one name (SSA)": (
        _shapeless([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])],
                   [_vi("x", [2, 3])]), ModelFormatError, "single static assignment"),
    "a node assigns a graph input (SSA)": (
        _shapeless([helper.make_node("Relu", ["x"], ["x"]), helper.make_node("Neg", ["x"], ["y"])],
                   [_vi("x", [2, 3])]), ModelFormatError, "single static assignment"),
    "duplicate graph input names": (
        _shapeless([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, 3]), _vi("x", [2, 3])]),
        ModelFormatError, "'x' has been used as graph input names multiple times"),
    "duplicate initializer names": (
        _shapeless([helper.make_node("Relu", ["c"], ["y"])], [], initializers=(ONE, ONE)),
        ModelFormatError, "initializer name is not unique"),
    "unknown op domain": (
        _shapeless([helper.make_node("Relu", ["x"], ["y"], domain="foo.bar", name="r")], [_vi("x", [2, 3])]),
        UnsupportedOpError, "op domain 'foo.bar'"),
    "input nothing defines": (
        _shapeless([helper.make_node("Relu", ["ghost"], ["y"], name="r")], [_vi("x", [2, 3])]),
        ModelFormatError, "node 'r' (Relu) reads 'ghost', which no node, initializer or graph input defines"),
    "cycle": (
        _shapeless([helper.make_node("Relu", ["y"], ["h"], name="a"), helper.make_node("Relu", ["h"], ["y"], name="b")],
                   [_vi("x", [2, 3])]), ModelFormatError, "cycle: nodes 'a' (Relu), 'b' (Relu)"),
    "wrong input count": (
        _shapeless([helper.make_node("Relu", ["x", "x"], ["y"])], [_vi("x", [2, 3])]),
        ModelFormatError, "input size 2 not in range"),
    "unknown attribute": (
        _shapeless([helper.make_node("Relu", ["x"], ["y"], alpah=1.0)], [_vi("x", [2, 3])]),
        ModelFormatError, "Unrecognized attribute: alpah"),
    "graph input without a type": (
        _shapeless([helper.make_node("Relu", ["x"], ["y"])], [onnx.ValueInfoProto(name="x")]),
        ModelFormatError, "'type' of 'value_info' is required"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_model_is_still_rejected(case: str) -> None:
    model, error, fragment = MALFORMED[case]
    with pytest.raises(error) as e:
        read_onnx(model)
    assert fragment in str(e.value)


def test_graph_input_without_type_is_a_format_error_without_the_checker() -> None:
    model, _, _ = MALFORMED["graph input without a type"]
    with pytest.raises(ModelFormatError, match="graph input 'x' has no element type"):
        read_onnx(model, check=False)


def test_caller_model_proto_is_not_modified() -> None:
    model = _unsorted_nodes()
    model.graph.name = ""
    before = model.SerializeToString()
    read_onnx(model)
    assert model.SerializeToString() == before


def test_sorted_model_is_checked_as_is() -> None:
    model = _model(_swish(), [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    checked, applied = checkable(model, topological_order(model.graph, "m"))
    assert checked is model and applied == []


@pytest.mark.parametrize(("ir_version", "opset"), [(3, 8), (4, 9), (7, 13), (8, 17), (10, 21)])
def test_ir_version_and_opset_combinations_match_onnxruntime(ir_version: int, opset: int) -> None:
    b = numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")
    inputs = [_vi("x", [2, 3])] + ([_vi("b", [3])] if ir_version < 4 else [])
    nodes = [*_swish("x", "h"), helper.make_node("Add", ["h", "b"], ["y"])]
    model = _model(nodes, inputs, [_vi("y", [2, 3])], opset=opset, initializers=(b,))
    model.ir_version = ir_version
    _matches_ort(model, {"x": X})
