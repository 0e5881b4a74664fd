"""Models as torch's exporters write them with dynamic axes load, keep their dims symbolic, fold what the
static dims decide, and match onnxruntime on several (batch, seq) pairs on every core target and x86."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from snippets_core.frontends.onnx import read_onnx
from snippets_core.runtime.compiled_model import compile_model


tlm = sys.modules["snippets_torch_like_models"]  # loaded by conftest.py
ort = pytest.importorskip("onnxruntime")

MODELS = [(kind, exporter) for kind in ("bert", "gpt2") for exporter in ("torchscript", "dynamo")]
PAIRS = [(1, 5), (2, 7), (3, 16)]


TARGETS = sys.modules["snippets_onnx_targets"].TARGETS  # loaded by conftest.py


@pytest.fixture(scope="module")
def protos():  # type: ignore[no-untyped-def]
    return {(k, e): tlm.BUILDERS[k](e) for k, e in MODELS}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("kind", "exporter"), MODELS)
def test_matches_onnxruntime(protos, kind: str, exporter: str, target: str) -> None:  # type: ignore[no-untyped-def]
    proto = protos[(kind, exporter)]
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    cm = compile_model(proto, target)
    for batch, seq in PAIRS:
        feeds = tlm.random_inputs(proto, batch, seq, seed=batch * 100 + seq)
        (want,) = sess.run(None, feeds)
        (got,) = cm(feeds).values()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{kind}/{exporter} on {target} "
                                   f"at batch {batch}, seq {seq}")


@pytest.mark.parametrize(("kind", "exporter"), MODELS)
def test_output_dims_stay_symbolic(protos, kind: str, exporter: str) -> None:  # type: ignore[no-untyped-def]
    b, s = tlm.DIM_NAMES[exporter]
    m = read_onnx(protos[(kind, exporter)])
    assert [str(r.outputs[0].shape) for r in m.results] == [f"[{b},{s},32]"]


@pytest.mark.parametrize(("kind", "exporter"), MODELS)
def test_reshape_targets_from_shape_are_symbolic(protos, kind, exporter) -> None:  # type: ignore[no-untyped-def]
    """Reshape(x, Concat(dim(x, 0), dim(x, 1), 2, 16)) infers [B, S, 2, 16], not [?, ?, ?, ?]."""
    b, s = tlm.DIM_NAMES[exporter]
    m = read_onnx(protos[(kind, exporter)])
    shapes = sorted({str(n.outputs[0].shape) for n in m.get_ordered_ops() if n.type_name == "Reshape"})
    assert shapes == [f"[{b},{s},2,16]", f"[{b},{s},32]"]
    # the attention scores and mask are [B, heads, S, S] / broadcast to it
    scores = [n for n in m.get_ordered_ops() if n.type_name == "Softmax"]
    assert [str(n.outputs[0].shape) for n in scores] == [f"[{b},2,{s},{s}]"]


def test_gpt2_masks_and_positions_are_symbolic(protos) -> None:  # type: ignore[no-untyped-def]
    m = read_onnx(protos[("gpt2", "dynamo")])
    by_type: dict[str, list[str]] = {}
    for n in m.get_ordered_ops():
        by_type.setdefault(n.type_name, []).append(str(n.outputs[0].shape) if n.outputs else "")
    assert by_type["Range"] == ["[s1]"]
    assert by_type["ConstantOfShape"] == ["[s1,s1]"]
    assert "[s0,1,s1,s1]" in by_type["Broadcast"]  # the causal mask expanded to the batch
    # the Slices on that Expand (one used to fail to load: "'NoneType' object cannot be interpreted as an integer")
    assert {x for x in by_type["Slice"] if x.count(",") == 3} == {"[s0,1,s1,s1]"}
    assert by_type["Select"] == ["[s0,2,s1,s1]"]


def test_static_parts_of_shape_subgraphs_fold() -> None:
    """With the hidden size static, each Reshape target Concat(dim(x, 0), dim(x, 1), [2, 16]) copies the input's
    own batch and sequence dims: it folds to the Constant [0, 0, 2, 16] while loading, and no ShapeOf chain is left
    to run."""
    proto = tlm.bert_encoder_layer("torchscript")
    m = read_onnx(proto)
    ops = m.get_ordered_ops()
    targets = [n.inputs[1].source.node for n in ops if n.type_name == "Reshape"]
    assert all(t.type_name == "Constant" for t in targets)
    assert sorted(tuple(t.value.tolist()) for t in targets) == [(0, 0, 2, 16)] * 3 + [(0, 0, 32)]
    assert not [n for n in ops if n.type_name in ("ShapeOf", "Gather", "Concat")]


def test_reshape_targets_of_other_symbols_stay_computed() -> None:
    """A target that is not a copy of the input's own dims ([S, B, 32] from [B, S, 32]) is not folded."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "idx"], ["sb"], axis=0),
             helper.make_node("Concat", ["sb", "hidden"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [helper.make_tensor("idx", TensorProto.INT64, [2], [1, 0]), helper.make_tensor("hidden", TensorProto.INT64,
                                                                                          [1], [32])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    m = read_onnx(proto)
    reshape = next(n for n in m.get_ordered_ops() if n.type_name == "Reshape")
    assert str(reshape.outputs[0].shape) == "[S,B,32]" and reshape.inputs[1].source.node.type_name == "Concat"
    x = np.random.default_rng(0).standard_normal((2, 3, 32)).astype(np.float32)
    (y,) = compile_model(proto, "reference")({"x": x}).values()
    np.testing.assert_array_equal(y, x.reshape(3, 2, 32))


def test_shape_of_static_dims_folds_to_constants() -> None:
    """A model with a static hidden size but dynamic batch: Shape(x)[2] folds to 32 when loading."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["hidden"], axis=0),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Div", ["hidden", "heads"], ["head_dim"]),
        helper.make_node("Unsqueeze", ["head_dim", "axes0"], ["head_dim_1"]),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch_1"]),
        helper.make_node("Concat", ["batch_1", "minus_one", "heads_1", "head_dim_1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [helper.make_tensor(n, TensorProto.INT64, dims, v) for n, dims, v in (
        ("two", [], [2]), ("zero", [], [0]), ("heads", [], [4]), ("axes0", [1], [0]), ("minus_one", [1], [-1]),
        ("heads_1", [1], [4]))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 6, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 6, 4, 8])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    m = read_onnx(proto)
    reshape = next(n for n in m.get_ordered_ops() if n.type_name == "Reshape")
    assert str(reshape.outputs[0].shape) == "[B,6,4,8]"
    kinds = sorted(n.type_name for n in m.get_ordered_ops())
    # hidden // heads became the Constant 8, and the batch read from Shape(x) a copy (0) of the input's own dim
    assert kinds.count("Gather") == 0 and kinds.count("Divide") == 0
    assert reshape.inputs[1].source.node.value.tolist() == [0, -1, 4, 8]
    x = np.random.default_rng(0).standard_normal((3, 6, 32)).astype(np.float32)
    (y,) = compile_model(proto, "reference")({"x": x}).values()
    np.testing.assert_array_equal(y, x.reshape(3, 6, 4, 8))
