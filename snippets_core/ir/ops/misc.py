"""Reference-only ops that exported models need around the fusable core: shape computations (ShapeOf,
Slice, ConstantOfShape, Range, Tile, Pad), index ops (ArgMax, ArgMin, TopK, CumSum), layout moves
(DepthToSpace, SpaceToDepth) and a few element-wise ops outside the fusable set.

Their shape inference uses the values of constant inputs when they are known (a Constant producer,
or anything ``const_eval`` can fold), so shapes stay static through the shape arithmetic of ONNX exports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.base import UnaryEltwise, same_dtype
from snippets_core.ir.shape import Dim, SDim, Shape, SymValue, normalize_axis, sdim_add, sdim_div, sdim_mul


def constant_input(node: Node, i: int) -> np.ndarray | None:
    """The value of input ``i`` of ``node`` when it is known before run time, else None."""
    from snippets_core.ir.const_eval import constant_value

    return constant_value(node.inputs[i].source)


def _require_integral(node: Node, i: int, what: str) -> None:
    et = node.input_type(i)
    if et != ElementType.dynamic and not et.is_integral:
        raise ShapeInferenceError(f"{what} must be integers, got {et}")


class ShapeOf(Node):
    """The shape of a tensor as a 1-D integer tensor (``output_type`` i64 or i32)."""

    ATTRS = ("output_type",)

    def __init__(self, x: Output | Node, *, output_type: ElementType | str = ElementType.i64,
                 name: str | None = None) -> None:
        self.output_type = ElementType.parse(output_type)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if self.output_type not in (ElementType.i64, ElementType.i32):
            raise ShapeInferenceError(f"output_type must be i64 or i32, got {self.output_type}")
        s = self.input_shape(0)
        return [(self.output_type, Shape([s.rank] if s.rank_is_static else [None]))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [np.array(x.shape, dtype=self.output_type.numpy)]

    def sym_value(self, value: Callable[[int], SymValue | None]) -> SymValue | None:
        s = self.input_shape(0)
        return s.sym_dims if s.rank_is_static else None


_HUGE = 2**31 - 1  # an end at or past this means "to the end" (exporters write INT64_MAX or INT32_MAX)


def _sym_slice_length(dim: SDim, start: SDim, end: SDim, step: int) -> SDim:
    """The length of ``[start:end:step]`` along a dim when some of them are symbolic (step 1 only): huge ends
    mean the dim, negative bounds count from it; symbolic bounds, and int starts on a symbolic dim, are taken
    to lie inside the dim (what exporters produce: ``x[:, 1:]``, ``x[:, :S]``, ``bias[.., S-T:S, :S]``). An int
    end on a symbolic dim (``x[:, :8]``: 8 or less) and anything else are unknown (None)."""
    if step != 1 or start is None or end is None:
        return None

    def bound(v: SDim, is_end: bool) -> SDim:
        if isinstance(v, int):
            if v >= _HUGE:
                return dim
            if v < 0:
                return sdim_add(dim, v)
            if is_end and not isinstance(dim, int):
                return None  # min(v, dim) is not known
        return v

    s, e = bound(start, False), bound(end, True)
    if isinstance(s, int) and isinstance(dim, int):
        s = min(s, dim)
    if isinstance(e, int) and isinstance(dim, int):
        e = min(e, dim)
    length = sdim_add(e, sdim_mul(s, -1))
    return max(length, 0) if isinstance(length, int) else length


def _slice_indices(shape: Sequence[Dim], starts: np.ndarray, ends: np.ndarray, axes: np.ndarray,
                   steps: np.ndarray) -> list[Dim | slice]:
    """Per axis, a python slice (or None when the input dim is dynamic), ONNX Slice semantics."""
    rank = len(shape)
    result: list[Dim | slice] = [slice(None)] * rank
    seen = set()
    for s, e, a, st in zip(starts.tolist(), ends.tolist(), axes.tolist(), steps.tolist()):
        ax = normalize_axis(int(a), rank, "Slice axis")
        if ax in seen:
            raise ShapeInferenceError(f"Slice axis {a} is repeated")
        seen.add(ax)
        if st == 0:
            raise ShapeInferenceError("Slice step must not be 0")
        dim = shape[ax]
        if dim is None:
            result[ax] = None
            continue
        # Clamp like ONNX: out-of-range starts/ends (e.g. INT64_MAX) saturate at the bounds.
        lo, hi = (0, dim) if st > 0 else (-1, dim - 1)
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        s = min(max(s, lo), hi)
        e = min(max(e, lo), hi)
        result[ax] = slice(s, e if e >= 0 else None, st)
    return result


class Slice(Node):
    """ONNX Slice: ``x[starts:ends:steps]`` along ``axes`` (all inputs 1-D integer tensors of one length)."""

    def __init__(self, x: Output | Node, starts: Output | Node, ends: Output | Node, axes: Output | Node,
                 steps: Output | Node, *, name: str | None = None) -> None:
        super().__init__(x, starts, ends, axes, steps, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 5:
            raise ShapeInferenceError(f"Slice takes 5 inputs (data, starts, ends, axes, steps), got {len(self.inputs)}")
        for i, what in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")):
            _require_integral(self, i, what)
        x = self.input_shape(0)
        et = self.input_type(0)
        if not x.rank_is_static:
            return [(et, Shape.dynamic())]
        values = [constant_input(self, i) for i in range(1, 5)]
        if any(v is None for v in values):
            return [(et, self._symbolic_shape(x))]
        starts, ends, axes, steps = (np.asarray(v).reshape(-1) for v in values)  # type: ignore[union-attr]
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise ShapeInferenceError("starts, ends, axes and steps must have the same length")
        idx = _slice_indices(x.dims, starts, ends, axes, steps)  # type: ignore[arg-type]
        dims: list[SDim] = list(x.sym_dims)  # axes not sliced keep their dims, symbolic or not
        for k, (a, st) in enumerate(zip(axes.tolist(), steps.tolist())):
            ax = normalize_axis(int(a), x.rank)
            sl = idx[ax]
            if isinstance(sl, slice):
                dims[ax] = len(range(*sl.indices(x.dims[ax])))  # type: ignore[arg-type]
            else:  # a dynamic dim: its length may still be known symbolically
                dims[ax] = _sym_slice_length(x.sym(ax), int(starts[k]), int(ends[k]), int(st))
        return [(et, Shape(dims))]

    def _symbolic_shape(self, x: Shape) -> Shape:
        """The output shape when starts/ends are shape vectors with symbolic entries (``x[:, :S]``)."""
        from snippets_core.ir.const_eval import shape_value

        starts, ends, axes, steps = (shape_value(self.inputs[i].source) for i in range(1, 5))
        if starts is None or ends is None or axes is None or steps is None or not (
                len(starts) == len(ends) == len(axes) == len(steps)) or not all(
                isinstance(v, int) for v in axes + steps):
            return Shape.dynamic(x.rank)
        dims = list(x.sym_dims)
        for s, e, a, st in zip(starts, ends, axes, steps):
            ax = normalize_axis(int(a), x.rank, "Slice axis")  # type: ignore[arg-type]
            d = x.sym(ax)
            if isinstance(d, int) and isinstance(s, int) and isinstance(e, int):
                dims[ax] = len(range(*_slice_indices([d], *(np.array([v]) for v in (s, e, 0, st)))[0].indices(d)))
            else:
                dims[ax] = _sym_slice_length(d, s, e, int(st))  # type: ignore[arg-type]
        return Shape(dims)

    def sym_value(self, value: Callable[[int], SymValue | None]) -> SymValue | None:
        data = value(0)
        bounds = [value(i) for i in range(1, 5)]
        if data is None or any(b is None or not all(isinstance(v, int) for v in b) for b in bounds):
            return None
        (sl,) = _slice_indices([len(data)], *(np.asarray(b) for b in bounds))  # type: ignore[arg-type]
        return data[sl]  # type: ignore[index]

    def evaluate(self, x: np.ndarray, starts: np.ndarray, ends: np.ndarray, axes: np.ndarray,
                 steps: np.ndarray) -> list[np.ndarray]:
        idx = _slice_indices(x.shape, *(np.asarray(v).reshape(-1) for v in (starts, ends, axes, steps)))
        return [x[tuple(idx)].copy()]


PAD_MODES = ("constant", "reflect", "edge", "wrap")


class Pad(Node):
    """ONNX Pad: ``pads`` is ``[begin..., end...]`` over ``axes`` (all axes when ``axes`` is not given);
    negative pads crop. ``value`` (a scalar) fills in ``constant`` mode."""

    ATTRS = ("mode",)

    def __init__(self, x: Output | Node, pads: Output | Node, value: Output | Node, *axes: Output | Node,
                 mode: str = "constant", name: str | None = None) -> None:
        self.mode = mode
        super().__init__(x, pads, value, *axes, name=name)

    def _widths(self, shape: Sequence[Dim], pads: np.ndarray, axes: np.ndarray | None) -> list[tuple[int, int]]:
        rank = len(shape)
        pads = np.asarray(pads).reshape(-1).astype(np.int64)
        axes_list = list(range(rank)) if axes is None else [normalize_axis(int(a), rank) for a in axes.reshape(-1)]
        if len(pads) != 2 * len(axes_list):
            raise ShapeInferenceError(f"pads has {len(pads)} values, expected {2 * len(axes_list)}")
        widths = [(0, 0)] * rank
        n = len(axes_list)
        for j, ax in enumerate(axes_list):
            widths[ax] = (int(pads[j]), int(pads[n + j]))
        return widths

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if self.mode not in PAD_MODES:
            raise ShapeInferenceError(f"mode must be one of {PAD_MODES}, got {self.mode!r}")
        if len(self.inputs) not in (3, 4):
            raise ShapeInferenceError(f"Pad takes 3 or 4 inputs (data, pads, value[, axes]), got {len(self.inputs)}")
        _require_integral(self, 1, "pads")
        x = self.input_shape(0)
        et = self.input_type(0)
        if not x.rank_is_static:
            return [(et, x)]
        pads = constant_input(self, 1)
        axes = constant_input(self, 3) if len(self.inputs) == 4 else None
        if len(self.inputs) == 4 and axes is None:
            return [(et, Shape.dynamic(x.rank))]
        if pads is None:  # pads computed from dims (``(8 - W % 8) % 8``): symbolic widths
            from snippets_core.ir.const_eval import shape_value

            sym = shape_value(self.inputs[1].source)
            if sym is None:
                return [(et, Shape.dynamic(x.rank))]
            axes_list = list(range(x.rank)) if axes is None else [normalize_axis(int(a), x.rank)
                                                                   for a in axes.reshape(-1)]
            if len(sym) != 2 * len(axes_list):
                raise ShapeInferenceError(f"pads has {len(sym)} values, expected {2 * len(axes_list)}")
            dims = list(x.sym_dims)
            for j, ax in enumerate(axes_list):
                dims[ax] = sdim_add(sdim_add(dims[ax], sym[j]), sym[len(axes_list) + j])
            return [(et, Shape(dims))]
        widths = self._widths(x.dims, pads, axes)  # type: ignore[arg-type]
        dims = [sdim_add(d, b + e) for d, (b, e) in zip(x.sym_dims, widths)]
        if any(isinstance(d, int) and d < 0 for d in dims):
            raise ShapeInferenceError(f"pads {pads.tolist()} crop more than the input {x}")
        return [(et, Shape(dims))]

    def evaluate(self, x: np.ndarray, pads: np.ndarray, value: np.ndarray, *axes: np.ndarray) -> list[np.ndarray]:
        widths = self._widths(x.shape, pads, axes[0] if axes else None)
        # Negative pads crop first; numpy pads the rest.
        crop = tuple(slice(-b if b < 0 else 0, x.shape[i] + e if e < 0 else None) for i, (b, e) in enumerate(widths))
        x = x[crop]
        pos = [(max(b, 0), max(e, 0)) for b, e in widths]
        if self.mode == "constant":
            fill = np.asarray(value).reshape(-1)
            y = np.pad(x, pos, mode="constant", constant_values=fill[0] if fill.size else 0)
        else:
            y = np.pad(x, pos, mode=self.mode)
        return [y.astype(x.dtype, copy=False)]


class ConstantOfShape(Node):
    """A tensor of the shape given by a 1-D integer input, filled with the one-element ``value``."""

    ATTRS = ("value",)

    def __init__(self, shape: Output | Node, *, value: np.ndarray | float = 0.0, name: str | None = None) -> None:
        arr = np.asarray(value, dtype=np.float32 if isinstance(value, float) else None).reshape(-1)
        if arr.size != 1:
            raise ShapeInferenceError(f"ConstantOfShape value must have one element, got {arr.size}")
        arr.setflags(write=False)
        self.value = arr
        super().__init__(shape, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        _require_integral(self, 0, "shape")
        et = ElementType.from_numpy(self.value.dtype)
        dims = constant_input(self, 0)
        if dims is not None:
            if (dims < 0).any():
                raise ShapeInferenceError(f"shape {dims.tolist()} has a negative dim")
            return [(et, Shape(dims.reshape(-1).tolist()))]
        from snippets_core.ir.const_eval import shape_value

        sym = shape_value(self.inputs[0].source)
        if sym is not None:
            return [(et, Shape(sym))]
        s = self.input_shape(0)
        if s.is_static and s.rank == 1:
            return [(et, Shape.dynamic(s[0]))]
        return [(et, Shape.dynamic())]

    def evaluate(self, shape: np.ndarray) -> list[np.ndarray]:
        return [np.full(tuple(int(d) for d in shape.reshape(-1)), self.value[0], dtype=self.value.dtype)]

    def sym_value(self, value: Callable[[int], SymValue | None]) -> SymValue | None:
        n = value(0)
        if n is None or len(n) != 1 or not isinstance(n[0], int) or self.value.dtype.kind not in "iub":
            return None
        return (int(self.value[0]),) * n[0]


class Range(Node):
    """``[start, start + delta, ...)`` up to ``limit`` (three scalar inputs of one type)."""

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 3:
            raise ShapeInferenceError(f"Range takes 3 inputs (start, limit, delta), got {len(self.inputs)}")
        et = self.input_type(0)
        vals = [constant_input(self, i) for i in range(3)]
        if all(v is not None for v in vals):
            start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in vals)  # type: ignore[union-attr]
            if delta == 0:
                raise ShapeInferenceError("Range delta must not be 0")
            return [(et, Shape([max(int(np.ceil((limit - start) / delta)), 0)]))]
        from snippets_core.ir.const_eval import shape_value

        # Range(0, S, 1) over a symbolic length (positions, causal masks): S - 0 entries.
        start, limit, delta = (shape_value(self.inputs[i].source) for i in range(3))
        if start is not None and limit is not None and delta == (1,) and None not in (start[0], limit[0]):
            n = sdim_add(limit[0], sdim_mul(start[0], -1))
            return [(et, Shape([max(n, 0) if isinstance(n, int) else n]))]
        return [(et, Shape([None]))]

    def evaluate(self, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> list[np.ndarray]:
        s, lim, d = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
        n = max(int(np.ceil((lim - s) / d)), 0)
        # Accumulate like ONNX (start + i * delta), in the input type.
        return [(s + np.arange(n, dtype=np.float64 if np.asarray(start).dtype.kind == "f" else np.int64) * d)
                .astype(np.asarray(start).dtype)]


class Tile(Node):
    """Repeat a tensor ``repeats[i]`` times along each axis."""

    def __init__(self, x: Output | Node, repeats: Output | Node, *, name: str | None = None) -> None:
        super().__init__(x, repeats, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        _require_integral(self, 1, "repeats")
        x = self.input_shape(0)
        et = self.input_type(0)
        reps = constant_input(self, 1)
        if not x.rank_is_static:
            return [(et, Shape.dynamic())]
        if reps is None:  # ``x.repeat(b, 1, 1)``: repeats read from a shape
            from snippets_core.ir.const_eval import shape_value

            sym = shape_value(self.inputs[1].source)
            if sym is None or len(sym) != x.rank:
                return [(et, Shape.dynamic(x.rank))]
            return [(et, Shape([sdim_mul(d, r) for d, r in zip(x.sym_dims, sym)]))]
        reps = reps.reshape(-1)
        if len(reps) != x.rank:
            raise ShapeInferenceError(f"repeats has {len(reps)} values for a rank-{x.rank} input")
        return [(et, Shape([sdim_mul(d, int(r)) for d, r in zip(x.sym_dims, reps)]))]

    def evaluate(self, x: np.ndarray, repeats: np.ndarray) -> list[np.ndarray]:
        return [np.tile(x, tuple(int(r) for r in repeats.reshape(-1)))]


class _ArgReduce(Node):
    _abstract = True
    ATTRS = ("axis", "keep_dims", "select_last_index")

    def __init__(self, x: Output | Node, *, axis: int = 0, keep_dims: bool = True, select_last_index: bool = False,
                 name: str | None = None) -> None:
        self.axis = int(axis)
        self.keep_dims = bool(keep_dims)
        self.select_last_index = bool(select_last_index)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        x = self.input_shape(0)
        if not x.rank_is_static:
            return [(ElementType.i64, Shape.dynamic())]
        ax = normalize_axis(self.axis, x.rank)
        dims = list(x.sym_dims)
        if self.keep_dims:
            dims[ax] = 1
        else:
            del dims[ax]
        return [(ElementType.i64, Shape(dims))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        ax = normalize_axis(self.axis, x.ndim)
        fn = np.argmax if self.type_name == "ArgMax" else np.argmin
        if self.select_last_index:
            flipped = np.flip(x, axis=ax)
            idx = x.shape[ax] - 1 - fn(flipped, axis=ax)
        else:
            idx = fn(x, axis=ax)
        if self.keep_dims:
            idx = np.expand_dims(idx, ax)
        return [idx.astype(np.int64)]


class ArgMax(_ArgReduce):
    """Index of the largest element along ``axis`` (first occurrence unless ``select_last_index``)."""


class ArgMin(_ArgReduce):
    """Index of the smallest element along ``axis`` (first occurrence unless ``select_last_index``)."""


class TopK(Node):
    """The ``k`` largest (or smallest) elements along ``axis`` and their i64 indices; ties keep the lower
    index first, as ONNX requires."""

    ATTRS = ("axis", "largest", "sorted")

    def __init__(self, x: Output | Node, k: Output | Node, *, axis: int = -1, largest: bool = True,
                 sorted: bool = True, name: str | None = None) -> None:
        self.axis = int(axis)
        self.largest = bool(largest)
        self.sorted = bool(sorted)
        super().__init__(x, k, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        x = self.input_shape(0)
        et = self.input_type(0)
        if not x.rank_is_static:
            return [(et, Shape.dynamic()), (ElementType.i64, Shape.dynamic())]
        ax = normalize_axis(self.axis, x.rank)
        k = constant_input(self, 1)
        dims: list[SDim] = list(x.sym_dims)
        dims[ax] = None if k is None else int(np.asarray(k).reshape(-1)[0])
        if dims[ax] is not None and x.dims[ax] is not None and dims[ax] > x.dims[ax]:  # type: ignore[index,operator]
            raise ShapeInferenceError(f"k={dims[ax]} exceeds the axis size {x.dims[ax]}")  # type: ignore[index]
        return [(et, Shape(dims)), (ElementType.i64, Shape(dims))]

    def evaluate(self, x: np.ndarray, k: np.ndarray) -> list[np.ndarray]:
        ax = normalize_axis(self.axis, x.ndim)
        kk = int(np.asarray(k).reshape(-1)[0])
        # A stable sort of the negated keys keeps ties in index order for "largest".
        keys = -x if self.largest else x
        if x.dtype.kind == "u":
            keys = -x.astype(np.int64) if self.largest else x
        idx = np.argsort(keys, axis=ax, kind="stable")
        idx = np.take(idx, np.arange(kk), axis=ax)
        return [np.take_along_axis(x, idx, axis=ax), idx.astype(np.int64)]


class CumSum(Node):
    """Cumulative sum along a scalar ``axis`` input; ``exclusive`` shifts by one, ``reverse`` sums from the end."""

    ATTRS = ("exclusive", "reverse")

    def __init__(self, x: Output | Node, axis: Output | Node, *, exclusive: bool = False, reverse: bool = False,
                 name: str | None = None) -> None:
        self.exclusive = bool(exclusive)
        self.reverse = bool(reverse)
        super().__init__(x, axis, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        _require_integral(self, 1, "axis")
        return [(self.input_type(0), self.input_shape(0))]

    IDENTITY = 0

    def accumulate(self, y: np.ndarray, axis: int) -> np.ndarray:
        return np.cumsum(y, axis=axis, dtype=y.dtype)

    def evaluate(self, x: np.ndarray, axis: np.ndarray) -> list[np.ndarray]:
        ax = normalize_axis(int(np.asarray(axis).reshape(-1)[0]), x.ndim)
        y = np.flip(x, ax) if self.reverse else x
        c = self.accumulate(y, ax)
        if self.exclusive:
            first = np.full_like(np.take(c, [0], axis=ax), self.IDENTITY)
            c = np.concatenate([first, np.take(c, np.arange(x.shape[ax] - 1), ax)], axis=ax)
        return [np.flip(c, ax) if self.reverse else c]


class CumProd(CumSum):
    """Cumulative product along a scalar ``axis`` input (``exclusive``/``reverse`` as in CumSum)."""

    IDENTITY = 1

    def accumulate(self, y: np.ndarray, axis: int) -> np.ndarray:
        return np.cumprod(y, axis=axis, dtype=y.dtype)


class DepthToSpace(Node):
    """Move ``blocksize x blocksize`` channel blocks into space; ``mode`` is ``DCR`` or ``CRD`` as in ONNX."""

    ATTRS = ("block_size", "mode")

    def __init__(self, x: Output | Node, *, block_size: int, mode: str = "DCR", name: str | None = None) -> None:
        self.block_size = int(block_size)
        self.mode = mode
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if self.mode not in ("DCR", "CRD"):
            raise ShapeInferenceError(f"mode must be DCR or CRD, got {self.mode!r}")
        x = self.input_shape(0)
        b = self.block_size
        if x.rank != 4:
            raise ShapeInferenceError(f"DepthToSpace needs a rank-4 input, got {x}")
        n, c, h, w = x.sym_dims
        if isinstance(c, int) and c % (b * b):
            raise ShapeInferenceError(f"channels {c} are not divisible by block_size^2 = {b * b}")
        return [(self.input_type(0), Shape([n, sdim_div(c, b * b), sdim_mul(h, b), sdim_mul(w, b)]))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        n, c, h, w = x.shape
        b = self.block_size
        if self.mode == "DCR":
            t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
        else:
            t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
        return [t.reshape(n, c // (b * b), h * b, w * b)]


class SpaceToDepth(Node):
    """Move ``blocksize x blocksize`` spatial blocks into channels (ONNX SpaceToDepth); ``mode`` DCR puts
    the block offset before the channel (``c_out = (bh * b + bw) * C + c``), CRD after it."""

    ATTRS = ("block_size", "mode")

    def __init__(self, x: Output | Node, *, block_size: int, mode: str = "DCR", name: str | None = None) -> None:
        self.block_size = int(block_size)
        self.mode = mode
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if self.mode not in ("DCR", "CRD"):
            raise ShapeInferenceError(f"mode must be DCR or CRD, got {self.mode!r}")
        x = self.input_shape(0)
        b = self.block_size
        if x.rank != 4:
            raise ShapeInferenceError(f"SpaceToDepth needs a rank-4 input, got {x}")
        n, c, h, w = x.dims  # type: ignore[misc]
        for d in (h, w):
            if d is not None and d % b:
                raise ShapeInferenceError(f"spatial dim {d} is not divisible by block_size {b}")
        return [(self.input_type(0), Shape([x.sym(0), None if c is None else c * b * b,
                                            None if h is None else h // b, None if w is None else w // b]))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        n, c, h, w = x.shape
        b = self.block_size
        t = x.reshape(n, c, h // b, b, w // b, b)
        t = t.transpose(0, 3, 5, 1, 2, 4) if self.mode == "DCR" else t.transpose(0, 1, 3, 5, 2, 4)
        return [t.reshape(n, c * b * b, h // b, w // b)]


class Asinh(UnaryEltwise):
    """Inverse hyperbolic sine."""

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [same_dtype(np.arcsinh(x), x)]


class Acosh(UnaryEltwise):
    """Inverse hyperbolic cosine."""

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [same_dtype(np.arccosh(x), x)]


class Atanh(UnaryEltwise):
    """Inverse hyperbolic tangent."""

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [same_dtype(np.arctanh(x), x)]


class IsNaN(Node):
    """True where the input is NaN."""

    def infer(self) -> list[tuple[ElementType, Shape]]:
        return [(ElementType.boolean, self.input_shape(0))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [np.isnan(x)]


class IsInf(Node):
    """True where the input is +inf (``detect_positive``) or -inf (``detect_negative``)."""

    ATTRS = ("detect_negative", "detect_positive")

    def __init__(self, x: Output | Node, *, detect_negative: bool = True, detect_positive: bool = True,
                 name: str | None = None) -> None:
        self.detect_negative = bool(detect_negative)
        self.detect_positive = bool(detect_positive)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        return [(ElementType.boolean, self.input_shape(0))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [(np.isposinf(x) & self.detect_positive) | (np.isneginf(x) & self.detect_negative)]


class GatherElements(Node):
    """ONNX GatherElements: ``y[i][j][k] = x[i][indices[i][j][k]][k]`` for ``axis = 1`` (likewise for the
    other axes); ``indices`` has the output's shape and may be negative (counted from the end)."""

    ATTRS = ("axis",)

    def __init__(self, x: Output | Node, indices: Output | Node, *, axis: int = 0, name: str | None = None) -> None:
        self.axis = int(axis)
        super().__init__(x, indices, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        _require_integral(self, 1, "indices")
        x, idx = self.input_shape(0), self.input_shape(1)
        if x.rank_is_static and idx.rank_is_static:
            if x.rank != idx.rank:
                raise ShapeInferenceError(f"data {x} and indices {idx} must have the same rank")
            normalize_axis(self.axis, x.rank)
        return [(self.input_type(0), idx)]

    def evaluate(self, x: np.ndarray, indices: np.ndarray) -> list[np.ndarray]:
        ax = normalize_axis(self.axis, x.ndim)
        idx = indices.astype(np.int64)
        idx = np.where(idx < 0, idx + x.shape[ax], idx)
        if idx.size and (idx.min() < 0 or idx.max() >= x.shape[ax]):
            raise ShapeInferenceError(f"indices out of range for axis {ax} of size {x.shape[ax]}")
        return [np.take_along_axis(x, idx, axis=ax)]


class Trilu(Node):
    """The upper (``upper``) or lower triangle of the last two dims, from diagonal ``k`` (an optional
    scalar input, 0 when absent); the rest is zero."""

    ATTRS = ("upper",)

    def __init__(self, x: Output | Node, *k: Output | Node, upper: bool = True, name: str | None = None) -> None:
        self.upper = bool(upper)
        super().__init__(x, *k, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        x = self.input_shape(0)
        if x.rank_is_static and x.rank < 2:
            raise ShapeInferenceError(f"Trilu needs rank >= 2, got {x}")
        if len(self.inputs) == 2:
            _require_integral(self, 1, "k")
        return [(self.input_type(0), x)]

    def evaluate(self, x: np.ndarray, *k: np.ndarray) -> list[np.ndarray]:
        kk = int(np.asarray(k[0]).reshape(-1)[0]) if k else 0
        return [np.triu(x, kk) if self.upper else np.tril(x, kk)]


class Hardmax(Node):
    """1 at the first maximum along ``axis``, 0 elsewhere."""

    ATTRS = ("axis",)

    def __init__(self, x: Output | Node, *, axis: int = -1, name: str | None = None) -> None:
        self.axis = int(axis)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        x = self.input_shape(0)
        if x.rank_is_static:
            normalize_axis(self.axis, x.rank)
        return [(self.input_type(0), x)]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        ax = normalize_axis(self.axis, x.ndim)
        idx = np.expand_dims(np.argmax(x, axis=ax), ax)
        y = np.zeros_like(x)
        np.put_along_axis(y, idx, 1, axis=ax)
        return [y]


class OneHot(Node):
    """``values[1]`` where the new ``axis`` equals the index (negative indices count from ``depth``),
    ``values[0]`` elsewhere; ``depth`` is a scalar input, ``values`` a 2-element input."""

    ATTRS = ("axis",)

    def __init__(self, indices: Output | Node, depth: Output | Node, values: Output | Node, *, axis: int = -1,
                 name: str | None = None) -> None:
        self.axis = int(axis)
        super().__init__(indices, depth, values, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        idx = self.input_shape(0)
        et = self.input_type(2)
        if not idx.rank_is_static:
            return [(et, Shape.dynamic())]
        ax = normalize_axis(self.axis, idx.rank + 1)
        depth = constant_input(self, 1)
        d = None if depth is None else int(np.asarray(depth).reshape(-1)[0])
        dims: list[SDim] = list(idx.sym_dims)
        dims.insert(ax, d)
        return [(et, Shape(dims))]

    def evaluate(self, indices: np.ndarray, depth: np.ndarray, values: np.ndarray) -> list[np.ndarray]:
        d = int(np.asarray(depth).reshape(-1)[0])
        ax = normalize_axis(self.axis, indices.ndim + 1)
        idx = np.asarray(indices).astype(np.int64)
        idx = np.where(idx < 0, idx + d, idx)
        hot = np.expand_dims(idx, ax) == np.arange(d).reshape([d if i == ax else 1 for i in range(indices.ndim + 1)])
        vals = np.asarray(values).reshape(-1)
        return [np.where(hot, vals[1], vals[0]).astype(vals.dtype)]


class EyeLike(Node):
    """A 2-D tensor of the input's shape with ones on diagonal ``k``, in ``element_type`` (the input's
    when None)."""

    ATTRS = ("k", "element_type")

    def __init__(self, x: Output | Node, *, k: int = 0, element_type: ElementType | str | None = None,
                 name: str | None = None) -> None:
        self.k = int(k)
        self.element_type = None if element_type is None else ElementType.parse(element_type)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        x = self.input_shape(0)
        if x.rank_is_static and x.rank != 2:
            raise ShapeInferenceError(f"EyeLike needs a rank-2 input, got {x}")
        return [(self.element_type or self.input_type(0), x)]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        et = self.element_type or ElementType.from_numpy(x.dtype)
        return [np.eye(x.shape[0], x.shape[1], k=self.k, dtype=et.numpy)]


class NonZero(Node):
    """The indices of the non-zero elements, ``[rank, count]`` in row-major order (count known only at
    run time)."""

    def infer(self) -> list[tuple[ElementType, Shape]]:
        x = self.input_shape(0)
        return [(ElementType.i64, Shape([x.rank if x.rank_is_static else None, None]))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


class GatherND(Node):
    """ONNX GatherND: the last dim of ``indices`` indexes the leading dims of ``data`` after
    ``batch_dims`` shared batch dims; negative indices count from the end."""

    ATTRS = ("batch_dims",)

    def __init__(self, data: Output | Node, indices: Output | Node, *, batch_dims: int = 0,
                 name: str | None = None) -> None:
        self.batch_dims = int(batch_dims)
        super().__init__(data, indices, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        _require_integral(self, 1, "indices")
        d, i = self.input_shape(0), self.input_shape(1)
        et = self.input_type(0)
        if not (d.rank_is_static and i.rank_is_static) or i.dims[-1] is None:  # type: ignore[index]
            return [(et, Shape.dynamic())]
        last = i.dims[-1]  # type: ignore[index]
        if self.batch_dims + last > d.rank:  # type: ignore[operator]
            raise ShapeInferenceError(f"indices of depth {last} after {self.batch_dims} batch dims exceed data {d}")
        return [(et, Shape(list(i.sym_dims[:-1]) + list(d.sym_dims[self.batch_dims + last:])))]

    def evaluate(self, data: np.ndarray, indices: np.ndarray) -> list[np.ndarray]:
        b = self.batch_dims
        batch_shape = data.shape[:b]
        nb = int(np.prod(batch_shape, dtype=np.int64))
        d = data.reshape(nb, *data.shape[b:])
        idx = indices.astype(np.int64).reshape(nb, -1, indices.shape[-1])
        depth = idx.shape[-1]
        idx = np.where(idx < 0, idx + np.array(d.shape[1:1 + depth]), idx)
        out = np.stack([d[j][tuple(idx[j].T)] for j in range(nb)])
        return [out.reshape(*indices.shape[:-1], *data.shape[b + depth:])]


_SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _scatter_apply(target: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> None:
    """``target[where] (op)= updates`` one update at a time, so repeated indices accumulate."""
    ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(reduction)
    if ufunc is None:
        target[where] = updates
    else:
        ufunc.at(target, where, updates)


class ScatterElements(Node):
    """ONNX ScatterElements: a copy of ``data`` where ``data[..., indices[i], ...]`` along ``axis`` takes (or
    is combined by ``reduction`` with) ``updates[i]``."""

    ATTRS = ("axis", "reduction")

    def __init__(self, data: Output | Node, indices: Output | Node, updates: Output | Node, *, axis: int = 0,
                 reduction: str = "none", name: str | None = None) -> None:
        self.axis = int(axis)
        self.reduction = reduction
        super().__init__(data, indices, updates, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if self.reduction not in _SCATTER_REDUCTIONS:
            raise ShapeInferenceError(f"reduction must be one of {_SCATTER_REDUCTIONS}, got {self.reduction!r}")
        _require_integral(self, 1, "indices")
        return [(self.input_type(0), self.input_shape(0))]

    def evaluate(self, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> list[np.ndarray]:
        ax = normalize_axis(self.axis, data.ndim)
        idx = indices.astype(np.int64)
        idx = np.where(idx < 0, idx + data.shape[ax], idx)
        grids = list(np.indices(idx.shape, sparse=True))
        grids[ax] = idx
        out = data.copy()
        _scatter_apply(out, tuple(np.broadcast_arrays(*grids)), updates, self.reduction)
        return [out]


class ScatterND(Node):
    """ONNX ScatterND: a copy of ``data`` where the slices addressed by the last dim of ``indices`` take (or
    are combined by ``reduction`` with) ``updates``."""

    ATTRS = ("reduction",)

    def __init__(self, data: Output | Node, indices: Output | Node, updates: Output | Node, *,
                 reduction: str = "none", name: str | None = None) -> None:
        self.reduction = reduction
        super().__init__(data, indices, updates, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if self.reduction not in _SCATTER_REDUCTIONS:
            raise ShapeInferenceError(f"reduction must be one of {_SCATTER_REDUCTIONS}, got {self.reduction!r}")
        _require_integral(self, 1, "indices")
        return [(self.input_type(0), self.input_shape(0))]

    def evaluate(self, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> list[np.ndarray]:
        out = data.copy()
        idx = indices.astype(np.int64).reshape(-1, indices.shape[-1])
        upd = updates.reshape(idx.shape[0], *data.shape[indices.shape[-1]:])
        for row, u in zip(idx, upd):
            where = tuple(int(v) for v in row)
            if self.reduction == "none":
                out[where] = u
            else:
                _scatter_apply(out, where, u, self.reduction)
        return [out]
