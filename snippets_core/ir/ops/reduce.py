"""Reductions over the axes given by a second (integer) input: ReduceMax/Min/Sum/Mean/Prod/L1/L2."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from snippets_core.ir.element_type import ElementType, is_float_dtype
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.base import check_input_count, check_kind, known_ints, normalize_axes, same_dtype, upcast
from snippets_core.ir.shape import Shape, SymValue, sdim_prod


class Reduce(Node):
    """Base: ``Reduce*(data, axes, keep_dims=False)``. Empty ``axes`` reduce nothing (OpenVINO)."""

    _abstract = True
    ATTRS = ("keep_dims",)
    INPUT_KIND: ClassVar[str] = "numeric"

    def __init__(self, data: Output | Node, axes: Output | Node, *, keep_dims: bool = False,
                 name: str | None = None) -> None:
        self.keep_dims = bool(keep_dims)
        super().__init__(data, axes, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 2)
        et = check_kind(self, 0, self.INPUT_KIND, "data")
        axes = known_ints(self, 1, "axes")
        shape = self.input_shape(0)
        if not shape.rank_is_static:
            return [(et, Shape.dynamic())]
        rank = shape.rank
        if axes is None:
            if self.keep_dims:
                return [(et, Shape.dynamic(rank))]
            n = self.input_shape(1)
            if n.is_static:
                return [(et, Shape.dynamic(rank - (n.size)))]
            return [(et, Shape.dynamic())]
        norm = normalize_axes(axes, rank, "axes")
        if self.keep_dims:
            dims = [1 if i in norm else d for i, d in enumerate(shape.sym_dims)]
        else:
            dims = [d for i, d in enumerate(shape.sym_dims) if i not in norm]
        return [(et, Shape(dims))]

    reduce: ClassVar[Callable[..., np.ndarray]]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        x = np.asarray(args[0])
        axes = tuple(normalize_axes([int(a) for a in np.asarray(args[1]).reshape(-1)], x.ndim, "axes"))
        with np.errstate(all="ignore"):
            return [same_dtype(type(self).reduce(upcast(x), axis=axes, keepdims=self.keep_dims), x)]


def _extreme(dtype: np.dtype, lowest: bool) -> np.ndarray:
    if is_float_dtype(dtype):
        return np.asarray(-np.inf if lowest else np.inf, dtype)
    info = np.iinfo(dtype)
    return np.asarray(info.min if lowest else info.max, dtype)


def _max(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    # ``initial`` is the identity of max, so an empty reduction gives -inf (ONNX) instead of raising.
    return np.max(x, axis=axis, keepdims=keepdims, initial=_extreme(x.dtype, lowest=True))


def _min(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.min(x, axis=axis, keepdims=keepdims, initial=_extreme(x.dtype, lowest=False))


def _mean(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    # sum / count: an empty reduction gives nan (0/0) without numpy's "mean of empty slice" warning
    count = math.prod(x.shape[a] for a in axis) if axis else 1
    s = np.sum(x, axis=axis, keepdims=keepdims)
    return s / count if count else s * np.nan


def _l1(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(np.abs(x), axis=axis, keepdims=keepdims)


def _l2(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))


class ReduceMax(Reduce):
    """Maximum over ``axes``."""

    reduce = staticmethod(_max)


class ReduceMin(Reduce):
    """Minimum over ``axes``."""

    reduce = staticmethod(_min)


class ReduceSum(Reduce):
    """Sum over ``axes``."""

    reduce = staticmethod(np.sum)


class ReduceMean(Reduce):
    """Mean over ``axes``."""

    reduce = staticmethod(_mean)


class ReduceProd(Reduce):
    """Product over ``axes``."""

    reduce = staticmethod(np.prod)

    def sym_value(self, value: Callable[[int], SymValue | None]) -> SymValue | None:
        # Flatten and Size of a shape vector: the product of its (symbolic) entries.
        x = value(0)
        if x is None or self.input_shape(0).rank != 1:
            return None
        return (sdim_prod(x),)


class ReduceL1(Reduce):
    """Sum of absolute values over ``axes``."""

    reduce = staticmethod(_l1)


class ReduceL2(Reduce):
    """Euclidean norm over ``axes``."""

    INPUT_KIND = "real"
    reduce = staticmethod(_l2)
