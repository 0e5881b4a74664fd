"""Shape-only ops between kernels: folded at compile time when they depend on no input, numpy views when they
reshape data of static shapes (no reference step, no copy); values checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import snippets_core


def _merge_heads_model(static: bool) -> bytes:
    """x [B, S, 4, 8] -> Reshape to [B, S, 32] with the shape computed by Shape/Gather/Unsqueeze/Concat (as
    TorchScript exports it), then Relu."""
    b, s = (2, 5) if static else ("batch", "sequence")
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "i0"], ["d0"], axis=0),
             helper.make_node("Gather", ["shape", "i1"], ["d1"], axis=0),
             helper.make_node("Unsqueeze", ["d0", "ax0"], ["u0"]),
             helper.make_node("Unsqueeze", ["d1", "ax0"], ["u1"]),
             helper.make_node("Concat", ["u0", "u1", "hidden"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    inits = {"i0": np.int64(0), "i1": np.int64(1), "ax0": np.array([0], np.int64), "hidden": np.array([32], np.int64)}
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, 4, 8])
    graph = helper.make_graph(nodes, "merge_heads", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, s, 32])],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_static_shape_arithmetic_is_folded_and_the_reshape_is_a_view():
    cm = snippets_core.compile_model(_merge_heads_model(static=True), target="reference")
    assert [(op, where) for _, op, where in cm.placement()] == [("Reshape", "view"), ("Subgraph", "reference")]
    x = np.random.default_rng(0).standard_normal((2, 5, 4, 8)).astype(np.float32)
    np.testing.assert_array_equal(cm({"x": x})["y"], np.maximum(x.reshape(2, 5, 32), 0))
    assert "Reshape x1" in cm.describe()


def test_the_view_shares_the_input_memory():
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "r",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
                              initializer=[numpy_helper.from_array(np.array([3, 4], np.int64), "shape")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    cm = snippets_core.compile_model(proto, target="reference")
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    y = cm({"x": x})["y"]
    assert y.shape == (3, 4) and np.shares_memory(x, y)


def test_dynamic_shape_chain_of_a_view_is_dropped_and_matches_the_reference_evaluator():
    """The Reshape's output dims are the input's dim symbols: it is a view that reads no shape input, so the
    Shape/Gather/Unsqueeze/Concat chain before it is dead and not run per call."""
    from onnx.reference import ReferenceEvaluator

    proto = _merge_heads_model(static=False)
    cm = snippets_core.compile_model(proto, target="reference")
    assert [(op, where) for _, op, where in cm.placement()] == [("Reshape", "view"), ("Subgraph", "reference")]
    oracle = ReferenceEvaluator(proto)
    for b, s in ((1, 3), (2, 7), (3, 1), (1, 197)):
        x = np.random.default_rng(b * s).standard_normal((b, s, 4, 8)).astype(np.float32)
        np.testing.assert_array_equal(cm({"x": x})["y"], oracle.run(None, {"x": x})[0])
        assert [op for _, op, _, _ in cm.last_run_stats.steps] == ["Reshape", "Subgraph"]


def test_dynamic_shape_chain_read_by_a_computing_op_is_folded_per_shape():
    """A shape chain that feeds an Expand (no view) is computed once per input shape, from the input's shape: the
    Expand of the constant is the one folded step left, and the chain's other nodes leave the plan."""
    from onnx.reference import ReferenceEvaluator

    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "i0"], ["d0"], axis=0),
             helper.make_node("Unsqueeze", ["d0", "ax0"], ["u0"]),
             helper.make_node("Concat", ["u0", "hidden"], ["target"], axis=0),
             helper.make_node("Expand", ["bias", "target"], ["e"]),
             helper.make_node("Add", ["x", "e"], ["y"])]
    inits = {"i0": np.int64(0), "ax0": np.array([0], np.int64), "hidden": np.array([8], np.int64),
             "bias": np.arange(8, dtype=np.float32)}
    graph = helper.make_graph(nodes, "expand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    cm = snippets_core.compile_model(proto, target="reference")
    assert [(op, where) for _, op, where in cm.placement()] == [("Broadcast", "folded"), ("Subgraph", "reference")]
    oracle = ReferenceEvaluator(proto)
    for n in (1, 5, 33, 5, 1):
        x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
        np.testing.assert_allclose(cm({"x": x})["y"], oracle.run(None, {"x": x})[0], rtol=1e-6)
    assert "ShapeOf, Gather, Unsqueeze, Concat, Broadcast; 3 shape(s) computed, 3 cached" in cm.describe()


def test_split_runs_as_slices():
    graph = helper.make_graph([helper.make_node("Split", ["x", "parts"], ["a", "b", "c"], axis=-1)], "s",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, k])
                               for n, k in (("a", 4), ("b", 5), ("c", 3))],
                              initializer=[numpy_helper.from_array(np.array([4, 5, 3], np.int64), "parts")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    cm = snippets_core.compile_model(proto, target="reference")
    assert [(op, where) for _, op, where in cm.placement()] == [("VariadicSplit", "view")]
    x = np.random.default_rng(2).standard_normal((2, 3, 12)).astype(np.float32)
    got = cm({"x": x})
    for name, want in zip("abc", np.split(x, [4, 9], axis=-1)):
        np.testing.assert_array_equal(got[name], want)
        assert got[name].flags.c_contiguous


def test_split_along_a_static_axis_of_a_dynamic_shape_runs_as_slices():
    """A QKV projection's split: [batch, seq, 12] into 4 + 5 + 3 along the static last axis, at several shapes."""
    from onnx.reference import ReferenceEvaluator

    graph = helper.make_graph([helper.make_node("Split", ["x", "parts"], ["a", "b", "c"], axis=-1)], "s",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 12])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", k])
                               for n, k in (("a", 4), ("b", 5), ("c", 3))],
                              initializer=[numpy_helper.from_array(np.array([4, 5, 3], np.int64), "parts")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    cm = snippets_core.compile_model(proto, target="reference")
    assert [(op, where) for _, op, where in cm.placement()] == [("VariadicSplit", "view")]
    oracle = ReferenceEvaluator(proto)
    for b, t in ((1, 1), (2, 7), (3, 128)):
        x = np.random.default_rng(t).standard_normal((b, t, 12)).astype(np.float32)
        got = cm({"x": x})
        for name, want in zip("abc", oracle.run(None, {"x": x})):
            np.testing.assert_array_equal(got[name], want)
            assert got[name].flags.c_contiguous


def _split_heads_model() -> bytes:
    """x [batch, seq, 32] -> Reshape [0, 0, 4, 8] -> Relu: the output dims are the input's dim symbols and 4, 8."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "split_heads",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4, 8])],
                              initializer=[numpy_helper.from_array(np.array([0, 0, 4, 8], np.int64), "shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_dynamic_reshape_to_the_input_dim_symbols_is_a_view():
    """[batch, seq, 32] -> [batch, seq, 4, 8] reads batch and seq from the input per call: a view, no reference step."""
    cm = snippets_core.compile_model(_split_heads_model(), target="reference")
    assert ("Reshape", "view") in [(op, where) for _, op, where in cm.placement()]
    for b, s in ((1, 3), (2, 7), (3, 1)):
        x = np.random.default_rng(b).standard_normal((b, s, 32)).astype(np.float32)
        np.testing.assert_array_equal(cm({"x": x})["y"], np.maximum(x.reshape(b, s, 4, 8), 0))


def test_the_dynamic_view_shares_the_input_memory_and_bad_input_is_a_typed_error():
    from snippets_core.errors import SnippetsError

    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "r",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2, 3])],
                              initializer=[numpy_helper.from_array(np.array([0, 2, 3], np.int64), "shape")])
    cm = snippets_core.compile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                                     target="reference")
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    y = cm({"x": x})["y"]
    assert y.shape == (4, 2, 3) and np.shares_memory(x, y)
    with pytest.raises(SnippetsError):
        cm({"x": np.zeros((4, 5), np.float32)})


def test_a_batch_only_dynamic_view_checks_the_inferred_dim():
    """[n, 6, 1, 1] -> Flatten -> [n, 6] (a classifier's): numpy infers n (one dim from the input), one compare checks
    it; an input whose size or rank contradicts the model's dims goes to the reference, a typed error."""
    from snippets_core.errors import SnippetsError
    from snippets_core.runtime.shape_steps import view_executor

    graph = helper.make_graph([helper.make_node("Flatten", ["x"], ["y"], axis=1)], "f",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6, 1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 6])])
    cm = snippets_core.compile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                                     target="reference")
    assert [(op, where) for _, op, where in cm.placement()] == [("Reshape", "view")]  # (the frontend's Flatten)
    for n in (0, 1, 3):
        x = np.random.default_rng(n).standard_normal((n, 6, 1, 1)).astype(np.float32)
        y = cm({"x": x})["y"]
        assert y.shape == (n, 6) and np.array_equal(y, x.reshape(n, 6))
    run = view_executor(cm._steps[0].node)
    x = np.arange(12, dtype=np.float32).reshape(2, 6, 1, 1)
    assert np.shares_memory(run([x])[0], x)
    for bad in (np.zeros((2, 5, 1, 1), np.float32), np.zeros((2, 12, 1, 1), np.float32), np.zeros((2, 6), np.float32)):
        with pytest.raises(SnippetsError):
            run([bad])
