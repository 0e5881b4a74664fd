"""The x86-64 CPU tokenization callback: which nodes this target keeps out of Subgraphs, and why.

The rules of the CPU plugin's eltwise callback (non-IgnoreCallback mode): the reason string is what a user
sees when they ask why an op stayed outside the fused kernels. Rules are a table, checked in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from snippets_core.ir.element_type import ElementType

if TYPE_CHECKING:
    from snippets_core.ir.node import Node

#: element types the kernels take and produce
SUPPORTED_ELEMENT_TYPES = frozenset(
    {ElementType.f32, ElementType.bf16, ElementType.f16, ElementType.i8, ElementType.u8}
)
#: ops whose inputs may also be i32 (their order / target-shape / axes inputs)
I32_INPUT_OPS = frozenset({"Transpose", "Broadcast", "ReduceMax", "ReduceSum"})
#: ops the CPU plugin tokenizes only as part of a complex pattern (MHA), never as plain eltwise chains
COMPLEX_PATTERN_ONLY = ("Softmax", "MatMul", "Transpose", "Broadcast", "ReduceMax", "ReduceSum")
MAX_RANK = 6


def _all_inputs_constant(node: Node) -> str | None:
    if node.inputs and all(inp.source.node.type_name == "Constant" for inp in node.inputs):
        return "all its inputs are Constants (constant folding computes it once)"
    return None


def _unsupported_tensors(node: Node) -> str | None:
    ports = [("input", i, inp.element_type, inp.shape) for i, inp in enumerate(node.inputs)]
    ports += [("output", i, out.element_type, out.shape) for i, out in enumerate(node.outputs)]
    for kind, index, element_type, shape in ports:
        if shape.is_static and shape.rank > MAX_RANK:
            return f"{kind} {index} has rank {shape.rank}, the kernels take at most rank {MAX_RANK}"
        allowed = SUPPORTED_ELEMENT_TYPES
        if kind == "input" and node.type_name in I32_INPUT_OPS:
            allowed = allowed | {ElementType.i32}
        if element_type not in allowed:
            names = ", ".join(sorted(t.value for t in allowed))
            return f"{kind} {index} is {element_type.value}, the kernels take {names}"
    return None


def _dynamic(node: Node) -> str | None:
    shapes = [inp.shape for inp in node.inputs] + [out.shape for out in node.outputs]
    if not all(shape.is_static for shape in shapes):
        return "it has dynamic shapes; x86_64_avx512 compiles kernels for static shapes"
    return None


def _mish(node: Node) -> str | None:
    return "Mish is left to the reference kernels on x86_64_avx512" if node.type_name == "Mish" else None


def _swish_beta(node: Node) -> str | None:
    if node.type_name == "Swish" and len(node.inputs) > 1 and node.inputs[1].source.node.type_name != "Constant":
        return "Swish with a non-Constant beta"
    return None


def _complex_only(node: Node) -> str | None:
    if node.type_name in COMPLEX_PATTERN_ONLY:
        return f"{node.type_name} is tokenized only inside complex patterns (MHA), not as an eltwise op"
    return None


RULES: tuple[Callable[[Node], str | None], ...] = (
    _all_inputs_constant,
    _unsupported_tensors,
    _dynamic,
    _mish,
    _swish_beta,
    _complex_only,
)


def tokenization_callback(node: Node) -> str | None:
    """The reason to keep ``node`` out of Subgraphs on x86_64_avx512, or None to let the Tokenizer take it."""
    for rule in RULES:
        reason = rule(node)
        if reason is not None:
            return reason
    return None
