"""Narrow integers (i8, u8, i16, u16) computed in i32 lanes on x86-64: every op of NARROW_OPS compiles to a kernel
(no reference fallback) and matches numpy bit for bit, with numpy's wrap-around where the result leaves the type's
range. Binary ops are checked over every pair of i8/u8 values; i16/u16 over their extremes and random values.
The oracle is numpy on the same dtype (Divide: the float quotient truncated toward zero, then wrapped as numpy's
astype does), never the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.config import CompileConfig
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import (
    Add,
    Divide,
    Equal,
    FloorMod,
    Greater,
    GreaterEqual,
    Less,
    LessEqual,
    Maximum,
    Minimum,
    Mod,
    Multiply,
    NotEqual,
    PRelu,
    SquaredDifference,
    Subtract,
)
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.select import Select
from snippets_core.ir.ops.snippets import ConvertSaturation
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Abs, Negative, Relu, Sign
from snippets_core.plugins.host import get_host
from snippets_x86_64.runtime import FALLBACK_KEY, compile_subgraph

pytestmark = pytest.mark.avx512
RNG = np.random.default_rng(11)
NARROW = (np.int8, np.uint8, np.int16, np.uint16)


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b rounded toward zero (0 where b == 0), wrapped to a's dtype: exact in float64 for 16-bit operands."""
    q = np.trunc(a.astype(np.float64) / np.where(b == 0, 1, b).astype(np.float64))
    return np.where(b == 0, 0, q).astype(np.int64).astype(a.dtype)


def _int_mod(a: np.ndarray, b: np.ndarray, floor: bool) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.mod(a, b) if floor else np.fmod(a, b)


#: op -> numpy oracle on arrays of the narrow dtype (numpy wraps integer overflow)
BINARY = {
    Add: lambda a, b: a + b,
    Subtract: lambda a, b: a - b,
    Multiply: lambda a, b: a * b,
    Divide: _trunc_div,
    SquaredDifference: lambda a, b: (a - b) * (a - b),
    PRelu: lambda a, b: np.where(a < 0, a * b, a),
    Maximum: np.maximum,
    Minimum: np.minimum,
    FloorMod: lambda a, b: _int_mod(a, b, True),
    Mod: lambda a, b: _int_mod(a, b, False),
    Equal: np.equal,
    NotEqual: np.not_equal,
    Greater: np.greater,
    GreaterEqual: np.greater_equal,
    Less: np.less,
    LessEqual: np.less_equal,
}
UNARY = {
    Negative: np.negative,
    Abs: np.abs,
    Relu: lambda x: np.maximum(x, np.zeros((), x.dtype)),
    Sign: np.sign,
}


def compile_body(body: Model, *dtypes_shapes):  # type: ignore[no-untyped-def]
    """The executor of a Subgraph around ``body`` (its parameters' types and shapes); asserts it is a kernel."""
    outer = [Parameter(p.outputs[0].element_type, p.outputs[0].shape.to_tuple(), name=f"in{i}")
             for i, p in enumerate(body.parameters)]
    sg = Subgraph(*outer, body=body)
    executor = compile_subgraph(sg, CompileConfig.from_mapping({}), get_host())
    assert executor is not None, sg.rt_info.get(FALLBACK_KEY)
    assert FALLBACK_KEY not in sg.rt_info
    return executor


def all_pairs(dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of values of an 8-bit type; for 16-bit types, the extremes crossed with random values."""
    info = np.iinfo(dtype)
    if info.bits == 8:
        values = np.arange(info.min, info.max + 1, dtype=np.int64)
    else:
        edges = np.array([info.min, info.min + 1, -1, 0, 1, 2, 3, 255, 256, info.max - 1, info.max], np.int64)
        edges = edges[(edges >= info.min) & (edges <= info.max)]
        values = np.concatenate([edges, RNG.integers(info.min, info.max + 1, 256 - len(edges))])
    a, b = np.meshgrid(values, values, indexing="ij")
    return a.ravel().astype(dtype).reshape(-1, 64), b.ravel().astype(dtype).reshape(-1, 64)


def binary_body(op, dtype, shape):  # type: ignore[no-untyped-def]
    pa, pb = Parameter(dtype, shape, name="a"), Parameter(dtype, shape, name="b")
    return Model([Result(op(pa, pb), name="r")], [pa, pb])


@pytest.mark.parametrize("dtype", NARROW, ids=[np.dtype(t).name for t in NARROW])
@pytest.mark.parametrize("op", list(BINARY), ids=[op.__name__ for op in BINARY])
def test_binary_op_matches_numpy_over_all_pairs(op, dtype) -> None:  # type: ignore[no-untyped-def]
    a, b = all_pairs(dtype)
    run = compile_body(binary_body(op, dtype, a.shape))
    (out,) = run([a, b])
    with np.errstate(all="ignore"):
        want = BINARY[op](a, b)
    assert out.dtype == want.dtype
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", NARROW, ids=[np.dtype(t).name for t in NARROW])
@pytest.mark.parametrize("op", list(UNARY), ids=[op.__name__ for op in UNARY])
def test_unary_op_matches_numpy_over_all_values(op, dtype) -> None:  # type: ignore[no-untyped-def]
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1, dtype=np.int64).astype(dtype)
    x = x.reshape(-1, 16) if info.bits == 8 else x[: 65536 // 16 * 16 - 7]  # 16-bit: a masked tail too
    p = Parameter(dtype, x.shape, name="x")
    run = compile_body(Model([Result(op(p), name="r")], [p]))
    (out,) = run([x])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out, UNARY[op](x))


@pytest.mark.parametrize("dtype", (np.int8, np.uint8), ids=("int8", "uint8"))
def test_wrapped_result_is_in_range_for_its_consumers(dtype) -> None:  # type: ignore[no-untyped-def]
    """An Add whose result overflows feeds a comparison, a Divide and a Maximum in registers: they must see
    numpy's wrapped value (100 + 100 == -56 as i8), not the i32 sum; the sum is also stored."""
    a, b = all_pairs(dtype)
    pa, pb = Parameter(dtype, a.shape, name="a"), Parameter(dtype, b.shape, name="b")
    s = Add(pa, pb)
    body = Model(
        [Result(s, name="sum"), Result(Less(s, pa), name="lt"), Result(Divide(s, pb), name="div"),
         Result(Maximum(Multiply(pa, pb), s), name="max")],
        [pa, pb],
    )
    run = compile_body(body)
    out = run([a, b])
    with np.errstate(all="ignore"):
        want_sum = a + b
        want = [want_sum, want_sum < a, _trunc_div(want_sum, b), np.maximum(a * b, want_sum)]
    for got, w in zip(out, want):
        np.testing.assert_array_equal(got, w)


@pytest.mark.parametrize("dtype", NARROW, ids=[np.dtype(t).name for t in NARROW])
def test_scalar_operand_and_tail(dtype) -> None:  # type: ignore[no-untyped-def]
    """A constant operand (a Scalar in the kernel) and shapes whose rows end in a masked tail."""
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, (5, 37)).astype(dtype)
    c = dtype(info.max // 2 + 3)
    p = Parameter(dtype, x.shape, name="x")
    body = Model([Result(Multiply(Add(p, Constant(c)), p), name="r"), Result(Greater(p, Constant(c)), name="g")],
                 [p])
    prod, gt = compile_body(body)([x])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(prod, (x + c) * x)
    np.testing.assert_array_equal(gt, x > c)


@pytest.mark.parametrize("dtype", (np.int8, np.uint8), ids=("int8", "uint8"))
def test_select_of_narrow_values(dtype) -> None:  # type: ignore[no-untyped-def]
    a, b = all_pairs(dtype)
    pa, pb = Parameter(dtype, a.shape, name="a"), Parameter(dtype, b.shape, name="b")
    body = Model([Result(Select(Greater(pa, pb), Subtract(pa, pb), pb), name="r")], [pa, pb])
    (out,) = compile_body(body)([a, b])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out, np.where(a > b, a - b, b))


def test_converted_inputs_stay_exact() -> None:
    """Add(f32(a), f32(b)) of i8 inputs: PropagatePrecision may drop the converts, but must then compute in
    i32 (exact), never in i8 (wrapping): 100 + 100 is 200.0."""
    a, b = all_pairs(np.int8)
    pa, pb = Parameter(np.int8, a.shape, name="a"), Parameter(np.int8, b.shape, name="b")
    s = Add(ConvertSaturation(pa, destination_type="f32"), ConvertSaturation(pb, destination_type="f32"))
    (out,) = compile_body(Model([Result(s, name="r")], [pa, pb]))([a, b])
    np.testing.assert_array_equal(out, a.astype(np.float32) + b.astype(np.float32))


def test_div_int8_truncates_toward_zero() -> None:
    """The ONNX Div on int8 that once came out as 1 where 0 was right (a saturating float division)."""
    a = np.array([[3, -3, 1, -1, 7, -7, -128, -128, 127, 5, 0, 9, -9, 2, -2, 6]], np.int8)
    b = np.array([[4, 4, 2, 2, -8, -8, -1, 3, -128, 0, 5, 10, 10, 3, 3, 7]], np.int8)
    (out,) = compile_body(binary_body(Divide, np.int8, a.shape))([a, b])
    assert out.tolist() == [[0, 0, 0, 0, 0, 0, -128, -42, 0, 0, 0, 0, 0, 0, 0, 0]]


@pytest.mark.parametrize("dtype", NARROW, ids=[np.dtype(t).name for t in NARROW])
@pytest.mark.parametrize("b_shape", [(37,), (5, 1), (1, 1)], ids=str)
def test_broadcast_operands(dtype, b_shape) -> None:  # type: ignore[no-untyped-def]
    """A broadcast operand (BroadcastLoad/BroadcastMove of a narrow value) wraps and compares like numpy."""
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max + 1, (5, 37)).astype(dtype)
    b = RNG.integers(info.min, info.max + 1, b_shape).astype(dtype)
    pa, pb = Parameter(dtype, a.shape, name="a"), Parameter(dtype, b.shape, name="b")
    s = Multiply(pa, pb)
    body = Model([Result(Subtract(s, pa), name="d"), Result(GreaterEqual(s, pb), name="ge")], [pa, pb])
    d, ge = compile_body(body)([a, b])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(d, a * b - a)
        np.testing.assert_array_equal(ge, a * b >= b)


def test_debug_caps_keep_the_wrap_around(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a debug capability on (the segfault detector) the kernel is generated through debug_caps: the
    same precisions, so i8 100 + 100 is -56 there too, not a saturated 127."""
    monkeypatch.setenv("SNIPPETS_SEGFAULT_DETECTOR", "1")
    a, b = all_pairs(np.int8)
    pa, pb = Parameter(np.int8, a.shape, name="a"), Parameter(np.int8, b.shape, name="b")
    s = Add(pa, pb)
    body = Model([Result(s, name="sum"), Result(Less(s, pa), name="lt")], [pa, pb])
    total, lt = compile_body(body)([a, b])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(total, a + b)
        np.testing.assert_array_equal(lt, (a + b) < a)
