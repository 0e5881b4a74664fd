"""Bad ONNX input gives typed errors whose messages name the file, node, op and attribute at fault."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from snippets_core import read_onnx
from snippets_core.errors import ModelFormatError, SnippetsError, UnsupportedOpError

LIGHT = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"


def _model(nodes, inputs, outputs, opset=17, initializers=()):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _f32(name, shape):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.onnx"
    with pytest.raises(ModelFormatError, match="nowhere.onnx: no such ONNX file"):
        read_onnx(str(path))


def test_truncated_file_names_the_file(tmp_path: Path) -> None:
    data = LIGHT.read_bytes()
    path = _write(tmp_path, "truncated.onnx", data[: len(data) // 2])
    with pytest.raises(ModelFormatError, match=r"truncated\.onnx: not a valid ONNX protobuf"):
        read_onnx(path)


def test_garbage_bytes(tmp_path: Path) -> None:
    path = _write(tmp_path, "garbage.onnx", bytes(range(256)) * 8)
    with pytest.raises(ModelFormatError, match=r"garbage\.onnx"):
        read_onnx(path)


def test_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFormatError, match=r"empty\.onnx: the file is empty"):
        read_onnx(_write(tmp_path, "empty.onnx", b""))


def test_protobuf_that_is_not_a_model(tmp_path: Path) -> None:
    tensor = onnx.numpy_helper.from_array(np.ones(4, np.float32), "t").SerializeToString()
    with pytest.raises(ModelFormatError, match="not"):
        read_onnx(_write(tmp_path, "tensor.onnx", tensor))


def test_wrong_python_type() -> None:
    with pytest.raises(ModelFormatError, match="expects a path, bytes or onnx.ModelProto, got int"):
        read_onnx(42)


def test_unknown_op_names_node_and_op(tmp_path: Path) -> None:
    m = _model([helper.make_node("FrobnicateAll", ["x"], ["y"], name="frob1")], [_f32("x", [2])], [_f32("y", [2])])
    path = _write(tmp_path, "unknown.onnx", m.SerializeToString())
    with pytest.raises(UnsupportedOpError) as e:
        read_onnx(path)
    assert "unknown.onnx" in str(e.value) and "'frob1'" in str(e.value) and "FrobnicateAll" in str(e.value)


def test_onnx_op_outside_the_op_set() -> None:
    m = _model([helper.make_node("Det", ["x"], ["y"], name="det")], [_f32("x", [3, 3])], [_f32("y", [])])
    with pytest.raises(UnsupportedOpError, match=r"node 'det' \(Det\): ONNX op Det is not supported"):
        read_onnx(m)


def test_unnamed_node_is_named_by_op_type_and_index() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Det", ["r"], ["y"])]
    m = _model(nodes, [_f32("x", [3, 3])], [_f32("y", [])])
    with pytest.raises(UnsupportedOpError, match=r"node 'Det_1' \(Det\)"):
        read_onnx(m)


def test_custom_domain_op() -> None:
    node = helper.make_node("Gelu", ["x"], ["y"], name="g", domain="com.microsoft")
    graph = helper.make_graph([node], "g", [_f32("x", [2])], [_f32("y", [2])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(UnsupportedOpError, match=r"node 'g' \(Gelu\): op domain 'com.microsoft'"):
        read_onnx(m)


@pytest.mark.parametrize(("node", "attr"), [
    (helper.make_node("Gelu", ["x"], ["y"], name="n", approximate="fast"), "approximate"),
    (helper.make_node("MaxPool", ["x"], ["y"], name="n", kernel_shape=[1, 1], auto_pad="SOMETIMES"), "auto_pad"),
    (helper.make_node("MaxPool", ["x"], ["y"], name="n", kernel_shape=[1, 1], storage_order=2), "storage_order"),
    (helper.make_node("DepthToSpace", ["x"], ["y"], name="n", blocksize=1, mode="XYZ"), "mode"),
])
def test_unsupported_attribute_value_names_the_attribute(node: onnx.NodeProto, attr: str) -> None:
    m = _model([node], [_f32("x", [1, 1, 2, 2])], [_f32("y", [1, 1, 2, 2])], opset=20)
    with pytest.raises(UnsupportedOpError) as e:
        read_onnx(m)
    assert f"node 'n' ({node.op_type})" in str(e.value) and f"attribute '{attr}'" in str(e.value)


def test_training_batch_norm_is_refused() -> None:
    ins = [_f32("x", [1, 2, 2, 2])] + [_f32(n, [2]) for n in ("s", "b", "m", "v")]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn", training_mode=1)
    with pytest.raises(UnsupportedOpError, match=r"node 'bn' \(BatchNormalization\): attribute 'training_mode'"):
        read_onnx(_model([node], ins, [_f32("y", [1, 2, 2, 2])], opset=15))


def test_shape_conflict_is_a_format_error_naming_the_node() -> None:
    node = helper.make_node("Add", ["a", "b"], ["y"], name="adder")
    m = _model([node], [_f32("a", [2, 3]), _f32("b", [4])], [_f32("y", [2, 3])])
    with pytest.raises(ModelFormatError, match=r"node 'adder' \(Add\)"):
        read_onnx(m)


def test_checker_complaint_becomes_a_format_error() -> None:
    # A node reads a tensor that nothing produces: the ONNX checker rejects the graph.
    m = _model([helper.make_node("Relu", ["ghost"], ["y"], name="r")], [_f32("x", [2])], [_f32("y", [2])])
    with pytest.raises(ModelFormatError, match="ghost"):
        read_onnx(m)


def test_unsupported_element_type_names_the_input() -> None:
    x = helper.make_tensor_value_info("words", TensorProto.STRING, [2])
    m = _model([helper.make_node("Identity", ["words"], ["y"])], [x],
               [helper.make_tensor_value_info("y", TensorProto.STRING, [2])])
    with pytest.raises(UnsupportedOpError, match="graph input 'words' has ONNX element type STRING"):
        read_onnx(m)


def test_pre_opset_7_semantics_outside_the_handled_set() -> None:
    # Concat-1 (opset 1..3) has an optional axis; it is not among the handled legacy versions.
    node = helper.make_node("Concat", ["a", "b"], ["y"], name="cat", axis=0)
    m = _model([node], [_f32("a", [2]), _f32("b", [2])], [_f32("y", [4])], opset=3)
    with pytest.raises(UnsupportedOpError, match=r"node 'cat' \(Concat\): opset 3 selects the pre-opset-7"):
        read_onnx(m)


def test_every_error_is_a_snippets_error(tmp_path: Path) -> None:
    for data in (b"\x08", b"\xff" * 10, LIGHT.read_bytes()[:100]):
        with pytest.raises(SnippetsError):
            read_onnx(data)


def test_function_body_with_an_unsupported_op_names_both_nodes() -> None:
    # Bernoulli's ONNX function body draws with RandomUniformLike, which is not in the op set
    node = helper.make_node("Bernoulli", ["x"], ["y"], name="bern")
    with pytest.raises(UnsupportedOpError, match=r"node 'bern/RandomUniformLike_\d+' \(RandomUniformLike\)"):
        read_onnx(_model([node], [_f32("x", [4])], [_f32("y", [4])], opset=21))


@pytest.mark.parametrize("check", [True, False])
def test_every_unsupported_op_is_reported_at_once(check: bool) -> None:
    nodes = [
        helper.make_node("Det", ["x"], ["a"], name="det1"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Det", ["x"], ["c"], name="det2"),
        helper.make_node("FrobnicateAll", ["b"], ["d"], name="frob"),
        helper.make_node("Gelu", ["c"], ["e"], name="ms_gelu", domain="com.microsoft"),
    ]
    graph = helper.make_graph(nodes, "g", [_f32("x", [3, 3])], [_f32("d", None), _f32("e", None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(UnsupportedOpError) as e:
        read_onnx(m, check=check)
    msg = str(e.value)
    assert "3 op types in 4 nodes are not supported" in msg
    assert "Det x2 ('det1', 'det2')" in msg and "FrobnicateAll x1 ('frob')" in msg
    assert "Gelu (domain 'com.microsoft') x1 ('ms_gelu')" in msg
    assert "`snippets ops`" in msg and "docs/onnx_conformance.md" in msg
    assert e.value.unsupported_ops == (("", "Det", "det1"), ("", "Det", "det2"), ("", "FrobnicateAll", "frob"),
                                       ("com.microsoft", "Gelu", "ms_gelu"))


def test_single_unsupported_op_points_to_the_supported_list() -> None:
    m = _model([helper.make_node("Det", ["x"], ["y"], name="det")], [_f32("x", [3, 3])], [_f32("y", [])])
    with pytest.raises(UnsupportedOpError, match=r"node 'det' \(Det\): .* listed by `snippets ops`"):
        read_onnx(m)
