"""Softmax and LogSoftmax along one axis."""

from __future__ import annotations

import numpy as np

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.base import check_input_count, check_kind, same_dtype, upcast
from snippets_core.ir.shape import Shape, normalize_axis


class Softmax(Node):
    """exp(x - max) / sum(exp(x - max)) along ``axis`` (negative counts from the end; default 1 as in
    OpenVINO Softmax-8)."""

    ATTRS = ("axis",)

    def __init__(self, x: Output | Node, *, axis: int = 1, name: str | None = None) -> None:
        self.axis = int(axis)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 1)
        et = check_kind(self, 0, "real", "data")
        shape = self.input_shape(0)
        if shape.rank_is_static:
            normalize_axis(self.axis, shape.rank)
        return [(et, shape)]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        x = upcast(np.asarray(args[0]))
        if x.size == 0:  # an empty axis (a zero-length sequence): nothing to normalize, and np.max has no identity
            return [np.asarray(args[0]).copy()]
        with np.errstate(all="ignore"):
            return [same_dtype(self.compute(x, self.axis), np.asarray(args[0]))]

    @staticmethod
    def compute(x: np.ndarray, axis: int) -> np.ndarray:
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)


class LogSoftmax(Softmax):
    """x - max - log(sum(exp(x - max))) along ``axis``."""

    @staticmethod
    def compute(x: np.ndarray, axis: int) -> np.ndarray:
        s = x - np.max(x, axis=axis, keepdims=True)
        return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))
