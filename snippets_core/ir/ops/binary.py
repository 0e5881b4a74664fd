"""Element-wise binary arithmetic and comparison ops with numpy broadcasting (OpenVINO type names)."""

from __future__ import annotations

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.ops.base import BinaryEltwise
from snippets_core.ir.shape import SDim, Shape, SymDim, sdim_add, sdim_div, sdim_floordiv, sdim_mul


def _int_div_trunc(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division rounded toward zero (C and ONNX Div); x / 0 gives 0 instead of trapping."""
    safe_b = np.where(b == 0, 1, b)
    q = np.floor_divide(a, safe_b)
    # floor_divide rounds down; move one step toward zero where the exact quotient was negative and inexact.
    fix = (np.remainder(a, safe_b) != 0) & ((a < 0) != (safe_b < 0))
    q = q + fix.astype(q.dtype)
    return np.where(b == 0, 0, q)


class Add(BinaryEltwise):
    """a + b."""

    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a + b

    def sym_rule(self, a: SDim, b: SDim) -> SDim:
        return sdim_add(a, b)


class Subtract(BinaryEltwise):
    """a - b."""

    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a - b

    def sym_rule(self, a: SDim, b: SDim) -> SDim:
        return sdim_add(a, sdim_mul(b, -1))


class Multiply(BinaryEltwise):
    """a * b."""

    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a * b

    def sym_rule(self, a: SDim, b: SDim) -> SDim:
        return sdim_mul(a, b)


class Divide(BinaryEltwise):
    """a / b. Integer division truncates toward zero, as ONNX Div does (OpenVINO's default
    ``python_division=True`` floors instead; the ONNX behaviour is the one exported models expect)."""

    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.kind in "iu":
            return _int_div_trunc(a, b)
        return a / b

    def sym_rule(self, a: SDim, b: SDim) -> SDim:
        exact = sdim_div(a, b)
        if exact is not None or not isinstance(b, int) or b <= 0 or not isinstance(a, SymDim):
            return exact
        # a dim sum with no negative term is >= 0, where truncation is floor: ``C // groups``, ``H // 2``
        return sdim_floordiv(a, b) if all(c > 0 for _, c in a.terms) else None


class Maximum(BinaryEltwise):
    """max(a, b)."""

    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.maximum(a, b)


class Minimum(BinaryEltwise):
    """min(a, b)."""

    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.minimum(a, b)


class Power(BinaryEltwise):
    """a ** b. Integer powers with a negative exponent go through f64 and truncate (2 ** -1 == 0)."""

    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.kind in "iu" and np.any(b < 0):
            return np.trunc(np.power(a.astype(np.float64), b.astype(np.float64)))
        return np.power(a, b)


class SquaredDifference(BinaryEltwise):
    """(a - b) ** 2."""

    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        d = a - b
        return d * d


class FloorMod(BinaryEltwise):
    """a - floor(a / b) * b: the result has the sign of the divisor (Python's %)."""

    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.mod(a, b)

    def sym_rule(self, a: SDim, b: SDim) -> SDim:
        # a - b * floor(a / b) for a positive int b: ``(8 - W % 8) % 8`` pads W to a multiple of 8
        if not isinstance(b, int) or b <= 0 or a is None:
            return None
        return sdim_add(a, sdim_mul(sdim_floordiv(a, b), -b))


class Mod(BinaryEltwise):
    """a - trunc(a / b) * b: the result has the sign of the dividend (C fmod)."""

    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.fmod(a, b)

    def sym_rule(self, a: SDim, b: SDim) -> SDim:
        # truncation is floor for a dim sum with no negative term: FloorMod's rule
        if isinstance(a, SymDim) and not all(c > 0 for _, c in a.terms):
            return None
        return FloorMod.sym_rule(self, a, b)  # type: ignore[arg-type]


class PRelu(BinaryEltwise):
    """x for x >= 0, slope * x otherwise. ``slope`` is numpy-broadcast to x's shape (one-way: the output
    keeps x's shape); the ONNX frontend reshapes OpenVINO-style per-channel 1-D slopes before."""

    INPUT_KIND = "numeric"

    def infer(self) -> list[tuple[ElementType, Shape]]:
        (et, shape), = super().infer()
        sx, ss = self.input_shape(0), self.input_shape(1)
        if sx.rank_is_static and ss.rank_is_static:
            if ss.rank > sx.rank:
                raise ShapeInferenceError(f"slope shape {ss} has a higher rank than data shape {sx}")
            if sx.is_static and shape.is_static and shape != sx:
                raise ShapeInferenceError(f"slope shape {ss} does not broadcast to data shape {sx}")
            shape = Shape([a if a is not None else b for a, b in zip(sx.dims, shape.dims)])  # type: ignore[arg-type]
        return [(et, shape)]

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.where(a < 0, a * b, a)


class Equal(BinaryEltwise):
    """a == b (boolean)."""

    LOGICAL_OUTPUT = True

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.equal(a, b)

    def sym_rule(self, a: SDim, b: SDim) -> SDim:
        # Two equal expressions are equal; a dim (>= 0) never equals a negative number (Expand's -1 test).
        if a is not None and a == b:
            return 1
        if any(isinstance(x, int) and x < 0 for x in (a, b)) and any(isinstance(x, SymDim) for x in (a, b)):
            return 0
        return None


class NotEqual(BinaryEltwise):
    """a != b (boolean)."""

    LOGICAL_OUTPUT = True

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.not_equal(a, b)


class Greater(BinaryEltwise):
    """a > b (boolean)."""

    LOGICAL_OUTPUT = True
    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.greater(a, b)


class GreaterEqual(BinaryEltwise):
    """a >= b (boolean)."""

    LOGICAL_OUTPUT = True
    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.greater_equal(a, b)


class Less(BinaryEltwise):
    """a < b (boolean)."""

    LOGICAL_OUTPUT = True
    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.less(a, b)


class LessEqual(BinaryEltwise):
    """a <= b (boolean)."""

    LOGICAL_OUTPUT = True
    INPUT_KIND = "numeric"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.less_equal(a, b)
