"""FusedMulAdd: ``a * b + c`` as one op, so a target can emit one fused multiply-add instruction."""

from __future__ import annotations

import numpy as np

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.base import check_input_count, check_kind, check_same_types
from snippets_core.ir.shape import Shape, broadcast_shapes

#: float types whose product of two values is exact in float64 (24 + 24 significand bits < 53): for them the
#: reference computes in float64 and rounds once at the end, as a hardware FMA does
_WIDENED = frozenset({np.dtype(np.float32), np.dtype(np.float16), ElementType.bf16.numpy})


def fused_mul_add(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` with numpy broadcasting, in the dtype of ``a``.

    f32/f16/bf16: the product is exact in float64 and the sum is rounded to float64 and then to the result
    type, which is the single rounding of an FMA except for rare double-rounding ties. Integers wrap; f64
    rounds twice (numpy has no wider type).
    """
    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    with np.errstate(all="ignore"):  # inf/nan results are values here, as they are in a kernel
        if a.dtype in _WIDENED:
            wide = a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)
            return wide.astype(a.dtype)
        return np.asarray(a * b + c).astype(a.dtype, copy=False)


class FusedMulAdd(Node):
    """``a * b + c``: three numeric inputs of one element type, numpy-broadcast together.

    It exists only inside Subgraph bodies: MulAddToFusedMulAdd makes it from ``Add(Multiply(a, b), c)``
    and the plugin registers its emitters per target (see ``snippets_example_passes.plugin``).
    """

    def __init__(self, a: Output | Node, b: Output | Node, c: Output | Node, *, name: str | None = None) -> None:
        super().__init__(a, b, c, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 3)
        et = check_same_types(self, (0, 1, 2))
        for i in range(3):
            check_kind(self, i, "numeric")
        return [(et, broadcast_shapes(*(self.input_shape(i) for i in range(3))))]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        return [fused_mul_add(*args)]
