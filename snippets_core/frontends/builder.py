"""A Python builder for models, in the style of ``openvino.runtime.opset``.

::

    from snippets_core.frontends import builder as sb

    x = sb.parameter([1, 3, 8, 8], "f32", name="x")
    y = sb.relu(sb.add(x, 1.0))
    m = sb.model([y], name="m")

Every function returns the new node's :class:`Output` (a list of them for multi-output ops). Where a
tensor is expected, a Python scalar, list or numpy array becomes a Constant: of the other operand's
element type for data inputs, and i64 for shape-like inputs (axes, orders, target shapes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from snippets_core.errors import SnippetsError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import OPS, Node, Output, as_output
from snippets_core.ir.ops import binary as _b
from snippets_core.ir.ops import logical as _l
from snippets_core.ir.ops import unary as _u
from snippets_core.ir.ops.convert import Convert
from snippets_core.ir.ops.fake_quantize import FakeQuantize
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.matmul import MatMul
from snippets_core.ir.ops.normalization import GroupNormalization, LayerNormalization
from snippets_core.ir.ops.reduce import ReduceL1, ReduceL2, ReduceMax, ReduceMean, ReduceMin, ReduceProd, ReduceSum
from snippets_core.ir.ops.select import Select
from snippets_core.ir.ops.shape_ops import (
    Broadcast,
    Concat,
    Gather,
    Reshape,
    Split,
    Squeeze,
    Transpose,
    Unsqueeze,
    VariadicSplit,
)
from snippets_core.ir.ops.softmax import LogSoftmax, Softmax
from snippets_core.ir.shape import Dim, Shape

TensorLike = Output | Node | np.ndarray | float | int | bool | Sequence[Any]


def _is_tensor(v: object) -> bool:
    return isinstance(v, (Output, Node))


def _tensor(v: TensorLike, like: ElementType | None = None) -> Output:
    """An Output for ``v``: itself, or a Constant (of element type ``like`` when given)."""
    if _is_tensor(v):
        return as_output(v)  # type: ignore[arg-type]
    if like is not None and like not in (ElementType.dynamic, ElementType.string):
        return Constant(np.asarray(v), like).output
    return Constant(v).output


def _pair(a: TensorLike, b: TensorLike) -> tuple[Output, Output]:
    """Two data operands; a non-tensor one takes the element type of the other."""
    if _is_tensor(a):
        oa = as_output(a)  # type: ignore[arg-type]
        return oa, _tensor(b, oa.element_type)
    if _is_tensor(b):
        ob = as_output(b)  # type: ignore[arg-type]
        return _tensor(a, ob.element_type), ob
    oa = _tensor(a)
    return oa, _tensor(b, oa.element_type)


def _ints(v: TensorLike) -> Output:
    """A shape-like input (axes, order, target shape): Python values become an i64 Constant."""
    if _is_tensor(v):
        return as_output(v)  # type: ignore[arg-type]
    return Constant(np.asarray(v, dtype=np.int64), ElementType.i64).output


def _outputs(node: Node) -> Output | list[Output]:
    return node.outputs[0] if len(node.outputs) == 1 else list(node.outputs)


# --- graph ends -------------------------------------------------------------------------------------
def parameter(shape: Shape | Sequence[Dim] | None, element_type: ElementType | str = "f32", *,
              name: str | None = None) -> Output:
    """A model input; ``None`` dims are dynamic, ``shape=None`` is a dynamic rank."""
    return Parameter(element_type, shape, name=name).output


def constant(value: Any, element_type: ElementType | str | None = None, *, name: str | None = None) -> Output:
    """A literal tensor (Python floats become f32 unless ``element_type`` says otherwise)."""
    return Constant(value, element_type, name=name).output


def result(x: TensorLike, *, name: str | None = None) -> Output:
    return Result(_tensor(x), name=name).output


def model(results: Sequence[Output | Node], parameters: Sequence[Output | Node] | None = None, *,
          name: str = "model") -> Model:
    """A Model over ``results``; ``parameters`` (default: those reachable, in topological order) fix
    the input order. Parameters may be given as their outputs."""
    params = None if parameters is None else [as_output(p).node for p in parameters]
    return Model(list(results), params, name=name)


def make(type_name: str, *inputs: TensorLike, **attrs: Any) -> Output | list[Output]:
    """Any registered op by type name, e.g. ``make("MaxPool", x, kernel=[2, 2], ...)``."""
    try:
        cls = OPS[type_name]
    except KeyError:
        raise SnippetsError(f"unknown op type {type_name!r}") from None
    return _outputs(cls(*[_tensor(i) for i in inputs], **attrs))


# --- element-wise -----------------------------------------------------------------------------------
def _unary(cls: type[Node]) -> Callable[..., Output]:
    def build(x: TensorLike, *, name: str | None = None) -> Output:
        return cls(_tensor(x), name=name).output

    build.__name__ = build.__qualname__ = cls.type_name.lower()
    build.__doc__ = f"{cls.type_name}: {cls.__doc__}"
    return build


def _binary(cls: type[Node]) -> Callable[..., Output]:
    def build(a: TensorLike, b: TensorLike, *, auto_broadcast: str = "numpy", name: str | None = None) -> Output:
        oa, ob = _pair(a, b)
        return cls(oa, ob, auto_broadcast=auto_broadcast, name=name).output

    build.__name__ = build.__qualname__ = cls.type_name.lower()
    build.__doc__ = f"{cls.type_name}: {cls.__doc__}"
    return build


abs = _unary(_u.Abs)  # opset names (abs, round) shadow builtins, as in openvino.runtime.opset
acos = _unary(_u.Acos)
asin = _unary(_u.Asin)
atan = _unary(_u.Atan)
ceiling = _unary(_u.Ceiling)
cos = _unary(_u.Cos)
cosh = _unary(_u.Cosh)
erf = _unary(_u.Erf)
exp = _unary(_u.Exp)
floor = _unary(_u.Floor)
hsigmoid = _unary(_u.HSigmoid)
hswish = _unary(_u.HSwish)
log = _unary(_u.Log)
logical_not = _unary(_u.LogicalNot)
mish = _unary(_u.Mish)
negative = _unary(_u.Negative)
relu = _unary(_u.Relu)
sigmoid = _unary(_u.Sigmoid)
sign = _unary(_u.Sign)
sin = _unary(_u.Sin)
sinh = _unary(_u.Sinh)
softplus = _unary(_u.SoftPlus)
softsign = _unary(_u.SoftSign)
sqrt = _unary(_u.Sqrt)
tan = _unary(_u.Tan)
tanh = _unary(_u.Tanh)


def clamp(x: TensorLike, min_value: float, max_value: float, *, name: str | None = None) -> Output:
    return _u.Clamp(_tensor(x), min=min_value, max=max_value, name=name).output


def elu(x: TensorLike, alpha: float = 1.0, *, name: str | None = None) -> Output:
    return _u.Elu(_tensor(x), alpha=alpha, name=name).output


def selu(x: TensorLike, alpha: float = 1.67326319217681884765625, lambda_: float = 1.05070102214813232421875, *,
         name: str | None = None) -> Output:
    return _u.Selu(_tensor(x), alpha=alpha, lambda_=lambda_, name=name).output


def hard_sigmoid(x: TensorLike, alpha: float = 0.2, beta: float = 0.5, *, name: str | None = None) -> Output:
    return _u.HardSigmoid(_tensor(x), alpha=alpha, beta=beta, name=name).output


def gelu(x: TensorLike, approximation_mode: str = "erf", *, name: str | None = None) -> Output:
    return _u.Gelu(_tensor(x), approximation_mode=approximation_mode, name=name).output


def round(x: TensorLike, mode: str = "half_to_even", *, name: str | None = None) -> Output:
    return _u.Round(_tensor(x), mode=mode, name=name).output


def swish(x: TensorLike, beta: TensorLike | None = None, *, name: str | None = None) -> Output:
    ox = _tensor(x)
    return _u.Swish(ox, None if beta is None else _tensor(beta, ox.element_type), name=name).output


add = _binary(_b.Add)
subtract = _binary(_b.Subtract)
multiply = _binary(_b.Multiply)
divide = _binary(_b.Divide)
maximum = _binary(_b.Maximum)
minimum = _binary(_b.Minimum)
power = _binary(_b.Power)
squared_difference = _binary(_b.SquaredDifference)
floor_mod = _binary(_b.FloorMod)
mod = _binary(_b.Mod)
prelu = _binary(_b.PRelu)
equal = _binary(_b.Equal)
not_equal = _binary(_b.NotEqual)
greater = _binary(_b.Greater)
greater_equal = _binary(_b.GreaterEqual)
less = _binary(_b.Less)
less_equal = _binary(_b.LessEqual)
logical_and = _binary(_l.LogicalAnd)
logical_or = _binary(_l.LogicalOr)
logical_xor = _binary(_l.LogicalXor)
bitwise_xor = _binary(_l.BitwiseXor)


def select(cond: TensorLike, then: TensorLike, else_: TensorLike, *, auto_broadcast: str = "numpy",
           name: str | None = None) -> Output:
    a, b = _pair(then, else_)
    return Select(_tensor(cond, ElementType.boolean), a, b, auto_broadcast=auto_broadcast, name=name).output


def convert(x: TensorLike, destination_type: ElementType | str, *, name: str | None = None) -> Output:
    return Convert(_tensor(x), destination_type=destination_type, name=name).output


def fake_quantize(x: TensorLike, in_low: TensorLike, in_high: TensorLike, out_low: TensorLike,
                  out_high: TensorLike, levels: int, *, auto_broadcast: str = "numpy",
                  name: str | None = None) -> Output:
    ox = _tensor(x)
    ranges = [_tensor(v, ox.element_type) for v in (in_low, in_high, out_low, out_high)]
    return FakeQuantize(ox, *ranges, levels=levels, auto_broadcast=auto_broadcast, name=name).output


# --- softmax, reductions, matmul ----------------------------------------------------------------------
def softmax(x: TensorLike, axis: int, *, name: str | None = None) -> Output:
    return Softmax(_tensor(x), axis=axis, name=name).output


def log_softmax(x: TensorLike, axis: int, *, name: str | None = None) -> Output:
    return LogSoftmax(_tensor(x), axis=axis, name=name).output


def _reduce(cls: type[Node]) -> Callable[..., Output]:
    def build(x: TensorLike, axes: TensorLike, keep_dims: bool = False, *, name: str | None = None) -> Output:
        return cls(_tensor(x), _ints(axes), keep_dims=keep_dims, name=name).output

    build.__name__ = build.__qualname__ = "reduce_" + cls.type_name[len("Reduce"):].lower()
    build.__doc__ = f"{cls.type_name}: {cls.__doc__}"
    return build


reduce_max = _reduce(ReduceMax)
reduce_min = _reduce(ReduceMin)
reduce_sum = _reduce(ReduceSum)
reduce_mean = _reduce(ReduceMean)
reduce_prod = _reduce(ReduceProd)
reduce_l1 = _reduce(ReduceL1)
reduce_l2 = _reduce(ReduceL2)


def matmul(a: TensorLike, b: TensorLike, transpose_a: bool = False, transpose_b: bool = False, *,
           name: str | None = None) -> Output:
    oa, ob = _pair(a, b)
    return MatMul(oa, ob, transpose_a=transpose_a, transpose_b=transpose_b, name=name).output


# --- shape ops ----------------------------------------------------------------------------------------
def transpose(x: TensorLike, order: TensorLike, *, name: str | None = None) -> Output:
    return Transpose(_tensor(x), _ints(order), name=name).output


def reshape(x: TensorLike, shape: TensorLike, special_zero: bool = False, *, name: str | None = None) -> Output:
    return Reshape(_tensor(x), _ints(shape), special_zero=special_zero, name=name).output


def squeeze(x: TensorLike, axes: TensorLike | None = None, *, name: str | None = None) -> Output:
    return Squeeze(_tensor(x), None if axes is None else _ints(axes), name=name).output


def unsqueeze(x: TensorLike, axes: TensorLike, *, name: str | None = None) -> Output:
    return Unsqueeze(_tensor(x), _ints(axes), name=name).output


def broadcast(x: TensorLike, target_shape: TensorLike, mode: str = "numpy", *, name: str | None = None) -> Output:
    return Broadcast(_tensor(x), _ints(target_shape), mode=mode, name=name).output


def concat(inputs: Sequence[TensorLike], axis: int, *, name: str | None = None) -> Output:
    tensors = [as_output(i) for i in inputs if _is_tensor(i)]  # type: ignore[arg-type]
    like = tensors[0].element_type if tensors else None
    return Concat(*[_tensor(i, like) for i in inputs], axis=axis, name=name).output


def split(x: TensorLike, axis: TensorLike, num_splits: int, *, name: str | None = None) -> list[Output]:
    return list(Split(_tensor(x), _ints(axis), num_splits=num_splits, name=name).outputs)


def variadic_split(x: TensorLike, axis: TensorLike, split_lengths: TensorLike, *,
                   name: str | None = None) -> list[Output]:
    return list(VariadicSplit(_tensor(x), _ints(axis), _ints(split_lengths), name=name).outputs)


def gather(x: TensorLike, indices: TensorLike, axis: TensorLike, batch_dims: int = 0, *,
           name: str | None = None) -> Output:
    return Gather(_tensor(x), _ints(indices), _ints(axis), batch_dims=batch_dims, name=name).output


# --- normalization ------------------------------------------------------------------------------------
def layer_normalization(x: TensorLike, scale: TensorLike, bias: TensorLike | None = None, axis: int = -1,
                        epsilon: float = 1e-5, *, name: str | None = None) -> Output:
    ox = _tensor(x)
    ob = None if bias is None else _tensor(bias, ox.element_type)
    return LayerNormalization(ox, _tensor(scale, ox.element_type), ob, axis=axis, epsilon=epsilon, name=name).output


def group_normalization(x: TensorLike, scale: TensorLike, bias: TensorLike, num_groups: int,
                        epsilon: float = 1e-5, *, name: str | None = None) -> Output:
    ox = _tensor(x)
    return GroupNormalization(ox, _tensor(scale, ox.element_type), _tensor(bias, ox.element_type),
                              num_groups=num_groups, epsilon=epsilon, name=name).output
