"""The SHAVE tokenization callback: which nodes the shave target keeps out of Subgraphs, and why.

The target runs what its SHVX kernels can compute on f32/f16 lanes: the eltwise ops in
:data:`SUPPORTED_OPS`, Softmax on the last axis, and ReduceMax/ReduceSum over the last axis. An op kept out that
:mod:`snippets_shave.sw_layers` knows (Erf, Gelu, LayerNormalization, Select, comparisons, Transpose, Softmax
or a reduction on other axes) runs as its own SW kernel layer. Rules are a
table checked in order; the first reason wins and is what a user sees for an op left outside the kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from snippets_core.ir.element_type import ElementType
from snippets_shave.constants import MAX_ND_DIMS

if TYPE_CHECKING:
    from snippets_core.ir.node import Node

#: op type_name -> the SHVX units it needs (for the reader; the emitters are the contract)
SUPPORTED_OPS: dict[str, str] = {
    # binary eltwise: VAU/CMU
    "Add": "VADD",
    "Subtract": "VSUB",
    "Multiply": "VMUL",
    "Divide": "VDIV",
    "Maximum": "VMAX",
    "Minimum": "VMIN",
    "SquaredDifference": "VSUB, VMUL",
    "PRelu": "VCMPGT, VMUL, VSEL",
    # unary eltwise
    "Abs": "VABS",
    "Negative": "VNEG",
    "Relu": "VMAX",
    "Clamp": "VCLAMP",
    "Sqrt": "VSQRT",
    "Exp": "VMUL, VEXP2",
    "Log": "VLOG2, VMUL",
    "Sigmoid": "VEXP2, VRCP",
    "Tanh": "VEXP2, VRCP",
    "Elu": "VEXP2, VSEL",
    "Swish": "VEXP2, VRCP, VMUL",
    "HSwish": "VCLAMP, VMUL",
    "HSigmoid": "VCLAMP, VMUL",
    "SoftPlus": "VEXP2, VLOG2",
    "PowerStatic": "VMUL, VRSQRT, VRCP",
    "Power": "as PowerStatic (scalar Constant exponent)",
    "Convert": "VCVT",
    "ConvertSaturation": "VCVT",
    "ConvertTruncation": "VCVT",
    # row ops on the innermost axis: SAU horizontal max/sum
    "Softmax": "VMAXX, VEXP2, VSUMX",
    "ReduceMax": "VMAXX",
    "ReduceSum": "VSUMX",
    "SnippetsReduceMax": "VMAXX",
    "SnippetsReduceSum": "VSUMX",
    "HorizonMax": "VMAXX",
    "HorizonSum": "VSUMX",
}
#: lane types of the SHVX kernels
SUPPORTED_ELEMENT_TYPES = frozenset({ElementType.f32, ElementType.f16})
#: ops whose second input is an integer axes tensor
AXES_INPUT_OPS = frozenset({"ReduceMax", "ReduceSum"})
LAST_AXIS_OPS = frozenset({"Softmax", "ReduceMax", "ReduceSum"})


def _unsupported_op(node: Node) -> str | None:
    from snippets_shave.sw_layers import SW_LAYER_OPS

    if node.type_name in SW_LAYER_OPS and node.type_name not in SUPPORTED_OPS:
        return f"{node.type_name} has no SHAVE kernel in a Subgraph; it runs as its own SW kernel layer"
    if node.type_name not in SUPPORTED_OPS:
        return f"{node.type_name} has no SHAVE kernel (the shave target runs f32/f16 eltwise, Softmax and Reduce ops)"
    return None


def _element_types(node: Node) -> str | None:
    ports = [("input", i, inp.element_type) for i, inp in enumerate(node.inputs)]
    ports += [("output", i, out.element_type) for i, out in enumerate(node.outputs)]
    for kind, index, element_type in ports:
        if kind == "input" and index == 1 and node.type_name in AXES_INPUT_OPS:
            continue
        if element_type not in SUPPORTED_ELEMENT_TYPES:
            return f"{kind} {index} is {element_type.value}; SHAVE kernels take f32 and f16"
    return None


def _static_shapes(node: Node) -> str | None:
    shapes = [inp.shape for inp in node.inputs] + [out.shape for out in node.outputs]
    if not all(shape.is_static for shape in shapes):
        return "it has dynamic shapes; a SHAVE blob is compiled for static shapes"
    if any(shape.rank > MAX_ND_DIMS for shape in shapes):
        return f"a tensor has more than {MAX_ND_DIMS} dims (MemRefData limit)"
    return None


def _last_axis(node: Node) -> str | None:
    if node.type_name not in LAST_AXIS_OPS:
        return None
    rank = node.inputs[0].shape.rank
    if node.type_name == "Softmax":
        axis = node.axis if node.axis >= 0 else node.axis + rank  # type: ignore[attr-defined]
        if axis != rank - 1:
            return f"Softmax on axis {node.axis} of a rank-{rank} tensor; SHAVE kernels run it on the last axis"
        return None
    axes_node = node.inputs[1].source.node
    if axes_node.type_name != "Constant":
        return f"{node.type_name} with non-Constant axes"
    axes = sorted({int(a) + rank if int(a) < 0 else int(a) for a in axes_node.value.reshape(-1)})  # type: ignore[attr-defined]
    if axes != [rank - 1]:
        return f"{node.type_name} over axes {axes} of a rank-{rank} tensor; SHAVE kernels reduce the last axis only"
    return None


def _static_power(node: Node) -> str | None:
    """Power runs as PowerStatic (ConvertPowerToPowerStatic), which needs a scalar Constant exponent."""
    if node.type_name != "Power":
        return None
    exponent = node.inputs[1].source.node
    if exponent.type_name != "Constant" or exponent.value.size != 1:  # type: ignore[attr-defined]
        return "Power with a non-scalar or non-Constant exponent (the SHAVE kernels take a static power)"
    return None


RULES: tuple[Callable[[Node], str | None], ...] = (
    _unsupported_op,
    _element_types,
    _static_shapes,
    _last_axis,
    _static_power,
)


def tokenization_callback(node: Node) -> str | None:
    """The reason to keep ``node`` out of Subgraphs on the shave target, or None to let the Tokenizer take it."""
    for rule in RULES:
        reason = rule(node)
        if reason is not None:
            return reason
    return None
