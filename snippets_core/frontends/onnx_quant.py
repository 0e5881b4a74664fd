"""ONNX converters for the integer quantization ops (QuantizeLinear, DequantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv, DynamicQuantizeLinear), collected in :data:`QUANT_CONVERTERS`.

``onnx_converters`` merges them into its table; this module does not import it back, so the two stay
free of an import cycle.

Scales and zero points known while reading are checked here, so a bad value is a load-time error naming
the node: a zero, negative or non-finite scale, a zero point of the wrong type, a nonzero zero point for
i32 data, and (through the ops' shape inference) per-axis and blocked shapes that do not fit the data.
onnxruntime's quantizer puts QLinearAdd, QLinearMul, QLinearSigmoid, ... in the ``com.microsoft`` domain;
the reader refuses that domain with an UnsupportedOpError naming the node and the domain (the default
``QuantFormat.QDQ`` output, which these tests use, needs none of them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from snippets_core.errors import ModelFormatError
from snippets_core.frontends.onnx_types import element_type_of
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.quantize import DEQUANTIZED_FROM, QUANT_RANGES, QuantizedConstant

if TYPE_CHECKING:
    from snippets_core.frontends.onnx import NodeContext

Outputs = Sequence["Output | None"]
Converter = Callable[["NodeContext"], Outputs]

QUANT_CONVERTERS: dict[str, Converter] = {}

_AUTO_PAD = {"NOTSET": "explicit", "SAME_UPPER": "same_upper", "SAME_LOWER": "same_lower", "VALID": "valid"}


def _register(*op_types: str) -> Callable[[Converter], Converter]:
    def deco(fn: Converter) -> Converter:
        for t in op_types:
            QUANT_CONVERTERS[t] = fn
        return fn

    return deco


def _bad(ctx: NodeContext, what: str) -> ModelFormatError:
    return ModelFormatError(f"{ctx.where()}: {what}")


def _scale(ctx: NodeContext, i: int, what: str = "the scale") -> Output:
    """Input ``i``, a real scale; when known now, every value must be finite and positive."""
    s = ctx.input(i)
    if s.element_type is not ElementType.dynamic and not s.element_type.is_real:
        raise _bad(ctx, f"{what} (input {i}) must be a float tensor, got {s.element_type}")
    v = ctx.value(s)
    if v is not None:
        arr = np.asarray(v, dtype=np.float64)
        bad = ~(np.isfinite(arr) & (arr > 0))
        if bad.any():
            raise _bad(ctx, f"{what} (input {i}) must be finite and positive, got {arr[bad].reshape(-1)[0]!r}"
                            f" ({int(bad.sum())} of {arr.size} values)")
    return s


def _zero_point(ctx: NodeContext, i: int, et: ElementType, what: str = "the zero point") -> Output:
    """Input ``i`` (a zero point of type ``et``), or a scalar 0 of that type when omitted."""
    z = ctx.opt_input(i)
    if z is None:
        return ctx.const(np.zeros((), et.numpy), et)
    if z.element_type not in (ElementType.dynamic, et):
        raise _bad(ctx, f"{what} (input {i}) is {z.element_type}, it must have the data's type {et}")
    v = ctx.value(z)
    if v is not None and et is ElementType.i32 and np.any(np.asarray(v) != 0):
        raise _bad(ctx, f"{what} (input {i}) must be 0 for i32 data (ONNX), got {np.asarray(v).reshape(-1)[0]}")
    return z


def _quant_type(ctx: NodeContext, et: ElementType, what: str) -> ElementType:
    if et is not ElementType.dynamic and et not in QUANT_RANGES:
        raise ctx.unsupported(f"{what} is {et}; quantized types are u8, i8, u16 and i16")
    return et


def _axis_attrs(ctx: NodeContext) -> dict[str, int]:
    block = int(ctx.attr("block_size", 0))
    if block < 0:
        raise ctx.bad_attr("block_size", block, "must be positive (0: per-tensor or per-axis)")
    return {"axis": int(ctx.attr("axis", 1)), "block_size": block}


@_register("QuantizeLinear")
def _quantize_linear(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    scale = _scale(ctx, 1)
    precision = ctx.attr("precision", 0)
    if precision and element_type_of(precision, f"attribute 'precision' of {ctx.where()}") is not ElementType.f32:
        raise ctx.bad_attr("precision", precision, "is not supported (only the default and FLOAT are)")
    zp_in = ctx.opt_input(2)
    if zp_in is not None:
        et = zp_in.element_type
    elif ctx.attr("output_dtype", 0):
        et = element_type_of(ctx.attr("output_dtype"), f"attribute 'output_dtype' of {ctx.where()}")
    else:
        et = ElementType.u8
    if zp_in is not None and ctx.attr("output_dtype", 0):
        want = element_type_of(ctx.attr("output_dtype"), f"attribute 'output_dtype' of {ctx.where()}")
        if want is not et:
            raise _bad(ctx, f"attribute 'output_dtype' ({want}) differs from the zero point's type {et}")
    _quant_type(ctx, et, "the output type")
    # 'saturate' selects float8 overflow behaviour; integer outputs always saturate (ONNX)
    zp = _zero_point(ctx, 2, et)
    return [ctx.make("QuantizeLinear", x, scale, zp, output_type=et, **_axis_attrs(ctx)).output]


@_register("DequantizeLinear")
def _dequantize_linear(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    if x.element_type is not ElementType.i32:
        _quant_type(ctx, x.element_type, "the data")
    scale = _scale(ctx, 1)
    out = scale.element_type
    if ctx.attr("output_dtype", 0):
        out = element_type_of(ctx.attr("output_dtype"), f"attribute 'output_dtype' of {ctx.where()}")
        if scale.element_type not in (ElementType.dynamic, out):
            raise _bad(ctx, f"attribute 'output_dtype' ({out}) differs from the scale's type {scale.element_type}")
    zp = _zero_point(ctx, 2, x.element_type)
    return [ctx.make("DequantizeLinear", x, scale, zp, output_type=out, **_axis_attrs(ctx)).output]


def _integer_inputs(ctx: NodeContext, x: str, w: str) -> list[Output]:
    """MatMulInteger / ConvInteger inputs: the two quantized tensors and their zero points (0 when omitted)."""
    a, b = ctx.input(0), ctx.input(1)
    _quant_type(ctx, a.element_type, f"input {x}")
    _quant_type(ctx, b.element_type, f"input {w}")
    return [a, b, _zero_point(ctx, 2, a.element_type, f"{x}_zero_point"),
            _zero_point(ctx, 3, b.element_type, f"{w}_zero_point")]


def _qlinear_inputs(ctx: NodeContext, x: str, w: str) -> list[Output]:
    """QLinearMatMul / QLinearConv inputs: (x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
    y_zero_point), each checked."""
    a, b, y_zp = ctx.input(0), ctx.input(3), ctx.input(7)
    for v, what in ((a, f"input {x}"), (b, f"input {w}"), (y_zp, "y_zero_point")):
        _quant_type(ctx, v.element_type, what)
    return [a, _scale(ctx, 1, f"{x}_scale"), _zero_point(ctx, 2, a.element_type, f"{x}_zero_point"),
            b, _scale(ctx, 4, f"{w}_scale"), _zero_point(ctx, 5, b.element_type, f"{w}_zero_point"),
            _scale(ctx, 6, "y_scale"), y_zp]


@_register("MatMulInteger")
def _matmul_integer(ctx: NodeContext) -> Outputs:
    return [ctx.make("MatMulInteger", *_integer_inputs(ctx, "a", "b")).output]


@_register("QLinearMatMul")
def _qlinear_matmul(ctx: NodeContext) -> Outputs:
    return [ctx.make("QLinearMatMul", *_qlinear_inputs(ctx, "a", "b")).output]


def _conv_attrs(ctx: NodeContext, w: Output) -> dict[str, object]:
    kernel = ctx.attr_ints("kernel_shape")
    if kernel is not None and w.shape.is_static and list(w.shape.dims[2:]) != kernel:  # type: ignore[index]
        raise ctx.bad_attr("kernel_shape", kernel, f"does not match the weights' shape {w.shape}")
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad not in _AUTO_PAD:
        raise ctx.bad_attr("auto_pad", auto_pad, f"is not one of {', '.join(_AUTO_PAD)}")
    return {"strides": ctx.attr_ints("strides"), "dilations": ctx.attr_ints("dilations"), "pads": ctx.attr_ints("pads"),
            "auto_pad": _AUTO_PAD[auto_pad], "group": int(ctx.attr("group", 1))}


@_register("ConvInteger")
def _conv_integer(ctx: NodeContext) -> Outputs:
    inputs = _integer_inputs(ctx, "x", "w")
    return [ctx.make("ConvInteger", *inputs, **_conv_attrs(ctx, inputs[1])).output]


@_register("QLinearConv")
def _qlinear_conv(ctx: NodeContext) -> Outputs:
    inputs = _qlinear_inputs(ctx, "x", "w")
    bias = ctx.opt_input(8)
    if bias is not None:
        inputs.append(bias)
    return [ctx.make("QLinearConv", *inputs, **_conv_attrs(ctx, inputs[3])).output]


@_register("DynamicQuantizeLinear")
def _dynamic_quantize_linear(ctx: NodeContext) -> Outputs:
    return list(ctx.make("DynamicQuantizeLinear", ctx.input(0)).outputs)


def mark_dequantized_constant(folded: Node, dq: Node, inputs: Sequence[np.ndarray]) -> None:
    """Remember on ``folded`` (the Constant the reader made of ``DequantizeLinear(constant)``) the quantized
    tensor, scale and zero point it came from, so an int8 kernel can use the integer weights."""
    data = np.asarray(inputs[0])
    zero_point = np.asarray(inputs[2]) if len(inputs) > 2 else np.zeros((), data.dtype)
    folded.rt_info[DEQUANTIZED_FROM] = QuantizedConstant(
        data, np.asarray(inputs[1]), zero_point, int(dq.axis), int(dq.block_size))  # type: ignore[attr-defined]
