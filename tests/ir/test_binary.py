"""Binary element-wise, logical and comparison ops: broadcasting, type checks and values."""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest

from snippets_core.errors import ShapeInferenceError
from snippets_core.frontends import builder as sb
from snippets_core.ir import OPS, ElementType, Shape
from snippets_core.ir.ops.io import Parameter


def elementwise(f, a, b):
    """Apply a Python scalar function over numpy-broadcast float64 arrays, one element at a time."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    return np.array([f(float(x), float(y)) for x, y in zip(a.ravel(), b.ravel())]).reshape(a.shape)


ARITH = [
    ("Add", operator.add),
    ("Subtract", operator.sub),
    ("Multiply", operator.mul),
    ("Divide", operator.truediv),
    ("Maximum", max),
    ("Minimum", min),
    ("Power", lambda a, b: abs(a) ** b),  # the test feeds |a| for Power
    ("SquaredDifference", lambda a, b: (a - b) ** 2),
    ("FloorMod", lambda a, b: a - math.floor(a / b) * b),
    ("Mod", math.fmod),
    ("PRelu", lambda x, s: x if x >= 0 else s * x),
]


@pytest.mark.parametrize(("op", "formula"), ARITH, ids=[a[0] for a in ARITH])
def test_binary_values_broadcast(op, formula, real_type, close):
    dt = ElementType.parse(real_type).numpy
    rng = np.random.default_rng(0)
    a = rng.uniform(-3, 3, (2, 3, 4))
    b = rng.uniform(0.5, 2.0, (3, 1)) * np.array([[1], [-1], [1]])
    if op == "Power":
        a = np.abs(a) + 0.1
    a, b = a.astype(dt), b.astype(dt)
    node = OPS[op](Parameter(real_type, [2, 3, 4]), Parameter(real_type, [3, 1]))
    assert node.outputs[0].shape == Shape([2, 3, 4])
    assert node.outputs[0].element_type == ElementType.parse(real_type)
    (y,) = node.evaluate(a, b)
    expected = elementwise(formula, a, b)
    if op in ("FloorMod", "Mod") and real_type != "f32":
        # remainders near a multiple of b amplify the rounding of a/b; compare where that is not the case
        keep = np.abs(np.round(expected / np.abs(b.astype(np.float64)))) < 10
        y, expected = np.where(keep, y, 0).astype(dt), np.where(keep, expected, 0)
    close(y, expected, real_type)


def test_integer_division_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 6, 0], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5], np.int32)
    node = OPS["Divide"](Parameter("i32", [6]), Parameter("i32", [6]))
    (y,) = node.evaluate(a, b)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, [3, -3, -3, 3, 2, 0])


def test_integer_mod_and_floor_mod_signs():
    a = np.array([7, -7, 7, -7], np.int64)
    b = np.array([3, 3, -3, -3], np.int64)
    (fm,) = OPS["FloorMod"](Parameter("i64", [4]), Parameter("i64", [4])).evaluate(a, b)
    (m,) = OPS["Mod"](Parameter("i64", [4]), Parameter("i64", [4])).evaluate(a, b)
    np.testing.assert_array_equal(fm, [1, 2, -2, -1])  # sign of the divisor
    np.testing.assert_array_equal(m, [1, -1, 1, -1])  # sign of the dividend


def test_integer_power_with_negative_exponent():
    (y,) = OPS["Power"](Parameter("i32", [4]), Parameter("i32", [4])).evaluate(
        np.array([2, 3, 1, -2], np.int32), np.array([3, 0, -1, -1], np.int32))
    np.testing.assert_array_equal(y, [8, 1, 1, 0])  # (-2)**-1 = -0.5 truncates to 0


def test_integer_add_wraps():
    (y,) = OPS["Add"](Parameter("i8", [1]), Parameter("i8", [1])).evaluate(np.array([120], np.int8),
                                                                             np.array([10], np.int8))
    assert y.dtype == np.int8 and y[0] == 130 - 256


COMPARE = [("Equal", operator.eq), ("NotEqual", operator.ne), ("Greater", operator.gt),
           ("GreaterEqual", operator.ge), ("Less", operator.lt), ("LessEqual", operator.le)]


@pytest.mark.parametrize(("op", "formula"), COMPARE, ids=[c[0] for c in COMPARE])
@pytest.mark.parametrize("et", ["f32", "f16", "i32"])
def test_comparisons(op, formula, et):
    dt = ElementType.parse(et).numpy
    a = np.array([[1, 2, 3], [4, 5, 6]], dt)
    b = np.array([3, 2, 5], dt)
    node = OPS[op](Parameter(et, [2, 3]), Parameter(et, [3]))
    assert node.outputs[0].element_type is ElementType.boolean
    (y,) = node.evaluate(a, b)
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, [[formula(int(x), int(z)) for x, z in zip(row, b)] for row in a])


LOGICAL = [("LogicalAnd", lambda a, b: a and b), ("LogicalOr", lambda a, b: a or b),
           ("LogicalXor", lambda a, b: a != b)]


@pytest.mark.parametrize(("op", "formula"), LOGICAL, ids=[c[0] for c in LOGICAL])
def test_logical(op, formula):
    a = np.array([[True, False], [True, True]])
    b = np.array([True, False])
    node = OPS[op](Parameter("boolean", [2, 2]), Parameter("boolean", [2]))
    (y,) = node.evaluate(a, b)
    np.testing.assert_array_equal(y, [[formula(bool(x), bool(z)) for x, z in zip(row, b)] for row in a])


def test_bitwise_xor():
    (y,) = OPS["BitwiseXor"](Parameter("u8", [3]), Parameter("u8", [3])).evaluate(
        np.array([0b1100, 0xFF, 0], np.uint8), np.array([0b1010, 0x0F, 0], np.uint8))
    np.testing.assert_array_equal(y, [0b0110, 0xF0, 0])


@pytest.mark.parametrize(("sa", "sb", "out"), [
    ([2, 1, 4], [3, 1], [2, 3, 4]),
    ([None, 3], [1, 3], [None, 3]),
    ([None], [4], [4]),
    ([None, 1], [1, None], [None, None]),
    ([], [5, 2], [5, 2]),
    (None, [3], None),
])
def test_broadcast_shape_inference(sa, sb, out):
    node = OPS["Add"](Parameter("f32", sa), Parameter("f32", sb))
    assert node.outputs[0].shape == Shape(out)


def test_binary_errors():
    with pytest.raises(ShapeInferenceError, match="not numpy-broadcastable"):
        OPS["Multiply"](Parameter("f32", [2, 3]), Parameter("f32", [4, 3]))
    with pytest.raises(ShapeInferenceError, match="element types differ: f32 and f16"):
        OPS["Add"](Parameter("f32", [2]), Parameter("f16", [2]))
    with pytest.raises(ShapeInferenceError, match="boolean element type"):
        OPS["LogicalAnd"](Parameter("f32", [2]), Parameter("f32", [2]))
    with pytest.raises(ShapeInferenceError, match="numeric element type"):
        OPS["Add"](Parameter("boolean", [2]), Parameter("boolean", [2]))
    with pytest.raises(ShapeInferenceError, match="must be equal"):
        OPS["Add"](Parameter("f32", [2, 3]), Parameter("f32", [3]), auto_broadcast="none")
    with pytest.raises(ShapeInferenceError, match="does not broadcast to data shape"):
        OPS["PRelu"](Parameter("f32", [1, 3]), Parameter("f32", [2, 3]))


def test_prelu_keeps_data_shape_when_dynamic():
    node = OPS["PRelu"](Parameter("f32", [None, 3, 4]), Parameter("f32", [3, 1]))
    assert node.outputs[0].shape == Shape([None, 3, 4])


def test_builder_binary_constants_take_the_operand_type():
    x = sb.parameter([2, 3], "f16")
    y = sb.add(x, 1.5)
    assert y.node.inputs[1].source.element_type is ElementType.f16
    z = sb.subtract(2, sb.parameter([3], "i32"))
    assert z.node.inputs[0].source.element_type is ElementType.i32
    assert sb.greater(x, 0).element_type is ElementType.boolean
    assert sb.prelu(x, [0.1, 0.2, 0.3]).shape == Shape([2, 3])
    for fn, op in [("multiply", "Multiply"), ("divide", "Divide"), ("maximum", "Maximum"), ("minimum", "Minimum"),
                   ("power", "Power"), ("squared_difference", "SquaredDifference"), ("floor_mod", "FloorMod"),
                   ("mod", "Mod"), ("equal", "Equal"), ("not_equal", "NotEqual"), ("greater_equal", "GreaterEqual"),
                   ("less", "Less"), ("less_equal", "LessEqual")]:
        assert getattr(sb, fn)(x, x).node.type_name == op
    b = sb.parameter([2], "boolean")
    for fn, op in [("logical_and", "LogicalAnd"), ("logical_or", "LogicalOr"), ("logical_xor", "LogicalXor"),
                   ("bitwise_xor", "BitwiseXor")]:
        assert getattr(sb, fn)(b, b).node.type_name == op
