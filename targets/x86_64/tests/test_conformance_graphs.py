"""Whole models through ``compile_model(..., target="x86_64_avx512")`` against numpy: every Subgraph must run
as a JIT kernel (no fallback to its reference), and the outputs must match a numpy expression written here
(float64 where accuracy matters).

The graphs are the lowering issue's: last dims 1..40 (tails), broadcasting on every axis, several outputs,
converts, select, softmax and reductions. Ops the CPU plugin tokenizes only inside complex patterns (Softmax,
reductions, boolean tensors) are compiled with ``snippets_mode="IgnoreCallback"``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Divide, Greater, Maximum, Multiply, Subtract
from snippets_core.ir.ops.convert import Convert
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.reduce import ReduceMax, ReduceSum
from snippets_core.ir.ops.select import Select
from snippets_core.ir.ops.softmax import Softmax
from snippets_core.ir.ops.unary import Exp, Relu, Sigmoid, Tanh
from snippets_core.runtime.compiled_model import compile_model

pytestmark = pytest.mark.avx512
TARGET = "x86_64_avx512"
IGNORE_CALLBACK = {"snippets_mode": "IgnoreCallback"}
RNG = np.random.default_rng(23)


def rand(shape, scale=2.0):  # type: ignore[no-untyped-def]
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def compiled(model, config=None, subgraphs=1):  # type: ignore[no-untyped-def]
    """compile_model for this target; every Subgraph must have a kernel."""
    cm = compile_model(model, target=TARGET, config=config)
    assert len(cm.subgraphs) >= subgraphs, cm.describe()
    for sg in cm.subgraphs:
        assert "SnippetsFallbackReason" not in sg.rt_info, sg.rt_info["SnippetsFallbackReason"]
    assert all(where == TARGET for _, op, where in cm.placement() if op == "Subgraph"), cm.describe()
    return cm


def check(out, ref, rtol=1e-5, atol=1e-6):  # type: ignore[no-untyped-def]
    assert out.shape == np.shape(ref)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=rtol, atol=atol)


def eltwise_model(s0, s1):  # type: ignore[no-untyped-def]
    """Two outputs: tanh(sigmoid(x + y) * x) and exp(relu(x + y)) - 1.5."""
    x, y = Parameter("f32", s0, name="x"), Parameter("f32", s1, name="y")
    s = Add(x, y)
    r0 = Tanh(Multiply(Sigmoid(s), x))
    r1 = Subtract(Exp(Relu(s)), Constant(np.float32(1.5)))
    return Model([Result(r0, name="r0"), Result(r1, name="r1")], [x, y])


def eltwise_ref(x, y):  # type: ignore[no-untyped-def]
    s = x.astype(np.float64) + y
    return [np.tanh(1 / (1 + np.exp(-s)) * x), np.exp(np.maximum(s, 0)) - 1.5]


@pytest.mark.parametrize("last", range(1, 41))
def test_eltwise_two_outputs_every_last_dim(last):
    shape = (2, 3, last)
    x, y = rand(shape), rand(shape)
    out = compiled(eltwise_model(shape, shape))({"x": x, "y": y})
    for name, ref in zip(("r0", "r1"), eltwise_ref(x, y)):
        check(out[name], ref)


BROADCASTS = [
    ((3, 5, 7), (1, 5, 7)), ((3, 5, 7), (3, 1, 7)), ((3, 5, 7), (3, 5, 1)), ((3, 5, 7), (7,)),
    ((1, 5, 7), (3, 5, 7)), ((3, 5, 1), (3, 5, 7)), ((3, 1, 1), (1, 5, 9)), ((2, 3, 4, 17), (2, 1, 4, 1)),
    ((2, 3, 4, 17), (1, 3, 1, 17)), ((6, 1), (1, 19)), ((5, 33), (1, 1)), ((2, 1, 4, 1), (1, 3, 1, 17)),
    ((2, 3, 4, 5, 6), (2, 1, 4, 1, 6)), ((1, 64, 300), (64, 1)),
]  # fmt: skip


@pytest.mark.parametrize("s0, s1", BROADCASTS)
def test_broadcasting_on_every_axis(s0, s1):
    x, y = rand(s0), rand(s1)
    out = compiled(eltwise_model(s0, s1))({"x": x, "y": y})
    for name, ref in zip(("r0", "r1"), eltwise_ref(x, y)):
        check(out[name], ref)


def test_outputs_that_are_also_intermediate_values():
    """An output read by later ops too, and one value feeding two outputs."""
    shape = (4, 19)
    x = Parameter("f32", shape, name="x")
    a = Multiply(x, x)
    b = Maximum(a, Constant(np.float32(0.5)))
    m = Model([Result(a, name="a"), Result(b, name="b"), Result(Add(b, x), name="c")], [x])
    xv = rand(shape)
    out = compiled(m)({"x": xv})
    check(out["a"], xv.astype(np.float64) ** 2)
    check(out["b"], np.maximum(xv.astype(np.float64) ** 2, 0.5))
    check(out["c"], np.maximum(xv.astype(np.float64) ** 2, 0.5) + xv)


def _convert_ref(x, dtype):  # type: ignore[no-untyped-def]
    """Convert semantics (ONNX/OpenVINO Convert): float -> int truncates toward zero and clamps, NaN gives 0."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.nan_to_num(np.trunc(x.astype(np.float64))), info.min, info.max).astype(dtype)
    return x.astype(dtype)


CONVERT_TYPES = [np.uint8, np.int8, np.float16, ml_dtypes.bfloat16]


@pytest.mark.parametrize("dtype", CONVERT_TYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("last", [1, 13, 16, 35])
def test_convert_from_f32_and_back(dtype, last):
    shape = (3, last)
    name = np.dtype(dtype).name
    x = Parameter("f32", shape, name="x")
    narrow = Convert(Multiply(x, Constant(np.float32(40.0))), destination_type=name)
    back = Add(Convert(narrow, destination_type="f32"), Constant(np.float32(0.25)))
    m = Model([Result(back, name="y")], [x])
    # values the type can hold after truncation (out-of-range float -> int conversions are undefined in ONNX
    # and differ between Convert and the ConvertTruncation the Subgraphs use)
    lo, hi = {"uint8": (0.0, 6.0), "int8": (-3.2, 3.17)}.get(name, (-6.0, 6.0))
    xv = RNG.uniform(lo, hi, size=shape).astype(np.float32)
    out = compiled(m, IGNORE_CALLBACK)({"x": xv})
    ref = _convert_ref(xv * np.float32(40.0), dtype).astype(np.float64) + 0.25
    check(out["y"], ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.float16], ids=lambda d: np.dtype(d).name)
def test_narrow_inputs_and_outputs(dtype):
    """Parameters and Results of narrow types: the Loads widen and the Stores narrow."""
    shape = (2, 5, 21)
    name = np.dtype(dtype).name
    x = Parameter(name, shape, name="x")
    y = Convert(Relu(Convert(x, destination_type="f32")), destination_type=name)
    m = Model([Result(y, name="y")], [x])
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        xv = RNG.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    else:
        xv = rand(shape).astype(dtype)
    out = compiled(m, IGNORE_CALLBACK)({"x": xv})
    np.testing.assert_array_equal(out["y"], np.maximum(xv, 0))


@pytest.mark.parametrize("last", [1, 6, 16, 19])
def test_select_with_broadcast_condition(last):
    shape = (2, 3, last)
    a, b = Parameter("f32", shape, name="a"), Parameter("f32", (2, 1, last), name="b")
    m = Model([Result(Select(Greater(a, b), a, Multiply(b, Constant(np.float32(2.0)))), name="y")], [a, b])
    av, bv = rand(shape), rand((2, 1, last))
    out = compiled(m, IGNORE_CALLBACK)({"a": av, "b": bv})
    np.testing.assert_array_equal(out["y"], np.where(av > bv, av, bv * np.float32(2.0)))


@pytest.mark.parametrize("last", [1, 3, 8, 13, 16, 17, 40, 300])
def test_softmax_last_axis(last):
    shape = (2, 3, last)
    x = Parameter("f32", shape, name="x")
    m = Model([Result(Softmax(x, axis=-1), name="y")], [x])
    xv = rand(shape) * 3
    e = np.exp(xv.astype(np.float64) - xv.max(-1, keepdims=True))
    out = compiled(m, IGNORE_CALLBACK)({"x": xv})
    check(out["y"], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("last", [1, 5, 16, 37])
def test_reduce_max_and_sum_last_axis(last):
    shape = (3, 4, last)
    x = Parameter("f32", shape, name="x")
    axes = Constant(np.array([-1], np.int64))
    m = Model(
        [
            Result(ReduceMax(x, axes, keep_dims=True), name="max"),
            Result(ReduceSum(Relu(x), axes, keep_dims=True), name="sum"),
        ],
        [x],
    )
    xv = rand(shape)
    out = compiled(m, IGNORE_CALLBACK)({"x": xv})
    np.testing.assert_array_equal(out["max"], xv.max(-1, keepdims=True))
    check(out["sum"], np.maximum(xv.astype(np.float64), 0).sum(-1, keepdims=True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_eight_op_chain_large_tensor(threads):
    """The benchmark's chain (sigmoid and tanh among 8 ops) on a tensor big enough to split over threads."""
    shape = (1, 8, 128, 256)
    x = Parameter("f32", shape, name="x")
    h = Add(Multiply(x, Constant(np.float32(0.5))), Constant(np.float32(0.1)))
    h = Tanh(Multiply(Sigmoid(h), x))
    h = Maximum(Subtract(h, Constant(np.float32(0.2))), Constant(np.float32(-0.5)))
    m = Model([Result(h, name="y")], [x])
    xv = rand(shape)
    xd = xv.astype(np.float64)
    ref = np.maximum(np.tanh(1 / (1 + np.exp(-(xd * 0.5 + 0.1))) * xd) - 0.2, -0.5)
    out = compiled(m, {"num_threads": threads})({"x": xv})
    check(out["y"], ref)


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0,), (), (1,), (1, 1, 1, 1, 1, 1), (2, 1, 1, 3, 1, 5, 1)])
def test_empty_scalar_and_unit_dims(shape):
    x, y = Parameter("f32", shape, name="x"), Parameter("f32", shape, name="y")
    m = Model([Result(Multiply(Exp(Add(x, y)), x), name="z")], [x, y])
    xv, yv = rand(shape), rand(shape)
    if 0 in shape:  # nothing to compute: a kernel or the reference fallback, the result must be empty
        out = compile_model(m, target=TARGET, config=IGNORE_CALLBACK)({"x": xv, "y": yv})["z"]
    else:
        out = compiled(m, IGNORE_CALLBACK)({"x": xv, "y": yv})["z"]
    check(out, np.exp(xv.astype(np.float64) + yv) * xv)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32], ids=lambda d: np.dtype(d).name)
def test_integer_arithmetic_keeps_numpy_semantics(dtype):
    """Narrow integers wrap on overflow and integer division truncates, as numpy does: ops the target would
    compute differently (through saturating or float conversions) stay on their references."""
    name = np.dtype(dtype).name
    x, y = Parameter(name, (3, 21), name="x"), Parameter(name, (3, 21), name="y")
    m = Model([Result(Add(x, y), name="sum"), Result(Divide(x, y), name="quot")], [x, y])
    info = np.iinfo(dtype)
    xv = RNG.integers(info.min // 2, info.max, size=(3, 21), endpoint=True, dtype=dtype)
    yv = RNG.integers(1, min(info.max, 100), size=(3, 21), endpoint=True, dtype=dtype)
    cm = compile_model(m, target=TARGET, config=IGNORE_CALLBACK)
    out = cm({"x": xv, "y": yv})
    np.testing.assert_array_equal(out["sum"], xv + yv)  # numpy wraps
    quot = np.trunc(xv.astype(np.float64) / yv).astype(dtype)
    np.testing.assert_array_equal(out["quot"], quot)


@pytest.mark.parametrize("shape", [(4, 32, 300), (8, 16, 37)])
def test_softmax_per_thread_scratchpads_give_identical_bytes(shape):
    """Softmax keeps intermediate rows in Buffers: each thread works in its own slice of the scratchpad."""
    x = Parameter("f32", shape, name="x")
    m = Model([Result(Softmax(x, axis=-1), name="y")], [x])
    xv = rand(shape) * 3
    outs = []
    for threads in (1, 2):
        config = {**IGNORE_CALLBACK, "num_threads": threads, "target_options": {"parallel_min_bytes": 0}}
        cm = compiled(m, config)
        (step,) = [s for s in cm._steps if s.where == TARGET]
        assert step.run.num_threads == threads and step.run.kernel.info.has_scratchpad
        outs.append(cm({"x": xv})["y"])
    assert outs[0].tobytes() == outs[1].tobytes()
    e = np.exp(xv.astype(np.float64) - xv.max(-1, keepdims=True))
    check(outs[1], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_dynamic_batch_runs_one_kernel_for_every_shape():
    m = eltwise_model((None, 3, 19), (3, 1))
    cm = compiled(m, IGNORE_CALLBACK)
    for batch in (1, 4, 2, 4):
        xv, yv = rand((batch, 3, 19)), rand((3, 1))
        out = cm({"x": xv, "y": yv})
        for name, ref in zip(("r0", "r1"), eltwise_ref(xv, yv)):
            check(out[name], ref)
    steps = [s for s in cm._steps if s.where == TARGET]
    assert steps and all(s.run.new_shapes == 3 and s.run.per_shape_kernels == 0 for s in steps)
    assert all("one kernel for every shape" in s.run.describe() for s in steps)
