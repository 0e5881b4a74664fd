"""Softmax/LogSoftmax, reductions and MatMul."""

from __future__ import annotations

import math

import numpy as np
import pytest

from snippets_core.errors import ShapeInferenceError
from snippets_core.frontends import builder as sb
from snippets_core.ir import OPS, ElementType, Shape
from snippets_core.ir.ops.io import Constant, Parameter
from snippets_core.ir.ops.matmul import MatMul
from snippets_core.ir.ops.softmax import LogSoftmax, Softmax


def i64(v):
    return Constant(np.asarray(v, np.int64))


# --- Softmax ----------------------------------------------------------------------------------------
def softmax_rows(x: np.ndarray, axis: int, log: bool = False) -> np.ndarray:
    """Softmax by moving ``axis`` last and looping over rows with math.exp."""
    m = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    out = np.empty(m.shape)
    for idx in np.ndindex(m.shape[:-1]):
        row = [float(v) for v in m[idx]]
        mx = max(row)
        s = sum(math.exp(v - mx) for v in row)
        out[idx] = [(v - mx - math.log(s)) if log else math.exp(v - mx) / s for v in row]
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("axis", [-1, 1, 0])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_values(axis, log, real_type, close):
    dt = ElementType.parse(real_type).numpy
    x = (np.random.default_rng(2).normal(size=(2, 3, 5)) * 4).astype(dt)
    node = (LogSoftmax if log else Softmax)(Parameter(real_type, [2, 3, 5]), axis=axis)
    assert node.outputs[0].shape == Shape([2, 3, 5])
    (y,) = node.evaluate(x)
    close(y, softmax_rows(x, axis, log), real_type)


def test_softmax_large_values_do_not_overflow():
    (y,) = Softmax(Parameter("f32", [3]), axis=0).evaluate(np.array([1000.0, 1000.0, -1000.0], np.float32))
    np.testing.assert_allclose(y, [0.5, 0.5, 0.0])


def test_softmax_errors():
    with pytest.raises(ShapeInferenceError, match="axis 3 is out of range for rank 3"):
        Softmax(Parameter("f32", [2, 3, 4]), axis=3)
    with pytest.raises(ShapeInferenceError, match="real element type"):
        Softmax(Parameter("i32", [2, 3]), axis=-1)
    assert Softmax(Parameter("f32", None), axis=5).outputs[0].shape == Shape(None)


# --- reductions -------------------------------------------------------------------------------------
REDUCE = {
    "ReduceMax": lambda v: max(v),
    "ReduceMin": lambda v: min(v),
    "ReduceSum": lambda v: math.fsum(v),
    "ReduceMean": lambda v: math.fsum(v) / len(v),
    "ReduceProd": lambda v: math.prod(v),
    "ReduceL1": lambda v: math.fsum(abs(a) for a in v),
    "ReduceL2": lambda v: math.sqrt(math.fsum(a * a for a in v)),
}


def reduce_loop(x: np.ndarray, axes: list[int], keep_dims: bool, f) -> np.ndarray:
    """Reduce by gathering, for each kept index, the values over the reduced axes."""
    axes = sorted(a % x.ndim for a in axes)
    kept = [i for i in range(x.ndim) if i not in axes]
    out_shape = [x.shape[i] for i in kept]
    out = np.empty(out_shape)
    for idx in np.ndindex(*out_shape):
        sl: list = [slice(None)] * x.ndim
        for k, i in enumerate(kept):
            sl[i] = idx[k]
        out[idx] = f([float(v) for v in np.asarray(x[tuple(sl)], np.float64).ravel()])
    if keep_dims:
        out = out.reshape([1 if i in axes else d for i, d in enumerate(x.shape)])
    return out


@pytest.mark.parametrize("op", list(REDUCE))
@pytest.mark.parametrize(("axes", "keep_dims"), [([-1], True), ([0, 2], False), ([1], False), ([], True)])
def test_reduce_values(op, axes, keep_dims, real_type, close):
    dt = ElementType.parse(real_type).numpy
    x = np.random.default_rng(3).uniform(0.5, 1.5, (2, 3, 4)).astype(dt)
    node = OPS[op](Parameter(real_type, [2, 3, 4]), i64(axes), keep_dims=keep_dims)
    (y,) = node.evaluate(x, np.asarray(axes, np.int64))
    expected = reduce_loop(x, axes, keep_dims, REDUCE[op]) if axes else x
    assert node.outputs[0].shape == Shape(expected.shape)
    close(y, expected, real_type)


def test_reduce_integers_stay_integers():
    x = np.array([[100, 100], [-3, 4]], np.int8)
    node = OPS["ReduceSum"](Parameter("i8", [2, 2]), i64([1]))
    (y,) = node.evaluate(x, np.array([1]))
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, [200 - 256, 1])


@pytest.mark.parametrize(("shape", "axes", "keep", "out"), [
    ([2, None, 4], [-1], True, [2, None, 1]),
    ([2, None, 4], [1], False, [2, 4]),
    (None, [0], True, None),
])
def test_reduce_shape_inference(shape, axes, keep, out):
    assert OPS["ReduceMean"](Parameter("f32", shape), i64(axes), keep_dims=keep).outputs[0].shape == Shape(out)


def test_reduce_unknown_axes_give_dynamic_dims():
    axes = Parameter("i64", [2])
    assert OPS["ReduceSum"](Parameter("f32", [2, 3, 4]), axes, keep_dims=True).outputs[0].shape == Shape([None] * 3)
    assert OPS["ReduceSum"](Parameter("f32", [2, 3, 4]), axes).outputs[0].shape == Shape([None])
    assert OPS["ReduceSum"](Parameter("f32", [2, 3, 4]), Parameter("i64", [None])).outputs[0].shape == Shape(None)


def test_reduce_errors():
    p = Parameter("f32", [2, 3])
    with pytest.raises(ShapeInferenceError, match="axes 2 is out of range for rank 2"):
        OPS["ReduceMax"](p, i64([2]))
    with pytest.raises(ShapeInferenceError, match="repeat an axis"):
        OPS["ReduceMax"](p, i64([1, -1]))
    with pytest.raises(ShapeInferenceError, match="axes must have an index element type"):
        OPS["ReduceMax"](p, Constant(np.array([1.0], np.float32)))
    with pytest.raises(ShapeInferenceError, match="axes must have rank 0 or 1"):
        OPS["ReduceMax"](p, i64([[1]]))


# --- MatMul -----------------------------------------------------------------------------------------
def matmul_loop(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """2-D matrix product with explicit sums, over numpy-broadcast batch dims."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    out = np.zeros(batch + (a.shape[-2], b.shape[-1]))
    for idx in np.ndindex(*batch):
        for i in range(a.shape[-2]):
            for j in range(b.shape[-1]):
                out[idx + (i, j)] = math.fsum(a[idx + (i, k)] * b[idx + (k, j)] for k in range(a.shape[-1]))
    return out


@pytest.mark.parametrize(("sa", "sb", "ta", "tb", "out"), [
    ([3, 4], [4, 5], False, False, [3, 5]),
    ([4, 3], [4, 5], True, False, [3, 5]),
    ([3, 4], [5, 4], False, True, [3, 5]),
    ([2, 1, 3, 4], [5, 4, 6], False, False, [2, 5, 3, 6]),
    ([2, 4, 3], [2, 6, 4], True, True, [2, 3, 6]),
])
def test_matmul_values(sa, sb, ta, tb, out, real_type, close):
    dt = ElementType.parse(real_type).numpy
    rng = np.random.default_rng(4)
    a = rng.uniform(-1, 1, sa).astype(dt)
    b = rng.uniform(-1, 1, sb).astype(dt)
    node = MatMul(Parameter(real_type, sa), Parameter(real_type, sb), transpose_a=ta, transpose_b=tb)
    assert node.outputs[0].shape == Shape(out)
    (y,) = node.evaluate(a, b)
    at = np.swapaxes(a, -1, -2) if ta else a
    bt = np.swapaxes(b, -1, -2) if tb else b
    tol = {"f32": "f32", "f16": "f16", "bf16": "bf16"}[real_type]
    close(y, matmul_loop(at, bt), tol)


def test_matmul_one_dimensional_inputs(close):
    a = np.arange(4, dtype=np.float32)
    m = np.arange(12, dtype=np.float32).reshape(4, 3)
    vv = MatMul(Parameter("f32", [4]), Parameter("f32", [4]))
    vm = MatMul(Parameter("f32", [4]), Parameter("f32", [4, 3]), transpose_a=True)  # flags ignored for 1-D
    mv = MatMul(Parameter("f32", [3, 4]), Parameter("f32", [4]))
    bv = MatMul(Parameter("f32", [2, 3, 4]), Parameter("f32", [4]))
    assert [n.outputs[0].shape for n in (vv, vm, mv, bv)] == [Shape([]), Shape([3]), Shape([3]), Shape([2, 3])]
    close(vv.evaluate(a, a)[0], sum(float(v) * float(v) for v in a), "f32")
    close(vm.evaluate(a, m)[0], [sum(float(a[k]) * float(m[k, j]) for k in range(4)) for j in range(3)], "f32")
    close(mv.evaluate(m.T.copy(), a)[0], [sum(float(m[k, j]) * float(a[k]) for k in range(4)) for j in range(3)],
          "f32")


def test_matmul_int8_accumulates_wide_then_wraps():
    a = np.full((1, 4), 100, np.int8)
    (y,) = MatMul(Parameter("i8", [1, 4]), Parameter("i8", [4, 1])).evaluate(a, a.T.copy())
    assert y.dtype == np.int8 and y[0, 0] == np.int64(40000).astype(np.int8)


def test_matmul_dynamic_and_errors():
    assert MatMul(Parameter("f32", [None, 3, 4]), Parameter("f32", [4, None])).outputs[0].shape == Shape(
        [None, 3, None])
    assert MatMul(Parameter("f32", None), Parameter("f32", [4, 5])).outputs[0].shape == Shape(None)
    with pytest.raises(ShapeInferenceError, match="inner dims differ: 4 vs 5"):
        MatMul(Parameter("f32", [3, 4]), Parameter("f32", [5, 6]))
    with pytest.raises(ShapeInferenceError, match="equal element types"):
        MatMul(Parameter("f32", [3, 4]), Parameter("f16", [4, 6]))
    with pytest.raises(ShapeInferenceError, match="batch dims"):
        MatMul(Parameter("f32", [2, 3, 4]), Parameter("f32", [3, 4, 6]))


def test_builder_softmax_reduce_matmul():
    x = sb.parameter([2, 8, 16], "f32")
    assert sb.softmax(x, -1).node.axis == -1
    assert sb.log_softmax(x, 1).node.type_name == "LogSoftmax"
    assert sb.reduce_sum(x, axes=[-1], keep_dims=True).shape == Shape([2, 8, 1])
    assert sb.reduce_mean(x, [1, 2]).shape == Shape([2])
    for fn in ("reduce_max", "reduce_min", "reduce_prod", "reduce_l1", "reduce_l2"):
        assert getattr(sb, fn)(x, 0).shape == Shape([8, 16])
    assert sb.matmul(x, x, transpose_b=True).shape == Shape([2, 8, 8])
    w = sb.matmul(x, np.ones((16, 4), np.float32))
    assert w.shape == Shape([2, 8, 4]) and w.node.inputs[1].source.node.type_name == "Constant"


@pytest.mark.parametrize(("op", "et", "expected"), [
    ("ReduceMax", "f32", -np.inf), ("ReduceMin", "f32", np.inf), ("ReduceMax", "i32", -(2**31)),
    ("ReduceMin", "u8", 255), ("ReduceSum", "f32", 0.0), ("ReduceProd", "f16", 1.0), ("ReduceMean", "f32", np.nan),
])
def test_reduce_over_an_empty_axis_gives_the_identity(op, et, expected):
    dt = ElementType.parse(et).numpy
    node = OPS[op](Parameter(et, [2, 0, 3]), i64([1]), keep_dims=True)
    assert node.outputs[0].shape == Shape([2, 1, 3])
    (y,) = node.evaluate(np.zeros((2, 0, 3), dt), np.array([1]))
    assert y.dtype == dt and y.shape == (2, 1, 3)
    np.testing.assert_array_equal(y, np.full((2, 1, 3), expected, dt))
