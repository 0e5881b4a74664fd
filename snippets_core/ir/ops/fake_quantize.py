"""FakeQuantize: quantize to ``levels`` steps and dequantize, with OpenVINO semantics."""

from __future__ import annotations

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.base import check_input_count, check_kind, check_same_types, same_dtype, upcast
from snippets_core.ir.shape import Shape, broadcast_shapes


class FakeQuantize(Node):
    """``FakeQuantize(x, in_low, in_high, out_low, out_high, levels)``, element-wise with numpy broadcast::

        x <= min(in_low, in_high):  out_low
        x >  max(in_low, in_high):  out_high
        otherwise:  round((x - in_low) / (in_high - in_low) * (levels - 1)) / (levels - 1)
                    * (out_high - out_low) + out_low

    ``round`` is half-to-even. The data-flow decomposition (clamp to [in_low, in_high], scale by
    ``(levels-1)/(in_high-in_low)``, shift, Round half-to-even, dequantize) computes the same for
    in_low < in_high.
    """

    ATTRS = ("levels", "auto_broadcast")

    def __init__(self, x: Output | Node, in_low: Output | Node, in_high: Output | Node, out_low: Output | Node,
                 out_high: Output | Node, *, levels: int, auto_broadcast: str = "numpy",
                 name: str | None = None) -> None:
        self.levels = int(levels)
        self.auto_broadcast = auto_broadcast
        super().__init__(x, in_low, in_high, out_low, out_high, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 5)
        if self.levels < 2:
            raise ShapeInferenceError(f"levels must be at least 2, got {self.levels}")
        check_kind(self, 0, "real", "data")
        et = check_same_types(self, range(5), "data and range inputs")
        shapes = [self.input_shape(i) for i in range(5)]
        if self.auto_broadcast == "none":
            if not all(shapes[0].compatible(s) for s in shapes[1:]):
                raise ShapeInferenceError("shapes " + ", ".join(map(str, shapes)) + " must be equal (auto_broadcast none)")
            return [(et, shapes[0])]
        if self.auto_broadcast != "numpy":
            raise ShapeInferenceError(f"auto_broadcast must be 'numpy' or 'none', got {self.auto_broadcast!r}")
        return [(et, broadcast_shapes(*shapes))]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        x, il, ih, ol, oh = (upcast(np.asarray(a)) for a in args)
        n = self.levels - 1
        with np.errstate(all="ignore"):  # the middle branch divides by zero where in_low == in_high; unused there
            q = np.rint((x - il) / (ih - il) * n) / n * (oh - ol) + ol
            r = np.where(x <= np.minimum(il, ih), ol, np.where(x > np.maximum(il, ih), oh, q))
            return [same_dtype(r, np.asarray(args[0]))]
