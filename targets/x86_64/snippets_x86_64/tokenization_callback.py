"""The x86-64 CPU tokenization callback: which nodes this target keeps out of Subgraphs, and why.

The rules of the CPU plugin's eltwise callback (non-IgnoreCallback mode): the reason string is what a user
sees when they ask why an op stayed outside the fused kernels. Rules are a table, checked in order.

When the MHA tokenizer asks (``tokenizer == "mha"``, about MatMul0 of a matched MHA), the CPU plugin's MHA
rules apply instead (reference inventory §2.4): the tensors must suit the kernels, both MatMuls must have a
Brgemm kernel for their precision on this CPU, MatMul0 must not transpose A, and an MHA whose parallel work
(the batch dims) cannot keep every thread busy is left to the reference kernels unless SplitDimensionM can
split its M dim.

A Transpose never joins an eltwise kernel (the kernels do not transpose in a loop nest); the transpose tokenizer
(``tokenizer == "transpose"``) then wraps each one left outside into a Subgraph of its own, a JIT transpose kernel,
unless its rank or element type does not suit that kernel (:func:`transpose_callback`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from math import prod
from typing import TYPE_CHECKING

from snippets_core.ir.element_type import ElementType

if TYPE_CHECKING:
    from snippets_core.ir.node import Node

#: element types the kernels take and produce (boolean: the 1-byte masks of comparisons, Select's condition)
SUPPORTED_ELEMENT_TYPES = frozenset(
    {ElementType.f32, ElementType.bf16, ElementType.f16, ElementType.i8, ElementType.u8, ElementType.boolean}
)
#: ops whose input 1 is an index tensor (a Transpose order, a Broadcast target, reduction axes): a Constant that
#: becomes an attribute of the body, so i32 and i64 (ONNX's type for them) are fine there
INDEX_INPUT_OPS = frozenset({
    "Transpose", "Broadcast", "ReduceMax", "ReduceSum", "ReduceMean", "ReduceMin", "ReduceL2",
})
INDEX_ELEMENT_TYPES = frozenset({ElementType.i32, ElementType.i64})
#: ops tokenized only as part of a complex pattern (MHA), never as plain eltwise chains. The CPU plugin also
#: keeps Softmax, Transpose and the reductions out, because it runs them on its own native kernels; here the
#: alternative is numpy, so they are fused wherever the tokenizer accepts them. A standalone Broadcast stays a
#: numpy view (materializing it in a kernel would only add a write).
COMPLEX_PATTERN_ONLY = ("MatMul", "Broadcast")
#: ops the eltwise kernels do not take, because they run as a kernel of their own (another tokenizer wraps them)
OWN_KERNEL: dict[str, str] = {
    # TransposeDecomposition's LoadReorder needs pointer increments that follow the port layout, which InitLoops
    # does not compute; a standalone Transpose runs as the JIT transpose kernel instead (snippets_x86_64.transpose;
    # MHA's Transposes are fused into its Brgemms by the MHA tokenizer)
    "Transpose": "Transpose runs as its own JIT transpose kernel (TokenizeTransposeSnippets), not in an eltwise one",
}
#: element types the JIT transpose moves (4-byte elements; the kernel never looks at the values)
TRANSPOSE_ELEMENT_TYPES = frozenset({ElementType.f32, ElementType.i32, ElementType.bf16, ElementType.f16,
                                     ElementType.i16, ElementType.u16})
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
        if kind == "input" and index == 1 and node.type_name in INDEX_INPUT_OPS:
            allowed = allowed | INDEX_ELEMENT_TYPES
        if element_type not in allowed:
            names = ", ".join(sorted(t.value for t in allowed))
            return f"{kind} {index} is {element_type.value}, the kernels take {names}"
    return None


def _mish(node: Node) -> str | None:
    return "Mish is left to the reference kernels on x86_64_avx512" if node.type_name == "Mish" else None


def _swish_beta(node: Node) -> str | None:
    if node.type_name == "Swish" and len(node.inputs) > 1 and node.inputs[1].source.node.type_name != "Constant":
        return "Swish with a non-Constant beta"
    return None


def _own_kernel(node: Node) -> str | None:
    return OWN_KERNEL.get(node.type_name)


def transpose_callback(node: Node) -> str | None:
    """Why a standalone Transpose stays outside a JIT transpose Subgraph (it then runs as a numpy view), or None."""
    x, y = node.inputs[0], node.outputs[0]
    if not x.shape.rank_is_static:
        return "Transpose of a dynamic rank"
    if x.shape.rank > MAX_RANK:
        return f"Transpose of rank {x.shape.rank}, the JIT transpose takes at most rank {MAX_RANK}"
    if x.element_type not in TRANSPOSE_ELEMENT_TYPES or y.element_type != x.element_type:
        return f"Transpose of {x.element_type.value}, the JIT transpose moves 4-byte f32/i32 and 2-byte elements"
    return None


def _complex_only(node: Node) -> str | None:
    if node.type_name in COMPLEX_PATTERN_ONLY:
        return f"{node.type_name} is tokenized only inside complex patterns (MHA), not as an eltwise op"
    return None


RULES: tuple[Callable[[Node], str | None], ...] = (
    _all_inputs_constant,
    _unsupported_tensors,
    _mish,
    _swish_beta,
    _complex_only,
    _own_kernel,
)


# --- the MHA callback ---------------------------------------------------------------------------------------------

#: MatMul input element type -> CPU features its Brgemm kernel needs on this target (absent: no kernel)
BRGEMM_PRECISIONS: dict[ElementType, frozenset[str]] = {
    ElementType.f32: frozenset({"avx512f"}),
    ElementType.bf16: frozenset({"avx512_bf16"}),
}


def _matmul1_of(matmul0: Node) -> Node | None:
    """The second MatMul of the MHA that starts at ``matmul0`` (following single consumers)."""
    node = matmul0
    for _ in range(64):
        targets = node.outputs[0].targets
        if len(targets) != 1:
            return None
        node = targets[0].node
        if node.type_name == "MatMul":
            return node
    return None


def _cpu_features() -> frozenset[str]:
    from snippets_x86_64.cpu import cpu_features

    return cpu_features()


def default_concurrency() -> int:
    """Threads one inference may use: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def mha_callback(matmul0: Node, concurrency: int | None = None, features: frozenset[str] | None = None) -> str | None:
    """The reason to leave the MHA starting at ``matmul0`` to the reference kernels, or None to fuse it."""
    # dynamic dims are fine: the runtime has one kernel for every shape, or one per shape (runtime.py says which)
    for rule in (_unsupported_tensors,):
        reason = rule(matmul0)
        if reason is not None:
            return reason
    if getattr(matmul0, "transpose_a", False):
        return "MatMul0 transposes A; the Brgemm kernel reads A row by row"
    features = _cpu_features() if features is None else features
    matmul1 = _matmul1_of(matmul0)
    for mm in (matmul0, matmul1):
        if mm is None:
            continue
        element_type = mm.inputs[0].element_type
        needed = BRGEMM_PRECISIONS.get(element_type)
        if needed is None:
            return f"MatMul '{mm.name}' multiplies {element_type.value}: x86_64_avx512 has no Brgemm kernel for it"
        if not needed <= features:
            return (
                f"MatMul '{mm.name}' multiplies {element_type.value}, which needs "
                f"{', '.join(sorted(needed - features))} on this CPU"
            )
    concurrency = default_concurrency() if concurrency is None else concurrency
    shape = matmul0.outputs[0].shape
    if shape.is_static and shape.rank >= 2:
        from snippets_core.passes.split_dimension_m import can_be_optimized

        work = prod(shape.to_tuple()[:-2])
        if work < concurrency and not can_be_optimized(matmul0, concurrency):
            return (
                f"its parallel work ({work}) is below the {concurrency} threads and SplitDimensionM cannot "
                f"split M = {shape.to_tuple()[-2]}; the reference kernels run it faster"
            )
    return None


# --- the FullyConnected callback -------------------------------------------------------------------------------


def fc_callback(matmul: Node, features: frozenset[str] | None = None) -> str | None:
    """The reason to leave the FullyConnected (MatMul with a constant weight) ``matmul`` to the reference
    kernels, or None to fuse it. Dynamic dims are fine (only M can be dynamic: the runtime compiles a kernel per
    input shape); the weight is repacked at compile time into panels: f32 x f32, or bf16 x bf16 (k-pair panels
    for ``vdpbf16ps``, :mod:`snippets_x86_64.bf16_pack`) when the CPU has AVX512_BF16."""
    reason = _unsupported_tensors(matmul)
    if reason is not None:
        return reason
    types = {port.element_type for port in matmul.inputs}
    if len(types) != 1 or next(iter(types)) not in BRGEMM_PRECISIONS:
        names = " x ".join(port.element_type.value for port in matmul.inputs)
        return f"it multiplies {names}: x86_64_avx512 has FullyConnected kernels for f32 x f32 and bf16 x bf16"
    element_type = next(iter(types))
    features = _cpu_features() if features is None else features
    if not BRGEMM_PRECISIONS[element_type] <= features:
        needed = ", ".join(sorted(BRGEMM_PRECISIONS[element_type] - features))
        return f"the {element_type.value} FullyConnected Brgemm needs {needed} on this CPU"
    return None


def tokenization_callback(node: Node, tokenizer: str = "eltwise") -> str | None:
    """The reason to keep ``node`` out of Subgraphs on x86_64_avx512, or None to let the Tokenizer take it.
    ``tokenizer == "mha"``: ``node`` is MatMul0 of a matched MHA (see :func:`mha_callback`);
    ``tokenizer == "fc"``: ``node`` is the MatMul of a FullyConnected (see :func:`fc_callback`);
    ``tokenizer == "conv"``: a Convolution TokenizeConvSnippets matched, whose kernel the target specializes per
    input shape; ``tokenizer == "transpose"``: a standalone Transpose (see :func:`transpose_callback`)."""
    if tokenizer == "mha":
        return mha_callback(node)
    if tokenizer == "fc":
        return fc_callback(node)
    if tokenizer == "conv":  # a conv primitive has one kernel for every N, H, W (conv_subgraph.DynamicConv)
        return None
    if tokenizer == "transpose":
        return transpose_callback(node)
    for rule in RULES:
        reason = rule(node)
        if reason is not None:
            return reason
    return None
