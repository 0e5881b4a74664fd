"""Element-wise unary ops (OpenVINO type names). Each defines ``compute`` on f32-upcast arrays.

Transcendental ops accept real types only; sign/rounding-style ops also accept integers.
"""

from __future__ import annotations

import math

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType, is_float_dtype
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.base import UnaryEltwise, check_input_count, check_kind, same_dtype, upcast
from snippets_core.ir.shape import Shape

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """Error function, element-wise, via math.erf (numpy has none and scipy is not a dependency)."""
    x = np.asarray(x)
    return _erf(x.astype(np.float64)).astype(x.dtype)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Two branches so that exp never overflows: exp(-|x|) is in (0, 1].
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.zeros((), x.dtype), x)


class Abs(UnaryEltwise):
    """|x|."""

    INPUT_KIND = "numeric"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.abs(x)


class Ceiling(UnaryEltwise):
    """Smallest integer >= x (integers pass through)."""

    INPUT_KIND = "numeric"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.ceil(x) if is_float_dtype(x.dtype) else x


class Floor(UnaryEltwise):
    """Largest integer <= x (integers pass through)."""

    INPUT_KIND = "numeric"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.floor(x) if is_float_dtype(x.dtype) else x


class Clamp(UnaryEltwise):
    """min(max(x, min), max). For integer inputs the bounds are rounded inward (ceil(min), floor(max))."""

    INPUT_KIND = "numeric"
    ATTRS = ("min", "max")

    def __init__(self, x: Output | Node, *, min: float, max: float, name: str | None = None) -> None:
        self.min = float(min)
        self.max = float(max)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if self.min > self.max:
            raise ShapeInferenceError(f"min {self.min} is greater than max {self.max}")
        return super().infer()

    def compute(self, x: np.ndarray) -> np.ndarray:
        if is_float_dtype(x.dtype):
            return np.clip(x, np.asarray(self.min, x.dtype), np.asarray(self.max, x.dtype))
        info = np.iinfo(x.dtype)
        lo = max(math.ceil(self.min), info.min)
        hi = min(math.floor(self.max), info.max)
        return np.clip(x, lo, hi).astype(x.dtype)


class Elu(UnaryEltwise):
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""

    INPUT_KIND = "real"
    ATTRS = ("alpha",)

    def __init__(self, x: Output | Node, *, alpha: float = 1.0, name: str | None = None) -> None:
        self.alpha = float(alpha)
        super().__init__(x, name=name)

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.where(x > 0, x, self.alpha * np.expm1(x))


class Selu(UnaryEltwise):
    """lambda_ * (x for x > 0, alpha * (exp(x) - 1) otherwise). alpha/lambda are attributes here
    (OpenVINO has them as inputs; the ONNX frontend reads them from ONNX attributes)."""

    INPUT_KIND = "real"
    ATTRS = ("alpha", "lambda_")

    def __init__(self, x: Output | Node, *, alpha: float = 1.67326319217681884765625,
                 lambda_: float = 1.05070102214813232421875, name: str | None = None) -> None:
        self.alpha = float(alpha)
        self.lambda_ = float(lambda_)
        super().__init__(x, name=name)

    def compute(self, x: np.ndarray) -> np.ndarray:
        return self.lambda_ * np.where(x > 0, x, self.alpha * np.expm1(x))


class Erf(UnaryEltwise):
    """The Gauss error function."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return erf(x)


class Exp(UnaryEltwise):
    """e**x."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.exp(x)


class Gelu(UnaryEltwise):
    """x * Phi(x): ``approximation_mode='erf'`` is exact, ``'tanh'`` the tanh approximation."""

    INPUT_KIND = "real"
    ATTRS = ("approximation_mode",)

    def __init__(self, x: Output | Node, *, approximation_mode: str = "erf", name: str | None = None) -> None:
        self.approximation_mode = approximation_mode.lower()
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if self.approximation_mode not in ("erf", "tanh"):
            raise ShapeInferenceError(f"approximation_mode must be 'erf' or 'tanh', got {self.approximation_mode!r}")
        return super().infer()

    def compute(self, x: np.ndarray) -> np.ndarray:
        if self.approximation_mode == "tanh":
            return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        return 0.5 * x * (1 + erf(x / math.sqrt(2)))


class HSwish(UnaryEltwise):
    """x * min(max(x + 3, 0), 6) / 6."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return x * np.clip(x + 3, 0, 6) / 6


class HSigmoid(UnaryEltwise):
    """min(max(x + 3, 0), 6) / 6."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.clip(x + 3, 0, 6) / 6


class HardSigmoid(UnaryEltwise):
    """max(0, min(1, alpha * x + beta)); alpha/beta are attributes here (ONNX defaults)."""

    INPUT_KIND = "real"
    ATTRS = ("alpha", "beta")

    def __init__(self, x: Output | Node, *, alpha: float = 0.2, beta: float = 0.5, name: str | None = None) -> None:
        self.alpha = float(alpha)
        self.beta = float(beta)
        super().__init__(x, name=name)

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.clip(self.alpha * x + self.beta, 0, 1)


class LogicalNot(UnaryEltwise):
    """Boolean negation."""

    INPUT_KIND = "boolean"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.logical_not(x)


class Log(UnaryEltwise):
    """Natural logarithm."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.log(x)


class Mish(UnaryEltwise):
    """x * tanh(softplus(x))."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return x * np.tanh(_softplus(x))


class Negative(UnaryEltwise):
    """-x (integers wrap around)."""

    INPUT_KIND = "numeric"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.negative(x)


class Relu(UnaryEltwise):
    """max(x, 0)."""

    INPUT_KIND = "numeric"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(x, np.zeros((), x.dtype))


class Round(UnaryEltwise):
    """Round to an integer: ``mode='half_to_even'`` (banker's) or ``'half_away_from_zero'``."""

    INPUT_KIND = "numeric"
    ATTRS = ("mode",)

    def __init__(self, x: Output | Node, *, mode: str = "half_to_even", name: str | None = None) -> None:
        self.mode = mode.lower()
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if self.mode not in ("half_to_even", "half_away_from_zero"):
            raise ShapeInferenceError(f"mode must be 'half_to_even' or 'half_away_from_zero', got {self.mode!r}")
        return super().infer()

    def compute(self, x: np.ndarray) -> np.ndarray:
        if not is_float_dtype(x.dtype):
            return x
        if self.mode == "half_to_even":
            return np.rint(x)
        return np.sign(x) * np.floor(np.abs(x) + 0.5)


class Sigmoid(UnaryEltwise):
    """1 / (1 + exp(-x))."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return _sigmoid(x)


class Sign(UnaryEltwise):
    """-1, 0 or 1."""

    INPUT_KIND = "numeric"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.sign(x)


class SoftPlus(UnaryEltwise):
    """log(1 + exp(x)), computed without overflow."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return _softplus(x)


class SoftSign(UnaryEltwise):
    """x / (1 + |x|)."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return x / (1 + np.abs(x))


class Sqrt(UnaryEltwise):
    """Square root."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.sqrt(x)


class Tanh(UnaryEltwise):
    """Hyperbolic tangent."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.tanh(x)


class Sin(UnaryEltwise):
    """Sine."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.sin(x)


class Cos(UnaryEltwise):
    """Cosine."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.cos(x)


class Tan(UnaryEltwise):
    """Tangent."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.tan(x)


class Sinh(UnaryEltwise):
    """Hyperbolic sine."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.sinh(x)


class Cosh(UnaryEltwise):
    """Hyperbolic cosine."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.cosh(x)


class Asin(UnaryEltwise):
    """Arcsine."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.arcsin(x)


class Acos(UnaryEltwise):
    """Arccosine."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.arccos(x)


class Atan(UnaryEltwise):
    """Arctangent."""

    INPUT_KIND = "real"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.arctan(x)


class Swish(Node):
    """x * sigmoid(beta * x); ``beta`` is an optional scalar input (1.0 when absent)."""

    def __init__(self, x: Output | Node, beta: Output | Node | None = None, *, name: str | None = None) -> None:
        super().__init__(*([x] if beta is None else [x, beta]), name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 1, 2)
        et = check_kind(self, 0, "real", "data")
        if len(self.inputs) == 2:
            tb = self.input_type(1)
            if ElementType.dynamic not in (et, tb) and tb != et:
                raise ShapeInferenceError(f"beta must have the data's element type {et}, got {tb}")
            sb = self.input_shape(1)
            if sb.is_static and sb.size != 1:
                raise ShapeInferenceError(f"beta must be a scalar, got shape {sb}")
        return [(et, self.input_shape(0))]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        x = np.asarray(args[0])
        xf = upcast(x)
        beta = upcast(np.asarray(args[1])).reshape(()) if len(args) > 1 else np.ones((), xf.dtype)
        with np.errstate(all="ignore"):
            return [same_dtype(xf * _sigmoid(beta * xf), x)]
