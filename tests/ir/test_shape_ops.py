"""Transpose, Reshape, Squeeze, Unsqueeze, Broadcast, Concat, Split, VariadicSplit, Gather."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.errors import InputError, ShapeInferenceError
from snippets_core.frontends import builder as sb
from snippets_core.ir import Shape
from snippets_core.ir.ops.io import Constant, Parameter
from snippets_core.ir.ops.shape_ops import (
    Broadcast,
    Concat,
    Gather,
    Reshape,
    Split,
    Squeeze,
    Transpose,
    Unsqueeze,
    VariadicSplit,
)


def i64(v):
    return Constant(np.asarray(v, np.int64))


def arange(shape, dtype=np.float32):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


def run(node, *args):
    """Evaluate with the Constant inputs' values filled in after the given data arrays."""
    vals = list(args) + [i.source.node.value for i in node.inputs[len(args):]]
    return node.evaluate(*vals)


# --- Transpose --------------------------------------------------------------------------------------
def test_transpose_values_and_shape():
    x = arange((2, 3, 4))
    node = Transpose(Parameter("f32", [2, 3, 4]), i64([2, 0, 1]))
    assert node.outputs[0].shape == Shape([4, 2, 3])
    (y,) = run(node, x)
    for i, j, k in np.ndindex(2, 3, 4):
        assert y[k, i, j] == x[i, j, k]


def test_transpose_empty_order_reverses():
    node = Transpose(Parameter("f16", [2, None, 4]), i64(np.zeros(0, np.int64)))
    assert node.outputs[0].shape == Shape([4, None, 2])
    (y,) = run(node, arange((2, 3, 4), np.float16))
    assert y.shape == (4, 3, 2) and y.dtype == np.float16 and y[3, 2, 1] == arange((2, 3, 4))[1, 2, 3]


def test_transpose_unknown_order_and_errors():
    assert Transpose(Parameter("f32", [2, 3]), Parameter("i64", [2])).outputs[0].shape == Shape([None, None])
    with pytest.raises(ShapeInferenceError, match="not a permutation"):
        Transpose(Parameter("f32", [2, 3]), i64([0, 0]))
    with pytest.raises(ShapeInferenceError, match="not a permutation"):
        Transpose(Parameter("f32", [2, 3]), i64([0, 1, 2]))


# --- Reshape ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("shape", "target", "special_zero", "out"), [
    ([2, 3, 4], [6, -1], False, [6, 4]),
    ([2, 3, 4], [0, -1], True, [2, 12]),
    ([2, 3, 4], [0, 0, 2, 2], True, [2, 3, 2, 2]),
    ([2, 3, 4], [-1], False, [24]),
    ([2, 0, 4], [0, 8], False, [0, 8]),  # without special_zero a 0 is a zero-sized dim
    ([None, 3, 4], [0, -1], True, [None, 12]),
    ([None, 128, 768], [0, 0, 12, 64], True, [None, 128, 12, 64]),
    ([None, 128, 768], [0, -1, 64], True, [None, 1536, 64]),
    ([None, 3, 4], [-1, 12], False, [None, 12]),
    ([2, None, 4], [0, -1], True, [2, None]),
    ([None, 3, 4], [0, 12], True, [None, 12]),
    ([2, 3, 4], [1, 1, 24], False, [1, 1, 24]),
])
def test_reshape_shapes(shape, target, special_zero, out):
    node = Reshape(Parameter("f32", shape), i64(target), special_zero=special_zero)
    assert node.outputs[0].shape == Shape(out)
    if all(d is not None for d in shape):
        x = arange(shape)
        (y,) = run(node, x)
        assert y.shape == tuple(out)
        np.testing.assert_array_equal(y.ravel(), x.ravel())  # row-major order is kept


def test_reshape_errors():
    p = Parameter("f32", [2, 3, 4])
    with pytest.raises(ShapeInferenceError, match="more than one -1"):
        Reshape(p, i64([-1, -1]))
    with pytest.raises(ShapeInferenceError, match=r"cannot reshape \[2, 3, 4\] to \[5, -1\]"):
        Reshape(p, i64([5, -1]))
    with pytest.raises(ShapeInferenceError, match="cannot reshape"):
        Reshape(p, i64([2, 3]))
    with pytest.raises(ShapeInferenceError, match=r"cannot reshape \[None, 3, 4\] to \[0, 5\]"):
        Reshape(Parameter("f32", [None, 3, 4]), i64([0, 5]), special_zero=True)
    with pytest.raises(ShapeInferenceError, match="input has rank 1"):
        Reshape(Parameter("f32", [4]), i64([2, 0]), special_zero=True)


def test_reshape_unknown_target_keeps_rank():
    assert Reshape(Parameter("f32", [2, 3]), Parameter("i64", [3])).outputs[0].shape == Shape([None] * 3)
    assert Reshape(Parameter("f32", [2, 3]), Parameter("i64", [None])).outputs[0].shape == Shape(None)


# --- Squeeze / Unsqueeze ----------------------------------------------------------------------------
def test_squeeze():
    x = arange((1, 3, 1, 2))
    all_ = Squeeze(Parameter("f32", [1, 3, 1, 2]))
    some = Squeeze(Parameter("f32", [1, 3, 1, 2]), i64([-2]))
    assert all_.outputs[0].shape == Shape([3, 2]) and some.outputs[0].shape == Shape([1, 3, 2])
    assert run(all_, x)[0].shape == (3, 2)
    (y,) = run(some, x)
    np.testing.assert_array_equal(y, x[:, :, 0, :])
    assert Squeeze(Parameter("f32", [None, 3])).outputs[0].shape == Shape(None)
    assert Squeeze(Parameter("f32", [None, 3]), i64([0])).outputs[0].shape == Shape([3])
    with pytest.raises(ShapeInferenceError, match="cannot squeeze axis 1 of size 3"):
        Squeeze(Parameter("f32", [1, 3]), i64([1]))


def test_unsqueeze():
    x = arange((3, 2))
    node = Unsqueeze(Parameter("f32", [3, 2]), i64([0, -1]))
    assert node.outputs[0].shape == Shape([1, 3, 2, 1])
    (y,) = run(node, x)
    np.testing.assert_array_equal(y[0, :, :, 0], x)
    assert Unsqueeze(Parameter("f32", [None]), i64([1])).outputs[0].shape == Shape([None, 1])
    with pytest.raises(ShapeInferenceError, match="repeat an axis"):
        Unsqueeze(Parameter("f32", [3]), i64([0, -3]))
    with pytest.raises(ShapeInferenceError, match="out of range"):
        Unsqueeze(Parameter("f32", [3]), i64([3]))


# --- Broadcast --------------------------------------------------------------------------------------
def test_broadcast_numpy_and_bidirectional():
    x = arange((3, 1))
    num = Broadcast(Parameter("f32", [3, 1]), i64([2, 3, 4]))
    bi = Broadcast(Parameter("f32", [3, 1]), i64([4, 1, 5]), mode="bidirectional")
    assert num.outputs[0].shape == Shape([2, 3, 4]) and bi.outputs[0].shape == Shape([4, 3, 5])
    (y,) = run(num, x)
    for i, j, k in np.ndindex(2, 3, 4):
        assert y[i, j, k] == x[j, 0]
    (z,) = run(bi, x)
    assert z.shape == (4, 3, 5) and z[3, 2, 4] == x[2, 0]
    assert Broadcast(Parameter("f32", [None, 1]), i64([2, 5, 4])).outputs[0].shape == Shape([2, 5, 4])
    assert Broadcast(Parameter("f32", [3]), Parameter("i64", [4])).outputs[0].shape == Shape([None] * 4)
    with pytest.raises(ShapeInferenceError, match="cannot broadcast shape"):
        Broadcast(Parameter("f32", [3, 2]), i64([3, 4]))
    with pytest.raises(ShapeInferenceError, match="cannot broadcast rank 3"):
        Broadcast(Parameter("f32", [1, 1, 2]), i64([2]))
    with pytest.raises(ShapeInferenceError, match="mode"):
        Broadcast(Parameter("f32", [3]), i64([3]), mode="explicit")


# --- Concat / Split ---------------------------------------------------------------------------------
def test_concat():
    a, b = arange((2, 1, 3)), arange((2, 4, 3)) + 100
    node = Concat(Parameter("f32", [2, 1, 3]), Parameter("f32", [2, 4, 3]), axis=-2)
    assert node.outputs[0].shape == Shape([2, 5, 3])
    (y,) = node.evaluate(a, b)
    np.testing.assert_array_equal(y[:, :1], a)
    np.testing.assert_array_equal(y[:, 1:], b)
    assert Concat(Parameter("f32", [None, 2]), Parameter("f32", [3, None]), axis=0).outputs[0].shape == Shape(
        [None, 2])
    assert Concat(Parameter("f32", [2, 2]), Parameter("f32", [3, None]), axis=0).outputs[0].shape == Shape([5, 2])
    with pytest.raises(ShapeInferenceError, match="differ in dim 0"):
        Concat(Parameter("f32", [2, 2]), Parameter("f32", [3, 2]), axis=1)
    with pytest.raises(ShapeInferenceError, match="different ranks"):
        Concat(Parameter("f32", [2, 2]), Parameter("f32", [2]), axis=0)
    with pytest.raises(ShapeInferenceError, match="equal element types"):
        Concat(Parameter("f32", [2]), Parameter("f16", [2]), axis=0)


def test_split():
    x = arange((2, 6))
    node = Split(Parameter("f32", [2, 6]), i64(-1), num_splits=3)
    assert [o.shape for o in node.outputs] == [Shape([2, 2])] * 3
    parts = run(node, x)
    for k, p in enumerate(parts):
        np.testing.assert_array_equal(p, x[:, 2 * k:2 * k + 2])
    assert [o.shape for o in Split(Parameter("f32", [None, 6]), i64(0), num_splits=2).outputs] == [
        Shape([None, 6])] * 2
    with pytest.raises(ShapeInferenceError, match="does not split into 4 equal parts"):
        Split(Parameter("f32", [2, 6]), i64(1), num_splits=4)


def test_variadic_split():
    x = arange((2, 7))
    node = VariadicSplit(Parameter("f32", [2, 7]), i64(1), i64([2, -1, 1]))
    assert [o.shape for o in node.outputs] == [Shape([2, 2]), Shape([2, 4]), Shape([2, 1])]
    a, b, c = run(node, x)
    np.testing.assert_array_equal(a, x[:, :2])
    np.testing.assert_array_equal(b, x[:, 2:6])
    np.testing.assert_array_equal(c, x[:, 6:])
    with pytest.raises(ShapeInferenceError, match="do not add up"):
        VariadicSplit(Parameter("f32", [2, 7]), i64(1), i64([2, 2]))
    with pytest.raises(ShapeInferenceError, match="more than one -1"):
        VariadicSplit(Parameter("f32", [2, 7]), i64(1), i64([-1, -1]))
    dyn = VariadicSplit(Parameter("f32", [2, None]), i64(1), i64([3, -1]))
    assert [o.shape for o in dyn.outputs] == [Shape([2, 3]), Shape([2, None])]


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_variadic_split_parts_are_contiguous_slices(axis):
    """Each part equals numpy's slice along the axis (negative axes too) and is a C-contiguous copy."""
    x = arange((4, 6, 8))
    size = x.shape[axis]
    node = VariadicSplit(Parameter("f32", list(x.shape)), i64(axis), i64([1, -1, 2]))
    parts = run(node, x)
    want = np.split(x, [1, size - 2], axis=axis)
    for got, ref in zip(parts, want):
        np.testing.assert_array_equal(got, ref)
        assert got.flags.c_contiguous and not np.shares_memory(got, x)


# --- Gather -----------------------------------------------------------------------------------------
def test_gather_axis_and_negative_indices():
    x = arange((3, 4, 2))
    idx = np.array([[0, -1], [2, 1]], np.int64)
    node = Gather(Parameter("f32", [3, 4, 2]), i64(idx), i64(1))
    assert node.outputs[0].shape == Shape([3, 2, 2, 2])
    (y,) = run(node, x)
    for i, a, b, k in np.ndindex(3, 2, 2, 2):
        assert y[i, a, b, k] == x[i, idx[a, b] % 4, k]


def test_gather_batch_dims():
    x = arange((2, 5, 3))
    idx = np.array([[4, 0], [-1, 2]], np.int32)
    node = Gather(Parameter("f32", [2, 5, 3]), Constant(idx), i64(1), batch_dims=1)
    assert node.outputs[0].shape == Shape([2, 2, 3])
    (y,) = run(node, x)
    for bb, j, k in np.ndindex(2, 2, 3):
        assert y[bb, j, k] == x[bb, idx[bb, j] % 5, k]


def test_gather_errors_and_dynamic():
    with pytest.raises(ShapeInferenceError, match="batch dim 0 differs"):
        Gather(Parameter("f32", [2, 5]), Parameter("i64", [3, 1]), i64(1), batch_dims=1)
    with pytest.raises(ShapeInferenceError, match="index element type"):
        Gather(Parameter("f32", [2, 5]), Parameter("f32", [3]), i64(1))
    node = Gather(Parameter("f32", [2, 5]), Parameter("i64", [3]), i64(1))
    with pytest.raises(InputError, match="out of range"):
        node.evaluate(arange((2, 5)), np.array([5]), np.array(1))
    assert Gather(Parameter("f32", [2, 5]), Parameter("i64", [3]), Parameter("i64", [])).outputs[0].shape == Shape(
        [None, None])


def test_builder_shape_ops():
    x = sb.parameter([1, 4, 8, 16], "f32")
    assert sb.transpose(x, [0, 2, 1, 3]).shape == Shape([1, 8, 4, 16])
    assert sb.reshape(x, [1, -1], special_zero=False).shape == Shape([1, 512])
    assert sb.squeeze(x, [0]).shape == Shape([4, 8, 16]) and sb.squeeze(x).shape == Shape([4, 8, 16])
    assert sb.unsqueeze(x, 0).shape == Shape([1, 1, 4, 8, 16])
    assert sb.broadcast(sb.parameter([16], "f32"), [2, 16]).shape == Shape([2, 16])
    parts = sb.split(x, 1, 2)
    assert len(parts) == 2 and parts[1].shape == Shape([1, 2, 8, 16])
    assert sb.concat(parts, axis=1).shape == Shape([1, 4, 8, 16])
    assert [p.shape[3] for p in sb.variadic_split(x, 3, [10, 6])] == [10, 6]
    assert sb.gather(x, [3, 1], 1).shape == Shape([1, 2, 8, 16])
