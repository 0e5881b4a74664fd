"""Unary element-wise ops: shape inference, type checks and values against formulas written here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from snippets_core.errors import ShapeInferenceError
from snippets_core.frontends import builder as sb
from snippets_core.ir import OPS, ElementType, Shape
from snippets_core.ir.ops.io import Constant, Parameter


def vec(f):
    """Apply a scalar math function element-wise in float64."""
    return np.vectorize(lambda v: f(float(v)), otypes=[np.float64])


def _sigmoid(v: float) -> float:
    return 1 / (1 + math.exp(-v)) if v >= 0 else math.exp(v) / (1 + math.exp(v))


def _softplus(v: float) -> float:
    return v + math.log1p(math.exp(-v)) if v > 0 else math.log1p(math.exp(v))


SELU_A, SELU_L = 1.6732632423543772, 1.0507009873554805

# (type name, constructor attrs, scalar formula, input domain)
CASES = [
    ("Abs", {}, abs, "any"),
    ("Ceiling", {}, math.ceil, "any"),
    ("Floor", {}, math.floor, "any"),
    ("Clamp", {"min": -0.5, "max": 1.25}, lambda v: min(max(v, -0.5), 1.25), "any"),
    ("Elu", {"alpha": 0.7}, lambda v: v if v > 0 else 0.7 * (math.exp(v) - 1), "any"),
    ("Selu", {"alpha": 1.5, "lambda_": 2.0}, lambda v: 2.0 * (v if v > 0 else 1.5 * (math.exp(v) - 1)), "any"),
    ("Selu", {}, lambda v: SELU_L * (v if v > 0 else SELU_A * (math.exp(v) - 1)), "any"),
    ("Erf", {}, math.erf, "any"),
    ("Exp", {}, math.exp, "any"),
    ("Gelu", {"approximation_mode": "erf"}, lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))), "any"),
    ("Gelu", {"approximation_mode": "tanh"},
     lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))), "any"),
    ("HSwish", {}, lambda v: v * min(max(v + 3, 0), 6) / 6, "any"),
    ("HSigmoid", {}, lambda v: min(max(v + 3, 0), 6) / 6, "any"),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, lambda v: max(0.0, min(1.0, 0.3 * v + 0.4)), "any"),
    ("Log", {}, math.log, "positive"),
    ("Mish", {}, lambda v: v * math.tanh(_softplus(v)), "any"),
    ("Negative", {}, lambda v: -v, "any"),
    ("Relu", {}, lambda v: max(v, 0.0), "any"),
    ("Sigmoid", {}, _sigmoid, "any"),
    ("Sign", {}, lambda v: (v > 0) - (v < 0), "any"),
    ("SoftPlus", {}, _softplus, "any"),
    ("SoftSign", {}, lambda v: v / (1 + abs(v)), "any"),
    ("Sqrt", {}, math.sqrt, "positive"),
    ("Tanh", {}, math.tanh, "any"),
    ("Sin", {}, math.sin, "any"),
    ("Cos", {}, math.cos, "any"),
    ("Tan", {}, math.tan, "small"),
    ("Sinh", {}, math.sinh, "any"),
    ("Cosh", {}, math.cosh, "any"),
    ("Asin", {}, math.asin, "unit"),
    ("Acos", {}, math.acos, "unit"),
    ("Atan", {}, math.atan, "any"),
]

DOMAINS = {
    "any": np.linspace(-4.0, 4.0, 24),
    "positive": np.linspace(0.05, 9.0, 24),
    "small": np.linspace(-1.2, 1.2, 24),
    "unit": np.linspace(-0.95, 0.95, 24),
}


@pytest.mark.parametrize(("op", "attrs", "formula", "domain"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_unary_values(op, attrs, formula, domain, real_type, close):
    x = DOMAINS[domain].reshape(2, 3, 4).astype(ElementType.parse(real_type).numpy)
    p = Parameter(real_type, [2, 3, 4])
    node = OPS[op](p, **attrs)
    assert node.outputs[0].element_type == ElementType.parse(real_type)
    assert node.outputs[0].shape == Shape([2, 3, 4])
    (y,) = node.evaluate(x)
    # the oracle sees the same (rounded) inputs, in float64
    close(y, vec(formula)(x.astype(np.float64)), real_type)


def test_round_modes():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.4, -2.6], np.float32)
    p = Parameter("f32", [8])
    (even,) = OPS["Round"](p, mode="half_to_even").evaluate(x)
    (away,) = OPS["Round"](p, mode="half_away_from_zero").evaluate(x)
    np.testing.assert_array_equal(even, [-2, -2, -0, 0, 2, 2, 2, -3])
    np.testing.assert_array_equal(away, [-3, -2, -1, 1, 2, 3, 2, -3])


def test_swish_with_and_without_beta(real_type, close):
    x = np.linspace(-5, 5, 12).astype(ElementType.parse(real_type).numpy)
    p = Parameter(real_type, [12])
    (y1,) = OPS["Swish"](p).evaluate(x)
    beta = Constant(np.asarray(0.75, ElementType.parse(real_type).numpy))
    node = OPS["Swish"](p, beta)
    (y2,) = node.evaluate(x, beta.value)
    xd = x.astype(np.float64)
    close(y1, vec(lambda v: v * _sigmoid(v))(xd), real_type)
    close(y2, vec(lambda v: v * _sigmoid(0.75 * v))(xd), real_type)


def test_swish_rejects_non_scalar_beta():
    with pytest.raises(ShapeInferenceError, match="scalar"):
        OPS["Swish"](Parameter("f32", [4]), Constant(np.ones(2, np.float32)))


@pytest.mark.parametrize(("op", "attrs", "x", "expected"), [
    ("Abs", {}, [-3, 0, 5], [3, 0, 5]),
    ("Negative", {}, [-3, 0, 5], [3, 0, -5]),
    ("Relu", {}, [-3, 0, 5], [0, 0, 5]),
    ("Sign", {}, [-3, 0, 5], [-1, 0, 1]),
    # integer Clamp rounds the bounds inward: [-1.5, 2.5] -> [-1, 2]
    ("Clamp", {"min": -1.5, "max": 2.5}, [-3, 0, 5], [-1, 0, 2]),
    ("Floor", {}, [-3, 0, 5], [-3, 0, 5]),
])
def test_integer_unary(op, attrs, x, expected):
    node = OPS[op](Parameter("i32", [3]), **attrs)
    (y,) = node.evaluate(np.array(x, np.int32))
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, expected)


def test_logical_not():
    node = OPS["LogicalNot"](Parameter("boolean", [3]))
    assert node.outputs[0].element_type is ElementType.boolean
    (y,) = node.evaluate(np.array([True, False, True]))
    np.testing.assert_array_equal(y, [False, True, False])


@pytest.mark.parametrize(("op", "et"), [("Exp", "i32"), ("Sigmoid", "i64"), ("LogicalNot", "f32"),
                                        ("Abs", "boolean"), ("Gelu", "u8")])
def test_unary_rejects_element_type(op, et):
    with pytest.raises(ShapeInferenceError, match=f"{op} node .*element type"):
        OPS[op](Parameter(et, [2]))


def test_unary_bad_attributes():
    with pytest.raises(ShapeInferenceError, match="approximation_mode"):
        OPS["Gelu"](Parameter("f32", [2]), approximation_mode="fast")
    with pytest.raises(ShapeInferenceError, match="min 2.0 is greater than max 1.0"):
        OPS["Clamp"](Parameter("f32", [2]), min=2, max=1)
    with pytest.raises(ShapeInferenceError, match="mode"):
        OPS["Round"](Parameter("f32", [2]), mode="up")


def test_unary_keeps_dynamic_shapes():
    assert OPS["Relu"](Parameter("f32", [None, 3])).outputs[0].shape == Shape([None, 3])
    assert OPS["Tanh"](Parameter("f16", None)).outputs[0].shape == Shape(None)


def test_unary_overflow_is_a_value():
    # exp overflows to inf in f16 after rounding, without a warning turning into an error
    (y,) = OPS["Exp"](Parameter("f16", [2])).evaluate(np.array([20.0, -30.0], np.float16))
    assert np.isinf(y[0]) and y[1] == 0


def test_builder_unary_functions_cover_the_ops():
    p = sb.parameter([4], "f32")
    names = {"abs": "Abs", "ceiling": "Ceiling", "erf": "Erf", "exp": "Exp", "floor": "Floor", "hswish": "HSwish",
             "hsigmoid": "HSigmoid", "log": "Log", "mish": "Mish", "negative": "Negative", "relu": "Relu",
             "sigmoid": "Sigmoid", "sign": "Sign", "sin": "Sin", "cos": "Cos", "sinh": "Sinh",
             "softplus": "SoftPlus", "sqrt": "Sqrt", "tanh": "Tanh", "tan": "Tan", "asin": "Asin", "acos": "Acos",
             "atan": "Atan", "cosh": "Cosh", "softsign": "SoftSign"}
    for fn, op in names.items():
        assert getattr(sb, fn)(p).node.type_name == op
    assert sb.gelu(p, approximation_mode="tanh").node.approximation_mode == "tanh"
    assert sb.clamp(p, 0, 6).node.attrs() == {"min": 0.0, "max": 6.0}
    assert sb.elu(p, 0.5).node.alpha == 0.5
    assert sb.round(p, "half_away_from_zero").node.mode == "half_away_from_zero"
    assert sb.selu(p, 1.0, 2.0).node.attrs() == {"alpha": 1.0, "lambda_": 2.0}
    assert sb.hard_sigmoid(p).node.attrs() == {"alpha": 0.2, "beta": 0.5}
    assert len(sb.swish(p, 2.0).node.inputs) == 2
    assert sb.logical_not(sb.parameter([4], "boolean")).element_type is ElementType.boolean
