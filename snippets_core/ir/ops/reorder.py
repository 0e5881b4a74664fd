"""Reorder: the same logical tensor, moved from one memory layout to another (see :mod:`snippets_core.ir.layout`).

Inserted by AssignLayouts where a consumer needs another layout than its producer writes (the model's inputs and
outputs are plain, the x86 conv primitives read and write NHWC). Its reference evaluation makes the copy with
numpy; a target that wants reorders fast compiles them (x86: a JIT transpose kernel).
"""

from __future__ import annotations

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.layout import layout_named, logical, physical
from snippets_core.ir.node import Node, Output
from snippets_core.ir.shape import Shape


class Reorder(Node):
    """``y = x`` with ``y`` laid out in ``dst`` where ``x`` lies in ``src`` (layout names)."""

    ATTRS = ("src", "dst")

    def __init__(self, x: Output | Node, *, src: str, dst: str, name: str | None = None) -> None:
        self.src, self.dst = src, dst
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        shape = self.input_shape(0)
        rank = shape.rank if shape.rank_is_static else None
        for which in (self.src, self.dst):
            if not layout_named(which).fits(rank):
                raise ShapeInferenceError(f"Reorder '{self.name}': layout {which} does not fit a tensor {shape}")
        return [(self.input_type(0), shape)]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        dst = layout_named(self.dst)  # numpy reads ``x`` through its strides, whatever its layout
        return [logical(np.ascontiguousarray(physical(np.asarray(x), dst)), dst)]
