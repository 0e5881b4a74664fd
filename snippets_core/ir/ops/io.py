"""Parameter, Constant and Result: the ends of a graph and its literal values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.shape import Dim, Shape, as_shape


class Parameter(Node):
    """A model input with a declared element type and shape (dims may be dynamic)."""

    ATTRS = ("element_type", "shape")

    def __init__(
        self,
        element_type: ElementType | str = ElementType.f32,
        shape: Shape | Sequence[Dim] | None = (),
        *,
        name: str | None = None,
    ) -> None:
        self.element_type = ElementType.parse(element_type)
        self.shape = as_shape(shape)
        super().__init__(name=name)
        self.outputs[0].names.add(self.name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        return [(self.element_type, self.shape)]

    def clone_with_new_inputs(self, inputs: Sequence[Output | Node]) -> Node:
        new = Parameter(self.element_type, self.shape, name=self.name)
        new.rt_info = dict(self.rt_info)
        return new


class Constant(Node):
    """A literal tensor. ``value`` is a numpy array of the element type's dtype."""

    ATTRS = ("value",)

    def __init__(self, value: Any, element_type: ElementType | str | None = None, *, name: str | None = None) -> None:
        if element_type is not None:
            et = ElementType.parse(element_type)
            arr = np.asarray(value, dtype=et.numpy)
        else:
            arr = np.asarray(value)
            if arr.dtype == np.float64 and not isinstance(value, np.ndarray):
                arr = arr.astype(np.float32)  # Python floats become f32, as in the op sets we model
        arr = np.ascontiguousarray(arr).reshape(arr.shape)  # ascontiguousarray turns 0-d into 1-d
        arr.setflags(write=False)
        self.value = arr
        super().__init__(name=name)

    @property
    def element_type(self) -> ElementType:
        return ElementType.from_numpy(self.value.dtype)

    @property
    def is_scalar(self) -> bool:
        """True for a tensor with one element (of any rank), as the tokenizer means it."""
        return self.value.size == 1

    def infer(self) -> list[tuple[ElementType, Shape]]:
        return [(self.element_type, Shape(self.value.shape))]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        return [self.value]

    def clone_with_new_inputs(self, inputs: Sequence[Output | Node]) -> Node:
        new = Constant(self.value, name=self.name)
        new.rt_info = dict(self.rt_info)
        return new


class Result(Node):
    """A model output; its name is the output's name."""

    def __init__(self, x: Output | Node, *, name: str | None = None) -> None:
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 1:
            raise ShapeInferenceError("Result takes exactly one input")
        return [(self.input_type(0), self.input_shape(0))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [x]
