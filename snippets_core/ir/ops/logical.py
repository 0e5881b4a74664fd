"""Element-wise logical ops on booleans, and bitwise XOR on integers."""

from __future__ import annotations

import numpy as np

from snippets_core.ir.ops.base import BinaryEltwise


class LogicalAnd(BinaryEltwise):
    """a and b (boolean inputs and output)."""

    INPUT_KIND = "boolean"
    LOGICAL_OUTPUT = True

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.logical_and(a, b)


class LogicalOr(BinaryEltwise):
    """a or b (boolean inputs and output)."""

    INPUT_KIND = "boolean"
    LOGICAL_OUTPUT = True

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.logical_or(a, b)


class LogicalXor(BinaryEltwise):
    """a xor b (boolean inputs and output)."""

    INPUT_KIND = "boolean"
    LOGICAL_OUTPUT = True

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.logical_xor(a, b)


class BitwiseXor(BinaryEltwise):
    """a ^ b on integers or booleans (output of the input type)."""

    INPUT_KIND = "integral_or_boolean"

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.bitwise_xor(a, b)
