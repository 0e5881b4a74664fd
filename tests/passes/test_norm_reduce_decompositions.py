"""LayerNormDecomposition and GraphReduceDecomposition: the decomposed body as text, and its values against
numpy float64 formulas written here, on static and dynamic last dims."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.ir import OPS, Model, evaluate_model
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.passes.graph_reduce_decomposition import GraphReduceDecomposition
from snippets_core.passes.layer_norm_decomposition import LayerNormDecomposition


def ln_body(shape, axis=-1, bias=True) -> Model:  # type: ignore[no-untyped-def]
    x = Parameter("f32", shape, name="x")
    n = 8
    scale = Constant(np.linspace(0.5, 1.5, n, dtype=np.float32), name="gamma")
    args = [x, scale] + ([Constant(np.linspace(-1, 1, n, dtype=np.float32), name="beta")] if bias else [])
    ln = OPS["LayerNormalization"](*args, axis=axis, epsilon=1e-5, name="ln")
    return Model([Result(ln, name="out")], [x], name="body")


def np_layer_norm(x: np.ndarray, bias: bool) -> np.ndarray:
    t = x.astype(np.float64)
    mean = t.mean(-1, keepdims=True)
    y = (t - mean) / np.sqrt(((t - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * np.linspace(0.5, 1.5, 8)
    return y + np.linspace(-1, 1, 8) if bias else y


def test_layer_norm_decomposition_text(dump, golden):
    m = ln_body([2, 8])
    assert LayerNormDecomposition().run(m) is True
    assert dump(m) == golden("""
        x = Parameter() -> f32[2,8]
        ln/sum = SnippetsReduceSum(x) {axis=1} -> f32[2,1]
        ln/mean/inv_count = Constant() {value=[0.125]} -> f32[]
        ln/mean = Multiply(ln/sum, ln/mean/inv_count) -> f32[2,1]
        ln/centered = Subtract(x, ln/mean) -> f32[2,8]
        ln/square = Multiply(ln/centered, ln/centered) -> f32[2,8]
        ln/sum_square = SnippetsReduceSum(ln/square) {axis=1} -> f32[2,1]
        ln/variance/inv_count = Constant() {value=[0.125]} -> f32[]
        ln/variance = Multiply(ln/sum_square, ln/variance/inv_count) -> f32[2,1]
        ln/epsilon = Constant() {value=[1e-05]} -> f32[]
        ln/add_epsilon = Add(ln/variance, ln/epsilon) -> f32[2,1]
        ln/inv_std = PowerStatic(ln/add_epsilon) {power=-0.5} -> f32[2,1]
        ln/normalized = Multiply(ln/centered, ln/inv_std) -> f32[2,8]
        gamma = Constant() {value=[0.5,0.642857,0.785714,0.928571,1.07143,1.21429,1.35714,1.5]} -> f32[8]
        ln/scale = Multiply(ln/normalized, gamma) -> f32[2,8]
        beta = Constant() {value=[-1,-0.714286,-0.428571,-0.142857,0.142857,0.428571,0.714286,1]} -> f32[8]
        ln = Add(ln/scale, beta) -> f32[2,8]
        out = Result(ln) -> f32[2,8]
    """)
    assert LayerNormDecomposition().run(m) is False


@pytest.mark.parametrize("shape, run_shape", [([2, 8], (2, 8)), ([3, 1, 8], (3, 1, 8)), ([None, 8], (5, 8))])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_decomposition_values(shape, run_shape, bias):  # type: ignore[no-untyped-def]
    m = ln_body(shape, bias=bias)
    x = (np.random.default_rng(0).standard_normal(run_shape) + 50).astype(np.float32)  # a large mean
    assert LayerNormDecomposition().run(m) is True
    assert not any(n.type_name == "LayerNormalization" for n in m.get_ordered_ops())
    np.testing.assert_allclose(evaluate_model(m, {"x": x})["out"], np_layer_norm(x, bias), rtol=1e-4, atol=1e-4)


def test_layer_norm_over_other_axes_is_left_alone():
    m = ln_body([2, 3, 8], axis=1)
    assert LayerNormDecomposition().run(m) is False


def reduce_body(op: str, shape, axes, keep_dims: bool) -> Model:  # type: ignore[no-untyped-def]
    x = Parameter("f32", shape, name="x")
    red = OPS[op](x, Constant(np.array(axes, np.int64), name="axes"), keep_dims=keep_dims, name="red")
    return Model([Result(red, name="out")], [x], name="body")


NP_REDUCE = {
    "ReduceMean": lambda t, kd: t.mean(-1, keepdims=kd),
    "ReduceMin": lambda t, kd: t.min(-1, keepdims=kd),
    "ReduceL2": lambda t, kd: np.sqrt((t * t).sum(-1, keepdims=kd)),
}


@pytest.mark.parametrize("op", list(NP_REDUCE))
@pytest.mark.parametrize("shape, run_shape", [([2, 3, 7], (2, 3, 7)), ([4, None], (4, 19))])
@pytest.mark.parametrize("keep_dims", [True, False])
def test_graph_reduce_decomposition_values(op, shape, run_shape, keep_dims):  # type: ignore[no-untyped-def]
    m = reduce_body(op, shape, [-1], keep_dims)
    assert GraphReduceDecomposition().run(m) is True
    types = {n.type_name for n in m.get_ordered_ops()}
    assert op not in types and types & {"SnippetsReduceSum", "SnippetsReduceMax"}
    x = np.random.default_rng(1).standard_normal(run_shape).astype(np.float32)
    want = NP_REDUCE[op](x.astype(np.float64), keep_dims)
    np.testing.assert_allclose(evaluate_model(m, {"x": x})["out"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, axes", [("ReduceMean", [1]), ("ReduceMean", [1, 2]), ("ReduceSum", [-1])])
def test_graph_reduce_decomposition_leaves_the_rest(op, axes):  # type: ignore[no-untyped-def]
    # other axes are not lowered; ReduceMax/ReduceSum are ReduceToSnippetsReduce's
    assert GraphReduceDecomposition().run(reduce_body(op, [2, 3, 7], axes, True)) is False


@pytest.mark.parametrize("axis", [0, 1, -2])
def test_move_softmax_axis_last(axis):  # type: ignore[no-untyped-def]
    from snippets_core.passes.move_softmax_axis_last import MoveSoftmaxAxisLast

    x = Parameter("f32", [2, 3, 5], name="x")
    m = Model([Result(OPS["Softmax"](x, axis=axis, name="sm"), name="out")], [x], name="m")
    assert MoveSoftmaxAxisLast().run(m) is True
    assert [n.type_name for n in m.get_ordered_ops() if n.type_name in ("Softmax", "Transpose")] == [
        "Transpose", "Softmax", "Transpose"]
    (sm,) = [n for n in m.get_ordered_ops() if n.type_name == "Softmax"]
    assert sm.axis == 2
    assert MoveSoftmaxAxisLast().run(m) is False  # now on the last axis
    v = np.random.default_rng(4).standard_normal((2, 3, 5)).astype(np.float32)
    t = v.astype(np.float64)
    e = np.exp(t - t.max(axis, keepdims=True))
    np.testing.assert_allclose(evaluate_model(m, {"x": v})["out"], e / e.sum(axis, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceL2"])
@pytest.mark.parametrize("shape, axes, keep_dims, rewritten", [
    ([2, 3, 4, 5], [2, 3], True, True),      # a global pool: one row per channel
    ([2, 3, 4, 5], [-1, -2], False, True),
    ([2, 3, 4, 5], [3], False, True),
    ([None, 3, 4, 5], [1, 2, 3], True, True),  # dynamic leading dim copied by special_zero
    ([2, 3, 4, 5], [3], True, False),         # already a row reduction
    ([2, 3, 4, 5], [1], True, False),         # an inner axis: numpy reduces it faster than a transposed copy
])
def test_move_reduction_axes_last(op, shape, axes, keep_dims, rewritten):  # type: ignore[no-untyped-def]
    from snippets_core.passes.move_reduction_axes_last import MoveReductionAxesLast

    x = Parameter("f32", shape, name="x")
    red = OPS[op](x, Constant(np.array(axes, np.int64)), keep_dims=keep_dims, name="red")
    m = Model([Result(red, name="out")], [x], name="m")
    assert MoveReductionAxesLast().run(m) is rewritten
    if rewritten:
        (row,) = [n for n in m.get_ordered_ops() if n.type_name == op]
        assert row.keep_dims and [int(a) for a in row.inputs[1].source.node.value] == [-1]
        assert MoveReductionAxesLast().run(m) is False
    v = np.random.default_rng(5).standard_normal([2 if d is None else d for d in shape]).astype(np.float32)
    got = evaluate_model(m, {"x": v})["out"]
    t = v.astype(np.float64)
    ax = tuple(a % len(shape) for a in axes)
    want = {"ReduceMean": lambda: t.mean(ax, keepdims=keep_dims), "ReduceMax": lambda: t.max(ax, keepdims=keep_dims),
            "ReduceL2": lambda: np.sqrt((t * t).sum(ax, keepdims=keep_dims))}[op]()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
