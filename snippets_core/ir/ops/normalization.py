"""LayerNormalization (ONNX semantics) and GroupNormalization (OpenVINO v12 semantics)."""

from __future__ import annotations

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.base import check_input_count, check_kind, check_rank, check_same_types, same_dtype, upcast
from snippets_core.ir.shape import Shape, broadcast_shapes, normalize_axis


class LayerNormalization(Node):
    """``(x - mean) / sqrt(var + epsilon) * scale (+ bias)``, mean and variance over all axes >= ``axis``.

    ``scale`` and the optional ``bias`` broadcast (numpy) to x's shape; the output has x's shape.
    """

    ATTRS = ("axis", "epsilon")

    def __init__(self, x: Output | Node, scale: Output | Node, bias: Output | Node | None = None, *,
                 axis: int = -1, epsilon: float = 1e-5, name: str | None = None) -> None:
        self.axis = int(axis)
        self.epsilon = float(epsilon)
        super().__init__(*([x, scale] if bias is None else [x, scale, bias]), name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 2, 3)
        check_kind(self, 0, "real", "data")
        et = check_same_types(self, range(len(self.inputs)), "data, scale and bias")
        shape = self.input_shape(0)
        if shape.rank_is_static:
            normalize_axis(self.axis, shape.rank)
        for i in range(1, len(self.inputs)):
            si = self.input_shape(i)
            b = broadcast_shapes(shape, si)
            if shape.is_static and b.is_static and b != shape:
                raise ShapeInferenceError(f"input {i} of shape {si} does not broadcast to the data shape {shape}")
        return [(et, shape)]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        x = upcast(np.asarray(args[0]))
        axes = tuple(range(normalize_axis(self.axis, x.ndim), x.ndim))
        mean = np.mean(x, axis=axes, keepdims=True)
        d = x - mean
        var = np.mean(d * d, axis=axes, keepdims=True)
        y = d / np.sqrt(var + np.asarray(self.epsilon, x.dtype)) * upcast(np.asarray(args[1]))
        if len(args) > 2:
            y = y + upcast(np.asarray(args[2]))
        return [same_dtype(y, np.asarray(args[0]))]


class GroupNormalization(Node):
    """Normalize ``x`` [N, C, ...] over each of ``num_groups`` channel groups (the group's channels and
    all spatial dims), then ``* scale[c] + bias[c]`` per channel (scale/bias of shape [C])."""

    ATTRS = ("num_groups", "epsilon")

    def __init__(self, x: Output | Node, scale: Output | Node, bias: Output | Node, *, num_groups: int,
                 epsilon: float = 1e-5, name: str | None = None) -> None:
        self.num_groups = int(num_groups)
        self.epsilon = float(epsilon)
        super().__init__(x, scale, bias, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 3)
        check_kind(self, 0, "real", "data")
        et = check_same_types(self, range(3), "data, scale and bias")
        if self.num_groups < 1:
            raise ShapeInferenceError(f"num_groups must be >= 1, got {self.num_groups}")
        shape = self.input_shape(0)
        check_rank(self, 1, (1,), "scale")
        check_rank(self, 2, (1,), "bias")
        if shape.rank_is_static:
            if shape.rank < 2:
                raise ShapeInferenceError(f"data must have rank >= 2, got {shape}")
            c = shape.dims[1]  # type: ignore[index]
            if c is not None:
                if c % self.num_groups:
                    raise ShapeInferenceError(f"{c} channels do not divide into {self.num_groups} groups")
                for i, what in ((1, "scale"), (2, "bias")):
                    n = self.input_shape(i)
                    if n.is_static and n.dims[0] != c:  # type: ignore[index]
                        raise ShapeInferenceError(f"{what} has shape {n}, expected [{c}] (one per channel)")
        return [(et, shape)]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        x = upcast(np.asarray(args[0]))
        n, c = x.shape[0], x.shape[1]
        g = x.reshape(n, self.num_groups, -1)
        mean = g.mean(axis=2, keepdims=True)
        d = g - mean
        var = (d * d).mean(axis=2, keepdims=True)
        y = (d / np.sqrt(var + np.asarray(self.epsilon, x.dtype))).reshape(x.shape)
        bshape = (1, c) + (1,) * (x.ndim - 2)
        y = y * upcast(np.asarray(args[1])).reshape(bshape) + upcast(np.asarray(args[2])).reshape(bshape)
        return [same_dtype(y, np.asarray(args[0]))]
