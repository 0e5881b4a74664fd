"""TokenizeSnippets: the eltwise Tokenizer (the reference's ``collapse_subgraph.cpp``).

Walks the model in topological order. A node that snippets can compute (:func:`appropriate_for_subgraph`),
that no plugin marked SkippedByPlugin and that the callback does not veto is put into a Subgraph:
a new one, or the Subgraph(s) that feed it, merged (see :func:`tokenize_node`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.pass_manager import Pass
from snippets_core.ir.shape import normalize_axis
from snippets_core.tokenization.config import TokenizationConfig
from snippets_core.tokenization.enumerate_nodes import EnumerateNodes
from snippets_core.tokenization.marks import is_completed, is_skipped_by_plugin
from snippets_core.tokenization.tokenization_utils import is_supported_fq, tokenize_node

UNARY_ELTWISE = frozenset({
    "Abs", "Clamp", "Floor", "Ceiling", "Elu", "Erf", "Exp", "LogicalNot", "Mish", "Negative", "Relu", "Round",
    "Sigmoid", "Sqrt", "Tanh", "Gelu", "Swish", "HSwish",
})
# Convert is listed with the binary ops in the reference. The reference's v0 Xor is the logical one.
BINARY_ELTWISE = frozenset({
    "Add", "Divide", "Equal", "FloorMod", "Greater", "GreaterEqual", "Less", "LessEqual", "LogicalAnd", "LogicalOr",
    "LogicalXor", "Maximum", "Minimum", "Mod", "Multiply", "NotEqual", "PRelu", "Power", "SquaredDifference",
    "Subtract", "Convert",
})
TERNARY_ELTWISE = frozenset({"Select"})
#: reductions a kernel computes over the last axis: ReduceMax/ReduceSum directly, the others decomposed
#: (GraphReduceDecomposition)
ROW_REDUCTIONS = ("ReduceMax", "ReduceSum", "ReduceMean", "ReduceMin", "ReduceL2")

#: element types snippets kernels compute in; boolean is the 1-byte u8 of comparisons and logical ops
#: (the CPU plugin converts boolean to u8 before tokenization; here the IR keeps it boolean)
SUPPORTED_ELEMENT_TYPES = frozenset({
    ElementType.f32, ElementType.bf16, ElementType.f16, ElementType.i8, ElementType.u8, ElementType.boolean,
})
#: shape-like inputs that may be integer index tensors (i32, and i64, which the CPU plugin narrows to i32)
INDEX_INPUTS: dict[str, frozenset[int]] = {
    "Transpose": frozenset({1}),
    "Broadcast": frozenset({1}),
    "Reshape": frozenset({1}),
    **{r: frozenset({1}) for r in ROW_REDUCTIONS},
}
INDEX_ELEMENT_TYPES = frozenset({ElementType.i32, ElementType.i64})


# --- is_supported_op -------------------------------------------------------------------------------------
def _constant_ints(node: Node, i: int) -> list[int] | None:
    src = node.inputs[i].source.node
    if src.type_name != "Constant":
        return None
    return [int(v) for v in np.asarray(src.value).reshape(-1)]  # type: ignore[attr-defined]


def is_decomposable_transpose_order(order: list[int]) -> bool:
    """Transposes that move the innermost dim are decomposed into loops (TransposeDecomposition)."""
    return not order or order[-1] != len(order) - 1


def is_brgemm_fusable_transpose_order(order: list[int]) -> bool:
    """Transposes that keep the innermost dim are folded into a MatMul's strides (FuseTransposeBrgemm)."""
    return bool(order) and order[-1] == len(order) - 1


def _is_matmul_output(node: Node) -> bool:
    """True if ``node``'s input 0 is a MatMul, directly or as the producer of a non-Completed Subgraph's output."""
    src = node.inputs[0].source
    if src.node.type_name == "MatMul":
        return True
    if isinstance(src.node, Subgraph) and not is_completed(src.node):
        return src.node.body.results[src.index].inputs[0].source.node.type_name == "MatMul"
    return False


def _is_supported_transpose(n: Node) -> bool:
    order = _constant_ints(n, 1)
    if order is None:
        return False
    brgemm_case = _is_matmul_output(n) or any(t.node.type_name == "MatMul" for t in n.outputs[0].targets)
    return is_decomposable_transpose_order(order) or (brgemm_case and is_brgemm_fusable_transpose_order(order))


def _is_supported_softmax(n: Node) -> bool:
    shape = n.inputs[0].shape
    if len(n.inputs) != 1 or not shape.rank_is_static or shape.rank == 0:
        return False
    try:
        return normalize_axis(n.axis, shape.rank) == shape.rank - 1  # type: ignore[attr-defined]
    except ShapeInferenceError:  # an out-of-range axis: the op itself is invalid
        return False


def _is_supported_matmul(n: Node) -> bool:
    out = n.outputs[0].shape
    if not out.rank_is_static or out.rank != 4:
        return False
    a, b = n.inputs[0].element_type, n.inputs[1].element_type
    return ((a, b) in ((ElementType.f32, ElementType.f32), (ElementType.bf16, ElementType.bf16))
            or (a in (ElementType.i8, ElementType.u8) and b is ElementType.i8))


def _is_supported_broadcast(n: Node) -> bool:
    # Only numpy (one-way) Broadcast; in practice it appears in MHA patterns.
    return n.mode == "numpy"  # type: ignore[attr-defined]


def is_last_axis_reduction(node: Node) -> bool:
    """A reduction over exactly the last axis of a static-rank input (``axes`` a Constant): the loops reduce
    rows of the innermost dim. Several axes would need a reshape of a computed value inside the body, which
    the lowering does not do (it reshapes inputs only)."""
    shape = node.inputs[0].shape
    raw = _constant_ints(node, 1)
    if not shape.rank_is_static or shape.rank == 0 or raw is None:
        return False
    return len(raw) == 1 and raw[0] in (-1, shape.rank - 1)


def _is_supported_reduce(n: Node) -> bool:
    # Only reductions over the innermost dim, keeping it (a dropped dim would be a reshape of a computed
    # value inside the body, which the lowering does not do).
    return n.keep_dims and is_last_axis_reduction(n)  # type: ignore[attr-defined]


def _is_supported_layer_norm(n: Node) -> bool:
    # Normalized over the innermost dim only (LayerNormDecomposition), like the reductions.
    shape = n.inputs[0].shape
    if not shape.rank_is_static or shape.rank == 0:
        return False
    try:
        return normalize_axis(n.axis, shape.rank) == shape.rank - 1  # type: ignore[attr-defined]
    except ShapeInferenceError:
        return False


def _always(n: Node) -> bool:
    return True


SUPPORT_CHECKS: dict[str, Callable[[Node], bool]] = {
    **{t: _always for t in UNARY_ELTWISE | BINARY_ELTWISE | TERNARY_ELTWISE},
    "FakeQuantize": is_supported_fq,
    "Transpose": _is_supported_transpose,
    "Softmax": _is_supported_softmax,
    "MatMul": _is_supported_matmul,
    "Broadcast": _is_supported_broadcast,
    **{r: _is_supported_reduce for r in ROW_REDUCTIONS},
    "LayerNormalization": _is_supported_layer_norm,
}
"""op type -> whether this node of that type can go into a Subgraph (the reference's is_supported_op)."""


def is_supported_op(node: Node) -> bool:
    check = SUPPORT_CHECKS.get(node.type_name)
    return check is not None and check(node)


def _supported_type(node: Node, et: ElementType, input_index: int | None) -> bool:
    if et in SUPPORTED_ELEMENT_TYPES:
        return True
    return (input_index is not None and et in INDEX_ELEMENT_TYPES
            and input_index in INDEX_INPUTS.get(node.type_name, ()))


def has_supported_in_out(node: Node) -> bool:
    """Static ranks and supported element types on every input and output; no consumer is a Loop."""
    for o in node.outputs:
        if any(t.node.type_name == "Loop" for t in o.targets):
            return False
        if not o.shape.rank_is_static or not _supported_type(node, o.element_type, None):
            return False
    return all(i.shape.rank_is_static and _supported_type(node, i.element_type, i.index) for i in node.inputs)


def check_broadcast(node: Node) -> bool:
    """PDPD-broadcast binary ops are accepted only with equal input ranks (the kernels broadcast numpy-style)."""
    if getattr(node, "auto_broadcast", None) != "pdpd" or len(node.inputs) != 2:
        return True
    a, b = node.inputs[0].shape, node.inputs[1].shape
    return a.rank_is_static and b.rank_is_static and a.rank == b.rank


def appropriate_for_subgraph(node: Node) -> bool:
    """The reference's ``TokenizeSnippets::AppropriateForSubgraph``: snippets can compute this node."""
    return is_supported_op(node) and has_supported_in_out(node) and check_broadcast(node)


def _has_only_constant_inputs(node: Node) -> bool:
    # Nothing to compute at run time: constant folding's job, not a kernel's.
    return all(i.source.node.type_name == "Constant" for i in node.inputs)


def is_tokenizable(node: Node) -> bool:
    """The matcher's predicate: appropriate, not all-constant, and not SkippedByPlugin (MatMul and Transpose
    are taken even when skipped, as in the reference, since plugins mark them for the MHA tokenizer)."""
    skipped = is_skipped_by_plugin(node) and node.type_name not in ("MatMul", "Transpose")
    return not skipped and appropriate_for_subgraph(node) and not _has_only_constant_inputs(node)


def _drop_dead_consumers(ordered: list[Node]) -> None:
    """Detach consumers that no Result depends on. They are not part of the model, but would count as outside
    consumers: extra Subgraph outputs, and children without a topological order in the cycle check."""
    live = {n.id for n in ordered}
    for n in ordered:
        for o in n.outputs:
            for t in o.targets:
                if t.node.id not in live:
                    t.node.disconnect()


# --- the pass ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenizeSnippets(Pass):
    """Replace the snippets-computable parts of a Model with Subgraph nodes, in place.

    ``run`` numbers the nodes (:class:`EnumerateNodes`) and visits them in topological order; the Model's
    Parameters and Results stay as they are (Results are never inside a Subgraph). Returns True if it
    created a Subgraph. Nothing happens in ``SnippetsMode.Disable``; the callback is not asked in
    ``IgnoreCallback``.
    """

    name: ClassVar[str] = "tokenize-snippets"
    config: TokenizationConfig = field(default_factory=TokenizationConfig)

    def run(self, model: Model) -> bool:
        if not self.config.enabled:
            return False
        EnumerateNodes().run(model)
        ordered = model.get_ordered_ops()
        _drop_dead_consumers(ordered)
        changed = False
        # A snapshot: new Subgraphs are never visited, merged-away nodes are never revisited.
        for node in ordered:
            if not is_tokenizable(node) or self.config.veto(node) is not None:
                continue
            tokenize_node(node, self.config)
            changed = True
        return changed


def tokenize(model: Model, config: TokenizationConfig | None = None) -> list[Subgraph]:
    """Run :class:`TokenizeSnippets` on ``model`` in place; returns the model's Subgraphs in topological order."""
    TokenizeSnippets(config or TokenizationConfig()).run(model)
    return [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
