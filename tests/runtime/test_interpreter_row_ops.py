"""The ops x86_64_avx512 now fuses (issue 11) run on the interpreter target too, in its Subgraphs, against
numpy float64: every op a tokenizer accepts must run on every target that claims it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import snippets_core

SHAPE = (2, 3, 13)


def _run(nodes, inits, want_shape, opset=18):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(want_shape))],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()
    cm = snippets_core.compile_model(proto, target="interpreter")
    assert any(op == "Subgraph" and where == "interpreter" for _, op, where in cm.placement()), cm.describe()
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    return cm({"x": x})["y"], x.astype(np.float64)


def _ln64(t: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    m = t.mean(-1, keepdims=True)
    return (t - m) / np.sqrt(((t - m) ** 2).mean(-1, keepdims=True) + eps) * g + b


def test_layer_normalization():
    g, b = np.linspace(0.5, 1.5, 13, dtype=np.float32), np.linspace(-1, 1, 13, dtype=np.float32)
    got, t = _run([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
                  {"g": g, "b": b}, SHAPE, opset=17)
    np.testing.assert_allclose(got, _ln64(t, g, b, 1e-5), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("op", "ref"), [
    ("ReduceMean", lambda t: t.mean(-1, keepdims=True)),
    ("ReduceMin", lambda t: t.min(-1, keepdims=True)),
    ("ReduceL2", lambda t: np.sqrt((t * t).sum(-1, keepdims=True))),
])
def test_decomposed_reductions(op, ref):  # type: ignore[no-untyped-def]
    got, t = _run([helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)], {"axes": np.array([-1], np.int64)},
                  SHAPE[:-1] + (1,))
    np.testing.assert_allclose(got, ref(t), rtol=1e-5, atol=1e-6)


def test_where_and_erf_gelu():
    nodes = [helper.make_node("Greater", ["x", "zero"], ["c"]), helper.make_node("Erf", ["x"], ["e"]),
             helper.make_node("Where", ["c", "x", "e"], ["y"])]
    got, t = _run(nodes, {"zero": np.float32(0)}, SHAPE)
    np.testing.assert_allclose(got, np.where(t > 0, t, np.vectorize(math.erf)(t)), rtol=1e-5, atol=1e-6)


def test_softmax_on_an_inner_axis_is_not_rewritten_for_the_interpreter():
    # the interpreter fuses Transposes, and one reading a computed Softmax cannot be lowered: only targets that
    # keep Transposes outside ask for the rewrite (TokenizationConfig.softmax_axis_to_last)
    got, t = _run([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=1)],
                  {}, SHAPE)
    r = np.maximum(t, 0)
    e = np.exp(r - r.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_global_average_pool_rows():
    got, t = _run([helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)],
                  {"axes": np.array([1, 2], np.int64)}, SHAPE[:1])
    np.testing.assert_allclose(got, t.mean((1, 2)), rtol=1e-5, atol=1e-6)


def test_group_normalization_rows():
    s, b = np.linspace(0.5, 1.5, 3, dtype=np.float32), np.linspace(-1, 1, 3, dtype=np.float32)
    got, t = _run([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-5)],
                  {"s": s, "b": b}, SHAPE, opset=21)
    m = t.mean(-1, keepdims=True)
    want = (t - m) / np.sqrt(t.var(-1, keepdims=True) + 1e-5) * s[:, None] + b[:, None]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
