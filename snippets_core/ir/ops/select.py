"""Select: element-wise choice between two tensors by a boolean condition."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.base import check_input_count, check_kind, check_same_types
from snippets_core.ir.shape import Shape, SymValue, broadcast_shapes


class Select(Node):
    """``then`` where ``cond`` is true, else ``else``; all three numpy-broadcast together."""

    ATTRS = ("auto_broadcast",)

    def __init__(self, cond: Output | Node, then: Output | Node, else_: Output | Node, *,
                 auto_broadcast: str = "numpy", name: str | None = None) -> None:
        self.auto_broadcast = auto_broadcast
        super().__init__(cond, then, else_, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 3)
        check_kind(self, 0, "boolean", "the condition")
        et = check_same_types(self, (1, 2), "the then/else inputs")
        shapes = [self.input_shape(i) for i in range(3)]
        if self.auto_broadcast == "none":
            if not (shapes[0].compatible(shapes[1]) and shapes[1].compatible(shapes[2])):
                raise ShapeInferenceError("shapes " + ", ".join(map(str, shapes)) + " must be equal (auto_broadcast none)")
            return [(et, shapes[1])]
        if self.auto_broadcast != "numpy":
            raise ShapeInferenceError(f"auto_broadcast must be 'numpy' or 'none', got {self.auto_broadcast!r}")
        return [(et, broadcast_shapes(*shapes))]

    def sym_value(self, value: Callable[[int], SymValue | None]) -> SymValue | None:
        # Where(Equal(shape, -1), ones, shape): the TorchScript exporter's expand(-1) on a shape vector.
        c, a, b = value(0), value(1), value(2)
        if c is None or a is None or b is None or not all(isinstance(x, int) for x in c):
            return None
        n = max(len(c), len(a), len(b))
        if any(len(v) not in (1, n) for v in (c, a, b)):
            return None
        c, a, b = ((v * n if len(v) == 1 else v) for v in (c, a, b))
        return tuple(x if k else y for k, x, y in zip(c, a, b))

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        c, a, b = (np.asarray(x) for x in args)
        return [np.where(c.astype(bool), a, b).astype(a.dtype, copy=False)]
