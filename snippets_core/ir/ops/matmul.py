"""MatMul with numpy matmul semantics (1-D inputs, batch broadcasting) and transpose flags."""

from __future__ import annotations

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.base import check_input_count, check_kind, check_same_types, same_dtype, upcast
from snippets_core.ir.shape import Shape, broadcast_shapes


class MatMul(Node):
    """``a @ b`` after swapping the last two dims of ``a``/``b`` when ``transpose_a``/``transpose_b``.

    A 1-D ``a`` is a row [1, K] and a 1-D ``b`` a column [K, 1] whose unit dim is dropped from the
    output, as in numpy; transpose flags are ignored for 1-D inputs (OpenVINO). Batch dims broadcast.
    """

    ATTRS = ("transpose_a", "transpose_b")

    def __init__(self, a: Output | Node, b: Output | Node, *, transpose_a: bool = False,
                 transpose_b: bool = False, name: str | None = None) -> None:
        self.transpose_a = bool(transpose_a)
        self.transpose_b = bool(transpose_b)
        super().__init__(a, b, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 2)
        et = check_same_types(self, (0, 1), "MatMul inputs")
        check_kind(self, 0, "numeric", "input a")
        sa, sb = self.input_shape(0), self.input_shape(1)
        if not (sa.rank_is_static and sb.rank_is_static):
            return [(et, Shape.dynamic())]
        if sa.rank == 0 or sb.rank == 0:
            raise ShapeInferenceError(f"MatMul inputs must have rank >= 1, got {sa} and {sb}")
        a = list(sa.sym_dims) if sa.rank > 1 else [1, sa.sym(0)]
        b = list(sb.sym_dims) if sb.rank > 1 else [sb.sym(0), 1]
        if self.transpose_a and sa.rank > 1:
            a[-2], a[-1] = a[-1], a[-2]
        if self.transpose_b and sb.rank > 1:
            b[-2], b[-1] = b[-1], b[-2]
        if isinstance(a[-1], int) and isinstance(b[-2], int) and a[-1] != b[-2]:
            raise ShapeInferenceError(f"inner dims differ: {a[-1]} vs {b[-2]} (shapes {sa} and {sb}, "
                                      f"transpose_a={self.transpose_a}, transpose_b={self.transpose_b})")
        try:
            batch = broadcast_shapes(Shape(a[:-2]), Shape(b[:-2]))
        except ShapeInferenceError:
            raise ShapeInferenceError(f"batch dims of {sa} and {sb} do not broadcast") from None
        dims = list(batch.sym_dims)
        if sa.rank > 1:
            dims.append(a[-2])
        if sb.rank > 1:
            dims.append(b[-1])
        return [(et, Shape(dims))]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        a0, b0 = np.asarray(args[0]), np.asarray(args[1])
        a, b = upcast(a0), upcast(b0)
        if a.dtype.kind in "iu":  # accumulate integers wide, then wrap to the output type
            a, b = a.astype(np.int64), b.astype(np.int64)
        if self.transpose_a and a.ndim > 1:
            a = np.swapaxes(a, -1, -2)
        if self.transpose_b and b.ndim > 1:
            b = np.swapaxes(b, -1, -2)
        with np.errstate(all="ignore"):
            return [same_dtype(np.matmul(a, b), a0)]
