"""Convert: element-type conversion."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.base import check_input_count
from snippets_core.ir.shape import Shape, SymValue


def convert_array(x: np.ndarray, dst: ElementType) -> np.ndarray:
    """Convert ``x`` to ``dst`` with the Convert op's rules.

    float -> integer truncates toward zero and saturates to the destination range (NaN -> 0), where C
    leaves the result undefined; integer -> integer wraps around (ConvertTruncation); anything -> boolean
    is ``x != 0``; float -> f16/bf16 rounds to nearest even.
    """
    x = np.asarray(x)
    to = dst.numpy
    if dst is ElementType.boolean:
        return x != 0
    if to.kind in "iu" and x.dtype.kind not in "iub":
        t = np.trunc(x.astype(np.float64))
        t = np.nan_to_num(t, nan=0.0, posinf=np.inf, neginf=-np.inf)
        info = np.iinfo(to)
        hi, lo = float(info.max), float(info.min)
        out = np.clip(t, lo, hi).astype(to)
        # float(max) of 64-bit types rounds up past the range; clamp those explicitly.
        return np.where(t >= hi, info.max, out).astype(to, copy=False)
    if dst is ElementType.bf16 and x.dtype.kind in "iub":
        return x.astype(np.float32).astype(to)
    return x.astype(to)


class Convert(Node):
    """Element-wise conversion to ``destination_type`` (see :func:`convert_array` for the rules)."""

    ATTRS = ("destination_type",)

    def __init__(self, x: Output | Node, *, destination_type: ElementType | str, name: str | None = None) -> None:
        self.destination_type = ElementType.parse(destination_type)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 1)
        if self.destination_type in (ElementType.dynamic, ElementType.string):
            raise ShapeInferenceError(f"cannot convert to {self.destination_type}")
        if self.input_type(0) is ElementType.string:
            raise ShapeInferenceError("cannot convert a string tensor")
        return [(self.destination_type, self.input_shape(0))]

    def sym_value(self, value: Callable[[int], SymValue | None]) -> SymValue | None:
        # Exporters cast shape vectors between i64 and i32 (and to bool for masks): the entries stay.
        return value(0) if self.destination_type.is_integral and self.input_type(0).is_integral else None

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        with np.errstate(all="ignore"):  # f32 -> f16 overflow gives inf, as hardware does
            return [convert_array(args[0], self.destination_type)]
