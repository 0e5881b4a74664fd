"""Integer quantization ops, with ONNX semantics: QuantizeLinear, DequantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul and QLinearConv.

These ops run on their numpy references (integer accumulation in int64, so sums are exact); a Q->DQ pair
is rewritten into a FakeQuantize by ``passes/convert_q_dq_to_fake_quantize.py`` so that it fuses with the
element-wise ops around it. Scales and zero points broadcast in three ways, as ONNX defines them:
per tensor (a scalar or one element), per axis (1-D, as long as the quantized axis) and blocked (the rank
of the data, the quantized axis ``ceil(D / block_size)`` long).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.base import check_input_count, check_kind, upcast
from snippets_core.ir.ops.nn import Convolution
from snippets_core.ir.shape import Shape, broadcast_shapes, normalize_axis

#: rt_info key on a Constant that the reader folded from ``DequantizeLinear(constant)``: its QuantizedConstant
DEQUANTIZED_FROM = "SnippetsDequantizedFrom"
#: rt_info key on the node ending a per-tensor Q->DQ pair made FakeQuantize: the QuantGrid its output lies on
QUANTIZATION_GRID = "SnippetsQuantizationGrid"


@dataclass(frozen=True, eq=False)
class QuantizedConstant:
    """The quantized tensor a folded f32 constant was dequantized from (DequantizeLinear's inputs): an int8
    FullyConnected reads ``data`` instead of the f32 values."""

    data: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int
    block_size: int


@dataclass(frozen=True)
class QuantGrid:
    """A per-tensor quantization grid: the quantized type, the scale and the zero point."""

    qtype: ElementType
    scale: float
    zero_point: int


#: rt_info key on a FakeQuantize made from a Q->DQ pair: its QDQForm (FakeQuantizeDecomposition then computes
#: QuantizeLinear's own f32 arithmetic)
QDQ_FORM = "SnippetsQDQForm"


@dataclass(frozen=True, eq=False)
class QDQForm:
    """The Q->DQ pair a FakeQuantize stands for: ``scale`` and ``zero_point`` broadcast to the data (per tensor:
    0-d), and the FakeQuantize's integer range ``[qmin, qmax]`` (per channel when an odd zero point extends
    the grid by a step). Its value is ``clamp(rint(x / scale), qmin - zero_point, qmax - zero_point) * scale``,
    rounded where QuantizeLinear and DequantizeLinear round."""

    scale: np.ndarray
    zero_point: np.ndarray
    qmin: np.ndarray
    qmax: np.ndarray


#: Integer types a quantized tensor may have, with their [min, max]. int4/uint4 have no snippets element type.
QUANT_RANGES: dict[ElementType, tuple[int, int]] = {
    ElementType.u8: (0, 255), ElementType.i8: (-128, 127),
    ElementType.u16: (0, 65535), ElementType.i16: (-32768, 32767),
}


def check_quant_type(et: ElementType, what: str) -> None:
    if et is not ElementType.dynamic and et not in QUANT_RANGES:
        raise ShapeInferenceError(f"{what} must be u8, i8, u16 or i16, got {et}")


def check_param_shape(x: Shape, p: Shape, axis: int, block_size: int, what: str) -> None:
    """Raise unless a scale / zero-point shape fits data ``x`` per tensor, per axis or blocked."""
    if not p.is_static or not x.rank_is_static:
        return
    if p.size == 1 and p.rank <= 1:
        return  # per tensor
    ax = normalize_axis(axis, x.rank, "axis")
    if block_size:
        if block_size < 0:
            raise ShapeInferenceError(f"block_size must be positive, got {block_size}")
        if p.rank != x.rank:
            raise ShapeInferenceError(f"{what} {p} must have the rank of the data {x} for blocked quantization")
        for i, (d, pd) in enumerate(zip(x.dims, p.dims)):
            want = d if i != ax or d is None else -(-d // block_size)
            if d is not None and pd != want:
                raise ShapeInferenceError(f"{what} {p} does not fit data {x} with block_size {block_size} on "
                                          f"axis {ax}: dimension {i} must be {want}")
        return
    if p.rank != 1:
        raise ShapeInferenceError(f"{what} {p} must be a scalar or 1-D for per-axis quantization (or set block_size)")
    if x[ax] is not None and p[0] != x[ax]:
        raise ShapeInferenceError(f"{what} has {p[0]} elements but the data {x} has {x[ax]} on axis {ax}")


def broadcast_param(p: np.ndarray, shape: Sequence[int], axis: int, block_size: int) -> np.ndarray:
    """A scale / zero point made broadcastable to ``shape`` (per tensor, per axis or blocked)."""
    p = np.asarray(p)
    if p.size == 1 and p.ndim <= 1:
        return p.reshape(())
    ax = normalize_axis(axis, len(shape), "axis")
    if block_size:
        return np.repeat(p, block_size, axis=ax).take(range(shape[ax]), axis=ax)
    dims = [1] * len(shape)
    dims[ax] = p.size
    return p.reshape(dims)


def quantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, et: ElementType) -> np.ndarray:
    """``saturate(rint(x / scale) + zero_point)``: the division in x's type (f16 rounds its quotient to f16)
    as ONNX's reference does it, rounding half to even."""
    lo, hi = QUANT_RANGES[et]
    # +-inf saturate; nan (0/0) counts as 0 steps; the wide clip keeps the int cast defined
    with np.errstate(all="ignore"):
        q = np.rint((x / scale.astype(x.dtype)).astype(np.float64))
        q = np.nan_to_num(q, nan=0.0, posinf=hi, neginf=lo)
        return np.clip(np.clip(q, -(2.0**40), 2.0**40).astype(np.int64) + zero_point.astype(np.int64), lo, hi
                       ).astype(et.numpy)


class _QuantizeBase(Node):
    """Shared by QuantizeLinear and DequantizeLinear: inputs (x, scale, zero_point)."""

    _abstract = True
    ATTRS = ("axis", "block_size", "output_type")

    def __init__(self, x: Output | Node, scale: Output | Node, zero_point: Output | Node, *, axis: int = 1,
                 block_size: int = 0, output_type: ElementType | str, name: str | None = None) -> None:
        self.axis = int(axis)
        self.block_size = int(block_size)
        self.output_type = ElementType.parse(output_type)
        super().__init__(x, scale, zero_point, name=name)

    def _check_params(self) -> None:
        check_input_count(self, 3)
        check_kind(self, 1, "real", "the scale")
        x = self.input_shape(0)
        if x.rank_is_static and x.rank and not (self.input_shape(1).is_static and self.input_shape(1).size == 1):
            normalize_axis(self.axis, x.rank, "axis")
        for i, what in ((1, "the scale"), (2, "the zero point")):
            check_param_shape(x, self.input_shape(i), self.axis, self.block_size, what)
        if self.input_shape(1).is_static and self.input_shape(2).is_static and self.input_shape(1).size != 1:
            if self.input_shape(2).size != 1 and self.input_shape(1) != self.input_shape(2):
                raise ShapeInferenceError(f"the scale {self.input_shape(1)} and the zero point "
                                          f"{self.input_shape(2)} have different shapes")

    def _params(self, x: np.ndarray, scale: np.ndarray, zp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        shape = x.shape
        return (broadcast_param(scale, shape, self.axis, self.block_size),
                broadcast_param(zp, shape, self.axis, self.block_size))


class QuantizeLinear(_QuantizeBase):
    """ONNX QuantizeLinear: ``y = saturate(round_half_even(x / scale) + zero_point)`` to ``output_type``
    (u8, i8, u16, i16); the zero point has that type."""

    def infer(self) -> list[tuple[ElementType, Shape]]:
        self._check_params()
        check_kind(self, 0, "real", "the data")
        check_quant_type(self.output_type, "the output type")
        zt = self.input_type(2)
        if zt is not ElementType.dynamic and zt is not self.output_type:
            raise ShapeInferenceError(f"the zero point is {zt} but the output type is {self.output_type}")
        return [(self.output_type, self.input_shape(0))]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        x, scale, zp = (np.asarray(a) for a in args)
        s, z = self._params(x, scale, zp)
        return [quantize(x, s, z, self.output_type)]


class DequantizeLinear(_QuantizeBase):
    """ONNX DequantizeLinear: ``y = (x - zero_point) * scale`` in ``output_type`` (the scale's type)."""

    def infer(self) -> list[tuple[ElementType, Shape]]:
        self._check_params()
        xt = self.input_type(0)
        if xt is not ElementType.i32:
            check_quant_type(xt, "the data")
        zt = self.input_type(2)
        if ElementType.dynamic not in (xt, zt) and zt is not xt:
            raise ShapeInferenceError(f"the zero point is {zt} but the data is {xt}")
        if not self.output_type.is_real:
            raise ShapeInferenceError(f"the output type must be real, got {self.output_type}")
        return [(self.output_type, self.input_shape(0))]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        x, scale, zp = (np.asarray(a) for a in args)
        s, z = self._params(x, scale, zp)
        # int64 difference then the scale's float type: exact for every 8/16/32-bit integer pair
        d = x.astype(np.int64) - z.astype(np.int64)
        s = upcast(s)
        return [(d.astype(s.dtype) * s).astype(self.output_type.numpy)]


class DynamicQuantizeLinear(Node):
    """ONNX DynamicQuantizeLinear: u8 quantization of ``x`` with a scale and zero point computed from its
    range (extended to include 0); outputs (y, y_scale, y_zero_point), as onnxruntime computes them."""

    def __init__(self, x: Output | Node, *, name: str | None = None) -> None:
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 1)
        et = check_kind(self, 0, "real", "the data")
        return [(ElementType.u8, self.input_shape(0)), (et, Shape([])), (ElementType.u8, Shape([]))]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        x = np.asarray(args[0])
        xf = upcast(x).astype(np.float32)
        scale, zp = dynamic_quantization_grid(xf)
        y = np.clip(np.rint(xf / scale) + zp, 0, 255).astype(np.uint8)
        return [y, np.asarray(scale).astype(x.dtype), np.asarray(zp).astype(np.uint8)]


def dynamic_quantization_grid(xf: np.ndarray) -> tuple[np.float32, np.float32]:
    """DynamicQuantizeLinear's (scale, zero point) of the f32 ``xf``: its range extended to 0, over 255 (ONNX)."""
    if not xf.size:
        return dynamic_quantization_grid_of_range(0.0, 0.0)
    return dynamic_quantization_grid_of_range(float(xf.min()), float(xf.max()))


def dynamic_quantization_grid_of_range(x_min: float, x_max: float) -> tuple[np.float32, np.float32]:
    """:func:`dynamic_quantization_grid` of an f32 tensor whose smallest and largest values are given (a kernel
    that reduced them itself). Each step is one f32 operation, computed on Python floats and rounded to f32: the
    double result of +, -, / on f32 operands rounds to the f32 result (53 >= 2 * 24 + 2 bits), and this runs per
    call of a dynamically quantized layer, where numpy's scalar arithmetic cost 4 us."""
    f32 = np.float32
    hi, lo = max(0.0, float(x_max)), min(0.0, float(x_min))
    span = 1.0 if hi == lo else float(f32(hi - lo))
    scale = float(f32(span / 255.0))
    return f32(scale), f32(round(min(255.0, max(0.0, -float(f32(lo / scale))))))  # round(): half to even


def _check_int_inputs(node: Node, data: Sequence[tuple[int, str]]) -> None:
    for i, what in data:
        check_quant_type(node.input_type(i), what)
        check_kind(node, i, "integral", what)


def _zero_point_matches(node: Node, data: int, zp: int, what: str) -> None:
    dt, zt = node.input_type(data), node.input_type(zp)
    if ElementType.dynamic not in (dt, zt) and dt is not zt:
        raise ShapeInferenceError(f"{what} is {zt} but its data is {dt}")


def _matmul_shape(a: Shape, b: Shape) -> Shape:
    """The numpy matmul shape of ``a @ b`` (1-D operands promoted and dropped again)."""
    if not (a.rank_is_static and b.rank_is_static):
        return Shape(None)
    if a.rank < 1 or b.rank < 1:
        raise ShapeInferenceError(f"matmul inputs must have rank >= 1, got {a} and {b}")
    # the symbolic dims (as MatMul's inference): a dynamic quantized layer keeps [batch, sequence, N], so the
    # Reshapes after it stay views and its consumers keep their symbols
    ad = list(a.sym_dims) if a.rank >= 2 else [1, *a.sym_dims]
    bd = list(b.sym_dims) if b.rank >= 2 else [*b.sym_dims, 1]
    if isinstance(ad[-1], int) and isinstance(bd[-2], int) and ad[-1] != bd[-2]:
        raise ShapeInferenceError(f"matmul inner dimensions differ: {a} x {b}")
    batch = broadcast_shapes(Shape(ad[:-2]), Shape(bd[:-2]))
    out = [*batch.sym_dims, ad[-2], bd[-1]]
    if b.rank < 2:
        out.pop(-1)
    if a.rank < 2:
        out.pop(-2 if b.rank >= 2 else -1)
    return Shape(out)


def _a_zero_point(azp: np.ndarray, a: np.ndarray) -> np.ndarray:
    # a per-row zero point of A (MatMulInteger allows [M]) broadcasts along the rows
    azp = np.asarray(azp, dtype=np.int64)
    return azp.reshape(()) if azp.size == 1 else azp.reshape(-1, 1)


def _int_matmul(a: np.ndarray, b: np.ndarray, azp: np.ndarray, bzp: np.ndarray) -> np.ndarray:
    """``(a - azp) @ (b - bzp)`` accumulated in int64 (exact), as int32 like ONNX's integer matmuls."""
    ai = a.astype(np.int64) - _a_zero_point(azp, a)
    bi = b.astype(np.int64) - np.asarray(bzp, dtype=np.int64).reshape(-1 if np.size(bzp) > 1 else ())
    return np.matmul(ai, bi).astype(np.int32)


def requantize(acc: np.ndarray, multiplier: np.ndarray, zp: np.ndarray, et: ElementType) -> np.ndarray:
    """``saturate(rint(acc * multiplier) + zp)``: the QLinear ops' output stage, in float64 as onnx's
    reference computes it."""
    lo, hi = QUANT_RANGES[et]
    r = np.rint(acc.astype(np.float64) * multiplier.astype(np.float64) + zp.astype(np.float64))
    return np.clip(r, lo, hi).astype(et.numpy)


class MatMulInteger(Node):
    """ONNX MatMulInteger: ``(a - a_zero_point) @ (b - b_zero_point)`` as i32. ``a_zero_point`` is a
    scalar or per row of A ([M]), ``b_zero_point`` a scalar or per column of B ([N])."""

    def __init__(self, a: Output | Node, b: Output | Node, a_zero_point: Output | Node,
                 b_zero_point: Output | Node, *, name: str | None = None) -> None:
        super().__init__(a, b, a_zero_point, b_zero_point, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 4)
        _check_int_inputs(self, [(0, "input A"), (1, "input B")])
        _zero_point_matches(self, 0, 2, "a_zero_point")
        _zero_point_matches(self, 1, 3, "b_zero_point")
        a, b, bz = self.input_shape(0), self.input_shape(1), self.input_shape(3)
        if bz.is_static and bz.size != 1 and b.rank_is_static and b[-1] is not None and bz.dims[-1] != b[-1]:
            raise ShapeInferenceError(f"b_zero_point {bz} does not match B's {b[-1]} columns")
        return [(ElementType.i32, _matmul_shape(a, b))]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        return [_int_matmul(*(np.asarray(a) for a in args))]


class QLinearMatMul(Node):
    """ONNX QLinearMatMul: the integer product of two quantized tensors, requantized to ``y_scale`` /
    ``y_zero_point``: ``saturate(rint(acc * a_scale * b_scale / y_scale) + y_zero_point)``.
    Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point."""

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 8)
        _check_int_inputs(self, [(0, "input a"), (3, "input b"), (7, "y_zero_point")])
        _zero_point_matches(self, 0, 2, "a_zero_point")
        _zero_point_matches(self, 3, 5, "b_zero_point")
        for i, what in ((1, "a_scale"), (4, "b_scale"), (6, "y_scale")):
            check_kind(self, i, "real", what)
        return [(self.input_type(7), _matmul_shape(self.input_shape(0), self.input_shape(3)))]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        a, sa, za, b, sb, zb, sy, zy = (np.asarray(v) for v in args)
        acc = _int_matmul(a, b, za, zb)
        # per-column scales of B ([N]) broadcast along the last axis; the multiplier in the scales' type
        mult = (sa * sb.reshape(-1 if sb.size > 1 else ()) / sy).astype(sa.dtype)
        return [requantize(acc, mult, zy.reshape(()) if zy.size == 1 else zy, ElementType.from_numpy(zy.dtype))]


class _IntegerConvolution(Convolution):
    """A Convolution over integer data with zero points, accumulated in int64 (exact)."""

    _abstract = True
    DATA: tuple[int, int] = (0, 1)  # indices of x and w among the inputs

    def __init__(self, *inputs: Output | Node, strides: Sequence[int] | None = None,
                 dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 auto_pad: str = "explicit", group: int = 1, name: str | None = None) -> None:
        self.strides = None if strides is None else tuple(int(v) for v in strides)
        self.dilations = None if dilations is None else tuple(int(v) for v in dilations)
        self.pads = None if pads is None else tuple(int(v) for v in pads)
        self.auto_pad = auto_pad
        self.group = int(group)
        Node.__init__(self, *inputs, name=name)

    def _conv_shape(self) -> Shape:
        xi, wi = self.DATA
        x, w = self.input_shape(xi), self.input_shape(wi)
        if not w.is_static or w.rank < 3:
            raise ShapeInferenceError(f"weights must be static [M, C/group, *kernel], got {w}")
        self._check_common(w.rank - 2)
        if self.group < 1 or w[0] % self.group:
            raise ShapeInferenceError(f"group {self.group} does not divide {w[0]} output channels")
        if not x.rank_is_static:
            return Shape.dynamic(w.rank)
        if x.rank != w.rank:
            raise ShapeInferenceError(f"data {x} and weights {w} ranks differ")
        if x[1] is not None and x[1] != w[1] * self.group:
            raise ShapeInferenceError(f"data has {x[1]} channels but weights expect {w[1]} x group {self.group}")
        return Shape([x[0], w[0], *self._spatial_out(x, w.dims[2:])])

    def _accumulate(self, x: np.ndarray, w: np.ndarray, xzp: np.ndarray, wzp: np.ndarray) -> np.ndarray:
        xi = x.astype(np.int64) - np.asarray(xzp, dtype=np.int64).reshape(())
        wz = np.asarray(wzp, dtype=np.int64)
        wi = w.astype(np.int64) - (wz.reshape(()) if wz.size == 1 else wz.reshape(-1, *[1] * (w.ndim - 1)))
        # Convolution's reference pads with 0 and accumulates in the data's type: int64 here
        return Convolution.evaluate(self, xi, wi)[0]


class ConvInteger(_IntegerConvolution):
    """ONNX ConvInteger: ``conv(x - x_zero_point, w - w_zero_point)`` as i32 (``w_zero_point`` scalar or
    per output channel). Inputs: x, w, x_zero_point, w_zero_point."""

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 4)
        _check_int_inputs(self, [(0, "input x"), (1, "input w")])
        _zero_point_matches(self, 0, 2, "x_zero_point")
        _zero_point_matches(self, 1, 3, "w_zero_point")
        return [(ElementType.i32, self._conv_shape())]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        x, w, xz, wz = (np.asarray(a) for a in args)
        return [self._accumulate(x, w, xz, wz).astype(np.int32)]


class QLinearConv(_IntegerConvolution):
    """ONNX QLinearConv: the integer convolution plus an i32 bias, requantized like QLinearMatMul
    (``w_scale`` scalar or per output channel). Inputs: x, x_scale, x_zero_point, w, w_scale,
    w_zero_point, y_scale, y_zero_point[, bias]."""

    DATA = (0, 3)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        check_input_count(self, 8, 9)
        _check_int_inputs(self, [(0, "input x"), (3, "input w"), (7, "y_zero_point")])
        _zero_point_matches(self, 0, 2, "x_zero_point")
        _zero_point_matches(self, 3, 5, "w_zero_point")
        for i, what in ((1, "x_scale"), (4, "w_scale"), (6, "y_scale")):
            check_kind(self, i, "real", what)
        y = self._conv_shape()
        m = self.input_shape(3)[0]
        for i, what in ((4, "w_scale"), (5, "w_zero_point")):
            s = self.input_shape(i)
            if s.is_static and s.size != 1 and (s.rank != 1 or s[0] != m):
                raise ShapeInferenceError(f"{what} {s} must be a scalar or have one element per output channel ({m})")
        if len(self.inputs) == 9:
            if self.input_type(8) not in (ElementType.i32, ElementType.dynamic):
                raise ShapeInferenceError(f"the bias must be i32, got {self.input_type(8)}")
            b = self.input_shape(8)
            if b.is_static and (b.rank != 1 or b[0] != m):
                raise ShapeInferenceError(f"the bias {b} must have one element per output channel ({m})")
        return [(self.input_type(7), y)]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        x, sx, zx, w, sw, zw, sy, zy, *bias = (np.asarray(a) for a in args)
        acc = self._accumulate(x, w, zx, zw)
        per_channel = (1, -1, *[1] * (x.ndim - 2))
        if bias:
            acc = acc + bias[0].astype(np.int64).reshape(per_channel)
        acc = acc.astype(np.int32)
        mult = (sx * (sw.reshape(per_channel) if sw.size > 1 else sw.reshape(())) / sy).astype(sx.dtype)
        return [requantize(acc, mult, zy.reshape(()), ElementType.from_numpy(zy.dtype))]
