"""ONNX op converters: one function per ONNX op type, collected in :data:`CONVERTERS`.

A converter takes a :class:`snippets_core.frontends.onnx.NodeContext` and returns one op-set output per
ONNX output (``None`` for an output it cannot produce). Version differences are resolved here through
``ctx.opset``; the thresholds are the ONNX opset versions where the op's schema changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from snippets_core.errors import UnsupportedOpError
from snippets_core.frontends.onnx_types import element_type_of
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Output
from snippets_core.ir.shape import SymDim

if TYPE_CHECKING:
    from snippets_core.frontends.onnx import NodeContext

Outputs = Sequence["Output | None"]
Converter = Callable[["NodeContext"], Outputs]

CONVERTERS: dict[str, Converter] = {}


def _register(*op_types: str) -> Callable[[Converter], Converter]:
    def deco(fn: Converter) -> Converter:
        for t in op_types:
            CONVERTERS[t] = fn
        return fn

    return deco


def _rank(ctx: NodeContext, x: Output, what: str = "input") -> int:
    if not x.shape.rank_is_static:
        raise ctx.unsupported(f"the {what} has a dynamic rank, which this op's conversion needs to know")
    return x.shape.rank


def _scalar(ctx: NodeContext, value: float, like: Output) -> Output:
    return ctx.const(np.asarray(value), like)


# ----------------------------------------------------------------------------------------------------------
# Element-wise
# ----------------------------------------------------------------------------------------------------------

_UNARY = {
    "Abs": "Abs", "Ceil": "Ceiling", "Floor": "Floor", "Erf": "Erf", "Exp": "Exp", "Log": "Log", "Neg": "Negative",
    "Relu": "Relu", "Sigmoid": "Sigmoid", "Sign": "Sign", "Sin": "Sin", "Cos": "Cos", "Tan": "Tan", "Sinh": "Sinh",
    "Cosh": "Cosh", "Asin": "Asin", "Acos": "Acos", "Atan": "Atan", "Asinh": "Asinh", "Acosh": "Acosh",
    "Atanh": "Atanh", "Sqrt": "Sqrt", "Tanh": "Tanh", "Softplus": "SoftPlus", "Softsign": "SoftSign", "Mish": "Mish",
    "HardSwish": "HSwish", "Not": "LogicalNot", "IsNaN": "IsNaN",
}


def _unary(op: str) -> Converter:
    def convert(ctx: NodeContext) -> Outputs:
        return [ctx.make(op, ctx.input(0)).output]

    return convert


for _onnx, _ours in _UNARY.items():
    CONVERTERS[_onnx] = _unary(_ours)


@_register("Round")
def _round(ctx: NodeContext) -> Outputs:
    return [ctx.make("Round", ctx.input(0), mode="half_to_even").output]


@_register("IsInf")
def _isinf(ctx: NodeContext) -> Outputs:
    return [ctx.make("IsInf", ctx.input(0), detect_negative=bool(ctx.attr("detect_negative", 1)),
                     detect_positive=bool(ctx.attr("detect_positive", 1))).output]


@_register("Elu")
def _elu(ctx: NodeContext) -> Outputs:
    return [ctx.make("Elu", ctx.input(0), alpha=ctx.attr("alpha", 1.0)).output]


@_register("Celu")
def _celu(ctx: NodeContext) -> Outputs:
    # celu(x) = alpha * elu(x / alpha) with elu's alpha = 1
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    scaled = ctx.make("Divide", x, _scalar(ctx, alpha, x))
    elu = ctx.make("Elu", scaled, alpha=1.0)
    return [ctx.make("Multiply", elu, _scalar(ctx, alpha, x)).output]


@_register("Selu")
def _selu(ctx: NodeContext) -> Outputs:
    return [ctx.make("Selu", ctx.input(0), alpha=ctx.attr("alpha", 1.67326319217681884765625),
                     lambda_=ctx.attr("gamma", 1.05070102214813232421875)).output]


@_register("HardSigmoid")
def _hard_sigmoid(ctx: NodeContext) -> Outputs:
    return [ctx.make("HardSigmoid", ctx.input(0), alpha=ctx.attr("alpha", 0.2), beta=ctx.attr("beta", 0.5)).output]


@_register("LeakyRelu")
def _leaky_relu(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    return [ctx.make("PRelu", x, _scalar(ctx, ctx.attr("alpha", 0.01), x)).output]


@_register("ThresholdedRelu")
def _thresholded_relu(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    cond = ctx.make("Greater", x, _scalar(ctx, ctx.attr("alpha", 1.0), x))
    return [ctx.make("Select", cond, x, _scalar(ctx, 0, x)).output]


@_register("Shrink")
def _shrink(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    lambd, bias = float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0))
    low = ctx.make("Less", x, _scalar(ctx, -lambd, x))
    high = ctx.make("Greater", x, _scalar(ctx, lambd, x))
    plus = ctx.make("Add", x, _scalar(ctx, bias, x))
    minus = ctx.make("Subtract", x, _scalar(ctx, bias, x))
    inner = ctx.make("Select", high, minus, _scalar(ctx, 0, x))
    return [ctx.make("Select", low, plus, inner).output]


@_register("Gelu")
def _gelu(ctx: NodeContext) -> Outputs:
    mode = ctx.check_attr("approximate", ("none", "tanh"), "none")
    return [ctx.make("Gelu", ctx.input(0), approximation_mode="erf" if mode == "none" else "tanh").output]


@_register("Swish")
def _swish(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha == 1.0:
        return [ctx.make("Swish", x).output]
    return [ctx.make("Swish", x, _scalar(ctx, alpha, x)).output]


@_register("Clip")
def _clip(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    if ctx.opset < 11:
        lo, hi = ctx.attr("min"), ctx.attr("max")
        lo_out = None if lo is None else _scalar(ctx, lo, x)
        hi_out = None if hi is None else _scalar(ctx, hi, x)
    else:
        lo_out, hi_out = ctx.opt_input(1), ctx.opt_input(2)
        lo, hi = ctx.value(lo_out), ctx.value(hi_out)
    known = (lo_out is None or lo is not None) and (hi_out is None or hi is not None)
    if known and x.element_type.is_real:
        lo_f = -np.inf if lo_out is None else float(np.asarray(lo).reshape(-1)[0])
        hi_f = np.inf if hi_out is None else float(np.asarray(hi).reshape(-1)[0])
        if lo_f <= hi_f:
            return [ctx.make("Clamp", x, min=lo_f, max=hi_f).output]
    # Run-time bounds, integer data (Clamp keeps float bounds) or min > max (ONNX then gives max everywhere).
    y: Output = x
    if lo_out is not None:
        y = ctx.make("Maximum", y, lo_out).output
    if hi_out is not None:
        y = ctx.make("Minimum", y, hi_out).output
    return [y]


_BINARY = {
    "Add": "Add", "Sub": "Subtract", "Mul": "Multiply", "Div": "Divide", "Equal": "Equal", "Greater": "Greater",
    "Less": "Less", "GreaterOrEqual": "GreaterEqual", "LessOrEqual": "LessEqual", "And": "LogicalAnd",
    "Or": "LogicalOr", "Xor": "LogicalXor", "BitwiseXor": "BitwiseXor",
}


def _legacy_rhs(ctx: NodeContext, a: Output, b: Output) -> Output:
    """Before opset 7, ``broadcast=1, axis=k`` aligns B's dims with A's starting at ``k``; trailing unit dims
    turn that into numpy broadcasting. Without ``axis`` the legacy rule is numpy's suffix alignment."""
    if ctx.opset >= 7 or not ctx.attr("broadcast", 0) or ctx.attr("axis") is None:
        return b
    ra, rb = _rank(ctx, a), _rank(ctx, b)
    axis = int(ctx.attr("axis"))
    axis = axis + ra if axis < 0 else axis
    trailing = ra - axis - rb
    if trailing < 0:
        raise ctx.bad_attr("axis", axis, f"does not fit B of rank {rb} into A of rank {ra}")
    if trailing == 0:
        return b
    target = ctx.i64([0] * rb + [1] * trailing)
    return ctx.make("Reshape", b, target, special_zero=True).output


def _binary(op: str) -> Converter:
    def convert(ctx: NodeContext) -> Outputs:
        a = ctx.input(0)
        return [ctx.make(op, a, _legacy_rhs(ctx, a, ctx.input(1))).output]

    return convert


for _onnx, _ours in _BINARY.items():
    CONVERTERS[_onnx] = _binary(_ours)


@_register("PRelu")
def _prelu(ctx: NodeContext) -> Outputs:
    x, slope = ctx.input(0), ctx.input(1)
    if ctx.opset < 7 and slope.shape.rank_is_static and slope.shape.rank == 1 and x.shape.rank_is_static \
            and x.shape.rank > 2 and slope.shape.dims[0] not in (1, None) and slope.shape.dims[0] == x.shape.dims[1]:
        # PRelu-6 applies a [C] slope per channel; from opset 7 it broadcasts numpy-style from the right.
        slope = ctx.make("Reshape", slope, ctx.i64([-1] + [1] * (x.shape.rank - 2)), special_zero=False).output
    return [ctx.make("PRelu", x, slope).output]


@_register("Pow")
def _pow(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    y = _legacy_rhs(ctx, x, ctx.input(1))
    if y.element_type != x.element_type:  # ONNX allows a differently typed exponent since opset 12
        y = ctx.make("Convert", y, destination_type=x.element_type).output
    return [ctx.make("Power", x, y).output]


@_register("Reciprocal")
def _reciprocal(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    return [ctx.make("Divide", _scalar(ctx, 1, x), x).output]


@_register("Mod")
def _mod(ctx: NodeContext) -> Outputs:
    fmod = int(ctx.attr("fmod", 0))
    a, b = ctx.input(0), ctx.input(1)
    if fmod not in (0, 1):
        raise ctx.bad_attr("fmod", fmod, "must be 0 or 1")
    return [ctx.make("Mod" if fmod else "FloorMod", a, b).output]


def _variadic(op: str) -> Converter:
    def convert(ctx: NodeContext) -> Outputs:
        xs = ctx.inputs()
        if not xs:
            raise ctx.unsupported("needs at least one input")
        acc = xs[0]
        for x in xs[1:]:
            acc = ctx.make(op, acc, x).output
        if len(xs) == 1 and ctx.op_type != "Mean":
            return [acc]
        if ctx.op_type == "Mean":
            acc = ctx.make("Divide", acc, _scalar(ctx, len(xs), acc)).output
        return [acc]

    return convert


CONVERTERS["Sum"] = _variadic("Add")
CONVERTERS["Mean"] = _variadic("Add")
CONVERTERS["Max"] = _variadic("Maximum")
CONVERTERS["Min"] = _variadic("Minimum")


@_register("Where")
def _where(ctx: NodeContext) -> Outputs:
    return [ctx.make("Select", ctx.input(0), ctx.input(1), ctx.input(2)).output]


def _onnx_type(ctx: NodeContext, attr: str) -> ElementType:
    to = ctx.attr(attr)
    if to is None:
        raise ctx.unsupported(f"attribute '{attr}' is required")
    try:
        return element_type_of(int(to), f"{ctx.where()}: attribute '{attr}'")
    except UnsupportedOpError:
        raise ctx.bad_attr(attr, onnx_type_name(int(to)), "is not a supported element type") from None


def onnx_type_name(code: int) -> str:
    from onnx import TensorProto

    try:
        return TensorProto.DataType.Name(code)
    except ValueError:
        return str(code)


@_register("Cast")
def _cast(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    if x.element_type is ElementType.string:
        raise ctx.unsupported("casting string tensors is not supported")
    return [ctx.make("Convert", x, destination_type=_onnx_type(ctx, "to")).output]


@_register("CastLike")
def _cast_like(ctx: NodeContext) -> Outputs:
    return [ctx.make("Convert", ctx.input(0), destination_type=ctx.input(1).element_type).output]


@_register("Identity")
def _identity(ctx: NodeContext) -> Outputs:
    return [ctx.input(0)]


@_register("Dropout")
def _dropout(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    if ctx.opset >= 12 and ctx.has_input(2):
        training = ctx.const_input(2, "training_mode")
        if training is not None and bool(np.asarray(training).reshape(-1)[0]):
            raise ctx.unsupported("training_mode=true is not supported (inference only)")
    if ctx.opset < 7 and not ctx.attr("is_test", 0):
        raise ctx.bad_attr("is_test", 0, "(training) is not supported")
    outs: list[Output | None] = [x]
    if len(ctx.proto.output) > 1 and ctx.proto.output[1]:
        # The mask is all ones in inference; bool since opset 10 (the data type before).
        mask_type = ElementType.boolean if ctx.opset >= 10 else x.element_type
        shape = ctx.make("ShapeOf", x)
        outs.append(ctx.make("ConstantOfShape", shape, value=np.ones(1, dtype=mask_type.numpy)).output)
    return outs


# ----------------------------------------------------------------------------------------------------------
# Softmax, MatMul, Gemm, reductions
# ----------------------------------------------------------------------------------------------------------


def _softmax_like(op: str) -> Converter:
    def convert(ctx: NodeContext) -> Outputs:
        x = ctx.input(0)
        if ctx.opset >= 13:
            return [ctx.make(op, x, axis=int(ctx.attr("axis", -1))).output]
        # Before opset 13 the input is coerced to 2-D [prod(d[:axis]), prod(d[axis:])] and normalized per row.
        rank = _rank(ctx, x)
        axis = int(ctx.attr("axis", 1))
        axis = axis + rank if axis < 0 else axis
        if axis == rank - 1:
            return [ctx.make(op, x, axis=-1).output]
        flat = _flatten(ctx, x, axis)
        y = ctx.make(op, flat, axis=1)
        return [ctx.make("Reshape", y, ctx.make("ShapeOf", x)).output]

    return convert


CONVERTERS["Softmax"] = _softmax_like("Softmax")
CONVERTERS["LogSoftmax"] = _softmax_like("LogSoftmax")
CONVERTERS["Hardmax"] = _softmax_like("Hardmax")


@_register("MatMul")
def _matmul(ctx: NodeContext) -> Outputs:
    return [ctx.make("MatMul", ctx.input(0), ctx.input(1)).output]


@_register("Gemm")
def _gemm(ctx: NodeContext) -> Outputs:
    # alpha * A' @ B' + beta * C, kept as MatMul / Multiply / Add so that the elementwise tail can fuse.
    a, b = ctx.input(0), ctx.input(1)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    y = ctx.make("MatMul", a, b, transpose_a=bool(ctx.attr("transA", 0)), transpose_b=bool(ctx.attr("transB", 0)))
    out = y.output
    if alpha != 1.0:
        out = ctx.make("Multiply", out, _scalar(ctx, alpha, out)).output
    c = ctx.opt_input(2)
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = ctx.make("Multiply", c, _scalar(ctx, beta, c)).output
        out = ctx.make("Add", out, c).output
    return [out]


def _all_axes(ctx: NodeContext, x: Output) -> list[int]:
    return list(range(_rank(ctx, x)))


_REDUCE = {"ReduceSum": "ReduceSum", "ReduceMean": "ReduceMean", "ReduceMax": "ReduceMax", "ReduceMin": "ReduceMin",
           "ReduceProd": "ReduceProd", "ReduceL1": "ReduceL1", "ReduceL2": "ReduceL2"}
# Opset where the axes attribute became an input.
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce_axes(ctx: NodeContext, x: Output) -> Output | None:
    """The axes to reduce as an output, or None for 'no reduction' (noop_with_empty_axes)."""
    since = _AXES_INPUT_SINCE.get(ctx.op_type, 18)
    axes_out: Output | None
    if ctx.opset >= since:
        axes_out = ctx.opt_input(1)
        # An empty axes tensor (a constant, or an input of static shape [0]) means "no axes given".
        if axes_out is not None and axes_out.shape.is_static and axes_out.shape.size == 0:
            axes_out = None
    else:
        axes = ctx.attr_ints("axes")
        axes_out = None if not axes else ctx.i64(axes)
    if axes_out is None:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        return ctx.i64(_all_axes(ctx, x))
    return axes_out


def _reduce(op: str | None) -> Converter:
    def convert(ctx: NodeContext) -> Outputs:
        x = ctx.input(0)
        keep = bool(ctx.attr("keepdims", 1))
        axes = _reduce_axes(ctx, x)
        src = _reduce_prologue(ctx, x)
        if axes is None:
            # noop_with_empty_axes: each element is its own reduction (|x| for the norms).
            if ctx.op_type in ("ReduceL1", "ReduceL2"):
                src = ctx.make("Abs", src).output
            return [_reduce_epilogue(ctx, src)]
        base = op or _REDUCE_BASE[ctx.op_type]
        if src.element_type is ElementType.boolean and base in ("ReduceMax", "ReduceMin"):
            # Max/min of booleans (opset 20) are any/all: reduce them as u8.
            as_u8 = ctx.make("Convert", src, destination_type=ElementType.u8)
            y = ctx.make(base, as_u8, axes, keep_dims=keep)
            return [ctx.make("Convert", y, destination_type=ElementType.boolean).output]
        y = ctx.make(base, src, axes, keep_dims=keep).output
        return [_reduce_epilogue(ctx, y)]

    return convert


# Reductions ONNX has but the op set composes: prologue on the input, base reduction, epilogue.
_REDUCE_BASE = {"ReduceSumSquare": "ReduceSum", "ReduceLogSum": "ReduceSum", "ReduceLogSumExp": "ReduceSum"}


def _reduce_prologue(ctx: NodeContext, x: Output) -> Output:
    if ctx.op_type == "ReduceSumSquare":
        return ctx.make("Multiply", x, x).output
    if ctx.op_type == "ReduceLogSumExp":
        return ctx.make("Exp", x).output
    return x


def _reduce_epilogue(ctx: NodeContext, y: Output) -> Output:
    if ctx.op_type in ("ReduceLogSum", "ReduceLogSumExp"):
        return ctx.make("Log", y).output
    return y


for _onnx, _ours in _REDUCE.items():
    CONVERTERS[_onnx] = _reduce(_ours)
for _onnx in _REDUCE_BASE:
    CONVERTERS[_onnx] = _reduce(None)


def _arg_reduce(op: str) -> Converter:
    def convert(ctx: NodeContext) -> Outputs:
        return [ctx.make(op, ctx.input(0), axis=int(ctx.attr("axis", 0)), keep_dims=bool(ctx.attr("keepdims", 1)),
                         select_last_index=bool(ctx.attr("select_last_index", 0))).output]

    return convert


CONVERTERS["ArgMax"] = _arg_reduce("ArgMax")
CONVERTERS["ArgMin"] = _arg_reduce("ArgMin")


@_register("TopK")
def _topk(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    k = ctx.i64([int(ctx.attr("k"))]) if ctx.opset < 10 else ctx.input(1)
    node = ctx.make("TopK", x, k, axis=int(ctx.attr("axis", -1)), largest=bool(ctx.attr("largest", 1)),
                    sorted=bool(ctx.attr("sorted", 1)))
    return list(node.outputs)


@_register("CumSum", "CumProd")
def _cumulative(ctx: NodeContext) -> Outputs:
    return [ctx.make(ctx.op_type, ctx.input(0), ctx.input(1), exclusive=bool(ctx.attr("exclusive", 0)),
                     reverse=bool(ctx.attr("reverse", 0))).output]


@_register("Trilu")
def _trilu(ctx: NodeContext) -> Outputs:
    k = ctx.opt_input(1)
    args = [ctx.input(0)] + ([k] if k is not None else [])
    return [ctx.make("Trilu", *args, upper=bool(ctx.attr("upper", 1))).output]


@_register("OneHot")
def _one_hot(ctx: NodeContext) -> Outputs:
    return [ctx.make("OneHot", ctx.input(0), ctx.input(1), ctx.input(2), axis=int(ctx.attr("axis", -1))).output]


@_register("EyeLike")
def _eye_like(ctx: NodeContext) -> Outputs:
    et = _onnx_type(ctx, "dtype") if ctx.attr("dtype") is not None else None
    return [ctx.make("EyeLike", ctx.input(0), k=int(ctx.attr("k", 0)), element_type=et).output]


@_register("NonZero")
def _non_zero(ctx: NodeContext) -> Outputs:
    return [ctx.make("NonZero", ctx.input(0)).output]


@_register("GatherND")
def _gather_nd(ctx: NodeContext) -> Outputs:
    return [ctx.make("GatherND", ctx.input(0), ctx.input(1), batch_dims=int(ctx.attr("batch_dims", 0))).output]


@_register("ScatterElements", "Scatter")
def _scatter_elements(ctx: NodeContext) -> Outputs:
    reduction = ctx.check_attr("reduction", ("none", "add", "mul", "max", "min"), "none")
    return [ctx.make("ScatterElements", ctx.input(0), ctx.input(1), ctx.input(2), axis=int(ctx.attr("axis", 0)),
                     reduction=reduction).output]


@_register("ScatterND")
def _scatter_nd(ctx: NodeContext) -> Outputs:
    reduction = ctx.check_attr("reduction", ("none", "add", "mul", "max", "min"), "none")
    return [ctx.make("ScatterND", ctx.input(0), ctx.input(1), ctx.input(2), reduction=reduction).output]


@_register("LpNormalization")
def _lp_normalization(ctx: NodeContext) -> Outputs:
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ctx.bad_attr("p", p, "must be 1 or 2")
    x = ctx.input(0)
    norm = ctx.make("ReduceL1" if p == 1 else "ReduceL2", x, ctx.i64([int(ctx.attr("axis", -1))]), keep_dims=True)
    # A zero norm gives 0, not 0/0.
    zero = _scalar(ctx, 0, x)
    return [ctx.make("Select", ctx.make("Equal", norm, zero), zero, ctx.make("Divide", x, norm)).output]


# ----------------------------------------------------------------------------------------------------------
# Shapes and data movement
# ----------------------------------------------------------------------------------------------------------


def _flatten(ctx: NodeContext, x: Output, axis: int) -> Output:
    """Reshape ``x`` to 2-D ``[prod(d[:axis]), prod(d[axis:])]``."""
    s = x.shape
    if s.rank_is_static and all(d is not None for d in s.dims[:axis]):  # type: ignore[index]
        outer = int(np.prod(s.dims[:axis], dtype=np.int64))  # type: ignore[index]
        return ctx.make("Reshape", x, ctx.i64([outer, -1])).output
    if s.rank_is_static and all(d is not None for d in s.dims[axis:]):  # type: ignore[index]
        inner = int(np.prod(s.dims[axis:], dtype=np.int64))  # type: ignore[index]
        return ctx.make("Reshape", x, ctx.i64([-1, inner])).output
    shape = ctx.make("ShapeOf", x)
    head = ctx.make("Slice", shape, ctx.i64([0]), ctx.i64([axis]), ctx.i64([0]), ctx.i64([1]))
    outer_out = ctx.make("ReduceProd", head, ctx.i64([0]), keep_dims=True)
    target = ctx.make("Concat", outer_out, ctx.i64([-1]), axis=0)
    return ctx.make("Reshape", x, target).output


@_register("Flatten")
def _flatten_op(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    rank = _rank(ctx, x)
    axis = int(ctx.attr("axis", 1))
    axis = axis + rank if axis < 0 else axis
    return [_flatten(ctx, x, axis)]


@_register("Reshape")
def _reshape(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    if ctx.opset < 5:
        target = ctx.i64(ctx.attr_ints("shape", []))  # type: ignore[arg-type]
    else:
        target = ctx.input(1)
    allowzero = bool(ctx.attr("allowzero", 0))
    if not allowzero and target.node.type_name != "Constant":
        copied = copy_target(x, target)
        if copied is not None:
            target = ctx.i64(copied)
    return [ctx.make("Reshape", x, target, special_zero=not allowzero).output]


def copy_target(x: Output, target: Output) -> list[int] | None:
    """A constant target for a Reshape whose target is computed from shapes at run time, when the symbolic value
    allows it: entry ``i`` a static dim, or the input's own dim ``i`` (a 0: copied). ``Reshape(x, Concat(
    Shape(x)[0:2], [12, 64]))`` of ``x: [B, S, 768]`` becomes ``Reshape(x, [0, 0, 12, 64])``, and the ShapeOf chain
    that computed it is gone. None when some entry is another symbol or unknown."""
    from snippets_core.ir.const_eval import shape_value

    value = shape_value(target)
    if value is None or not x.shape.rank_is_static:
        return None
    dims = x.shape.sym_dims
    out: list[int] = []
    for i, t in enumerate(value):
        if isinstance(t, int) and t != 0:  # a literal 0 would mean "copy" here: left as computed
            out.append(t)
        elif isinstance(t, SymDim) and i < len(dims) and dims[i] == t:
            out.append(0)
        else:
            return None
    return out


@_register("Transpose")
def _transpose(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    perm = ctx.attr_ints("perm")
    order = ctx.i64(perm) if perm else ctx.i64(list(reversed(range(_rank(ctx, x)))))
    return [ctx.make("Transpose", x, order).output]


def _axes_attr_or_input(ctx: NodeContext, since: int, index: int = 1) -> Output | None:
    if ctx.opset >= since:
        return ctx.opt_input(index)
    axes = ctx.attr_ints("axes")
    return None if axes is None else ctx.i64(axes)


@_register("Squeeze")
def _squeeze(ctx: NodeContext) -> Outputs:
    axes = _axes_attr_or_input(ctx, 13)
    x = ctx.input(0)
    return [(ctx.make("Squeeze", x) if axes is None else ctx.make("Squeeze", x, axes)).output]


@_register("Unsqueeze")
def _unsqueeze(ctx: NodeContext) -> Outputs:
    axes = _axes_attr_or_input(ctx, 13)
    if axes is None:
        raise ctx.unsupported("axes are required")
    return [ctx.make("Unsqueeze", ctx.input(0), axes).output]


@_register("Concat")
def _concat(ctx: NodeContext) -> Outputs:
    if ctx.attr("axis") is None:
        raise ctx.unsupported("attribute 'axis' is required")
    return [ctx.make("Concat", *ctx.inputs(), axis=int(ctx.attr("axis"))).output]


@_register("Split")
def _split(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    axis = int(ctx.attr("axis", 0))
    n_out = len(ctx.proto.output)
    axis_c = ctx.const(np.int64(axis), ElementType.i64)
    if ctx.opset >= 13:
        split_out = ctx.opt_input(1)
        split = None if split_out is None else ctx.value(split_out)
        if split_out is not None and split is None:
            # Lengths known only at run time: VariadicSplit takes them as an input.
            return list(ctx.make("VariadicSplit", x, axis_c, split_out).outputs)
    else:
        split = ctx.attr_ints("split")
    if split is not None and len(np.asarray(split).reshape(-1)) > 0:
        lengths = ctx.i64(np.asarray(split).reshape(-1))
        return list(ctx.make("VariadicSplit", x, axis_c, lengths).outputs)
    num = int(ctx.attr("num_outputs", n_out))
    if x.shape.rank_is_static:
        dim = x.shape.dims[axis]  # type: ignore[index]
        if dim is not None and dim % num:
            # Opset 18: uneven splits make the last chunk smaller.
            chunk = -(-dim // num)
            lengths = [chunk] * (num - 1) + [dim - chunk * (num - 1)]
            return list(ctx.make("VariadicSplit", x, axis_c, ctx.i64(lengths)).outputs)
        if dim is None and ctx.attr("num_outputs") is not None and num > 1:
            # Opset 18 on a dynamic dim: chunks of ceil(dim / num), the last one smaller, as torch's chunk; the
            # lengths are computed from the shape (symbolic: [floor((S+1)/2), S-floor((S+1)/2)])
            size = ctx.make("Gather", ctx.make("ShapeOf", x).output, ctx.i64(np.array([axis % x.shape.rank])),
                            ctx.const(np.int64(0), ElementType.i64)).output
            chunk = ctx.make("Divide", ctx.make("Add", size, ctx.i64(np.array([num - 1]))).output,
                             ctx.i64(np.array([num]))).output
            last = ctx.make("Subtract", size, ctx.make("Multiply", chunk, ctx.i64(np.array([num - 1]))).output).output
            lengths_out = ctx.make("Concat", *([chunk] * (num - 1)), last, axis=0).output
            return list(ctx.make("VariadicSplit", x, axis_c, lengths_out).outputs)
    return list(ctx.make("Split", x, axis_c, num_splits=num).outputs)


@_register("Gather")
def _gather(ctx: NodeContext) -> Outputs:
    axis = ctx.const(np.int64(int(ctx.attr("axis", 0))), ElementType.i64)
    return [ctx.make("Gather", ctx.input(0), ctx.input(1), axis).output]


@_register("GatherElements")
def _gather_elements(ctx: NodeContext) -> Outputs:
    return [ctx.make("GatherElements", ctx.input(0), ctx.input(1), axis=int(ctx.attr("axis", 0))).output]


@_register("Expand")
def _expand(ctx: NodeContext) -> Outputs:
    return [ctx.make("Broadcast", ctx.input(0), ctx.input(1), mode="bidirectional").output]


@_register("Tile")
def _tile(ctx: NodeContext) -> Outputs:
    return [ctx.make("Tile", ctx.input(0), ctx.input(1)).output]


@_register("Shape")
def _shape(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    shape = ctx.make("ShapeOf", x).output
    start, end = ctx.attr("start"), ctx.attr("end")
    if start is None and end is None:
        return [shape]
    big = np.iinfo(np.int64).max
    return [ctx.make("Slice", shape, ctx.i64([int(start or 0)]), ctx.i64([big if end is None else int(end)]),
                     ctx.i64([0]), ctx.i64([1])).output]


@_register("Size")
def _size(ctx: NodeContext) -> Outputs:
    shape = ctx.make("ShapeOf", ctx.input(0))
    return [ctx.make("ReduceProd", shape, ctx.i64([0]), keep_dims=False).output]


@_register("Constant")
def _constant(ctx: NodeContext) -> Outputs:
    for attr, dtype in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                        ("value_int", np.int64), ("value_ints", np.int64)):
        v = ctx.attr(attr)
        if v is not None:
            return [ctx.const(np.asarray(v, dtype=dtype))]
    present = sorted(ctx.attrs)
    raise ctx.bad_attr(present[0] if present else "value", "...", "is not a supported Constant kind "
                       "(sparse and string constants are not supported)")


@_register("ConstantOfShape")
def _constant_of_shape(ctx: NodeContext) -> Outputs:
    value = ctx.attr("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return [ctx.make("ConstantOfShape", ctx.input(0), value=value).output]


@_register("Range")
def _range(ctx: NodeContext) -> Outputs:
    return [ctx.make("Range", ctx.input(0), ctx.input(1), ctx.input(2)).output]


@_register("Slice")
def _slice(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    if ctx.opset < 10:
        starts_l, ends_l = ctx.attr_ints("starts"), ctx.attr_ints("ends")
        if starts_l is None or ends_l is None:
            raise ctx.unsupported("attributes 'starts' and 'ends' are required")
        axes_l = ctx.attr_ints("axes", list(range(len(starts_l))))
        starts, ends, axes = ctx.i64(starts_l), ctx.i64(ends_l), ctx.i64(axes_l)  # type: ignore[arg-type]
        steps = ctx.i64([1] * len(starts_l))
    else:
        starts, ends = ctx.input(1), ctx.input(2)
        n = starts.shape.dims[0] if starts.shape.rank_is_static and starts.shape.rank == 1 else None
        axes = ctx.opt_input(3)
        steps = ctx.opt_input(4)
        if (axes is None or steps is None) and n is None:
            raise ctx.unsupported("'starts' must have a static length when 'axes' or 'steps' is omitted")
        if axes is None:
            axes = ctx.i64(list(range(n)))  # type: ignore[arg-type]
        if steps is None:
            steps = ctx.i64([1] * n)  # type: ignore[operator]
    return [ctx.make("Slice", x, starts, ends, axes, steps).output]


@_register("Pad")
def _pad(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    mode = ctx.check_attr("mode", ("constant", "reflect", "edge", "wrap"), "constant")
    if ctx.opset < 11:
        pads = ctx.i64(ctx.attr_ints("pads", ctx.attr_ints("paddings", [])))  # type: ignore[arg-type]
        value = _scalar(ctx, float(ctx.attr("value", 0.0)), x)
        return [ctx.make("Pad", x, pads, value, mode=mode).output]
    pads = ctx.input(1)
    value = ctx.opt_input(2) or _scalar(ctx, 0, x)
    axes = ctx.opt_input(3)
    args = [x, pads, value] + ([axes] if axes is not None else [])
    return [ctx.make("Pad", *args, mode=mode).output]


@_register("DepthToSpace")
def _depth_to_space(ctx: NodeContext) -> Outputs:
    mode = ctx.check_attr("mode", ("DCR", "CRD"), "DCR")
    return [ctx.make("DepthToSpace", ctx.input(0), block_size=int(ctx.attr("blocksize")), mode=mode).output]


@_register("SpaceToDepth")
def _space_to_depth(ctx: NodeContext) -> Outputs:
    mode = ctx.check_attr("mode", ("DCR", "CRD"), "DCR")
    return [ctx.make("SpaceToDepth", ctx.input(0), block_size=int(ctx.attr("blocksize")), mode=mode).output]


# ----------------------------------------------------------------------------------------------------------
# Convolution, pooling, normalization
# ----------------------------------------------------------------------------------------------------------

_AUTO_PAD = {"NOTSET": "explicit", "SAME_UPPER": "same_upper", "SAME_LOWER": "same_lower", "VALID": "valid"}


def _auto_pad(ctx: NodeContext) -> str:
    value = ctx.attr("auto_pad", "NOTSET")
    if value not in _AUTO_PAD:
        raise ctx.bad_attr("auto_pad", value, f"is not one of {', '.join(_AUTO_PAD)}")
    return _AUTO_PAD[value]


def _channel_bias(ctx: NodeContext, y: Output, bias: Output) -> Output:
    """``y + bias`` with a per-channel ``[C]`` bias reshaped to ``[1, C, 1, ...]``."""
    rank = _rank(ctx, y, "output")
    target = ctx.i64([1, -1] + [1] * (rank - 2))
    b = ctx.make("Reshape", bias, target, special_zero=False)
    return ctx.make("Add", y, b).output


def _check_kernel(ctx: NodeContext, w: Output) -> None:
    kernel = ctx.attr_ints("kernel_shape")
    if kernel is not None and w.shape.is_static and list(w.shape.dims[2:]) != kernel:  # type: ignore[index]
        raise ctx.bad_attr("kernel_shape", kernel, f"does not match the weights' shape {w.shape}")


@_register("Conv")
def _conv(ctx: NodeContext) -> Outputs:
    x, w = ctx.input(0), ctx.input(1)
    _check_kernel(ctx, w)
    y = ctx.make("Convolution", x, w, strides=ctx.attr_ints("strides"), dilations=ctx.attr_ints("dilations"),
                 pads=ctx.attr_ints("pads"), auto_pad=_auto_pad(ctx), group=int(ctx.attr("group", 1))).output
    bias = ctx.opt_input(2)
    return [y if bias is None else _channel_bias(ctx, y, bias)]


@_register("ConvTranspose")
def _conv_transpose(ctx: NodeContext) -> Outputs:
    x, w = ctx.input(0), ctx.input(1)
    _check_kernel(ctx, w)
    y = ctx.make("ConvolutionBackpropData", x, w, strides=ctx.attr_ints("strides"),
                 dilations=ctx.attr_ints("dilations"), pads=ctx.attr_ints("pads"), auto_pad=_auto_pad(ctx),
                 group=int(ctx.attr("group", 1)), output_padding=ctx.attr_ints("output_padding"),
                 output_shape=ctx.attr_ints("output_shape")).output
    bias = ctx.opt_input(2)
    return [y if bias is None else _channel_bias(ctx, y, bias)]


def _pool(op: str) -> Converter:
    def convert(ctx: NodeContext) -> Outputs:
        kernel = ctx.attr_ints("kernel_shape")
        if not kernel:
            raise ctx.unsupported("attribute 'kernel_shape' is required")
        extra: dict[str, object] = {}
        if op == "AvgPool":
            extra["count_include_pad"] = bool(ctx.attr("count_include_pad", 0))
        else:
            storage_order = int(ctx.attr("storage_order", 0))
            if storage_order not in (0, 1):
                raise ctx.bad_attr("storage_order", storage_order, "must be 0 (row major) or 1 (column major)")
            extra["storage_order"] = storage_order
            extra["with_indices"] = len(ctx.proto.output) > 1 and bool(ctx.proto.output[1])
        node = ctx.make(op, ctx.input(0), kernel=kernel, strides=ctx.attr_ints("strides"),
                        dilations=ctx.attr_ints("dilations"), pads=ctx.attr_ints("pads"), auto_pad=_auto_pad(ctx),
                        ceil_mode=bool(ctx.attr("ceil_mode", 0)), **extra)
        return list(node.outputs)

    return convert


CONVERTERS["MaxPool"] = _pool("MaxPool")
CONVERTERS["AveragePool"] = _pool("AvgPool")


def _global_pool(op: str) -> Converter:
    def convert(ctx: NodeContext) -> Outputs:
        x = ctx.input(0)
        rank = _rank(ctx, x)
        return [ctx.make(op, x, ctx.i64(list(range(2, rank))), keep_dims=True).output]

    return convert


CONVERTERS["GlobalAveragePool"] = _global_pool("ReduceMean")
CONVERTERS["GlobalMaxPool"] = _global_pool("ReduceMax")


@_register("LRN")
def _lrn(ctx: NodeContext) -> Outputs:
    size = ctx.attr("size")
    if size is None:
        raise ctx.unsupported("attribute 'size' is required")
    return [ctx.make("LRN", ctx.input(0), alpha=ctx.attr("alpha", 1e-4), beta=ctx.attr("beta", 0.75),
                     bias=ctx.attr("bias", 1.0), size=int(size)).output]


def _per_channel(ctx: NodeContext, v: Output, rank: int) -> Output:
    """A ``[C]`` vector reshaped to ``[C, 1, ...]`` so that it broadcasts over ``[N, C, *spatial]``."""
    value = ctx.value(v)
    if value is not None:
        return ctx.const(value.reshape(-1, *([1] * (rank - 2))), v)
    return ctx.make("Reshape", v, ctx.i64([-1] + [1] * (rank - 2)), special_zero=False).output


@_register("BatchNormalization")
def _batch_norm(ctx: NodeContext) -> Outputs:
    if ctx.attr("training_mode", 0):
        raise ctx.bad_attr("training_mode", 1, "(training) is not supported; inference only")
    if ctx.opset < 7 and not ctx.attr("is_test", 0):
        raise ctx.bad_attr("is_test", 0, "(training) is not supported")
    if ctx.opset < 9 and not ctx.attr("spatial", 1):
        raise ctx.bad_attr("spatial", 0, "(per-element statistics) is not supported")
    if sum(1 for o in ctx.proto.output if o) > 1:
        raise ctx.unsupported("the running mean/variance outputs (training) are not supported")
    x, scale, bias, mean, var = (ctx.input(i) for i in range(5))
    eps = float(ctx.attr("epsilon", 1e-5))
    rank = _rank(ctx, x)
    values = [ctx.value(v) for v in (scale, bias, mean, var)]
    if all(v is not None for v in values):
        # Fold to y = x * a + b with a = scale / sqrt(var + eps), b = bias - mean * a (in float64).
        s, b, m, v = (np.asarray(t, dtype=np.float64) for t in values)  # type: ignore[arg-type]
        a = s / np.sqrt(v + eps)
        shift = b - m * a
        shape = (-1, *([1] * (rank - 2)))
        y = ctx.make("Multiply", x, ctx.const(a.reshape(shape), x))
        return [ctx.make("Add", y, ctx.const(shift.reshape(shape), x)).output]
    s, b, m, v = (_per_channel(ctx, t, rank) for t in (scale, bias, mean, var))
    denom = ctx.make("Sqrt", ctx.make("Add", v, _scalar(ctx, eps, v)))
    a_out = ctx.make("Divide", s, denom)
    centered = ctx.make("Subtract", x, m)
    return [ctx.make("Add", ctx.make("Multiply", centered, a_out), b).output]


def _normalize_over(ctx: NodeContext, x: Output, axes: list[int], eps: float) -> Output:
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` with the op set's reductions."""
    ax = ctx.i64(axes)
    mean = ctx.make("ReduceMean", x, ax, keep_dims=True)
    d = ctx.make("Subtract", x, mean)
    var = ctx.make("ReduceMean", ctx.make("Multiply", d, d), ax, keep_dims=True)
    std = ctx.make("Sqrt", ctx.make("Add", var, _scalar(ctx, eps, x)))
    return ctx.make("Divide", d, std).output


@_register("InstanceNormalization")
def _instance_norm(ctx: NodeContext) -> Outputs:
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    rank = _rank(ctx, x)
    y = _normalize_over(ctx, x, list(range(2, rank)), float(ctx.attr("epsilon", 1e-5)))
    y = ctx.make("Multiply", y, _per_channel(ctx, scale, rank))
    return [ctx.make("Add", y, _per_channel(ctx, bias, rank)).output]


@_register("MeanVarianceNormalization")
def _mvn(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    axes = ctx.attr_ints("axes", [0, 2, 3])
    return [_normalize_over(ctx, x, axes, 1e-9)]  # type: ignore[arg-type]


@_register("LayerNormalization")
def _layer_norm(ctx: NodeContext) -> Outputs:
    stash = int(ctx.attr("stash_type", 1))
    if stash != 1:
        raise ctx.bad_attr("stash_type", stash, "is not supported (only 1: compute in float32)")
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.opt_input(2)
    axis = int(ctx.attr("axis", -1))
    eps = float(ctx.attr("epsilon", 1e-5))
    if sum(1 for o in ctx.proto.output if o) == 1:
        return [ctx.make("LayerNormalization", x, scale, bias, axis=axis, epsilon=eps).output]
    # Mean and InvStdDev requested too: decompose, in float32 as stash_type=1 asks.
    rank = _rank(ctx, x)
    axes = ctx.i64(list(range(axis + rank if axis < 0 else axis, rank)))
    xf = x if x.element_type is ElementType.f32 else ctx.make("Convert", x, destination_type=ElementType.f32).output
    mean = ctx.make("ReduceMean", xf, axes, keep_dims=True).output
    d = ctx.make("Subtract", xf, mean)
    var = ctx.make("ReduceMean", ctx.make("Multiply", d, d), axes, keep_dims=True)
    inv = ctx.make("Divide", _scalar(ctx, 1, xf), ctx.make("Sqrt", ctx.make("Add", var, _scalar(ctx, eps, xf))))
    y = ctx.make("Multiply", d, inv).output
    if y.element_type is not x.element_type:
        y = ctx.make("Convert", y, destination_type=x.element_type).output
    y = ctx.make("Multiply", y, scale).output
    if bias is not None:
        y = ctx.make("Add", y, bias).output
    return [y, mean, inv.output]


@_register("GroupNormalization")
def _group_norm(ctx: NodeContext) -> Outputs:
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    groups = int(ctx.attr("num_groups"))
    stash = int(ctx.attr("stash_type", 1))
    if stash != 1:
        raise ctx.bad_attr("stash_type", stash, "is not supported (only 1: compute in float32)")
    if ctx.opset < 21:
        # Opset 18 has one scale/bias per group; repeat them over each group's channels.
        if not x.shape.rank_is_static or x.shape.dims[1] is None:  # type: ignore[index]
            raise ctx.unsupported("opset-18 GroupNormalization needs a static channel count")
        reps = ctx.i64([x.shape.dims[1] // groups])  # type: ignore[index,operator]
        scale = _repeat_groups(ctx, scale, reps, groups)
        bias = _repeat_groups(ctx, bias, reps, groups)
    return [ctx.make("GroupNormalization", x, scale, bias, num_groups=groups,
                     epsilon=float(ctx.attr("epsilon", 1e-5))).output]


def _repeat_groups(ctx: NodeContext, v: Output, reps: Output, groups: int) -> Output:
    col = ctx.make("Reshape", v, ctx.i64([groups, 1]), special_zero=False)
    tiled = ctx.make("Tile", col, ctx.make("Concat", ctx.i64([1]), reps, axis=0))
    return ctx.make("Reshape", tiled, ctx.i64([-1]), special_zero=False).output


def _resize_common(ctx: NodeContext, x: Output, target: Output, calc: str, roi: Output | None,
                   legacy: bool) -> Output:
    mode = ctx.check_attr("mode", ("nearest", "linear", "cubic", "bilinear", "trilinear"), "nearest")
    mode = "linear" if mode in ("bilinear", "trilinear") else mode  # Upsample-7/9 spellings
    if legacy:
        # Upsample and Resize-10 sample at x_out / scale and take the floor for nearest.
        coord, nearest = "asymmetric", "floor"
    else:
        coord = ctx.check_attr("coordinate_transformation_mode", ("half_pixel", "half_pixel_symmetric",
                               "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"),
                               "half_pixel")
        nearest = ctx.check_attr("nearest_mode", ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
                                 "round_prefer_floor")
    axes = ctx.attr_ints("axes")
    args = [x, target] + ([roi] if roi is not None and coord == "tf_crop_and_resize" else [])
    return ctx.make("Interpolate", *args, mode=mode, shape_calculation_mode=calc, axes=axes,
                    coordinate_transformation_mode=coord, nearest_mode=nearest,
                    cubic_coeff_a=float(ctx.attr("cubic_coeff_a", -0.75)),
                    exclude_outside=bool(ctx.attr("exclude_outside", 0)),
                    extrapolation_value=float(ctx.attr("extrapolation_value", 0.0)),
                    antialias=bool(ctx.attr("antialias", 0)),
                    keep_aspect_ratio_policy=ctx.check_attr("keep_aspect_ratio_policy",
                                                            ("stretch", "not_larger", "not_smaller"),
                                                            "stretch")).output


@_register("Resize")
def _resize(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    if ctx.opset < 11:
        return [_resize_common(ctx, x, ctx.input(1), "scales", None, legacy=True)]
    roi, scales, sizes = ctx.opt_input(1), ctx.opt_input(2), ctx.opt_input(3)
    # An empty scales tensor (opset 11-12 style "not given") defers to sizes.
    if scales is not None and scales.shape.is_static and scales.shape.size == 0:
        scales = None
    if sizes is not None:
        return [_resize_common(ctx, x, sizes, "sizes", roi, legacy=False)]
    if scales is None:
        raise ctx.unsupported("one of 'scales' and 'sizes' is required")
    return [_resize_common(ctx, x, scales, "scales", roi, legacy=False)]


@_register("Upsample")
def _upsample(ctx: NodeContext) -> Outputs:
    x = ctx.input(0)
    scales = ctx.const(np.asarray(ctx.attr("scales"), np.float32)) if ctx.opset < 9 else ctx.input(1)
    return [_resize_common(ctx, x, scales, "scales", None, legacy=True)]


# ----------------------------------------------------------------------------------------------------------
# Integer quantization (QuantizeLinear, DequantizeLinear, MatMulInteger, ConvInteger, QLinear*): onnx_quant.py
# ----------------------------------------------------------------------------------------------------------

from snippets_core.frontends.onnx_quant import QUANT_CONVERTERS  # noqa: E402  (its own module, merged here)

CONVERTERS.update(QUANT_CONVERTERS)
