"""Base classes shared by op families: element-wise unary and binary ops."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.shape import Shape, broadcast_shapes


class UnaryEltwise(Node):
    """One input, one output of the same type and shape."""

    _abstract = True

    def __init__(self, x: Output | Node, *, name: str | None = None) -> None:
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 1:
            raise ShapeInferenceError(f"{self.type_name} takes 1 input, got {len(self.inputs)}")
        return [(self.input_type(0), self.input_shape(0))]


class BinaryEltwise(Node):
    """Two inputs of one element type, numpy-broadcast (``auto_broadcast='numpy'``) or equal
    shapes (``'none'``). ``LOGICAL_OUTPUT`` ops (comparisons) return booleans."""

    _abstract = True
    ATTRS = ("auto_broadcast",)
    LOGICAL_OUTPUT: ClassVar[bool] = False

    def __init__(self, a: Output | Node, b: Output | Node, *, auto_broadcast: str = "numpy",
                 name: str | None = None) -> None:
        self.auto_broadcast = auto_broadcast
        super().__init__(a, b, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 2:
            raise ShapeInferenceError(f"{self.type_name} takes 2 inputs, got {len(self.inputs)}")
        ta, tb = self.input_type(0), self.input_type(1)
        if ta != tb and ElementType.dynamic not in (ta, tb):
            raise ShapeInferenceError(f"element types differ: {ta} and {tb}")
        sa, sb = self.input_shape(0), self.input_shape(1)
        if self.auto_broadcast == "none":
            if not sa.compatible(sb):
                raise ShapeInferenceError(f"shapes {sa} and {sb} must be equal (auto_broadcast none)")
            shape = sa
        else:
            shape = broadcast_shapes(sa, sb)
        return [(ElementType.boolean if self.LOGICAL_OUTPUT else ta, shape)]


def same_dtype(result: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Cast a numpy result back to the input's dtype (numpy promotes f16 math, ints, ...)."""
    return np.asarray(result).astype(like.dtype, copy=False)
